<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\MeasuredClient;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The PSR-18 decorator and the Guzzle middleware against nginx + php-fpm serving
 * fixtures/www/provider.php (the stack scripts/test.sh started), which answers 200, 429,
 * 500 and slowly. HttpTest and HttpOfflineTest have the cases that need no php-fpm.
 */
final class HttpFpmTest extends LimiterTestCase
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
}
