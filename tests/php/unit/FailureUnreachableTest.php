<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A Valkey URL where nothing listens: the policy decides at once. No Valkey (FailureTest
 * has the Valkey that is stopped, restarted, paused and flushed).
 */
final class FailureUnreachableTest extends LimiterTestCase
{
    private static function timed(callable $f): array
    {
        $t = hrtime(true);
        $r = $f();
        return [$r, (hrtime(true) - $t) / 1e9];
    }

    public function testUnreachableHostAnswersWithinTheTimeout(): void
    {
        // A port nobody listens on refuses at once; the policy decides.
        $l = $this->limiter(['global' => self::bucket(1), 'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(), 'timeout_ms' => 20]);
        [$d, $secs] = self::timed(fn () => $l->acquire('s'));
        $this->assertSame('unavailable', $d->reason());
        $this->assertLessThan(0.5, $secs);
    }
}
