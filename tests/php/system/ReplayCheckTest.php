<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * scripts/replay-check.sh short: the load test's flood run on the real stack with the
 * limiter off and on, then `checkout-guard replay` on their events, checked against what
 * the runs really did (docs/scan.md, "What-if replay"); and the same flood against a slow
 * provider, limiter off and on with `in_flight` (CHECKOUT_IN_FLIGHT): the replay with that
 * in_flight reproduces the in-flight denials per shop and predicts them from the off run.
 */
final class ReplayCheckTest extends TestCase
{
    public function testTheReplayPredictsWhatTheLimiterAndTheProviderDid(): void
    {
        [$rc, $out] = ProjectScript::run('replay-check.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('All checks hold.', $out);
        $res = ProjectScript::results('replay/short/results.json');
        $this->assertCount(9, $res['checks']);
        foreach ($res['checks'] as $c) {
            $this->assertTrue($c['holds'], $c['check'] . ': ' . $c['measured']);
        }
        // The runs were floods: the off run's provider answered 429s, the on run's limiter denied.
        $this->assertGreaterThan(100, $res['off']['provider_429']);
        $this->assertGreaterThan(100, $res['on']['denied']);
        $this->assertEqualsWithDelta($res['on']['hot_admitted_per_s'], $res['predicted']['hot_admitted_per_s'], 0.05 * $res['on']['hot_admitted_per_s']);
        $this->assertSame(0, $res['predicted']['provider_429']);
        // In-flight leases: the in-flight run's leases bound the hot shop (its in-flight
        // denials), and its own events replayed with its in_flight give them back within
        // 5% (or 5) per shop.
        $f = $res['in_flight'];
        $this->assertGreaterThanOrEqual(50, $f['on']['hot_in_flight_denied']);
        $this->assertEqualsWithDelta($f['on']['in_flight_denied'], $f['replayed']['in_flight_denied'], max(5, 0.05 * $f['on']['in_flight_denied']));
        foreach ($f['per_shop'] as $row) {
            $this->assertTrue($row['holds'], json_encode($row));
        }
        $this->assertEqualsWithDelta($f['on']['hot_admitted_per_s'], $f['predicted']['hot_admitted_per_s'], 0.10 * $f['on']['hot_admitted_per_s']);
    }
}
