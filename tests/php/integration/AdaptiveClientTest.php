<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

require_once __DIR__ . '/../support/LimiterModel.php';

use CheckoutGuard\Http\ProviderFeedback;
use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use CheckoutGuard\RateLimiter;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\Exception\ClientException;
use GuzzleHttp\Handler\MockHandler;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Psr7\Response as GuzzleResponse;
use Nyholm\Psr7\Factory\Psr17Factory;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;
use Psr\Http\Message\StreamInterface;

/**
 * The clients' automatic feedback (RateLimitedClient, GuzzleMiddleware::limit()) on a
 * Valkey of the test's own, against local PSR-18 stand-ins for the provider
 * (support/StandInProvider.php): a 429 lowers the share of every bucket, a Retry-After
 * pauses every shop (reason provider), a 200 costs no round trip, a limiter that throws
 * never breaks the call; several processes against a provider with a real limit.
 */
final class AdaptiveClientTest extends OwnValkeyTestCase
{
    private Psr17Factory $factory;

    protected function setUp(): void
    {
        parent::setUp();
        $this->factory = new Psr17Factory();
    }

    private function adaptiveLimiter(string $name, array $adaptive = ['recover_seconds' => 600], array $more = []): RateLimiter
    {
        return new RateLimiter($more + [
            'name' => $name,
            'url' => $this->valkey->url(),
            'global' => self::bucket(10),
            'adaptive' => $adaptive,
        ]);
    }

    private function request(string $shop): RequestInterface
    {
        return $this->factory->createRequest('POST', 'https://pay.example/v1/charges')->withHeader('X-Shop-Id', $shop);
    }

    private static function shopOf(): callable
    {
        return fn (RequestInterface $r) => $r->getHeaderLine('X-Shop-Id') ?: null;
    }

    /** The stored adaptive state [t0, k, wmax, pause_until] (µs, µs, permille, µs), or null. */
    private function adaptState(string $name): ?array
    {
        return LimiterModel::decodeAdapt($this->valkey->client()->get("{cg:$name}:adapt"));
    }

    private function valkeyMicros(): int
    {
        [$s, $us] = $this->valkey->client()->time();
        return (int) $s * 1_000_000 + (int) $us;
    }

    /** Requests through `$client` until the limiter refuses one: [sent, the refusal]. */
    private static function untilRefused(RateLimitedClient $client, RequestInterface $request, int $max = 50): array
    {
        for ($i = 0; $i < $max; $i++) {
            try {
                $client->sendRequest($request);
            } catch (RateLimitedException $e) {
                return [$i, $e];
            }
        }
        return [$max, null];
    }

    /**
     * The round trips this Valkey served so far: the script calls and the module's commands
     * (INFO commandstats also counts the commands a script runs inside, not round trips).
     */
    private function allCalls(): int
    {
        $stats = $this->valkey->client()->rawCommand('INFO', 'commandstats');
        preg_match_all('/cmdstat_(evalsha|eval|evalsha_ro|eval_ro|cg\.[a-z_]+):calls=(\d+)/', $stats, $m);
        return array_sum(array_map('intval', $m[2]));
    }

    public function testA429LowersTheShareOfEveryBucket(): void
    {
        $name = self::uniqueName('adapt');
        $limiter = $this->adaptiveLimiter($name);
        $provider = new StandInProvider(fn ($r, int $n) => [$n === 1 ? 429 : 200]);
        $client = new RateLimitedClient($provider, $limiter, self::shopOf());

        $this->assertNull($this->adaptState($name));
        $this->assertSame(429, $client->sendRequest($this->request('shop-1'))->getStatusCode(), 'the answer is the caller\'s');
        $state = $this->adaptState($name);
        $this->assertNotNull($state, 'the 429 was reported: the state is stored');
        $this->assertSame(1000, $state[2], 'decreased from the full share');
        $this->assertSame(0, $state[3], 'no Retry-After: no pause');
        // 0.7 of the limits (recovery over 600 s: it has not moved in these milliseconds).
        $this->assertSame(700, LimiterModel::permilleAt($state, $this->valkeyMicros(), 100, 600_000_000));
        // The global bucket at 0.7: capacity 7, of which the 429's call took one of 10.
        // Another shop gets 7 (not 9), then the global bucket says no.
        [$sent, $refusal] = self::untilRefused($client, $this->request('shop-2'));
        $this->assertSame(7, $sent);
        $this->assertSame('global', $refusal->getDecision()->reason());
        $this->assertSame(8, $provider->sent, 'the refused request never reached the provider');
        $this->assertSame($state, $this->adaptState($name), 'the 200s changed nothing');
        $this->assertSame(0, ProviderFeedback::failures());
    }

