<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * Shadow mode (`mode => 'shadow'`, live `checkout-guard limiter set mode=...`) against the
 * test Valkey: the decision and the buckets as enforcement makes and moves them, every
 * call let through, the would-be denials recorded; the live switch for every worker.
 */
final class ShadowModeTest extends LimiterTestCase
{
    private EventLog $log;

    protected function setUp(): void
    {
        $this->log = new EventLog(self::redis());
        $this->log->mark();
    }

    private function named(string $name, array $extra = []): RateLimiter
    {
        return $this->limiter($extra + [
            'name' => $name,
            'global' => self::bucket(5),
            'hot_lane' => self::bucket(4),
            'hot_shop' => self::bucket(2),
            'hot_shops' => ['hot'],
        ]);
    }

    /** @return list<array> this test's RateLimitDecision events of limiter $name */
    private function decisionEvents(string $name): array
    {
        return array_values(array_filter(
            $this->log->jsonl(),
            fn ($e) => $e['eventType'] === 'RateLimitDecision' && $e['limiter'] === $name
        ));
    }

    public function testShadowDecidesAndMovesTheBucketsAsEnforcementDoesButLetsEveryCallThrough(): void
    {
        $enforce = $this->named($e = self::uniqueName('enforce'));
        $shadow = $this->named($s = self::uniqueName('shadow'), ['mode' => 'shadow']);
        $sequence = ['a', 'hot', 'hot', 'b', 'hot', 'a', 'a', 'b', 'hot', 'a', 'b'];
        $denied = 0;
        foreach ($sequence as $i => $shop) {
            $want = $enforce->acquire($shop);
            $got = $shadow->acquire($shop);
            $this->assertTrue($got->isAllowed(), "call $i: shadow lets it through");
            $this->assertTrue($got->isShadow());
            $this->assertFalse($want->isShadow());
            $this->assertSame($want->isAllowed(), $want->wouldAllow(), 'enforce: wouldAllow() is isAllowed()');
            $this->assertSame(
                [$want->isAllowed(), $want->reason(), $want->remaining(), $want->isHotShop()],
                [$got->wouldAllow(), $got->reason(), $got->remaining(), $got->isHotShop()],
                "call $i ($shop)"
            );
            $this->assertEqualsWithDelta($want->retryAfter(), $got->retryAfter(), 0.05);
            $denied += (int) !$want->isAllowed();
        }
        $this->assertGreaterThanOrEqual(4, $denied, 'the sequence is over the limits');
        // An enforcing limiter on the shadow limiter's keys finds the buckets enforcement left.
        $after = $this->named($s);
        foreach (['a', 'hot'] as $shop) {
            $this->assertSame($enforce->peek($shop)->remaining(), $after->peek($shop)->remaining(), $shop);
            $this->assertSame($enforce->peek($shop)->reason(), $after->peek($shop)->reason(), $shop);
        }
        $this->assertSame('shadow', $shadow->health(false)['mode']);
        $this->assertSame('enforce', $enforce->health(false)['mode']);
    }

    public function testAWouldBeDenialIsARateLimitDecisionEventMarkedShadow(): void
    {
        $shadow = $this->named($s = self::uniqueName('shadow-ev'), ['mode' => 'shadow']);
        $enforce = $this->named($e = self::uniqueName('enforce-ev'));
        for ($i = 0; $i < 7; $i++) {
            $shadow->acquire('a');
            $enforce->acquire('a');
        }
        $d = $shadow->acquire('a');
        $this->assertSame([true, false, 'global'], [$d->isAllowed(), $d->wouldAllow(), $d->reason()]);
        $this->assertGreaterThan(0.0, $d->retryAfter(), 'the wait enforcement would have told');
        $this->assertSame(0, $d->remaining());
        $events = $this->decisionEvents($s);
        $this->assertCount(3, $events, 'only the would-be denials, not the 5 admitted calls');
        foreach ($events as $ev) {
            $this->assertSame(
                [true, false, 'shadow', 'global', 'a'],
                [$ev['allowed'], $ev['would_allow'], $ev['mode'], $ev['reason'], $ev['shop.id']]
            );
            $this->assertGreaterThan(0, $ev['retry_after.s']);
        }
        $events = $this->decisionEvents($e);
        $this->assertCount(2, $events);
        $this->assertSame([false, false, 'enforce', 'global'], [$events[0]['allowed'], $events[0]['would_allow'], $events[0]['mode'], $events[0]['reason']]);
        // The stream sink carries the same fields.
        $stream = array_values(array_filter($this->log->stream(), fn ($ev) => $ev['eventType'] === 'RateLimitDecision' && $ev['limiter'] === $s));
        $this->assertCount(3, $stream);
        $this->assertSame([true, false, 'shadow'], [$stream[0]['allowed'], $stream[0]['would_allow'], $stream[0]['mode']]);
        // `limiter status` counts them apart from the denials: no buyer was refused.
        [$code, $out, $err] = Cli::limiter(self::url(), $s, 'status', '--json', '--events-key', EventLog::streamKey());
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame([[], ['global' => 3]], [$st['decisions'], $st['shadow_decisions']]);
        [, $text] = Cli::limiter(self::url(), $s, 'status', '--events-key', EventLog::streamKey());
        $this->assertStringContainsString('would have denied (shadow, let through) in the last 60 s: global 3', $text);
        $this->assertStringContainsString('mode: shadow (the workers\' mode option)', $text);
        $stats = \CheckoutGuard\Telemetry::stats()['decisions'];
        $this->assertGreaterThanOrEqual(5, $stats['denied'], 'counted as enforcement decided');
    }

