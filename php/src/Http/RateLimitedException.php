<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Decision;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Message\RequestInterface;

/** The limiter refused a request before it was sent; carries the Decision. */
final class RateLimitedException extends \RuntimeException implements ClientExceptionInterface
{
    public function __construct(
        private RequestInterface $request,
        private Decision $decision,
        private string $shopId,
    ) {
        parent::__construct(sprintf(
            'rate limited: shop "%s", %s bucket, retry in %.3f s (request not sent: %s %s)',
            $shopId,
            $decision->reason(),
            $decision->retryAfter(),
            $request->getMethod(),
            $request->getUri()->withQuery('')->withFragment('')->withUserInfo(''),
        ));
    }

    public function getRequest(): RequestInterface
    {
        return $this->request;
    }

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
}
