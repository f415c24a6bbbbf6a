<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Several PHP processes deciding at once: over any interval t from a full state, the
 * allowed requests of a bucket never exceed capacity + rate * t.
 */
final class ConcurrencyTest extends LimiterTestCase
{
    private static function valkeyMicros(\Redis $r): int
    {
        [$s, $us] = $r->time();
        return (int) $s * 1_000_000 + (int) $us;
    }

    public function testAllowedNeverExceedCapacityPlusRateTimesElapsed(): void
    {
        $name = self::uniqueName('conc');
        // Six processes: two hot shops (two processes for hot-1) and three ordinary ones.
        $shops = ['hot-1', 'hot-1', 'hot-2', 'cold-1', 'cold-2', 'cold-3'];
        $redis = self::redis();
        $start = self::valkeyMicros($redis);
        $procs = [];
        foreach ($shops as $i => $shop) {
            $cmd = [...self::phpWithExtension(), __DIR__ . '/../fixtures/hammer.php', self::url(), $name, '1.5', $shop];
            $procs[$i] = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes[$i]);
        }
        $results = [];
        foreach ($procs as $i => $p) {
            $out = stream_get_contents($pipes[$i][1]);
            $err = stream_get_contents($pipes[$i][2]);
            $this->assertSame(0, proc_close($p), "worker $i failed: $err");
            $results[$i] = json_decode(trim($out), true, 512, JSON_THROW_ON_ERROR);
        }
        $elapsed = (self::valkeyMicros($redis) - $start) / 1e6;

        $allowed = fn (array $idx) => array_sum(array_map(fn ($i) => $results[$i]['allowed'] ?? 0, $idx));
        $decisions = array_sum(array_map('array_sum', $results));
        $total = $allowed(array_keys($shops));
        $hot1 = $allowed([0, 1]);
        $hot = $allowed([0, 1, 2]);

        // The bounds, from a full state over the measured interval.
        $this->assertLessThanOrEqual(40 + 50 * $elapsed, $total, "global: $total in {$elapsed}s");
        $this->assertLessThanOrEqual(20 + 20 * $elapsed, $hot, "hot lane: $hot in {$elapsed}s");
        $this->assertLessThanOrEqual(10 + 2 * $elapsed, $hot1, "hot-1: $hot1 in {$elapsed}s");
        // And the limiter was really saturated, not idle: most decisions were denials and
        // the buckets let through at least their capacity plus most of their refill.
        $this->assertGreaterThan(5 * $total, $decisions, 'the load must exceed the limit');
        $this->assertGreaterThanOrEqual(40 + 50 * 1.5 * 0.8, $total);
        // The hot shops also compete with the ordinary ones for global, so their share of
        // it is not fixed; what is certain is that hot-1 got at least its burst and that
        // the hot buckets did bind (hot shops were denied by them, not only by global).
        // hot-1's own bucket refills at 2/s, far below any share of global's 50/s its two
        // processes win, so it binds however the machine schedules the six processes.
        $this->assertGreaterThanOrEqual(10, $hot1, "hot-1: $hot1");
        $hotDenials = array_sum(array_map(
            fn ($i) => ($results[$i]['hot_shop'] ?? 0) + ($results[$i]['hot_lane'] ?? 0),
            [0, 1, 2]
        ));
        $this->assertGreaterThan(0, $hotDenials, 'the hot buckets were reached');
        // Every denial of a hot shop came from a hot bucket or global, never "unavailable".
        foreach ($results as $r) {
            $this->assertArrayNotHasKey('unavailable', $r);
        }
    }
}
