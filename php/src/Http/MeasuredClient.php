<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Telemetry;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * A PSR-18 decorator that records every sendRequest() of the client it wraps as one
 * "ExternalApiCall" event (Telemetry::measure(): monotonic timing, status code, error
 * type, URL without query or credentials), unsampled.
 *
 *     $client = new MeasuredClient($psr18Client, $namer, fn ($request) => ['shop.id' => $shopId]);
 */
final class MeasuredClient implements ClientInterface
{
    /** @var callable(RequestInterface): array{0: string, 1: ?string} */
    private $namer;
    /** @var null|callable(RequestInterface): array<string, scalar|null> */
    private $attributes;

    /**
     * @param ApiNamer|callable(RequestInterface): array{0: string, 1: ?string} $namer
     *        names the API of each request (and its path template)
     * @param null|callable(RequestInterface): array<string, scalar|null> $attributes
     *        extra attributes per request, e.g. ['shop.id' => ...]
     */
    public function __construct(private ClientInterface $inner, ApiNamer|callable $namer, ?callable $attributes = null)
    {
        $this->namer = $namer instanceof ApiNamer ? [$namer, 'name'] : $namer;
        $this->attributes = $attributes;
    }

    public function sendRequest(RequestInterface $request): ResponseInterface
    {
        [$api, $template] = ($this->namer)($request);
        $attributes = ApiNamer::attributes($request, $template);
        if ($this->attributes !== null) {
            $attributes += ($this->attributes)($request);
        }
        return Telemetry::measure($api, fn () => $this->inner->sendRequest($request), $attributes);
    }
}
