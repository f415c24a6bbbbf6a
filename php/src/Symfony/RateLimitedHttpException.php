<?php
declare(strict_types=1);

namespace CheckoutGuard\Symfony;

use CheckoutGuard\Decision;
use CheckoutGuard\Http\RefusedByLimiter;
use Symfony\Contracts\HttpClient\Exception\TransportExceptionInterface;

/**
 * GuardedHttpClient's limiter refused a request before it was sent; carries the Decision.
 * A TransportExceptionInterface, as every error request() may throw.
 */
final class RateLimitedHttpException extends \RuntimeException implements TransportExceptionInterface
{
    use RefusedByLimiter;

    public function __construct(string $method, string $url, private Decision $decision, private string $shopId)
    {
        parent::__construct(self::refusal(
            $shopId,
            $decision,
            $method,
            (string) preg_replace('#[?\#].*$#s', '', (string) preg_replace('#//[^/@]*@#', '//', $url)),
        ));
    }
}
