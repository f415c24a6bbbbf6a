<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Http\EndpointRoutes;
use CheckoutGuard\Http\GuzzleMiddleware;
use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\Testing\FakeLimiter;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Promise\Utils;
use Nyholm\Psr7\Factory\Psr17Factory;
use PHPUnit\Framework\Attributes\DataProvider;
use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestInterface;
use Psr\Http\Message\ResponseInterface;

/**
 * The route map from request to endpoint and priority class (EndpointRoutes, docs/endpoints.md)
 * and the two clients that take it (RateLimitedClient, GuzzleMiddleware::limit()), limited
 * by a FakeLimiter with `endpoints` and `priorities`: which route a request matches (method
 * case, query string, `{id}`, `*`, first match), bad maps refused naming the route, a request
 * no route maps decided as without routes, a name the limiter does not configure. No
 * network, no Valkey.
 */
final class EndpointRoutesTest extends LimiterTestCase
{
    private const ROUTES = [
        'POST /v1/payment_intents/{id}/confirm' => ['endpoint' => 'charges.confirm', 'priority' => 'critical'],
        'post /v1/charges' => 'charges.create',
        'GET /v1/items*' => 'items',
        'GET /v1/items/special' => 'never',        // after items*: never reached
        '/v1/reports/*' => ['priority' => 'background'],
        '* /v1/refunds/{id}' => ['endpoint' => 'refunds'],
    ];

    private Psr17Factory $factory;

    protected function setUp(): void
    {
        $this->factory = new Psr17Factory();
    }

    /** @return array<string, array{0: string, 1: string, 2: ?string, 3: ?string}> */
    public static function requests(): array
    {
        return [
            'confirm' => ['POST', 'https://api.example/v1/payment_intents/pi_1/confirm', 'charges.confirm', 'critical'],
            'confirm, method in lower case' => ['post', 'https://api.example/v1/payment_intents/pi_1/confirm', 'charges.confirm', 'critical'],
            'confirm with a query string' => ['POST', 'https://api.example/v1/payment_intents/pi_1/confirm?expand[]=charges#x', 'charges.confirm', 'critical'],
            'confirm, GET' => ['GET', 'https://api.example/v1/payment_intents/pi_1/confirm', null, null],
            'confirm, one segment too many' => ['POST', 'https://api.example/v1/payment_intents/pi_1/x/confirm', null, null],
            'confirm, no id' => ['POST', 'https://api.example/v1/payment_intents//confirm', null, null],
            'confirm, trailing slash' => ['POST', 'https://api.example/v1/payment_intents/pi_1/confirm/', null, null],
            'a route in lower case' => ['POST', 'https://api.example/v1/charges', 'charges.create', null],
            'items' => ['GET', 'https://api.example/v1/items', 'items', null],
            'items, deeper, with a query' => ['GET', 'https://api.example/v1/items/42/reviews?page=2', 'items', null],
            'items* is any characters' => ['GET', 'https://api.example/v1/itemsXYZ', 'items', null],
            'items, percent-encoded' => ['GET', 'https://api.example/v1/items%2F42', 'items', null],
            'the first match wins' => ['GET', 'https://api.example/v1/items/special', 'items', null],
            'items, POST' => ['POST', 'https://api.example/v1/items', null, null],
            'the path\'s case counts' => ['GET', 'https://api.example/V1/items', null, null],
            'a query is not the path' => ['GET', 'https://api.example/v1/other?path=/v1/items', null, null],
            'any method, a class alone' => ['DELETE', 'https://api.example/v1/reports/2024/q1', null, 'background'],
            'any method, * given' => ['PATCH', 'https://api.example/v1/refunds/re_1', 'refunds', null],
            'no path' => ['GET', 'https://api.example', null, null],
            'another host, same path' => ['GET', 'https://other.example/v1/items', 'items', null],
        ];
    }

