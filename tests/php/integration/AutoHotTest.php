<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * auto_hot: a shop whose share of the global bucket's consumption over the sliding window
 * exceeds the threshold becomes hot for the TTL, for every worker at once, decided in the
 * same script call as the decision. Shares here are exact (everything in one window).
 */
final class AutoHotTest extends LimiterTestCase
{
    private EventLog $log;

    protected function setUp(): void
    {
        $this->log = new EventLog(self::redis());
        $this->log->mark();
    }

    /** @var array<int, string> limiter name by object id */
    private array $names = [];

    private function nameOf(RateLimiter $l): string
    {
        return $this->names[spl_object_id($l)];
    }

    private function auto(array $autoHot = [], array $options = []): RateLimiter
    {
        $name = self::uniqueName('ah');
        $l = $this->limiter($options + [
            'name' => $name,
            'global' => self::bucket(10_000),
            'hot_shop' => self::bucket(5),
            // One window for the whole test: no share is diluted by a window boundary.
            'auto_hot' => $autoHot + ['window_seconds' => 600, 'min_tokens' => 10],
        ]);
        $this->names[spl_object_id($l)] = $name;
        return $l;
    }

    /** Acquires in the order given (shop per call), counting reasons per shop. */
    private static function sequence(RateLimiter $l, array $shops): array
    {
        $by = [];
        foreach ($shops as $shop) {
            $r = $l->acquire($shop)->reason();
            $by[$shop][$r] = ($by[$shop][$r] ?? 0) + 1;
        }
        return $by;
    }

    /** $n rounds of: one call for each of $others distinct ordinary shops, then $mine for `$shop`. */
    private static function rounds(int $n, int $others, string $shop, int $mine): array
    {
        $seq = [];
        for ($i = 0; $i < $n; $i++) {
            for ($j = 0; $j < $others; $j++) {
                $seq[] = "ordinary-$i-$j";
            }
            for ($k = 0; $k < $mine; $k++) {
                $seq[] = $shop;
            }
        }
        return $seq;
    }

    private function hotEvents(): array
    {
        return array_values(array_filter($this->log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitHot'));
    }

    public function testAShopCrossingTheThresholdBecomesHotForEveryWorkerAndIsRecorded(): void
    {
        $l = $this->auto();
        // 2 of every 5 tokens: 40% > 30%; hot once it has taken min_tokens (10).
        $by = self::sequence($l, self::rounds(5, 3, 'flood', 2));
        $this->assertSame(['allowed' => 10], $by['flood']);
        $this->assertTrue($l->isHot('flood'));
        // Every worker: another limiter object of the same name (as another process) sees it.
        $other = $this->limiter(['name' => $this->nameOf($l), 'global' => self::bucket(10_000), 'hot_shop' => self::bucket(5)]);
        $this->assertTrue($other->isHot('flood'));
        // From now on the flood meets its own bucket: 5 tokens, then hot_shop.
        $this->assertSame(['allowed' => 5, 'hot_shop' => 5], self::drain($l, 'flood', 10));
        $this->assertTrue($l->acquire('ordinary-x')->isAllowed());
        // Why and when, recorded once.
        $events = $this->hotEvents();
        $this->assertCount(1, $events);
        $e = $events[0];
        $this->assertSame(['flood', 'auto_hot', 0.3, 600.0, 300], [$e['shop.id'], $e['reason'], $e['threshold'], $e['window.s'], $e['ttl.s']]);
        $this->assertEqualsWithDelta(0.4, $e['share'], 0.001);
        $this->assertSame($e['timestamp'] + 300_000, $e['hot_until']);
        $ttl = self::redis()->ttl('{cg:' . $this->nameOf($l) . '}:hot:flood');
        $this->assertGreaterThan(290, $ttl);
        $this->assertLessThanOrEqual(300, $ttl);
    }

    public function testAShopJustUnderTheThresholdStaysOrdinary(): void
    {
        $l = $this->auto(['share' => 0.3]);
        // 1 of every 4 tokens: 25%, at every point of the sequence once past min_tokens.
        $by = self::sequence($l, self::rounds(40, 3, 'steady', 1));
        $this->assertSame(['allowed' => 40], $by['steady']);
        $this->assertFalse($l->isHot('steady'));
        // And 29 of 100 stays under a 30% share too.
        $l2 = $this->auto(['share' => 0.3]);
        self::sequence($l2, self::rounds(1, 71, 'close', 0));
        self::sequence($l2, self::rounds(1, 0, 'close', 29));
        $this->assertFalse($l2->isHot('close'));
        $this->assertSame([], $this->hotEvents());
    }

    public function testABurstShorterThanTheWindowIsMeasuredAgainstTheWholeWindow(): void
    {
        $l = $this->auto();
        // The window already holds 100 tokens of ordinary shops; then a burst of 30 calls
        // by one shop: 100% of the traffic while it lasts, 23% of the window.
        self::sequence($l, self::rounds(1, 100, 'burst', 0));
        self::sequence($l, self::rounds(1, 0, 'burst', 30));
        $this->assertFalse($l->isHot('burst'));
        // Sustained, the same shop crosses 30% of the window: 44 of 144 (30.6%).
        self::sequence($l, self::rounds(1, 0, 'burst', 14));
        $this->assertTrue($l->isHot('burst'));
        // A shop under min_tokens is never hot, whatever its share of a quiet window.
        $quiet = $this->auto(['min_tokens' => 50]);
        self::sequence($quiet, self::rounds(1, 0, 'lonely', 49));
        $this->assertFalse($quiet->isHot('lonely'));
        $quiet->acquire('lonely');
        $this->assertTrue($quiet->isHot('lonely'));
    }

    public function testTheWindowSlides(): void
    {
        // A 1 s window: a shop's tokens of the previous window count less as it passes.
        $l = $this->auto(['window_seconds' => 1, 'min_tokens' => 1, 'share' => 0.5]);
        self::sequence($l, self::rounds(1, 0, 'early', 20));
        $this->assertTrue($l->isHot('early'), '100% of the window');
        usleep(2_100_000);
        // Two windows later its tokens are gone: 1 of 3 fresh tokens is 33% < 50%.
        self::sequence($l, ['a', 'b', 'late']);
        $this->assertFalse($l->isHot('late'));
    }

    public function testDeclaredHotShopsAndMarksAreLeftAsTheyAre(): void
    {
        $l = $this->auto([], ['hot_shops' => ['vip']]);
        $l->markHot('marked', 30);
        self::sequence($l, self::rounds(10, 1, 'vip', 1));
        self::sequence($l, self::rounds(10, 1, 'marked', 1));
        $r = self::redis();
        $name = $this->nameOf($l);
        $this->assertSame('1', $r->get("{cg:$name}:hot:marked"), 'a mark is not replaced by an automatic one');
        $this->assertSame(0, (int) $r->exists("{cg:$name}:hot:vip"), 'hot_shops need no mark');
        $this->assertSame([], $this->hotEvents());
    }
}
