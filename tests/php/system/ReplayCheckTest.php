<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * scripts/replay-check.sh short: the load test's flood run on the real stack with the
 * limiter off and on, then `checkout-guard replay` on their events, checked against what
 * the runs really did (docs/scan.md, "What-if replay").
 */
final class ReplayCheckTest extends TestCase
{
    public function testTheReplayPredictsWhatTheLimiterAndTheProviderDid(): void
    {
        [$rc, $out] = ProjectScript::run('replay-check.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('All checks hold.', $out);
        $res = ProjectScript::results('replay/short/results.json');
        $this->assertCount(5, $res['checks']);
        foreach ($res['checks'] as $c) {
            $this->assertTrue($c['holds'], $c['check'] . ': ' . $c['measured']);
        }
        // The runs were floods: the off run's provider answered 429s, the on run's limiter denied.
        $this->assertGreaterThan(100, $res['off']['provider_429']);
        $this->assertGreaterThan(100, $res['on']['denied']);
        $this->assertEqualsWithDelta($res['on']['hot_admitted_per_s'], $res['predicted']['hot_admitted_per_s'], 0.05 * $res['on']['hot_admitted_per_s']);
        $this->assertSame(0, $res['predicted']['provider_429']);
    }
}
