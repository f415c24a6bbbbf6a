<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\Attributes\Group;
use PHPUnit\Framework\TestCase;

/**
 * The Kubernetes manifests the health probes come from (deploy/k8s), checked offline with
 * the project's .venv (scripts/setup.sh): no Valkey, no servers. HealthExperimentTest runs
 * the probes under overload. Group python-tooling: the PHP matrix's chroots leave it out
 * (it tests the manifests with the host's Python, whatever the PHP).
 *
 * @group python-tooling
 */
#[Group('python-tooling')]
final class HealthManifestsTest extends TestCase
{
    public function testTheManifestsPassKubernetesSchemaValidation(): void
    {
        [$rc, $out] = self::validate(ProjectScript::root() . '/deploy/k8s/checkout.yaml');
        $this->assertSame(0, $rc, $out);
        $this->assertSame(4, substr_count($out, 'passed for resource'), $out);
    }

    public function testTheSchemaCheckRejectsAMistypedProbe(): void
    {
        $yaml = (string) file_get_contents(ProjectScript::root() . '/deploy/k8s/checkout.yaml');
        $broken = tempnam(sys_get_temp_dir(), 'cg-k8s') . '.yaml';
        file_put_contents($broken, preg_replace('/tcpSocket: \{port: 9000\}/', 'tcpSocket: {prot: 9000}', $yaml, 1));
        try {
            [$rc, $out] = self::validate($broken);
        } finally {
            unlink($broken);
        }
        $this->assertNotSame(0, $rc, $out);
        $this->assertMatchesRegularExpression('/did not validate .*tcpSocket/', $out);
    }

    public function testTheProbesAreTheTwoLevelsThePaperProposes(): void
    {
        $root = ProjectScript::root();
        $code = <<<'PY'
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
dep = next(d for d in docs if d["kind"] == "Deployment")
cs = {c["name"]: c for c in dep["spec"]["template"]["spec"]["containers"]}
ini = next(d for d in docs if d["kind"] == "ConfigMap" and "30-checkout_guard.ini" in d["data"])
print(json.dumps({"containers": cs, "ini": ini["data"]["30-checkout_guard.ini"]}))
PY;
        exec(escapeshellarg("$root/.venv/bin/python") . ' -c ' . escapeshellarg($code) . ' ' . escapeshellarg("$root/deploy/k8s/checkout.yaml"), $out, $rc);
        $this->assertSame(0, $rc);
        $m = json_decode(implode('', $out), true, 512, JSON_THROW_ON_ERROR);
        $fpm = $m['containers']['php-fpm'];
        $nginx = $m['containers']['nginx'];
        $this->assertSame(['port' => 9000], $fpm['livenessProbe']['tcpSocket']);
        $this->assertSame(['port' => 9000], $fpm['startupProbe']['tcpSocket']);
        $this->assertSame(['port' => 8080], $nginx['livenessProbe']['tcpSocket']);
        $this->assertSame('/ready.php', $nginx['readinessProbe']['httpGet']['path']);
        $this->assertArrayNotHasKey('httpGet', $fpm['livenessProbe']);
        $this->assertStringContainsString('extension=checkout_guard.so', $m['ini']);
        $this->assertStringNotContainsString('@', $m['ini'], 'no credentials in the ConfigMap');
        $this->assertFileExists("$root/php/examples/checkout/ready.php");
    }

    /** @return array{0: int, 1: string} */
    private static function validate(string $file): array
    {
        $root = ProjectScript::root();
        exec(escapeshellarg("$root/.venv/bin/kubernetes-validate") . ' --strict ' . escapeshellarg($file) . ' 2>&1', $out, $rc);
        return [$rc, implode("\n", $out)];
    }
}
