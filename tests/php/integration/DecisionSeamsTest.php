<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/**
 * Decisions where features meet (live limits, data loss, two Valkeys, slow
 * buckets, hot marks running out, local denials), one regression test per case, all with
 * checkout_guard.local_denials on (the default) unless a test says otherwise and why.
 * Each test runs its own Valkey: some FLUSHALL it, some use its databases 0 and 1.
 */
final class DecisionSeamsTest extends OwnValkeyTestCase
{
    /** What `status` or the stderr of `set` says about stored limits that are not valid. */
    private const PROBLEM = '/problem|invalid|garbage|unreadable|not CAPACITY\/RATE|may not exceed/i';

    protected function tearDown(): void
    {
        ini_restore('checkout_guard.local_denials');
        parent::tearDown();
    }

    private function own(array $options): RateLimiter
    {
        return $this->limiter($options + ['url' => $this->valkey->url()]);
    }

    /** `checkout-guard limiter --url <this Valkey> --name $name ...` */
    private function cli(string $name, string ...$args): array
    {
        return Cli::limiter($this->valkey->url(), $name, ...$args);
    }

    private static function sleepUntil(float $at): void
    {
        $left = $at - microtime(true);
        if ($left > 0) {
            usleep((int) ceil($left * 1e6));
        }
    }

    /**
     * Waits `$seconds` as exactly as this host can (sleep, then spin on the monotonic clock):
     * a retryAfter() a round trip too short shows here, where usleep()'s own lateness could
     * hide it.
     */
    private static function waitExactly(float $seconds): void
    {
        $until = hrtime(true) + (int) ceil($seconds * 1e9);
        $left = $until - hrtime(true);
        if ($left > 2_000_000) {
            usleep(intdiv($left - 1_000_000, 1000));
        }
        while (hrtime(true) < $until) {
            // spin
        }
    }

    /** Another worker: a new PHP process that builds the limiter and decides once. */
    private function otherWorker(array $options, string $shop): string
    {
        $options += ['url' => $this->valkey->url()];
        $code = sprintf(
            '$l = new CheckoutGuard\RateLimiter(%s); echo $l->acquire(%s)->reason();',
            var_export($options, true),
            var_export($shop, true)
        );
        $p = proc_open([...self::phpWithExtension(), '-r', $code], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($p), "other worker failed: $err");
        return $out;
    }

    /** `status` lines without the recent changes (whose old/new may quote a past problem). */
    private static function withoutChanges(string $status): string
    {
        return implode("\n", array_filter(explode("\n", $status), fn ($l) => !str_starts_with(ltrim($l), 'change ')));
    }

    // Case 1 ---------------------------------------------------------------------------

    public function testASlowBucketAdmitsItsWholeCapacityWhateverTheHostsUptime(): void
    {
        // One token every 10^4 s, and every 10^7 s (115 days): refill intervals longer than
        // this host has been up must not read as "empty" in the worker.
        foreach ([0.0001, 1e-7] as $rate) {
            $l = $this->own(['global' => self::bucket(10, $rate)]);
            $this->assertSame(['allowed' => 10, 'global' => 1], self::drain($l, 's', 11), "refill_per_second $rate");
        }
    }

    // Case 2 ---------------------------------------------------------------------------

    public function testLimitersOfOneNameOnTwoDatabasesShareNoLocalDenials(): void
    {
        $name = self::uniqueName('db');
        $url = $this->valkey->url();
        $options = ['name' => $name, 'global' => self::bucket(5)];
        $db0 = $this->limiter($options + ['url' => "$url/0"]);
        $db1 = $this->limiter($options + ['url' => "$url/1"]);
        $this->assertSame(['allowed' => 5, 'global' => 3], self::drain($db0, 's', 8));
        $this->assertSame(['allowed' => 5, 'global' => 1], self::drain($db1, 's', 6), "db1's bucket is full: db0's denials say nothing about it");
        $r = $this->valkey->client();
        $r->select(1);
        $this->assertSame(1, $r->exists("{cg:$name}:b:global"), 'db1 was asked and its bucket took the tokens');
    }

    // Case 3 ---------------------------------------------------------------------------

