<?php
declare(strict_types=1);

namespace CheckoutGuard\Testing;

/** A flow made more external calls than its budget. */
final class CallBudgetExceeded extends \RuntimeException
{
}
