<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * The flood fast path (checkout_guard.local_denials): a denial that Valkey is certain to
 * make is made in the worker, without a round trip, and never admits anything.
 * Each test runs its own Valkey so that its command counts are its own.
 */
final class LocalDenialsTest extends OwnValkeyTestCase
{
    protected function tearDown(): void
    {
        ini_restore('checkout_guard.local_denials');
        parent::tearDown();
    }

    private function own(array $options = []): RateLimiter
    {
        return $this->limiter($options + ['url' => $this->valkey->url(), 'global' => self::bucket(100, 1000)]);
    }

    /** Decision scripts Valkey ran (EVALSHA calls, NOSCRIPT retries included). */
    private function scriptCalls(): int
    {
        return $this->commandCalls('evalsha');
    }

    public function testADrainedBucketIsDeniedWithoutARoundTripUntilItsTokenComesBack(): void
    {
        // One token every 200 ms.
        $l = $this->own(['global' => self::bucket(2, 5)]);
        $this->assertSame(['allowed' => 2], self::drain($l, 's', 2));
        $calls = $this->scriptCalls();
        $denied = [];
        for ($i = 0; $i < 200; $i++) {
            $denied[] = $l->acquire('s');
        }
        $this->assertSame($calls, $this->scriptCalls(), '200 denials, no round trip');
        foreach ($denied as $d) {
            $this->assertFalse($d->isAllowed());
            $this->assertSame('global', $d->reason());
            $this->assertSame(0, $d->remaining());
            $this->assertGreaterThan(0.0, $d->retryAfter());
            $this->assertLessThanOrEqual(0.2, $d->retryAfter());
        }
        // When the token is back, Valkey is asked again and admits.
        usleep((int) (end($denied)->retryAfter() * 1e6) + 20_000);
        $d = $l->acquire('s');
        $this->assertTrue($d->isAllowed(), $d->reason());
        $this->assertSame($calls + 1, $this->scriptCalls());
    }

    public function testSwitchedOffEveryDecisionAsksValkey(): void
    {
        ini_set('checkout_guard.local_denials', '0');
        $l = $this->own(['global' => self::bucket(2, 5)]);
        self::drain($l, 's', 2);
        $calls = $this->scriptCalls();
        $this->assertSame(['global' => 50], self::drain($l, 's', 50));
        $this->assertSame($calls + 50, $this->scriptCalls());
    }

    public function testABadSettingNamesItself(): void
    {
        ini_set('checkout_guard.local_denials', 'maybe');
        try {
            $this->own();
            $this->fail('expected a ConfigurationException');
        } catch (\CheckoutGuard\ConfigurationException $e) {
            $this->assertStringContainsString('checkout_guard.local_denials', $e->getMessage());
            $this->assertStringContainsString('"maybe"', $e->getMessage());
        }
    }

    public function testAHotShopsFloodIsDeniedLocallyWhileOrdinaryShopsStillAsk(): void
    {
        $l = $this->own([
            'global' => self::bucket(100, 1000),
            'hot_shop' => self::bucket(3, 2),
            'hot_shops' => ['flash'],
        ]);
        $this->assertSame(['allowed' => 3, 'hot_shop' => 1], self::drain($l, 'flash', 4));
        $calls = $this->scriptCalls();
        $this->assertSame(['hot_shop' => 100], self::drain($l, 'flash', 100));
        $this->assertSame($calls, $this->scriptCalls());
        $this->assertTrue($l->acquire('flash')->isHotShop());
        // An ordinary shop is not affected by the hot shop's bucket.
        $this->assertSame(['allowed' => 20], self::drain($l, 'ordinary', 20));
        $this->assertSame($calls + 20, $this->scriptCalls());
    }