    public function testALiveRateChangeKeepsADrainedBucketEmpty(): void
    {
        $name = self::uniqueName('rate');
        $l = $this->own(['name' => $name, 'global' => self::bucket(1000, 100)]);
        $allowed = 0;
        while ($allowed < 5000 && $l->acquire('s')->isAllowed()) {
            $allowed++;
        }
        $this->assertGreaterThanOrEqual(1000, $allowed);
        $empty = microtime(true); // the bucket held less than one token at the denial
        [$code, , $err] = $this->cli($name, 'set', 'global=1000/1');
        $this->assertSame(0, $code, $err);
        $changed = microtime(true);
        // Many more tries than the CLI's run can have refilled at 100/s: rereading the old
        // time debt at 1/s would admit hundreds at once.
        $by = self::drain($l, 's', 500);
        $elapsed = microtime(true) - $changed;
        // At the change the bucket held what 100/s refilled since it was empty (a token or
        // two while the CLI ran), from then on it refills at 1/s: not 100 tokens at once.
        $bound = 1 + (int) floor(100 * ($changed - $empty)) + 1 + (int) ceil($elapsed);
        $this->assertLessThanOrEqual(
            $bound,
            $by['allowed'] ?? 0,
            sprintf('%s after the change (CLI took %.0f ms)', json_encode($by), 1000 * ($changed - $empty))
        );
        $d = $l->acquire('s');
        $this->assertSame('global', $d->reason());
        $this->assertLessThanOrEqual(1.05, $d->retryAfter(), 'the next token comes at the new rate, 1/s');

        // And a full bucket keeps its level too: raised to 200 it holds its 100 tokens and
        // refills toward 200 at the rate; lowered to 50 it holds 50.
        foreach ([200 => 100, 50 => 50] as $capacity => $level) {
            $name = self::uniqueName('full');
            $l = $this->own(['name' => $name, 'global' => self::bucket(100, 100)]);
            $this->assertTrue($l->acquire('s')->isAllowed(), 'settings published');
            usleep(50_000); // the token is back: full, and its key gone
            $this->assertSame(0, $this->valkey->client()->exists("{cg:$name}:b:global"));
            [$code, , $err] = $this->cli($name, 'set', "global=$capacity/100");
            $this->assertSame(0, $code, $err);
            $t0 = microtime(true);
            $by = self::drain($l, 's', $capacity + 60);
            $refilled = (int) ceil(100 * (microtime(true) - $t0)) + 1;
            $this->assertGreaterThanOrEqual($level, $by['allowed'] ?? 0, "full at 100, set to $capacity: " . json_encode($by));
            $this->assertLessThanOrEqual($level + $refilled, $by['allowed'] ?? 0, "full at 100, set to $capacity: " . json_encode($by));
        }
    }

    public function testALiveRateChangeLetsADrainedSlowBucketRefillAtTheNewRate(): void
    {
        $name = self::uniqueName('rate');
        $options = ['name' => $name, 'global' => self::bucket(100, 1)];
        $l = $this->own($options);
        $this->assertSame(['allowed' => 100, 'global' => 1], self::drain($l, 's', 101));
        $empty = microtime(true);
        [$code, , $err] = $this->cli($name, 'set', 'global=100/100');
        $this->assertSame(0, $code, $err);
        $changed = microtime(true);
        // This process learnt from the drain that the bucket holds no token for about a
        // second at the old rate, and a worker picks up a live change only at its next round
        // trip: local denials put that off by up to 1 s (docs/operations.md, "Live limits"). What this
        // test is about is what Valkey decides right after the change, so the decisions
        // below are all asked of Valkey (a limiter built with local denials off).
        ini_set('checkout_guard.local_denials', '0');
        $asked = $this->own($options);
        $first = null;
        $admitted = 0;
        while (($t = microtime(true)) - $changed < 0.25) {
            if ($asked->acquire('s')->isAllowed()) {
                $admitted++;
                $first ??= $t - $changed;
            }
            usleep(1000);
        }
        $end = microtime(true);
        $this->assertNotNull($first, 'no admission within 0.25 s of the change: the old time debt was reread at the new rate');
        $this->assertLessThanOrEqual(0.2, $first, 'the bucket (empty) refills at 100/s from the change');
        // Not refilled by the change either: what 1/s gave until the change, then 100/s.
        $bound = 2 + (int) ceil($changed - $empty) + (int) ceil(100 * ($end - $empty));
        $this->assertLessThanOrEqual($bound, $admitted);
    }

    // Case 4 ---------------------------------------------------------------------------

