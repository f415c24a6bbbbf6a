<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Decision;
use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use CheckoutGuard\Testing\FakeLimiter;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Promise\Utils;
use GuzzleHttp\Psr7\Request as GuzzleRequest;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The Guzzle middleware on a mock handler, the PSR-18 client on a stand-in, both limited
 * by a FakeLimiter (scripted, or its buckets on a fake clock), and the API namer: no
 * network, no Valkey (HttpTest, HttpFpmTest and AdaptiveClientTest send requests through
 * the real limiter).
 */
final class HttpOfflineTest extends LimiterTestCase
{
    private Psr17Factory $factory;

    protected function setUp(): void
    {
        $this->factory = new Psr17Factory();
    }

    public function testGuzzleMiddlewareHandsOnTheTransferWhenTheAttributesAreNotScalars(): void
    {
        $response = new \GuzzleHttp\Psr7\Response(200);
        $request = new GuzzleRequest('GET', 'https://items.example/x');
        $rejection = new \GuzzleHttp\Exception\ServerException('boom', $request, new \GuzzleHttp\Psr7\Response(503));
        $stack = HandlerStack::create(new \GuzzleHttp\Handler\MockHandler([$response, $rejection]));
        $stack->push(GuzzleMiddleware::measure(
            fn () => ['zoneA', null],
            fn () => ['shop.id' => new class () {
                public function __toString(): string
                {
                    return 's1';
                }
            }]
        ));
        $client = new Guzzle(['handler' => $stack, 'http_errors' => false]);

        // The transfer happened: the caller gets its response, not a ConfigurationException.
        $this->assertSame($response, $client->get('https://items.example/x'));
        $results = Utils::settle([$client->getAsync('https://items.example/x')])->wait();
        $this->assertSame('rejected', $results[0]['state']);
        $this->assertSame($rejection, $results[0]['reason'], 'the handler\'s very reason');
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

    /** A PSR-18 client that answers `$responses` in order and counts what it was sent. */
    private static function provider(ResponseInterface ...$responses): ClientInterface
    {
        return new class ($responses) implements ClientInterface {
            public int $sent = 0;

            public function __construct(private array $responses)
            {
            }

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                $this->sent++;
                return array_shift($this->responses);
            }
        };
    }

    public function testRateLimitedClientSendsWhatTheLimiterAllowsAndReportsTheAnswer(): void
    {
        $f = $this->factory;
        $provider = self::provider($f->createResponse(200), $f->createResponse(429)->withHeader('Retry-After', '7'), $f->createResponse(200));
        $limiter = FakeLimiter::allowing()->willReturn(
            new Decision(true),
            new Decision(false, 'hot_shop', 2.5, 0, true),
            new Decision(true),
        );
        $client = new RateLimitedClient($provider, $limiter, fn (RequestInterface $r) => $r->hasHeader('X-Shop') ? (int) $r->getHeaderLine('X-Shop') : null);
        $pay = $f->createRequest('POST', 'https://pay.example/v1/charges?card=4111')->withHeader('X-Shop', '42');

        $this->assertSame(200, $client->sendRequest($pay)->getStatusCode());
        try {
            $client->sendRequest($pay);
            $this->fail('the denied request was sent');
        } catch (RateLimitedException $e) {
            $this->assertSame(['hot_shop', 3, '42', $pay], [$e->getDecision()->reason(), $e->retryAfterSeconds(), $e->getShopId(), $e->getRequest()]);
            $this->assertSame($e->getDecision(), $client->lastDecision());
            $this->assertStringNotContainsString('4111', $e->getMessage());
        }
        $this->assertSame(429, $client->sendRequest($pay)->getStatusCode());
        $this->assertSame(2, $provider->sent, 'the denied request was never sent');

        // A request without a shop is not limited: sent without asking.
        $client->sendRequest($f->createRequest('GET', 'https://items.example/1'));
        $this->assertNull($client->lastDecision());
        $this->assertSame(3, $provider->sent);

        $this->assertSame(
            [['acquire', '42'], ['feedback', '42'], ['acquire', '42'], ['acquire', '42'], ['feedback', '42']],
            array_map(fn (array $c) => [$c['method'], $c['shop']], $limiter->calls()),
            'an int shop is its decimal string; a denied request has no answer to report'
        );
        $this->assertSame([
            ['shop' => '42', 'statusCode' => 200, 'retryAfterSeconds' => null],
            ['shop' => '42', 'statusCode' => 429, 'retryAfterSeconds' => 7.0],
        ], $limiter->feedbackCalls());
    }

