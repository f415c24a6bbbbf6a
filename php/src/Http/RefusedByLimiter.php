<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Decision;

/**
 * What an exception for a request the limiter refused before it was sent carries, for every
 * client (RateLimitedException for PSR-18 and Guzzle, Symfony\RateLimitedHttpException):
 * the Decision, the shop, the Retry-After to answer with. The using class holds
 * `$decision` and `$shopId`.
 */
trait RefusedByLimiter
{
    public function getDecision(): Decision
    {
        return $this->decision;
    }

    public function getShopId(): string
    {
        return $this->shopId;
    }

    /** Whole seconds for a Retry-After header (at least 1). */
    public function retryAfterSeconds(): int
    {
        return max(1, (int) ceil($this->decision->retryAfter()));
    }

    /** The message: the shop, the reason, the wait, and the request not sent. */
    private static function refusal(string $shopId, Decision $decision, string $method, string $url): string
    {
        return sprintf(
            'rate limited: shop "%s", %s bucket, retry in %.3f s (request not sent: %s %s)',
            $shopId,
            $decision->reason(),
            $decision->retryAfter(),
            $method,
            $url,
        );
    }
}
