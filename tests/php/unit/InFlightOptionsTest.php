<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * The `in_flight` option without Valkey: bad values throw a ConfigurationException naming
 * the part (`in_flight.hot_lane` ...) and the value; health() shows the option; a decision
 * Valkey could not make holds no lease, and release() on it does nothing.
 */
final class InFlightOptionsTest extends LimiterTestCase
{
    public static function badInFlight(): array
    {
        $g = ['capacity' => 10, 'refill_per_second' => 5.0];
        $hot = ['global' => $g, 'hot_lane' => $g, 'hot_shop' => $g];
        return [
            'not an array' => [['global' => $g, 'in_flight' => 3], 'in_flight'],
            'global missing' => [['global' => $g, 'in_flight' => ['hot_lane' => 1]], 'in_flight.global'],
            'global zero' => [['global' => $g, 'in_flight' => ['global' => 0]], 'in_flight.global'],
            'global float' => [['global' => $g, 'in_flight' => ['global' => 2.0]], 'in_flight.global'],
            'global string' => [['global' => $g, 'in_flight' => ['global' => '5']], 'in_flight.global'],
            'hot_lane without its bucket' => [['global' => $g, 'in_flight' => ['global' => 5, 'hot_lane' => 2]], 'in_flight.hot_lane'],
            'hot_shop without its bucket' => [['global' => $g, 'hot_lane' => $g, 'in_flight' => ['global' => 5, 'hot_shop' => 2]], 'in_flight.hot_shop'],
            'hot_lane above global' => [$hot + ['in_flight' => ['global' => 5, 'hot_lane' => 6]], 'in_flight.hot_lane'],
            'hot_shop above global' => [$hot + ['in_flight' => ['global' => 5, 'hot_shop' => 6]], 'in_flight.hot_shop'],
            'lease_seconds too short' => [['global' => $g, 'in_flight' => ['global' => 5, 'lease_seconds' => 0.5]], 'in_flight.lease_seconds'],
            'lease_seconds too long' => [['global' => $g, 'in_flight' => ['global' => 5, 'lease_seconds' => 601]], 'in_flight.lease_seconds'],
            'lease_seconds string' => [['global' => $g, 'in_flight' => ['global' => 5, 'lease_seconds' => '30']], 'in_flight.lease_seconds'],
            'unknown key' => [['global' => $g, 'in_flight' => ['global' => 5, 'burst' => 1]], 'in_flight.burst'],
        ];
    }

    /** @dataProvider badInFlight */
    #[DataProvider('badInFlight')]
    public function testBadValuesNameTheirPart(array $options, string $part): void
    {
        try {
            new RateLimiter($options);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringStartsWith("checkout_guard: $part ", $e->getMessage(), 'the message names the part first');
        }
    }

    public function testGoodValuesAreShownByHealth(): void
    {
        $g = ['capacity' => 10, 'refill_per_second' => 5.0];
        $l = $this->limiter([
            'global' => $g, 'hot_lane' => $g, 'hot_shop' => $g,
            'in_flight' => ['global' => 10, 'hot_lane' => 10, 'hot_shop' => 3, 'lease_seconds' => 2.5],
            'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(),
        ]);
        $this->assertSame(
            ['global' => 10, 'hot_lane' => 10, 'hot_shop' => 3, 'lease_seconds' => 2.5, 'taken' => 0, 'released' => 0, 'leaked' => 0, 'expired' => 0, 'release_failed' => 0, 'unknown_outcome' => 0],
            $l->health(false)['in_flight']
        );
        $d = $this->limiter(['global' => $g, 'in_flight' => ['global' => 1], 'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort()])->health(false)['in_flight'];
        $this->assertSame([null, null, 30.0], [$d['hot_lane'], $d['hot_shop'], $d['lease_seconds']], 'the defaults: no hot levels, 30 s');
    }

    public function testADecisionValkeyDidNotMakeHoldsNoLease(): void
    {
        $l = $this->limiter([
            'global' => self::bucket(5),
            'in_flight' => ['global' => 1],
            'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(),
            'timeout_ms' => 20,
            'on_unavailable' => 'allow',
        ]);
        foreach ([1, 2] as $i) {
            $d = $l->acquire('s');
            $this->assertSame([true, 'unavailable', false], [$d->isAllowed(), $d->reason(), $d->hasLease()], "call $i: failing open, no limit of leases");
            $d->release();
            $d->release();
        }
        $this->assertSame(0, $l->health(false)['in_flight']['taken']);
        $this->assertSame(0, $l->health(false)['in_flight']['release_failed'], 'nothing to release');
    }
}
