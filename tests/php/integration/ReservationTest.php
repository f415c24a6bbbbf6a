<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * Reservations: `acquire($shop, $tokens, $maxWaitSeconds)` takes tokens that will be there
 * within the wait now, and sleeps until they are (`Decision::waited()`); later than that,
 * a denial that takes nothing. Every bound below is a correctness bound (never early,
 * never past the wait allowed plus a generous margin), not a timing goal.
 */
final class ReservationTest extends LimiterTestCase
{
    protected function tearDown(): void
    {
        ini_restore('checkout_guard.local_denials');
    }

    public function testAReservationWaitsForItsTokensOnBothEngines(): void
    {
        foreach (['lua', 'module'] as $engine) {
            $v = new ValkeyProcess();
            $v->start(['--loadmodule', self::valkeyModule()]);
            try {
                // 2 tokens, one more every 100 ms.
                $l = new RateLimiter([
                    'name' => self::uniqueName("reserve-$engine"),
                    'url' => $v->url(),
                    'global' => self::bucket(2, 10.0),
                    'engine' => $engine,
                ]);
                // The bucket is empty from the first call on: the next token is 100 ms
                // after it (Valkey's clock), and the reservation sleeps the rest.
                $t0 = hrtime(true);
                $this->assertTrue($l->acquire('s', 2)->isAllowed());
                $t1 = hrtime(true);
                $d = $l->acquire('s', 1, 0.5);
                $t2 = hrtime(true);
                $elapsed = ($t2 - $t1) / 1e9;
                $this->assertTrue($d->isAllowed(), "$engine: the token is there within 0.5 s");
                $this->assertSame('allowed', $d->reason());
                $this->assertSame(0.0, $d->retryAfter());
                $this->assertSame(0, $d->remaining(), "$engine: the bucket is spent ahead");
                $this->assertGreaterThanOrEqual(0.099, ($t2 - $t0) / 1e9, "$engine: never early");
                $this->assertGreaterThan(0.0, $d->waited(), "$engine: it waited");
                $this->assertLessThan(0.5 + 1.0, $d->waited(), "$engine: not far past its wait (a generous margin for a busy machine)");
                $this->assertGreaterThanOrEqual($d->waited(), $elapsed, "$engine: acquire() slept what it says");
                $this->assertSame($engine, $l->health(false)['engine']);
            } finally {
                $v->stop();
            }
        }
    }

    public function testTokensReservedAreTakenFromEveryoneElseAtOnce(): void
    {
        // One token every 200 ms.
        $l = $this->limiter(['global' => self::bucket(1, 5.0)]);
        $this->assertTrue($l->acquire('a')->isAllowed());
        $this->assertTrue($l->acquire('a', 1, 1.0)->isAllowed(), 'reserved the next token');
        // Right after the reservation's wait, its token is gone: the next one is 200 ms on.
        $other = $l->acquire('b');
        $this->assertFalse($other->isAllowed(), 'the reserved token is not handed out twice');
        $this->assertSame('global', $other->reason());
        $this->assertGreaterThan(0.15, $other->retryAfter());
    }

    public function testAWaitLongerThanAllowedIsADenialThatTakesNothing(): void
    {
        // 4 tokens, one every 500 ms; locally denied or by Valkey, the same answer.
        foreach (['1', '0'] as $local) {
            ini_set('checkout_guard.local_denials', $local);
            $l = $this->limiter(['global' => self::bucket(4, 2.0)]);
            $this->assertTrue($l->acquire('s', 4)->isAllowed());
            $d = $l->acquire('s', 2, 0.6);
            $this->assertFalse($d->isAllowed(), "local_denials=$local: 2 tokens take 1 s");
            $this->assertSame('global', $d->reason());
            $this->assertSame(0.0, $d->waited());
            $this->assertGreaterThan(0.6, $d->retryAfter());
            // Nothing was taken: a reservation of one token (500 ms) still fits in 0.6 s.
            $d = $l->acquire('s', 1, 0.6);
            $this->assertTrue($d->isAllowed(), "local_denials=$local: the denial took nothing");
            $this->assertGreaterThan(0.3, $d->waited());
        }
    }

    /**
     * A local denial (the flood fast path) must not deny a reservation that Valkey would
     * admit: the worker has learnt that the bucket is empty, but the token is 200 ms
     * away and the caller waits up to 1 s.
     */
    public function testLocalDenialsDenyAReservationOnlyWhenItsWaitIsCertainlyTooLong(): void
    {
        ini_set('checkout_guard.local_denials', '1');
        $l = $this->limiter(['global' => self::bucket(1, 5.0)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertFalse($l->acquire('s')->isAllowed(), 'the worker learns the bucket is empty');
        $d = $l->acquire('s', 1, 1.0);
        $this->assertTrue($d->isAllowed(), 'admitted by Valkey, not denied in the worker');
        $this->assertGreaterThan(0.0, $d->waited());
        // Now the bucket is spent 200 ms ahead: a 10 ms wait is certainly too short.
        $d = $l->acquire('s', 1, 0.01);
        $this->assertFalse($d->isAllowed());
        $this->assertSame(0.0, $d->waited());
    }

    public function testZeroWaitDecidesExactlyAsAcquireWithoutIt(): void
    {
        $seq = [['s', 2], ['h', 1], ['s', 1], ['h', 2], ['s', 1], ['h', 1]];
        $answers = [];
        foreach ([false, true] as $withZero) {
            $l = $this->limiter([
                'global' => self::bucket(4),
                'hot_shop' => self::bucket(2),
                'hot_shops' => ['h'],
            ]);
            $got = [];
            foreach ($seq as [$shop, $n]) {
                $d = $withZero ? $l->acquire($shop, $n, 0.0) : $l->acquire($shop, $n);
                $got[] = [$d->isAllowed(), $d->reason(), $d->remaining(), $d->isHotShop(), $d->waited()];
            }
            $answers[] = $got;
        }
        $this->assertSame($answers[0], $answers[1]);
        $this->assertContains([false, 'global', 0, false, 0.0], $answers[0], 'the sequence reaches a denial');
    }

    public function testAWaitThatNoRefillCanMeetIsDeniedAtOnce(): void
    {
        // A bucket that all but never refills: no wait up to 10 s brings a token back.
        $l = $this->limiter(['global' => self::bucket(3)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $t0 = hrtime(true);
        $d = $l->acquire('s', 3, 10.0);
        $this->assertFalse($d->isAllowed());
        $this->assertSame(0.0, $d->waited());
        $this->assertLessThan(5.0, (hrtime(true) - $t0) / 1e9, 'a denial does not sleep');
        $this->assertTrue($l->acquire('s', 2)->isAllowed(), 'nothing was taken');
    }

    /** @return iterable<string, array{float}> */
    public static function badWaits(): iterable
    {
        yield 'negative' => [-0.001];
        yield 'above 10 s' => [10.0001];
        yield 'infinite' => [INF];
        yield 'not a number' => [NAN];
    }

    /** @dataProvider badWaits */
    #[DataProvider('badWaits')]
    public function testAWaitOutsideZeroToTenSecondsIsAConfigurationError(float $wait): void
    {
        $l = $this->limiter(['global' => self::bucket(1)]);
        try {
            $l->acquire('s', 1, $wait);
            $this->fail('no exception for ' . var_export($wait, true));
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('maxWaitSeconds', $e->getMessage());
        }
        $this->assertTrue($l->acquire('s', 1, 10.0)->isAllowed(), 'the bad call took nothing; 10 s is allowed');
    }
}
