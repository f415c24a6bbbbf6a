<?php
declare(strict_types=1);

// Loaded by LaravelIntegrationTest only where Laravel is installed (these classes extend
// and implement Laravel's).

namespace CheckoutGuard\Tests;

use CheckoutGuard\Laravel\CheckoutGuardServiceProvider;
use Illuminate\Container\Container;
use Illuminate\Contracts\Debug\ExceptionHandler;
use Illuminate\Contracts\Routing\UrlRoutable;
use Illuminate\Foundation\Application;
use Illuminate\Http\Request;
use Illuminate\Routing\Router;
use Illuminate\Support\Facades\Facade;
use Symfony\Component\HttpFoundation\Response;

/**
 * A Laravel application without a skeleton: a temporary base path with config/app.php
 * (the provider listed, as an application lists it) and config/checkout-guard.php, booted
 * by an HTTP kernel whose bootstrappers are Laravel's less HandleExceptions (it would take
 * over PHPUnit's error handler for the rest of the run). Exceptions are not rendered: they
 * reach the test.
 */
final class LaravelApp
{
    private function __construct(public readonly Application $app, public readonly LaravelKernel $kernel, public readonly string $base)
    {
    }

    /** @param array<string, mixed> $checkoutGuard config/checkout-guard.php (none written when empty) */
    public static function boot(array $checkoutGuard): self
    {
        $base = sys_get_temp_dir() . '/cg-laravel-' . bin2hex(random_bytes(6));
        foreach (['config', 'bootstrap/cache', 'storage/logs', 'storage/framework'] as $dir) {
            mkdir("$base/$dir", 0777, true);
        }
        self::writeConfig("$base/config/app.php", [
            'name' => 'checkout-guard-test',
            'env' => 'testing',
            'debug' => true,
            'timezone' => 'UTC',
            // Laravel's own providers an application lists that these tests need: `files`
            // for vendor:publish.
            'providers' => [\Illuminate\Filesystem\FilesystemServiceProvider::class, CheckoutGuardServiceProvider::class],
        ]);
        $onlyUrl = array_keys($checkoutGuard) === ['url'];
        if (!$onlyUrl) {
            self::writeConfig("$base/config/checkout-guard.php", $checkoutGuard);
        }
        $app = new Application($base);
        $app->singleton(\Illuminate\Contracts\Http\Kernel::class, LaravelKernel::class);
        $app->singleton(ExceptionHandler::class, LaravelRethrowingHandler::class);
        $kernel = $app->make(\Illuminate\Contracts\Http\Kernel::class);
        $kernel->bootstrap();
        if ($onlyUrl) {
            $app->make('config')->set('checkout-guard.url', $checkoutGuard['url']);
        }
        return new self($app, $kernel, $base);
    }

    /** Forgets the application Laravel keeps in statics (facades, the container instance). */
    public static function forget(): void
    {
        Facade::clearResolvedInstances();
        Facade::setFacadeApplication(null);
        Container::setInstance(null);
    }

    public static function removeTree(string $dir): void
    {
        if (!is_dir($dir)) {
            return;
        }
        $items = new \RecursiveIteratorIterator(
            new \RecursiveDirectoryIterator($dir, \FilesystemIterator::SKIP_DOTS),
            \RecursiveIteratorIterator::CHILD_FIRST,
        );
        foreach ($items as $item) {
            $item->isDir() && !$item->isLink() ? rmdir($item->getPathname()) : unlink($item->getPathname());
        }
        rmdir($dir);
    }

    public function make(string $abstract): mixed
    {
        return $this->app->make($abstract);
    }

    public function instance(string $abstract, mixed $instance): void
    {
        $this->app->instance($abstract, $instance);
    }

    public function config(string $key): mixed
    {
        return $this->app->make('config')->get($key);
    }

    public function router(): Router
    {
        return $this->app->make('router');
    }

