<?php
declare(strict_types=1);

namespace CheckoutGuard\Laravel;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;

/**
 * The limiters of `config/checkout-guard.php` (the `checkout-guard` config key), each built
 * once, on first use. The service provider binds every one as `checkout-guard.limiter.<name>`
 * through this registry; a bad entry is a ConfigurationException naming its config key.
 */
final class Limiters
{
    public const CONFIG_KEY = 'checkout-guard';

    /** @var array<string, Limiter> */
    private array $built = [];

    /** @param array<mixed> $config the `checkout-guard` config key */
    public function __construct(private readonly array $config)
    {
    }

    /**
     * The configured limiter names.
     *
     * @return list<string>
     */
    public function names(): array
    {
        return array_map('strval', array_keys($this->limiters()));
    }

    /** The `default` limiter's name (validated: a configured limiter). */
    public function defaultName(): string
    {
        $default = $this->config['default'] ?? null;
        if (!is_string($default) || $default === '') {
            throw new ConfigurationException(sprintf(
                '%s.default must name one of the limiters in %s.limiters (%s), got %s',
                self::CONFIG_KEY,
                self::CONFIG_KEY,
                self::list($this->names()),
                self::show($default),
            ));
        }
        if (!array_key_exists($default, $this->limiters())) {
            throw new ConfigurationException(sprintf(
                '%s.default names the limiter "%s", which %s.limiters does not configure (configured: %s)',
                self::CONFIG_KEY,
                $default,
                self::CONFIG_KEY,
                self::list($this->names()),
            ));
        }
        return $default;
    }

    /** Whether `limiters.<name>` is configured. */
    public function has(string $name): bool
    {
        return array_key_exists($name, $this->limiters());
    }

    /** The limiter `limiters.<name>`, built on first use. */
    public function get(string $name): Limiter
    {
        return $this->built[$name] ??= $this->build($name);
    }

    /** The shop-id source for a route that names none (`shop`: default "shop"). */
    public function shopSource(): string
    {
        $shop = $this->config['shop'] ?? 'shop';
        if (!is_string($shop) || trim($shop) === '') {
            throw new ConfigurationException(sprintf(
                '%s.shop must be a route parameter or request attribute name, or header:NAME, got %s',
                self::CONFIG_KEY,
                self::show($shop),
            ));
        }
        return $shop;
    }

    private function build(string $name): Limiter
    {
        $limiters = $this->limiters();
        if (!array_key_exists($name, $limiters)) {
            throw new ConfigurationException(sprintf(
                'no limiter "%s" in %s.limiters (configured: %s)',
                $name,
                self::CONFIG_KEY,
                self::list($this->names()),
            ));
        }
        $key = self::CONFIG_KEY . '.limiters.' . $name;
        $options = $limiters[$name];
        if (!is_array($options)) {
            throw new ConfigurationException(sprintf(
                '%s must be an array of RateLimiter options, got %s',
                $key,
                self::show($options),
            ));
        }
        $url = $this->config['url'] ?? null;
        if ($url !== null && !array_key_exists('url', $options)) {
            if (!is_string($url)) {
                throw new ConfigurationException(sprintf('%s.url must be a string or null, got %s', self::CONFIG_KEY, self::show($url)));
            }
            if ($url !== '') {
                $options['url'] = $url;
            }
        }
        $options += ['name' => $name];
        try {
            return new RateLimiter($options);
        } catch (\InvalidArgumentException | \TypeError $e) {
            // "checkout_guard: global.capacity must be ...": the same, under its config key.
            $message = preg_replace('/^checkout_guard: /', '', $e->getMessage());
            throw new ConfigurationException($key . ': ' . $message, 0, $e);
        }
    }

    /** @return array<array-key, mixed> */
    private function limiters(): array
    {
        $limiters = $this->config['limiters'] ?? null;
        if (!is_array($limiters)) {
            throw new ConfigurationException(sprintf(
                '%s.limiters must be an array of name => RateLimiter options, got %s',
                self::CONFIG_KEY,
                self::show($limiters),
            ));
        }
        return $limiters;
    }

    /** @param list<string> $names */
    private static function list(array $names): string
    {
        return $names === [] ? 'none' : implode(', ', $names);
    }

    private static function show(mixed $value): string
    {
        return match (true) {
            $value === null => 'null',
            is_string($value) => '"' . $value . '"',
            is_scalar($value) => var_export($value, true),
            default => get_debug_type($value),
        };
    }
}