    public function testAWorkerNeverDecidesWithLimitsFromBeforeValkeyLostItsData(): void
    {
        // One token every 10 s: nothing refills to speak of while the test runs, and no
        // bucket here is ever empty, so no local denial can hide what the limits allow.
        $name = self::uniqueName('epoch');
        $options = ['name' => $name, 'global' => self::bucket(10, 0.1)];
        $l = $this->own($options);
        $this->assertTrue($l->acquire('s')->isAllowed(), 'settings published');
        [$code, , $err] = $this->cli($name, 'set', 'global=20/0.1');
        $this->assertSame(0, $code, $err);
        $l->reset();
        $this->assertSame(19, $l->acquire('s')->remaining(), 'this worker decides with global=20');
        // Valkey loses everything; this worker does not decide meanwhile, another one does
        // (and publishes the settings), then on-call sets new limits.
        $this->valkey->client()->flushAll();
        $this->assertSame('allowed', $this->otherWorker($options, 'other'));
        [$code, , $err] = $this->cli($name, 'set', 'global=2/0.1');
        $this->assertSame(0, $code, $err);
        $by = self::drain($l, 's', 5);
        $this->assertLessThanOrEqual(2, $by['allowed'] ?? 0, 'decided with global=2, not with the lost global=20: ' . json_encode($by));
        $this->assertSame(['global'], array_keys(array_diff_key($by, ['allowed' => 0])));
    }

    // Case 5 ---------------------------------------------------------------------------

    private function assertExpires(\Redis $r, string $key): void
    {
        $pttl = $r->pttl($key);
        $this->assertGreaterThan(0, $pttl, "$key has no TTL");
        $this->assertLessThanOrEqual(86_400_000, $pttl, "$key lives at most a day");
    }

