<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The load-test stack in one short run (scripts/loadtest.sh smoke): Valkey, the mock
 * provider behind nginx limit_req, php-fpm with the example checkout, nginx in front.
 * Checkouts pass end to end, the limiter's 503 path and the provider's 429 path are each
 * exercised, a payment waits for its token (CHECKOUT_MAX_WAIT), and nothing is left running.
 */
final class LoadStackSmokeTest extends TestCase
{
    public function testTheStackStartsServesBothFailurePathsAndStops(): void
    {
        $root = ProjectScript::root();
        $before = self::stackProcesses($root);
        [$rc, $out] = ProjectScript::run('loadtest.sh', 'smoke');
        $this->assertSame(0, $rc, $out);
        $lines = explode("\n", $out);
        $result = json_decode((string) end($lines), true, 512, JSON_THROW_ON_ERROR);

        // Limiter on, global bucket of 3: three paid, then the limiter's 503 + Retry-After.
        $this->assertSame('200 200 200 503', $result['limiter_on']);
        $this->assertGreaterThanOrEqual(1, (int) $result['retry_after']);
        $this->assertGreaterThan(0, $result['events_on'], 'telemetry wrote the checkout events');
        // Limiter off, provider at 1 payment/s with a burst of 10: past the burst the
        // provider's 429s reach the checkout as 502s, one for one.
        $codes = explode(' ', $result['limiter_off']);
        $this->assertCount(20, $codes);
        $this->assertSame(array_fill(0, 11, '200'), array_slice($codes, 0, 11));
        $refused = count(array_keys($codes, '502', true));
        $this->assertGreaterThanOrEqual(5, $refused, $result['limiter_off']);
        $this->assertSame($refused, $result['provider_429']);
        $this->assertSame(20, count(array_keys($codes, '200', true)) + $refused);
        // Waiting (global bucket of 1, a token every 500 ms; ordinary shops wait up to 1 s,
        // the listed hot shop not at all): s1 pays at once, s2 waits for the next token,
        // the hot shop is refused without waiting, s3 waits again; each wait is in the
        // answer's X-Limiter-Waited and in the 'paid' step's limiter.waited.
        $this->assertSame('200 200 503 200', $result['wait'], $result['waited']);
        $waited = explode(' ', $result['waited']);
        $this->assertSame('-', $waited[0], 'a full bucket: no wait');
        $this->assertGreaterThan(0.0, (float) $waited[1]);
        $this->assertLessThanOrEqual(1.0, (float) $waited[1]);
        $this->assertSame('-', $waited[2], 'the hot shop did not wait');
        $this->assertGreaterThan(0.0, (float) $waited[3]);
        $this->assertSame(2, $result['waited_events']);

        $this->assertSame($before, self::stackProcesses($root), 'the smoke run left processes behind');
    }

    /** The load stack's live processes (not zombies): valkey, provider, php-fpm, nginx masters. */
    private static function stackProcesses(string $root): array
    {
        exec('ps -eo stat=,args=', $ps);
        $mine = array_filter($ps, fn ($l) => !str_starts_with(ltrim($l), 'Z')
            && (str_contains($l, "$root/.run/loadtest/") || str_contains($l, 'loadtest/provider.py')));
        sort($mine);
        return array_values($mine);
    }
}
