<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Decision;
use Psr\Http\Client\ClientExceptionInterface;
use Psr\Http\Message\RequestInterface;

/** The limiter refused a request before it was sent; carries the Decision. */
final class RateLimitedException extends \RuntimeException implements ClientExceptionInterface
{
    use RefusedByLimiter;

    public function __construct(
        private RequestInterface $request,
        private Decision $decision,
        private string $shopId,
    ) {
        parent::__construct(self::refusal(
            $shopId,
            $decision,
            $request->getMethod(),
            (string) $request->getUri()->withQuery('')->withFragment('')->withUserInfo(''),
        ));
    }

    public function getRequest(): RequestInterface
    {
        return $this->request;
    }
}