    public function testARetryAfterPausesEveryShopWithReasonProvider(): void
    {
        foreach (['seconds' => '2', 'an HTTP-date' => gmdate('D, d M Y H:i:s \G\M\T', time() + 3)] as $form => $header) {
            $name = self::uniqueName('pause');
            $limiter = $this->adaptiveLimiter($name);
            $provider = StandInProvider::always(429, ['Retry-After' => $header]);
            $client = new RateLimitedClient($provider, $limiter, self::shopOf());
            $this->assertSame(429, $client->sendRequest($this->request('shop-1'))->getStatusCode());
            $state = $this->adaptState($name);
            $this->assertNotNull($state, $form);
            $left = ($state[3] - $this->valkeyMicros()) / 1e6;
            $this->assertGreaterThan(0.5, $left, "$form: paused");
            $this->assertLessThanOrEqual(3.0, $left, "$form: for what the provider asked");
            foreach (['shop-1', 'shop-2', 'shop-3'] as $shop) {
                try {
                    $client->sendRequest($this->request($shop));
                    $this->fail("$form: $shop was let through during the provider's pause");
                } catch (RateLimitedException $e) {
                    $this->assertSame('provider', $e->getDecision()->reason(), "$form: $shop");
                    $this->assertGreaterThan(0.0, $e->getDecision()->retryAfter());
                    $this->assertLessThanOrEqual(3.0, $e->getDecision()->retryAfter());
                }
            }
            $this->assertSame(1, $provider->sent, "$form: nothing sent while paused");
        }
    }

    /**
     * A Retry-After of 309 digits or more (INF as a float) reported through
     * ProviderFeedback::report() pauses the limiter for its longest pause (60 s) instead of
     * being swallowed as a failure (share left at 1.0, no pause); the README's by-hand
     * pattern, feedback(..., retryAfterSeconds($header)), does not throw into the checkout.
     */
    public function testAHugeRetryAfterIsTheLongestPause(): void
    {
        foreach (['309 digits' => str_repeat('9', 309), '400 digits' => str_repeat('9', 400)] as $case => $header) {
            $name = self::uniqueName('huge');
            $limiter = $this->adaptiveLimiter($name);
            $limiter->acquire('shop-1');
            $before = ProviderFeedback::failures();
            $response = $this->factory->createResponse(429)->withHeader('Retry-After', $header);
            $this->assertTrue(ProviderFeedback::report($limiter, 'shop-1', $response), "$case: "
                . (ProviderFeedback::lastFailure()?->getMessage() ?? ''));
            $this->assertSame($before, ProviderFeedback::failures(), $case);
            $state = $this->adaptState($name);
            $this->assertNotNull($state, "$case: the 429 was reported");
            $this->assertSame(700, LimiterModel::permilleAt($state, $this->valkeyMicros(), 100, 600_000_000), "$case: share lowered");
            $left = ($state[3] - $this->valkeyMicros()) / 1e6;
            $this->assertGreaterThan(50.0, $left, "$case: paused for the longest pause");
            $this->assertLessThanOrEqual(60.0, $left, "$case: at most 60 s");
            $d = $limiter->acquire('shop-2');
            $this->assertSame('provider', $d->reason(), $case);
            // By hand, as the README shows it.
            $byHand = $this->adaptiveLimiter(self::uniqueName('huge-hand'));
            $byHand->feedback('shop-1', 429, ProviderFeedback::retryAfterSeconds($header));
            $this->assertSame('provider', $byHand->acquire('shop-1')->reason(), "$case, by hand");
        }
    }

