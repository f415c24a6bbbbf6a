<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Examples\DuplicateFetchCheckout;
use CheckoutGuard\Examples\ItemApi;
use CheckoutGuard\Examples\ReusingCheckout;
use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\MeasuredClient;
use CheckoutGuard\Testing\AssertsCallBudget;
use CheckoutGuard\Testing\CallBudget;
use CheckoutGuard\Testing\CallBudgetExceeded;
use GuzzleHttp\Client as Guzzle;
use Nyholm\Psr7\Factory\Psr17Factory;
use PHPUnit\Framework\AssertionFailedError;

/** The guard that would have caught the zone A regression, on a small example checkout. */
final class CallBudgetTest extends LimiterTestCase
{
    use AssertsCallBudget;

    private function api(): ItemApi
    {
        $base = getenv('CHECKOUT_GUARD_TEST_HTTP') . '/provider.php?api=';
        $client = new MeasuredClient(new Guzzle(['timeout' => 2]), function ($request) {
            parse_str($request->getUri()->getQuery(), $q);
            return [$q['api'], null];
        });
        return new ItemApi($client, new Psr17Factory(), $base . 'zoneA', $base . 'payment');
    }

    public function testTheFlowThatFetchesItemDataTwiceFailsItsBudget(): void
    {
        $flow = new DuplicateFetchCheckout($this->api());
        try {
            CallBudget::assertWithin(['zoneA' => 1, 'payment' => 1], fn () => $flow->run('item-1'));
            $this->fail('the regression went unnoticed');
        } catch (CallBudgetExceeded $e) {
            $this->assertSame('call budget exceeded: api "zoneA" was called 2 times, budget 1', $e->getMessage());
        }
    }

    public function testTheFlowThatReusesTheItemPasses(): void
    {
        $flow = new ReusingCheckout($this->api());
        $status = $this->assertCallBudget(['zoneA' => 1, 'payment' => 1], fn () => $flow->run('item-1'));
        $this->assertSame(200, $status);
    }

    public function testTheTraitFailsTheTestNamingApiBudgetAndCount(): void
    {
        $flow = new DuplicateFetchCheckout($this->api());
        try {
            $this->assertCallBudget(['zoneA' => 1], fn () => $flow->run('item-2'));
            $this->fail('not caught');
        } catch (AssertionFailedError $e) {
            $this->assertStringContainsString('api "zoneA" was called 2 times, budget 1', $e->getMessage());
        }
    }

    public function testStrictModeCountsApisWithoutABudget(): void
    {
        $flow = new ReusingCheckout($this->api());
        $this->expectException(CallBudgetExceeded::class);
        $this->expectExceptionMessage('1 calls to apis without a budget');
        CallBudget::assertWithin(['zoneA' => 1], fn () => $flow->run('item-3'), true);
    }
}