    public function testAShadowReservationTakesItsTokensButNeverSleeps(): void
    {
        $name = self::uniqueName('shadow-wait');
        $shadow = $this->limiter(['name' => $name, 'global' => self::bucket(2, 1.0), 'mode' => 'shadow']);
        $this->assertTrue($shadow->acquire('a', 2)->wouldAllow());
        // A token is due in about 1 s: enforcement would take it now and sleep until then.
        $d = $shadow->acquire('a', 1, 2.0);
        $this->assertSame([true, true, true], [$d->isAllowed(), $d->wouldAllow(), $d->isShadow()]);
        $this->assertSame(0.0, $d->waited(), 'no sleep in shadow mode');
        $this->assertGreaterThan(0.5, $d->retryAfter(), 'the wait it would have slept');
        $this->assertLessThanOrEqual(1.0, $d->retryAfter());
        // The token was taken, as enforcement takes it: the next one is a further second out.
        $next = $this->limiter(['name' => $name, 'global' => self::bucket(2, 1.0)])->peek('a');
        $this->assertFalse($next->isAllowed());
        $this->assertGreaterThan(1.0, $next->retryAfter());
    }

    /**
     * phpinfo() lists the newest limiters: in a process that made more than it shows (a
     * long-lived worker, this suite), the one just made or switched is there (it was
     * missing once 64 had been made).
     */
    public function testPhpinfoShowsTheNewestLimitersModeWhenManyWereMade(): void
    {
        for ($i = 0; $i < 70; $i++) {
            $this->named(self::uniqueName('many'));
        }
        $last = self::uniqueName('last');
        $this->limiter(['name' => $last, 'global' => self::bucket(2, 1.0), 'mode' => 'shadow']);
        ob_start();
        phpinfo(INFO_MODULES);
        $info = (string) ob_get_clean();
        $this->assertStringContainsString("mode in force => $last: shadow", $info);
        $this->assertMatchesRegularExpression('/\\(newest first; \\d+ older not shown\\)/', $info);
    }

    public function testTheLiveSwitchTurnsAnEnforcingLimitersDenialsIntoShadowOnesAndBack(): void
    {
        // Every call to Valkey: a worker denying locally (the flood fast path) finds the
        // change within 250 ms instead (shadow_mode.rs:
        // a_live_mode_reaches_a_worker_denying_locally_within_250_ms).
        $old = ini_set('checkout_guard.local_denials', '0');
        try {
            $this->liveSwitch();
        } finally {
            ini_set('checkout_guard.local_denials', (string) $old);
        }
    }

