<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The fault matrix and the soak in CI size (scripts/faults.sh short, scripts/soak.sh
 * short): real faults against the running stack under load, for each on_unavailable
 * policy, with the script, with the native module and (deny) over TLS end to end; then
 * steady load with RSS, fds and Valkey clients watched.
 */
final class FaultsTest extends TestCase
{
    public function testEveryFaultEndsInThePolicyNeverInAnErrorAndRecovers(): void
    {
        [$rc, $out] = ProjectScript::run('faults.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('All checks hold.', $out);
        foreach (['allow' => 'paid', 'deny' => 'limited', 'throw' => 'unavailable'] as $policy => $answer) {
            $res = ProjectScript::results("faults/short/$policy/faults.json");
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
            foreach ($rows as $name => $r) {
                $this->assertSame('lua', $r['engine_after'], "$policy / $name: Valkey without the module");
            }
        }
        // The same faults with the native module in Valkey (engine auto), and one more: a
        // restart without the module, where the script takes over, then the module again.
        $res = ProjectScript::results('faults/short/module-deny/faults.json');
        $rows = array_column($res['rows'], null, 'fault');
        $this->assertCount(8, $rows);
        foreach ($rows as $name => $r) {
            $this->assertSame(0, $r['php_errors'], "module / $name");
            $this->assertSame(0, $r['crashes'], "module / $name");
            $this->assertLessThan(2.0, $r['recovery_s'], "module / $name");
            $this->assertSame('module', $r['engine_after'], "module / $name");
        }
        $without = $rows['Valkey restarted without the module, then with it'];
        $this->assertGreaterThan(0, $without['engines_during']['lua'] ?? 0, json_encode($without));

        // The same faults over TLS end to end: Debian's redis-server serving TLS only, the
        // checkout's URL rediss:// with the run's CA in checkout_guard.tls.cafile, the proxy
        // forwarding the TLS bytes. A stop/start makes every worker handshake again; one more
        // fault: a restart with another CA's certificate, where every handshake is refused.
        $res = ProjectScript::results('faults/short/tls-deny/faults.json');
        $rows = array_column($res['rows'], null, 'fault');
        $this->assertCount(8, $rows);
        $this->assertSame([], $res['tls']['left_out']);
        $stopped = $rows['Valkey stopped, then started (empty)'];
        $this->assertGreaterThan(0, $stopped['decisions_by_policy']);
        $this->assertSame('limited', array_key_first(array_filter($stopped['checkouts'], fn ($n) => $n === max($stopped['checkouts']))), json_encode($stopped['checkouts']));
        foreach ($rows as $name => $r) {
            $this->assertSame(0, $r['php_errors'], "tls / $name");
            $this->assertSame(0, $r['crashes'], "tls / $name");
            $this->assertNotNull($r['recovery_s'], "tls / $name");
            $this->assertLessThan(2.0, $r['recovery_s'], "tls / $name");
            $this->assertLessThanOrEqual($res['workers'] + 1, $r['connections_after'], "tls / $name");
            $this->assertSame('lua', $r['engine_after'], "tls / $name");
        }
        $this->assertGreaterThanOrEqual(1, $rows['a php-fpm worker killed mid-request (SIGKILL)']['workers_killed']);
        $wrong = $rows["TLS: Valkey restarted with another CA's certificate (handshakes refused), then its own"];
        $this->assertGreaterThan(0, $wrong['decisions_by_policy'], json_encode($wrong));
        $this->assertLessThan(2.0, $wrong['recovery_s'], json_encode($wrong));
        // Really TLS: the server had no plain port, every connection the proxy saw (the
        // workers' and the probe's, the first ones and those after each restart) began with
        // a TLS handshake record, and the probe's limiter verified against the run's CA.
        $tls = $res['tls'];
        $this->assertSame('0', $tls['server_port'], json_encode($tls));
        $this->assertSame((string) $res['valkey_port'], $tls['server_tls_port'], json_encode($tls));
        $this->assertSame(0, $tls['proxy_connections']['plain'], json_encode($tls));
        $this->assertGreaterThan($res['workers'], $tls['proxy_connections']['tls'], json_encode($tls));
        $this->assertStringStartsWith('rediss://', $res['url']);
        $this->assertStringContainsString('verified against cafile', (string) $tls['probe_health_tls']);
    }

    public function testTheSoakStaysFlat(): void
    {
        [$rc, $out] = ProjectScript::run('soak.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $soak = ProjectScript::results('soak/short/soak.json');
        $this->assertGreaterThanOrEqual(8, count($soak['samples']));
        foreach ($soak['checks'] as $c) {
            $this->assertTrue($c['holds'], $c['check']);
        }
        $this->assertGreaterThan(1000, $soak['answers']['paid'] ?? 0);
    }
}
