<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A PSR-18 decorator that asks the limiter (a RateLimiter, or any CheckoutGuard\Limiter such
 * as CheckoutGuard\Testing\FakeLimiter in a unit test) just before each request is sent. When
 * the limiter says no, the request is not sent and a RateLimitedException (a PSR-18
 * ClientExceptionInterface carrying the Decision) is thrown, so the checkout can answer
 * "busy, retry in N s" instead of queuing behind the provider's 429s.
 *
 *     $client = new RateLimitedClient($inner, $limiter, fn (RequestInterface $r) => $r->hasHeader('X-Shop-Id') ? $r->getHeaderLine('X-Shop-Id') : null);
 *
 * With `maxWaitSeconds` (a number, or a callable giving one per shop) a request whose
 * tokens every bucket holds within that wait reserves them and the call sleeps until they
 * are there (RateLimiter::acquire()'s reservation) instead of being refused: a php-fpm
 * worker is held meanwhile, so keep it short (docs/loadtest.md, "When to wait").
 * lastDecision() is the Decision of the last request sent (its waited() says how long it
 * slept), null when the last request was not limited.
 *
 * After each request the limiter admitted, the provider's answer goes back to it
 * (RateLimiter::feedback(): the status and the Retry-After header, read by
 * ProviderFeedback::retryAfterSeconds()), for the `adaptive` option; a success costs no
 * round trip. A limiter that throws there never breaks the call: the response is returned
 * and the failure counted in ProviderFeedback::failures().
 *
 * With `routes` (an EndpointRoutes, or the array it takes) a request is decided in the
 * endpoint bucket and priority class its method and path map to (the limiter's `endpoints`
 * and `priorities` options, docs/endpoints.md): acquire()'s `endpoint` and `priority`. A
 * request no route maps is decided as without routes (no endpoint, the default class):
 *
 *     $client = new RateLimitedClient($inner, $limiter, $shopOf, routes: [
 *         'POST /v1/payment_intents/{id}/confirm' => ['endpoint' => 'charges.confirm', 'priority' => 'critical'],
 *         'GET /v1/items*' => 'items',
 *     ]);
 *
 * With the limiter's `in_flight` option each admitted request holds a lease while the
 * inner client runs; it is released (Decision::release(), at most one round trip, never
 * throws) as soon as the inner client returns or throws, so the caller writes nothing.
 * A request the in-flight limit refuses is not sent (RateLimitedException, reason
 * `in_flight_global`, `in_flight_hot_lane` or `in_flight_hot_shop`).
 */
final class RateLimitedClient implements ClientInterface
{
    /** @var callable(RequestInterface): ?string */
    private $shopResolver;

    /** @var float|callable(string, RequestInterface): float */
    private $maxWaitSeconds;

    private ?Decision $lastDecision = null;

    private EndpointRoutes $routes;

    /**
     * @param callable(RequestInterface): (string|int|null) $shopResolver the shop a request
     *        is made for (an int is its decimal string); null sends the request without
     *        asking the limiter (e.g. a request that does not count against the provider's
     *        limit)
     * @param float|callable(string, RequestInterface): float $maxWaitSeconds how long a
     *        request may wait for its tokens (0 to 10 s; 0: never wait), or a callable
     *        given the shop and the request that answers it (e.g. no waiting for hot shops)
     * @param EndpointRoutes|array<string, string|array{endpoint?: string, priority?: string}> $routes
     *        the endpoint and priority class of a request by method and path (see
     *        EndpointRoutes; a bad map is an InvalidArgumentException naming the route);
     *        none: every request decided without them
     */
    public function __construct(
        private ClientInterface $inner,
        private Limiter $limiter,
        callable $shopResolver,
        private int $tokens = 1,
        float|callable $maxWaitSeconds = 0.0,
        EndpointRoutes|array $routes = [],
    ) {
        $this->shopResolver = $shopResolver;
        $this->maxWaitSeconds = $maxWaitSeconds;
        $this->routes = $routes instanceof EndpointRoutes ? $routes : new EndpointRoutes($routes);
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        $this->lastDecision = null;
        $shop = ($this->shopResolver)($request);
        $shop = $shop === null ? null : (string) $shop;
        if ($shop !== null) {
            $wait = is_callable($this->maxWaitSeconds)
                ? (float) ($this->maxWaitSeconds)($shop, $request)
                : $this->maxWaitSeconds;
            $decision = $this->routes->acquire($this->limiter, $request, $shop, $this->tokens, $wait);
            $this->lastDecision = $decision;
            if (!$decision->isAllowed()) {
                throw new RateLimitedException($request, $decision, $shop);
            }
        }
        if ($shop === null) {
            return $this->inner->sendRequest($request);
        }
        try {
            try {
                $response = $this->inner->sendRequest($request);
            } finally {
                // The call is over, answered or not: its in-flight lease (the limiter's
                // `in_flight` option) ends now, before the feedback's round trip.
                $decision->release();
            }
        } catch (\Throwable $e) {
            // An exception that still carries the provider's answer (a client that throws
            // on 4xx/5xx) is an answer too; no answer at all (a network error) says nothing
            // about the provider's rate.
            $answer = ProviderFeedback::responseOf($e);
            if ($answer !== null) {
                ProviderFeedback::report($this->limiter, $shop, $answer);
            }
            throw $e;
        }
        ProviderFeedback::report($this->limiter, $shop, $response);
        return $response;
    }

    /** The Decision for the last request (null when it was sent without asking the limiter). */
    public function lastDecision(): ?Decision
    {
        return $this->lastDecision;
    }
}