    private function liveSwitch(): void
    {
        $name = self::uniqueName('switch');
        $l = $this->named($name);
        $this->assertSame(['allowed' => 5, 'global' => 1], self::drain($l, 'a', 6));
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'set', 'mode=shadow', '--by', 'oncall');
        $this->assertSame(0, $code, $err);
        $this->assertStringContainsString('by oncall', $out);
        $this->assertStringContainsString('new: global=5/0.001 hot_lane=4/0.001 hot_shop=2/0.001 mode=shadow', $out);
        // The very next decision, in this limiter and in one made later (the next request).
        $d = $l->acquire('a');
        $this->assertSame([true, false, true, 'global'], [$d->isAllowed(), $d->wouldAllow(), $d->isShadow(), $d->reason()]);
        $this->assertSame('shadow', $l->health(false)['mode']);
        $this->assertSame('shadow', $this->named($name)->health(false)['mode']);
        ob_start();
        phpinfo(INFO_MODULES);
        $this->assertStringContainsString("$name: shadow", (string) ob_get_clean(), 'phpinfo(): the mode in force');
        $this->assertTrue($this->named($name)->acquire('b')->isAllowed());
        $change = array_values(array_filter($this->log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitChange' && $e['limiter'] === $name));
        $this->assertSame([['enforce', 'shadow']], array_map(fn ($e) => [$e['old_mode'], $e['mode']], $change));
        [$code, $text] = Cli::limiter(self::url(), $name, 'status');
        $this->assertSame(0, $code);
        $this->assertStringContainsString('mode: shadow (live, version 1 by oncall', $text);
        [$code, $out] = Cli::limiter(self::url(), $name, 'status', '--json');
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame(['shadow', 'shadow'], [$st['mode'], $st['mode_live']]);

        [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'mode=default');
        $this->assertSame(0, $code, $err);
        $d = $l->acquire('a');
        $this->assertSame([false, false, false, 'global'], [$d->isAllowed(), $d->wouldAllow(), $d->isShadow(), $d->reason()]);
        $this->assertSame('enforce', $l->health(false)['mode']);
        ob_start();
        phpinfo(INFO_MODULES);
        $this->assertStringContainsString("$name: enforce", (string) ob_get_clean());
        [, $out] = Cli::limiter(self::url(), $name, 'status', '--json');
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame(['enforce', null], [$st['mode'], $st['mode_live']]);

        // A shadow limiter (the option) is enforced live by mode=enforce, and back by default.
        $s = $this->named($sname = self::uniqueName('switch-back'), ['mode' => 'shadow']);
        self::drain($s, 'a', 6);
        [, $out] = Cli::limiter(self::url(), $sname, 'status', '--json');
        $this->assertSame(['shadow', null], [json_decode($out, true)['mode'], json_decode($out, true)['mode_live']], 'the option, as the workers publish it');
        [$code, , $err] = Cli::limiter(self::url(), $sname, 'set', 'mode=enforce');
        $this->assertSame(0, $code, $err);
        $this->assertFalse($s->acquire('a')->isAllowed());
        [$code, , $err] = Cli::limiter(self::url(), $sname, 'set', 'mode=default');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($s->acquire('a')->isAllowed());
    }

    /**
     * A sibling worker (forked: the local-denial table is shared) that has not decided
     * since the switch must not deny from what a worker that knows it learnt: the table's
     * entries are per live version. Before, it denied in enforce mode from the sibling's
     * entries for as long as they were refreshed (found by ModelTest, seed 5).
     */
    public function testASiblingThatMissedTheSwitchDoesNotDenyFromEntriesLearntAfterIt(): void
    {
        $name = self::uniqueName('switch-sibling');
        $this->named($name)->acquire('a');
        [$parent, $child] = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        $pid = pcntl_fork();
        if ($pid === 0) {
            fclose($parent);
            $l = $this->named($name);
            $l->acquire('b');   // decided with the version before the switch
            fwrite($child, "ready\n");
            fgets($child);      // the sibling switched and drained the bucket
            $d = $l->acquire('b');
            fwrite($child, json_encode([$d->isAllowed(), $d->isShadow(), $d->wouldAllow()]) . "\n");
            posix_kill(getmypid(), SIGKILL); // no PHPUnit shutdown in the child
        }
        fclose($child);
        try {
            $this->assertSame("ready\n", fgets($parent));
            [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'mode=shadow');
            $this->assertSame(0, $code, $err);
            // This worker knows the switch, drains the bucket and learns it is empty.
            $l = $this->named($name);
            $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'a', 4));
            $this->assertFalse($l->acquire('a')->wouldAllow());
            fwrite($parent, "go\n");
            $got = json_decode((string) fgets($parent), true);
            $this->assertSame([true, true, false], $got, 'the sibling decides in shadow mode: [isAllowed, isShadow, wouldAllow]');
        } finally {
            pcntl_waitpid($pid, $status);
        }
    }

    public function testABadModeIsRefusedByNameAndNothingIsWritten(): void
    {
        $name = self::uniqueName('switch-bad');
        $this->named($name)->acquire('a');
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'set', 'mode=dry-run');
        $this->assertSame(2, $code);
        $this->assertSame('', $out);
        $this->assertStringContainsString('mode must be "enforce" or "shadow", got "dry-run"', $err);
        $this->assertSame(0, (int) self::redis()->exists("{cg:$name}:limits", "{cg:$name}:limits:v"));
    }
}
