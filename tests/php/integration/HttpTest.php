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
use GuzzleHttp\Pool;
use GuzzleHttp\Promise\Utils;
use GuzzleHttp\Psr7\Request as GuzzleRequest;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Client\NetworkExceptionInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The PSR-18 decorators and the Guzzle middleware against a slow local server
 * (fixtures/slow_server.php) and ports that answer not at all, the events read from this
 * process's sinks (the test Valkey's stream among them). HttpFpmTest has the cases against
 * nginx + php-fpm, HttpOfflineTest those that need no network.
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

    private function measured(array $guzzle = []): MeasuredClient
    {
        return new MeasuredClient(new Guzzle($guzzle + ['timeout' => 2]), $this->namer, fn (RequestInterface $r) => ['shop.id' => 'shop-9']);
    }

    public function testNoResponseAtAllIsStatusZeroWithTheExceptionClass(): void
    {
        // A port nobody listens on, and a listener that accepts but never answers.
        $closed = ValkeyProcess::freePort();
        $silent = stream_socket_server('tcp://127.0.0.1:0');
        $silentPort = (int) substr(strrchr(stream_socket_get_name($silent, false), ':'), 1);
        $c = $this->measured(['timeout' => 0.3]);
        $thrown = [];
        foreach (["http://127.0.0.1:$closed/x", "http://127.0.0.1:$silentPort/x"] as $url) {
            try {
                $c->sendRequest($this->factory->createRequest('GET', $url));
                $this->fail("no exception for $url");
            } catch (NetworkExceptionInterface $e) {
                $thrown[] = $e::class;
            }
        }
        fclose($silent);
        // Refused: a ConnectException. No answer in time: a ConnectException from Guzzle 7,
        // a NetworkTimeoutException (a NetworkException, as ConnectException is) from
        // Guzzle 8 (Debian sid, the PHP matrix's 8.5). The event names the class thrown.
        $this->assertSame(\GuzzleHttp\Exception\ConnectException::class, $thrown[0]);
        $this->assertTrue(is_a($thrown[1], \GuzzleHttp\Exception\TransferException::class, true), $thrown[1]);
        $events = $this->log->jsonl();
        $this->assertSame([0, 0], array_column($events, 'http.response.status_code'));
        $this->assertSame($thrown, array_column($events, 'error.type'));
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
        $this->assertNull($c->lastDecision(), 'a request sent without asking has no decision');
    }

    public function testRateLimitedClientWaitsPerShopAndKeepsTheDecision(): void
    {
        // One token every 500 ms (a machine that stalls a worker for less than that cannot
        // refill the bucket behind the test's back). Ordinary shops may wait 1 s for theirs,
        // "hot" may not wait.
        $limiter = $this->limiter(['global' => self::bucket(1, 2.0)]);
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
        $asked = [];
        $c = new RateLimitedClient(
            $inner,
            $limiter,
            fn (RequestInterface $r) => $r->getHeaderLine('X-Shop-Id') ?: null,
            maxWaitSeconds: function (string $shop, RequestInterface $r) use (&$asked): float {
                $asked[] = $shop;
                return $shop === 'hot' ? 0.0 : 1.0;
            },
        );
        $pay = fn (string $shop) => $this->factory->createRequest('POST', 'https://pay.example/v1/charges')->withHeader('X-Shop-Id', $shop);
        $c->sendRequest($pay('shop-1'));
        $this->assertSame(0.0, $c->lastDecision()->waited(), 'a full bucket: no wait');
        // The bucket is empty: the hot shop is refused at once, the ordinary shop waits.
        $t0 = hrtime(true);
        try {
            $c->sendRequest($pay('hot'));
            $this->fail('the hot shop was not refused');
        } catch (RateLimitedException $e) {
            $this->assertSame('global', $e->getDecision()->reason());
            $this->assertSame($e->getDecision(), $c->lastDecision());
            $this->assertSame(0.0, $e->getDecision()->waited());
        }
        $this->assertLessThan(0.25, (hrtime(true) - $t0) / 1e9, 'the refusal did not sleep');
        $t0 = hrtime(true);
        $this->assertSame(200, $c->sendRequest($pay('shop-2'))->getStatusCode());
        $elapsed = (hrtime(true) - $t0) / 1e9;
        $d = $c->lastDecision();
        $this->assertTrue($d->isAllowed());
        $this->assertGreaterThan(0.0, $d->waited(), 'it slept for its token');
        $this->assertLessThanOrEqual(1.0 + 0.5, $d->waited());
        $this->assertGreaterThanOrEqual($d->waited(), $elapsed);
        $this->assertSame(['shop-1', 'hot', 'shop-2'], $asked);
        $this->assertSame(2, $sent);
        // A fixed wait as a number works too: the next token is ~500 ms away.
        $fixed = new RateLimitedClient($inner, $limiter, fn (RequestInterface $r) => 'shop-3', 1, 1.0);
        $fixed->sendRequest($pay('shop-3'));
        $this->assertTrue($fixed->lastDecision()->isAllowed());
        $this->assertGreaterThan(0.0, $fixed->lastDecision()->waited());
    }

    /**
     * A slow endpoint that answers any number of requests at once (fixtures/slow_server.php,
     * one process), ended when its stdin closes.
     *
     * @return array{0: resource, 1: resource, 2: string} process, its stdin, base URL
     */
    private static function concurrentServer(): array
    {
        $proc = proc_open(
            [PHP_BINARY, '-n', __DIR__ . '/../fixtures/slow_server.php'],
            [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']],
            $pipes,
        );
        $port = (int) fgets($pipes[1]);
        self::assertGreaterThan(0, $port, 'slow_server.php did not start');
        return [$proc, $pipes[0], "http://127.0.0.1:$port"];
    }

    /** Seconds that 10 requests of 200 ms take through Pool and through Utils::all(getAsync). */
    private static function tenAtOnce(Guzzle $client, string $url): array
    {
        $t = hrtime(true);
        $requests = (function () use ($url) {
            for ($i = 0; $i < 10; $i++) {
                yield new GuzzleRequest('GET', $url);
            }
        })();
        $ok = 0;
        (new Pool($client, $requests, ['concurrency' => 10, 'fulfilled' => function () use (&$ok) {
            $ok++;
        }]))->promise()->wait();
        $pool = (hrtime(true) - $t) / 1e9;
        $t = hrtime(true);
        $responses = Utils::all(array_map(fn () => $client->getAsync($url), range(1, 10)))->wait();
        $all = (hrtime(true) - $t) / 1e9;
        self::assertSame(10, $ok);
        self::assertSame(array_fill(0, 10, 200), array_map(fn ($r) => $r->getStatusCode(), $responses));
        return [$pool, $all];
    }

    public function testGuzzleMiddlewareKeepsConcurrentTransfersConcurrent(): void
    {
        [$proc, $stdin, $base] = self::concurrentServer();
        try {
            $url = "$base/provider.php?delay_ms=200";
            $plain = new Guzzle(['timeout' => 5]);
            $stack = HandlerStack::create();
            $stack->push(GuzzleMiddleware::measure($this->namer, fn () => ['shop.id' => 'g']));
            $measured = new Guzzle(['handler' => $stack, 'timeout' => 5]);
            self::tenAtOnce($plain, $url); // the server's workers warmed up
            $t = hrtime(true);
            $plain->get($url);
            $one = (hrtime(true) - $t) / 1e9;
            $this->log->mark();
            // Alternated, so a slow moment of the machine does not favour one side.
            [$plainPool, $plainAll] = self::tenAtOnce($plain, $url);
            [$measuredPool, $measuredAll] = self::tenAtOnce($measured, $url);
            [$plainPool2, $plainAll2] = self::tenAtOnce($plain, $url);
            $plainPool = min($plainPool, $plainPool2);
            $plainAll = min($plainAll, $plainAll2);
            $times = sprintf('one request %.3f s; Pool %.3f s plain, %.3f s measured; Utils::all %.3f s plain, %.3f s measured', $one, $plainPool, $measuredPool, $plainAll, $measuredAll);
            // The endpoint itself serves the 10 at once (else the comparison means nothing)...
            $this->assertLessThan(5 * $one, $plainPool, $times);
            // ...and so does the middleware: serialized, it took 10x as long.
            $this->assertLessThan(2 * $plainPool, $measuredPool, $times);
            $this->assertLessThan(2 * $plainAll, $measuredAll, $times);

            // Every transfer recorded once, timed over the whole transfer.
            $events = $this->log->jsonl();
            $this->assertCount(20, $events, $times);
            foreach ($events as $e) {
                $this->assertSame(['ExternalApiCall', 'zoneA', 200, 'g', 'GET'], [$e['eventType'], $e['api'], $e['http.response.status_code'], $e['shop.id'], $e['http.request.method']]);
                $this->assertGreaterThanOrEqual(195.0, $e['duration.ms']);
                $this->assertArrayNotHasKey('error.type', $e);
            }

            // Rejections are recorded too, and settle with the handler's very reason.
            $this->log->mark();
            $closed = ValkeyProcess::freePort();
            $results = Utils::settle([
                $measured->getAsync("$base/provider.php?status=503&delay_ms=200"),
                $measured->postAsync("http://127.0.0.1:$closed/provider.php"),
                $measured->getAsync("$base/provider.php?status=429", ['http_errors' => false]),
            ])->wait();
            $this->assertSame(['rejected', 'rejected', 'fulfilled'], array_column($results, 'state'));
            $this->assertInstanceOf(\GuzzleHttp\Exception\ServerException::class, $results[0]['reason']);
            $this->assertSame(503, $results[0]['reason']->getResponse()->getStatusCode());
            $this->assertInstanceOf(\GuzzleHttp\Exception\ConnectException::class, $results[1]['reason']);
            $this->assertSame(429, $results[2]['value']->getStatusCode());
            $events = $this->log->jsonl();
            usort($events, fn ($a, $b) => $a['http.response.status_code'] <=> $b['http.response.status_code']);
            $this->assertSame(
                [['payment', 0, \GuzzleHttp\Exception\ConnectException::class], ['zoneA', 429, '429'], ['zoneA', 503, '503']],
                array_map(fn ($e) => [$e['api'], $e['http.response.status_code'], $e['error.type'] ?? null], $events)
            );
            $this->assertGreaterThanOrEqual(195.0, $events[2]['duration.ms']);
            $this->assertSame("127.0.0.1:$closed", $events[0]['server.address'] . ':' . parse_url($events[0]['url.full'], PHP_URL_PORT));
        } finally {
            fclose($stdin);
            proc_close($proc);
        }
    }

    public function testRecordCallTakesTheCallersTimingAndFindsTheStatusAsMeasureDoes(): void
    {
        $request = $this->factory->createRequest('GET', 'https://items.example/x');
        $response = $this->factory->createResponse(503);
        $before = \CheckoutGuard\Telemetry::callCount('zoneA');
        \CheckoutGuard\Telemetry::recordCall('zoneA', 1_796_000_000_123, 12.5, $this->factory->createResponse(200), ['shop.id' => 's']);
        \CheckoutGuard\Telemetry::recordCall('zoneA', 1_796_000_000_124, 3.0, new \GuzzleHttp\Exception\ServerException('no', $request, $response));
        \CheckoutGuard\Telemetry::recordCall('zoneA', 1_796_000_000_125, 0.0, new \GuzzleHttp\Exception\ConnectException('down', $request));
        \CheckoutGuard\Telemetry::recordCall('zoneA', 1_796_000_000_126, 0.0, 'a rejection that is not a Throwable');
        $this->assertSame($before + 4, \CheckoutGuard\Telemetry::callCount('zoneA'));
        $this->assertSame(
            [
                [1_796_000_000_123, 200, 12.5, null, 's'],
                [1_796_000_000_124, 503, 3.0, '503', null],
                [1_796_000_000_125, 0, 0.0, \GuzzleHttp\Exception\ConnectException::class, null],
                [1_796_000_000_126, 0, 0.0, null, null],
            ],
            array_map(fn ($e) => [$e['timestamp'], $e['http.response.status_code'], (float) $e['duration.ms'], $e['error.type'] ?? null, $e['shop.id'] ?? null], $this->log->jsonl())
        );
        foreach ([-1.0, NAN, INF] as $bad) {
            try {
                \CheckoutGuard\Telemetry::recordCall('zoneA', 1, $bad, 200);
                $this->fail("duration $bad accepted");
            } catch (\CheckoutGuard\ConfigurationException $e) {
                $this->assertStringContainsString('durationMs', $e->getMessage());
            }
        }
    }
}
