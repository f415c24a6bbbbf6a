<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use CheckoutGuard\RateLimiter;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\Exception\ConnectException;
use GuzzleHttp\Exception\ServerException;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Promise\Promise;
use GuzzleHttp\Psr7\Response as GuzzleResponse;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Client\NetworkExceptionInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The clients release their in-flight lease by themselves: RateLimitedClient when the
 * inner client returns or throws, GuzzleMiddleware::limit() when the transfer's promise
 * settles (fulfilled or rejected) or its handler throws. Checked in Valkey: the lease is
 * held (ZCOUNT of `{cg:NAME}:f:global` is 1) while the provider is being called, gone
 * after; the Decision's hasLease() false. The provider is a local stand-in.
 */
final class InFlightClientTest extends InFlightTestCase
{
    private string $name;
    private RateLimiter $limiter;

    private function start(string $engine): void
    {
        $this->startValkey($engine);
        $this->name = self::uniqueName('lease-client');
        $this->limiter = $this->leaseLimiter(['name' => $this->name, 'global' => self::bucket(100), 'in_flight' => ['global' => 1, 'lease_seconds' => 30]]);
    }

    private static function request(): RequestInterface
    {
        return (new Psr17Factory())->createRequest('POST', 'https://pay.example/v1/charges')->withHeader('X-Shop-Id', 'shop-1');
    }

    private static function shopOf(): callable
    {
        return fn (RequestInterface $r) => $r->getHeaderLine('X-Shop-Id') ?: null;
    }

    /** A PSR-18 provider that notes the leases held while it is called, then answers or throws. */
    private function provider(callable $answer, array &$heldDuring): ClientInterface
    {
        return new class ($answer, $heldDuring, fn () => $this->held($this->name, 'global')) implements ClientInterface {
            /** @var callable */
            private $answer;
            /** @var callable */
            private $held;
            private array $heldDuring;

            public function __construct(callable $answer, array &$heldDuring, callable $held)
            {
                $this->answer = $answer;
                $this->heldDuring = &$heldDuring;
                $this->held = $held;
            }

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                $this->heldDuring[] = ($this->held)();
                return ($this->answer)();
            }
        };
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testThePsr18ClientReleasesAfterASuccessA5xxAndATransportError(string $engine): void
    {
        $this->start($engine);
        $heldDuring = [];
        $answers = [
            'success' => fn () => (new Psr17Factory())->createResponse(200),
            '5xx' => fn () => (new Psr17Factory())->createResponse(503),
            'transport' => fn () => throw new class ('connection reset') extends \RuntimeException implements NetworkExceptionInterface {
                public function getRequest(): RequestInterface
                {
                    return InFlightClientTest::requestForStandIn();
                }
            },
        ];
        foreach ($answers as $case => $answer) {
            $client = new RateLimitedClient($this->provider($answer, $heldDuring), $this->limiter, self::shopOf());
            try {
                $status = $client->sendRequest(self::request())->getStatusCode();
                $this->assertNotSame('transport', $case);
                $this->assertSame($case === 'success' ? 200 : 503, $status);
            } catch (NetworkExceptionInterface $e) {
                $this->assertSame('transport', $case, $e->getMessage());
            }
            $this->assertSame([1], array_slice($heldDuring, -1), "$case: the lease was held during the call");
            $this->assertSame(0, $this->held($this->name, 'global'), "$case: released after it");
            $this->assertFalse($client->lastDecision()->hasLease(), $case);
        }
        $this->assertSame($engine, $this->limiter->health(false)['engine']);
        $this->assertSame(3, $this->leaseStats($this->name)['released']);
        $this->assertSame(0, $this->leaseStats($this->name)['leaked']);
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testThePsr18ClientRefusesPastTheLimitWithoutCallingTheProvider(string $engine): void
    {
        $this->start($engine);
        $held = $this->limiter->acquire('shop-2');
        $this->assertTrue($held->hasLease());
        $heldDuring = [];
        $client = new RateLimitedClient($this->provider(fn () => (new Psr17Factory())->createResponse(200), $heldDuring), $this->limiter, self::shopOf());
        try {
            $client->sendRequest(self::request());
            $this->fail('sent past the in-flight limit');
        } catch (RateLimitedException $e) {
            $this->assertSame('in_flight_global', $e->getDecision()->reason());
            $this->assertGreaterThan(0.0, $e->getDecision()->retryAfter());
        }
        $this->assertSame([], $heldDuring, 'the provider was not called');
        $held->release();
        $this->assertSame(200, $client->sendRequest(self::request())->getStatusCode());
        $this->assertSame(0, $this->held($this->name, 'global'));
    }

    /**
     * Guzzle, asynchronous: the lease is held while the promise is pending and released
     * when it settles: fulfilled, rejected with a response (http_errors, 5xx), rejected
     * without one (a connection error), or when the handler throws.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testGuzzleReleasesWhenThePromiseSettles(string $engine): void
    {
        $this->start($engine);
        $pending = null;
        $throwNow = false;
        $handler = function (RequestInterface $request) use (&$pending, &$throwNow) {
            if ($throwNow) {
                throw new \RuntimeException('the handler failed before sending');
            }
            $pending = new Promise();
            return $pending;
        };
        $stack = HandlerStack::create($handler);
        $stack->push(GuzzleMiddleware::limit($this->limiter, self::shopOf()));
        $guzzle = new Guzzle(['handler' => $stack]);

        $settle = [
            'fulfilled' => fn (Promise $p) => $p->resolve(new GuzzleResponse(200)),
            '5xx' => fn (Promise $p) => $p->resolve(new GuzzleResponse(502)),
            'connect error' => fn (Promise $p) => $p->reject(new ConnectException('refused', self::request())),
        ];
        foreach ($settle as $case => $how) {
            $promise = $guzzle->sendAsync(self::request());
            $this->assertSame(1, $this->held($this->name, 'global'), "$case: held while pending");
            $second = $guzzle->sendAsync(self::request());
            try {
                $second->wait();
                $this->fail("$case: a second transfer past the limit was sent");
            } catch (RateLimitedException $e) {
                $this->assertSame('in_flight_global', $e->getDecision()->reason());
            }
            $how($pending);
            try {
                $this->assertSame(200, $promise->wait()->getStatusCode(), $case);
            } catch (ServerException $e) {
                $this->assertSame('5xx', $case);
                $this->assertSame(502, $e->getResponse()->getStatusCode());
            } catch (ConnectException $e) {
                $this->assertSame('connect error', $case);
            }
            $this->assertSame(0, $this->held($this->name, 'global'), "$case: released when settled");
        }

        $throwNow = true;
        try {
            $guzzle->sendAsync(self::request())->wait();
            $this->fail('the handler\'s exception was swallowed');
        } catch (\RuntimeException $e) {
            $this->assertSame('the handler failed before sending', $e->getMessage());
        }
        $this->assertSame(0, $this->held($this->name, 'global'), 'released when the handler threw');
        $stats = $this->leaseStats($this->name);
        $this->assertSame([4, 0], [$stats['released'], $stats['leaked']]);
    }

    /** A request for the stand-in network exception (PSR-18 wants one). */
    public static function requestForStandIn(): RequestInterface
    {
        return self::request();
    }
}
