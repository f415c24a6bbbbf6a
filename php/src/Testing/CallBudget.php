<?php
declare(strict_types=1);

namespace CheckoutGuard\Testing;

use CheckoutGuard\Telemetry;

/**
 * A test-time guard on how many external calls a flow makes: the check that would have
 * caught the pull request that quietly added "zone A" calls back to the checkout.
 *
 *     CallBudget::assertWithin(['zoneA' => 1, 'payment' => 1], fn () => $checkout->run());
 *
 * Counts come from Telemetry::callCount(), i.e. from every ExternalApiCall the flow made
 * through Telemetry::measure(), MeasuredClient or GuzzleMiddleware.
 */
final class CallBudget
{
    /**
     * Runs $flow and throws CallBudgetExceeded when it called an API more often than its
     * budget (naming the api, the budget and the count). With $strict, calls to APIs that
     * have no budget fail too.
     *
     * @param array<string, int> $budget api name => most calls allowed
     * @return mixed what $flow returned
     */
    public static function assertWithin(array $budget, callable $flow, bool $strict = false): mixed
    {
        $before = [];
        foreach ($budget as $api => $max) {
            if (!is_int($max) || $max < 0) {
                throw new \InvalidArgumentException(sprintf('budget for api "%s" must be an int >= 0, got %s', $api, var_export($max, true)));
            }
            $before[$api] = Telemetry::callCount((string) $api);
        }
        $totalBefore = Telemetry::callCount();
        $result = $flow();

        $problems = [];
        $budgeted = 0;
        foreach ($budget as $api => $max) {
            $used = Telemetry::callCount((string) $api) - $before[$api];
            $budgeted += $used;
            if ($used > $max) {
                $problems[] = sprintf('api "%s" was called %d times, budget %d', $api, $used, $max);
            }
        }
        $other = Telemetry::callCount() - $totalBefore - $budgeted;
        if ($strict && $other > 0) {
            $problems[] = sprintf('%d calls to apis without a budget', $other);
        }
        if ($problems !== []) {
            throw new CallBudgetExceeded('call budget exceeded: ' . implode('; ', $problems));
        }
        return $result;
    }
}
