<?php
// Wiring of the example checkout: the provider's two APIs through measured PSR-18 clients,
// the payment API behind the RateLimiter. Settings come from the php-fpm pool's env[...]
// (see scripts/loadstack.sh), so one code base runs with the limiter on and off.
declare(strict_types=1);

require __DIR__ . '/../../autoload.php';
require '/usr/share/php/GuzzleHttp/autoload.php';
require '/usr/share/php/Nyholm/Psr7/autoload.php';

use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\MeasuredClient;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\RateLimiter;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;

function env(string $name, string $default): string
{
    $v = getenv($name);
    return $v === false || $v === '' ? $default : $v;
}

/** The provider's APIs, named for events and call budgets. */
function api_namer(): ApiNamer
{
    return new ApiNamer([
        ['api' => 'zoneA', 'path' => '/items/{id}', 'method' => 'GET'],
        ['api' => 'payment', 'path' => '/v1/charges', 'method' => 'POST'],
    ]);
}

function limiter(): ?RateLimiter
{
    if (env('CHECKOUT_LIMITER', 'on') !== 'on') {
        return null;
    }
    $hot = hot_shops();
    return new RateLimiter(adaptive_option() + in_flight_option() + [
        'name' => 'payments',
        // The provider allows 50 payments/s with bursts of 10: the global bucket stays just
        // under both. A hot shop may use half of it, all hot shops together 30/s.
        'global' => ['capacity' => (int) env('CG_GLOBAL_CAPACITY', '10'), 'refill_per_second' => (float) env('CG_GLOBAL_RATE', '45')],
        'hot_lane' => ['capacity' => (int) env('CG_LANE_CAPACITY', '8'), 'refill_per_second' => (float) env('CG_LANE_RATE', '30')],
        'hot_shop' => ['capacity' => (int) env('CG_SHOP_CAPACITY', '6'), 'refill_per_second' => (float) env('CG_SHOP_RATE', '25')],
        'hot_shops' => $hot,
        'on_unavailable' => env('CG_ON_UNAVAILABLE', 'allow'),
        // CHECKOUT_AUTO_HOT=on: shops taking over 30% of the global bucket for 10 s become
        // hot by themselves (no hot_shops list needed).
        'auto_hot' => env('CHECKOUT_AUTO_HOT', 'off') === 'on',
    ]);
}

/**
 * The limiter's `adaptive` option from CHECKOUT_ADAPTIVE: `on` adapts the budget to the
 * provider's throttling answers (429), with CHECKOUT_ADAPTIVE_RECOVER seconds to climb
 * back when set (recover_seconds; the option's default otherwise); unset, empty or `off`
 * passes no `adaptive` at all, so the checkout runs on an extension that does not know
 * the option (scripts/loadtest.sh adaptive, docs/loadtest.md "Adaptive budget").
 *
 * @return array{adaptive?: true|array{recover_seconds: float}}
 */
function adaptive_option(): array
{
    $adaptive = env('CHECKOUT_ADAPTIVE', 'off');
    if ($adaptive === 'off') {
        return [];
    }
    if ($adaptive !== 'on') {
        throw new InvalidArgumentException("CHECKOUT_ADAPTIVE must be on or off, got '$adaptive'");
    }
    $recover = env('CHECKOUT_ADAPTIVE_RECOVER', '');
    if ($recover === '') {
        return ['adaptive' => true];
    }
    if (!is_numeric($recover) || (float) $recover <= 0) {
        throw new InvalidArgumentException("CHECKOUT_ADAPTIVE_RECOVER must be seconds above 0, got '$recover'");
    }
    return ['adaptive' => ['recover_seconds' => (float) $recover]];
}

/**
 * The limiter's `in_flight` option (issue 37) from CHECKOUT_IN_FLIGHT, a comma list of
 * LEVEL=N: `global=16,hot_shop=6` (levels global, hot_lane, hot_shop; lease_seconds=S);
 * unset, empty or `off` passes no `in_flight` at all, so the checkout runs on an extension
 * that does not know the option (scripts/loadtest.sh slow-provider, docs/loadtest.md
 * "Slow provider: in-flight leases"). The limiter validates the numbers.
 *
 * @return array{in_flight?: array<string, int|float>}
 */
function in_flight_option(): array
{
    $spec = env('CHECKOUT_IN_FLIGHT', 'off');
    if ($spec === 'off') {
        return [];
    }
    $levels = [];
    foreach (explode(',', $spec) as $part) {
        [$name, $value] = array_pad(explode('=', trim($part), 2), 2, '');
        if (!in_array($name, ['global', 'hot_lane', 'hot_shop', 'lease_seconds'], true) || !is_numeric($value)) {
            throw new InvalidArgumentException(
                "CHECKOUT_IN_FLIGHT must be a comma list of global|hot_lane|hot_shop|lease_seconds=NUMBER, got '$part'"
            );
        }
        $levels[$name] = $name === 'lease_seconds' ? (float) $value : (int) $value;
    }
    return ['in_flight' => $levels];
}

/** The shops listed hot for this checkout (CHECKOUT_HOT_SHOPS), as the limiter has them. */
function hot_shops(): array
{
    return array_values(array_filter(explode(',', env('CHECKOUT_HOT_SHOPS', ''))));
}

