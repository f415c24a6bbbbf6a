<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The `checkout-guard` binary built by scripts/test.sh (cargo build --release), or
 * CHECKOUT_GUARD_CLI (the release archive's, scripts/release-test.sh).
 */
final class Cli
{
    public static function path(): string
    {
        return getenv('CHECKOUT_GUARD_CLI') ?: dirname(__DIR__, 3) . '/target/release/checkout-guard';
    }

    /** @return array{0: int, 1: string, 2: string} exit code, stdout, stderr */
    public static function run(string ...$args): array
    {
        $p = proc_open([self::path(), ...$args], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        return [proc_close($p), (string) $out, (string) $err];
    }

    /** `checkout-guard limiter --url U --name N ...args` */
    public static function limiter(string $url, string $name, string ...$args): array
    {
        return self::run('limiter', '--url', $url, '--name', $name, ...$args);
    }
}
