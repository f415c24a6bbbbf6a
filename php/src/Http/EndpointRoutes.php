<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;
use Psr\Http\Message\RequestInterface;

/**
 * Which endpoint bucket and priority class a request is decided in (the limiter's
 * `endpoints` and `priorities` options, docs/endpoints.md), by method and path, for
 * RateLimitedClient and GuzzleMiddleware::limit():
 *
 *     new EndpointRoutes([
 *         'POST /v1/payment_intents/{id}/confirm' => ['endpoint' => 'charges.confirm', 'priority' => 'critical'],
 *         'POST /v1/charges' => 'charges.create',             // an endpoint, the default class
 *         'GET /v1/items*'   => 'items',
 *         '/v1/reports/*'    => ['priority' => 'background'],  // any method, no endpoint
 *     ]);
 *
 * A key is `METHOD /path` or `/path` (any method; `*` as the method is any method too). The
 * method is matched without regard to case; the path is matched as ApiNamer matches its
 * templates (the same matcher): `{name}` one segment, `*` any run of characters, `/`
 * included, the rest itself (percent-encoded as sent), case included; the query string is
 * never part of the path, nor is the host (one client per provider). The first route that
 * matches wins (the array's order). A value is an endpoint's name, or an array with
 * `endpoint`, `priority` or both. A request no route matches is decided as without routes:
 * no endpoint, the limiter's `default_priority`.
 *
 * A bad map (a key that is not `METHOD /path`, a value that is not a name or such an
 * array, an unknown key, a name the limiter could never configure) is an
 * InvalidArgumentException naming the route. A name the limiter does not configure is the
 * limiter's ConfigurationException when the first request it matches is decided.
 */
final class EndpointRoutes
{
    private const KEYS = ['endpoint', 'priority'];
    private const MAX_NAME_BYTES = 64;

    private ApiNamer $namer;
    /** @var array<string, array{0: ?string, 1: ?string}> the namer's api ("#i") => endpoint, class */
    private array $targets = [];

    /** @param array<string, string|array{endpoint?: string, priority?: string}> $routes */
    public function __construct(array $routes)
    {
        $namerRoutes = [];
        $i = 0;
        foreach ($routes as $key => $target) {
            $route = is_string($key) ? $key : (string) $key;
            if (!is_string($key) || preg_match('#^(?:(\*|[A-Za-z]+) +)?(/[^\s?\#]*)$#D', $key, $m) !== 1) {
                throw new \InvalidArgumentException(sprintf(
                    'EndpointRoutes: route %s must be "METHOD /path" or "/path" (a path from its "/", no spaces, no query or fragment)%s',
                    self::show($route),
                    is_string($key) ? '' : ' (a string key; the routes are an array from route to endpoint, not a list)'
                ));
            }
            $api = '#' . $i++;
            $namerRoutes[] = ['api' => $api, 'path' => $m[2]] + ($m[1] === '' || $m[1] === '*' ? [] : ['method' => $m[1]]);
            $this->targets[$api] = self::target($key, $target);
        }
        $this->namer = new ApiNamer($namerRoutes);
    }

    /**
     * The endpoint and class of a request: [null, null] when no route matches it.
     *
     * @return array{0: ?string, 1: ?string}
     */
    public function match(RequestInterface $request): array
    {
        [$api, $template] = $this->namer->name($request);
        return $template === null ? [null, null] : $this->targets[$api];
    }

    /**
     * `$limiter->acquire()` for `$request`, in the endpoint and class its route maps it to;
     * a request no route maps is asked with three arguments, as without routes (so any
     * Limiter, and an extension without the endpoint arguments, takes it).
     */
    public function acquire(Limiter $limiter, RequestInterface $request, string $shop, int $tokens = 1, float $maxWaitSeconds = 0.0): Decision
    {
        [$endpoint, $priority] = $this->match($request);
        if ($endpoint === null && $priority === null) {
            return $limiter->acquire($shop, $tokens, $maxWaitSeconds);
        }
        return $limiter->acquire($shop, $tokens, $maxWaitSeconds, $endpoint, $priority);
    }

    /**
     * match() for a client without PSR-7 requests.
     *
     * @return array{0: ?string, 1: ?string}
     */
    public function matchOf(string $method, string $url): array
    {
        [$api, $template] = $this->namer->nameOf($method, $url);
        return $template === null ? [null, null] : $this->targets[$api];
    }

    /** @return array{0: ?string, 1: ?string} */
    private static function target(string $route, mixed $target): array
    {
        if (is_string($target)) {
            return [self::name($route, 'endpoint', $target), null];
        }
        if (!is_array($target) || $target === [] || array_is_list($target)) {
            throw new \InvalidArgumentException(sprintf(
                "EndpointRoutes: route %s must map to an endpoint's name or to ['endpoint' => NAME, 'priority' => CLASS] (either or both), got %s",
                self::show($route),
                is_array($target) ? ($target === [] ? 'an empty array' : 'a list') : get_debug_type($target)
            ));
        }
        foreach (array_keys($target) as $k) {
            if (!in_array($k, self::KEYS, true)) {
                throw new \InvalidArgumentException(sprintf(
                    'EndpointRoutes: route %s has an unknown key %s (known: %s)',
                    self::show($route),
                    self::show((string) $k),
                    implode(', ', self::KEYS)
                ));
            }
        }
        return [
            array_key_exists('endpoint', $target) ? self::name($route, 'endpoint', $target['endpoint']) : null,
            array_key_exists('priority', $target) ? self::name($route, 'priority', $target['priority']) : null,
        ];
    }

    /** A name as the limiter's options take it: 1 to 64 characters of A-Z a-z 0-9 _ . : / -. */
    private static function name(string $route, string $what, mixed $name): string
    {
        if (!is_string($name) || $name === '' || strlen($name) > self::MAX_NAME_BYTES || preg_match('#[^A-Za-z0-9_.:/-]#', $name) === 1) {
            throw new \InvalidArgumentException(sprintf(
                "EndpointRoutes: route %s's %s must be a name of 1 to %d characters from A-Z a-z 0-9 _ . : / - (as the limiter's options), got %s",
                self::show($route),
                $what,
                self::MAX_NAME_BYTES,
                is_string($name) ? self::show($name) : get_debug_type($name)
            ));
        }
        return $name;
    }

    /** In quotes, printable ASCII as is, anything else as \xNN, cut at 100 bytes. */
    private static function show(string $s): string
    {
        $cut = strlen($s) > 100;
        $s = preg_replace_callback('/[^\x20-\x7e]|["\\\\]/', static fn (array $m) => $m[0] === '"' || $m[0] === '\\' ? '\\' . $m[0] : sprintf('\\x%02x', ord($m[0])), substr($s, 0, 100));
        return '"' . $s . '"' . ($cut ? '...' : '');
    }
}
