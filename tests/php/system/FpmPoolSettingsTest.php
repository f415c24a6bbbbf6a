<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * checkout_guard loaded per php-fpm pool (`php_admin_value[extension]`) with its settings
 * in the pool, written both ways: the `checkout_guard.*` lines before the extension line
 * (as the README says) and after it.
 *
 * php-fpm keeps a pool's `php_admin_value` lines last to first and applies them in that
 * order in each new worker: lines written before the extension line are applied after the
 * extension is loaded (and its INI entries exist); lines written after it are applied
 * before, and php-fpm refuses them ("Unable to set php_admin_value", said only with
 * catch_workers_output). Loading the extension runs its request start-up at once, before
 * the settings that follow: telemetry must not read its settings there.
 */
final class FpmPoolSettingsTest extends OwnFpmTestCase
{
    protected static function dirPrefix(): string
    {
        return 'cg-pool-';
    }

    public function testSettingsBeforeTheExtensionLineAreInForceTelemetryToo(): void
    {
        $this->startFpm(true);
        $answer = $this->request();
        $this->assertSame($this->valkey->url(), $answer['url'], "the pool's URL");
        $this->assertSame('allowed', $answer['reason'], 'decided by the Valkey of the pool');
        $this->assertSame('jsonl', $answer['sinks']);
        $this->assertTrue($answer['stats']['enabled'], 'telemetry on: ' . json_encode($answer['stats']));
        $this->assertNull($answer['stats']['config_error']);
        // The request's events are written at its end.
        $lines = array_filter(explode("\n", (string) @file_get_contents("{$this->dir}/events.jsonl")));
        $types = array_map(fn (string $l) => json_decode($l, true)['eventType'] ?? null, $lines);
        $this->assertContains('PoolProbe', $types, 'events written: ' . implode("\n", $lines));
        $this->assertStringNotContainsString('checkout_guard', (string) @file_get_contents("{$this->dir}/pool.log"), 'no warning');
    }

    public function testSettingsAfterTheExtensionLineAreNamedInThePoolsLog(): void
    {
        $this->startFpm(false);
        $answer = $this->request();
        // php-fpm refused them (not ours to change): the built-in defaults are in force...
        $this->assertSame('', $answer['sinks']);
        // ...and the pool's log says which, and what to do.
        $log = '';
        for ($i = 0; $i < 100 && !str_contains($log, 'checkout_guard.events.jsonl_path'); $i++) {
            usleep(20_000);
            $log = (string) @file_get_contents("{$this->dir}/pool.log");
        }
        foreach (['checkout_guard.url', 'checkout_guard.events.sinks', 'checkout_guard.events.jsonl_path'] as $setting) {
            $this->assertStringContainsString("php_admin_value[$setting]", $log);
        }
        $this->assertStringContainsString('before php_admin_value[extension]', $log);
        $this->assertSame(1, substr_count($log, 'php_admin_value[checkout_guard.url]'), "said once per worker:\n$log");
    }

    private function startFpm(bool $settingsFirst): void
    {
        $ext = (string) getenv('CHECKOUT_GUARD_EXT');
        $this->port = ValkeyProcess::freePort();
        file_put_contents("{$this->dir}/probe.php", <<<'PHP'
            <?php
            $l = new CheckoutGuard\RateLimiter([
                'name' => 'pool-probe',
                'global' => ['capacity' => 100, 'refill_per_second' => 100],
            ]);
            $reason = $l->acquire('s')->reason();
            CheckoutGuard\Telemetry::record('PoolProbe', ['n' => 1]);
            echo json_encode([
                'reason' => $reason,
                'url' => ini_get('checkout_guard.url'),
                'sinks' => ini_get('checkout_guard.events.sinks'),
                'stats' => CheckoutGuard\Telemetry::stats(),
            ]);
            PHP);
        $settings = "php_admin_value[checkout_guard.url] = {$this->valkey->url()}\n"
            . "php_admin_value[checkout_guard.events.sinks] = jsonl\n"
            . "php_admin_value[checkout_guard.events.jsonl_path] = {$this->dir}/events.jsonl\n";
        $extension = "php_admin_value[extension] = $ext\n";
        // Like a pool of Debian's pool.d: its own error_log, no catch_workers_output.
        $pool = "[probe]\nlisten = 127.0.0.1:{$this->port}\npm = static\npm.max_children = 1\n"
            . "request_terminate_timeout = 20s\nphp_admin_value[error_log] = {$this->dir}/pool.log\n"
            . ($settingsFirst ? $settings . $extension : $extension . $settings);
        file_put_contents("{$this->dir}/php-fpm.conf", "[global]\nerror_log = {$this->dir}/fpm.log\n"
            . "pid = {$this->dir}/fpm.pid\ndaemonize = no\n$pool");
        $this->fpm = proc_open([self::fpmBinary(), '-n', '-R', '-F', '-y', "{$this->dir}/php-fpm.conf"],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', "{$this->dir}/fpm.out", 'a'], 2 => ['file', "{$this->dir}/fpm.out", 'a']], $pipes);
        for ($i = 0; $i < 250; $i++) {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
                return;
            }
            usleep(20_000);
        }
        $this->fail('php-fpm did not start: ' . @file_get_contents("{$this->dir}/fpm.out") . @file_get_contents("{$this->dir}/fpm.log"));
    }

    /** Stops php-fpm (bounded); returns the master's pid, or 0 if none ran. */
    /** One request to the probe; its decoded answer. */
    private function request(): array
    {
        $p = proc_open(['env', "SCRIPT_FILENAME={$this->dir}/probe.php", 'SCRIPT_NAME=/probe.php', 'REQUEST_METHOD=GET',
            'timeout', '20', 'cgi-fcgi', '-bind', '-connect', "127.0.0.1:{$this->port}"], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        proc_close($p);
        $answer = json_decode(substr($out, (int) strpos($out, "\r\n\r\n") + 4), true);
        $this->assertIsArray($answer, "not the probe's answer: $out $err " . @file_get_contents("{$this->dir}/fpm.log"));
        return $answer;
    }
}
