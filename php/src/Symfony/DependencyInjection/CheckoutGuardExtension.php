<?php
declare(strict_types=1);

namespace CheckoutGuard\Symfony\DependencyInjection;

use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\Symfony\GuardedHttpClient;
use Symfony\Component\Config\Definition\Exception\InvalidConfigurationException;
use Symfony\Component\DependencyInjection\ContainerBuilder;
use Symfony\Component\DependencyInjection\Definition;
use Symfony\Component\DependencyInjection\Extension\Extension;
use Symfony\Component\DependencyInjection\ParameterBag\EnvPlaceholderParameterBag;
use Symfony\Component\DependencyInjection\Reference;

/**
 * Registers, per limiter NAME under `checkout_guard.limiters`:
 *  - the public service `checkout_guard.limiter.NAME`, a CheckoutGuard\RateLimiter built
 *    from its options the first time it is used (the `name` option defaults to NAME);
 *  - autowiring aliases `CheckoutGuard\Limiter $nameLimiter` and
 *    `CheckoutGuard\RateLimiter $nameLimiter` (NAME camel-cased, as Symfony does; two
 *    keys camel-cased alike, `hot-payments` and `hot_payments`, fail the build);
 *  - for `default_limiter` (default: the first limiter) plain `CheckoutGuard\Limiter` and
 *    `CheckoutGuard\RateLimiter` aliases.
 * Each limiter's options are checked here by the extension itself (a RateLimiter is built
 * and dropped: no connection is made), so a bad option fails the container's build with
 * the path of the limiter and the extension's message naming the option.
 */
final class CheckoutGuardExtension extends Extension
{
    public const LIMITER_PREFIX = 'checkout_guard.limiter.';

    public function getAlias(): string
    {
        return 'checkout_guard';
    }

    public function load(array $configs, ContainerBuilder $container): void
    {
        $config = $this->processConfiguration(new Configuration(), $configs);
        $names = array_map('strval', array_keys($config['limiters']));

        $arguments = [];   // autowiring alias => the limiter key it is for
        foreach ($config['limiters'] as $name => $options) {
            $name = (string) $name;
            if (preg_match('/^[A-Za-z0-9_.:-]{1,64}$/', $name) !== 1) {
                throw new InvalidConfigurationException(sprintf(
                    'Invalid configuration for path "checkout_guard.limiters": the limiter name "%s" must be 1-64 characters of A-Z a-z 0-9 _ . : -',
                    $name,
                ));
            }
            foreach (self::argumentAliases($name) as $alias) {
                if (isset($arguments[$alias])) {
                    throw new InvalidConfigurationException(sprintf(
                        'Invalid configuration for path "checkout_guard.limiters": the limiters "%s" and "%s" would both be autowired as %s (Symfony camel-cases the key): rename one',
                        $arguments[$alias],
                        $name,
                        $alias,
                    ));
                }
                $arguments[$alias] = $name;
            }
            $options += ['name' => $name];
            self::check($container, $name, $options);

            $id = self::LIMITER_PREFIX . $name;
            $container->setDefinition($id, (new Definition(RateLimiter::class, [$options]))->setPublic(true));
            $container->registerAliasForArgument($id, RateLimiter::class, $name . '.limiter');
            $container->registerAliasForArgument($id, Limiter::class, $name . '.limiter');
        }

        $default = $config['default_limiter'] ?? ($names[0] ?? null);
        if ($default !== null) {
            if (!in_array((string) $default, $names, true)) {
                throw new InvalidConfigurationException(sprintf(
                    'Invalid configuration for path "checkout_guard.default_limiter": no limiter "%s" (limiters: %s)',
                    $default,
                    $names === [] ? 'none' : implode(', ', $names),
                ));
            }
            $container->setAlias(RateLimiter::class, self::LIMITER_PREFIX . $default);
            $container->setAlias(Limiter::class, self::LIMITER_PREFIX . $default);
        }

        if ($config['http_client']['enabled']) {
            $this->loadHttpClient($config['http_client'], $config['limiters'], $container);
        }
    }

