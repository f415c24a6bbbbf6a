<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * The `endpoints`, `priorities` and `default_priority` options without Valkey
 * (docs/endpoints.md): good values make a limiter; bad ones throw a ConfigurationException
 * naming the option first and showing the value.
 */
final class EndpointOptionsTest extends LimiterTestCase
{
    public static function badOptions(): array
    {
        $g = ['capacity' => 100, 'refill_per_second' => 100];
        $e = ['capacity' => 25, 'refill_per_second' => 25];
        $p = ['critical' => 0.0, 'normal' => 0.2, 'background' => 0.5];
        return [
            'endpoints not an array' => [['global' => $g, 'endpoints' => 'items'], 'endpoints', '"items"'],
            'endpoints a list' => [['global' => $g, 'endpoints' => [$e]], 'endpoints', 'list'],
            'endpoints empty' => [['global' => $g, 'endpoints' => []], 'endpoints', 'at least one'],
            'endpoint name with a space' => [['global' => $g, 'endpoints' => ['a b' => $e]], 'endpoints["a b"]', '"a b"'],
            'endpoint name with a brace' => [['global' => $g, 'endpoints' => ['{x}' => $e]], 'endpoints["{x}"]', '"{x}"'],
            'endpoint name too long' => [['global' => $g, 'endpoints' => [str_repeat('x', 65) => $e]], 'endpoints["', '1 to 64'],
            'endpoint capacity above global' => [['global' => $g, 'endpoints' => ['items' => ['capacity' => 101, 'refill_per_second' => 25]]], 'endpoints.items.capacity', 'got 101'],
            'endpoint rate above global' => [['global' => $g, 'endpoints' => ['items' => ['capacity' => 25, 'refill_per_second' => 200]]], 'endpoints.items.refill_per_second', '200'],
            'endpoint capacity zero' => [['global' => $g, 'endpoints' => ['items' => ['capacity' => 0, 'refill_per_second' => 25]]], 'endpoints.items.capacity', 'got 0'],
            'endpoint rate missing' => [['global' => $g, 'endpoints' => ['items' => ['capacity' => 5]]], 'endpoints.items.refill_per_second', 'required'],
            'endpoint unknown key' => [['global' => $g, 'endpoints' => ['items' => $e + ['burst' => 1]]], 'endpoints.items.burst', 'not a known option'],
            'priorities not an array' => [['global' => $g, 'priorities' => 0.2], 'priorities', '0.2'],
            'priorities empty' => [['global' => $g, 'priorities' => []], 'priorities', 'at least one'],
            'share of one' => [['global' => $g, 'priorities' => ['normal' => 1.0]], 'priorities.normal', 'got 1.0'],
            'share negative' => [['global' => $g, 'priorities' => ['normal' => -0.1]], 'priorities.normal', '-0.1'],
            'share a string' => [['global' => $g, 'priorities' => ['normal' => '0.2']], 'priorities.normal', '"0.2"'],
            'class name with a space' => [['global' => $g, 'priorities' => ['very low' => 0.5]], 'priorities["very low"]', '"very low"'],
            'default not a class' => [['global' => $g, 'priorities' => $p, 'default_priority' => 'urgent'], 'default_priority', '"urgent"'],
            'default not a string' => [['global' => $g, 'priorities' => $p, 'default_priority' => 1], 'default_priority', 'int 1'],
            'default without priorities' => [['global' => $g, 'default_priority' => 'normal'], 'default_priority', 'priorities'],
        ];
    }

    /** @dataProvider badOptions */
    #[DataProvider('badOptions')]
    public function testBadValuesNameTheirOption(array $options, string $option, string $shown): void
    {
        try {
            new RateLimiter($options);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringStartsWith("checkout_guard: $option", $e->getMessage(), 'the message names the option first');
            $this->assertStringContainsString($shown, $e->getMessage());
        }
    }

    public function testTheIssuesExampleMakesALimiter(): void
    {
        $l = $this->limiter([
            'global' => ['capacity' => 100, 'refill_per_second' => 100],
            'endpoints' => [
                'charges.create' => ['capacity' => 25, 'refill_per_second' => 25],
                'v1/charges:confirm' => ['capacity' => 25, 'refill_per_second' => 25.0],
                'items' => ['capacity' => 100, 'refill_per_second' => 100],
            ],
            'priorities' => ['critical' => 0.0, 'normal' => 0.2, 'background' => 0.5, 'zero' => 0],
            'default_priority' => 'normal',
            'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort(),
        ]);
        $this->assertInstanceOf(RateLimiter::class, $l);
    }
}