    /** @dataProvider requests */
    #[DataProvider('requests')]
    public function testARequestMatchesTheFirstRouteOfItsMethodAndPath(string $method, string $url, ?string $endpoint, ?string $priority): void
    {
        $routes = new EndpointRoutes(self::ROUTES);
        $this->assertSame([$endpoint, $priority], $routes->match($this->factory->createRequest($method, $url)));
        $this->assertSame([$endpoint, $priority], $routes->matchOf($method, $url), 'matchOf() as match()');
    }

    /** @return array<string, array{0: array, 1: string}> */
    public static function badMaps(): array
    {
        return [
            'a list' => [['items'], 'route "0"'],
            'an int key' => [['GET /x' => 'a', 7 => 'b'], 'route "7"'],
            'no slash' => [['GET v1/items' => 'items'], 'route "GET v1/items" must be "METHOD /path"'],
            'a query' => [['GET /v1/items?x=1' => 'items'], 'route "GET /v1/items?x=1" must be'],
            'a fragment' => [['/v1/items#a' => 'items'], 'route "/v1/items#a" must be'],
            'a tab' => [["GET\t/v1/items" => 'items'], 'route "GET\x09/v1/items" must be'],
            'two methods' => [['GET POST /v1/items' => 'items'], 'route "GET POST /v1/items" must be'],
            'a space in the path' => [['GET /v1/my items' => 'items'], 'route "GET /v1/my items" must be'],
            'leading space' => [[' GET /v1/items' => 'items'], 'route " GET /v1/items"'],
            'empty key' => [['' => 'items'], 'route ""'],
            'a number' => [['GET /x' => 5], 'route "GET /x" must map to an endpoint\'s name or to [\'endpoint\' => NAME, \'priority\' => CLASS] (either or both), got int'],
            'null' => [['GET /x' => null], 'route "GET /x" must map to'],
            'an empty array' => [['GET /x' => []], 'got an empty array'],
            'a list of names' => [['GET /x' => ['items', 'critical']], 'got a list'],
            'an unknown key' => [['GET /x' => ['endpoint' => 'items', 'prio' => 'critical']], 'route "GET /x" has an unknown key "prio" (known: endpoint, priority)'],
            'an endpoint with a space' => [['GET /x' => 'my items'], 'route "GET /x"\'s endpoint must be a name of 1 to 64 characters'],
            'an empty endpoint' => [['GET /x' => ''], 'got ""'],
            'an endpoint too long' => [['GET /x' => str_repeat('e', 65)], 'route "GET /x"\'s endpoint'],
            'a class not a string' => [['GET /x' => ['priority' => 1]], 'route "GET /x"\'s priority must be a name of 1 to 64 characters from A-Z a-z 0-9 _ . : / - (as the limiter\'s options), got int'],
            'an endpoint null' => [['GET /x' => ['endpoint' => null, 'priority' => 'low']], 'route "GET /x"\'s endpoint must be a name of 1 to 64 characters from A-Z a-z 0-9 _ . : / - (as the limiter\'s options), got null'],
            'a binary key' => [["GET /\xff\n" => 'items'], 'route "GET /\xff\x0a" must be'],
        ];
    }

    /**
     * A bad map is an InvalidArgumentException naming the route, from EndpointRoutes and
     * from both clients as they are built (not when a request is sent).
     *
     * @dataProvider badMaps
     */
    #[DataProvider('badMaps')]
    public function testABadMapIsRefusedNamingTheRoute(array $routes, string $message): void
    {
        $build = [
            'EndpointRoutes' => fn () => new EndpointRoutes($routes),
            'RateLimitedClient' => fn () => new RateLimitedClient(self::provider(), FakeLimiter::allowing(), fn () => 's', routes: $routes),
            'GuzzleMiddleware::limit' => fn () => GuzzleMiddleware::limit(FakeLimiter::allowing(), fn () => 's', routes: $routes),
        ];
        foreach ($build as $what => $f) {
            try {
                $f();
                $this->fail("$what took it");
            } catch (\InvalidArgumentException $e) {
                $this->assertNotInstanceOf(ConfigurationException::class, $e);
                $this->assertStringStartsWith('EndpointRoutes: ', $e->getMessage(), $what);
                $this->assertStringContainsString($message, $e->getMessage(), $what);
            }
        }
    }