    public function testSettingsArePublishedAgainWhenValkeyLostThemAndExpire(): void
    {
        $name = self::uniqueName('pub');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(10),
            'hot_lane' => self::bucket(6),
            'hot_shop' => self::bucket(3),
        ]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $r = $this->valkey->client();
        $key = "{cg:$name}:settings";
        $this->assertNotFalse($r->get($key));
        $this->assertExpires($r, $key);
        $r->flushAll();
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertNotFalse($r->get($key), 'published again by the first decision after the loss');
        $this->assertExpires($r, $key);
        [$code, , $err] = $this->cli($name, 'set', 'global=20/0.001');
        $this->assertSame(0, $code, $err);
        [$code, $out, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, $err);
        $this->assertStringContainsString('global=10/0.001 hot_lane=6/0.001 hot_shop=3/0.001', $out);
        $this->assertStringNotContainsString('none published', $out);
    }

    // Case 6 ---------------------------------------------------------------------------

    public function testTheCliShowsLimitsWrittenWrongByHandAndASetRepairsThem(): void
    {
        $name = self::uniqueName('lock');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(10),
            'hot_lane' => self::bucket(6),
            'hot_shop' => self::bucket(3),
        ]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $r = $this->valkey->client();
        $r->hSet("{cg:$name}:limits", 'global', 'garbage');
        $r->set("{cg:$name}:limits:v", '5');
        [$code, $out, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, "status must show the problem, not fail on it: $err");
        $this->assertMatchesRegularExpression(self::PROBLEM, $out . $err, 'the problem is named');
        $this->assertMatchesRegularExpression(
            '/limits in force: (the settings|global=10\/0\.001 hot_lane=6\/0\.001 hot_shop=3\/0\.001)/',
            $out,
            'and what is in force: the constructor values'
        );
        [$code, , $err] = $this->cli($name, 'set', 'global=default');
        $this->assertSame(0, $code, "the set that repairs them is accepted: $err");
        [$code, $out, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, $err);
        $this->assertDoesNotMatchRegularExpression(self::PROBLEM, self::withoutChanges($out) . $err);
        $this->assertTrue($l->acquire('s')->isAllowed());
    }

    public function testTheCliShowsLimitsADeployMadeInvalidAndASetRepairsThem(): void
    {
        $name = self::uniqueName('lock');
        $a = $this->own(['name' => $name, 'global' => self::bucket(10), 'hot_lane' => self::bucket(6)]);
        $this->assertTrue($a->acquire('s')->isAllowed());
        [$code, , $err] = $this->cli($name, 'set', 'hot_lane=9/0.001');
        $this->assertSame(0, $code, $err);
        // The new deploy lowers global below the stored hot_lane; its workers publish.
        $b = $this->own(['name' => $name, 'global' => self::bucket(5), 'hot_lane' => self::bucket(3)]);
        $this->assertTrue($b->acquire('s')->isAllowed());
        [$code, $out, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, "status must show the problem, not fail on it: $err");
        $this->assertMatchesRegularExpression(self::PROBLEM, $out . $err, 'the problem is named');
        [$code, , $err] = $this->cli($name, 'set', 'hot_lane=default');
        $this->assertSame(0, $code, "the set that repairs them is accepted: $err");
        [$code, $out, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, $err);
        $this->assertDoesNotMatchRegularExpression(self::PROBLEM, self::withoutChanges($out) . $err);
    }

    // Case 7 ---------------------------------------------------------------------------

    public function testALiveCapacityBelowTheRequestIsADenialNotAnException(): void
    {
        $log = new EventLog(self::redis());
        $name = self::uniqueName('small');
        $l = $this->own(['name' => $name, 'global' => self::bucket(10, 5)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$code, , $err] = $this->cli($name, 'set', 'global=3/5');
        $this->assertSame(0, $code, $err);
        $log->mark();
        for ($i = 0; $i < 3; $i++) {
            try {
                $d = $l->acquire('s', 4);
            } catch (ConfigurationException $e) {
                $this->fail('an on-call change became an exception in checkout code: ' . $e->getMessage());
            }
            $this->assertFalse($d->isAllowed());
            $this->assertSame('global', $d->reason());
            $this->assertTrue(is_finite($d->retryAfter()), 'retryAfter ' . $d->retryAfter());
            $this->assertGreaterThan(0.0, $d->retryAfter());
            $this->assertLessThan(10.0, $d->retryAfter());
        }
        $events = array_values(array_filter(
            $log->jsonl(),
            fn ($e) => $e['eventType'] === 'RateLimitDecision' && $e['limiter'] === $name
        ));
        $this->assertNotEmpty($events, 'the denials are recorded');
        $this->assertSame(['global', false], [$events[0]['reason'], $events[0]['allowed']]);
    }

    public function testTheCliWarnsWhenAChangeLowersACapacity(): void
    {
        $name = self::uniqueName('warn');
        $l = $this->own(['name' => $name, 'global' => self::bucket(10, 5)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$code, , $err] = $this->cli($name, 'set', 'global=3/5');
        $this->assertSame(0, $code, $err);
        $this->assertMatchesRegularExpression('/warning/i', $err);
        $this->assertMatchesRegularExpression('/capacity/i', $err);
    }

    // Case 8 ---------------------------------------------------------------------------

    public function testALocalDenialEndsWhenTheHotMarkItCameFromRunsOut(): void
    {
        $name = self::uniqueName('mark');
        $l = $this->own(['name' => $name, 'global' => self::bucket(100, 1000), 'hot_shop' => self::bucket(2)]);
        $r = $this->valkey->client();
        $marked = microtime(true);
        $r->set("{cg:$name}:hot:flash", '1', ['px' => 300]);
        $this->assertSame(['allowed' => 2, 'hot_shop' => 3], self::drain($l, 'flash', 5));
        $this->assertLessThan($marked + 0.5, microtime(true), 'timing: the replies came well within a second');
        self::sleepUntil($marked + 0.4);
        $this->assertSame(0, $r->exists("{cg:$name}:hot:flash"), 'the mark ran out');
        $d = $l->acquire('flash');
        $this->assertTrue($d->isAllowed(), 'not hot any more, global has room; got ' . $d->reason());
        $this->assertFalse($d->isHotShop());
    }

    public function testALocalDenialEndsWhenAnAutoHotMarkRunsOut(): void
    {
        $name = self::uniqueName('automark');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(100, 1000),
            'hot_shop' => self::bucket(2),
            'auto_hot' => ['window_seconds' => 10, 'share' => 0.3, 'ttl_seconds' => 1, 'min_tokens' => 1],
        ]);
        $r = $this->valkey->client();
        // The shop's first token makes it hot (all of the window's tokens): auto, for 1 s.
        $d = $l->acquire('flash');
        $marked = microtime(true);
        $this->assertTrue($d->isAllowed());
        $this->assertSame('auto', $r->get("{cg:$name}:hot:flash"));
        // Drained well after the mark was set, so the local denial it teaches would last
        // (1 s from its reply) beyond the mark's end.
        self::sleepUntil($marked + 0.4);
        $taught = microtime(true);
        $this->assertSame(['allowed' => 2, 'hot_shop' => 2], self::drain($l, 'flash', 4));
        self::sleepUntil($marked + 1.15);
        $this->assertSame(0, $r->exists("{cg:$name}:hot:flash"), 'the auto mark ran out');
        $d = $l->acquire('flash');
        $this->assertLessThan($taught + 1.0, microtime(true), 'timing: still within a second of the replies that taught the denial');
        $this->assertTrue($d->isAllowed(), 'not hot any more, global has room; got ' . $d->reason());
        $this->assertFalse($d->isHotShop());
    }

    // Case 9 ---------------------------------------------------------------------------

    public function testALocalDenialReportsTheRemainingTokensValkeyWould(): void
    {
        $l = $this->own(['global' => self::bucket(10, 10)]);
        $l->health(); // connected before the clock starts
        $t0 = microtime(true);
        $this->assertSame(['allowed' => 10], self::drain($l, 's', 10));
        // From here the bucket holds 10/s x (t - first take) tokens: 1.5 at t0 + 150 ms,
        // below 2 until t0 + 200 ms.
        self::sleepUntil($t0 + 0.15);
        $decisions = [$l->acquire('s', 4), $l->acquire('s', 4), $l->acquire('s', 4)];
        $this->assertLessThan($t0 + 0.2, microtime(true), 'timing: decided while the bucket held 1 whole token');
        foreach ($decisions as $i => $d) {
            $this->assertSame(
                [false, 'global', 1],
                [$d->isAllowed(), $d->reason(), $d->remaining()],
                "decision $i: 1 token left, whoever answered"
            );
        }
    }

    public function testALocalDenialNamesTheBucketValkeyWould(): void
    {
        $l = $this->own([
            'global' => self::bucket(10),
            'hot_lane' => self::bucket(3),
            'hot_shops' => ['h'],
        ]);
        $this->assertSame(['allowed' => 3], self::drain($l, 'h', 3));   // hot lane empty, global 7
        $this->assertSame(['allowed' => 5], self::drain($l, 'o', 5));   // global 2
        // 3 tokens for the hot shop: global (checked first) lacks them, and so does the lane.
        for ($i = 0; $i < 3; $i++) {
            $d = $l->acquire('h', 3);
            $this->assertSame(
                [false, 'global', 0, true],
                [$d->isAllowed(), $d->reason(), $d->remaining(), $d->isHotShop()],
                "decision $i: as Valkey decides it"
            );
        }
    }

    public function testARetryAfterTheAnnouncedWaitIsAdmitted(): void
    {
        // One token, one every 50 ms.
        $l = $this->own(['global' => self::bucket(1, 20)]);
        $admitted = 0;
        $denied = [];
        for ($round = 0; $round < 30; $round++) {
            for ($i = 0; $i < 100; $i++) {
                $d = $l->acquire('s');
                if (!$d->isAllowed()) {
                    break;
                }
            }
            $this->assertSame('global', $d->reason());
            $wait = $d->retryAfter();
            $this->assertGreaterThan(0.0, $wait);
            $this->assertLessThanOrEqual(0.06, $wait);
            self::waitExactly($wait);
            $retry = $l->acquire('s');
            if ($retry->isAllowed()) {
                $admitted++;
            } else {
                $denied[] = sprintf('round %d: waited %.6f s, denied again, retryAfter %.6f s', $round, $wait, $retry->retryAfter());
            }
        }
        $this->assertSame(30, $admitted, implode("\n", $denied));

        // Again after a slow reply: the one that teaches the worker the bucket is empty
        // comes back late (Valkey paused 30 ms with the request in flight), so Valkey read
        // its clock 30 ms after the request left, and a retryAfter counted from the sending
        // would be 30 ms early, every time.
        $l = $this->own(['global' => self::bucket(1, 20), 'timeout_ms' => 2000]);
        $this->assertTrue($l->acquire('s')->isAllowed()); // connected, script loaded
        for ($round = 0; $round < 3; $round++) {
            usleep(60_000); // full again
            $this->valkey->pause();
            $resume = proc_open(['sh', '-c', 'sleep 0.03; kill -CONT ' . $this->valkey->pid()], [], $pipes);
            $slow = $l->acquire('s');
            proc_close($resume);
            $this->assertTrue($slow->isAllowed(), $slow->reason());
            $d = $l->acquire('s');
            $this->assertSame('global', $d->reason());
            self::waitExactly($d->retryAfter());
            $retry = $l->acquire('s');
            if (!$retry->isAllowed()) {
                $denied[] = sprintf('slow round %d: waited %.6f s, denied again, retryAfter %.6f s', $round, $d->retryAfter(), $retry->retryAfter());
            }
        }
        $this->assertSame([], $denied);
    }

    // Case 10 --------------------------------------------------------------------------

    public function testRatesWholeMicrosecondsCannotHonourAreRefusedByName(): void
    {
        $refused = [
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 999999]], '999999'],
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 600000]], '600000'],
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 3000.5]], '3000.5'],
            ['hot_shop', ['global' => ['capacity' => 10, 'refill_per_second' => 1000000], 'hot_shop' => ['capacity' => 5, 'refill_per_second' => 999999.0]], '999999'],
        ];
        foreach ($refused as [$option, $options, $value]) {
            try {
                $this->own($options);
                $this->fail("$option.refill_per_second $value accepted, though whole microseconds run it at another rate");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString("$option.refill_per_second", $e->getMessage());
                $this->assertStringContainsString($value, $e->getMessage());
            }
        }
        foreach ([1000000, 500000, 1000, 2.5] as $rate) {
            $l = $this->own(['global' => ['capacity' => 10, 'refill_per_second' => $rate]]);
            $this->assertTrue($l->acquire('s')->isAllowed(), "refill_per_second $rate");
        }
    }

    public function testTheCliRefusesARateItCannotHonour(): void
    {
        $name = self::uniqueName('rate');
        $l = $this->own(['name' => $name, 'global' => self::bucket(10)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$code, $out, $err] = $this->cli($name, 'set', 'global=10/999999');
        $this->assertSame(2, $code, $out);
        $this->assertStringContainsString('global.refill_per_second', $err);
        $this->assertSame(0, $this->valkey->client()->exists("{cg:$name}:limits", "{cg:$name}:limits:v", "{cg:$name}:changes"), 'nothing written');
    }

    // Case 11 --------------------------------------------------------------------------

    public function testADecisionThatFailsInValkeyTakesNothing(): void
    {
        $name = self::uniqueName('atomic');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(5),
            'on_unavailable' => 'deny',
            'auto_hot' => ['window_seconds' => 3600],
        ]);
        $r = $this->valkey->client();
        [$s, $us] = $r->time();
        $window = intdiv((int) $s * 1_000_000 + (int) $us, 3600 * 1_000_000);
        // A string where the decision counts the window's tokens (a hash): the script fails.
        $bad = ["{cg:$name}:ah:$window", "{cg:$name}:ah:" . ($window + 1)];
        foreach ($bad as $key) {
            $r->set($key, 'not a hash');
        }
        $d = $l->acquire('s');
        $this->assertSame([false, 'unavailable'], [$d->isAllowed(), $d->reason()]);
        $this->assertSame(0.0, $d->retryAfter(), 'Valkey answered (with an error): nothing to wait for');
        $r->del($bad);
        $this->assertSame(['allowed' => 5, 'global' => 1], self::drain($l, 's', 6), 'the failed decision took nothing');
    }

    // Review of the fixes ---------------------------------------------------------------

    public function testABucketCarriedOverALiveChangeExpiresOnTheNewLimitsSchedule(): void
    {
        $name = self::uniqueName('carry');
        $options = ['name' => $name, 'global' => self::bucket(100, 100)];
        $l = $this->own($options);
        $allowed = 0;
        while ($allowed < 1000 && $l->acquire('s')->isAllowed()) {
            $allowed++;
        }
        $this->assertGreaterThanOrEqual(100, $allowed);
        $empty = microtime(true);
        [$code, , $err] = $this->cli($name, 'set', 'global=100/1');
        $this->assertSame(0, $code, $err);
        $changed = microtime(true);
        // One decision reads the bucket under the new limits: a denial (all 100 tokens),
        // asked of Valkey (a limiter with local denials off; this process's would answer
        // from what the drain taught it). It carries the level over and must write it back:
        // left as the drain wrote it, the key would expire 1 s after the drain (when 100/s
        // had refilled it) and the bucket read as full.
        ini_set('checkout_guard.local_denials', '0');
        $d = $this->own($options)->acquire('s', 100);
        $this->assertSame('global', $d->reason(), 'the carried bucket holds less than 100 tokens');
        usleep(1_200_000); // nobody decides: past the old schedule's expiry
        $by = self::drain($l, 's', 200);
        $elapsed = microtime(true) - $changed;
        // What 100/s refilled until the change, then 1/s: a few tokens, not a full bucket.
        $bound = 1 + (int) floor(100 * ($changed - $empty)) + 1 + (int) ceil($elapsed);
        $this->assertLessThanOrEqual(
            $bound,
            $by['allowed'] ?? 0,
            sprintf('%s %.1f s after the change (CLI took %.0f ms)', json_encode($by), $elapsed, 1000 * ($changed - $empty))
        );
    }

    public function testTheCliCarriesEveryBucketOverWithoutWaitingForADecision(): void
    {
        // On-call lowers the rate of a drained bucket and nobody decides for 1.2 s (the
        // workers deny locally, or the shop is quiet): `set` itself carries the buckets over,
        // so the key the drain wrote (full again 1 s after it, at 100/s) does not expire on
        // the old schedule and come back as a full bucket at the new capacity.
        $name = self::uniqueName('carry-cli');
        $l = $this->own(['name' => $name, 'global' => self::bucket(100, 100), 'hot_shop' => self::bucket(50, 50), 'hot_shops' => ['h']]);
        $allowed = 0;
        while ($allowed < 1000 && $l->acquire('h')->isAllowed()) {
            $allowed++;
        }
        $this->assertGreaterThanOrEqual(50, $allowed);
        $empty = microtime(true);
        [$code, , $err] = $this->cli($name, 'set', 'global=100/1', 'hot_shop=50/1');
        $this->assertSame(0, $code, $err);
        $changed = microtime(true);
        usleep(1_200_000);
        $hot = self::drain($l, 'h', 100);
        $elapsed = microtime(true) - $changed;
        // hot_shop: what 50/s refilled until the change, then 1/s (global keeps more).
        $bound = 1 + (int) floor(50 * ($changed - $empty)) + 1 + (int) ceil($elapsed);
        $this->assertLessThanOrEqual($bound, $hot['allowed'] ?? 0, json_encode($hot));
        $this->assertSame('hot_shop', $l->acquire('h')->reason());
    }

    public function testAlternatingDeploysUnderLiveLimitsRefillOnlyAtTheirRate(): void
    {
        // Two deploys of one limiter with other global values, while live limits exist (a
        // change of another bucket, made a second before): a bucket written by one and read
        // by the other carries its level over from the reading, not from the live change's
        // instant (which would refill it by all the time since). Every decision is asked of
        // Valkey (local denials off), where the level is carried: a local denial can only
        // deny, and would hide what Valkey admits.
        ini_set('checkout_guard.local_denials', '0');
        $name = self::uniqueName('deploys');
        $deploy = fn (int $global) => $this->own([
            'name' => $name,
            'global' => self::bucket($global, 10),
            'hot_lane' => self::bucket(5, 10),
        ]);
        $a = $deploy(10);
        $b = $deploy(20);
        $this->assertTrue($a->acquire('s')->isAllowed(), 'settings published');
        [$code, , $err] = $this->cli($name, 'set', 'hot_lane=4/10');
        $this->assertSame(0, $code, $err);
        usleep(1_000_000); // 10 tokens' worth of time at 10/s since the change
        $t0 = microtime(true);
        $total = 0;
        $turns = [];
        for ($round = 0; $round < 4; $round++) {
            foreach (['A' => $a, 'B' => $b] as $which => $l) {
                $allowed = self::drain($l, 's', 30)['allowed'] ?? 0;
                $total += $allowed;
                $turns[] = "$which $allowed";
            }
        }
        $elapsed = microtime(true) - $t0;
        // At most a full bucket (the larger capacity) and what 10/s refilled meanwhile.
        $this->assertLessThanOrEqual(
            20 + (int) ceil(10 * $elapsed) + 1,
            $total,
            sprintf('admitted by turns in %.0f ms: %s', 1000 * $elapsed, implode(', ', $turns))
        );
    }

    public function testALocalDenialEndsWithAHotMarkSeenInItsLastMillisecond(): void
    {
        $name = self::uniqueName('lastms');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(1000),
            'hot_lane' => self::bucket(100),
            'hot_shop' => self::bucket(3),
        ]);
        $r = $this->valkey->client();
        // A flood on a drained hot_shop bucket: answered locally while the mark lasts, by
        // Valkey in its last milliseconds, one of them (given a dense enough flood) in its
        // very last (PTTL 0). What that reply teaches must end with the mark too, not last
        // up to a second. A few rounds, each with a shop and a mark of its own: a flood
        // this host's scheduler interrupts may miss one mark's last millisecond, hardly all.
        for ($round = 0; $round < 4; $round++) {
            $shop = "flash$round";
            $key = "{cg:$name}:hot:$shop";
            [$s, $us] = $r->time();
            $expires = intdiv((int) $s * 1_000_000 + (int) $us, 1000) + 200; // Valkey ms
            $r->rawCommand('SET', $key, '1', 'PXAT', (string) $expires);
            // Gone once Valkey's clock (this host's) reaches the next millisecond.
            $gone = ($expires + 1) / 1000;
            $this->assertSame(['allowed' => 3], self::drain($l, $shop, 3), "round $round");
            $free = null; // when a decision first said the shop was not hot
            $flushed = false;
            while (($now = microtime(true)) < $gone + 1.2) {
                $d = $l->acquire($shop);
                if (!$d->isHotShop()) {
                    $free = microtime(true);
                    break;
                }
                if ($d->reason() !== 'hot_shop') {
                    $this->fail("round $round: a hot shop with its bucket drained; got " . $d->reason());
                }
                if ($now < $gone - 0.004 || $now > $gone + 0.005) {
                    usleep(100); // far from the mark's end: no need to flood
                    if (!$flushed && $now > $gone - 0.015) {
                        // Events written now, not by a decision in the mark's last ms.
                        \CheckoutGuard\Telemetry::flush();
                        $flushed = true;
                    }
                } else {
                    // Densely but not flat out: a thousand local denials in a row would
                    // fill the event buffer, and its writing would pause the flood.
                    $until = hrtime(true) + 20_000;
                    while (hrtime(true) < $until) {
                        // spin
                    }
                }
            }
            $this->assertNotNull($free, "round $round: still denied as hot 1.2 s after the mark ran out");
            $this->assertSame(-2, $r->pttl($key), "round $round: not hot only once the mark is gone");
            $this->assertTrue($d->isAllowed(), "round $round: not hot any more, global has room; got " . $d->reason());
            // Without the fix a reply's knowledge outlives the mark by up to 250 ms
            // (MAX_LOCAL_DENIAL_NS); 150 ms leaves room for a loaded machine's stalls
            // (74 ms was seen with the PHP matrix running beside other sessions).
            $this->assertLessThan(
                0.15,
                $free - $gone,
                sprintf('round %d: denied as hot for %.0f ms after the mark ran out', $round, 1000 * ($free - $gone))
            );
        }
    }

    public function testHandWrittenLimitsNotUtf8OrOfTheWrongTypeStopNeitherDecisionsNorTheCli(): void
    {
        $r = $this->valkey->client();
        $cases = [
            'a version not UTF-8' => fn (string $tag) => $r->set("$tag:limits:v", "7-\xe9t\xe9-1"),
            'limits a string, not a hash' => function (string $tag) use ($r) {
                $r->set("$tag:limits:v", '9');
                $r->set("$tag:limits", 'global=1/1');
            },
        ];
        foreach ($cases as $case => $write) {
            $name = self::uniqueName('hand');
            $l = $this->own(['name' => $name, 'global' => self::bucket(3), 'on_unavailable' => 'deny']);
            $this->assertTrue($l->acquire('s')->isAllowed(), "$case: settings published");
            $write("{cg:$name}");
            // The constructor's values: the bucket's 2 tokens left, then a denial by it.
            $this->assertSame(['allowed' => 2, 'global' => 1], self::drain($l, 's', 3), $case);
            [$code, $out, $err] = $this->cli($name, 'status');
            $this->assertSame(0, $code, "$case: status must show the limits, not fail on them: $out$err");
            [$code, $out, $err] = $this->cli($name, 'set', 'global=default');
            $this->assertSame(0, $code, "$case: the set that repairs them is accepted: $out$err");
            [$code, $out, $err] = $this->cli($name, 'status');
            $this->assertSame(0, $code, "$case: $err");
            $this->assertDoesNotMatchRegularExpression(self::PROBLEM, self::withoutChanges($out) . $err, $case);
            $this->assertSame(\Redis::REDIS_HASH, $r->type("{cg:$name}:limits"), "$case: repaired");
            $d = $l->acquire('s');
            $this->assertSame('global', $d->reason(), "$case: decided after the repair, the bucket still empty");
        }
    }

    public function testARequestAboveALiveCapacityIsToldValkeysRetryAfterEveryTime(): void
    {
        $name = self::uniqueName('above');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(10, 5),
            'hot_lane' => self::bucket(10, 5),
            'hot_shop' => self::bucket(10, 5),
            'hot_shops' => ['h'],
        ]);
        $this->assertTrue($l->acquire('s')->isAllowed(), 'settings published');
        [$code, , $err] = $this->cli($name, 'set', 'hot_shop=2/1');
        $this->assertSame(0, $code, $err);
        // 3 tokens from a full 2-token bucket at 1/s: Valkey denies, "come back in 1 s"
        // (the full bucket's shortfall), however often it is asked. The local denials that
        // follow (this process learnt the bucket from the reply) must say the same, not
        // count down toward 0 as if 3 tokens were coming; after a second Valkey is asked again.
        $first = $l->acquire('h', 3);
        $this->assertSame([false, 'hot_shop'], [$first->isAllowed(), $first->reason()]);
        $this->assertEqualsWithDelta(1.0, $first->retryAfter(), 0.005, "Valkey's");
        $waits = [];
        for ($i = 0; $i < 6; $i++) {
            usleep(200_000);
            $d = $l->acquire('h', 3);
            $this->assertSame('hot_shop', $d->reason());
            $waits[] = $d->retryAfter();
        }
        foreach ($waits as $i => $wait) {
            $this->assertEqualsWithDelta(
                $first->retryAfter(),
                $wait,
                0.005,
                "decision $i of those 0.2 s apart: retryAfter " . implode(', ', $waits)
            );
        }
    }
}