/**
 * How long a checkout may wait for its payment token (acquire()'s maxWaitSeconds) instead
 * of answering 503 at once: CHECKOUT_MAX_WAIT seconds for ordinary shops (default 0: never
 * wait), CHECKOUT_HOT_MAX_WAIT for the shops listed in CHECKOUT_HOT_SHOPS (default 0: a
 * flood's buyers are refused at once rather than holding php-fpm workers). A wait holds
 * a worker: keep it short (docs/loadtest.md, "When to wait"). Shops marked hot at run
 * time (markHot(), auto_hot) are not in the list and count as ordinary here: asking
 * isHot() would cost a round trip to Valkey per checkout.
 */
function max_wait_seconds(string $shopId): float
{
    $hot = in_array($shopId, hot_shops(), true);
    return (float) env($hot ? 'CHECKOUT_HOT_MAX_WAIT' : 'CHECKOUT_MAX_WAIT', '0');
}

/** @return array{0: ClientInterface, 1: ClientInterface} the item client and the payment client */
function clients(string $shopId): array
{
    $http = new GuzzleHttp\Client(['timeout' => 3, 'connect_timeout' => 1]);
    $attributes = fn (RequestInterface $r) => ['shop.id' => $shopId];
    $measured = new MeasuredClient($http, api_namer(), $attributes);
    $limiter = limiter();
    // The limiter sits outside the measurement: a request it refuses is never sent, so it
    // is not an external call (it is a RateLimitDecision event instead).
    $payments = $limiter === null
        ? $measured
        : new RateLimitedClient(
            $measured,
            $limiter,
            fn (RequestInterface $r) => $r->hasHeader('X-Shop-Id') ? $r->getHeaderLine('X-Shop-Id') : null,   // "0" is a shop
            maxWaitSeconds: fn (string $shop) => max_wait_seconds($shop),
        );
    return [$measured, $payments];
}

/**
 * The endpoint API's limiter (issue 42; intent.php, lookup.php, scripts/loadtest.sh
 * endpoints): one limiter for the whole provider account, in one of three forms chosen by
 * CHECKOUT_EP_LIMITS:
 *   global      the global bucket only (every call draws from it, whatever its endpoint);
 *   endpoints   the global bucket and one bucket per endpoint under it;
 *   priorities  the same, and the priority classes of CG_EP_PRIORITIES (default
 *               critical=0,normal=0.2,background=0.5): confirm is critical, create normal,
 *               retrieve and items background.
 * Sizes just inside the provider's (global 50/s, burst 25; 25/s, burst 5 per endpoint):
 * CG_EP_GLOBAL_CAPACITY (20), CG_EP_GLOBAL_RATE (45), CG_EP_CAPACITY (5), CG_EP_RATE (22).
 */
function endpoint_limits(): string
{
    $form = env('CHECKOUT_EP_LIMITS', 'global');
    if (!in_array($form, ['global', 'endpoints', 'priorities'], true)) {
        throw new InvalidArgumentException("CHECKOUT_EP_LIMITS must be global, endpoints or priorities, got '$form'");
    }
    return $form;
}

/** The endpoints of the provider's API, as the limiter names them. */
const ENDPOINTS = ['payment_intents.create', 'payment_intents.confirm', 'payment_intents.retrieve', 'items'];

/** Each endpoint's priority class (CHECKOUT_EP_LIMITS=priorities). */
const ENDPOINT_PRIORITY = [
    'payment_intents.confirm' => 'critical',   // completes a sale that is already created
    'payment_intents.create' => 'normal',
    'payment_intents.retrieve' => 'background',
    'items' => 'background',
];

function endpoint_limiter(): RateLimiter
{
    $form = endpoint_limits();
    $options = [
        'name' => 'provider',
        'global' => ['capacity' => (int) env('CG_EP_GLOBAL_CAPACITY', '20'), 'refill_per_second' => (float) env('CG_EP_GLOBAL_RATE', '45')],
        'on_unavailable' => env('CG_ON_UNAVAILABLE', 'allow'),
    ];
    if ($form !== 'global') {
        $bucket = ['capacity' => (int) env('CG_EP_CAPACITY', '5'), 'refill_per_second' => (float) env('CG_EP_RATE', '22')];
        $options['endpoints'] = array_fill_keys(ENDPOINTS, $bucket);
    }
    if ($form === 'priorities') {
        $shares = [];
        foreach (explode(',', env('CG_EP_PRIORITIES', 'critical=0,normal=0.2,background=0.5')) as $part) {
            [$class, $share] = array_pad(explode('=', trim($part), 2), 2, '');
            if ($class === '' || !is_numeric($share)) {
                throw new InvalidArgumentException("CG_EP_PRIORITIES must be a comma list of CLASS=SHARE, got '$part'");
            }
            $shares[$class] = (float) $share;
        }
        $options['priorities'] = $shares;
        $options['default_priority'] = 'normal';
    }
    return new RateLimiter($options);
}

/**
 * Asks the endpoint limiter for one call to $endpoint by $shop: with the global form the
 * call names no endpoint (the extension's three arguments), otherwise its endpoint, and
 * with priorities its class.
 */
function acquire_for(RateLimiter $limiter, string $shop, string $endpoint): CheckoutGuard\Decision
{
    return match (endpoint_limits()) {
        'global' => $limiter->acquire($shop),
        'endpoints' => $limiter->acquire($shop, endpoint: $endpoint),
        'priorities' => $limiter->acquire($shop, endpoint: $endpoint, priority: ENDPOINT_PRIORITY[$endpoint]),
    };
}
