<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * Health checks under overload, in CI size (scripts/health-experiment.sh short). The
 * Kubernetes manifests those probes come from are checked in HealthManifestsTest.
 */
final class HealthExperimentTest extends TestCase
{
    public function testTcpLivenessSurvivesTheFloodWhereHttpLivenessWouldRestart(): void
    {
        $root = ProjectScript::root();
        [$rc, $output] = ProjectScript::run('health-experiment.sh', 'short');
        $results = ProjectScript::results('health/short/results.json');
        $this->assertSame(0, $rc, $output);

        $probes = array_column($results['probes'], null, 'probe');
        $this->assertSame(
            ['liveness-http-app', 'liveness-tcp-php-fpm', 'liveness-tcp-nginx', 'readiness-http-nginx'],
            array_keys($probes),
            'the manifest\'s probes, plus HTTP liveness for comparison'
        );
        // The flood really went past the flow control, and it answered fast and honestly.
        $this->assertGreaterThan(100, $results['flood']['shed']);
        // The existing method restarts a healthy server; the proposed one never does.
        $this->assertGreaterThan(0, $probes['liveness-http-app']['phases']['flood']['restarts']);
        $this->assertGreaterThan(0, $probes['liveness-http-app']['phases']['flood']['failed']);
        foreach (['liveness-tcp-php-fpm', 'liveness-tcp-nginx'] as $tcp) {
            foreach (['baseline', 'flood', 'recovery'] as $phase) {
                $this->assertSame(0, $probes[$tcp]['phases'][$phase]['failed'], "$tcp in $phase");
            }
        }
        // Readiness leaves the rotation during the flood and comes back after it.
        $ready = $probes['readiness-http-nginx'];
        $this->assertGreaterThan($ready['phases']['flood']['sent'] / 2, $ready['phases']['flood']['failed']);
        $this->assertContains(false, array_column($ready['phases']['flood']['transitions'], 1));
        $this->assertContains(true, array_column($ready['phases']['recovery']['transitions'], 1));
        // A really dead php-fpm is caught by TCP liveness on its port.
        $this->assertGreaterThan(0, $probes['liveness-tcp-php-fpm']['phases']['dead']['restarts']);
        foreach ($results['checks'] as $check) {
            $this->assertTrue($check['holds'], $check['check']);
        }
        $this->assertFileExists("$root/.run/health/short/timeline.svg");
        exec('ps -eo stat=,args=', $ps);
        $left = array_filter($ps, fn ($l) => !str_starts_with(ltrim($l), 'Z')
            && str_contains($l, "$root/.run/health/short/stack"));
        $this->assertSame([], array_values($left), 'the experiment left processes behind');
    }
}
