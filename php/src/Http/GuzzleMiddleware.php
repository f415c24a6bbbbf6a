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
 * The transfer is measured by Telemetry::measure(), so the event is exactly the one
 * MeasuredClient records (status from the response, or from a RequestException's
 * response; 0 and the exception class when there was none). It waits for the transfer
 * inside the middleware: fine for the synchronous calls of a checkout, but it serializes
 * concurrent requests of a Pool.
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
                try {
                    $response = Telemetry::measure($api, static fn () => $handler($request, $options)->wait(), $attrs);
                    return Create::promiseFor($response);
                } catch (\Throwable $e) {
                    return Create::rejectionFor($e);
                }
            };
        };
    }
}
