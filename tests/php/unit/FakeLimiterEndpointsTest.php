<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\Testing\FakeClock;
use CheckoutGuard\Testing\FakeLimiter;
use PHPUnit\Framework\Attributes\DataProvider;
use PHPUnit\Framework\TestCase;
use Random\Engine\Mt19937;
use Random\Randomizer;

require_once __DIR__ . '/EndpointOptionsTest.php';

/**
 * CheckoutGuard\Testing\FakeLimiter with the `endpoints`, `priorities` and
 * `default_priority` options (docs/endpoints.md), without Valkey: the endpoint's bucket
 * decided with global and the hot buckets all or nothing, reason `endpoint` in its place
 * (after global, before the hot buckets), each class's reserve exactly at its share of
 * every bucket, retryAfter to the class's threshold, reservations, shadow mode, peek; the
 * options' errors word for word as the real RateLimiter's; names not configured refused;
 * and random sequences decided as a reference written differently (each bucket's credit,
 * no TATs: the one crates/model/tests/endpoints_and_priorities.rs checks the model with).
 */
final class FakeLimiterEndpointsTest extends TestCase
{
    private static function bucket(int $capacity, float $rate = 1.0): array
    {
        return ['capacity' => $capacity, 'refill_per_second' => $rate];
    }

    /** @return array{0: bool, 1: string, 2: float, 3: int} */
    private static function seen(Decision $d): array
    {
        return [$d->isAllowed(), $d->reason(), $d->retryAfter(), $d->remaining()];
    }

    /** global 10, items 4, confirm 8 (1 token/s each); hot lane 6, hot shop 2; "h" listed hot. */
    private static function fake(array $more = [], ?FakeClock $clock = null): FakeLimiter
    {
        return new FakeLimiter($more + [
            'global' => self::bucket(10),
            'endpoints' => ['items' => self::bucket(4), 'charges.confirm' => self::bucket(8)],
            'hot_lane' => self::bucket(6),
            'hot_shop' => self::bucket(2),
            'hot_shops' => ['h'],
        ], $clock);
    }

