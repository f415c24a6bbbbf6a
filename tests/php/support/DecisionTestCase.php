<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * Decisions where features meet (live limits, data loss, two Valkeys, slow buckets, hot
 * marks running out, local denials), one regression test per case, all with
 * checkout_guard.local_denials on (the default) unless a test says otherwise and why.
 * Each test runs its own Valkey: some FLUSHALL it, some use its databases 0 and 1.
 * The helpers of LocalDenialsAgreeWithValkeyTest, LiveChangeDecisionsTest and
 * RatesAndFailedDecisionsTest.
 */
abstract class DecisionTestCase extends OwnValkeyTestCase
{
    /** What `status` or the stderr of `set` says about stored limits that are not valid. */
    protected const PROBLEM = '/problem|invalid|garbage|unreadable|not CAPACITY\/RATE|may not exceed/i';

    protected function tearDown(): void
    {
        ini_restore('checkout_guard.local_denials');
        parent::tearDown();
    }

    protected function own(array $options): RateLimiter
    {
        return $this->limiter($options + ['url' => $this->valkey->url()]);
    }

    /** `checkout-guard limiter --url <this Valkey> --name $name ...` */
    protected function cli(string $name, string ...$args): array
    {
        return Cli::limiter($this->valkey->url(), $name, ...$args);
    }

    /**
     * Waits `$seconds` as exactly as this host can (sleep, then spin on the monotonic clock):
     * a retryAfter() a round trip too short shows here, where usleep()'s own lateness could
     * hide it.
     */
    protected static function waitExactly(float $seconds): void
    {
        $until = hrtime(true) + (int) ceil($seconds * 1e9);
        $left = $until - hrtime(true);
        if ($left > 2_000_000) {
            usleep(intdiv($left - 1_000_000, 1000));
        }
        while (hrtime(true) < $until) {
            // spin
        }
    }

    /** Another worker: a new PHP process that builds the limiter and decides once. */
    protected function otherWorker(array $options, string $shop): string
    {
        $options += ['url' => $this->valkey->url()];
        $code = sprintf(
            '$l = new CheckoutGuard\RateLimiter(%s); echo $l->acquire(%s)->reason();',
            var_export($options, true),
            var_export($shop, true)
        );
        $p = proc_open([...self::phpWithExtension(), '-r', $code], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($p), "other worker failed: $err");
        return $out;
    }

    /** `status` lines without the recent changes (whose old/new may quote a past problem). */
    protected static function withoutChanges(string $status): string
    {
        return implode("\n", array_filter(explode("\n", $status), fn ($l) => !str_starts_with(ltrim($l), 'change ')));
    }
}
