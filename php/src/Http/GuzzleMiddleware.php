<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Limiter;
use CheckoutGuard\Telemetry;
use GuzzleHttp\Promise\Create;
use GuzzleHttp\Promise\PromiseInterface;
use Psr\Http\Message\RequestInterface;

/**
 * Guzzle middleware that records every transfer as an "ExternalApiCall" event, for code
 * that uses Guzzle directly rather than through PSR-18:
 *
 *     $stack = HandlerStack::create();
 *     $stack->push(GuzzleMiddleware::measure($namer));
 *     $client = new GuzzleHttp\Client(['handler' => $stack]);
 *
 * It never waits for the transfer: it notes when the transfer started (Unix ms, and
 * hrtime() for a monotonic duration) and records the event in the promise chain, when the
 * promise is fulfilled or rejected (Telemetry::recordCall()), so a Pool or
 * Promise\Utils::all() of getAsync() calls runs as concurrently as without it. The event is
 * the one MeasuredClient records: status from the response, or from a RequestException's
 * response; 0 and the exception class when there was none. The promise settles with the
 * very response or reason the handler gave. A transfer whose promise never settles (never
 * waited for) records nothing.
 *
 * limit() is RateLimitedClient for Guzzle: it asks the limiter before the transfer (a
 * denied request is never sent: the promise is rejected with a RateLimitedException) and
 * reports the provider's answer to each admitted one (RateLimiter::feedback(), status and
 * Retry-After) when its promise settles:
 *
 *     $stack->push(GuzzleMiddleware::measure($namer));
 *     $stack->push(GuzzleMiddleware::limit($limiter, fn ($r) => $r->hasHeader('X-Shop-Id') ? $r->getHeaderLine('X-Shop-Id') : null));
 *
 * (pushed last, it runs first: a refused request is not measured as a call; hasHeader(),
 * not `getHeaderLine(...) ?: null`, which sends shop "0" and a blank id unlimited).
 *
 * With `routes` (an EndpointRoutes, or the array it takes) each request is decided in the
 * endpoint bucket and priority class its method and path map to, as RateLimitedClient's:
 *
 *     $stack->push(GuzzleMiddleware::limit($limiter, $shopOf, routes: ['GET /v1/items*' => 'items']));
 *
 * With the limiter's `in_flight` option each admitted transfer holds a lease until its
 * promise settles (fulfilled or rejected, or the handler throws), then releases it
 * (Decision::release()); a transfer whose promise is never settled keeps it until the
 * request ends (released then, counted leaked). A request the in-flight limit refuses is
 * not sent: its promise is rejected with a RateLimitedException (reason `in_flight_*`).
 */
final class GuzzleMiddleware
{
    /**
     * @param Limiter $limiter a RateLimiter, or any CheckoutGuard\Limiter (a FakeLimiter in tests)
     * @param callable(RequestInterface): (string|int|null) $shopResolver the shop a request
     *        is made for (an int is its decimal string); null sends it without asking the
     *        limiter
     * @param float|callable(string, RequestInterface): float $maxWaitSeconds as
     *        RateLimitedClient's (the wait happens before the transfer starts)
     * @param EndpointRoutes|array<string, string|array{endpoint?: string, priority?: string}> $routes
     *        as RateLimitedClient's: checked here (a bad map throws InvalidArgumentException
     *        from limit() itself, not from a transfer)
     */
    public static function limit(Limiter $limiter, callable $shopResolver, int $tokens = 1, float|callable $maxWaitSeconds = 0.0, EndpointRoutes|array $routes = []): callable
    {
        $routes = $routes instanceof EndpointRoutes ? $routes : new EndpointRoutes($routes);
        return static function (callable $handler) use ($limiter, $shopResolver, $tokens, $maxWaitSeconds, $routes): callable {
            return static function (RequestInterface $request, array $options) use ($handler, $limiter, $shopResolver, $tokens, $maxWaitSeconds, $routes): PromiseInterface {
                $decision = null;
                try {
                    $shop = $shopResolver($request);
                    $shop = $shop === null ? null : (string) $shop;
                    if ($shop !== null) {
                        $wait = is_callable($maxWaitSeconds) ? (float) $maxWaitSeconds($shop, $request) : $maxWaitSeconds;
                        $decision = $routes->acquire($limiter, $request, $shop, $tokens, $wait);
                        if (!$decision->isAllowed()) {
                            return Create::rejectionFor(new RateLimitedException($request, $decision, $shop));
                        }
                    }
                } catch (\Throwable $e) {
                    return Create::rejectionFor($e);
                }
                try {
                    $promise = $handler($request, $options);
                } catch (\Throwable $e) {
                    $decision?->release();
                    return Create::rejectionFor($e);   // no answer from the provider
                }
                if ($shop === null) {
                    return $promise;
                }
                // The transfer's in-flight lease (the `in_flight` option) ends when its
                // promise settles, fulfilled or rejected, before the feedback's round trip.
                return $promise->then(
                    static function (mixed $response) use ($limiter, $shop, $decision): mixed {
                        $decision->release();
                        $answer = ProviderFeedback::responseOf($response);
                        if ($answer !== null) {
                            ProviderFeedback::report($limiter, $shop, $answer);
                        }
                        return $response;
                    },
                    static function (mixed $reason) use ($limiter, $shop, $decision): PromiseInterface {
                        $decision->release();
                        // http_errors: a 429 arrives as a RequestException with its response.
                        $answer = ProviderFeedback::responseOf($reason);
                        if ($answer !== null) {
                            ProviderFeedback::report($limiter, $shop, $answer);
                        }
                        return Create::rejectionFor($reason);
                    }
                );
            };
        };
    }

    /**
     * @param ApiNamer|callable(RequestInterface): array{0: string, 1: ?string} $namer
     * @param null|callable(RequestInterface): array<string, scalar|null> $attributes
     */
    public static function measure(ApiNamer|callable $namer, ?callable $attributes = null): callable
    {
        $name = $namer instanceof ApiNamer ? [$namer, 'name'] : $namer;
        return static function (callable $handler) use ($name, $attributes): callable {
            return static function (RequestInterface $request, array $options) use ($handler, $name, $attributes): PromiseInterface {
                [$api, $template] = $name($request);
                $attrs = ApiNamer::attributes($request, $template);
                if ($attributes !== null) {
                    $attrs += $attributes($request);
                }
                $timestampMs = (int) floor(microtime(true) * 1000);
                $started = hrtime(true);
                $record = static function (mixed $outcome) use ($api, $timestampMs, $started, $attrs): void {
                    try {
                        Telemetry::recordCall($api, $timestampMs, (hrtime(true) - $started) / 1e6, $outcome, $attrs);
                    } catch (\Throwable) {
                        // Attributes that are not scalars, a namer breaking its contract: the
                        // transfer already happened, its response or rejection goes on
                        // unchanged (telemetry never throws into the checkout); the event is
                        // lost.
                    }
                };
                try {
                    $promise = $handler($request, $options);
                } catch (\Throwable $e) {
                    $record($e);
                    return Create::rejectionFor($e);
                }
                return $promise->then(
                    static function (mixed $response) use ($record): mixed {
                        $record($response);
                        return $response;
                    },
                    static function (mixed $reason) use ($record): PromiseInterface {
                        $record($reason);
                        return Create::rejectionFor($reason);
                    }
                );
            };
        };
    }
}
