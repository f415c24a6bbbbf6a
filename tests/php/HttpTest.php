<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\MeasuredClient;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Client\NetworkExceptionInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The PSR-18 decorators and the Guzzle middleware against a real local HTTP server
 * (nginx + php-fpm serving fixtures/www/provider.php) that answers 200, 429, 500 and
 * slowly, and against ports that answer not at all.
 */
final class HttpTest extends LimiterTestCase
{
    private EventLog $log;
    private Psr17Factory $factory;
    private ApiNamer $namer;

    protected function setUp(): void
    {
        $this->log = new EventLog(self::redis());
        $this->log->mark();
        $this->factory = new Psr17Factory();
        $this->namer = new ApiNamer([
            ['api' => 'payment', 'path' => '/provider.php', 'method' => 'POST'],
            ['api' => 'zoneA', 'path' => '/provider.php'],
        ]);
    }

    private static function base(): string
    {
        return (string) getenv('CHECKOUT_GUARD_TEST_HTTP');
    }

    private function measured(array $guzzle = []): MeasuredClient
    {
        return new MeasuredClient(new Guzzle($guzzle + ['timeout' => 2]), $this->namer, fn (RequestInterface $r) => ['shop.id' => 'shop-9']);
    }

    private function get(ClientInterface $c, string $query, string $method = 'GET'): ResponseInterface
    {
        return $c->sendRequest($this->factory->createRequest($method, self::base() . '/provider.php?' . $query));
    }

    public function testMeasuredClientRecordsStatusTimingAndTheRequest(): void
    {
        $c = $this->measured();
        $this->assertSame(200, $this->get($c, 'status=200&token=secret')->getStatusCode());
        $this->assertSame(429, $this->get($c, 'status=429', 'POST')->getStatusCode());
        $this->assertSame(500, $this->get($c, 'status=500')->getStatusCode());
        $this->assertSame(200, $this->get($c, 'delay_ms=150')->getStatusCode());

        $events = $this->log->jsonl();
        $this->assertSame(
            [['zoneA', 200, null], ['payment', 429, '429'], ['zoneA', 500, '500'], ['zoneA', 200, null]],
            array_map(fn ($e) => [$e['api'], $e['http.response.status_code'], $e['error.type'] ?? null], $events)
        );
        $e = $events[1];
        $this->assertSame('POST', $e['http.request.method']);
        $this->assertSame(self::base() . '/provider.php', $e['url.full'], 'no query string');
        $this->assertSame('127.0.0.1', $e['server.address']);
        $this->assertSame('/provider.php', $e['url.template']);
        $this->assertSame('shop-9', $e['shop.id']);
        $this->assertGreaterThanOrEqual(150.0, $events[3]['duration.ms']);
        $this->assertLessThan($events[3]['duration.ms'], $events[0]['duration.ms']);
    }

    public function testNoResponseAtAllIsStatusZeroWithTheExceptionClass(): void
    {
        // A port nobody listens on, and a listener that accepts but never answers.
        $closed = ValkeyProcess::freePort();
        $silent = stream_socket_server('tcp://127.0.0.1:0');
        $silentPort = (int) substr(strrchr(stream_socket_get_name($silent, false), ':'), 1);
        $c = $this->measured(['timeout' => 0.3]);
        foreach (["http://127.0.0.1:$closed/x", "http://127.0.0.1:$silentPort/x"] as $url) {
            try {
                $c->sendRequest($this->factory->createRequest('GET', $url));
                $this->fail("no exception for $url");
            } catch (NetworkExceptionInterface $e) {
                $this->assertInstanceOf(\GuzzleHttp\Exception\ConnectException::class, $e);
            }
        }
        fclose($silent);
        $events = $this->log->jsonl();
        $this->assertSame([0, 0], array_column($events, 'http.response.status_code'));
        $this->assertSame([\GuzzleHttp\Exception\ConnectException::class, \GuzzleHttp\Exception\ConnectException::class], array_column($events, 'error.type'));
        $this->assertGreaterThanOrEqual(290.0, $events[1]['duration.ms'], 'waited for the timeout');
        $this->assertSame(["127.0.0.1:$closed", "127.0.0.1:$silentPort"][0], '127.0.0.1:' . parse_url($events[0]['url.full'], PHP_URL_PORT));
    }

