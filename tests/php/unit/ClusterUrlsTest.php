<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/** Cluster URLs, checked when a limiter is made: no cluster (ClusterTest starts one). */
final class ClusterUrlsTest extends LimiterTestCase
{
    public function testBadClusterUrlsAreRefusedByName(): void
    {
        foreach (['valkey+cluster://', 'valkey+cluster://127.0.0.1:7000/2', 'valkey+cluster://u:hunter2@127.0.0.1'] as $url) {
            try {
                new RateLimiter(['url' => $url, 'global' => self::bucket(1)]);
                $this->fail("$url accepted");
            } catch (\CheckoutGuard\ConfigurationException $e) {
                $this->assertStringContainsString('url', $e->getMessage());
                $this->assertStringNotContainsString('hunter2', $e->getMessage());
            }
        }
    }
}