    public function testA200CostsNoRoundTripAndA429One(): void
    {
        $name = self::uniqueName('trips');
        $limiter = $this->adaptiveLimiter($name, ['recover_seconds' => 600], ['global' => self::bucket(100)]);
        $limiter->acquire('warm-up');   // scripts loaded, settings published
        $ok = new RateLimitedClient(StandInProvider::always(200), $limiter, self::shopOf());
        $throttled = new RateLimitedClient(StandInProvider::always(429), $limiter, self::shopOf());
        $ok->sendRequest($this->request('warm-up'));
        $throttled->sendRequest($this->request('warm-up'));   // the feedback script loaded

        $measure = function (callable $call): int {
            $before = $this->allCalls();
            $call();
            return $this->allCalls() - $before;
        };
        $acquire = $measure(fn () => $limiter->acquire('shop-1'));
        $this->assertSame(1, $acquire, 'a decision is one round trip');
        $this->assertSame($acquire, $measure(fn () => $ok->sendRequest($this->request('shop-1'))), 'a 200: the decision only');
        $this->assertSame($acquire + 1, $measure(fn () => $throttled->sendRequest($this->request('shop-1'))), 'a 429: one more');
    }

    public function testGuzzleMiddlewareReportsTheAnswerAndRefusesWhilePaused(): void
    {
        $name = self::uniqueName('guzzle');
        $limiter = $this->adaptiveLimiter($name);
        $mock = new MockHandler([new GuzzleResponse(429, ['Retry-After' => '5']), new GuzzleResponse(200)]);
        $stack = HandlerStack::create($mock);
        $stack->push(GuzzleMiddleware::limit($limiter, self::shopOf()));
        $guzzle = new Guzzle(['handler' => $stack]);
        try {
            $guzzle->post('https://pay.example/v1/charges', ['headers' => ['X-Shop-Id' => 'shop-1']]);
            $this->fail('http_errors: a 429 is a ClientException');
        } catch (ClientException $e) {
            $this->assertSame(429, $e->getResponse()->getStatusCode());
        }
        $state = $this->adaptState($name);
        $this->assertNotNull($state, 'the rejected 429 was reported');
        $this->assertGreaterThan($this->valkeyMicros() + 3_000_000, $state[3], 'paused for the Retry-After');
        try {
            $guzzle->post('https://pay.example/v1/charges', ['headers' => ['X-Shop-Id' => 'shop-2']]);
            $this->fail('not refused during the pause');
        } catch (RateLimitedException $e) {
            $this->assertSame('provider', $e->getDecision()->reason());
        }
        $this->assertSame(1, $mock->count(), 'the refused request was not sent');
        // A request without a shop is not limited.
        $this->assertSame(200, $guzzle->get('https://items.example/1')->getStatusCode());
    }

