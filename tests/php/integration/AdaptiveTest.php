<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/**
 * The adaptive budget (option `adaptive`, RateLimiter::feedback()) against a Valkey of the
 * test's own with the native module loaded, each scenario with both engines (the script
 * and CG.DECIDE). No wall-clock asserts: counts, and envelopes of the measured elapsed time.
 */
final class AdaptiveTest extends OwnValkeyTestCase
{
    /** The name of the last limiter made by adaptive(). */
    private string $name = '';

    protected function setUp(): void
    {
        $this->valkey = new ValkeyProcess();
        $this->valkey->start(['--loadmodule', self::valkeyModule()]);
    }

    /** recover_seconds 3600: the share climbs back by about a permille in the seconds a test runs. */
    private function adaptive(string $engine, array $extra = [], array $adaptive = []): RateLimiter
    {
        return new RateLimiter($extra + [
            'name' => $this->name = self::uniqueName("adapt-$engine"),
            'url' => $this->valkey->url(),
            'engine' => $engine,
            'global' => self::bucket(100),
            'adaptive' => $adaptive + ['recover_seconds' => 3600],
        ]);
    }

    public function testOptionErrorsNameTheOption(): void
    {
        foreach ([
            'adaptive.decrease' => ['decrease' => 1.5],
            'adaptive.min_share' => ['min_share' => 0],
            'adaptive.recover_seconds' => ['recover_seconds' => -1],
            'adaptive.statuses' => ['statuses' => [200]],
        ] as $option => $bad) {
            try {
                new RateLimiter(['name' => 'x', 'url' => $this->valkey->url(), 'global' => self::bucket(1), 'adaptive' => $bad]);
                $this->fail("$option accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($option, $e->getMessage());
            }
        }
        $l = $this->adaptive('lua');
        foreach ([['statusCode', 's', 99, null], ['statusCode', 's', 600, null],
            ['retryAfterSeconds', 's', 429, -1.0], ['retryAfterSeconds', 's', 429, NAN], ['retryAfterSeconds', 's', 429, -INF],
            ['shopId', '', 429, null]] as [$name, $shop, $status, $ra]) {
            try {
                $l->feedback($shop, $status, $ra);
                $this->fail("$name accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($name, $e->getMessage());
            }
        }
    }

    public function testASuccessCostsNoRoundTripAndAThrottlingAnswerOneScriptCall(): void
    {
        $l = $this->adaptive('lua');
        $l->acquire('s');
        // The first throttling answer loads the script (NOSCRIPT, SCRIPT LOAD, EVALSHA).
        $l->feedback('s', 429);
        $off = new RateLimiter(['name' => self::uniqueName('off'), 'url' => $this->valkey->url(), 'global' => self::bucket(10)]);
        $off->acquire('s');
        $before = $this->commandCalls('evalsha') + $this->commandCalls('eval');
        for ($i = 0; $i < 50; $i++) {
            $l->feedback('s', 200);
            $l->feedback('s', 503, 1.0); // not in statuses (default [429])
            $off->feedback('s', 429, 1.0); // no adaptive option
        }
        $this->assertSame($before, $this->commandCalls('evalsha') + $this->commandCalls('eval'), 'no round trip');
        // Within the cooldown: no decrease, still one call (it writes the last answer).
        $l->feedback('s', 429);
        $this->assertSame($before + 1, $this->commandCalls('evalsha') + $this->commandCalls('eval'), 'one call');
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testManyProcessesReportingA429DecreaseOnceAndTheAdmittedCountFollows(string $engine): void
    {
        $l = $this->adaptive($engine);
        $children = [];
        // Events buffered here would be written again by every child.
        \CheckoutGuard\Telemetry::flush();
        for ($c = 0; $c < 4; $c++) {
            $pid = pcntl_fork();
            $this->assertNotSame(-1, $pid);
            if ($pid === 0) {
                for ($i = 0; $i < 10; $i++) {
                    $l->feedback("shop-$c", 429);
                }
                \CheckoutGuard\Telemetry::flush();
                // No PHPUnit shutdown, no destructors (the test's Valkey) in a child.
                posix_kill(getmypid(), SIGKILL);
            }
            $children[] = $pid;
        }
        foreach ($children as $pid) {
            pcntl_waitpid($pid, $status);
        }
        $h = $l->health();
        $this->assertSame('valkey', $h['adaptive']['source'], (string) $h['adaptive']['read_error']);
        // 40 reports within the cooldown: one decrease to 0.7, not 0.7^n (0.49 after two).
        $this->assertGreaterThanOrEqual(0.7, $h['adaptive']['share']);
        $this->assertLessThan(0.71, $h['adaptive']['share']);
        $this->assertSame(429, $h['adaptive']['last_throttle']['status']);
        // The global bucket (100, frozen) holds 70 at 0.7: every shop shares the rest.
        $this->assertSame(['allowed' => 70, 'global' => 130], self::drain($l, 'any', 200), $engine);
        // The CLI shows the same share, from the settings the workers published.
        [$code, $out, $err] = Cli::limiter($this->valkey->url(), $this->name, 'status', '--json');
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertGreaterThanOrEqual(0.7, $st['adaptive']['share']);
        $this->assertLessThan(0.71, $st['adaptive']['share']);
        $this->assertSame(429, $st['adaptive']['last_throttle']['status']);
        [, $text] = Cli::limiter($this->valkey->url(), $this->name, 'status');
        $this->assertStringContainsString('adaptive: share 0.70', $text);
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testRetryAfterPausesEveryShopWithReasonProviderAndShadowLetsThrough(string $engine): void
    {
        $l = $this->adaptive($engine);
        $start = microtime(true);
        $l->feedback('s', 429, 5.0);
        foreach (['a', 'b', 'c'] as $shop) {
            $d = $l->acquire($shop);
            $elapsed = microtime(true) - $start;
            $this->assertFalse($d->isAllowed());
            $this->assertSame('provider', $d->reason());
            $this->assertLessThanOrEqual(5.0, $d->retryAfter());
            $this->assertGreaterThanOrEqual(5.0 - $elapsed - 0.002, $d->retryAfter());
        }
        $h = $l->health();
        $this->assertNotNull($h['adaptive']['paused_until']);
        $this->assertEqualsWithDelta(5.0, $h['adaptive']['last_throttle']['retry_after'], 1e-6);
        // A pause far longer than 60 s is cut to 60 s.
        $l->feedback('s', 429, 86400.0);
        $this->assertLessThanOrEqual(60.0, $l->acquire('a')->retryAfter());
        $this->assertGreaterThan(50.0, $l->acquire('a')->retryAfter());
    }

    /**
     * INF (what PHP makes of a Retry-After of 309 digits or more) and any huge value ask
     * for a long pause: the longest one (60 s), not a ConfigurationException.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testAnInfiniteOrHugeRetryAfterIsTheLongestPause(string $engine): void
    {
        foreach (['INF' => INF, '1e308' => 1e308, '400 digits as a float' => (float) str_repeat('9', 400)] as $case => $ra) {
            $l = $this->adaptive($engine);
            $l->feedback('s', 429, $ra);
            $d = $l->acquire('a');
            $this->assertSame('provider', $d->reason(), $case);
            $this->assertLessThanOrEqual(60.0, $d->retryAfter(), $case);
            $this->assertGreaterThan(50.0, $d->retryAfter(), $case);
            $last = $l->health()['adaptive']['last_throttle'];
            $this->assertTrue(is_finite($last['retry_after']), "$case: health() shows a finite Retry-After");
        }
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testShadowModeReportsThePauseAndLetsThrough(string $engine): void
    {
        $l = $this->adaptive($engine, ['mode' => 'shadow']);
        $l->feedback('s', 429, 5.0);
        $d = $l->acquire('a');
        $this->assertTrue($d->isAllowed());
        $this->assertFalse($d->wouldAllow());
        $this->assertSame('provider', $d->reason());
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testRecoveryIsARateLimitAdaptEvent(string $engine): void
    {
        $log = new EventLog(self::redis());
        $log->mark();
        $l = $this->adaptive($engine, [], ['recover_seconds' => 0.2]);
        $l->acquire('s');
        $l->feedback('s', 429, 0.1);
        $d = $l->acquire('s');
        $this->assertSame('provider', $d->reason());
        // Recovered 0.2 s after the decrease at the latest: poll, bounded.
        $found = null;
        for ($i = 0; $i < 100 && $found === null; $i++) {
            usleep(20000);
            $l->acquire('s');
            foreach ($log->jsonl() as $e) {
                if ($e['eventType'] === 'RateLimitAdapt' && $e['why'] === 'recovered') {
                    $found = $e;
                }
            }
        }
        $this->assertNotNull($found, 'a recovered event');
        $this->assertSame(1.0, (float) $found['to']);
        $this->assertLessThan(1.0, (float) $found['from']);
        $whys = array_column(array_filter($log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitAdapt'), 'why');
        $this->assertSame(['throttled', 'retry_after', 'recovered'], array_values($whys));
    }

    public function testAValkeyThatDoesNotAnswerNeverThrowsIntoTheCheckout(): void
    {
        $l = $this->adaptive('lua', ['timeout_ms' => 100]);
        $l->acquire('s');
        $this->valkey->pause();
        try {
            $l->feedback('s', 429, 1.0);   // timed out: counted, not thrown
            $l->feedback('s', 429);        // the back-off: at once, counted
            $l->feedback('s', 200);        // a success: nothing to send
            $h = $l->health(false);
        } finally {
            $this->valkey->resume();
        }
        $this->assertSame(2, $h['adaptive']['feedback_errors']);
        $this->assertNotNull($h['adaptive']['last_feedback_error']);
        $this->assertSame('process', $h['adaptive']['source']);
        $this->assertSame(1.0, $h['adaptive']['share'], 'nothing changed');
    }

    /**
     * Local denials learnt at the full share are not used once a reply says the budget is
     * adapted (their retry times are the full rate's): every call asks Valkey then, and the
     * denials are Valkey's. The throttling answer comes from another PHP process (a table
     * of its own), as from another host.
     */
    public function testWhileAdaptedEveryDecisionIsValkeysNotALocalDenial(): void
    {
        $l = $this->adaptive('lua', ['global' => self::bucket(10, 2)]);
        $by = self::drain($l, 's', 40);
        $this->assertGreaterThanOrEqual(10, $by['allowed'] ?? 0, json_encode($by));
        $this->assertLessThanOrEqual(12, $by['allowed'] ?? 0, 'the full share, a refill or two: ' . json_encode($by));
        $asked = $this->commandCalls('evalsha');
        $this->assertLessThan(40, $asked, 'local denials answered some calls at the full share');
        $url = $this->valkey->url();
        $cmd = [...self::phpWithExtension(), '-r', "(new CheckoutGuard\\RateLimiter(['name' => '{$this->name}', 'url' => '$url', 'engine' => 'lua', 'global' => ['capacity' => 10, 'refill_per_second' => 2], 'adaptive' => ['recover_seconds' => 3600]]))->feedback('x', 429);"];
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $err = stream_get_contents($pipes[2]);
        $this->assertSame(0, proc_close($p), (string) $err);
        usleep(300000); // the entries learnt before end (250 ms at most after their reply)
        $before = $this->commandCalls('evalsha');
        $n = 30;
        for ($i = 0; $i < $n; $i++) {
            $d = $l->acquire('s');
            $this->assertContains($d->reason(), ['allowed', 'global']);
        }
        $this->assertSame($before + $n, $this->commandCalls('evalsha'), 'every decision asked Valkey');
        $this->assertLessThan(0.71, $l->health(false)['adaptive']['share']);
    }

    public static function engines(): array
    {
        return ['lua' => ['lua'], 'module' => ['module']];
    }
}
