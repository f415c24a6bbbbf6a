<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;

/**
 * Rates whole microseconds cannot honour are refused by name (constructor and CLI), and a
 * decision that fails in Valkey takes nothing.
 * Each test runs its own Valkey (DecisionTestCase); formerly part of DecisionSeamsTest.
 */
final class RatesAndFailedDecisionsTest extends DecisionTestCase
{
    public function testRatesWholeMicrosecondsCannotHonourAreRefusedByName(): void
    {
        $refused = [
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 999999]], '999999'],
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 600000]], '600000'],
            ['global', ['global' => ['capacity' => 10, 'refill_per_second' => 3000.5]], '3000.5'],
            ['hot_shop', ['global' => ['capacity' => 10, 'refill_per_second' => 1000000], 'hot_shop' => ['capacity' => 5, 'refill_per_second' => 999999.0]], '999999'],
        ];
        foreach ($refused as [$option, $options, $value]) {
            try {
                $this->own($options);
                $this->fail("$option.refill_per_second $value accepted, though whole microseconds run it at another rate");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString("$option.refill_per_second", $e->getMessage());
                $this->assertStringContainsString($value, $e->getMessage());
            }
        }
        foreach ([1000000, 500000, 1000, 2.5] as $rate) {
            $l = $this->own(['global' => ['capacity' => 10, 'refill_per_second' => $rate]]);
            $this->assertTrue($l->acquire('s')->isAllowed(), "refill_per_second $rate");
        }
    }

    public function testTheCliRefusesARateItCannotHonour(): void
    {
        $name = self::uniqueName('rate');
        $l = $this->own(['name' => $name, 'global' => self::bucket(10)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$code, $out, $err] = $this->cli($name, 'set', 'global=10/999999');
        $this->assertSame(2, $code, $out);
        $this->assertStringContainsString('global.refill_per_second', $err);
        $this->assertSame(0, $this->valkey->client()->exists("{cg:$name}:limits", "{cg:$name}:limits:v", "{cg:$name}:changes"), 'nothing written');
    }

    public function testADecisionThatFailsInValkeyTakesNothing(): void
    {
        $name = self::uniqueName('atomic');
        $l = $this->own([
            'name' => $name,
            'global' => self::bucket(5),
            'on_unavailable' => 'deny',
            'auto_hot' => ['window_seconds' => 3600],
        ]);
        $r = $this->valkey->client();
        [$s, $us] = $r->time();
        $window = intdiv((int) $s * 1_000_000 + (int) $us, 3600 * 1_000_000);
        // A string where the decision counts the window's tokens (a hash): the script fails.
        $bad = ["{cg:$name}:ah:$window", "{cg:$name}:ah:" . ($window + 1)];
        foreach ($bad as $key) {
            $r->set($key, 'not a hash');
        }
        $d = $l->acquire('s');
        $this->assertSame([false, 'unavailable'], [$d->isAllowed(), $d->reason()]);
        $this->assertSame(0.0, $d->retryAfter(), 'Valkey answered (with an error): nothing to wait for');
        $r->del($bad);
        $this->assertSame(['allowed' => 5, 'global' => 1], self::drain($l, 's', 6), 'the failed decision took nothing');
    }
}
