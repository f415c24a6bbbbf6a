<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\Symfony\GuardedHttpClient;
use CheckoutGuard\Symfony\RateLimitedHttpException;
use CheckoutGuard\Tests\Symfony\CheckoutService;
use CheckoutGuard\Tests\Symfony\PaymentsUser;
use CheckoutGuard\Tests\Symfony\ProviderStandIn;
use CheckoutGuard\Tests\Symfony\RefusingLimiter;
use CheckoutGuard\Tests\Symfony\SymfonyKernel;
use CheckoutGuard\Testing\FakeLimiter;
use Symfony\Component\Config\Definition\Exception\InvalidConfigurationException;
use Symfony\Component\HttpClient\Exception\TransportException;
use Symfony\Component\HttpClient\MockHttpClient;
use Symfony\Component\HttpClient\Response\MockResponse;

/**
 * The Symfony bundle (php/src/Symfony) in a real application: a Kernel with
 * MicroKernelTrait (tests/php/support/SymfonyKernel.php) reading config/packages/*.yaml,
 * booted against Debian 12's Symfony 5.4; the limiters decide in the suite's Valkey. The
 * payment provider behind the decorated HTTP client is Symfony's MockHttpClient
 * (framework.http_client.mock_response_factory): no network.
 */
final class SymfonyBundleTest extends LimiterTestCase
{
    private const DEBIAN_SYMFONY = [
        '/usr/share/php/Symfony/Bundle/FrameworkBundle/autoload.php',
        '/usr/share/php/Symfony/Component/HttpClient/autoload.php',
        '/usr/share/php/Symfony/Component/Yaml/autoload.php',
    ];

    private ?SymfonyKernel $kernel = null;
    private string $dir = '';
    /** @var array{0: mixed, 1: mixed} the error and exception handlers before the kernel booted */
    private array $handlers;