    /** @param array<string, array<string, mixed>> $limiters the limiters' options by key */
    private function loadHttpClient(array $client, array $limiters, ContainerBuilder $container): void
    {
        $names = array_map('strval', array_keys($limiters));
        if ($client['api'] === [] && $client['limiter'] === null) {
            throw new InvalidConfigurationException(
                'Invalid configuration for path "checkout_guard.http_client": set "api" (measure each request), "limiter" (limit each request) or both'
            );
        }
        if ($client['limiter'] !== null && !in_array((string) $client['limiter'], $names, true)) {
            throw new InvalidConfigurationException(sprintf(
                'Invalid configuration for path "checkout_guard.http_client.limiter": no limiter "%s" (limiters: %s)',
                $client['limiter'],
                $names === [] ? 'none' : implode(', ', $names),
            ));
        }
        if ($client['limiter'] !== null) {
            $options = $limiters[$client['limiter']];
            // As acquire() checks `tokens` (from 1 to the smallest capacity), now: above it,
            // every request would throw. Capacities from the environment: checked at run time.
            $capacities = array_filter(
                array_map(static fn (string $lane) => $options[$lane]['capacity'] ?? null, ['global', 'hot_lane', 'hot_shop']),
                'is_int',
            );
            if ($capacities !== [] && !self::holdsEnv($container, $options) && $client['tokens'] > min($capacities)) {
                throw new InvalidConfigurationException(sprintf(
                    'Invalid configuration for path "checkout_guard.http_client.tokens": %d is above the smallest capacity of the limiter "%s" (%d): acquire() takes from 1 to it, every request would throw',
                    $client['tokens'],
                    $client['limiter'],
                    min($capacities),
                ));
            }
        }
        // Outermost (Symfony's own decorators: retry 10, profiler 5, a test's
        // mock_response_factory -10): the application calls this one first, and a
        // refused request reaches none of them.
        $id = 'checkout_guard.http_client';
        $container->setDefinition($id, (new Definition(GuardedHttpClient::class, [
            new Reference($id . '.inner'),
            $client['limiter'] === null ? null : new Reference(self::LIMITER_PREFIX . $client['limiter']),
            $client['api'] === [] ? null : new Definition(ApiNamer::class, [$client['api']]),
            $client['shop_header'],
            $client['tokens'],
            $client['max_wait_seconds'],
        ]))->setDecoratedService($client['service'], null, -100));
    }

    /**
     * The autowiring aliases registerAliasForArgument() makes for the limiter NAME
     * (`CheckoutGuard\Limiter $nameLimiter`, ...), as this Symfony names them: made in a
     * container of their own, so that two keys it names alike are found.
     *
     * @return list<string>
     */
    private static function argumentAliases(string $name): array
    {
        $scratch = new ContainerBuilder();
        $before = array_keys($scratch->getAliases());
        $scratch->registerAliasForArgument('limiter', Limiter::class, $name . '.limiter');
        $scratch->registerAliasForArgument('limiter', RateLimiter::class, $name . '.limiter');
        return array_values(array_diff(array_keys($scratch->getAliases()), $before));
    }

    /**
     * Has the extension check a limiter's options now. Options holding an environment
     * variable (`%env(...)%`, resolved at run time) are checked when the service is built.
     */
    private static function check(ContainerBuilder $container, string $name, array $options): void
    {
        if (self::holdsEnv($container, $options)) {
            return;
        }
        if (!class_exists(RateLimiter::class)) {
            throw new \LogicException('checkout-guard\'s Symfony bundle needs the checkout_guard PHP extension loaded (extension=checkout_guard.so)');
        }
        try {
            new RateLimiter($options);
        } catch (\Throwable $e) {
            throw new InvalidConfigurationException(sprintf(
                'Invalid configuration for path "checkout_guard.limiters.%s": %s',
                $name,
                $e->getMessage(),
            ), 0, $e);
        }
    }

    /** Whether a value holds an environment variable's placeholder (`%env(...)%`). */
    private static function holdsEnv(ContainerBuilder $container, mixed $value): bool
    {
        $bag = $container->getParameterBag();
        if (!$bag instanceof EnvPlaceholderParameterBag) {
            return false;
        }
        $placeholders = array_merge([], ...array_values(array_map('array_values', $bag->getEnvPlaceholders())));
        $found = false;
        array_walk_recursive($value, static function (mixed $v) use ($placeholders, &$found): void {
            foreach (is_string($v) ? $placeholders : [] as $placeholder) {
                $found = $found || str_contains($v, (string) $placeholder);
            }
        });
        return $found;
    }
}