    public function testRateLimitedClientDoesNotSendWhenDenied(): void
    {
        $limiter = $this->limiter(['global' => self::bucket(2)]);
        $sent = 0;
        $inner = new class ($sent) implements ClientInterface {
            public function __construct(private int &$sent)
            {
            }

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                $this->sent++;
                return (new Psr17Factory())->createResponse(200);
            }
        };
        $c = new RateLimitedClient($inner, $limiter, fn (RequestInterface $r) => $r->getHeaderLine('X-Shop-Id') ?: null);
        $request = $this->factory->createRequest('POST', 'https://pay.example/v1/charges?card=4111')->withHeader('X-Shop-Id', 'shop-1');
        $this->assertSame(200, $c->sendRequest($request)->getStatusCode());
        $this->assertSame(200, $c->sendRequest($request)->getStatusCode());
        try {
            $c->sendRequest($request);
            $this->fail('not limited');
        } catch (ClientExceptionInterface $e) {
            $this->assertInstanceOf(RateLimitedException::class, $e);
            $this->assertSame('global', $e->getDecision()->reason());
            $this->assertSame($request, $e->getRequest());
            $this->assertSame('shop-1', $e->getShopId());
            $this->assertGreaterThanOrEqual(1, $e->retryAfterSeconds());
            $this->assertStringNotContainsString('4111', $e->getMessage());
        }
        $this->assertSame(2, $sent, 'the denied request was never sent');
        // Requests without a shop are not limited.
        $c->sendRequest($this->factory->createRequest('GET', 'https://items.example/1'));
        $this->assertSame(3, $sent);
    }

    public function testGuzzleMiddlewareMeasuresEveryTransfer(): void
    {
        $stack = HandlerStack::create();
        $stack->push(GuzzleMiddleware::measure($this->namer, fn () => ['shop.id' => 'g']));
        $client = new Guzzle(['handler' => $stack, 'timeout' => 2]);
        $this->assertSame(200, $client->request('GET', self::base() . '/provider.php?status=200')->getStatusCode());
        try {
            $client->request('POST', self::base() . '/provider.php?status=503');
            $this->fail('http_errors should throw');
        } catch (\GuzzleHttp\Exception\ServerException $e) {
            $this->assertSame(503, $e->getResponse()->getStatusCode());
        }
        $this->assertSame(429, $client->request('GET', self::base() . '/provider.php?status=429', ['http_errors' => false])->getStatusCode());
        $events = $this->log->jsonl();
        $this->assertSame(
            [['zoneA', 200, null], ['payment', 503, '503'], ['zoneA', 429, '429']],
            array_map(fn ($e) => [$e['api'], $e['http.response.status_code'], $e['error.type'] ?? null], $events)
        );
        $this->assertSame(['g', 'g', 'g'], array_column($events, 'shop.id'));
    }

    public function testApiNamerMatchesHostPathTemplateAndMethod(): void
    {
        $namer = new ApiNamer([
            ['api' => 'item', 'host' => 'items.example', 'path' => '/items/{id}'],
            ['api' => 'charge', 'host' => 'pay.example', 'path' => '/v1/charges', 'method' => 'POST'],
        ]);
        $f = $this->factory;
        $this->assertSame(['item', '/items/{id}'], $namer->name($f->createRequest('GET', 'https://Items.Example/items/42?x=1')));
        $this->assertSame(['items.example', null], $namer->name($f->createRequest('GET', 'https://items.example/items/42/reviews')));
        $this->assertSame(['charge', '/v1/charges'], $namer->name($f->createRequest('POST', 'https://pay.example/v1/charges')));
        $this->assertSame(['pay.example', null], $namer->name($f->createRequest('GET', 'https://pay.example/v1/charges')));
    }
}
