<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\RateLimiter;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A PSR-18 decorator that asks the RateLimiter just before each request is sent. When
 * the limiter says no, the request is not sent and a RateLimitedException (a PSR-18
 * ClientExceptionInterface carrying the Decision) is thrown, so the checkout can answer
 * "busy, retry in N s" instead of queuing behind the provider's 429s.
 *
 *     $client = new RateLimitedClient($inner, $limiter, fn (RequestInterface $r) => $r->getHeaderLine('X-Shop-Id'));
 */
final class RateLimitedClient implements ClientInterface
{
    /** @var callable(RequestInterface): ?string */
    private $shopResolver;

    /**
     * @param callable(RequestInterface): ?string $shopResolver the shop a request is made
     *        for; null sends the request without asking the limiter (e.g. a request that
     *        does not count against the provider's limit)
     */
    public function __construct(
        private ClientInterface $inner,
        private RateLimiter $limiter,
        callable $shopResolver,
        private int $tokens = 1,
    ) {
        $this->shopResolver = $shopResolver;
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        $shop = ($this->shopResolver)($request);
        if ($shop !== null) {
            $decision = $this->limiter->acquire($shop, $this->tokens);
            if (!$decision->isAllowed()) {
                throw new RateLimitedException($request, $decision, $shop);
            }
        }
        return $this->inner->sendRequest($request);
    }
}
