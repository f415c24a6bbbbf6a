<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

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
 */
final class GuzzleMiddleware
{
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
