<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Telemetry settings in child PHP processes with INI settings of their own: a failing
 * sink, a full buffer, bad settings. No Valkey (TelemetryTest has the three real sinks).
 */
final class TelemetryIniTest extends LimiterTestCase
{
    /** Runs PHP code in a child process with the extension and the given INI settings. */
    private static function child(array $ini, string $code): array
    {
        $cmd = self::phpWithExtension();
        foreach ($ini as $k => $v) {
            $cmd[] = '-d';
            $cmd[] = "$k=$v";
        }
        $cmd[] = '-r';
        $cmd[] = $code;
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        return [proc_close($p), $out, $err];
    }

    public function testAFailingSinkDropsAndCountsWithoutTouchingTheCheckout(): void
    {
        $file = tempnam(sys_get_temp_dir(), 'cg-ev');
        [$rc, $out, $err] = self::child([
            'checkout_guard.events.sinks' => 'stream,jsonl',
            'checkout_guard.events.jsonl_path' => $file,
            'checkout_guard.events.stream_url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(),
        ], '
            $r = CheckoutGuard\Telemetry::measure("zoneA", fn () => "ok");
            $t = hrtime(true);
            $written = CheckoutGuard\Telemetry::flush();
            $ms = (hrtime(true) - $t) / 1e6;
            $s = CheckoutGuard\Telemetry::stats()["sinks"];
            echo json_encode([$r, $written, $s["stream"]["dropped"], $s["stream"]["last_error"], $s["jsonl"]["written"], $ms]);
        ');
        $this->assertSame(0, $rc, $err);
        [$result, $written, $dropped, $error, $jsonlWritten, $ms] = json_decode($out, true);
        $this->assertSame('ok', $result);
        $this->assertSame([1, 1, 1], [$written, $dropped, $jsonlWritten]);
        $this->assertStringContainsString('Connection refused', $error);
        $this->assertLessThan(1000, $ms, 'hang detector: a refused connection answers at once');
        $this->assertCount(1, file($file));
        unlink($file);
    }

    public function testAFullBufferIsWrittenAtOnceAndTheRestAtTheEndOfTheRequest(): void
    {
        $file = tempnam(sys_get_temp_dir(), 'cg-ev');
        [$rc, $out, $err] = self::child([
            'checkout_guard.events.sinks' => 'jsonl',
            'checkout_guard.events.jsonl_path' => $file,
            'checkout_guard.events.buffer_size' => '10',
        ], '
            for ($i = 0; $i < 25; $i++) { CheckoutGuard\Telemetry::measure("zoneA", fn () => 200); }
            clearstatcache();
            echo count(file($argv[1] ?? "' . $file . '"));
        ');
        $this->assertSame(0, $rc, $err);
        $this->assertSame('20', $out, 'two full buffers written during the request');
        $this->assertCount(25, file($file), 'the last 5 at the end of the request');
        unlink($file);
    }

    public function testBadTelemetrySettingsWarnOnceAndTurnTelemetryOffNotTheCheckout(): void
    {
        [$rc, $out, $err] = self::child(['checkout_guard.events.sinks' => 'jsonl,kafka', 'display_errors' => 'stderr'], '
            echo CheckoutGuard\Telemetry::measure("zoneA", fn () => 7), ",", CheckoutGuard\Telemetry::measure("zoneA", fn () => 8), ",";
            $s = CheckoutGuard\Telemetry::stats();
            echo json_encode([$s["enabled"], $s["config_error"]]);
        ');
        $this->assertSame(0, $rc);
        $this->assertStringStartsWith('7,8,', $out);
        $this->assertSame([false, 'checkout_guard: checkout_guard.events.sinks lists unknown sink "kafka" (known: newrelic, jsonl, stream)'], json_decode(substr($out, 4), true));
        $this->assertSame(1, substr_count($err, 'lists unknown sink "kafka"'), $err);
    }

    /** The stream sink's Sentinel URL: the sentinels' user needs their password (as the limiter's option). */
    public function testASentinelUserWithoutAPasswordTurnsTheStreamSinkOffNamed(): void
    {
        [$rc, $out] = self::child([
            'checkout_guard.events.sinks' => 'stream',
            'checkout_guard.events.stream_url' => 'valkey+sentinel://127.0.0.1:1/orders',
            'checkout_guard.sentinel.user' => 'sen',
            'display_errors' => 'stderr',
        ], '
            echo CheckoutGuard\Telemetry::measure("zoneA", fn () => 7), ",";
            $s = CheckoutGuard\Telemetry::stats();
            echo json_encode([$s["enabled"], $s["config_error"]]);
        ');
        $this->assertSame(0, $rc);
        $this->assertStringStartsWith('7,', $out);
        [$enabled, $error] = json_decode(substr($out, 2), true);
        $this->assertFalse($enabled);
        $this->assertStringContainsString('checkout_guard.sentinel.user is given without a password', (string) $error);
    }
}
