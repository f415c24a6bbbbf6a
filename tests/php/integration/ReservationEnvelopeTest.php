<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * Review of reservations: what the provider sees. A reservation's calls are made when
 * acquire() returns from its sleep; every bucket promises at most capacity + rate * t
 * calls over any interval, counted at the times the calls are made.
 */
final class ReservationEnvelopeTest extends LimiterTestCase
{
    /**
     * HIGH. A hot shop reserves tokens its own bucket has in 1 s; global has them now and
     * lends them at once, counting the reserved calls as made at the decision. When the
     * reservation returns (its 4 calls are made now), global has refilled as if they were
     * long past: others get its whole capacity at the same instant.
     */
    public function testAtTheWakeOfAHotShopsReservationGlobalHoldsOnlyWhatItsCallsLeave(): void
    {
        $over = [];
        foreach (['lua', 'module'] as $engine) {
            $v = new ValkeyProcess();
            $v->start(['--loadmodule', self::valkeyModule()]);
            try {
                $l = new RateLimiter([
                    'name' => self::uniqueName("envelope-$engine"),
                    'url' => $v->url(),
                    'engine' => $engine,
                    'global' => self::bucket(10, 10.0),
                    'hot_lane' => self::bucket(6, 6.0),
                    'hot_shop' => self::bucket(4, 4.0),
                    'hot_shops' => ['h'],
                ]);
                $this->assertTrue($l->acquire('h', 4)->isAllowed());
                $d = $l->acquire('h', 4, 1.0);
                $this->assertTrue($d->isAllowed(), "$engine: the shop's bucket has 4 more in 1 s");
                $this->assertGreaterThan(0.9, $d->waited());
                // Its 4 calls are made now. Others ask global for 10 tokens at once.
                $t0 = hrtime(true);
                $others = 0;
                for ($i = 0; $i < 10; $i++) {
                    $others += (int) $l->acquire('o')->isAllowed();
                }
                $ms = (hrtime(true) - $t0) / 1e6;
                // 4 calls at 0 s and 4 at the wake (>= 1 s): global (10, 10/s) leaves at
                // most 10 - 4 at the wake, plus one token per 100 ms spent asking.
                if ($others > 6 + (int) ceil($ms / 100)) {
                    $over[] = "$engine: 4 reserved calls and $others more within $ms ms, global holds 10";
                }
            } finally {
                $v->stop();
            }
        }
        $this->assertSame([], $over, 'global as the provider sees it, on both engines');
    }

    /**
     * HIGH. `limiter set` while a reservation sleeps: the bucket, carried to the new
     * limits with its level clamped at 0, forgets the tokens the reservation took from
     * the future. At its wake the new bucket hands out its whole capacity next to the
     * reserved calls.
     */
    public function testALiveChangeWhileAReservationSleepsKeepsWhatItTook(): void
    {
        $name = self::uniqueName('envelope-live');
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(10, 10.0)]);
        $this->assertTrue($l->acquire('a', 10)->isAllowed());
        $woke = tempnam(sys_get_temp_dir(), 'cg-reserve');
        $pid = pcntl_fork();
        if ($pid === 0) {
            // A worker reserves the next 10 tokens (1 s away), sleeps, makes its calls.
            $d = $l->acquire('a', 10, 1.0);
            file_put_contents($woke, $d->isAllowed() ? 'allowed' : 'denied');
            posix_kill(getmypid(), SIGKILL);
        }
        usleep(200_000);
        // The operator raises the limits (same refill time: 20 tokens at 20/s).
        [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'global=20/20', '--by', 'review');
        $this->assertSame(0, $code, $err);
        pcntl_waitpid($pid, $status);
        $this->assertSame('allowed', file_get_contents($woke));
        unlink($woke);
        // The reservation's 10 calls are made now. Others ask for 20 at once.
        $t0 = hrtime(true);
        $others = 0;
        for ($i = 0; $i < 20; $i++) {
            $others += (int) $l->acquire('b')->isAllowed();
        }
        $ms = (hrtime(true) - $t0) / 1e6;
        // The new bucket (20, 20/s) leaves at most 20 - 10 next to the reserved calls,
        // plus one token per 50 ms spent asking.
        $this->assertLessThanOrEqual(
            10 + (int) ceil($ms / 50),
            $others,
            "10 reserved calls and $others more within $ms ms, the bucket holds 20"
        );
    }
}
