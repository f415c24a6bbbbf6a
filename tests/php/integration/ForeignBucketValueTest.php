<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * A bucket key that holds what another library, an older release or a hand edit left
 * there (Symfony RateLimiter's `testWrongWindowFromCache`: a window of another kind in
 * the key) is read by every engine as a missing key: a full bucket, and the next
 * decision that takes tokens replaces the value with a bucket of ours.
 */
final class ForeignBucketValueTest extends LimiterTestCase
{
    /** What Symfony's cache storage leaves for a window of another class, and others. */
    private const FOREIGN = [
        'symfony' => 'O:55:"Symfony\Component\RateLimiter\Tests\Resources\DummyWindow":0:{}',
        'text' => 'abc',
        'empty' => '',
        'float' => '5.5',
        'exponent' => '1e3',
        'huge' => '99999999999999999999999999',
        'junk' => '1800000000000000junk',
    ];

    public function testTheGlobalBucketWithAForeignValueIsFullForEveryEngineAndReplaced(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            $r = $v->client();
            foreach (['lua', 'module'] as $engine) {
                foreach (self::FOREIGN + ['hash' => null] as $what => $value) {
                    $name = self::uniqueName("foreign-$engine-$what");
                    $key = "{cg:$name}:b:global";
                    if ($value === null) {
                        $r->hSet($key, 'tokens', '3');
                    } else {
                        $r->set($key, $value);
                    }
                    $l = new RateLimiter([
                        'name' => $name,
                        'url' => $v->url(),
                        'global' => self::bucket(5),
                        'engine' => $engine,
                        'on_unavailable' => 'deny',
                    ]);
                    $d = $l->acquire('shop-1');
                    $this->assertSame(
                        [true, 'allowed', 4],
                        [$d->isAllowed(), $d->reason(), $d->remaining()],
                        "$engine, $what: a full bucket of 5, one taken"
                    );
                    $this->assertSame($engine, $l->health()['engine'], "$engine, $what");
                    $this->assertMatchesRegularExpression('/^\d+:\d+:\d+:$/', (string) $r->get($key), "$engine, $what: replaced");
                    $this->assertGreaterThan(0, $r->pTtl($key), "$engine, $what: expires as a bucket of ours");
                    $this->assertSame(['allowed' => 4, 'global' => 1], self::drain($l, 'shop-2', 5), "$engine, $what: then the bucket as usual");
                }
            }
        } finally {
            $v->stop();
        }
    }

    public function testAForeignValueInAHotShopsBucketIsAFullBucketToo(): void
    {
        $name = self::uniqueName('foreign-shop');
        $r = self::redis();
        $r->set("{cg:$name}:b:shop:flash", self::FOREIGN['symfony']);
        $l = $this->limiter([
            'name' => $name,
            'global' => self::bucket(10),
            'hot_shop' => self::bucket(2),
            'hot_shops' => ['flash'],
            'on_unavailable' => 'deny',
        ]);
        $this->assertSame(['allowed' => 2, 'hot_shop' => 1], self::drain($l, 'flash', 3));
    }
}
