<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\TestCase;

/** Limiters on the shared test Valkey, each test under names of its own. */
abstract class LimiterTestCase extends TestCase
{
    /** A refill so slow that nothing refills while a test runs (1 token per 1000 s). */
    protected const FROZEN = 0.001;

    protected static function url(): string
    {
        return (string) getenv('CHECKOUT_GUARD_TEST_URL');
    }

    protected static function redis(): \Redis
    {
        $u = parse_url(self::url());
        $r = new \Redis();
        $r->connect($u['host'], $u['port'] ?? 6379, 1.0);
        return $r;
    }

    /** A limiter name no other test uses. */
    protected static function uniqueName(string $prefix = 't'): string
    {
        return $prefix . '-' . bin2hex(random_bytes(6));
    }

    protected static function bucket(int $capacity, float $rate = self::FROZEN): array
    {
        return ['capacity' => $capacity, 'refill_per_second' => $rate];
    }

    protected function limiter(array $options): RateLimiter
    {
        $options += ['name' => self::uniqueName(), 'url' => self::url()];
        return new RateLimiter($options);
    }

    /** Acquires $n times for $shop and counts the decisions by reason. */
    protected static function drain(RateLimiter $l, string $shop, int $n): array
    {
        $by = [];
        for ($i = 0; $i < $n; $i++) {
            $r = $l->acquire($shop)->reason();
            $by[$r] = ($by[$r] ?? 0) + 1;
        }
        ksort($by);
        return $by;
    }

    /** The extension under test, for child PHP processes. */
    /**
     * The native Valkey module, built with the extension (cargo build --release): beside it,
     * or CHECKOUT_GUARD_VALKEY_MODULE (the release archive's, scripts/release-test.sh).
     */
    protected static function valkeyModule(): string
    {
        $file = getenv('CHECKOUT_GUARD_VALKEY_MODULE')
            ?: dirname((string) getenv('CHECKOUT_GUARD_EXT')) . '/libcheckout_guard_valkey.so';
        self::assertFileExists($file, 'the native module is built with the extension (cargo build --release)');
        return $file;
    }

    /**
     * The flags that load the extension under test into a child PHP that reads its ini
     * files: none where those files load it already (an installed extension, as the
     * release test's chroots have: a second load is a warning on every run).
     *
     * @return list<string>
     */
    protected static function extensionFlags(): array
    {
        static $byIni = null;
        if ($byIni === null) {
            $out = [];
            exec(escapeshellarg(PHP_BINARY) . ' -r ' . escapeshellarg('echo extension_loaded("checkout_guard") ? "yes" : "no";') . ' 2>/dev/null', $out);
            $byIni = ($out[0] ?? '') === 'yes';
        }
        return $byIni ? [] : ['-d', 'extension=' . getenv('CHECKOUT_GUARD_EXT')];
    }

    protected static function phpWithExtension(): array
    {
        // -n drops php.ini, and with it the include_path a PHP built by hand (the ZTS one of
        // scripts/zts.sh) sets there rather than in its binary: the child gets the parent's.
        return [PHP_BINARY, '-n', '-d', 'include_path=' . get_include_path(), '-d', 'extension=' . getenv('CHECKOUT_GUARD_EXT')];
    }

    /**
     * A child PHP with the extension and these `checkout_guard.*` INI settings records five
     * `$type` events, flushes, and prints the stream sink's `Telemetry::stats()`: returned.
     *
     * @param array<string, string> $ini
     * @return array<string, mixed>
     */
    protected function streamSinkStats(array $ini, string $type): array
    {
        $cmd = self::phpWithExtension();
        foreach ($ini as $k => $v) {
            array_push($cmd, '-d', "checkout_guard.$k=$v");
        }
        array_push($cmd, '-r', 'for ($i = 0; $i < 5; $i++) { CheckoutGuard\\Telemetry::record("' . $type . '", ["i" => $i]); }
            CheckoutGuard\\Telemetry::flush(); echo json_encode(CheckoutGuard\\Telemetry::stats()["sinks"]["stream"]);');
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $this->assertSame(0, proc_close($p), $err);
        return json_decode($out, true, 512, JSON_THROW_ON_ERROR);
    }
}
