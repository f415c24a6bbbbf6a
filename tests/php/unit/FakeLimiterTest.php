<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\Testing\FakeClock;
use CheckoutGuard\Testing\FakeLimiter;
use PHPUnit\Framework\TestCase;
use Random\Engine\Mt19937;
use Random\Randomizer;

require_once __DIR__ . '/../support/LimiterModel.php';

/**
 * CheckoutGuard\Testing\FakeLimiter without Valkey: scripted answers, the token-bucket
 * model on its fake clock (hot shops, retryAfter, remaining, marks running out), the
 * records, and bad options and arguments refused with the real limiter's very messages
 * (a RateLimiter is built, never connected: it checks everything before it connects);
 * on a clock that does not move, the decisions of the project's reference model
 * (support/LimiterModel.php). FakeLimiterAgreesTest (integration) compares its decisions
 * with the real limiter's.
 */
final class FakeLimiterTest extends TestCase
{
    private static function bucket(int $capacity, float $rate = 1.0): array
    {
        return ['capacity' => $capacity, 'refill_per_second' => $rate];
    }

    /** @return array{0: bool, 1: string, 2: float, 3: int, 4: bool, 5: float} */
    private static function seen(Decision $d): array
    {
        return [$d->isAllowed(), $d->reason(), $d->retryAfter(), $d->remaining(), $d->isHotShop(), $d->waited()];
    }

    public function testItIsALimiter(): void
    {
        $this->assertInstanceOf(Limiter::class, FakeLimiter::allowing());
        $this->assertInstanceOf(Limiter::class, new FakeLimiter(['global' => self::bucket(1)]));
    }

