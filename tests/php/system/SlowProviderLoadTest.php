<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * In-flight leases under load (issue 37; scripts/loadtest.sh slow-provider, short: four
 * runs of 24 s, about 2 minutes): the mock provider serves 16 charges at once and from 8 s
 * to 16 s of each run takes ~1.5 s per charge instead of ~40 ms; php-fpm has 24 workers; the
 * flood (40 users at flash-1) and the ordinary shops (10 users). With the buckets alone the
 * admitted flood holds every worker through the incident and the ordinary shops wait; with
 * `in_flight` (global 16, hot_shop 6) the ordinary shops keep their baseline success and
 * p95 (within 1.5x) and the hot shop never has more than 6 payment calls in flight.
 */
final class SlowProviderLoadTest extends TestCase
{
    public function testInFlightLeasesKeepTheOrdinaryShopsAtTheirBaseline(): void
    {
        $before = self::stackProcesses(ProjectScript::root());
        [$rc, $out] = ProjectScript::run('loadtest.sh', 'slow-provider');
        $this->assertSame($before, self::stackProcesses(ProjectScript::root()), 'the run left processes behind');
        $this->assertFileExists(ProjectScript::root() . '/.run/loadtest/slow-provider/report.json', $out);
        $this->assertFileExists(ProjectScript::root() . '/.run/loadtest/slow-provider/chart.png');
        $res = ProjectScript::results('loadtest/slow-provider/report.json');
        $this->assertTrue($res['in_flight_judged'], 'slow-inflight had `in_flight` set');
        ['baseline' => $base, 'buckets' => $buckets, 'inflight' => $inflight] = $res['runs'];

        // The scenario shows the problem: with the buckets alone the pool fills during the
        // incident and the ordinary shops wait (or fail).
        $this->assertGreaterThanOrEqual(1.0, $buckets['fpm']['full_s_incident'], json_encode($buckets['fpm']));
        $this->assertTrue(
            $buckets['ordinary']['ok'] < $base['ordinary']['ok'] - 0.05
                || $buckets['ordinary_incident']['p95_ms'] > 1.5 * $base['ordinary_incident']['p95_ms'],
            json_encode([$buckets['ordinary'], $buckets['ordinary_incident'], $base['ordinary_incident']])
        );

        // With in_flight: the ordinary shops at their baseline, the hot shop at its share.
        $this->assertGreaterThanOrEqual($base['ordinary']['ok'] - 0.02, $inflight['ordinary']['ok'], $out);
        $this->assertLessThanOrEqual(1.5 * $base['ordinary']['p95_ms'], $inflight['ordinary']['p95_ms'], $out);
        $this->assertLessThanOrEqual(6, $inflight['hot']['max_in_flight'], $out);
        $this->assertLessThanOrEqual(16, $inflight['max_in_flight'], $out);
        $this->assertGreaterThan(0, $inflight['limited_reasons']['in_flight_hot_shop'] ?? 0, 'the leases, not the buckets, denied the flood in the incident');
        $this->assertSame(0, $rc, $out);
    }

    /** The load stack's live processes (not zombies): valkey, provider, php-fpm, nginx masters. */
    private static function stackProcesses(string $root): array
    {
        exec('ps -eo stat=,args=', $ps);
        $mine = array_filter($ps, fn ($l) => !str_starts_with(ltrim($l), 'Z')
            && (str_contains($l, "$root/.run/loadtest/") || str_contains($l, "$root/loadtest/provider.py")));
        sort($mine);
        return array_values($mine);
    }
}