    public function testTheEndpointIsDecidedWithGlobalAllOrNothing(): void
    {
        $fake = self::fake(['hot_shop' => self::bucket(4)]);
        for ($i = 3; $i >= 0; $i--) {
            $this->assertSame([true, 'allowed', 0.0, $i], self::seen($fake->acquire('s', endpoint: 'items')), 'remaining: the tighter of global and the endpoint');
        }
        // The endpoint is empty: denied by it, global untouched (6 left).
        $this->assertSame([false, 'endpoint', 1.0, 0], self::seen($fake->acquire('s', endpoint: 'items')));
        $this->assertSame([false, 'endpoint', 2.0, 0], self::seen($fake->peek('s', 2, 'items')), 'retryAfter for the tokens asked');
        $this->assertSame([true, 'allowed', 0.0, 5], self::seen($fake->acquire('s')), 'a call without an endpoint draws global alone');
        // Another endpoint has a bucket of its own; global runs out first (5 left).
        for ($i = 4; $i >= 0; $i--) {
            $this->assertSame([true, 'allowed', 0.0, $i], self::seen($fake->acquire('s', endpoint: 'charges.confirm')));
        }
        $this->assertSame([false, 'global', 1.0, 0], self::seen($fake->acquire('s', endpoint: 'charges.confirm')), 'global is named before the endpoint');
        // Global and items both lack 4: global is named.
        $fake->advance(3.0);
        $this->assertSame([false, 'global', 1.0, 3], self::seen($fake->peek('s', 4, 'items')), 'global 3, items 3');
        $this->assertSame([false, 'global', 1.0, 3], self::seen($fake->peek('s', 4, 'charges.confirm')), 'global 3, confirm 6');
        // The denials took nothing: confirm had 3 + 3 s of refill.
        $fake->advance(1.0);
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('s', 4, endpoint: 'items')), 'items 4 of 4, global 4 of 4');
        $this->assertSame([false, 'global', 1.0, 0], self::seen($fake->acquire('s', endpoint: 'charges.confirm')));
        $fake->advance(2.0);
        $this->assertSame([true, 'allowed', 0.0, 1], self::seen($fake->acquire('s', endpoint: 'charges.confirm')), 'global 2 - 1; confirm 8');
    }

    public function testAHotShopDrawsFourBucketsAndHearsTheEndpointBeforeItsOwnBucket(): void
    {
        $fake = self::fake();
        $this->assertSame([true, 'allowed', 0.0, 1], self::seen($fake->acquire('h', endpoint: 'items')));
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('h', endpoint: 'items')));
        // Its own bucket is empty, the endpoint not: hot_shop, the endpoint untouched.
        $this->assertSame([false, 'hot_shop', 1.0, 0], self::seen($fake->acquire('h', endpoint: 'items')));
        $this->assertSame([true, 'allowed', 0.0, 1], self::seen($fake->acquire('s', endpoint: 'items')), 'items: 4 - 2 - 1');
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('s', endpoint: 'items')));
        // Both its bucket and the endpoint empty: the endpoint is named (docs/endpoints.md).
        $d = $fake->acquire('h', endpoint: 'items');
        $this->assertSame([false, 'endpoint', 1.0, 0], self::seen($d));
        $this->assertTrue($d->isHotShop());
        // The hot lane was drawn by the two allowed calls only: 6 - 2, then 1 more.
        $fake->advance(1.0);
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('h', endpoint: 'charges.confirm')), 'hot shop 1 - 1');
        // The lane had 6, lost 3 to the allowed calls, got 1 back: 4, for two more hot shops.
        $fake->markHot('m', 60);
        $fake->markHot('n', 60);
        $fake->markHot('o', 60);
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('m', 2)));
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('n', 2)));
        $this->assertSame([false, 'hot_lane', 1.0, 0], self::seen($fake->acquire('o')));
    }

    public function testAClassLeavesExactlyItsShareOfEveryBucket(): void
    {
        $fake = self::fake([
            'priorities' => ['critical' => 0, 'normal' => 0.2, 'background' => 0.5],
            'default_priority' => 'normal',
        ]);
        // background leaves 5 of global's 10, normal (the default) 2, critical none.
        for ($i = 9; $i >= 5; $i--) {
            $this->assertSame([true, 'allowed', 0.0, $i], self::seen($fake->acquire('s', priority: 'background')));
        }
        $this->assertSame([false, 'global', 1.0, 5], self::seen($fake->acquire('s', priority: 'background')), 'retryAfter: until 5 + 1 tokens are there');
        // 2 tokens of background: more than it can ever take of the hot shop's 2 (it leaves
        // 1), refused as RateLimiter refuses it.
        try {
            $fake->peek('s', 2, priority: 'background');
            $this->fail('2 tokens of background accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('tokens must be from 1 to 1 for priority class "background" (it leaves 50% of every bucket), got 2', $e->getMessage());
        }
        for ($i = 4; $i >= 2; $i--) {
            $this->assertSame([true, 'allowed', 0.0, $i], self::seen($fake->acquire('s')), 'the default class');
        }
        $this->assertSame([false, 'global', 1.0, 2], self::seen($fake->acquire('s')));
        $this->assertSame([false, 'global', 1.0, 2], self::seen($fake->acquire('s', priority: 'normal')));
        $this->assertSame([true, 'allowed', 0.0, 1], self::seen($fake->acquire('s', priority: 'critical')));
        $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->acquire('s', priority: 'critical')));
        $this->assertSame([false, 'global', 1.0, 0], self::seen($fake->acquire('s', priority: 'critical')));

        // Per bucket: items (4) keeps 0.8 of a token for normal: 3 calls, the 4th would
        // leave 0 < 0.8; retryAfter 0.8 s (1 + 0.8 - 1).
        $fake->reset();
        for ($i = 3; $i >= 1; $i--) {
            $this->assertSame([true, 'allowed', 0.0, $i], self::seen($fake->acquire('s', endpoint: 'items')));
        }
        $d = $fake->acquire('s', endpoint: 'items');
        $this->assertSame([false, 'endpoint', 1], [$d->isAllowed(), $d->reason(), $d->remaining()]);
        $this->assertEqualsWithDelta(0.8, $d->retryAfter(), 1e-9);
        $this->assertTrue($fake->acquire('s', endpoint: 'items', priority: 'critical')->isAllowed(), 'critical takes the reserve');
        // The hot buckets keep it too: hot shop 2, normal leaves 0.4 of a token.
        $this->assertTrue($fake->acquire('h')->isAllowed());
        $d = $fake->acquire('h');
        $this->assertSame([false, 'hot_shop', 1], [$d->isAllowed(), $d->reason(), $d->remaining()]);
        $this->assertEqualsWithDelta(0.4, $d->retryAfter(), 1e-9);
    }

    public function testTheReserveIsNeverAMicrosecondLess(): void
    {
        // capacity 3 at 1/s, share 0.5: 1.5 tokens kept. One call leaves 2; a second would
        // leave 1: denied, and back after 0.5 s exactly (not a microsecond sooner).
        $fake = new FakeLimiter(['global' => self::bucket(3), 'priorities' => ['half' => 0.5]]);
        $this->assertTrue($fake->acquire('s', priority: 'half')->isAllowed());
        $this->assertSame([false, 'global', 0.5, 2], self::seen($fake->acquire('s', priority: 'half')));
        $fake->advance(0.499999);
        $this->assertSame([false, 'global', 0.000001, 2], self::seen($fake->acquire('s', priority: 'half')));
        $fake->advance(0.000001);
        $this->assertSame([true, 'allowed', 0.0, 1], self::seen($fake->acquire('s', priority: 'half')));
        // ceil, not floor: 3 tokens at 3/s are 333,334 µs each (1,000,002 of tolerance); a
        // third (333,333 ppm) keeps 333,333.67 µs, so 333,334: exactly one token's cost.
        $third = new FakeLimiter(['global' => self::bucket(3, 3.0), 'priorities' => ['third' => 0.333333]]);
        $this->assertTrue($third->acquire('s', 2, priority: 'third')->isAllowed(), 'two tokens leave exactly the reserve');
        $this->assertSame([false, 'global', 0.333334, 1], self::seen($third->acquire('s', priority: 'third')));
        $third->advance(0.333333);
        $this->assertSame([false, 'global', 0.000001, 1], self::seen($third->acquire('s', priority: 'third')));
        $third->advance(0.000001);
        $this->assertTrue($third->acquire('s', priority: 'third')->isAllowed());
        // 1 ppm of a bucket of 1 token is 1 µs: that class could never take its only token,
        // so the options are refused, naming it (as RateLimiter's).
        try {
            new FakeLimiter(['global' => self::bucket(1), 'priorities' => ['tiny' => 0.000001]]);
            $this->fail('a class that could never pass accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('priorities.tiny leaves 0.0001% of every bucket, and global holds 1 tokens: the class could never take one (a smaller share, or a bucket of at least 2 tokens)', $e->getMessage());
        }
    }

    public function testAReservationWaitsUntilTheClassCanTakeAboveItsReserve(): void
    {
        // global 2 at 2/s (a token every 0.5 s), items 2 at 1/s; normal keeps 1 token.
        $fake = new FakeLimiter([
            'global' => self::bucket(2, 2.0),
            'endpoints' => ['items' => self::bucket(2, 1.0)],
            'priorities' => ['normal' => 0.5],
            'default_priority' => 'normal',
        ]);
        $this->assertTrue($fake->acquire('s', endpoint: 'items')->isAllowed());
        // Both buckets hold 1 = the reserve: items needs 1 s to hold 2, global 0.5 s.
        $this->assertSame([false, 'global', 1.0, 1], self::seen($fake->acquire('s', 1, 0.4, 'items')), 'too short a wait: denied, nothing taken');
        $this->assertSame([false, 'endpoint', 1.0, 1], self::seen($fake->acquire('s', 1, 0.9, 'items')));
        $d = $fake->acquire('s', 1, 1.0, 'items');
        $this->assertSame([true, 'allowed', 0.0, 0, 1.0], [...self::seen($d), $d->waited()]);
        $this->assertSame(1.0, $fake->clock()->now(), 'it "slept" on the fake clock until the slowest bucket');
    }

    public function testShadowModeAndPeekWithAnEndpoint(): void
    {
        $fake = self::fake(['mode' => 'shadow', 'priorities' => ['normal' => 0.5], 'hot_shop' => self::bucket(4)]);
        $fake->acquire('s', 2, endpoint: 'items', priority: 'normal');
        $d = $fake->acquire('s', endpoint: 'items', priority: 'normal');
        $this->assertSame([true, false, 'endpoint', 1.0, true], [$d->isAllowed(), $d->wouldAllow(), $d->reason(), $d->retryAfter(), $d->isShadow()]);

        $fake = self::fake(['hot_shop' => self::bucket(4)]);
        for ($i = 0; $i < 5; $i++) {
            $this->assertSame([true, 'allowed', 0.0, 0], self::seen($fake->peek('s', 4, 'items')));
        }
        $this->assertSame(0, $fake->acquired());
        $this->assertSame([true, 'allowed', 0.0, 3], self::seen($fake->acquire('s', endpoint: 'items')), 'the peeks took nothing');
    }

    public function testTheDecisionCarriesTheEndpointAndTheClassWhenTheExtensionHasThem(): void
    {
        $fake = self::fake(['priorities' => ['critical' => 0, 'normal' => 0.2], 'default_priority' => 'normal']);
        $named = $fake->acquire('s', endpoint: 'items', priority: 'critical');
        $default = $fake->acquire('s');
        if (!method_exists(Decision::class, 'priority') || !method_exists(Decision::class, 'endpoint')) {
            $this->assertTrue($named->isAllowed() && $default->isAllowed());
            $this->markTestIncomplete('the loaded extension\'s Decision has no priority()/endpoint() yet (issue 42, step d)');
        }
        $this->assertSame(['items', 'critical'], [$named->endpoint(), $named->priority()]);
        $this->assertSame([null, 'normal'], [$default->endpoint(), $default->priority()], 'the class decided in: the default');
        $this->assertSame([null, null], [FakeLimiter::allowing()->acquire('s')->endpoint(), (new FakeLimiter(['global' => self::bucket(1)]))->acquire('s')->priority()]);
    }

    public function testTheCallsRecordTheNamesGivenAndAScriptedFakeTakesAnyName(): void
    {
        $fake = FakeLimiter::allowing();
        $fake->acquire('s', endpoint: 'anything', priority: 'whatever');
        $fake->peek('s', 2, priority: 'low');
        $fake->acquire('s');
        $this->assertSame([
            ['method' => 'acquire', 'shop' => 's', 'tokens' => 1, 'endpoint' => 'anything', 'priority' => 'whatever'],
            ['method' => 'peek', 'shop' => 's', 'tokens' => 2, 'priority' => 'low'],
            ['method' => 'acquire', 'shop' => 's', 'tokens' => 1],
        ], $fake->calls(), 'the keys only when named: a test asserting the old shape still passes');
        $d = FakeLimiter::denying('endpoint', 2.0)->acquire('s', endpoint: 'items');
        $this->assertSame([false, 'endpoint', 2.0, 0], self::seen($d));
    }

    /** @return array<string, array{0: \Closure, 1: string}> */
    public static function badNames(): array
    {
        return [
            'unknown endpoint' => [fn ($l) => $l->acquire('s', 1, 0.0, 'charges'), 'checkout_guard: endpoint "charges" is not configured (endpoints: charges.confirm, items)'],
            'unknown endpoint, peek' => [fn ($l) => $l->peek('s', 1, 'Items'), 'checkout_guard: endpoint "Items" is not configured (endpoints: charges.confirm, items)'],
            'empty endpoint' => [fn ($l) => $l->acquire('s', 1, 0.0, ''), 'checkout_guard: endpoint "" is not configured'],
            'endpoint with a newline' => [fn ($l) => $l->acquire('s', 1, 0.0, "items\n"), 'checkout_guard: endpoint "items\x0a" is not configured'],
            'unknown class' => [fn ($l) => $l->acquire('s', 1, 0.0, null, 'urgent'), 'checkout_guard: priority "urgent" is not configured (priorities: critical, normal)'],
            'unknown class, peek' => [fn ($l) => $l->peek('s', 1, 'items', 'NORMAL'), 'checkout_guard: priority "NORMAL" is not configured (priorities: critical, normal)'],
            'more tokens than the endpoint holds' => [fn ($l) => $l->acquire('s', 3, 0.0, 'items'), 'checkout_guard: tokens must be from 1 to 2 (endpoint "items"\'s capacity), got 3'],
            'invalid UTF-8' => [fn ($l) => $l->acquire('s', 1, 0.0, "it\xffems"), 'checkout_guard: endpoint "it\\xffems" is not configured'],
        ];
    }

    /**
     * Names not configured are refused before anything is decided: the message names them
     * (and, with an extension whose RateLimiter takes the arguments, is the real one's).
     */
    /** @dataProvider badNames */
    #[DataProvider('badNames')]
    public function testNamesNotConfiguredAreRefusedNamingThem(\Closure $call, string $message): void
    {
        $options = [
            'global' => self::bucket(3),
            'endpoints' => ['items' => self::bucket(2), 'charges.confirm' => self::bucket(2)],
            'priorities' => ['normal' => 0.2, 'critical' => 0],
        ];
        $fake = new FakeLimiter($options);
        try {
            $call($fake);
            $this->fail('accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringStartsWith($message, $e->getMessage());
        }
        $this->assertSame([], $fake->calls(), 'nothing recorded');
        $this->assertSame(1, $fake->acquire('s', 1, 0.0, 'items')->remaining(), 'every bucket was full: nothing taken');
        if ((new \ReflectionMethod(RateLimiter::class, 'peek'))->getNumberOfParameters() >= 4) {
            $real = new RateLimiter($options + ['url' => 'redis://127.0.0.1:1', 'on_unavailable' => 'throw']);
            try {
                $call($real);
                $this->fail('the real limiter accepted it');
            } catch (ConfigurationException $r) {
                $this->assertSame($r->getMessage(), $e->getMessage(), 'the real limiter\'s message');
            }
        }
        // No endpoints, no priorities at all.
        $plain = new FakeLimiter(['global' => self::bucket(3)]);
        foreach ([['items', null, 'endpoint "items"'], [null, 'normal', 'priority "normal"']] as [$endpoint, $priority, $named]) {
            try {
                $plain->acquire('s', 1, 0.0, $endpoint, $priority);
                $this->fail("$named accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringStartsWith("checkout_guard: $named is not configured", $e->getMessage());
            }
        }
    }

    /** @return array<string, array{0: array, 1: string}> */
    public static function badOptions(): array
    {
        $cases = [];
        foreach (EndpointOptionsTest::badOptions() as $name => [$options, $option]) {
            $cases[$name] = [$options, $option];
        }
        $g = self::bucket(100, 100.0);
        $e = self::bucket(25, 25.0);
        $many = [];
        for ($i = 0; $i <= 1000; $i++) {
            $many["e$i"] = $e;
        }
        return $cases + [
            'endpoints null is none, bad priorities' => [['global' => $g, 'endpoints' => null, 'priorities' => 'x'], 'priorities'],
            'too many endpoints' => [['global' => $g, 'endpoints' => $many], 'endpoints'],
            'endpoint a number' => [['global' => $g, 'endpoints' => ['items' => 3]], 'endpoints.items'],
            'endpoint name an int key, bucket bad' => [['global' => $g, 'endpoints' => [7 => self::bucket(0)]], 'endpoints.7.capacity'],
            'endpoint rate not whole µs' => [['global' => self::bucket(10, 1e6), 'endpoints' => ['x' => self::bucket(1, 3e5)]], 'endpoints.x.refill_per_second'],
            'share rounding to 1' => [['global' => $g, 'priorities' => ['a' => 0.9999999]], 'priorities.a'],
            'share NAN' => [['global' => $g, 'priorities' => ['a' => NAN]], 'priorities.a'],
            'share INF' => [['global' => $g, 'priorities' => ['a' => INF]], 'priorities.a'],
            'share a bool' => [['global' => $g, 'priorities' => ['a' => true]], 'priorities.a'],
            'share null' => [['global' => $g, 'priorities' => ['a' => null]], 'priorities.a'],
            'priorities a list' => [['global' => $g, 'priorities' => [0.2]], 'priorities'],
            'default a list' => [['global' => $g, 'priorities' => ['a' => 0], 'default_priority' => ['a']], 'default_priority'],
            'default without priorities, an int' => [['global' => $g, 'default_priority' => 3], 'default_priority'],
        ];
    }

    /**
     * Bad options: the real RateLimiter's message, word for word.
     *
     * @dataProvider badOptions
     */
    #[DataProvider('badOptions')]
    public function testBadOptionsAreRefusedAsTheRealLimiterRefusesThem(array $options, string $named): void
    {
        $real = null;
        try {
            new RateLimiter($options + ['url' => 'redis://127.0.0.1:1']);
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

    public function testGoodOptionsAreTakenAsTheRealLimiterTakesThem(): void
    {
        $options = [
            'global' => self::bucket(100, 100.0),
            'endpoints' => ['charges.create' => self::bucket(25, 25.0), 'v1/items:list' => self::bucket(100, 100), 7 => self::bucket(2)],
            'priorities' => ['critical' => 0.0, 'normal' => 0.2, 'zero' => 0],
            'default_priority' => 'normal',
        ];
        new RateLimiter($options + ['url' => 'redis://127.0.0.1:1']);
        $fake = new FakeLimiter($options);
        $this->assertTrue($fake->acquire('s', endpoint: '7', priority: 'critical')->isAllowed(), 'an int key is its decimal string');
        $this->assertSame('endpoint', $fake->acquire('s', endpoint: '7')->reason(), 'normal leaves 0.4 of 2 tokens');
        $this->assertTrue($fake->acquire('s', endpoint: '7', priority: 'critical')->isAllowed());
        $this->assertTrue($fake->acquire('s', endpoint: 'v1/items:list', priority: 'zero')->isAllowed(), 'an int 0 is a share');
        // 0.9999994 is 999,999 ppm: 1 µs of room, never a token: refused by both alike.
        $almost = ['priorities' => ['almost' => 0.9999994]] + $options;
        unset($almost['default_priority']);
        $messages = [];
        foreach ([fn () => new RateLimiter($almost + ['url' => 'redis://127.0.0.1:1']), fn () => new FakeLimiter($almost)] as $make) {
            try {
                $make();
                $this->fail('a class that could never pass accepted');
            } catch (ConfigurationException $e) {
                $messages[] = $e->getMessage();
            }
        }
        $this->assertSame($messages[0], $messages[1]);
        $this->assertStringContainsString('priorities.almost leaves 99.9999% of every bucket, and global holds 100 tokens', $messages[0]);
    }

    /**
     * Random sequences (time passing; acquires and reservations of hot and ordinary shops,
     * with and without an endpoint, of every class) decided by the fake and by a reference
     * that keeps each bucket's credit in µs (refilled, spent; no TATs), compared decision
     * by decision: allowed, reason, retryAfter to the µs, remaining, the reservation's wait.
     */
    public function testRandomSequencesAgreeWithACreditReference(): void
    {
        $shares = ['critical' => 0, 'normal' => 200_000, 'background' => 500_000, 'third' => 333_333];
        $specs = [
            'global' => [20, 50_000], 'hot_lane' => [6, 100_000], 'hot_shop' => [5, 200_000],
            'endpoint confirm' => [8, 125_000], 'endpoint items' => [4, 400_000],
        ];
        $options = [
            'global' => self::bucket(20, 20.0), 'hot_lane' => self::bucket(6, 10.0), 'hot_shop' => self::bucket(5, 5.0),
            'hot_shops' => ['h0', 'h1'],
            'endpoints' => ['confirm' => self::bucket(8, 8.0), 'items' => self::bucket(4, 2.5)],
            'priorities' => ['critical' => 0, 'normal' => 0.2, 'background' => 0.5, 'third' => 0.333333],
        ];
        // CG_FAKE_ENDPOINT_SEED=N replays one seed (the failure message names it).
        $seeds = getenv('CG_FAKE_ENDPOINT_SEED') !== false ? [(int) getenv('CG_FAKE_ENDPOINT_SEED')] : [1, 2, 3, random_int(4, 1 << 30)];
        foreach ($seeds as $seed) {
            $r = new Randomizer(new Mt19937($seed));
            $clock = new FakeClock(1_800_000_000.0);
            $fake = new FakeLimiter($options, $clock);
            $credits = [];
            $seen = [];
            for ($i = 0; $i < 400; $i++) {
                if ($r->getInt(1, 4) === 1) {
                    $fake->advance($r->getInt(0, 600_000) / 1e6);
                    continue;
                }
                $shop = ['h0', 'h1', 's2', 's3'][$r->getInt(0, 3)];
                $endpoint = [null, 'confirm', 'items'][$r->getInt(0, 2)];
                $class = array_keys($shares)[$r->getInt(0, 3)];
                $tokens = $r->getInt(1, 3);
                $maxWaitUs = [0, 0, 0, 250_000, 500_000, 1_000_000][$r->getInt(0, 5)];
                $now = $clock->nowUs();
                $where = "seed $seed, operation $i: acquire($shop, $tokens, " . ($maxWaitUs / 1e6) . ", $endpoint, $class) at +" . ($now - 1_800_000_000_000_000) . ' µs';

                // More tokens than the class can ever take of some configured bucket (every
                // lane's, the endpoint's): refused before anything is decided.
                $max = PHP_INT_MAX;
                foreach (array_merge(["global", "hot_lane", "hot_shop"], $endpoint === null ? [] : ["endpoint $endpoint"]) as $b) {
                    [$capacity, $interval] = $specs[$b];
                    $tolerance = $capacity * $interval;
                    $max = min($max, intdiv($tolerance - intdiv($tolerance * $shares[$class] + 999_999, 1_000_000), $interval));
                }
                if ($tokens > $max) {
                    try {
                        $fake->acquire($shop, $tokens, $maxWaitUs / 1e6, $endpoint, $class);
                        $this->fail("$where: accepted");
                    } catch (ConfigurationException $e) {
                        $this->assertStringContainsString("tokens must be from 1 to $max for priority class", $e->getMessage(), $where);
                    }
                    continue;
                }
                // The reference: credit = min(tolerance, credit + elapsed); a class must
                // leave ceil(tolerance * share) of each bucket.
                $buckets = ['global' => 'global'];
                if ($endpoint !== null) {
                    $buckets["endpoint $endpoint"] = 'endpoint';
                }
                if ($shop[0] === 'h') {
                    $buckets['hot_lane'] = 'hot_lane';
                    $buckets["hot_shop $shop"] = 'hot_shop';
                }
                $want = null;
                $needMax = 0;
                $levels = [];
                foreach ($buckets as $key => $reason) {
                    [$capacity, $interval] = $specs[str_starts_with($key, 'hot_shop') ? 'hot_shop' : $key];
                    $tolerance = $capacity * $interval;
                    $c = isset($credits[$key]) ? min($tolerance, $credits[$key][0] + $now - $credits[$key][1]) : $tolerance;
                    $cost = $tokens * $interval;
                    $reserve = intdiv($tolerance * $shares[$class] + 999_999, 1_000_000);
                    $need = $cost + $reserve - $c;
                    if ($want === null && ($cost > $tolerance - $reserve || $need > $maxWaitUs)) {
                        $want = $reason;
                    }
                    $needMax = max($needMax, $need);
                    $levels[$key] = [$c, $interval, $tolerance, $cost];
                }
                $remaining = PHP_INT_MAX;
                $wait = max($needMax, 0);
                foreach ($levels as $key => [$c, $interval, $tolerance, $cost]) {
                    if ($want === null) {
                        $c = min($c, $tolerance - $wait) - $cost;
                        $credits[$key] = [$c, $now];
                    }
                    $remaining = min($remaining, intdiv(max($c, 0), $interval));
                }

                $d = $fake->acquire($shop, $tokens, $maxWaitUs / 1e6, $endpoint, $class);
                $this->assertSame(
                    [$want ?? 'allowed', $want === null ? 0 : $wait, $remaining, $want === null ? $wait : 0],
                    [$d->reason(), (int) round($d->retryAfter() * 1e6), $d->remaining(), (int) round($d->waited() * 1e6)],
                    $where
                );
                $seen[$d->reason()] = true;
            }
            // Coverage is a property of the fixed seeds (1-3 each meet every reason); a
            // random seed only adds comparisons: it may never fill global (seed 710891306).
            if ($seed <= 3) {
                ksort($seen);
                $this->assertSame(['allowed', 'endpoint', 'global', 'hot_lane', 'hot_shop'], array_keys($seen), "seed $seed: every reason met");
            }
        }
    }
}