    /** @param array<string, string> $server e.g. HTTP_X_SHOP_ID */
    public function handle(string $method, string $uri, array $server = []): Response
    {
        $request = Request::create($uri, $method, [], [], [], $server);
        $response = $this->kernel->handle($request);
        $this->kernel->terminate($request, $response);
        return $response;
    }

    /** An artisan command run in this application; its exit code. */
    public function artisan(string $command, array $parameters): int
    {
        $artisan = new \Illuminate\Console\Application($this->app, $this->app->make('events'), $this->app->version());
        $artisan->setAutoExit(false);
        $artisan->add($this->app->make(\Illuminate\Foundation\Console\VendorPublishCommand::class));
        return $artisan->call($command, $parameters, new \Symfony\Component\Console\Output\BufferedOutput());
    }

    private static function writeConfig(string $file, array $config): void
    {
        file_put_contents($file, "<?php\nreturn " . var_export($config, true) . ";\n");
    }
}

final class LaravelKernel extends \Illuminate\Foundation\Http\Kernel
{
    protected $bootstrappers = [
        \Illuminate\Foundation\Bootstrap\LoadEnvironmentVariables::class,
        \Illuminate\Foundation\Bootstrap\LoadConfiguration::class,
        \Illuminate\Foundation\Bootstrap\RegisterFacades::class,
        \Illuminate\Foundation\Bootstrap\RegisterProviders::class,
        \Illuminate\Foundation\Bootstrap\BootProviders::class,
    ];
}

/** Reports nothing, renders nothing: the exception reaches the test. */
final class LaravelRethrowingHandler implements ExceptionHandler
{
    public function report(\Throwable $e): void
    {
    }

    public function shouldReport(\Throwable $e): bool
    {
        return false;
    }

    public function render($request, \Throwable $e)
    {
        throw $e;
    }

    public function renderForConsole($output, \Throwable $e): void
    {
        throw $e;
    }
}

/** An application's own middleware that puts the shop id in a request attribute. */
final class LaravelTenantMiddleware
{
    public function handle(Request $request, \Closure $next): mixed
    {
        $request->attributes->set('tenant', (int) $request->headers->get('X-Tenant'));
        return $next($request);
    }
}

/** A route-bound model: the middleware counts it by its route key. */
final class LaravelShopModel implements UrlRoutable
{
    public function __construct(private readonly int $id)
    {
    }

    public function getRouteKey()
    {
        return $this->id;
    }

    public function getRouteKeyName()
    {
        return 'id';
    }

    public function resolveRouteBinding($value, $field = null)
    {
        return new self((int) $value);
    }

    public function resolveChildRouteBinding($childType, $value, $field)
    {
        return null;
    }
}

/** A service that type-hints the interface: autowired with the default limiter. */
final class LaravelCheckoutService
{
    public function __construct(public readonly \CheckoutGuard\Limiter $limiter)
    {
    }
}


/** A limiter whose acquire() refuses its own configuration, whatever the shop. */
final class LaravelMisconfiguredLimiter implements \CheckoutGuard\Limiter
{
    public function acquire(string|int $shopId, int $tokens = 1, float $maxWaitSeconds = 0.0, ?string $endpoint = null, ?string $priority = null): \CheckoutGuard\Decision
    {
        throw new \CheckoutGuard\ConfigurationException('checkout_guard: tokens must be from 1 to 0 (the smallest configured capacity), got 1');
    }

    public function peek(string|int $shopId, int $tokens = 1, ?string $endpoint = null, ?string $priority = null): \CheckoutGuard\Decision
    {
        return $this->acquire($shopId, $tokens);
    }

    public function feedback(string|int $shopId, int $statusCode, ?float $retryAfterSeconds = null): void
    {
    }

    public function markHot(string|int $shopId, int $ttlSeconds): void
    {
    }

    public function unmarkHot(string|int $shopId): void
    {
    }

    public function isHot(string|int $shopId): bool
    {
        return false;
    }

    public function reset(): void
    {
    }
}
