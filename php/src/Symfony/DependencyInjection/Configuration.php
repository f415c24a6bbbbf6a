<?php
declare(strict_types=1);

namespace CheckoutGuard\Symfony\DependencyInjection;

use Symfony\Component\Config\Definition\Builder\TreeBuilder;
use Symfony\Component\Config\Definition\ConfigurationInterface;

/**
 * The `checkout_guard:` tree. A limiter's options are RateLimiter's (README "Settings"),
 * passed through as written; CheckoutGuardExtension has the extension check them when the
 * container is built, so a bad one fails `cache:clear`, not a checkout.
 */
final class Configuration implements ConfigurationInterface
{
    public function getConfigTreeBuilder(): TreeBuilder
    {
        $tree = new TreeBuilder('checkout_guard');
        $tree->getRootNode()
            ->children()
                ->arrayNode('limiters')
                    ->info('RateLimiter options per limiter (README "Settings"); each is the service checkout_guard.limiter.<name>')
                    ->useAttributeAsKey('id')
                    ->normalizeKeys(false)
                    ->arrayPrototype()
                        ->useAttributeAsKey('option')
                        ->normalizeKeys(false)
                        ->variablePrototype()->end()
                    ->end()
                ->end()
                ->scalarNode('default_limiter')
                    ->info('the limiter autowired for a plain CheckoutGuard\Limiter / CheckoutGuard\RateLimiter argument (default: the first one)')
                    ->defaultNull()
                ->end()
                ->arrayNode('http_client')
                    ->info('decorates an HTTP client so that each request is limited (limiter) and measured (api)')
                    ->canBeEnabled()
                    ->children()
                        ->scalarNode('service')->defaultValue('http_client')->cannotBeEmpty()
                            ->info('the Symfony HttpClientInterface service decorated')->end()
                        ->arrayNode('api')
                            ->info('the api of its ExternalApiCall telemetry events: a name, or routes as ApiNamer takes them (the first that matches names the api; a request none matches is named after its host); none: not measured')
                            ->beforeNormalization()
                                ->ifString()->then(static fn (string $api): array => [['api' => $api]])
                            ->end()
                            ->arrayPrototype()
                                ->children()
                                    ->scalarNode('api')->isRequired()->cannotBeEmpty()->end()
                                    ->scalarNode('host')->end()
                                    ->scalarNode('path')->info('a path template, e.g. /v1/charges/{id}')->end()
                                    ->scalarNode('method')->end()
                                ->end()
                            ->end()
                        ->end()
                        ->scalarNode('limiter')->defaultNull()
                            ->info('the limiter each request asks; none: not limited')->end()
                        ->scalarNode('shop_header')->defaultValue('X-Shop-Id')->cannotBeEmpty()
                            ->info('the request header naming the shop (or the request option extra.checkout_guard_shop)')->end()
                        ->integerNode('tokens')->defaultValue(1)->min(1)->end()
                        ->floatNode('max_wait_seconds')->defaultValue(0.0)->min(0.0)->max(10.0)
                            ->info('how long a request may wait for its tokens (RateLimiter::acquire())')->end()
                    ->end()
                ->end()
            ->end();
        return $tree;
    }
}
