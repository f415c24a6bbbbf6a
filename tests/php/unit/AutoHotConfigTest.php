<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/** auto_hot options, checked when a limiter is made: no Valkey (AutoHotTest decides). */
final class AutoHotConfigTest extends LimiterTestCase
{
    public function testBadAutoHotOptionsAreRefusedByName(): void
    {
        $cases = [
            [['share' => 1.5], 'auto_hot.share'],
            [['share' => 0], 'auto_hot.share'],
            [['window_seconds' => 0.5], 'auto_hot.window_seconds'],
            [['ttl_seconds' => 0], 'auto_hot.ttl_seconds'],
            [['min_tokens' => 'many'], 'auto_hot.min_tokens'],
            [['treshold' => 0.3], 'auto_hot.treshold'],
            ['yes', 'auto_hot'],
        ];
        foreach ($cases as [$value, $option]) {
            try {
                new RateLimiter(['global' => self::bucket(10), 'auto_hot' => $value]);
                $this->fail(json_encode($value) . ' accepted');
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($option, $e->getMessage());
            }
        }
        // true and false are accepted.
        $this->assertInstanceOf(RateLimiter::class, new RateLimiter(['global' => self::bucket(10), 'auto_hot' => true]));
        $this->assertInstanceOf(RateLimiter::class, new RateLimiter(['global' => self::bucket(10), 'auto_hot' => false]));
    }
}
