<?php
// checkout-guard's Laravel configuration (CheckoutGuard\Laravel\CheckoutGuardServiceProvider).
// Publish it into the application with
//     php artisan vendor:publish --tag=checkout-guard-config
// and edit config/checkout-guard.php there. docs/laravel.md has the whole story.

return [
    // The limiter that CheckoutGuard\Limiter and CheckoutGuard\RateLimiter resolve to, and
    // that the middleware uses when it names none (`checkout-guard` alone).
    'default' => env('CHECKOUT_GUARD_LIMITER', 'payments'),

    // The Valkey every limiter below uses unless it sets its own `url`; null: the
    // extension's `checkout_guard.url` from php.ini.
    'url' => env('CHECKOUT_GUARD_URL'),

    // Where the middleware finds the shop id when the route names no source
    // (`checkout-guard:payments`): a route parameter or request attribute of this name, or
    // `header:NAME` for a request header.
    'shop' => 'shop',

    // One entry per limiter: the options of `new CheckoutGuard\RateLimiter([...])`
    // (README.md, "Usage"). Each is a singleton bound as `checkout-guard.limiter.<name>`;
    // its `name` option defaults to the key (limiters with different names share nothing).
    'limiters' => [
        'payments' => [
            'global'   => ['capacity' => 100, 'refill_per_second' => 50],
            'hot_lane' => ['capacity' => 80,  'refill_per_second' => 40],
            'hot_shop' => ['capacity' => 30,  'refill_per_second' => 15],
        ],
    ],
];