    /** A PSR-18 client that answers 200 and keeps what it was sent. */
    private static function provider(): ClientInterface
    {
        return new class () implements ClientInterface {
            /** @var list<string> */
            public array $sent = [];

            public function sendRequest(RequestInterface $request): ResponseInterface
            {
                $this->sent[] = $request->getMethod() . ' ' . $request->getUri()->getPath();
                return (new Psr17Factory())->createResponse(200);
            }
        };
    }

    /**
     * global 10, items 2, charges.confirm 5, refunds 2 (1 token/s, the clock standing
     * still); normal (the default) and background keep half of each.
     */
    private static function fakeLimiter(): FakeLimiter
    {
        return new FakeLimiter([
            'global' => self::bucket(10, 1.0),
            'endpoints' => ['items' => self::bucket(2, 1.0), 'charges.confirm' => self::bucket(5, 1.0), 'refunds' => self::bucket(2, 1.0)],
            'priorities' => ['critical' => 0, 'normal' => 0.5, 'background' => 0.5],
            'default_priority' => 'normal',
        ]);
    }

    public function testRateLimitedClientDecidesEachRequestInItsEndpointAndClass(): void
    {
        $f = $this->factory;
        $limiter = self::fakeLimiter();
        $provider = self::provider();
        $client = new RateLimitedClient($provider, $limiter, fn () => 'shop-1', routes: self::ROUTES);
        $send = function (string $method, string $path) use ($client, $f): string {
            try {
                $client->sendRequest($f->createRequest($method, "https://api.example$path"));
                return 'sent';
            } catch (RateLimitedException $e) {
                return $e->getDecision()->reason();
            }
        };

        // items keeps half of its 2 for normal: one call, then the endpoint refuses.
        $this->assertSame(['sent', 'endpoint'], [$send('GET', '/v1/items?limit=5'), $send('get', '/v1/items/42')]);
        // A request no route maps: global, the default class (keeps 5 of 10): 4 more.
        $this->assertSame(['sent', 'sent', 'sent', 'sent', 'global'], array_map(fn () => $send('GET', '/v1/customers'), range(1, 5)));
        // The critical confirm takes what normal must leave.
        $this->assertSame(['sent', 'sent'], [$send('POST', '/v1/payment_intents/pi_1/confirm'), $send('POST', '/v1/payment_intents/pi_2/confirm')]);
        $this->assertSame('global', $send('DELETE', '/v1/reports/1'), 'background keeps 5 of 10 (3 left)');
        $this->assertSame(
            ['GET /v1/items', 'GET /v1/customers', 'GET /v1/customers', 'GET /v1/customers', 'GET /v1/customers', 'POST /v1/payment_intents/pi_1/confirm', 'POST /v1/payment_intents/pi_2/confirm'],
            $provider->sent,
            'the refused requests were never sent'
        );
        $acquires = array_values(array_filter($limiter->calls(), fn (array $c) => $c['method'] === 'acquire'));
        $this->assertSame(['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1, 'endpoint' => 'items'], $acquires[0]);
        $this->assertSame(['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1], $acquires[2], 'no route: asked as without routes');
        $this->assertSame(['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1, 'endpoint' => 'charges.confirm', 'priority' => 'critical'], $acquires[7]);
        $this->assertSame(['method' => 'acquire', 'shop' => 'shop-1', 'tokens' => 1, 'priority' => 'background'], $acquires[9]);
        $this->assertSame('global', $client->lastDecision()->reason());
    }

    public function testARouteToAnEndpointTheLimiterDoesNotConfigureIsItsConfigurationException(): void
    {
        $provider = self::provider();
        $client = new RateLimitedClient($provider, self::fakeLimiter(), fn () => 's', routes: ['GET /v1/things' => 'things', '/x' => ['priority' => 'urgent']]);
        foreach (['/v1/things' => 'endpoint "things" is not configured (endpoints: charges.confirm, items, refunds)', '/x' => 'priority "urgent" is not configured (priorities: background, critical, normal)'] as $path => $message) {
            try {
                $client->sendRequest($this->factory->createRequest('GET', "https://api.example$path"));
                $this->fail('sent');
            } catch (ConfigurationException $e) {
                $this->assertSame("checkout_guard: $message", $e->getMessage());
            }
        }
        $this->assertSame([], $provider->sent);
        $this->assertNull($client->lastDecision());
    }

    public function testGuzzleMiddlewareDecidesEachRequestInItsEndpointAndClass(): void
    {
        $mock = new \GuzzleHttp\Handler\MockHandler(array_fill(0, 4, new \GuzzleHttp\Psr7\Response(200)));
        $stack = HandlerStack::create($mock);
        $limiter = self::fakeLimiter();
        $stack->push(GuzzleMiddleware::limit($limiter, fn () => 's', routes: new EndpointRoutes(self::ROUTES + ['GET /v1/nope' => 'nope'])));
        $client = new Guzzle(['handler' => $stack]);

        $results = Utils::settle([
            $client->getAsync('https://api.example/v1/refunds/re_1'),
            $client->postAsync('https://api.example/v1/refunds/re_2'),
            $client->getAsync('https://api.example/v1/items'),
            $client->getAsync('https://api.example/v1/nope'),
            $client->postAsync('https://api.example/v1/payment_intents/pi_1/confirm'),
        ])->wait();
        $this->assertSame(['fulfilled', 'rejected', 'fulfilled', 'rejected', 'fulfilled'], array_column($results, 'state'));
        $this->assertInstanceOf(RateLimitedException::class, $results[1]['reason']);
        $this->assertSame('endpoint', $results[1]['reason']->getDecision()->reason(), 'refunds holds 2, normal keeps 1');
        $this->assertInstanceOf(ConfigurationException::class, $results[3]['reason']);
        $this->assertStringContainsString('endpoint "nope" is not configured', $results[3]['reason']->getMessage());
        $this->assertSame(1, $mock->count(), 'three transfers made of four answers');
        $this->assertSame(
            [['refunds', null], ['refunds', null], ['items', null], ['charges.confirm', 'critical']],
            array_map(fn (array $c) => [$c['endpoint'] ?? null, $c['priority'] ?? null], array_values(array_filter($limiter->calls(), fn (array $c) => $c['method'] === 'acquire')))
        );
    }

    /**
     * A request no route maps is asked with three arguments, as before routes: a limiter
     * whose acquire() takes no endpoint (the extension before issue 42) still decides it.
     * The real RateLimiter at a URL where nothing listens answers `unavailable` (allow).
     */
    public function testARequestNoRouteMapsIsAskedAsWithoutRoutes(): void
    {
        $real = new RateLimiter(['global' => self::bucket(5), 'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(), 'timeout_ms' => 20, 'on_unavailable' => 'allow']);
        $provider = self::provider();
        $client = new RateLimitedClient($provider, $real, fn () => 's', routes: ['GET /v1/items*' => 'items']);
        $client->sendRequest($this->factory->createRequest('GET', 'https://api.example/v1/customers'));
        $this->assertSame(['unavailable', true], [$client->lastDecision()->reason(), $client->lastDecision()->isAllowed()]);
        $this->assertSame(['GET /v1/customers'], $provider->sent);
        if ((new \ReflectionMethod(RateLimiter::class, 'acquire'))->getNumberOfParameters() < 5) {
            // This extension's acquire() takes three arguments: a mapped request cannot be asked.
            $this->expectException(\ArgumentCountError::class);
        } else {
            $this->expectException(ConfigurationException::class);   // items is not configured
        }
        $client->sendRequest($this->factory->createRequest('GET', 'https://api.example/v1/items'));
    }
}