    public function testRateLimitedClientWaitsForItsTokensOnTheFakeClock(): void
    {
        // One token every 500 ms; ordinary shops may wait 1 s for theirs, "hot" may not.
        $limiter = new FakeLimiter(['global' => self::bucket(1, 2.0)]);
        $provider = self::provider(...array_fill(0, 3, $this->factory->createResponse(200)));
        $client = new RateLimitedClient(
            $provider,
            $limiter,
            fn (RequestInterface $r) => $r->getHeaderLine('X-Shop'),
            maxWaitSeconds: fn (string $shop) => $shop === 'hot' ? 0.0 : 1.0,
        );
        $pay = fn (string $shop) => $this->factory->createRequest('POST', 'https://pay.example/v1/charges')->withHeader('X-Shop', $shop);
        $client->sendRequest($pay('shop-1'));
        $this->assertSame(0.0, $client->lastDecision()->waited(), 'a full bucket: no wait');
        try {
            $client->sendRequest($pay('hot'));
            $this->fail('the hot shop waited');
        } catch (RateLimitedException $e) {
            $this->assertSame([false, 'global', 0.5], [$e->getDecision()->isAllowed(), $e->getDecision()->reason(), $e->getDecision()->retryAfter()]);
        }
        $client->sendRequest($pay('shop-2'));
        $this->assertSame(0.5, $client->lastDecision()->waited(), 'it waited for the next token');
        $this->assertSame(0.5, $limiter->clock()->now());
        $this->assertSame(2, $provider->sent);
        $this->assertSame(['shop-1' => 1, 'hot' => 0, 'shop-2' => 1], ['shop-1' => $limiter->acquired('shop-1'), 'hot' => $limiter->acquired('hot'), 'shop-2' => $limiter->acquired('shop-2')]);
    }

    public function testGuzzleMiddlewareRefusesWhatTheLimiterDeniesAndReportsEachAnswer(): void
    {
        $mock = new \GuzzleHttp\Handler\MockHandler([
            new \GuzzleHttp\Psr7\Response(429, ['Retry-After' => '3']),
            new \GuzzleHttp\Psr7\Response(503),
        ]);
        $stack = HandlerStack::create($mock);
        $limiter = FakeLimiter::allowing()->willReturn(new Decision(true), new Decision(false, 'global', 4.0), new Decision(true));
        $stack->push(GuzzleMiddleware::limit($limiter, fn (RequestInterface $r) => $r->getHeaderLine('X-Shop') ?: null));
        $client = new Guzzle(['handler' => $stack]);
        $options = ['headers' => ['X-Shop' => 's1']];

        $this->assertSame(429, $client->get('https://pay.example/x', $options + ['http_errors' => false])->getStatusCode());
        $results = Utils::settle([
            $client->getAsync('https://pay.example/x', $options),
            $client->getAsync('https://pay.example/x', $options),
        ])->wait();
        $this->assertInstanceOf(RateLimitedException::class, $results[0]['reason']);
        $this->assertSame('global', $results[0]['reason']->getDecision()->reason());
        $this->assertInstanceOf(\GuzzleHttp\Exception\ServerException::class, $results[1]['reason']);
        $this->assertSame(0, $mock->count(), 'two transfers made, the denied one never');
        $this->assertSame([
            ['shop' => 's1', 'statusCode' => 429, 'retryAfterSeconds' => 3.0],
            ['shop' => 's1', 'statusCode' => 503, 'retryAfterSeconds' => null],
        ], $limiter->feedbackCalls(), 'the answer a rejection carries is reported too');
        $this->assertSame(2, $limiter->acquired('s1'));
    }
}
