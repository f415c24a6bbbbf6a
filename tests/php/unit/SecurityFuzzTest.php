<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/** Hostile option arrays from PHP: no Valkey (SecurityTest has the ACL user and the rest). */
final class SecurityFuzzTest extends LimiterTestCase
{
    /** The password SecurityTest gives its ACL user: no message may show it. */
    private const SECRET = 'Sup3r-s3cret_pw';

    public function testThousandsOfRandomOptionArraysOnlyEverThrowConfigurationException(): void
    {
        mt_srand(20261130);
        $values = [null, true, false, 0, 1, -1, 10, 1_000_000_001, PHP_INT_MAX, PHP_INT_MIN, 0.0, -0.5, 1.5, NAN, INF,
            '', '10', 'allow', 'throw', "a\0b", "\xff\xfe", str_repeat('x', 300), 'redis://u:' . self::SECRET . '@h:1',
            'unix:///tmp/none.sock', 'rediss://h', [], [1, 2], ['capacity' => 5], ['capacity' => 5, 'refill_per_second' => 2],
            ['capacity' => '5', 'refill_per_second' => 2], ['x' => ['y' => ['z' => 1]]], new \stdClass(), fn () => 1,
            ['share' => 0.5, 'window_seconds' => 2], ['share' => NAN], ['ttl_seconds' => -1, 'min_tokens' => 3]];
        $keys = ['name', 'global', 'hot_lane', 'hot_shop', 'hot_shops', 'url', 'timeout_ms', 'on_unavailable', 'auto_hot', 'other', 0];
        $accepted = $rejected = 0;
        for ($i = 0; $i < 3000; $i++) {
            $options = [];
            for ($k = mt_rand(0, 6); $k > 0; $k--) {
                $options[$keys[mt_rand(0, count($keys) - 1)]] = $values[mt_rand(0, count($values) - 1)];
            }
            if (mt_rand(0, 1) === 1) {
                $options['global'] = ['capacity' => mt_rand(-2, 20), 'refill_per_second' => mt_rand(-2, 20) / 2];
            }
            try {
                new RateLimiter($options);
                $accepted++;
            } catch (ConfigurationException $e) {
                $rejected++;
                $this->assertNotSame('', $e->getMessage());
                $this->assertStringStartsWith('checkout_guard: ', $e->getMessage());
                $this->assertStringNotContainsString(self::SECRET, $e->getMessage());
            }
        }
        $this->assertGreaterThan(100, $accepted);
        $this->assertGreaterThan(100, $rejected);
    }
}
