<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * attack2: a bucket value every engine reads as ours (digits only, each number at most
 * 2^53 - 1, interval >= 1) but whose carry-over to other limits leaves Lua's exact range.
 * `9007199254740991:1:1` is a bucket 285 years in debt: every engine denies it. A live
 * change (`limiter set`) carries it over in set_limits.lua, which formats the carried TAT
 * (~1e24) with %d and writes `-9223372036854775808:...`: a value no engine reads, so the
 * bucket becomes full and the next decisions are allowed, while the model
 * (StoredBucket::effective_tat, saturating) keeps denying.
 * Seen before any change: with engine=lua every decision on such a bucket is a script
 * error (`SET ... PX` gets a non-integer at decide.lua's write-back: on_unavailable, and
 * the key is never replaced); with engine=module the first decision denies with a
 * retryAfter of 9.2e12 s and writes `9223372036854775807:...` (beyond 2^53: foreign), so
 * the next decision sees a full bucket. `1800000000000000:1:0`: lua denies with
 * retryAfter 0 and writes `-9223372036854775808:...` (foreign: the next one is allowed).
 */
final class ForeignValueLiveChangeTest extends LimiterTestCase
{
    protected function tearDown(): void
    {
        ini_restore('checkout_guard.local_denials');
        parent::tearDown();
    }

    /** A denial that carries the bucket over writes it back (decide.lua, moved) the same way. */
    public function testADenialNeverTurnsAReadableBucketIntoAFullOne(): void
    {
        // Every decision below is Valkey's: local denials off (rather than waiting out
        // their 250 ms between decisions).
        ini_set('checkout_guard.local_denials', '0');
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            $r = $v->client();
            foreach (['lua', 'module'] as $engine) {
                $name = self::uniqueName("foreign-deny-$engine");
                $key = "{cg:$name}:b:global";
                $r->set($key, '9007199254740991:1:1');
                $l = new RateLimiter([
                    'name' => $name,
                    'url' => $v->url(),
                    'global' => self::bucket(10),
                    'engine' => $engine,
                    'on_unavailable' => 'allow',
                ]);
                $seen = [];
                for ($i = 0; $i < 3; $i++) {
                    $d = $l->acquire('shop-1');
                    $seen[] = [$d->isAllowed(), $d->reason(), $d->retryAfter(), (string) $r->get($key)];
                }
                $this->assertSame(
                    [[false, 'global'], [false, 'global'], [false, 'global']],
                    array_map(fn ($s) => [$s[0], $s[1]], $seen),
                    "$engine: the debt denies every time; seen " . json_encode($seen)
                );
            }
        } finally {
            $v->stop();
        }
    }

    public function testALiveChangeNeverTurnsAReadableBucketIntoAFullOne(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            $r = $v->client();
            foreach (['lua', 'module'] as $engine) {
                $name = self::uniqueName("foreign-live-$engine");
                $key = "{cg:$name}:b:global";
                $l = fn () => new RateLimiter([
                    'name' => $name,
                    'url' => $v->url(),
                    'global' => self::bucket(10),
                    'engine' => $engine,
                    'on_unavailable' => 'allow',
                ]);
                $this->assertTrue($l()->acquire('shop-1')->isAllowed(), "$engine: settings published");
                $r->set($key, '9007199254740991:1:1');
                [$code, , $err] = Cli::limiter($v->url(), $name, 'set', 'global=20/0.001');
                $this->assertSame(0, $code, "$engine: $err");
                $stored = (string) $r->get($key);
                $this->assertMatchesRegularExpression('/^\d+:\d+:\d+:\d*$/', $stored, "$engine: the carried bucket is still one the engines read");
                $d = $l()->acquire('shop-1');
                $this->assertSame([false, 'global'], [$d->isAllowed(), $d->reason()], "$engine: after the change ($stored), still denied");
            }
        } finally {
            $v->stop();
        }
    }
}
