<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;
use CheckoutGuard\Testing\FakeLimiter;
use Random\Engine\Mt19937;
use Random\Randomizer;

/**
 * CheckoutGuard\Testing\FakeLimiter decides as the real limiter does: random sequences of
 * acquire() (some with a maxWaitSeconds), peek(), markHot(), unmarkHot(), isHot() and
 * reset() on random limiters (hot lane and hot-shop buckets or not, a listed hot shop,
 * shop IDs as strings and ints, shadow mode now and then), given to a RateLimiter on the
 * suite's Valkey and to a fake with the very same options; every answer must agree.
 *
 * The fake's clock cannot drive Valkey's, so the buckets refill one token per 1000 s (none
 * refills during a sequence) and marks last an hour: allowed, reason, remaining, hot shop,
 * wouldAllow and isHot do not depend on time and must be equal; retryAfter does (Valkey's
 * clock moved on by the sequence's duration): the real one is at most the fake's, and
 * shorter by no more than the time the sequence has run.
 *
 * The seed is said on stderr and in every failure; FAKE_AGREE_SEED=N replays it:
 *   FAKE_AGREE_SEED=N PHP_ONLY=1 CG_SKIP_BUILD=1 scripts/test.sh --testsuite integration --filter FakeLimiterAgrees
 */
final class FakeLimiterAgreesTest extends LimiterTestCase
{
    private const SEQUENCES = 4;
    private const OPERATIONS = 150;

    public function testTheFakeDecidesAsTheRealLimiterOnRandomSequences(): void
    {
        $seed = getenv('FAKE_AGREE_SEED') !== false ? (int) getenv('FAKE_AGREE_SEED') : random_int(1, 1 << 31);
        fwrite(STDERR, "FakeLimiterAgreesTest: seed $seed (FAKE_AGREE_SEED=$seed replays it)\n");
        $r = new Randomizer(new Mt19937($seed));
        $compared = 0;
        for ($s = 0; $s < self::SEQUENCES; $s++) {
            $compared += $this->sequence($r, "seed $seed, sequence $s");
        }
        $this->assertGreaterThan(self::SEQUENCES * self::OPERATIONS / 2, $compared, "seed $seed: decisions compared");
    }

    /** One limiter, one sequence; returns the number of decisions compared. */
    private function sequence(Randomizer $r, string $label): int
    {
        $global = $r->getInt(2, 30);
        $options = ['global' => self::bucket($global, self::FROZEN)];
        if ($r->getInt(0, 2) > 0) {
            $options['hot_lane'] = self::bucket($r->getInt(1, $global), self::FROZEN / $r->getInt(1, 2));
        }
        if ($r->getInt(0, 2) > 0) {
            $options['hot_shop'] = self::bucket($r->getInt(1, $global), self::FROZEN / $r->getInt(1, 4));
        }
        $shops = ['s1', 's2', 's3', 41, 42, 'listed'];
        $options['hot_shops'] = ['listed'];
        if ($r->getInt(0, 4) === 0) {
            $options['mode'] = 'shadow';
        }
        $maxTokens = min(3, ...array_column(array_intersect_key($options, array_flip(['global', 'hot_lane', 'hot_shop'])), 'capacity'));

        $real = $this->limiter($options);
        $fake = new FakeLimiter($options + ['name' => 'agrees', 'url' => self::url()]);
        $start = hrtime(true);
        $history = [];
        $compared = 0;
        for ($i = 0; $i < self::OPERATIONS; $i++) {
            $shop = $shops[$r->getInt(0, count($shops) - 1)];
            $roll = $r->getInt(1, 100);
            $tokens = $r->getInt(1, $maxTokens);
            $op = match (true) {
                $roll <= 55 => ['acquire', $shop, $tokens, $r->getInt(0, 3) === 0 ? 5.0 : 0.0],
                $roll <= 67 => ['peek', $shop, $tokens],
                $roll <= 78 => ['markHot', $shop, 3600],
                $roll <= 86 => ['unmarkHot', $shop],
                $roll <= 97 => ['isHot', $shop],
                default => ['reset'],
            };
            $history[] = json_encode($op);
            $context = sprintf("%s, operation %d of %s\nlast operations:\n  %s", $label, $i, json_encode($options), implode("\n  ", array_slice($history, -12)));
            $a = self::apply($real, $op);
            $b = self::apply($fake, $op);
            if ($a instanceof Decision) {
                $this->assertInstanceOf(Decision::class, $b);
                $elapsed = (hrtime(true) - $start) / 1e9;
                $this->assertSame(self::timeless($a), self::timeless($b), $context);
                $this->assertLessThanOrEqual($b->retryAfter() + 1e-6, $a->retryAfter(), "retryAfter: Valkey's clock ran ahead, never behind\n$context");
                $this->assertGreaterThanOrEqual($b->retryAfter() - $elapsed - 1e-3, $a->retryAfter(), "retryAfter: shorter by at most the time run ($elapsed s)\n$context");
                $this->assertSame(0.0, $b->waited(), $context);
                $compared++;
            } else {
                $this->assertSame($a, $b, $context);
            }
        }
        return $compared;
    }

    private static function apply(Limiter $l, array $op): mixed
    {
        return match ($op[0]) {
            'acquire' => $l->acquire($op[1], $op[2], $op[3]),
            'peek' => $l->peek($op[1], $op[2]),
            'markHot' => $l->markHot($op[1], $op[2]),
            'unmarkHot' => $l->unmarkHot($op[1]),
            'isHot' => $l->isHot($op[1]),
            'reset' => $l->reset(),
        };
    }

    /** What a decision says that does not depend on the clock. */
    private static function timeless(Decision $d): array
    {
        return [
            'allowed' => $d->isAllowed(),
            'reason' => $d->reason(),
            'remaining' => $d->remaining(),
            'hot' => $d->isHotShop(),
            'wouldAllow' => $d->wouldAllow(),
            'shadow' => $d->isShadow(),
            'retries' => $d->retryAfter() > 0.0,
        ];
    }
}
