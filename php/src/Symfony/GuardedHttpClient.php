<?php
declare(strict_types=1);

namespace CheckoutGuard\Symfony;

use CheckoutGuard\Decision;
use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\ProviderFeedback;
use CheckoutGuard\Limiter;
use CheckoutGuard\Telemetry;
use Symfony\Component\HttpClient\AsyncDecoratorTrait;
use Symfony\Component\HttpClient\Exception\InvalidArgumentException;
use Symfony\Component\HttpClient\Response\AsyncContext;
use Symfony\Component\HttpClient\Response\AsyncResponse;
use Symfony\Contracts\HttpClient\ChunkInterface;
use Symfony\Contracts\HttpClient\Exception\TransportExceptionInterface;
use Symfony\Contracts\HttpClient\HttpClientInterface;
use Symfony\Contracts\HttpClient\ResponseInterface;

/**
 * A decorator of Symfony's HttpClientInterface, what RateLimitedClient and MeasuredClient
 * are for PSR-18 clients (the bundle's `checkout_guard.http_client`):
 *
 *  - with a limiter, request() asks it for the request's shop before anything is sent;
 *    refused, it throws RateLimitedHttpException (a TransportExceptionInterface carrying
 *    the Decision) and nothing is sent. The shop is the request option
 *    `extra: {checkout_guard_shop: ...}` (a string, an int or a Stringable; another type
 *    is an InvalidArgumentException) or the `$shopHeader` header (X-Shop-Id, its value
 *    trimmed); a request with neither is sent without asking;
 *  - with an api name (or an ApiNamer: the api by host, path template and method), each
 *    request is one "ExternalApiCall" event (Telemetry::recordCall():
 *    from request() to its last chunk, its status or the transport error's class, and
 *    `shop.id` when the request names its shop);
 *  - once the response has ended (read to its end, failed, canceled or destroyed) an
 *    in-flight lease is released and the provider's status and Retry-After go back to
 *    the limiter (feedback(), the `adaptive` option), as RateLimitedClient does.
 *
 * Responses stay lazy and streamable (Symfony's AsyncResponse): nothing here waits for
 * the provider. Telemetry and feedback never throw into the caller.
 */
final class GuardedHttpClient implements HttpClientInterface
{
    use AsyncDecoratorTrait;

    private ?Decision $lastDecision = null;

    private ?ApiNamer $api;

    public function __construct(
        HttpClientInterface $client,
        private ?Limiter $limiter = null,
        string|ApiNamer|null $api = null,
        private string $shopHeader = 'X-Shop-Id',
        private int $tokens = 1,
        private float $maxWaitSeconds = 0.0,
    ) {
        $this->client = $client;
        $this->api = is_string($api) ? new ApiNamer([['api' => $api]]) : $api;
    }

    public function request(string $method, string $url, array $options = []): ResponseInterface
    {
        $this->lastDecision = null;
        $shop = $this->shopOf($options);
        $decision = null;
        if ($shop !== null && $this->limiter !== null) {
            $decision = $this->limiter->acquire($shop, $this->tokens, $this->maxWaitSeconds);
            $this->lastDecision = $decision;
            if (!$decision->isAllowed()) {
                throw new RateLimitedHttpException($method, $url, $decision, $shop);
            }
        }

        $timestampMs = (int) floor(microtime(true) * 1000);
        $started = hrtime(true);
        $ended = false;
        $end = function (mixed $outcome, ?array $headers) use (&$ended, $decision, $shop, $method, $url, $timestampMs, $started): void {
            if ($ended) {
                return;
            }
            $ended = true;
            $decision?->release();
            if ($this->api !== null) {
                try {
                    [$api, $template] = $this->api->nameOf($method, $url);
                    $attributes = ['http.request.method' => $method, 'url.full' => self::withoutSecrets($url)];
                    if ($template !== null) {
                        $attributes['url.template'] = $template;
                    }
                    if ($shop !== null) {
                        $attributes['shop.id'] = $shop;
                    }
                    Telemetry::recordCall($api, $timestampMs, (hrtime(true) - $started) / 1e6, $outcome, $attributes);
                } catch (\Throwable) {
                    // telemetry never throws into the checkout: the event is lost
                }
            }
            if ($decision !== null && is_int($outcome) && $outcome > 0) {
                try {
                    $this->limiter->feedback($shop, $outcome, ProviderFeedback::retryAfterSeconds($headers['retry-after'] ?? null));
                } catch (\Throwable) {
                    // a limiter that throws never breaks the call (as ProviderFeedback::report())
                }
            }
        };

        try {
            return new AsyncResponse($this->client, $method, $url, $options, static function (ChunkInterface $chunk, AsyncContext $context) use ($end): \Generator {
                try {
                    if ($context->getInfo('canceled')) {
                        $status = (int) $context->getInfo('http_code');
                        $end($status, $status > 0 ? $context->getHeaders() : null);
                    } elseif (!$chunk->isTimeout() && $chunk->getInformationalStatus() === null && $chunk->isLast()) {
                        $end($context->getStatusCode(), $context->getHeaders());
                    }
                } catch (TransportExceptionInterface $e) {
                    $end($e, null);
                }
                yield $chunk;
            });
        } catch (\Throwable $e) {
            $end($e, null);
            throw $e;
        }
    }

    /** The Decision of the last request (null when it was sent without asking the limiter). */
    public function lastDecision(): ?Decision
    {
        return $this->lastDecision;
    }

    /**
     * The shop a request is for: `extra.checkout_guard_shop` (a string, an int or a
     * Stringable: a value object, a Symfony Uid; null: not given), else the shop header's
     * value, trimmed (as Laravel's middleware and Guzzle read it; blank, the limiter refuses
     * it). Any other type is an InvalidArgumentException: never a request sent unlimited.
     */
    private function shopOf(array $options): ?string
    {
        $shop = $options['extra']['checkout_guard_shop'] ?? null;
        if (is_string($shop) || is_int($shop) || $shop instanceof \Stringable) {
            return (string) $shop;
        }
        if ($shop !== null) {
            throw new InvalidArgumentException(sprintf(
                'checkout-guard: the request option extra.checkout_guard_shop must be the shop id (a string, an int or a Stringable), got %s',
                get_debug_type($shop),
            ));
        }
        $wanted = strtolower($this->shopHeader);
        foreach ((array) ($options['headers'] ?? []) as $name => $value) {
            if (is_int($name)) {
                // 'Name: value' lines
                [$name, $value] = explode(':', (string) $value, 2) + [1 => ''];
            }
            if (strtolower(trim((string) $name)) === $wanted) {
                $value = is_array($value) ? reset($value) : $value;
                return $value === false || $value === null ? null : trim((string) $value);
            }
        }
        return null;
    }

    /** The URL without its query and credentials, as events keep it. */
    private static function withoutSecrets(string $url): string
    {
        $p = parse_url($url);
        if ($p === false || !isset($p['host'])) {
            return preg_replace('/[?#].*$/s', '', $url);
        }
        return ($p['scheme'] ?? 'http') . '://' . $p['host'] . (isset($p['port']) ? ':' . $p['port'] : '') . ($p['path'] ?? '');
    }
}