    public function testALimiterThatThrowsOnFeedbackNeverBreaksTheCall(): void
    {
        $limiter = $this->adaptiveLimiter(self::uniqueName('throws'));
        // A status no HTTP response has: feedback() refuses it (a bad argument).
        $odd = new OddStatusResponse((new Psr17Factory())->createResponse(200), 99);
        $inner = new class ($odd) implements \Psr\Http\Client\ClientInterface {
            public function __construct(private ResponseInterface $r)
            {
            }

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                return $this->r;
            }
        };
        $before = ProviderFeedback::failures();
        try {
            $limiter->feedback('shop-1', 99);
            $this->fail('feedback() took status 99');
        } catch (\Throwable $e) {
            $this->assertStringContainsString('99', $e->getMessage());
        }
        $client = new RateLimitedClient($inner, $limiter, self::shopOf());
        $this->assertSame($odd, $client->sendRequest($this->request('shop-1')), 'the response, not the exception');
        $this->assertSame($before + 1, ProviderFeedback::failures());
        $this->assertStringContainsString('99', ProviderFeedback::lastFailure()->getMessage());
    }

    /**
     * Four processes pay as fast as they can through RateLimitedClient against one provider
     * whose real limit (20/s, burst 5) is 40% of the configured global (50/s): with the
     * budget adapting, the calls sent in the run's second half stay near the provider's
     * limit (without it they would be the configured 50/s and mostly 429s), and however
     * many 429s arrive at once, the share decreased at most once per second.
     */
    public function testSeveralProcessesConvergeBelowTheProvidersLimit(): void
    {
        // The second half's bounds are wall-clock rates on a shared machine: they must hold
        // in one of two runs (a run whose processes were starved of CPU can miss them once;
        // a real regression misses both). Everything else is asserted in every run.
        $why = $this->convergeOnce();
        if ($why !== null) {
            fwrite(STDERR, "\nthe convergence run missed its bounds ($why): run once more\n");
            $why = $this->convergeOnce();
        }
        $this->assertNull($why);
    }

    /** One convergence run; null when its second half kept its bounds, else why not. */
    private function convergeOnce(): ?string
    {
        $name = self::uniqueName('converge');
        $options = [
            'name' => $name,
            'url' => $this->valkey->url(),
            'timeout_ms' => 1000,
            'global' => ['capacity' => 10, 'refill_per_second' => 50],
            'adaptive' => ['recover_seconds' => 10, 'decrease' => 0.7, 'min_share' => 0.1],
        ];
        $seconds = 6.0;
        $rate = 20.0;
        $file = tempnam(sys_get_temp_dir(), 'cg-provider-');
        $procs = [];
        $pipes = [];
        $start = $this->valkeyMicros();
        for ($i = 0; $i < 4; $i++) {
            $cmd = [...self::phpWithExtension(), __DIR__ . '/../fixtures/adaptive_client.php', json_encode($options),
                (string) $seconds, $file, (string) $rate, '5', "shop-$i"];
            $procs[$i] = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes[$i]);
            stream_set_blocking($pipes[$i][1], false);
        }
        // Meanwhile: every decrease the stored state shows (its t0), and the provider's counts
        // at the run's half.
        $t0s = [];
        $exit = [];
        $half = null;
        $halfAt = microtime(true) + $seconds / 2;
        $running = true;
        while ($running) {
            $s = $this->adaptState($name);
            if ($s !== null) {
                $t0s[$s[0]] = true;
            }
            if ($half === null && microtime(true) >= $halfAt) {
                $half = RateLimitedProvider::counts($file);
                $half['at'] = $this->valkeyMicros();
            }
            $running = false;
            foreach ($procs as $i => $p) {
                if (!isset($exit[$i])) {
                    $st = proc_get_status($p);
                    if ($st['running']) {
                        $running = true;
                    } else {
                        $exit[$i] = $st['exitcode'];   // proc_close() no longer has it
                    }
                }
            }
            usleep(20_000);
        }
        $results = [];
        foreach ($procs as $i => $p) {
            $out = stream_get_contents($pipes[$i][1]);
            $err = stream_get_contents($pipes[$i][2]);
            proc_close($p);
            $this->assertSame(0, $exit[$i], "client $i: $err");
            $results[$i] = json_decode(trim($out), true, 512, JSON_THROW_ON_ERROR);
        }
        $end = $this->valkeyMicros();
        $total = RateLimitedProvider::counts($file);
        @unlink($file);
        $this->assertNotNull($half);

        $throttled = array_sum(array_column($results, 'throttled'));
        $this->assertSame($total['throttled'], $throttled, 'every 429 reached a client');
        $this->assertSame(0, array_sum(array_column($results, 'feedback_failures')));
        $this->assertGreaterThan(0, $throttled, 'the provider throttled: the configured limit is above its own');

        // Decreases: one per second at most, however many processes got a 429 at once.
        $t0s = array_keys($t0s);
        sort($t0s);
        $this->assertNotEmpty($t0s, 'the share was decreased');
        for ($k = 1; $k < count($t0s); $k++) {
            $this->assertGreaterThanOrEqual(LimiterModel::COOLDOWN_US, $t0s[$k] - $t0s[$k - 1], 'two decreases within the cooldown');
        }
        $elapsed = ($end - $start) / 1e6;
        $this->assertLessThanOrEqual((int) ceil($elapsed) + 1, count($t0s));
        $this->assertLessThan($throttled, count($t0s), 'many 429s, fewer decreases');

        // The second half: what was sent stays near the provider's limit (its own bucket
        // lets through at most 20/s + the burst); the configured limit alone would send up
        // to 50/s. Generous bounds: between 40% and 150% of the provider's limit.
        $secondHalf = ($end - $half['at']) / 1e6;
        $sent = ($total['ok'] + $total['throttled']) - ($half['ok'] + $half['throttled']);
        // And most of it was answered 200.
        $throttledLate = $total['throttled'] - $half['throttled'];
        fwrite(STDERR, sprintf(
            "\nadaptive, 4 processes, provider 20/s, configured 50/s, %.1f s: sent %d (429: %d), %d decreases; second half %.1f s: sent %d (%.1f/s, 429: %d)\n",
            $elapsed, $total['ok'] + $total['throttled'], $total['throttled'], count($t0s), $secondHalf, $sent, $sent / $secondHalf, $throttledLate
        ));
        $errors = array_filter(array_column($results, 'last_decision_error'));
        if ($sent > 1.5 * $rate * $secondHalf + 10) {
            return "sent $sent in {$secondHalf}s" . ($errors === [] ? '' : '; decisions not made by Valkey: ' . implode(' | ', $errors));
        }
        if ($sent < 0.4 * $rate * $secondHalf) {
            return "sent $sent in {$secondHalf}s: starved";
        }
        if ($throttledLate >= 0.5 * $sent) {
            return "$throttledLate of $sent answered 429 in the second half";
        }
        return null;
    }
}

