<?php
declare(strict_types=1);

namespace CheckoutGuard\Laravel;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use Illuminate\Contracts\Container\Container;
use Illuminate\Support\ServiceProvider;

/**
 * checkout-guard in a Laravel application (tested with Laravel 8.83, Debian 12's): the
 * limiters of `config/checkout-guard.php` (published with
 * `php artisan vendor:publish --tag=checkout-guard-config`) as singletons bound as
 * `checkout-guard.limiter.<name>`, CheckoutGuard\Limiter and CheckoutGuard\RateLimiter bound
 * to the `default` one, and the route middleware `checkout-guard` (CheckoutGuardMiddleware:
 * `->middleware('checkout-guard:payments')`). docs/laravel.md.
 */
final class CheckoutGuardServiceProvider extends ServiceProvider
{
    /** The middleware's alias: `checkout-guard:LIMITER[,SHOP-SOURCE]`. */
    public const MIDDLEWARE = 'checkout-guard';
    /** The tag of `php artisan vendor:publish --tag=checkout-guard-config`. */
    public const PUBLISH_TAG = 'checkout-guard-config';
    /** A limiter's binding is this prefix and its name. */
    public const BINDING_PREFIX = 'checkout-guard.limiter.';

    /**
     * The config file shipped with the library: the defaults, and what vendor:publish copies.
     * In a checkout or a Composer package it is php/config/ beside php/src/; in the Debian
     * package's layout (src/ installed as /usr/share/php/CheckoutGuard/) config/ is in there.
     */
    public static function configFile(): string
    {
        $beside = dirname(__DIR__, 2) . '/config/checkout-guard.php';
        $inside = dirname(__DIR__) . '/config/checkout-guard.php';
        return is_file($beside) || !is_file($inside) ? $beside : $inside;
    }

    public function register(): void
    {
        $this->mergeConfigFrom(self::configFile(), Limiters::CONFIG_KEY);

        $this->app->singleton(Limiters::class, static function (Container $app): Limiters {
            $config = $app->make('config')->get(Limiters::CONFIG_KEY);
            if (!is_array($config)) {
                throw new ConfigurationException(sprintf(
                    'the %s config must be an array, got %s',
                    Limiters::CONFIG_KEY,
                    get_debug_type($config),
                ));
            }
            return new Limiters($config);
        });

        // One singleton per configured limiter (the names known now; a limiter added to the
        // config later is still found by limiter(), through the registry).
        $limiters = $this->app->make('config')->get(Limiters::CONFIG_KEY . '.limiters');
        foreach (is_array($limiters) ? array_keys($limiters) : [] as $name) {
            $name = (string) $name;
            $this->app->singleton(
                self::BINDING_PREFIX . $name,
                static fn (Container $app): Limiter => $app->make(Limiters::class)->get($name),
            );
        }

        $this->app->singleton(
            Limiter::class,
            static fn (Container $app): Limiter => self::limiter($app, $app->make(Limiters::class)->defaultName()),
        );
        $this->app->singleton(RateLimiter::class, static function (Container $app): RateLimiter {
            $limiter = $app->make(Limiter::class);
            if (!$limiter instanceof RateLimiter) {
                throw new ConfigurationException(sprintf(
                    'CheckoutGuard\RateLimiter was asked for, but the default limiter bound is a %s: type-hint CheckoutGuard\Limiter instead',
                    get_debug_type($limiter),
                ));
            }
            return $limiter;
        });
    }

    public function boot(): void
    {
        $this->publishes(
            [self::configFile() => $this->app->configPath('checkout-guard.php')],
            self::PUBLISH_TAG,
        );
        $this->callAfterResolving('router', static function ($router): void {
            $router->aliasMiddleware(self::MIDDLEWARE, CheckoutGuardMiddleware::class);
        });
    }

    /**
     * The limiter named $name: the container's `checkout-guard.limiter.<name>` (so a test can
     * swap in a fake with `$app->instance('checkout-guard.limiter.payments', $fake)`), else
     * the config's `limiters.<name>`; a name configured nowhere is a ConfigurationException
     * naming the limiters that exist.
     */
    public static function limiter(Container $app, string $name): Limiter
    {
        $binding = self::BINDING_PREFIX . $name;
        $limiter = $app->bound($binding) ? $app->make($binding) : $app->make(Limiters::class)->get($name);
        if (!$limiter instanceof Limiter) {
            throw new ConfigurationException(sprintf(
                '%s is bound to a %s, not a CheckoutGuard\Limiter',
                $binding,
                get_debug_type($limiter),
            ));
        }
        return $limiter;
    }
}
