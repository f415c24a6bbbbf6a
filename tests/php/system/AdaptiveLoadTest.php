<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The adaptive budget under load (issue 27; scripts/loadtest.sh adaptive, short: two runs
 * of 45 s): the mock provider's real payment limit moves from 60% to 40% to 100% of the
 * limiter's configured global rate while the flood and the ordinary shops run, once with
 * the limiter as configured and once with `adaptive` (recover_seconds 6). With adaptive
 * on, fewer payment calls are answered 429, and the rate the limiter lets through follows
 * the provider's real limit in every phase, from 5 s after each change.
 *
 * The bounds are looser than the report's 10% (docs/loadtest.md, "Adaptive budget"): a
 * short run on a busy 2-core machine measures each phase over 10 s, and CPU stalls of the
 * load generator move a phase's rate by several percent.
 */
final class AdaptiveLoadTest extends TestCase
{
    /** The admitted rate's distance from the real limit that the test allows, per phase. */
    private const TOLERANCE = 0.20;

    public function testTheBudgetFollowsTheProvidersRealLimit(): void
    {
        $before = self::stackProcesses(ProjectScript::root());
        [$rc, $out] = ProjectScript::run('loadtest.sh', 'adaptive');
        $this->assertSame($before, self::stackProcesses(ProjectScript::root()), 'the run left processes behind');
        $this->assertFileExists(ProjectScript::root() . '/.run/loadtest/adaptive/report.json', $out);
        $res = ProjectScript::results('loadtest/adaptive/report.json');
        $off = $res['runs']['off'];
        $on = $res['runs']['on'];
        $this->assertFileExists(ProjectScript::root() . '/.run/loadtest/adaptive/chart.png');
        $this->assertTrue($res['adaptive_judged'], 'the adaptive-on run had `adaptive` set');
        $this->assertSame('on', $on['adaptive']);
        $this->assertSame('off', $off['adaptive']);

        // The scenario shows the problem: without adaptation the limiter keeps admitting
        // the configured rate, well past the provider's real limit in phases 1 and 2.
        $this->assertSame([0.6, 0.4, 1.0], array_map(fn ($p) => (float) $p['limit_share'], $off['phases']));
        foreach (array_slice($off['phases'], 0, 2) as $p) {
            $this->assertGreaterThan($p['limit'] * (1 + self::TOLERANCE), $p['admitted_per_s'], json_encode($p));
        }
        $this->assertGreaterThan(0.1, $off['share_429']);

        // With adaptation: fewer 429s, and the admitted rate near the real limit in every phase.
        $this->assertLessThan($off['share_429'], $on['share_429'], $out);
        foreach ($on['phases'] as $p) {
            $this->assertEqualsWithDelta(
                $p['limit'],
                $p['admitted_per_s'],
                $p['limit'] * self::TOLERANCE,
                "phase {$p['phase']}: " . json_encode($p)
            );
        }
        $this->assertNotNull($on['recovery_s'], 'the budget climbed back to the configured rate in the last phase');
        $this->assertGreaterThan(0, $on['adapt_events'], 'RateLimitAdapt events say why the budget moved');
        // The report judges every phase at 10% and exits 1 when one misses; the test judges
        // the phases at TOLERANCE above (a 2-core CI machine's stalls), so a phase between
        // the two bounds is the only failed check it lets through. Any other is a failure.
        $failed = array_values(array_filter($res['checks'], fn ($c) => $c['judged'] && !$c['holds']));
        $others = array_filter($failed, fn ($c) => !str_starts_with($c['check'], 'adaptive-on, phase '));
        $this->assertSame([], array_values($others), $out);
        $this->assertSame($failed === [] ? 0 : 1, $rc, $out);
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