/**
 * A response whose status no HTTP response has (PSR-7 factories refuse to make one).
 * Parameters untyped, returns typed: an implementation of psr/http-message 1 and 2 alike.
 */
final class OddStatusResponse implements ResponseInterface
{
    public function __construct(private ResponseInterface $r, private int $status)
    {
    }

    public function getStatusCode(): int
    {
        return $this->status;
    }

    public function withStatus($code, $reasonPhrase = ''): static
    {
        return new static($this->r, $code);
    }

    public function getReasonPhrase(): string
    {
        return '';
    }

    public function getProtocolVersion(): string
    {
        return $this->r->getProtocolVersion();
    }

    public function withProtocolVersion($version): static
    {
        return new static($this->r->withProtocolVersion($version), $this->status);
    }

    public function getHeaders(): array
    {
        return $this->r->getHeaders();
    }

    public function hasHeader($name): bool
    {
        return $this->r->hasHeader($name);
    }

    public function getHeader($name): array
    {
        return $this->r->getHeader($name);
    }

    public function getHeaderLine($name): string
    {
        return $this->r->getHeaderLine($name);
    }

    public function withHeader($name, $value): static
    {
        return new static($this->r->withHeader($name, $value), $this->status);
    }

    public function withAddedHeader($name, $value): static
    {
        return new static($this->r->withAddedHeader($name, $value), $this->status);
    }

    public function withoutHeader($name): static
    {
        return new static($this->r->withoutHeader($name), $this->status);
    }

    public function getBody(): StreamInterface
    {
        return $this->r->getBody();
    }

    public function withBody(StreamInterface $body): static
    {
        return new static($this->r->withBody($body), $this->status);
    }
}
