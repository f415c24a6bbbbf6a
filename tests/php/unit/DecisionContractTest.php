<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;
use CheckoutGuard\LimiterDecision;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;
use PHPUnit\Framework\TestCase;

/**
 * What a test can build and fake (src/interfaces.rs, src/decision.rs): `new Decision(...)`
 * with every documented value, checked; the interfaces RateLimiter and Decision
 * implement; a class of the application's implementing Limiter with PHP's types.
 */
final class DecisionContractTest extends TestCase
{
    public function testADecisionBuiltByHandAnswersWhatItWasGiven(): void
    {
        $d = new Decision(false, 'hot_shop', retryAfter: 2.5, remaining: 0, hotShop: true);
        $this->assertSame(
            [false, 'hot_shop', 2.5, 0, true, 0.0, false, false, false],
            [$d->isAllowed(), $d->reason(), $d->retryAfter(), $d->remaining(), $d->isHotShop(), $d->waited(), $d->wouldAllow(), $d->isShadow(), $d->hasLease()]
        );
        $d->release();
        $this->assertFalse($d->hasLease(), 'a built decision holds no lease; release() is nothing');

        $ok = new Decision(true);
        $this->assertSame(['allowed', true, 0.0], [$ok->reason(), $ok->wouldAllow(), $ok->retryAfter()]);
        $this->assertSame('global', (new Decision(false))->reason(), 'a denial defaults to the global bucket');
        $this->assertSame('unavailable', (new Decision(true, 'unavailable'))->reason(), 'failing open');
        $waited = new Decision(true, remaining: 3, waited: 0.25);
        $this->assertSame([3, 0.25], [$waited->remaining(), $waited->waited()]);

        $shadow = new Decision(true, 'in_flight_global', retryAfter: 0.5, shadow: true);
        $this->assertSame([true, false, true, 'in_flight_global'], [$shadow->isAllowed(), $shadow->wouldAllow(), $shadow->isShadow(), $shadow->reason()]);
        $this->assertFalse((new Decision(true, shadow: true, wouldAllow: false))->wouldAllow());
        $this->assertSame('global', (new Decision(true, shadow: true, wouldAllow: false))->reason());
    }

    public static function everyReason(): array
    {
        return [
            'provider' => ['provider'], 'global' => ['global'], 'hot_lane' => ['hot_lane'], 'hot_shop' => ['hot_shop'],
            'in_flight_global' => ['in_flight_global'], 'in_flight_hot_lane' => ['in_flight_hot_lane'],
            'in_flight_hot_shop' => ['in_flight_hot_shop'], 'unavailable' => ['unavailable'],
        ];
    }

    /**
     * @dataProvider everyReason
     */
    #[DataProvider('everyReason')]
    public function testEveryDocumentedDenialReasonCanBeBuilt(string $reason): void
    {
        $this->assertSame($reason, (new Decision(false, $reason, 1.0))->reason());
    }

    public static function badDecisions(): array
    {
        return [
            'unknown reason' => [[false, 'rate_limited'], 'Decision: reason must be one of "allowed", "provider", "global", "endpoint", "hot_lane", "hot_shop", "in_flight_global", "in_flight_hot_lane", "in_flight_hot_shop", "unavailable", got "rate_limited"'],
            'allowed with a denial reason' => [[true, 'global'], 'Decision: reason "global" is a denial\'s, got allowed = true'],
            'denied as allowed' => [[false, 'allowed'], 'Decision: reason "allowed" with allowed = false'],
            'negative retry' => [[false, 'global', -1.0], 'Decision: retryAfter must be a finite number of seconds >= 0, got -1'],
            'NAN retry' => [[false, 'global', NAN], 'Decision: retryAfter must be a finite number of seconds >= 0, got NaN'],
            'negative remaining' => [[true, 'allowed', 0.0, -1], 'Decision: remaining must be >= 0, got -1'],
            'negative wait' => [[true, 'allowed', 0.0, 0, false, -0.5], 'Decision: waited must be a finite number of seconds >= 0, got -0.5'],
            'shadow denied' => [[false, 'global', 0.0, 0, false, 0.0, true], 'Decision: allowed must be true in shadow mode'],
            'wouldAllow off shadow' => [[true, 'allowed', 0.0, 0, false, 0.0, false, false], 'Decision: wouldAllow must equal allowed outside shadow mode, got false with allowed = true'],
            'shadow reason mismatch' => [[true, 'allowed', 0.0, 0, false, 0.0, true, false], 'Decision: reason "allowed" does not fit wouldAllow = false in shadow mode'],
        ];
    }

    /**
     * @dataProvider badDecisions
     */
    #[DataProvider('badDecisions')]
    public function testADecisionThatCannotHappenIsRefusedNamingTheParameter(array $args, string $message): void
    {
        try {
            new Decision(...$args);
            $this->fail('accepted: ' . json_encode($args));
        } catch (ConfigurationException $e) {
            $this->assertStringStartsWith($message, $e->getMessage());
        }
    }

    public function testTheParametersTypesAreRefusedInStrictMode(): void
    {
        $this->expectException(\TypeError::class);
        $this->expectExceptionMessage('CheckoutGuard\Decision::__construct(): Argument #3 ($retryAfter) must be of type float, string given');
        new Decision(false, 'global', '2.5');
    }

    public function testTheClassesImplementTheInterfacesAndStayFinal(): void
    {
        $this->assertTrue(interface_exists(Limiter::class) && interface_exists(LimiterDecision::class));
        $this->assertContains(Limiter::class, class_implements(RateLimiter::class));
        $this->assertContains(LimiterDecision::class, class_implements(Decision::class));
        $this->assertTrue((new \ReflectionClass(RateLimiter::class))->isFinal());
        $this->assertTrue((new \ReflectionClass(Decision::class))->isFinal());
        $this->assertSame(
            ['acquire', 'peek', 'feedback', 'markHot', 'unmarkHot', 'isHot', 'reset'],
            array_map(static fn (\ReflectionMethod $m): string => $m->getName(), (new \ReflectionClass(Limiter::class))->getMethods())
        );
        $this->assertSame(Decision::class, (string) (new \ReflectionMethod(Limiter::class, 'acquire'))->getReturnType());
    }

    public function testAnApplicationsOwnLimiterImplementsTheInterfaceWithPhpsTypes(): void
    {
        $fake = new class () implements Limiter {
            public array $asked = [];
            public function acquire(string|int $shopId, int $tokens = 1, float $maxWaitSeconds = 0.0, ?string $endpoint = null, ?string $priority = null): Decision
            {
                $this->asked[] = $shopId;
                return new Decision(false, 'global', 1.5);
            }
            public function peek(string|int $shopId, int $tokens = 1, ?string $endpoint = null, ?string $priority = null): Decision
            {
                return new Decision(true);
            }
            public function feedback(string|int $shopId, int $statusCode, ?float $retryAfterSeconds = null): void
            {
            }
            public function markHot(string|int $shopId, int $ttlSeconds): void
            {
            }
            public function unmarkHot(string|int $shopId): void
            {
            }
            public function isHot(string|int $shopId): bool
            {
                return false;
            }
            public function reset(): void
            {
            }
        };
        $checkout = static fn (Limiter $l, int $shop): string => $l->acquire($shop)->isAllowed() ? 'pay' : '503';
        $this->assertSame('503', $checkout($fake, 42));
        $this->assertSame([42], $fake->asked);
    }
}
