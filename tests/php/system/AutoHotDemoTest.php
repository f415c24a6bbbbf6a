<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * scripts/auto-hot-demo.sh short: on the real stack (nginx, php-fpm, the example checkout,
 * the mock provider, Locust), a flood at a shop nobody declared hot is found and capped by
 * auto_hot, and ordinary shops keep buying.
 */
final class AutoHotDemoTest extends TestCase
{
    public function testAFloodAtAnUndeclaredShopIsCappedByItself(): void
    {
        [$rc, $out] = ProjectScript::run('auto-hot-demo.sh', 'short');
        $this->assertSame(0, $rc, $out);
        $this->assertStringContainsString('All checks hold.', $out);
        $res = ProjectScript::results('auto-hot/short/results.json');
        $this->assertCount(1, $res['hot_events']);
        $e = $res['hot_events'][0];
        $this->assertSame(['flash-1', 'auto_hot', 'payments'], [$e['shop.id'], $e['reason'], $e['limiter']]);
        $this->assertGreaterThan(0.3, $e['share']);
        $this->assertLessThanOrEqual(5.0, $res['time_to_hot_s']);
        $this->assertSame(0, $res['payment_429']);
        foreach ($res['checks'] as $c) {
            $this->assertTrue($c['holds'], $c['check'] . ': ' . $c['measured']);
        }
    }
}
