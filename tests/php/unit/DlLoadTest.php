<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The extension loaded at run time with dl() (a module PHP unloads at the request's end):
 * it installs no SAPI hooks (src/lifecycle.rs), works, and the process ends cleanly. Its
 * MSHUTDOWN must unregister its INI entries as PHP does for a dl() module without one:
 * left registered after the library was unloaded, PHP freed them at exit from unmapped
 * memory (heap corruption, SIGABRT in most runs).
 */
final class DlLoadTest extends LimiterTestCase
{
    public function testALoadByDlEndsCleanly(): void
    {
        $ext = (string) getenv('CHECKOUT_GUARD_EXT');
        $code = 'dl(' . var_export(basename($ext), true) . ');'
            . ' echo ini_get("checkout_guard.events.sinks") === false ? "no-ini" : "ini", " ";'
            . ' echo CheckoutGuard\Telemetry::callCount(), " ";'
            . ' ob_start(); phpinfo(INFO_MODULES); $i = ob_get_clean();'
            . ' echo str_contains($i, "loaded by dl(): no SAPI hooks") ? "no-hooks" : "hooks?";';
        // Several runs: the corruption did not abort every time.
        for ($run = 0; $run < 8; $run++) {
            $p = proc_open([PHP_BINARY, '-n', '-d', 'enable_dl=1', '-d', 'extension_dir=' . dirname($ext), '-r', $code],
                [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $out = stream_get_contents($pipes[1]);
            $err = stream_get_contents($pipes[2]);
            $rc = proc_close($p);
            $this->assertSame('ini 0 no-hooks', $out, "run $run: $err");
            $this->assertSame(0, $rc, "run $run: the process must end cleanly; stderr: $err");
        }
    }
}
