<?php
declare(strict_types=1);

namespace CheckoutGuard\Testing;

/**
 * For PHPUnit test cases: `$this->assertCallBudget(['zoneA' => 1], fn () => $flow())`
 * fails the test (not errors it) with the api, the budget and the count.
 */
trait AssertsCallBudget
{
    /** @param array<string, int> $budget */
    public function assertCallBudget(array $budget, callable $flow, bool $strict = false): mixed
    {
        try {
            $result = CallBudget::assertWithin($budget, $flow, $strict);
        } catch (CallBudgetExceeded $e) {
            $this->fail($e->getMessage());
        }
        $this->addToAssertionCount(1);
        return $result;
    }
}
