<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The token-bucket semantics, against a real Valkey: the global bucket, the hot lane and
 * the per-shop hot bucket, the demo's three cases (no hot shop, a hot shop below its cap,
 * a hot shop at its cap), reasons, remaining,
 * retryAfter, hot marks, reset and key hygiene.
 */
final class BucketsTest extends LimiterTestCase
{
    public function testCaseOneNoHotShopOthersMayUseTheWholeGlobalBudget(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(4)]);
        $this->assertSame(['allowed' => 6], self::drain($l, 'shop-a', 6));
        $this->assertSame(['allowed' => 4, 'global' => 1], self::drain($l, 'shop-b', 5));
        $d = $l->acquire('shop-a');
        $this->assertFalse($d->isAllowed());
        $this->assertSame('global', $d->reason());
        $this->assertFalse($d->isHotShop());
    }

    public function testCaseTwoHotShopBelowItsCapBothPass(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(4)]);
        $l->markHot('flash', 60);
        $this->assertSame(['allowed' => 3], self::drain($l, 'flash', 3));
        $this->assertSame(['allowed' => 3], self::drain($l, 'quiet', 3));
        $d = $l->acquire('flash');
        $this->assertTrue($d->isAllowed() && $d->isHotShop());
        $this->assertSame(0, $d->remaining(), 'the hot shop bucket is the tightest');
    }

    public function testCaseThreeHotShopAtItsCapStopsAndTheRestStaysForOthers(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(4)]);
        $l->markHot('flash', 60);
        $this->assertSame(['allowed' => 4, 'hot_shop' => 96], self::drain($l, 'flash', 100));
        // The flood took nothing beyond its cap: the other shops still have 6 of 10.
        $this->assertSame(['allowed' => 6, 'global' => 1], self::drain($l, 'quiet', 7));
    }

    public function testHotLaneKeepsGlobalMinusLaneForOthersHoweverManyShopsAreHot(): void
    {
        $l = $this->limiter([
            'global' => self::bucket(20),
            'hot_lane' => self::bucket(12),
            'hot_shop' => self::bucket(5),
        ]);
        $hotAllowed = 0;
        foreach (range(1, 6) as $i) {
            $l->markHot("hot-$i", 60);
        }
        foreach (range(1, 6) as $i) {
            $by = self::drain($l, "hot-$i", 10);
            $hotAllowed += $by['allowed'] ?? 0;
        }
        // 6 hot shops x cap 5 would be 30; the lane caps all of them together at 12.
        $this->assertSame(12, $hotAllowed);
        $this->assertSame(['allowed' => 8, 'global' => 2], self::drain($l, 'ordinary', 10));
    }

    public function testReasonNamesTheFirstBucketThatLackedTokensInOrder(): void
    {
        $l = $this->limiter([
            'global' => self::bucket(10),
            'hot_lane' => self::bucket(6),
            'hot_shop' => self::bucket(4),
            'hot_shops' => ['h1', 'h2'],
        ]);
        $this->assertSame(['allowed' => 4, 'hot_shop' => 1], self::drain($l, 'h1', 5));
        // h1's own bucket is empty but h2's is not: the lane (6) has 2 left for h2.
        $this->assertSame(['allowed' => 2, 'hot_lane' => 1], self::drain($l, 'h2', 3));
        $this->assertSame(['allowed' => 4, 'global' => 1], self::drain($l, 'cold', 5));
        // Global is checked first, so an exhausted global wins over the hot buckets.
        $this->assertSame('global', $l->acquire('h1')->reason());
    }

    public function testADenialTakesNothingFromAnyBucket(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(3)]);
        $l->markHot('h', 60);
        $this->assertSame(['allowed' => 3], self::drain($l, 'h', 3));
        // 50 denials of the hot shop for its own bucket; global must still hold 7.
        $this->assertSame(['hot_shop' => 50], self::drain($l, 'h', 50));
        $d = $l->acquire('other');
        $this->assertSame(6, $d->remaining());
        // A multi-token request that does not fit takes nothing either.
        $l2 = $this->limiter(['global' => self::bucket(5)]);
        $l2->acquire('s', 4);
        $this->assertSame('global', $l2->acquire('s', 2)->reason());
        $this->assertSame(0, $l2->acquire('s', 1)->remaining());
    }

    public function testRemainingAndRetryAfter(): void
    {
        // 2 tokens a second, capacity 2: after two acquisitions the next waits ~0.5 s.
        $l = $this->limiter(['global' => self::bucket(2, 2.0)]);
        $a = $l->acquire('s');
        $this->assertSame([true, 'allowed', 0.0, 1], [$a->isAllowed(), $a->reason(), $a->retryAfter(), $a->remaining()]);
        $this->assertSame(0, $l->acquire('s')->remaining());
        $d = $l->acquire('s');
        $this->assertFalse($d->isAllowed());
        $this->assertGreaterThan(0.3, $d->retryAfter());
        $this->assertLessThanOrEqual(0.5, $d->retryAfter());
        $this->assertSame(0, $d->remaining());
        // Waiting retryAfter (plus a little) lets the request through, as promised.
        usleep((int) ($d->retryAfter() * 1e6) + 20000);
        $this->assertTrue($l->acquire('s')->isAllowed());
        // Two tokens need the bucket to refill two: retryAfter covers both.
        $this->assertGreaterThan(0.5, $l->acquire('s', 2)->retryAfter());
    }

    public function testRetryAfterWaitsForTheSlowestBucket(): void
    {
        $l = $this->limiter(['global' => self::bucket(5, 5.0), 'hot_shop' => self::bucket(1, 0.5)]);
        $l->markHot('h', 60);
        $this->assertTrue($l->acquire('h')->isAllowed());
        $d = $l->acquire('h');
        $this->assertSame('hot_shop', $d->reason());
        // The hot-shop bucket refills one token in 2 s.
        $this->assertGreaterThan(1.8, $d->retryAfter());
        $this->assertLessThanOrEqual(2.0, $d->retryAfter());
    }

    public function testMarkHotExpiresAndIsSeenByOtherProcesses(): void
    {
        $name = self::uniqueName();
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(10), 'hot_shop' => self::bucket(2)]);
        $this->assertFalse($l->isHot('s'));
        $l->markHot('s', 1);
        $this->assertTrue($l->isHot('s'));
        // Another PHP process (another worker) sees the mark and applies the hot bucket.
        $code = sprintf(
            '$l = new CheckoutGuard\RateLimiter(["name" => %s, "url" => %s, "global" => ["capacity" => 10, "refill_per_second" => 0.001], "hot_shop" => ["capacity" => 2, "refill_per_second" => 0.001]]);'
            . ' $r = []; for ($i = 0; $i < 3; $i++) { $d = $l->acquire("s"); $r[] = $d->reason() . ($d->isHotShop() ? "/hot" : ""); } echo implode(",", $r);',
            var_export($name, true),
            var_export(self::url(), true)
        );
        $out = shell_exec(implode(' ', array_map('escapeshellarg', [...self::phpWithExtension(), '-r', $code])));
        $this->assertSame('allowed/hot,allowed/hot,hot_shop/hot', $out);
        usleep(1_100_000);
        $this->assertFalse($l->isHot('s'));
        $this->assertSame('allowed', $l->acquire('s')->reason(), 'no longer hot: global only');
        $this->assertFalse($l->acquire('s')->isHotShop());
    }

    public function testUnmarkHotAndStaticHotShops(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(1), 'hot_shops' => ['always']]);
        $l->markHot('s', 60);
        $l->unmarkHot('s');
        $this->assertFalse($l->isHot('s'));
        $this->assertTrue($l->isHot('always'));
        $l->unmarkHot('always');
        $this->assertTrue($l->isHot('always'), 'hot_shops stay hot');
        $this->assertSame(['allowed' => 1, 'hot_shop' => 1], self::drain($l, 'always', 2));
    }

    public function testResetRefillsEveryBucketButKeepsHotMarks(): void
    {
        $l = $this->limiter(['global' => self::bucket(5), 'hot_lane' => self::bucket(3), 'hot_shop' => self::bucket(2)]);
        $l->markHot('h', 60);
        self::drain($l, 'h', 5);
        self::drain($l, 'c', 5);
        $this->assertSame('global', $l->acquire('c')->reason());
        $l->reset();
        $this->assertTrue($l->isHot('h'));
        $this->assertSame(['allowed' => 2, 'hot_shop' => 1], self::drain($l, 'h', 3));
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'c', 4));
    }

    public function testLimitersWithDifferentNamesShareNothing(): void
    {
        $a = $this->limiter(['global' => self::bucket(2)]);
        $b = $this->limiter(['global' => self::bucket(2)]);
        $this->assertSame(['allowed' => 2, 'global' => 1], self::drain($a, 's', 3));
        $this->assertSame(['allowed' => 2], self::drain($b, 's', 2));
    }

    public function testKeysShareOneHashTagAndIdleBucketsExpire(): void
    {
        $name = self::uniqueName('keys');
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(10, 10.0), 'hot_shop' => self::bucket(5, 5.0)]);
        $l->markHot("we{ird}:shop", 30);
        $l->acquire("we{ird}:shop", 3);
        $r = self::redis();
        $keys = $r->keys("{cg:$name}:*");
        sort($keys);
        $this->assertSame([
            "{cg:$name}:b:global",
            "{cg:$name}:b:shop:we{ird}:shop",
            "{cg:$name}:hot:we{ird}:shop",
            // What this limiter runs with, published for the CLI (whenever missing or different).
            "{cg:$name}:settings",
        ], $keys);
        $this->assertSame('global=10/10 hot_shop=5/5', $r->get("{cg:$name}:settings"));
        // Three tokens at 10/s and 5/s: full again after 0.3 s and 0.6 s.
        $this->assertLessThanOrEqual(301, $r->pttl("{cg:$name}:b:global"));
        $this->assertGreaterThan(0, $r->pttl("{cg:$name}:b:global"));
        $this->assertLessThanOrEqual(601, $r->pttl("{cg:$name}:b:shop:we{ird}:shop"));
        usleep(700_000);
        $left = $r->keys("{cg:$name}:*");
        sort($left);
        $this->assertSame(["{cg:$name}:hot:we{ird}:shop", "{cg:$name}:settings"], $left);
    }

    public function testTheDecisionUsesValkeysClockNotPhps(): void
    {
        // One token per second. Whatever PHP's clock says, only Valkey's TIME counts: the
        // bucket state is a timestamp written by Valkey and compared with Valkey's TIME.
        $name = self::uniqueName();
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(1, 1.0)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$sec, $usec] = self::redis()->time();
        $stored = (int) self::redis()->get("{cg:$name}:b:global");
        $valkeyNow = (int) $sec * 1_000_000 + (int) $usec;
        $this->assertGreaterThan($valkeyNow, $stored);
        $this->assertLessThanOrEqual($valkeyNow + 1_000_000, $stored);
    }
}
