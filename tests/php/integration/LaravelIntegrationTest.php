<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use CheckoutGuard\Laravel\CheckoutGuardMiddleware;
use CheckoutGuard\Laravel\CheckoutGuardServiceProvider;
use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;

/**
 * The Laravel integration (php/src/Laravel) in a real Laravel 8.83 application (Debian 12's
 * php-laravel-framework): an Illuminate\Foundation\Application on a temporary base path with
 * config/app.php and config/checkout-guard.php, booted by an HTTP kernel, requests handled by
 * the router, limiters on the test's Valkey. Skipped where Laravel is not installed (the
 * PHP matrix's chroots).
 */
final class LaravelIntegrationTest extends LimiterTestCase
{
    private const LARAVEL = '/usr/share/php/Illuminate/autoload.php';

    /** @var list<string> */
    private array $dirs = [];
    /** The application's base path (the last one booted). */
    private string $base = '';

    public static function setUpBeforeClass(): void
    {
        if (is_file(self::LARAVEL)) {
            require_once self::LARAVEL;
            require_once __DIR__ . '/../support/LaravelApp.php';
        }
    }

    protected function setUp(): void
    {
        if (!is_file(self::LARAVEL)) {
            $this->markTestSkipped('Laravel is not installed (Debian 12: php-laravel-framework, scripts/setup.sh)');
        }
    }

    protected function tearDown(): void
    {
        if (class_exists(LaravelApp::class, false)) {
            LaravelApp::forget();
        }
        foreach ($this->dirs as $dir) {
            LaravelApp::removeTree($dir);
        }
    }

    /** @param array<string, mixed> $options */
    private static function limiterConfig(array $options): array
    {
        return $options + ['global' => self::bucket(100)];
    }

    /** An application with this `checkout-guard` config (the url: the test's Valkey). */
    private function app(array $checkoutGuard): LaravelApp
    {
        $checkoutGuard += ['url' => self::url()];
        $app = LaravelApp::boot($checkoutGuard);
        $this->dirs[] = $app->base;
        $this->base = $app->base;
        return $app;
    }

    public function testTheProviderBindsEveryLimiterOnceAndTheDefault(): void
    {
        $pay = self::uniqueName('pay');
        $search = self::uniqueName('search');
        $app = $this->app([
            'default' => $pay,
            'limiters' => [$pay => ['global' => self::bucket(1)], $search => ['global' => self::bucket(1)]],
        ]);
        $payments = $app->make("checkout-guard.limiter.$pay");
        $this->assertInstanceOf(RateLimiter::class, $payments);
        $this->assertSame($payments, $app->make("checkout-guard.limiter.$pay"), 'a singleton');
        $this->assertSame($payments, $app->make(Limiter::class), 'Limiter: the default');
        $this->assertSame($payments, $app->make(RateLimiter::class), 'RateLimiter: the default');
        $other = $app->make("checkout-guard.limiter.$search");
        $this->assertNotSame($payments, $other);

        // Each limiter is named by its key: draining one leaves the other's bucket full.
        $this->assertTrue($payments->acquire('s')->isAllowed());
        $this->assertSame('global', $payments->acquire('s')->reason());
        $this->assertTrue($other->acquire('s')->isAllowed(), 'another name, another bucket');

        // Autowiring: a class that type-hints the interface gets the default.
        $service = $app->make(LaravelCheckoutService::class);
        $this->assertSame($payments, $service->limiter);
    }

    public function testTheConfigFileIsMergedAndPublishable(): void
    {
        $app = $this->app([]);   // nothing configured: the shipped file's defaults
        $this->assertSame('payments', $app->config('checkout-guard.default'));
        $this->assertSame(['payments'], array_keys($app->config('checkout-guard.limiters')));
        $this->assertSame('shop', $app->config('checkout-guard.shop'));

        $this->assertSame(0, $app->artisan('vendor:publish', ['--tag' => 'checkout-guard-config']));
        $published = $this->base . '/config/checkout-guard.php';
        $this->assertFileEquals(CheckoutGuardServiceProvider::configFile(), $published);
    }

