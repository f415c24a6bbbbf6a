<?php
declare(strict_types=1);

namespace CheckoutGuard\Http;

use Psr\Http\Message\RequestInterface;

/**
 * Names the API a request goes to, by host and path template, so that events and call
 * budgets speak of "zoneA" or "payment", not of URLs.
 *
 *     new ApiNamer([
 *         ['api' => 'zoneA',   'host' => 'items.example', 'path' => '/items/{id}'],
 *         ['api' => 'payment', 'host' => 'pay.example',   'path' => '/v1/charges', 'method' => 'POST'],
 *     ]);
 *
 * The first route that matches wins; `host`, `path` and `method` are each optional. A
 * request no route matches is named after its host. In a path template `{name}` matches
 * one segment (no `/`) and `*` any run of characters, `/` included (`/v1/items*` matches
 * `/v1/items` and `/v1/items/42/reviews`); the rest matches itself, case included. The
 * query is never part of the path.
 */
final class ApiNamer
{
    /** @var list<array{api: string, host: ?string, method: ?string, template: ?string, regex: ?string}> */
    private array $routes = [];

    /** @param list<array{api: string, host?: string, path?: string, method?: string}> $routes */
    public function __construct(array $routes)
    {
        foreach ($routes as $i => $route) {
            if (!is_array($route) || !isset($route['api']) || !is_string($route['api']) || $route['api'] === '') {
                throw new \InvalidArgumentException("ApiNamer route $i needs a non-empty string 'api'");
            }
            $template = $route['path'] ?? null;
            $this->routes[] = [
                'api' => $route['api'],
                'host' => isset($route['host']) ? strtolower($route['host']) : null,
                'method' => isset($route['method']) ? strtoupper($route['method']) : null,
                'template' => $template,
                'regex' => $template === null ? null : self::compile($template),
            ];
        }
    }

    /** '/items/{id}' matches '/items/42' but not '/items/42/reviews'; '/items/*' matches both. */
    private static function compile(string $template): string
    {
        $parts = preg_split('/(\{[^}\/]+\}|\*)/', $template, -1, PREG_SPLIT_DELIM_CAPTURE);
        $regex = '';
        foreach ($parts as $part) {
            $regex .= match (true) {
                $part === '*' => '.*',
                preg_match('/^\{[^}\/]+\}$/', $part) === 1 => '[^/]+',
                default => preg_quote($part, '#'),
            };
        }
        return '#^' . $regex . '$#s';
    }

    /** @return array{0: string, 1: ?string} the api name and the matched path template */
    public function name(RequestInterface $request): array
    {
        $uri = $request->getUri();
        return $this->match($request->getMethod(), $uri->getHost(), $uri->getPath());
    }

    /**
     * name() for a client without PSR-7 requests (Symfony's HttpClient: GuardedHttpClient).
     *
     * @return array{0: string, 1: ?string} the api name and the matched path template
     */
    public function nameOf(string $method, string $url): array
    {
        return $this->match($method, (string) parse_url($url, PHP_URL_HOST), (string) parse_url($url, PHP_URL_PATH));
    }

    /** @return array{0: string, 1: ?string} */
    private function match(string $method, string $host, string $path): array
    {
        $host = strtolower($host);
        $path = $path === '' ? '/' : $path;
        $method = strtoupper($method);
        foreach ($this->routes as $r) {
            if (($r['host'] === null || $r['host'] === $host)
                && ($r['method'] === null || $r['method'] === $method)
                && ($r['regex'] === null || preg_match($r['regex'], $path) === 1)) {
                return [$r['api'], $r['template']];
            }
        }
        return [$host === '' ? 'unknown' : $host, null];
    }

    /** @internal the attributes every measured request carries */
    public static function attributes(RequestInterface $request, ?string $template): array
    {
        $attributes = [
            'http.request.method' => $request->getMethod(),
            'url.full' => (string) $request->getUri(),
        ];
        if ($template !== null) {
            $attributes['url.template'] = $template;
        }
        return $attributes;
    }
}