    public function testAllowingAllowsEveryCallAndRecordsIt(): void
    {
        $fake = FakeLimiter::allowing();
        $d = $fake->acquire(42, 3);
        $this->assertSame([true, 'allowed', 0.0, PHP_INT_MAX, false, 0.0], self::seen($d));
        $fake->acquire('shop-1');
        $fake->peek('shop-1');
        $fake->markHot('shop-1', 60);
        $this->assertTrue($fake->acquire('shop-1')->isHotShop(), 'a marked shop is told hot');
        $fake->feedback(42, 429, 2.0);
        $fake->reset();
        $this->assertSame([
            ['method' => 'acquire', 'shop' => '42', 'tokens' => 3],
            ['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1],
            ['method' => 'peek', 'shop' => 'shop-1', 'tokens' => 1],
            ['method' => 'markHot', 'shop' => 'shop-1', 'tokens' => null],
            ['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1],
            ['method' => 'feedback', 'shop' => '42', 'tokens' => null],
            ['method' => 'reset', 'shop' => null, 'tokens' => null],
        ], $fake->calls());
        $this->assertSame(3, $fake->acquired());
        $this->assertSame(2, $fake->acquired('shop-1'));
        $this->assertSame(1, $fake->acquired(42), 'an int shop ID is its decimal string');
        $this->assertSame(0, $fake->acquired('nobody'));
        $this->assertSame([['shop' => '42', 'statusCode' => 429, 'retryAfterSeconds' => 2.0]], $fake->feedbackCalls());
        $this->assertCount(3, $fake->decisions());
        $this->assertSame($d, $fake->decisions()[0]);
    }

    public function testDenyingDeniesWithTheReasonAndRetryAfter(): void
    {
        $fake = FakeLimiter::denying('global', 2.5);
        $this->assertSame([false, 'global', 2.5, 0, false, 0.0], self::seen($fake->acquire('s')));
        $this->assertSame([false, 'global', 2.5, 0, false, 0.0], self::seen($fake->peek('s')));
        $this->assertSame(0, $fake->acquired(), 'a denial is not acquired');
        $this->assertSame(1.0, FakeLimiter::denying()->acquire('s')->retryAfter());
        $this->assertTrue(FakeLimiter::denying('hot_shop')->acquire('s')->isHotShop(), 'only a hot shop is denied by its bucket');
        $this->assertSame('provider', FakeLimiter::denying('provider', 30.0)->acquire('s')->reason());
        foreach ([['allowed', 1.0, 'reason'], ['nope', 1.0, 'reason'], ['global', -1.0, 'retryAfter'], ['global', NAN, 'retryAfter']] as [$reason, $retry, $named]) {
            try {
                FakeLimiter::denying($reason, $retry);
                $this->fail("denying($reason, $retry) accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($named, $e->getMessage());
            }
        }
    }

    public function testQueuedDecisionsComeFirstThenTheDefault(): void
    {
        $fake = FakeLimiter::allowing()->willReturn(
            new Decision(false, 'hot_shop', 3.0, 0, true),
            new Decision(true, 'allowed', 0.0, 7),
        );
        $this->assertSame('hot_shop', $fake->peek('s')->reason(), 'peek answers the next one');
        $this->assertSame('hot_shop', $fake->peek('s')->reason(), '...without taking it');
        $this->assertSame([false, 'hot_shop', 3.0, 0, true, 0.0], self::seen($fake->acquire('s')));
        $this->assertSame(7, $fake->acquire('s')->remaining());
        $this->assertSame(PHP_INT_MAX, $fake->acquire('s')->remaining(), 'then allowing() again');
        $this->assertSame(2, $fake->acquired('s'));

        // On the model, a queued decision takes nothing from the buckets.
        $model = new FakeLimiter(['global' => self::bucket(1)]);
        $model->willReturn(new Decision(true));
        $this->assertTrue($model->acquire('s')->isAllowed());
        $this->assertSame([true, 'allowed', 0.0, 0, false, 0.0], self::seen($model->acquire('s')));
        $this->assertSame('global', $model->acquire('s')->reason());
    }

    public function testTheGlobalBucketRefillsOnlyWhenTheClockMoves(): void
    {
        $fake = new FakeLimiter(['global' => self::bucket(2, 1.0)]);
        $this->assertSame([true, 'allowed', 0.0, 1, false, 0.0], self::seen($fake->acquire('a')));
        $this->assertSame([true, 'allowed', 0.0, 0, false, 0.0], self::seen($fake->acquire('b')));
        $this->assertSame([false, 'global', 1.0, 0, false, 0.0], self::seen($fake->acquire('a')));
        $this->assertSame([false, 'global', 1.0, 0, false, 0.0], self::seen($fake->acquire('a')), 'no time passes by itself');
        $fake->advance(0.25);
        $this->assertSame([false, 'global', 0.75, 0, false, 0.0], self::seen($fake->acquire('a')));
        $this->assertSame([false, 'global', 1.75, 0, false, 0.0], self::seen($fake->peek('a', 2)), 'retryAfter is for the tokens asked');
        $fake->advance(0.75);
        $this->assertSame([true, 'allowed', 0.0, 0, false, 0.0], self::seen($fake->acquire('a')));
        $fake->advance(100.0);
        $this->assertSame(1, $fake->acquire('a')->remaining(), 'never above the capacity');
        $this->assertSame(3, $fake->acquired('a'));
        $this->assertSame(1, $fake->acquired('b'));
    }

    /** global 10 at 1/s, hot lane 4 at 0.5/s, hot shop 2 at 0.25/s; shop "7" listed hot. */
    private static function hotLimiter(?FakeClock $clock = null, array $more = []): FakeLimiter
    {
        return new FakeLimiter($more + [
            'global' => self::bucket(10, 1.0),
            'hot_lane' => self::bucket(4, 0.5),
            'hot_shop' => self::bucket(2, 0.25),
            'hot_shops' => [7],
        ], $clock);
    }

    public function testAHotShopTakesFromEveryBucketAllOrNothing(): void
    {
        $fake = self::hotLimiter();
        // remaining: the tightest bucket after the decision (the hot shop's).
        $this->assertSame([true, 'allowed', 0.0, 1, true, 0.0], self::seen($fake->acquire(7)));
        $this->assertSame([true, 'allowed', 0.0, 0, true, 0.0], self::seen($fake->acquire('7')));
        // Its own bucket is empty: denied by it, the global bucket and the lane untouched
        // (global 8 left: an ordinary shop sees 7 after taking one).
        $this->assertSame([false, 'hot_shop', 4.0, 0, true, 0.0], self::seen($fake->acquire(7)));
        $this->assertSame([true, 'allowed', 0.0, 7, false, 0.0], self::seen($fake->acquire('plain')));
        // Another hot shop has a bucket of its own, and shares the lane (2 left).
        $fake->markHot('m', 3600);
        $this->assertSame([true, 'allowed', 0.0, 1, true, 0.0], self::seen($fake->acquire('m')));
        $this->assertSame([true, 'allowed', 0.0, 0, true, 0.0], self::seen($fake->acquire('m')));
        $fake->markHot('n', 3600);
        // The lane is empty now: denied by the lane (before the shop's own, full, bucket).
        $this->assertSame([false, 'hot_lane', 2.0, 0, true, 0.0], self::seen($fake->acquire('n')));
        // An ordinary shop is untouched by the hot buckets: global has 10 - 5 = 5.
        $this->assertSame([true, 'allowed', 0.0, 4, false, 0.0], self::seen($fake->acquire('plain')));
    }

    public function testTheReasonIsTheFirstBucketLackingTokensAndRetryAfterWaitsForTheSlowest(): void
    {
        $fake = new FakeLimiter([
            'global' => self::bucket(3, 1.0),
            'hot_lane' => self::bucket(3, 0.5),
            'hot_shop' => self::bucket(2, 0.25),
        ]);
        $fake->markHot('h', 3600);
        $fake->acquire('h', 2);   // global 1, lane 1, shop 0
        // Every bucket lacks tokens for 2: the reason is global's, the wait the shop's
        // (2 tokens at 0.25/s: 8 s; global needs 1 s, the lane 2 s).
        $this->assertSame([false, 'global', 8.0, 0, true, 0.0], self::seen($fake->acquire('h', 2)));
        $fake->advance(2.0);      // global 3, lane 2, shop 0.5
        $this->assertSame([false, 'hot_shop', 6.0, 0, true, 0.0], self::seen($fake->acquire('h', 2)));
        $fake->advance(6.0);
        $this->assertSame([true, 'allowed', 0.0, 0, true, 0.0], self::seen($fake->acquire('h', 2)));
        // An ordinary shop waits for global only.
        $this->assertSame([true, 'allowed', 0.0, 0, false, 0.0], self::seen($fake->acquire('o')));
        $this->assertSame([false, 'global', 1.0, 0, false, 0.0], self::seen($fake->acquire('o')));
    }

    public function testMarksRunOutAsTheClockMovesAndUnmarkEndsThem(): void
    {
        $clock = new FakeClock();
        $fake = self::hotLimiter($clock);
        $fake->markHot('m', 2);
        $this->assertTrue($fake->isHot('m'));
        $this->assertTrue($fake->acquire('m')->isHotShop());
        $clock->advance(1.999999);
        $this->assertTrue($fake->isHot('m'));
        $fake->advance(0.000001);
        $this->assertFalse($fake->isHot('m'), 'the mark ran out after 2 s');
        $d = $fake->acquire('m');
        $this->assertFalse($d->isHotShop());
        $this->assertSame(9, $d->remaining(), 'only global applies again (full again after 2 s)');
        $fake->markHot('m', 60);
        $fake->unmarkHot('m');
        $this->assertFalse($fake->isHot('m'));
        $fake->unmarkHot(7);
        $this->assertTrue($fake->isHot(7), 'a shop listed in hot_shops stays hot');
        $this->assertTrue($fake->isHot('7'));
        $this->assertFalse($fake->isHot(8));
    }

    public function testResetFillsEveryBucketAndKeepsTheMarks(): void
    {
        $fake = self::hotLimiter();
        $fake->markHot('m', 60);
        $fake->acquire('m', 2);
        $this->assertSame('hot_shop', $fake->acquire('m')->reason());
        $fake->reset();
        $d = $fake->acquire('m');
        $this->assertSame([true, 'allowed', 0.0, 1, true, 0.0], self::seen($d), 'full again, still hot');
    }

    public function testPeekTakesNothing(): void
    {
        $fake = self::hotLimiter();
        for ($i = 0; $i < 5; $i++) {
            $this->assertSame([true, 'allowed', 0.0, 0, true, 0.0], self::seen($fake->peek(7, 2)));
        }
        $this->assertSame(0, $fake->acquired(), 'a peek is not acquired');
        $this->assertSame(array_fill(0, 5, 'peek'), array_column($fake->calls(), 'method'));
        $this->assertSame(1, $fake->acquire(7)->remaining(), 'every bucket was full');
    }

    public function testAReservationMovesTheFakeClockByItsWait(): void
    {
        $fake = new FakeLimiter(['global' => self::bucket(1, 2.0)]);
        $fake->acquire('s');
        $d = $fake->acquire('s', 1, 1.0);
        $this->assertSame([true, 'allowed', 0.0, 0, false, 0.5], self::seen($d));
        $this->assertSame(0.5, $fake->clock()->now(), 'it "slept" on the fake clock');
        $this->assertSame([false, 'global', 0.5, 0, false, 0.0], self::seen($fake->acquire('s', 1, 0.4)), 'too long a wait: denied, nothing taken');
        $this->assertSame(0.5, $fake->clock()->now());
    }

    public function testShadowModeLetsEveryCallThroughAndSaysWhatEnforcementWouldHave(): void
    {
        $fake = new FakeLimiter(['global' => self::bucket(1, 1.0), 'mode' => 'shadow']);
        $d = $fake->acquire('s');
        $this->assertSame([true, true, 'allowed'], [$d->isAllowed(), $d->wouldAllow(), $d->reason()]);
        $d = $fake->acquire('s');
        $this->assertSame([true, false, 'global', 1.0, true], [$d->isAllowed(), $d->wouldAllow(), $d->reason(), $d->retryAfter(), $d->isShadow()]);
        $d = $fake->acquire('s', 1, 2.0);
        $this->assertSame([true, true, 1.0, 0.0], [$d->isAllowed(), $d->wouldAllow(), $d->retryAfter(), $d->waited()], 'a shadow reservation never sleeps');
        $this->assertSame(0.0, $fake->clock()->now());
        $this->assertFalse((new FakeLimiter(['global' => self::bucket(1), 'mode' => 'enforce']))->acquire('s')->isShadow());
    }

    public function testOneClockDrivesSeveralFakes(): void
    {
        $clock = new FakeClock(1000.0);
        $a = new FakeLimiter(['global' => self::bucket(1)], $clock);
        $b = new FakeLimiter(['global' => self::bucket(1)], $clock);
        $a->acquire('s');
        $b->acquire('s');
        $a->markHot('m', 1);
        $b->advance(1.0);
        $this->assertTrue($a->acquire('s')->isAllowed());
        $this->assertTrue($b->acquire('s')->isAllowed());
        $this->assertFalse($a->isHot('m'));
        $this->assertSame(1001.0, $clock->now());
        $this->assertSame(1_001_000_000, $clock->nowUs());
        $this->expectException(\InvalidArgumentException::class);
        $clock->advance(-1.0);
    }

    public function testShopIdsAreIntOrStringAndCheckedAsTheRealLimiterChecksThem(): void
    {
        $fake = new FakeLimiter(['global' => self::bucket(5), 'hot_shops' => ['42']]);
        $this->assertTrue($fake->isHot(42));
        $this->assertTrue($fake->acquire(42)->isHotShop());
        $fake->acquire(str_repeat('x', 128));
        $fake->acquire("caf\u{e9}");
        foreach (['', str_repeat('x', 129), "a\nb", "a\x7f"] as $bad) {
            try {
                $fake->acquire($bad);
                $this->fail('accepted ' . json_encode($bad));
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString('shopId', $e->getMessage());
            }
        }
        $this->assertCount(4, $fake->calls(), 'calls that threw are not recorded');
    }

    /**
     * Bad options: the real RateLimiter's message, word for word.
     *
     * @dataProvider badOptions
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('badOptions')]
    public function testBadOptionsAreRefusedAsTheRealLimiterRefusesThem(array $options, string $named): void
    {
        $real = null;
        try {
            new RateLimiter($options + (array_is_list($options) ? [] : ['url' => 'redis://127.0.0.1:1']));
        } catch (ConfigurationException $e) {
            $real = $e->getMessage();
        }
        $this->assertNotNull($real, 'the real limiter refuses them');
        try {
            new FakeLimiter($options);
            $this->fail("the fake took what the real limiter refused: $real");
        } catch (ConfigurationException $e) {
            $this->assertSame($real, $e->getMessage());
            $this->assertStringContainsString($named, $e->getMessage());
        }
    }

    /** @return array<string, array{0: array, 1: string}> */
    public static function badOptions(): array
    {
        $b = fn (mixed $c, mixed $r = 1.0) => ['capacity' => $c, 'refill_per_second' => $r];
        return [
            'none' => [[], 'global'],
            'a list' => [[1], 'options'],
            'unknown key' => [['global' => $b(1), 'burst' => 3], '"burst"'],
            'unknown key, null' => [['global' => $b(1), 'typo' => null], '"typo"'],
            'global not an array' => [['global' => 5], 'global'],
            'global a list' => [['global' => [5, 1.0]], 'global'],
            'capacity a float' => [['global' => $b(5.0)], 'global.capacity'],
            'capacity a string' => [['global' => $b('5')], 'global.capacity'],
            'capacity null' => [['global' => $b(null)], 'global.capacity'],
            'capacity missing' => [['global' => ['refill_per_second' => 1]], 'global.capacity'],
            'capacity 0' => [['global' => $b(0)], 'global.capacity'],
            'capacity too big' => [['global' => $b(2_000_000_000)], 'global.capacity'],
            'rate missing' => [['global' => ['capacity' => 1]], 'global.refill_per_second'],
            'rate a string' => [['global' => $b(1, '1')], 'global.refill_per_second'],
            'rate 0' => [['global' => $b(1, 0)], 'global.refill_per_second'],
            'rate negative' => [['global' => $b(1, -1.0)], 'global.refill_per_second'],
            'rate NAN' => [['global' => $b(1, NAN)], 'global.refill_per_second'],
            'rate INF' => [['global' => $b(1, INF)], 'global.refill_per_second'],
            'rate too high' => [['global' => $b(1, 2e6)], 'global.refill_per_second'],
            'rate not whole µs' => [['global' => $b(1, 3e5)], 'global.refill_per_second'],
            'ten years to refill' => [['global' => $b(1, 1e-9)], 'global'],
            'unknown bucket key' => [['global' => ['capacity' => 1, 'refill_per_second' => 1, 'burst' => 2]], 'global.burst'],
            'hot_lane above global' => [['global' => $b(5), 'hot_lane' => $b(6)], 'hot_lane.capacity'],
            'hot_shop faster than global' => [['global' => $b(5), 'hot_shop' => $b(5, 2.0)], 'hot_shop.refill_per_second'],
            'hot_lane a string' => [['global' => $b(5), 'hot_lane' => 'x'], 'hot_lane'],
            'name empty' => [['global' => $b(5), 'name' => ''], 'name'],
            'name with a space' => [['global' => $b(5), 'name' => 'a b'], 'name'],
            'name an int' => [['global' => $b(5), 'name' => 5], 'name'],
            'name too long' => [['global' => $b(5), 'name' => str_repeat('x', 65)], 'name'],
            'hot_shops a string' => [['global' => $b(5), 'hot_shops' => 'a'], 'hot_shops'],
            'hot_shops empty id' => [['global' => $b(5), 'hot_shops' => ['']], 'hot_shops[0]'],
            'hot_shops control' => [['global' => $b(5), 'hot_shops' => ['ok', "a\x01"]], 'hot_shops[1]'],
            'hot_shops a float' => [['global' => $b(5), 'hot_shops' => [1.5]], 'hot_shops[0]'],
            'hot_shops too long' => [['global' => $b(5), 'hot_shops' => [str_repeat("\u{e9}", 65)]], 'hot_shops[0]'],
            'mode unknown' => [['global' => $b(5), 'mode' => 'loud'], 'mode'],
            'mode a bool' => [['global' => $b(5), 'mode' => true], 'mode'],
            // in_flight is an array or null (off): false is not off, as for the real limiter.
            'in_flight false' => [['global' => $b(5), 'in_flight' => false], 'in_flight'],
            'in_flight a number' => [['global' => $b(5), 'in_flight' => 2], 'in_flight'],
            'auto_hot a number' => [['global' => $b(5), 'auto_hot' => 5], 'auto_hot'],
            'adaptive a list' => [['global' => $b(5), 'adaptive' => [1]], 'adaptive'],
        ];
    }

    /**
     * Bad arguments: the real limiter's message, word for word (checked before it connects).
     *
     * @dataProvider badCalls
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('badCalls')]
    public function testBadArgumentsAreRefusedAsTheRealLimiterRefusesThem(\Closure $call, string $named): void
    {
        $options = ['global' => self::bucket(3), 'hot_shop' => self::bucket(2)];
        $real = new RateLimiter($options + ['url' => 'redis://127.0.0.1:1', 'on_unavailable' => 'throw']);
        $message = null;
        try {
            $call($real);
        } catch (ConfigurationException $e) {
            $message = $e->getMessage();
        }
        $this->assertNotNull($message, 'the real limiter refuses it');
        $fake = new FakeLimiter($options);
        try {
            $call($fake);
            $this->fail("the fake took what the real limiter refused: $message");
        } catch (ConfigurationException $e) {
            $this->assertSame($message, $e->getMessage());
            $this->assertStringContainsString($named, $e->getMessage());
        }
        $this->assertSame([], $fake->calls());
    }

    /** @return array<string, array{0: \Closure, 1: string}> */
    public static function badCalls(): array
    {
        return [
            'empty shop' => [fn ($l) => $l->acquire(''), 'shopId'],
            'long shop' => [fn ($l) => $l->acquire(str_repeat("\u{e9}", 70)), 'shopId'],
            'control in shop' => [fn ($l) => $l->acquire("ab\x7f"), 'shopId'],
            'tokens 0' => [fn ($l) => $l->acquire('s', 0), 'tokens'],
            'tokens above the smallest capacity' => [fn ($l) => $l->acquire('s', 3), 'tokens'],
            'negative wait' => [fn ($l) => $l->acquire('s', 1, -1.0), 'maxWaitSeconds'],
            'long wait' => [fn ($l) => $l->acquire('s', 1, 10.5), 'maxWaitSeconds'],
            'NAN wait' => [fn ($l) => $l->acquire('s', 1, NAN), 'maxWaitSeconds'],
            'peek empty shop' => [fn ($l) => $l->peek(''), 'shopId'],
            'peek too many' => [fn ($l) => $l->peek('s', 5), 'tokens'],
            'ttl 0' => [fn ($l) => $l->markHot('s', 0), 'ttlSeconds'],
            'ttl above a year' => [fn ($l) => $l->markHot('s', 40_000_000), 'ttlSeconds'],
            'mark empty shop' => [fn ($l) => $l->markHot('', 5), 'shopId'],
            'status 99' => [fn ($l) => $l->feedback('s', 99), 'statusCode'],
            'negative Retry-After' => [fn ($l) => $l->feedback('s', 429, -1.0), 'retryAfterSeconds'],
            'NAN Retry-After' => [fn ($l) => $l->feedback('s', 429, NAN), 'retryAfterSeconds'],
            'unmark empty shop' => [fn ($l) => $l->unmarkHot(''), 'shopId'],
            'isHot long shop' => [fn ($l) => $l->isHot(str_repeat('a', 200)), 'shopId'],
        ];
    }

    public function testWhatTheFakeDoesNotModelIsRefusedAndTheConnectionOptionsAreIgnored(): void
    {
        $base = ['global' => self::bucket(5)];
        foreach (['auto_hot' => true, 'adaptive' => ['decrease' => 0.5], 'in_flight' => ['global' => 2]] as $option => $value) {
            try {
                new FakeLimiter($base + [$option => $value]);
                $this->fail("$option accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString("$option is not modelled by", $e->getMessage());
            }
        }
        // Off is fine; what only the connection uses is taken as the real limiter takes it.
        $fake = new FakeLimiter($base + [
            'auto_hot' => false, 'adaptive' => false, 'in_flight' => null, 'name' => 'payments',
            'url' => 'redis://10.0.0.1:6379', 'timeout_ms' => 50, 'on_unavailable' => 'allow', 'engine' => 'lua',
        ]);
        $this->assertSame('payments', $fake->name());
        $this->assertTrue($fake->acquire('s')->isAllowed());
    }

    /**
     * With the clock standing still, every bucket is a whole number of tokens: the
     * reference model the real limiter is checked against (support/LimiterModel.php, one
     * database, marks that never run out) decides each acquire() and peek() of a random
     * sequence, and the fake must answer the same (retryAfter too: (tokens - level) / rate
     * of the slowest bucket).
     */
    public function testTheFakeDecidesAsTheReferenceModelWhileTheClockStandsStill(): void
    {
        foreach ([1, 2, 3, 4, 5, random_int(6, 1 << 30)] as $seed) {
            $r = new Randomizer(new Mt19937($seed));
            $rate = fn () => LimiterModel::MAX_RATE / $r->getInt(2, 8);
            $global = $r->getInt(2, 12);
            $options = ['global' => self::bucket($global, LimiterModel::MAX_RATE)];
            foreach (['hot_lane', 'hot_shop'] as $lane) {
                if ($r->getInt(0, 2) > 0) {
                    $options[$lane] = self::bucket($r->getInt(1, $global), $rate());
                }
            }
            $options['hot_shops'] = ['listed'];
            $model = new LimiterModel($options);
            $fake = new FakeLimiter($options);
            $max = min(3, ...array_column(array_intersect_key($options, array_flip(LimiterModel::LANES)), 'capacity'));
            $shops = ['a', 'b', 'c', 'listed'];
            for ($i = 0; $i < 200; $i++) {
                $shop = $shops[$r->getInt(0, 3)];
                $n = $r->getInt(1, $max);
                $roll = $r->getInt(1, 100);
                $where = "seed $seed, operation $i, " . json_encode($options);
                if ($roll <= 60 || $roll > 97) {
                    $peek = $roll > 97;
                    $want = ($peek ? clone $model : $model)->acquire(0, $shop, $n, 0.0, 0.0);
                    $d = $peek ? $fake->peek($shop, $n) : $fake->acquire($shop, $n);
                    $this->assertSame(
                        [$want['allowed'], $want['reason'], $want['remaining'], $want['isHotShop']],
                        [$d->isAllowed(), $d->reason(), $d->remaining(), $d->isHotShop()],
                        "$where: " . ($peek ? 'peek' : 'acquire') . "($shop, $n)"
                    );
                    $this->assertEqualsWithDelta($want['retryAfter'], $d->retryAfter(), 1e-6 * max(1.0, $want['retryAfter']), $where);
                } elseif ($roll <= 80) {
                    $model->markHot(0, $shop);
                    $fake->markHot($shop, 3600);
                } elseif ($roll <= 95) {
                    $model->unmarkHot(0, $shop);
                    $fake->unmarkHot($shop);
                } else {
                    $model->reset(0);
                    $fake->reset();
                }
            }
        }
    }
}
