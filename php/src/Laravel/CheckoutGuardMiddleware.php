<?php
declare(strict_types=1);

namespace CheckoutGuard\Laravel;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use Closure;
use Illuminate\Contracts\Container\Container;
use Illuminate\Contracts\Routing\UrlRoutable;
use Illuminate\Http\JsonResponse;
use Illuminate\Http\Request;
use Illuminate\Http\Response;
use Illuminate\Routing\Route;

/**
 * The route middleware `checkout-guard` (registered by CheckoutGuardServiceProvider):
 *
 *     Route::post('/shops/{shop}/pay', PayController::class)->middleware('checkout-guard:payments');
 *     Route::post('/pay', PayController::class)->middleware('checkout-guard:payments,header:X-Shop-Id');
 *
 * Parameters: the limiter's name (a key of `checkout-guard.limiters`; none or empty: the
 * `default` one), then where the shop id is (none: the config's `shop`, default "shop"):
 *   - `NAME`: the route parameter NAME, else the request attribute NAME (set by an earlier
 *     middleware); neither there is a LogicException (the route and the middleware disagree).
 *     A route-bound model counts by its route key (getRouteKey()).
 *   - `header:NAME`: the request header NAME; missing or empty, the answer is 400.
 * A shop id from the header or the route that the limiter refuses (more than 128 bytes, a
 * control byte) is a 400 too (badShop()); from an attribute, its ConfigurationException
 * goes on, as any other the limiter throws.
 * It calls acquire() for the shop before the controller runs. Denied: a 503 with
 * `Retry-After` (whole seconds, at least 1), the controller does not run. Allowed: the
 * request goes on with the decision in the request attribute `checkout_guard.decision`, and
 * the decision's in-flight lease (the limiter's `in_flight` option) is released as soon as
 * the response is made, even when the controller threw.
 */
class CheckoutGuardMiddleware
{
    /** The request attribute holding the allowed Decision while the controller runs. */
    public const DECISION_ATTRIBUTE = 'checkout_guard.decision';

    /** How the limiter's ConfigurationException for a shop id it refuses begins. */
    private const SHOP_ID_REFUSED = 'checkout_guard: shopId ';

    public function __construct(private readonly Container $app)
    {
    }

    /** @return \Symfony\Component\HttpFoundation\Response */
    public function handle(Request $request, Closure $next, ?string $limiter = null, ?string $shop = null)
    {
        $limiters = $this->app->make(Limiters::class);
        $name = $limiter === null || $limiter === '' ? $limiters->defaultName() : $limiter;
        $source = $shop === null || $shop === '' ? $limiters->shopSource() : $shop;

        $shopId = $this->shopId($request, $source);
        if ($shopId === null) {
            return $this->missingShop($request, $source);
        }
        $limiterService = CheckoutGuardServiceProvider::limiter($this->app, $name);
        try {
            $decision = $limiterService->acquire($shopId);
        } catch (ConfigurationException $e) {
            // The shop id the client sent (header or route), refused by the limiter: the
            // client's mistake, as a missing header is. Any other refusal (the limiter's
            // own configuration, an id an earlier middleware set) is the application's.
            if (!str_starts_with($e->getMessage(), self::SHOP_ID_REFUSED) || !$this->fromClient($request, $source)) {
                throw $e;
            }
            return $this->badShop($request, $source, $e);
        }
        if (!$decision->isAllowed()) {
            return $this->denied($request, $decision, $name);
        }
        $request->attributes->set(self::DECISION_ATTRIBUTE, $decision);
        try {
            return $next($request);
        } finally {
            $decision->release();
        }
    }

    /** Retry-After for a denial: whole seconds, rounded up, at least 1 (at most a day). */
    public static function retryAfterHeader(Decision $decision): int
    {
        $seconds = $decision->retryAfter();
        if (!is_finite($seconds) || $seconds >= 86400.0) {
            return 86400;
        }
        return max(1, (int) ceil($seconds));
    }

    /**
     * The answer to a denied request: 503 with Retry-After, JSON for a client that asks for
     * JSON. Override it (and alias your subclass as `checkout-guard`) for another body.
     *
     * @return \Symfony\Component\HttpFoundation\Response
     */
    protected function denied(Request $request, Decision $decision, string $limiter)
    {
        $retryAfter = self::retryAfterHeader($decision);
        $headers = ['Retry-After' => (string) $retryAfter, 'Cache-Control' => 'no-store'];
        $message = 'Too many requests right now; please retry in ' . $retryAfter . ' s.';
        if ($request->expectsJson()) {
            return new JsonResponse(
                ['message' => $message, 'reason' => $decision->reason(), 'retry_after' => $retryAfter],
                503,
                $headers,
            );
        }
        return new Response($message, 503, $headers + ['Content-Type' => 'text/plain; charset=UTF-8']);
    }

    /**
     * The answer when `header:NAME` names a header the request lacks: 400.
     *
     * @return \Symfony\Component\HttpFoundation\Response
     */
    protected function missingShop(Request $request, string $source)
    {
        $message = 'missing shop id: the request has no ' . substr($source, strlen('header:')) . ' header';
        return $request->expectsJson()
            ? new JsonResponse(['message' => $message], 400)
            : new Response($message, 400, ['Content-Type' => 'text/plain; charset=UTF-8']);
    }

    /**
     * The answer when the shop id the client sent (header or route parameter) is one the
     * limiter refuses (more than 128 bytes, a control byte): 400 with the limiter's reason.
     *
     * @return \Symfony\Component\HttpFoundation\Response
     */
    protected function badShop(Request $request, string $source, ConfigurationException $refused)
    {
        $message = 'bad shop id: ' . substr($refused->getMessage(), strlen('checkout_guard: '));
        return $request->expectsJson()
            ? new JsonResponse(['message' => $message], 400)
            : new Response($message, 400, ['Content-Type' => 'text/plain; charset=UTF-8']);
    }

    /** Whether the shop id came from the client: a header or a route parameter (not an attribute). */
    private function fromClient(Request $request, string $source): bool
    {
        $route = $request->route();
        return str_starts_with($source, 'header:') || ($route instanceof Route && $route->hasParameter($source));
    }

    /** The shop id from $source; null for a missing header (a 400, the client's mistake). */
    private function shopId(Request $request, string $source): ?string
    {
        if (str_starts_with($source, 'header:')) {
            $header = substr($source, strlen('header:'));
            if ($header === '') {
                throw new ConfigurationException('checkout-guard middleware: "header:" needs a header name, e.g. header:X-Shop-Id');
            }
            $value = $request->headers->get($header);
            return $value === null || trim($value) === '' ? null : trim($value);
        }
        $route = $request->route();
        if ($route instanceof Route && $route->hasParameter($source)) {
            $value = $route->parameter($source);
        } elseif ($request->attributes->has($source)) {
            $value = $request->attributes->get($source);
        } else {
            throw new \LogicException(sprintf(
                'checkout-guard middleware: no shop id on this request: no route parameter or request attribute "%s"%s (name another with checkout-guard:LIMITER,NAME or checkout-guard:LIMITER,header:NAME)',
                $source,
                $route instanceof Route ? ' (route ' . $route->uri() . ')' : '',
            ));
        }
        if ($value instanceof UrlRoutable) {
            $value = $value->getRouteKey();
        }
        if (is_int($value)) {
            return (string) $value;   // an int shop id is its decimal string
        }
        if (!is_string($value) || $value === '') {
            throw new \LogicException(sprintf(
                'checkout-guard middleware: the shop id "%s" must be a non-empty string or an int, got %s',
                $source,
                get_debug_type($value),
            ));
        }
        return $value;
    }
}
