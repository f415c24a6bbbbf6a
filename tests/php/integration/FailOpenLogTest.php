<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * Failing open is said in PHP's error log, once per process and cause (again at most
 * once a minute), naming the cause and the setting to check: a Valkey that cannot be
 * reached (decisions follow on_unavailable) and a telemetry sink that cannot write. Each
 * in a child PHP process of its own (a process says a cause once), with `error_log` set
 * to a file of the test's.
 */
final class FailOpenLogTest extends TestCase
{
    private string $dir = '';

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/cg-failopen-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        foreach (glob("{$this->dir}/*") ?: [] as $f) {
            @unlink($f);
        }
        @rmdir($this->dir);
    }

    /**
     * Runs $code in a PHP CLI with the extension, `-d` settings, and `error_log` set to a
     * file; returns [stdout, the error log's lines].
     *
     * @param array<string, string> $ini
     * @return array{0: string, 1: list<string>}
     */
    private function php(string $code, array $ini): array
    {
        $log = "{$this->dir}/error.log";
        $cmd = [PHP_BINARY, '-n', '-d', 'extension=' . getenv('CHECKOUT_GUARD_EXT'), '-d', "error_log=$log", '-d', 'log_errors=1'];
        foreach ($ini as $k => $v) {
            array_push($cmd, '-d', "$k=$v");
        }
        array_push($cmd, '-r', $code);
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $rc = proc_close($p);
        $this->assertSame(0, $rc, "child PHP failed: $out $err");
        $lines = array_values(array_filter(explode("\n", (string) @file_get_contents($log))));
        return [$out, $lines];
    }

    public function testAnUnreachableValkeyIsSaidOnceNamingTheCauseAndTheSetting(): void
    {
        $port = ValkeyProcess::freePort();
        [$out, $lines] = $this->php(<<<'PHP'
            $l = new CheckoutGuard\RateLimiter([
                'name' => 'payments',
                'global' => ['capacity' => 10, 'refill_per_second' => 1],
                'timeout_ms' => 200,
            ]);
            // Valkey is tried again after 1 ms: most calls connect and fail anew.
            $reasons = [];
            for ($i = 0; $i < 50; $i++) {
                $d = $l->acquire('shop-1');
                $reasons[] = ($d->isAllowed() ? 'allowed ' : 'denied ') . $d->reason();
                usleep(2000);
            }
            echo json_encode(array_count_values($reasons));
            PHP, ['checkout_guard.url' => "redis://127.0.0.1:$port", 'checkout_guard.retry_interval_ms' => '1']);
        // Failing open: every checkout passed by the policy.
        $this->assertSame(['allowed unavailable' => 50], json_decode($out, true));
        $this->assertCount(1, $lines, implode("\n", $lines));
        $line = $lines[0];
        $this->assertStringContainsString("limiter 'payments' cannot reach Valkey at redis://127.0.0.1:$port", $line);
        $this->assertMatchesRegularExpression('/\(.*refused.*\)/i', $line, 'the cause');
        $this->assertStringContainsString('on_unavailable=allow', $line);
        $this->assertStringContainsString('checkout_guard.url', $line);
    }

    public function testASinkThatCannotWriteIsSaidOnceNamingTheCauseAndTheSetting(): void
    {
        $path = "{$this->dir}/missing-dir/events.jsonl";
        [$out, $lines] = $this->php(<<<'PHP'
            for ($i = 0; $i < 50; $i++) {
                CheckoutGuard\Telemetry::record('CheckoutStep', ['i' => $i]);
                CheckoutGuard\Telemetry::flush();
            }
            $s = CheckoutGuard\Telemetry::stats()['sinks']['jsonl'];
            echo json_encode([$s['written'], $s['dropped'], $s['failures']]);
            PHP, ['checkout_guard.events.sinks' => 'jsonl', 'checkout_guard.events.jsonl_path' => $path]);
        $this->assertSame([0, 50, 50], json_decode($out, true));
        $this->assertCount(1, $lines, implode("\n", $lines));
        $line = $lines[0];
        $this->assertStringContainsString("telemetry sink 'jsonl' cannot write", $line);
        $this->assertStringContainsString($path, $line);
        $this->assertStringContainsString('No such file or directory', $line, 'the cause');
        $this->assertStringContainsString('checkout_guard.events.jsonl_path', $line);
    }
}