    public static function setUpBeforeClass(): void
    {
        foreach (self::DEBIAN_SYMFONY as $file) {
            if (!is_file($file)) {
                self::markTestSkipped("Symfony is not installed here ($file: scripts/setup.sh installs Debian's php-symfony-* packages)");
            }
        }
        foreach (self::DEBIAN_SYMFONY as $file) {
            require_once $file;
        }
        require_once __DIR__ . '/../support/SymfonyKernel.php';
    }

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/cg-symfony-' . bin2hex(random_bytes(6));
        $this->handlers = [set_error_handler(null), set_exception_handler(null)];
        restore_error_handler();
        restore_exception_handler();
        ProviderStandIn::$requests = [];
    }

    protected function tearDown(): void
    {
        $this->kernel?->shutdown();
        $this->kernel = null;
        // FrameworkBundle::boot() installs Symfony's error handler: PHPUnit's goes back.
        for ($i = 0; $i < 10 && set_error_handler(null) !== $this->handlers[0]; $i++) {
            restore_error_handler();
            restore_error_handler();
        }
        restore_error_handler();
        for ($i = 0; $i < 10 && set_exception_handler(null) !== $this->handlers[1]; $i++) {
            restore_exception_handler();
            restore_exception_handler();
        }
        restore_exception_handler();
        $this->assertSame($this->handlers[0], set_error_handler(null), 'PHPUnit\'s error handler is back');
        restore_error_handler();
        if (is_dir($this->dir)) {
            exec('rm -rf ' . escapeshellarg($this->dir));
        }
    }

    /** Writes the application's config files and boots its kernel. */
    private function boot(string $checkoutGuardYaml, string $servicesYaml = '', string $frameworkYaml = ''): SymfonyKernel
    {
        SymfonyKernel::project($this->dir, [
            'packages/framework.yaml' => "framework:\n    secret: test\n    test: true\n" . $frameworkYaml,
            'packages/checkout_guard.yaml' => $checkoutGuardYaml,
            'services.yaml' => $servicesYaml === '' ? "services:\n" : $servicesYaml,
        ]);
        $this->kernel = new SymfonyKernel($this->dir);
        $this->kernel->boot();
        return $this->kernel;
    }

    /** `$name: {name: ..., url: ..., global: ...}` as YAML, four spaces in. */
    private static function limiterYaml(string $key, string $name, int $capacity, string $more = ''): string
    {
        return "        $key:\n"
            . "            name: $name\n"
            . '            url: ' . json_encode(self::url()) . "\n"
            . "            global: { capacity: $capacity, refill_per_second: 0.001 }\n"
            . $more;
    }

    public function testALimiterServiceDecidesInValkey(): void
    {
        $name = self::uniqueName('sf');
        $unnamed = self::uniqueName('sf-key');
        $kernel = $this->boot("checkout_guard:\n    limiters:\n"
            . self::limiterYaml('payments', $name, 2)
            . "        $unnamed:\n            url: " . json_encode(self::url()) . "\n"
            . "            global: { capacity: 1, refill_per_second: 0.001 }\n");
        $limiter = $kernel->getContainer()->get('checkout_guard.limiter.payments');
        $this->assertInstanceOf(RateLimiter::class, $limiter);
        $this->assertInstanceOf(Limiter::class, $limiter);
        $this->assertTrue($limiter->acquire('shop-1')->isAllowed());
        $this->assertTrue($limiter->acquire(1234)->isAllowed(), 'an int shop id');
        $this->assertSame('global', $limiter->acquire('shop-2')->reason());
        // The buckets are in Valkey under the configured name: a limiter of another
        // process with the same options finds them empty.
        $elsewhere = new RateLimiter(['name' => $name, 'url' => self::url(), 'global' => self::bucket(2)]);
        $this->assertSame('global', $elsewhere->peek('shop-3')->reason());

        // Without a `name` option, the limiter is named after its key.
        $this->assertTrue($kernel->getContainer()->get("checkout_guard.limiter.$unnamed")->acquire('shop-1')->isAllowed());
        $sameName = new RateLimiter(['name' => $unnamed, 'url' => self::url(), 'global' => self::bucket(1)]);
        $this->assertSame('global', $sameName->peek('shop-1')->reason());
    }

    public function testAnOptionFromTheEnvironmentIsCheckedWhenTheServiceIsBuilt(): void
    {
        $_SERVER['CG_SYMFONY_TEST_URL'] = self::url();
        $_SERVER['CG_SYMFONY_TEST_CAPACITY'] = '0';
        try {
            $container = $this->boot("checkout_guard:\n    limiters:\n        payments:\n"
                . "            name: " . self::uniqueName('sf') . "\n"
                . "            url: '%env(CG_SYMFONY_TEST_URL)%'\n"
                . "            global: { capacity: '%env(int:CG_SYMFONY_TEST_CAPACITY)%', refill_per_second: 1 }\n")->getContainer();
            try {
                $container->get('checkout_guard.limiter.payments');
                $this->fail('a capacity of 0 was taken');
            } catch (\CheckoutGuard\ConfigurationException $e) {
                $this->assertStringContainsString('global.capacity', $e->getMessage());
            }
        } finally {
            unset($_SERVER['CG_SYMFONY_TEST_URL'], $_SERVER['CG_SYMFONY_TEST_CAPACITY']);
        }
    }

    public function testLimitersAreAutowiredByNameAndTheDefaultIsTheFirstOrTheOneNamed(): void
    {
        $services = "services:\n    CheckoutGuard\\Tests\\Symfony\\CheckoutService:\n        autowire: true\n        public: true\n";
        $limiters = "checkout_guard:\n    limiters:\n"
            . self::limiterYaml('payments', self::uniqueName('sf'), 5)
            . self::limiterYaml('refunds', self::uniqueName('sf'), 5);
        foreach (['the first' => ['', 'payments'], 'default_limiter' => ["    default_limiter: refunds\n", 'refunds']] as $case => [$default, $expected]) {
            $this->tearDown();
            $this->setUp();
            $container = $this->boot($limiters . $default, $services, "    http_client: true\n")->getContainer();
            $service = $container->get(CheckoutService::class);
            $this->assertSame($container->get('checkout_guard.limiter.payments'), $service->paymentsLimiter, $case);
            $this->assertSame($container->get('checkout_guard.limiter.refunds'), $service->refundsLimiter, $case);
            $this->assertNotSame($service->paymentsLimiter, $service->refundsLimiter, $case);
            $this->assertSame($container->get("checkout_guard.limiter.$expected"), $service->limiter, "$case: Limiter \$limiter");
            $this->assertSame($container->get("checkout_guard.limiter.$expected"), $service->rateLimiter, "$case: RateLimiter \$rateLimiter");
            $this->assertNotInstanceOf(GuardedHttpClient::class, $service->httpClient, "$case: no http_client section, no decorator");
        }
    }

    /** @return array<string, array{0: string, 1: list<string>}> */
    public static function badConfigurations(): array
    {
        $url = json_encode((string) getenv('CHECKOUT_GUARD_TEST_URL'));
        $global = "            global: { capacity: 5, refill_per_second: 1 }\n";
        return [
            'an option the extension does not know' => [
                "checkout_guard:\n    limiters:\n        payments:\n$global            refil_per_second: 5\n",
                ['checkout_guard.limiters.payments', '"refil_per_second" is not a known option'],
            ],
            'a value the extension refuses' => [
                "checkout_guard:\n    limiters:\n        payments:\n            global: { capacity: 0, refill_per_second: 1 }\n",
                ['checkout_guard.limiters.payments', 'global.capacity must be an integer from 1 to 1000000000, got 0'],
            ],
            'no global bucket' => [
                "checkout_guard:\n    limiters:\n        payments:\n            url: $url\n",
                ['checkout_guard.limiters.payments', 'global is required'],
            ],
            'a misspelt section' => [
                "checkout_guard:\n    limitters:\n        payments:\n$global",
                ['Unrecognized option "limitters" under "checkout_guard"'],
            ],
            'a limiter name that cannot be one' => [
                "checkout_guard:\n    limiters:\n        'pay ments':\n$global",
                ['checkout_guard.limiters', 'the limiter name "pay ments"'],
            ],
            'an unknown default_limiter' => [
                "checkout_guard:\n    default_limiter: payment\n    limiters:\n        payments:\n$global",
                ['checkout_guard.default_limiter', 'no limiter "payment" (limiters: payments)'],
            ],
            'the client naming an unknown limiter' => [
                "checkout_guard:\n    limiters:\n        payments:\n$global    http_client: { api: payment, limiter: payment }\n",
                ['checkout_guard.http_client.limiter', 'no limiter "payment" (limiters: payments)'],
            ],
            'the client with neither api nor limiter' => [
                "checkout_guard:\n    http_client: { shop_header: X-Shop }\n",
                ['checkout_guard.http_client', 'set "api"'],
            ],
            'a route of the client\'s api with an unknown key' => [
                "checkout_guard:\n    http_client:\n        api:\n            - { api: payment, pth: /v1 }\n",
                ['Unrecognized option "pth" under "checkout_guard.http_client.api.0"'],
            ],
            'the client\'s tokens above the limiter\'s smallest capacity' => [
                "checkout_guard:\n    limiters:\n        payments:\n$global            hot_shop: { capacity: 3, refill_per_second: 1 }\n"
                    . "    http_client: { limiter: payments, tokens: 4 }\n",
                ['checkout_guard.http_client.tokens', '4', 'the smallest capacity of the limiter "payments" (3)'],
            ],
            'two limiter keys autowired as one argument' => [
                "checkout_guard:\n    limiters:\n        hot-payments:\n$global        hot_payments:\n$global",
                ['checkout_guard.limiters', '"hot-payments"', '"hot_payments"', '$hotPaymentsLimiter'],
            ],
            'two limiter keys autowired as one argument, the other way round' => [
                "checkout_guard:\n    limiters:\n        hot_payments:\n$global        hot-payments:\n$global",
                ['checkout_guard.limiters', '"hot-payments"', '"hot_payments"', '$hotPaymentsLimiter'],
            ],
            'a wait beyond 10 s' => [
                "checkout_guard:\n    limiters:\n        payments:\n$global    http_client: { limiter: payments, max_wait_seconds: 30 }\n",
                ['checkout_guard.http_client.max_wait_seconds', '30'],
            ],
        ];
    }

    /** @dataProvider badConfigurations */
    #[\PHPUnit\Framework\Attributes\DataProvider('badConfigurations')]
    public function testABadConfigurationFailsTheBuildNamingTheKey(string $yaml, array $says): void
    {
        try {
            $this->boot($yaml);
            $this->fail('the kernel booted');
        } catch (InvalidConfigurationException $e) {
            foreach ($says as $text) {
                $this->assertStringContainsString($text, $e->getMessage());
            }
        }
    }

    public function testTheShopIsAStringAnIntAStringableOrTheTrimmedHeaderAndNothingElse(): void
    {
        $sent = 0;
        $provider = new MockHttpClient(static function () use (&$sent) {
            $sent++;
            return new MockResponse('{}');
        });
        $fake = FakeLimiter::allowing();
        $client = new GuardedHttpClient($provider, $fake);
        $shopId = new class ('shop-1') implements \Stringable {
            public function __construct(private string $id)
            {
            }

            public function __toString(): string
            {
                return $this->id;
            }
        };
        foreach ([
            ['extra' => ['checkout_guard_shop' => $shopId]],               // a value object, a Symfony Uid
            ['extra' => ['checkout_guard_shop' => 7]],
            ['extra' => ['checkout_guard_shop' => null], 'headers' => ['X-Shop-Id' => ' 42 ']],
            ['headers' => ["X-Shop-Id: \t43 "]],
            ['headers' => ['x-shop-id' => [' 44']]],
        ] as $options) {
            $client->request('POST', 'https://pay.example/v1/charges', $options)->getContent();
        }
        $asked = static fn () => array_column(array_filter($fake->calls(), static fn (array $c) => $c['method'] === 'acquire'), 'shop');
        $this->assertSame(['shop-1', '7', '42', '43', '44'], $asked(), 'each asked for, header values trimmed (as Laravel\'s middleware and Guzzle do)');
        $this->assertSame(5, $sent);

        // Anything else is a mistake of the caller's, never a request sent unlimited.
        foreach (['float' => 42.0, 'bool' => true, 'array' => ['shop-1'], 'stdClass' => new \stdClass()] as $type => $shop) {
            try {
                $client->request('POST', 'https://pay.example/v1/charges', ['extra' => ['checkout_guard_shop' => $shop]]);
                $this->fail("a $type shop was taken");
            } catch (\InvalidArgumentException $e) {
                $this->assertStringContainsString('checkout_guard_shop', $e->getMessage(), $type);
                $this->assertStringContainsString($type, $e->getMessage());
            }
        }
        // A shop header that is there but blank is no shop id: the limiter says so.
        try {
            $client->request('POST', 'https://pay.example/v1/charges', ['headers' => ['X-Shop-Id' => ' ']]);
            $this->fail('a blank shop header was sent unlimited');
        } catch (\CheckoutGuard\ConfigurationException $e) {
            $this->assertStringContainsString('shopId', $e->getMessage());
        }
        $this->assertSame(5, $sent, 'none of them sent');
        $this->assertCount(5, $asked());
    }

    public function testTheDecoratedClientIsLimitedMeasuredAndReportsBack(): void
    {
        $log = new EventLog(self::redis());
        $log->mark();
        $api = self::uniqueName('api');
        $container = $this->boot(
            "checkout_guard:\n    limiters:\n"
                . self::limiterYaml('payments', self::uniqueName('sf'), 100, "            adaptive: true\n            in_flight: { global: 1 }\n")
                . "    http_client:\n        api: $api\n        limiter: payments\n",
            "services:\n"
                . "    CheckoutGuard\\Tests\\Symfony\\CheckoutService:\n        autowire: true\n        public: true\n"
                . "    CheckoutGuard\\Tests\\Symfony\\ProviderStandIn: ~\n",
            "    http_client:\n        mock_response_factory: CheckoutGuard\\Tests\\Symfony\\ProviderStandIn\n",
        )->getContainer();
        $client = $container->get(CheckoutService::class)->httpClient;
        $this->assertInstanceOf(GuardedHttpClient::class, $client, 'the autowired client is the decorator');

        // The shop by header, then by the request's extra option (an int).
        $r = $client->request('POST', 'https://pay.example/v1/charges?card=secret', ['headers' => ['X-Shop-Id' => 'shop-1'], 'json' => ['amount' => 5]]);
        $this->assertSame(['paid' => true], $r->toArray());
        $this->assertTrue($client->lastDecision()->isAllowed());
        $r = $client->request('POST', 'https://pay.example/v1/charges', ['extra' => ['checkout_guard_shop' => 42]]);
        $this->assertSame(200, $r->getStatusCode());
        $r->getContent();
        $this->assertTrue($client->lastDecision()->isAllowed());

        // A response not read to its end holds its in-flight lease: the next call is
        // refused and not sent; read, the lease is back.
        $held = $client->request('GET', 'https://pay.example/v1/status', ['headers' => ['X-Shop-Id: shop-2']]);
        try {
            $client->request('GET', 'https://pay.example/v1/status', ['headers' => ['X-Shop-Id: shop-3']]);
            $this->fail('a second call in flight was let through');
        } catch (RateLimitedHttpException $e) {
            $this->assertSame('in_flight_global', $e->getDecision()->reason());
            $this->assertSame('shop-3', $e->getShopId());
        }
        $held->getContent();
        $this->assertSame(200, $client->request('GET', 'https://pay.example/v1/status', ['headers' => ['x-shop-id' => ['shop-3']]])->getStatusCode());

        // A request naming no shop is sent without asking the limiter (and measured).
        $this->assertSame(200, $client->request('GET', 'https://pay.example/health')->getStatusCode());
        $this->assertNull($client->lastDecision());

        // The provider says 429 with Retry-After: 2: the limiter pauses every shop.
        $busy = $client->request('POST', 'https://pay.example/busy', ['headers' => ['X-Shop-Id' => 'shop-1']]);
        $this->assertSame(429, $busy->getStatusCode());
        $busy->getContent(false);
        $sent = count(ProviderStandIn::$requests);
        try {
            $client->request('POST', 'https://pay.example/v1/charges', ['headers' => ['X-Shop-Id' => 'shop-4']]);
            $this->fail('a call during the provider\'s pause was let through');
        } catch (RateLimitedHttpException $e) {
            $this->assertSame('provider', $e->getDecision()->reason());
            $this->assertGreaterThan(0.0, $e->getDecision()->retryAfter());
            $this->assertLessThanOrEqual(2.0, $e->getDecision()->retryAfter());
            $this->assertStringContainsString('shop "shop-4"', $e->getMessage());
        }
        $this->assertCount($sent, ProviderStandIn::$requests, 'refused calls never reach the provider');
        $this->assertSame(6, $sent);

        $events = array_values(array_filter($log->jsonl(), fn (array $e) => ($e['api'] ?? null) === $api));
        $this->assertSame(
            [
                ['POST', 200, 'shop-1', 'https://pay.example/v1/charges'],
                ['POST', 200, '42', 'https://pay.example/v1/charges'],
                ['GET', 200, 'shop-2', 'https://pay.example/v1/status'],
                ['GET', 200, 'shop-3', 'https://pay.example/v1/status'],
                ['GET', 200, null, 'https://pay.example/health'],
                ['POST', 429, 'shop-1', 'https://pay.example/busy'],
            ],
            array_map(fn (array $e) => [$e['http.request.method'], $e['http.response.status_code'], $e['shop.id'] ?? null, $e['url.full']], $events),
        );
        $this->assertSame(['ExternalApiCall'], array_values(array_unique(array_column($events, 'eventType'))));
    }

    public function testAFakeInPlaceOfALimiterIsWhatServicesAndTheClientGet(): void
    {
        $container = $this->boot(
            "checkout_guard:\n    limiters:\n"
                . self::limiterYaml('payments', self::uniqueName('sf'), 100)
                . "    http_client: { limiter: payments }\n",
            "services:\n"
                . "    checkout_guard.limiter.payments: { class: CheckoutGuard\\Tests\\Symfony\\RefusingLimiter, public: true }\n"
                . "    CheckoutGuard\\Tests\\Symfony\\ProviderStandIn: ~\n"
                . "    CheckoutGuard\\Tests\\Symfony\\PaymentsUser: { autowire: true, public: true }\n",
            "    http_client:\n        mock_response_factory: CheckoutGuard\\Tests\\Symfony\\ProviderStandIn\n",
        )->getContainer();
        $fake = $container->get('checkout_guard.limiter.payments');
        $this->assertInstanceOf(RefusingLimiter::class, $fake);
        $user = $container->get(PaymentsUser::class);
        $this->assertSame($fake, $user->paymentsLimiter);
        $this->assertSame($fake, $user->limiter);
        try {
            $user->httpClient->request('POST', 'https://pay.example/v1/charges', ['headers' => ['X-Shop-Id' => 'shop-1']]);
            $this->fail('the fake\'s refusal was not followed');
        } catch (RateLimitedHttpException $e) {
            $this->assertSame(2, $e->retryAfterSeconds());
        }
        $this->assertSame(['shop-1'], $fake->asked);
        $this->assertSame([], ProviderStandIn::$requests);
    }

    public function testResponsesStreamedTogetherAreEachMeasuredByRouteAndReleased(): void
    {
        $log = new EventLog(self::redis());
        $log->mark();
        $api = self::uniqueName('api');
        $container = $this->boot(
            "checkout_guard:\n    limiters:\n"
                . self::limiterYaml('payments', self::uniqueName('sf'), 100, "            in_flight: { global: 2 }\n")
                . "    http_client:\n        limiter: payments\n        api:\n"
                . "            - { api: $api, host: pay.example, path: '/items/{id}', method: GET }\n"
                . "            - { api: $api-other, host: pay.example }\n",
            "services:\n"
                . "    CheckoutGuard\\Tests\\Symfony\\PaymentsUser: { autowire: true, public: true }\n"
                . "    CheckoutGuard\\Tests\\Symfony\\ProviderStandIn: ~\n",
            "    http_client:\n        mock_response_factory: CheckoutGuard\\Tests\\Symfony\\ProviderStandIn\n",
        )->getContainer();
        $client = $container->get(PaymentsUser::class)->httpClient;
        $ended = [];
        for ($round = 0; $round < 2; $round++) {
            $responses = [
                $client->request('GET', 'https://pay.example/items/1', ['headers' => ['X-Shop-Id' => "shop-a$round"]]),
                $client->request('GET', 'https://pay.example/items/2', ['headers' => ['X-Shop-Id' => "shop-b$round"]]),
            ];
            foreach ($client->stream($responses) as $response => $chunk) {
                if ($chunk->isLast()) {
                    $ended[] = parse_url($response->getInfo('url'), PHP_URL_PATH);
                }
            }
        }
        sort($ended);
        $this->assertSame(['/items/1', '/items/1', '/items/2', '/items/2'], $ended, 'the second round had its leases: the first round\'s were released');
        $this->assertSame(200, $client->request('POST', 'https://pay.example/items/3')->getStatusCode());
        $events = array_values(array_filter($log->jsonl(), fn (array $e) => str_starts_with($e['api'] ?? '', $api)));
        $this->assertSame(
            array_merge(array_fill(0, 4, [$api, 200, '/items/{id}']), [["$api-other", 200, null]]),
            array_map(fn (array $e) => [$e['api'], $e['http.response.status_code'], $e['url.template'] ?? null], $events),
            'named by the routes: the first that matches',
        );
    }

    public function testATransportErrorIsMeasuredWithItsClassAndReleasesTheLease(): void
    {
        $log = new EventLog(self::redis());
        $log->mark();
        $api = self::uniqueName('api');
        $container = $this->boot(
            "checkout_guard:\n    limiters:\n"
                . self::limiterYaml('payments', self::uniqueName('sf'), 100, "            in_flight: { global: 1 }\n")
                . "    http_client: { api: $api, limiter: payments }\n",
            "services:\n"
                . "    CheckoutGuard\\Tests\\Symfony\\CheckoutService:\n        autowire: true\n        public: true\n"
                . "    CheckoutGuard\\Tests\\Symfony\\ProviderStandIn: ~\n",
            "    http_client:\n        mock_response_factory: CheckoutGuard\\Tests\\Symfony\\ProviderStandIn\n",
        )->getContainer();
        $client = $container->get(CheckoutService::class)->httpClient;
        $this->assertInstanceOf(GuardedHttpClient::class, $client);
        for ($i = 0; $i < 2; $i++) {
            try {
                $client->request('GET', 'https://pay.example/down', ['headers' => ['X-Shop-Id' => 'shop-1']])->getContent();
                $this->fail('no transport error');
            } catch (TransportException $e) {
                $this->assertStringContainsString('connection refused', $e->getMessage());
            }
        }
        $events = array_values(array_filter($log->jsonl(), fn (array $e) => ($e['api'] ?? null) === $api));
        $this->assertSame(
            [[0, TransportException::class], [0, TransportException::class]],
            array_map(fn (array $e) => [$e['http.response.status_code'], $e['error.type'] ?? null], $events),
            'both calls sent (the first one\'s lease released) and measured',
        );
    }
}