    public function testNeverAdmitsMoreThanValkeyWouldAndNoLess(): void
    {
        // 50 tokens a second, capacity 5, hammered for 1.5 s by this process.
        $l = $this->own(['global' => self::bucket(5, 50)]);
        $t0 = microtime(true);
        $allowed = $n = 0;
        while (microtime(true) - $t0 < 1.5) {
            $allowed += (int) $l->acquire('s')->isAllowed();
            $n++;
        }
        $elapsed = microtime(true) - $t0;
        $this->assertLessThanOrEqual(5 + 50 * $elapsed + 1, $allowed, 'never above capacity + rate * t');
        // Local denials end when the next token is due, so admissions keep pace with the
        // refill (at most a couple of tokens lost to the round trips at the edges).
        $this->assertGreaterThanOrEqual(5 + 50 * 1.5 - 4, $allowed);
        $this->assertLessThan($n / 5, $this->scriptCalls(), 'most of the flood stayed in the worker');
    }

    public function testResetHereForgetsWhatThisHostKnew(): void
    {
        $l = $this->own(['global' => self::bucket(2)]);
        self::drain($l, 's', 3);
        $l->reset();
        $this->assertSame(['allowed' => 2, 'global' => 1], self::drain($l, 's', 3));
    }

    public function testUnmarkHotHereEndsTheShopsLocalDenials(): void
    {
        $l = $this->own(['global' => self::bucket(100, 1000), 'hot_shop' => self::bucket(2)]);
        $l->markHot('s', 60);
        $this->assertSame(['allowed' => 2, 'hot_shop' => 1], self::drain($l, 's', 3));
        $l->unmarkHot('s');
        $this->assertSame(['allowed' => 5], self::drain($l, 's', 5));
    }

    public function testValkeyDownAfterADrainIsStillALocalDenial(): void
    {
        // A bucket that refills once a minute: a local denial lasts at most 250 ms.
        $l = $this->own(['global' => self::bucket(1, 1 / 60), 'timeout_ms' => 50]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertSame('global', $l->acquire('s')->reason());
        $this->valkey->stop();
        $this->assertSame('global', $l->acquire('s')->reason(), 'Valkey was certain to deny it');
        // That Valkey is asked again (and on_unavailable decides) 250 ms after the reply is
        // the runtime's: local_denials.rs, a_local_denial_outlives_a_store_failure_by_at_most_250_ms
        // (on a fake clock, to the nanosecond).
    }

    public function testWorkersForkedFromOneParentShareWhatTheyLearn(): void
    {
        $l = $this->own(['global' => self::bucket(2, 5)]);
        $go = tempnam(sys_get_temp_dir(), 'cg-ld-go');
        $result = tempnam(sys_get_temp_dir(), 'cg-ld');
        // Forked before anything is learnt, as php-fpm forks workers from its master: only
        // a shared table lets the child see what the parent learns afterwards.
        $pid = pcntl_fork();
        if ($pid === 0) {
            for ($i = 0; $i < 500 && filesize($go) === 0; $i++) {
                usleep(10_000);
                clearstatcache();
            }
            $reasons = [];
            for ($i = 0; $i < 20; $i++) {
                $reasons[] = $l->acquire('s')->reason();
            }
            $h = $l->health(false);
            file_put_contents($result, implode(',', array_unique($reasons)) . '|' . $h['local_denials_table']
                . '|' . json_encode($h['local_denials_shared']));
            posix_kill(getmypid(), SIGKILL);
        }
        self::drain($l, 's', 3);
        $calls = $this->scriptCalls();
        file_put_contents($go, 'go');
        pcntl_waitpid($pid, $status);
        // health() says the child shares the table with its siblings; this process made it.
        $this->assertSame('global|inherited|true', file_get_contents($result));
        $h = $l->health(false);
        $this->assertSame(['own', false], [$h['local_denials_table'], $h['local_denials_shared']]);
        unlink($result);
        unlink($go);
        $this->assertSame($calls, $this->scriptCalls(), 'the child never asked Valkey');
    }
}
