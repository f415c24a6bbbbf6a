<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * Calls made from a file with strict_types=1 (ArgumentTypesTest's own file has none, so
 * its calls are weak-mode ones): the extension reads the caller's mode.
 */
final class StrictCalls
{
    /** @return mixed what the call returned, or the Throwable it threw */
    public static function call(RateLimiter $l, string $method, array $args): mixed
    {
        try {
            return $l->$method(...$args);
        } catch (\Throwable $e) {
            return $e;
        }
    }
}