    /**
     * The Debian package installs php/src as /usr/share/php/CheckoutGuard/ and php/config as
     * its config/ (scripts/deb.sh): the provider finds its config file there too.
     */
    public function testTheConfigFileIsFoundInTheDebianPackagesLayout(): void
    {
        $lib = sys_get_temp_dir() . '/cg-laravel-deb-' . bin2hex(random_bytes(6)) . '/CheckoutGuard';
        $this->dirs[] = dirname($lib);
        $src = dirname(__DIR__, 3) . '/php';
        mkdir("$lib/Laravel", 0777, true);
        mkdir("$lib/config");
        copy("$src/src/Laravel/CheckoutGuardServiceProvider.php", "$lib/Laravel/CheckoutGuardServiceProvider.php");
        copy("$src/config/checkout-guard.php", "$lib/config/checkout-guard.php");
        $code = sprintf(
            'require %s; require %s; echo CheckoutGuard\Laravel\CheckoutGuardServiceProvider::configFile();',
            var_export(self::LARAVEL, true),
            var_export("$lib/Laravel/CheckoutGuardServiceProvider.php", true),
        );
        $p = proc_open([PHP_BINARY, '-n', '-d', 'include_path=' . get_include_path(), '-r', $code], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $this->assertIsResource($p);
        $out = stream_get_contents($pipes[1]);
        $err = stream_get_contents($pipes[2]);
        $this->assertSame(0, proc_close($p), $err);
        $this->assertSame("$lib/config/checkout-guard.php", $out);
    }

    public function testAnAllowedRequestPassesAndADeniedOneGets503WithRetryAfter(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app(['default' => $name, 'limiters' => [$name => ['global' => self::bucket(2)]]]);
        $seen = [];
        $app->router()->post('/shops/{shop}/pay', static function (\Illuminate\Http\Request $request, string $shop) use (&$seen) {
            $decision = $request->attributes->get(CheckoutGuardMiddleware::DECISION_ATTRIBUTE);
            $seen[] = [$shop, $decision instanceof Decision ? $decision->reason() : null];
            return 'paid';
        })->middleware("checkout-guard:$name");

        foreach (['a', 'b'] as $shop) {
            $response = $app->handle('POST', "/shops/$shop/pay");
            $this->assertSame([200, 'paid'], [$response->getStatusCode(), $response->getContent()], $shop);
            $this->assertFalse($response->headers->has('Retry-After'));
        }
        $denied = $app->handle('POST', '/shops/c/pay');
        $this->assertSame(503, $denied->getStatusCode());
        $this->assertMatchesRegularExpression('/^[1-9][0-9]*$/D', (string) $denied->headers->get('Retry-After'));
        // The bucket refills 1 token per 1000 s: the header is the decision's wait, rounded up.
        $this->assertGreaterThan(900, (int) $denied->headers->get('Retry-After'));
        $this->assertSame([['a', 'allowed'], ['b', 'allowed']], $seen, 'the denied request never reached the controller');

        // A client asking for JSON gets the reason.
        $json = $app->handle('POST', '/shops/c/pay', ['HTTP_ACCEPT' => 'application/json']);
        $this->assertSame(503, $json->getStatusCode());
        $body = json_decode((string) $json->getContent(), true);
        $this->assertSame('global', $body['reason']);
        $this->assertSame((int) $json->headers->get('Retry-After'), $body['retry_after']);
    }

    public function testRetryAfterIsWholeSecondsAndAtLeastOne(): void
    {
        $this->assertSame(1, CheckoutGuardMiddleware::retryAfterHeader(new Decision(false, 'global', 0.0)));
        $this->assertSame(1, CheckoutGuardMiddleware::retryAfterHeader(new Decision(false, 'global', 0.2)));
        $this->assertSame(2, CheckoutGuardMiddleware::retryAfterHeader(new Decision(false, 'global', 1.01)));
        $this->assertSame(86400, CheckoutGuardMiddleware::retryAfterHeader(new Decision(false, 'global', 1e9)), 'at most a day');
    }

    public function testTheShopIdComesFromTheNamedParameterAttributeOrHeader(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app([
            'default' => $name,
            'limiters' => [$name => self::limiterConfig(['hot_shop' => self::bucket(1), 'hot_shops' => ['flash', '42']])],
        ]);
        $router = $app->router();
        $ok = static fn () => 'paid';
        $router->post('/p/{store}', $ok)->middleware("checkout-guard:$name,store");
        $router->post('/h', $ok)->middleware("checkout-guard:$name,header:X-Shop-Id");
        $router->post('/d/{shop}', $ok)->middleware('checkout-guard');          // the default limiter, config `shop`
        $router->post('/none', $ok)->middleware('checkout-guard');

        // The hot shop `flash` has one token in its own bucket, by whichever source names it.
        $this->assertSame(200, $app->handle('POST', '/p/flash')->getStatusCode());
        $this->assertSame(503, $app->handle('POST', '/h', ['HTTP_X_SHOP_ID' => 'flash'])->getStatusCode());
        $this->assertSame(503, $app->handle('POST', '/d/flash')->getStatusCode());
        $this->assertSame(200, $app->handle('POST', '/h', ['HTTP_X_SHOP_ID' => 'other'])->getStatusCode());
        $this->assertSame(200, $app->handle('POST', '/d/42')->getStatusCode(), 'a numeric id is its decimal string');
        $this->assertSame(503, $app->handle('POST', '/p/42')->getStatusCode());

        $missing = $app->handle('POST', '/h');
        $this->assertSame(400, $missing->getStatusCode(), 'a missing header is the client\'s mistake');
        $this->assertStringContainsString('X-Shop-Id', (string) $missing->getContent());

        try {
            $app->handle('POST', '/none');
            $this->fail('a route without the shop parameter');
        } catch (\LogicException $e) {
            $this->assertStringContainsString('no route parameter or request attribute "shop"', $e->getMessage());
        }
    }

    public function testAShopIdTheLimiterRefusesFromTheClientIsA400AndAnyOtherRefusalThrows(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app(['default' => $name, 'limiters' => [$name => self::limiterConfig([])]]);
        $router = $app->router();
        $router->post('/h', static fn () => 'paid')->middleware("checkout-guard:$name,header:X-Shop-Id");
        $router->post('/shops/{shop}/pay', static fn () => 'paid')->middleware("checkout-guard:$name");

        // What the client sends and the limiter refuses (more than 128 bytes, a control
        // byte) is the client's mistake, as a missing header is: 400, the controller not run.
        $cases = [
            'a header of 129 bytes' => ['/h', ['HTTP_X_SHOP_ID' => str_repeat('9', 129)]],
            'a header with 0x7f' => ['/h', ['HTTP_X_SHOP_ID' => "7\x7f"]],
            'a route parameter of 129 bytes' => ['/shops/' . str_repeat('9', 129) . '/pay', []],
            'a route parameter with 0x01' => ['/shops/a%01b/pay', []],
        ];
        foreach ($cases as $case => [$uri, $server]) {
            $response = $app->handle('POST', $uri, $server);
            $this->assertSame(400, $response->getStatusCode(), $case);
            $this->assertStringContainsString('bad shop id', (string) $response->getContent(), $case);
            $this->assertStringContainsString('shopId must', (string) $response->getContent(), "$case: the limiter's reason");
            $json = $app->handle('POST', $uri, $server + ['HTTP_ACCEPT' => 'application/json']);
            $this->assertSame(400, $json->getStatusCode(), $case);
            $this->assertStringContainsString('bad shop id', json_decode((string) $json->getContent(), true)['message'], $case);
        }
        $this->assertSame(200, $app->handle('POST', '/h', ['HTTP_X_SHOP_ID' => str_repeat('9', 128)])->getStatusCode(), '128 bytes is a shop id');

        // A limiter refusing anything else (its own configuration) is no client's mistake: it throws.
        $app->instance("checkout-guard.limiter.$name", new LaravelMisconfiguredLimiter());
        try {
            $app->handle('POST', '/shops/s/pay');
            $this->fail('a misconfigured limiter answered');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('tokens must be', $e->getMessage());
        }
    }

    public function testTheShopIdFromARequestAttributeAndARouteBoundModel(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app([
            'default' => $name,
            'shop' => 'tenant',
            'limiters' => [$name => self::limiterConfig(['hot_shop' => self::bucket(1), 'hot_shops' => ['7']])],
        ]);
        $app->router()->aliasMiddleware('tenant', LaravelTenantMiddleware::class);
        $app->router()->post('/a', static fn () => 'paid')->middleware(['tenant', 'checkout-guard']);
        // A model bound to {model}: /m/seven is the shop with the route key 7.
        $app->router()->post('/m/{model}', static fn () => 'paid')
            ->middleware([\Illuminate\Routing\Middleware\SubstituteBindings::class, "checkout-guard:$name,model"]);
        $app->router()->bind('model', static fn (string $v) => new LaravelShopModel($v === 'seven' ? 7 : 8));

        $this->assertSame(200, $app->handle('POST', '/a', ['HTTP_X_TENANT' => '7'])->getStatusCode());
        $this->assertSame(503, $app->handle('POST', '/a', ['HTTP_X_TENANT' => '7'])->getStatusCode(), 'the attribute (an int) named shop 7');
        $this->assertSame(503, $app->handle('POST', '/m/seven')->getStatusCode(), 'the model\'s route key: shop 7');
        $this->assertSame(200, $app->handle('POST', '/m/eight')->getStatusCode());
    }

    public function testTheLeaseIsReleasedAfterTheResponseEvenWhenTheControllerThrows(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app([
            'default' => $name,
            'limiters' => [$name => self::limiterConfig(['in_flight' => ['global' => 1]])],
        ]);
        $held = [];
        $app->router()->post('/pay/{shop}', static function (\Illuminate\Http\Request $request) use (&$held) {
            $decision = $request->attributes->get(CheckoutGuardMiddleware::DECISION_ATTRIBUTE);
            $held[] = $decision->hasLease();
            if ($request->query('fail') !== null) {
                throw new \RuntimeException('the provider call failed');
            }
            return 'paid';
        })->middleware("checkout-guard:$name");

        // One lease at most: each request finds it free only if the one before released it.
        for ($i = 0; $i < 3; $i++) {
            $this->assertSame(200, $app->handle('POST', "/pay/s$i")->getStatusCode(), "request $i");
        }
        try {
            $app->handle('POST', '/pay/s?fail=1');
            $this->fail('the controller threw');
        } catch (\RuntimeException $e) {
            $this->assertSame('the provider call failed', $e->getMessage());
        }
        $this->assertSame(200, $app->handle('POST', '/pay/s4')->getStatusCode(), 'released after the exception too');
        $this->assertSame([true, true, true, true, true], $held, 'the controller ran holding the lease');

        // The lease held while the controller runs is what the next request meets.
        $limiter = $app->make("checkout-guard.limiter.$name");
        $app->router()->post('/nested/{shop}', static function () use ($limiter) {
            return $limiter->acquire('other')->reason();
        })->middleware("checkout-guard:$name");
        $this->assertSame('in_flight_global', $app->handle('POST', '/nested/s')->getContent());
    }

    public function testAFakeBoundInTheContainerIsWhatTheMiddlewareUses(): void
    {
        $name = self::uniqueName('pay');
        $app = $this->app(['default' => $name, 'limiters' => [$name => self::limiterConfig([])]]);
        $fake = \CheckoutGuard\Testing\FakeLimiter::denying('global', 2.5);
        $app->instance("checkout-guard.limiter.$name", $fake);
        $app->router()->post('/pay/{shop}', static fn () => 'paid')->middleware("checkout-guard:$name");
        $response = $app->handle('POST', '/pay/s');
        $this->assertSame(['503', '3'], [(string) $response->getStatusCode(), $response->headers->get('Retry-After')]);
        $this->assertSame([['method' => 'acquire', 'shop' => 's', 'tokens' => 1]], $fake->calls(), 'the middleware asked the fake once, for the route\'s shop');
    }

    public function testBadConfigNamesTheKey(): void
    {
        $name = self::uniqueName('pay');
        $cases = [
            'a bad option value' => [
                ['default' => $name, 'limiters' => [$name => ['global' => ['capacity' => -1, 'refill_per_second' => 1]]]],
                "checkout-guard.limiters.$name: global.capacity must be an integer from 1 to 1000000000, got -1",
            ],
            'an unknown option' => [
                ['default' => $name, 'limiters' => [$name => ['globl' => self::bucket(1)]]],
                "checkout-guard.limiters.$name: \"globl\" is not a known option",
            ],
            'a limiter that is no array' => [
                ['default' => $name, 'limiters' => [$name => 'redis://x']],
                "checkout-guard.limiters.$name must be an array of RateLimiter options, got \"redis://x\"",
            ],
            'a default configured nowhere' => [
                ['default' => 'paymnts', 'limiters' => [$name => self::limiterConfig([])]],
                "checkout-guard.default names the limiter \"paymnts\", which checkout-guard.limiters does not configure (configured: $name)",
            ],
        ];
        foreach ($cases as $case => [$config, $message]) {
            $app = $this->app($config);
            try {
                $app->make(Limiter::class);
                $this->fail("$case: no exception");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($message, $e->getMessage(), $case);
            }
            LaravelApp::forget();
        }

        // The middleware naming a limiter the config lacks.
        $app = $this->app(['default' => $name, 'limiters' => [$name => self::limiterConfig([])]]);
        $app->router()->post('/pay/{shop}', static fn () => 'paid')->middleware('checkout-guard:paymnts');
        try {
            $app->handle('POST', '/pay/s');
            $this->fail('an unknown limiter');
        } catch (ConfigurationException $e) {
            $this->assertSame("no limiter \"paymnts\" in checkout-guard.limiters (configured: $name)", $e->getMessage());
        }
    }
}
