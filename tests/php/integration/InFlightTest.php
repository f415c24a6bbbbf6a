<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * In-flight leases (the `in_flight` option) held by several processes at once, for each
 * engine: denials at exactly each level's limit, all or nothing with the buckets, release,
 * expiry after a SIGKILL, leases left at request end (released at RSHUTDOWN, counted
 * leaked), live limits, shadow mode, peek(), reservations, retryAfter() and a release
 * Valkey does not answer. The other workers are
 * child processes (support/LeaseHolder.php); the lease sets and the stats hash are read
 * in Valkey directly (support/InFlightTestCase.php).
 */
final class InFlightTest extends InFlightTestCase
{
    /** Buckets that never bind here: the leases are what is tested. */
    private const HOT = [
        'global' => ['capacity' => 1000, 'refill_per_second' => self::FROZEN],
        'hot_lane' => ['capacity' => 1000, 'refill_per_second' => self::FROZEN],
        'hot_shop' => ['capacity' => 1000, 'refill_per_second' => self::FROZEN],
        'hot_shops' => ['flash', 'sale'],
    ];

    /**
     * Global 5, hot lane 3, hot shop 2, held from three processes: each level denies the
     * lease past its limit (exactly at it, not one earlier), with its own reason, in the
     * order global, hot_lane, hot_shop; a release frees exactly one place.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testEachLevelDeniesExactlyAtItsLimitAcrossProcesses(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-limits');
        $options = ['name' => $name, 'in_flight' => ['global' => 5, 'hot_lane' => 3, 'hot_shop' => 2]] + self::HOT;
        $a = $this->holder($options);
        $b = $this->holder($options);
        $me = $this->leaseLimiter($options);

        $flash = $a->acquireMany('flash', 3);
        $this->assertSame([true, true], [$flash[0]['lease'], $flash[1]['lease']], 'two leases for one hot shop');
        $this->assertSame([false, 'in_flight_hot_shop', false], [$flash[2]['allowed'], $flash[2]['reason'], $flash[2]['lease']], 'the third: the hot shop holds its 2');
        $sale = $b->acquireMany('sale', 2);
        $this->assertSame([true, 'allowed'], [$sale[0]['lease'], $sale[0]['reason']], 'the lane\'s third lease');
        $this->assertSame([false, 'in_flight_hot_lane'], [$sale[1]['allowed'], $sale[1]['reason']], 'the lane holds its 3 (the shop only 1 of its 2)');
        $this->assertSame(
            [3, 3, 2, 1],
            [$this->held($name, 'global'), $this->held($name, 'lane'), $this->held($name, 'shop:flash'), $this->held($name, 'shop:sale')]
        );

        // Ordinary shops take only global leases: two more fill it.
        $ordinary = [$me->acquire('o-1'), $me->acquire('o-2')];
        $this->assertSame([true, true], [$ordinary[0]->hasLease(), $ordinary[1]->hasLease()]);
        $over = $me->acquire('o-3');
        $this->assertSame([false, 'in_flight_global', false], [$over->isAllowed(), $over->reason(), $over->hasLease()]);
        $hot = $me->acquire('flash');
        $this->assertSame('in_flight_global', $hot->reason(), 'every level full: the global one is named first');
        $this->assertSame(5, $this->held($name, 'global'));
        $this->assertSame($engine, $me->health(false)['engine'], 'decided by the engine under test');
        foreach ([$flash[2], $sale[1]] as $d) {
            $this->assertGreaterThan(0.0, $d['retry_after']);
            $this->assertLessThanOrEqual(30.0, $d['retry_after'], 'at most the default lease_seconds');
        }
        foreach ([$over, $hot] as $d) {
            $this->assertGreaterThan(0.0, $d->retryAfter());
            $this->assertLessThanOrEqual(30.0, $d->retryAfter());
        }
        $this->assertSame(1000 - 5, $over->remaining(), 'remaining() stays the buckets\' (5 calls admitted)');

        // The other worker releases: one global and one lane place free, the sale shop's
        // lease gone; exactly one hot-shop call of `sale` fits again, then the lane is full.
        $b->release();
        $this->assertSame([4, 2, 0], [$this->held($name, 'global'), $this->held($name, 'lane'), $this->held($name, 'shop:sale')]);
        $again = $me->acquire('sale');
        $this->assertTrue($again->isAllowed(), $again->reason());
        $this->assertSame('in_flight_global', $me->acquire('o-4')->reason(), 'global full again');
        $ordinary[0]->release();
        $this->assertSame('in_flight_hot_lane', $me->acquire('sale')->reason(), 'global has room, the lane has not');
        $this->assertSame('in_flight_hot_lane', $me->acquire('flash')->reason(), 'the lane is checked before the shop');
        $this->assertSame([4, 3], [$this->held($name, 'global'), $this->held($name, 'lane')], 'denials took nothing');
    }

    /**
     * All or nothing: a request refused a lease takes no tokens, one refused tokens takes
     * no lease (at any level), and one both would refuse is named by its bucket.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testLeasesAndTokensAreTakenAllOrNothing(string $engine): void
    {
        $this->startValkey($engine);
        // Refused a lease: no token taken. Bucket of 10, 2 leases held by another worker.
        $name = self::uniqueName('lease-aon');
        $options = ['name' => $name, 'global' => self::bucket(10), 'in_flight' => ['global' => 2]];
        $other = $this->holder($options);
        $this->assertSame([true, true], array_column($other->acquireMany('s', 2), 'lease'));
        $me = $this->leaseLimiter($options);
        for ($i = 0; $i < 3; $i++) {
            $d = $me->acquire('s');
            $this->assertSame(['in_flight_global', 8], [$d->reason(), $d->remaining()], "denial $i: the bucket untouched");
        }
        $other->release();
        $d = $me->acquire('s');
        $this->assertSame([true, 7], [$d->isAllowed(), $d->remaining()], '10 - 2 - 1: the three denials took no token');

        // Refused tokens: no lease at any level. Hot shop bucket of 1, leases to spare.
        $name = self::uniqueName('lease-aon-hot');
        $options = ['name' => $name, 'global' => self::bucket(100), 'hot_lane' => self::bucket(100),
            'hot_shop' => self::bucket(1), 'hot_shops' => ['flash'],
            'in_flight' => ['global' => 5, 'hot_lane' => 5, 'hot_shop' => 5]];
        $other = $this->holder($options);
        [$first, $second] = $other->acquireMany('flash', 2);
        $this->assertTrue($first['lease']);
        $this->assertSame([false, 'hot_shop', false], [$second['allowed'], $second['reason'], $second['lease']]);
        $this->assertSame([1, 1, 1], [$this->held($name, 'global'), $this->held($name, 'lane'), $this->held($name, 'shop:flash')], 'the refused request took no lease');

        // Both would refuse: the bucket is named (buckets first), nothing taken.
        $name = self::uniqueName('lease-aon-both');
        $options = ['name' => $name, 'global' => self::bucket(1), 'in_flight' => ['global' => 1]];
        $this->assertTrue($this->holder($options)->acquire('s')['lease']);
        $d = $this->leaseLimiter($options)->acquire('s');
        $this->assertSame([false, 'global', false], [$d->isAllowed(), $d->reason(), $d->hasLease()]);
        $this->assertSame(1, $this->members($name, 'global'));
    }

    /**
     * release() ends the lease at once (one place free in Valkey), is idempotent and a
     * no-op for a denial, a peek or a decision of a limiter without the option; the stats
     * hash and health() count it.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testReleaseEndsTheLeaseOnceAndPeekTakesNone(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-release');
        $log = new EventLog(self::redis());
        $log->mark();
        $l = $this->leaseLimiter(['name' => $name, 'global' => self::bucket(10), 'in_flight' => ['global' => 1, 'lease_seconds' => 5]]);
        $peeked = $l->peek('s');
        $this->assertSame([true, false, 0], [$peeked->isAllowed(), $peeked->hasLease(), $this->members($name, 'global')], 'a peek takes no lease');
        $d = $l->acquire('s');
        $this->assertSame([true, true, 1], [$d->isAllowed(), $d->hasLease(), $this->held($name, 'global')]);
        $peeked = $l->peek('s');
        $this->assertSame([false, 'in_flight_global', false], [$peeked->isAllowed(), $peeked->reason(), $peeked->hasLease()], 'a peek sees the full level');
        $denied = $l->acquire('s');
        $this->assertSame('in_flight_global', $denied->reason());
        $this->assertLessThanOrEqual(5.0, $denied->retryAfter(), 'at most lease_seconds');
        $events = array_values(array_filter($log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitDecision' && $e['limiter'] === $name));
        $this->assertSame([['in_flight_global', false]], array_map(fn ($e) => [$e['reason'], $e['allowed']], $events), 'the denial is an event with its reason; a peek is none');
        $denied->release();
        $peeked->release();
        $this->assertSame(1, $this->held($name, 'global'), 'releasing a denial or a peek frees nothing');

        $d->release();
        $this->assertFalse($d->hasLease());
        $this->assertSame(0, $this->members($name, 'global'), 'the lease is gone from Valkey');
        $d->release();
        $stats = $this->leaseStats($name);
        $this->assertSame([1, 0, 0], [$stats['released'], $stats['leaked'], $stats['expired']], 'released once, however often called');
        $this->assertGreaterThanOrEqual(0, $stats['hold_us']);
        $this->assertLessThan(5_000_000, $stats['hold_us']);
        $in = $l->health(false)['in_flight'];
        $this->assertSame(
            ['global' => 1, 'hot_lane' => null, 'hot_shop' => null, 'lease_seconds' => 5.0, 'taken' => 1, 'released' => 1, 'leaked' => 0, 'expired' => 0, 'release_failed' => 0, 'unknown_outcome' => 0],
            $in
        );
        $this->assertTrue($l->acquire('s')->isAllowed(), 'the place is free again');
        $this->assertSame($engine, $l->health(false)['engine']);

        $plain = $this->leaseLimiter(['global' => self::bucket(10)]);
        $d = $plain->acquire('s');
        $this->assertFalse($d->hasLease());
        $d->release();
        $this->assertNull($plain->health(false)['in_flight']);
    }

    /**
     * A worker killed holding leases (SIGKILL: no RSHUTDOWN) blocks their places until
     * lease_seconds ran out, no longer; the next decision that takes a lease prunes them and
     * counts them expired. The denial meanwhile says to retry within the lease's time left.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testLeasesOfAKilledWorkerExpireAfterLeaseSeconds(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-kill');
        $options = ['name' => $name, 'global' => self::bucket(100), 'in_flight' => ['global' => 2, 'lease_seconds' => 1]];
        $victim = $this->holder($options);
        $this->assertSame([true, true], array_column($victim->acquireMany('s', 2), 'lease'));
        $victim->kill();
        $me = $this->leaseLimiter($options);
        $d = $me->acquire('s');
        $this->assertSame('in_flight_global', $d->reason(), 'the dead worker\'s leases still count');
        $this->assertGreaterThan(0.0, $d->retryAfter());
        $this->assertLessThanOrEqual(1.0, $d->retryAfter(), 'no later than the leases expire');
        $this->assertSame(0, $this->leaseStats($name)['expired']);

        // Valkey's clock: the killed worker's leases running out (lease_seconds = 1).
        usleep($this->untilLastExpiry($name, 'global') + 20_000);
        $this->assertSame([0, 2], [$this->held($name, 'global'), $this->members($name, 'global')], 'expired, not yet pruned');
        $d = $me->acquire('s');
        $this->assertSame([true, true], [$d->isAllowed(), $d->hasLease()]);
        $this->assertSame(2, $this->leaseStats($name)['expired'], 'the decision pruned and counted them');
        $this->assertSame([1, 1], [$this->held($name, 'global'), $this->members($name, 'global')]);
        $this->assertTrue($me->acquire('s')->isAllowed(), 'both places free');
    }

    /**
     * A lease still held when the request ends (CLI: the script's end) is released then
     * (RSHUTDOWN) and counted leaked, in Valkey's stats hash; a released one is not.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testALeaseHeldAtRequestEndIsReleasedAndCountedLeaked(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-leak');
        $options = ['name' => $name, 'global' => self::bucket(100), 'in_flight' => ['global' => 3]];
        $tidy = $this->holder($options);
        $sloppy = $this->holder($options);
        $this->assertTrue($tidy->acquire('s')['lease']);
        $this->assertSame([true, true], array_column($sloppy->acquireMany('s', 2), 'lease'));
        $this->assertSame(3, $this->held($name, 'global'));
        $counts = $tidy->release();
        $this->assertSame([1, 1, 0], [$counts['taken'], $counts['released'], $counts['leaked']], 'the child\'s health()');
        $this->assertSame(0, $sloppy->quit(), 'exits cleanly');
        $this->assertSame(0, $this->members($name, 'global'), 'released at the request\'s end');
        $stats = $this->leaseStats($name);
        $this->assertSame([3, 2, 0], [$stats['released'], $stats['leaked'], $stats['expired']]);
    }

    /**
     * Shadow mode: leases are taken while enforcement would allow, and counted; past the
     * limit the call goes ahead (isAllowed()) without a lease, wouldAllow() false with the
     * in-flight reason.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testShadowModeTakesLeasesButNeverDenies(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-shadow');
        $options = ['name' => $name, 'mode' => 'shadow', 'global' => self::bucket(100), 'in_flight' => ['global' => 2]];
        $other = $this->holder($options);
        $this->assertSame([true, true], array_column($other->acquireMany('s', 2), 'lease'));
        $me = $this->leaseLimiter($options);
        $d = $me->acquire('s');
        $this->assertSame(
            [true, false, 'in_flight_global', true, false],
            [$d->isAllowed(), $d->wouldAllow(), $d->reason(), $d->isShadow(), $d->hasLease()]
        );
        $this->assertGreaterThan(0.0, $d->retryAfter());
        $this->assertSame(2, $this->members($name, 'global'), 'no lease past the limit');
        $other->release();
        $d = $me->acquire('s');
        $this->assertSame([true, true, true], [$d->isAllowed(), $d->wouldAllow(), $d->hasLease()], 'a lease while enforcement would allow');
        $this->assertSame(1, $this->held($name, 'global'));
        $d->release();
        $this->assertSame(0, $this->members($name, 'global'));
    }

    /**
     * A reservation ($maxWaitSeconds) waits for rate tokens only: when the in-flight level
     * is full it is denied at once, sleeping nothing and taking nothing.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testAReservationIsDeniedAtOnceByAFullLevel(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-reserve');
        // One token, back after 4 s: a reservation of 5 s would wait for it.
        $options = ['name' => $name, 'global' => self::bucket(1, 0.25), 'in_flight' => ['global' => 1]];
        $other = $this->holder($options);
        $this->assertTrue($other->acquire('s')['lease']);
        $me = $this->leaseLimiter($options);
        $t0 = hrtime(true);
        $d = $me->acquire('s', 1, 5.0);
        $elapsed = (hrtime(true) - $t0) / 1e9;
        $this->assertSame([false, 'in_flight_global', 0.0, false], [$d->isAllowed(), $d->reason(), $d->waited(), $d->hasLease()]);
        $this->assertLessThan(2.0, $elapsed, 'answered without waiting for the token (due in about 4 s)');
        $this->assertGreaterThan(0.0, $d->retryAfter());
        $this->assertLessThanOrEqual(30.0, $d->retryAfter());
        $this->assertSame(1, $this->members($name, 'global'));
        $this->assertLessThanOrEqual(4.0, $me->peek('s')->retryAfter(), 'no token reserved ahead either (that would push the next one to ~8 s)');
    }

    /**
     * A release Valkey does not answer never throws into the checkout: it is counted in
     * health()['in_flight']['release_failed'], the decision no longer holds the lease
     * (it is left to expire), and a second release() does not try again.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testAFailedReleaseNeverThrowsAndIsCounted(string $engine): void
    {
        $this->startValkey($engine);
        $l = $this->leaseLimiter(['global' => self::bucket(10), 'in_flight' => ['global' => 2], 'timeout_ms' => 100, 'on_unavailable' => 'allow']);
        $d = $l->acquire('s');
        $this->assertTrue($d->hasLease());
        $this->valkey->stop();
        $d->release();
        $d->release();
        $this->assertFalse($d->hasLease());
        $in = $l->health(false)['in_flight'];
        $this->assertSame([1, 0, 1], [$in['taken'], $in['released'], $in['release_failed']]);
    }

    /**
     * Live limits (`checkout-guard limiter set in_flight.global=N ...`): the next decision
     * of every worker uses them; lowered below what is held, new leases are denied until
     * enough are released, and no held lease is revoked; raised, more are admitted;
     * `=default` is the option again.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testLiveLimitsApplyToTheNextLeaseAndNeverRevokeOne(string $engine): void
    {
        $this->startValkey($engine);
        $name = self::uniqueName('lease-live');
        $options = ['name' => $name, 'in_flight' => ['global' => 3, 'hot_lane' => 3, 'hot_shop' => 2]] + self::HOT;
        $a = $this->holder($options);
        $b = $this->holder($options);
        $this->assertSame([true, true], array_column($a->acquireMany('o', 2), 'lease'));
        $this->assertTrue($b->acquire('o')['lease']);

        [$code, , $err] = Cli::limiter($this->valkey->url(), $name, 'set', 'in_flight.global=1', 'in_flight.hot_lane=1', 'in_flight.hot_shop=1');
        $this->assertSame(0, $code, $err);
        $me = $this->leaseLimiter($options);
        $this->assertSame('in_flight_global', $me->acquire('o')->reason());
        $this->assertSame(3, $this->held($name, 'global'), 'the held leases are not revoked');
        $a->release();
        $this->assertSame('in_flight_global', $me->acquire('o')->reason(), '1 held, limit 1');
        $this->assertSame('in_flight_global', $b->acquire('o')['reason'], 'every worker: the other one too');
        $b->release();
        $this->assertTrue($me->acquire('o')->hasLease(), 'none held: one lease');
        $this->assertSame('in_flight_global', $me->acquire('o')->reason(), 'and only one');

        [$code, , $err] = Cli::limiter($this->valkey->url(), $name, 'set', 'in_flight.global=4', 'in_flight.hot_lane=default');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($a->acquire('flash')['lease']);
        $this->assertSame('in_flight_hot_shop', $a->acquire('flash')['reason'], 'the hot shop\'s live limit of 1');
        $this->assertSame([true, true], array_column($b->acquireMany('o', 2), 'lease'), 'global raised to 4');
        $this->assertSame('in_flight_global', $me->acquire('o')->reason());

        [$code, , $err] = Cli::limiter($this->valkey->url(), $name, 'set', 'in_flight.global=default', 'in_flight.hot_shop=default');
        $this->assertSame(0, $code, $err);
        $this->assertSame('in_flight_global', $me->acquire('o')->reason(), 'the option\'s 3 again: 4 held');
        $this->assertSame(4, $this->held($name, 'global'));
    }
}
