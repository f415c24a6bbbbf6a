<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;

/**
 * Decisions across live changes (`checkout-guard limiter set`), deploys with other values,
 * data loss and limits written by hand: a bucket keeps its level in tokens, refills only at
 * the rate in force, expires on the new limits' schedule; the CLI shows and repairs what is
 * wrong; a live change never becomes an exception in checkout code.
 * Each test runs its own Valkey (DecisionTestCase); formerly part of DecisionSeamsTest.
 */
final class LiveChangeDecisionsTest extends DecisionTestCase
{
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
}
