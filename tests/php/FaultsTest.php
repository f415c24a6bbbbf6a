<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The fault matrix and the soak in CI size (scripts/faults.sh short, scripts/soak.sh
 * short): real faults against the running stack under load, for each on_unavailable
 * policy; then steady load with RSS, fds and Valkey clients watched.
 */
final class FaultsTest extends TestCase
{
    private static function runScript(string $script, string $mode): array
    {
        $root = dirname(__DIR__, 2);
        exec('bash ' . escapeshellarg("$root/scripts/$script") . " $mode 2>&1", $lines, $rc);
        return [$rc, implode("\n", $lines)];
    }

    public function testEveryFaultEndsInThePolicyNeverInAnErrorAndRecovers(): void
    {
        [$rc, $out] = self::runScript('faults.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('All checks hold.', $out);
        $root = dirname(__DIR__, 2);
        foreach (['allow' => 'paid', 'deny' => 'limited', 'throw' => 'unavailable'] as $policy => $answer) {
            $res = json_decode((string) file_get_contents("$root/.run/faults/short/$policy/faults.json"), true, 512, JSON_THROW_ON_ERROR);
            $rows = array_column($res['rows'], null, 'fault');
            $this->assertCount(7, $rows);
            // Valkey stopped: the policy answered the checkouts, as configured.
            $stopped = $rows['Valkey stopped, then started (empty)'];
            $this->assertGreaterThan(0, $stopped['decisions_by_policy']);
            $this->assertSame($answer, array_key_first(array_filter($stopped['checkouts'], fn ($n) => $n === max($stopped['checkouts']))), "$policy: " . json_encode($stopped['checkouts']));
            foreach ($rows as $name => $r) {
                $this->assertSame(0, $r['php_errors'], "$policy / $name");
                $this->assertSame(0, $r['crashes'], "$policy / $name");
                $this->assertNotNull($r['recovery_s'], "$policy / $name");
                $this->assertLessThan(2.0, $r['recovery_s'], "$policy / $name");
                $this->assertLessThanOrEqual($res['workers'] + 1, $r['connections_after'], "$policy / $name");
            }
            $this->assertGreaterThanOrEqual(1, $rows['a php-fpm worker killed mid-request (SIGKILL)']['workers_killed']);
            $this->assertGreaterThan(0, array_sum(array_column($res['rows'], 'workers_recycled')), 'pm.max_requests recycled workers');
        }
    }

    public function testTheSoakStaysFlat(): void
    {
        [$rc, $out] = self::runScript('soak.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $root = dirname(__DIR__, 2);
        $soak = json_decode((string) file_get_contents("$root/.run/soak/short/soak.json"), true, 512, JSON_THROW_ON_ERROR);
        $this->assertGreaterThanOrEqual(8, count($soak['samples']));
        foreach ($soak['checks'] as $c) {
            $this->assertTrue($c['holds'], $c['check']);
        }
        $this->assertGreaterThan(1000, $soak['answers']['paid'] ?? 0);
    }
}
