<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The readiness endpoint under php-fpm + nginx (the stack scripts/test.sh started):
 * Readiness reads the pool's workers. HealthTest has RateLimiter::health() on its own Valkey.
 */
final class HealthFpmTest extends TestCase
{
    public function testReadinessUnderPhpFpmReadsThePoolsWorkers(): void
    {
        $base = getenv('CHECKOUT_GUARD_TEST_HTTP');
        if ($base === false) {
            $this->fail('CHECKOUT_GUARD_TEST_HTTP is not set: run via scripts/test.sh, which starts php-fpm and nginx');
        }
        $get = static function (string $query) use ($base): array {
            $h = curl_init("$base/ready.php?$query");
            curl_setopt_array($h, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 5]);
            $body = (string) curl_exec($h);
            return [curl_getinfo($h, CURLINFO_RESPONSE_CODE), json_decode($body, true, 512, JSON_THROW_ON_ERROR)];
        };
        [$code, $body] = $get('idle=1');
        $this->assertSame(200, $code, json_encode($body));
        $this->assertTrue($body['checks']['fpm']['ok']);
        $this->assertGreaterThanOrEqual(1, $body['checks']['fpm']['active'], 'the worker answering is active');
        $this->assertTrue($body['checks']['valkey']['ok']);
        // Asking for more free workers than the pool has: not ready, and it says why.
        [$code, $body] = $get('idle=1000');
        $this->assertSame(503, $code);
        $this->assertSame(['fpm'], $body['failed']);
        $this->assertFalse($body['checks']['fpm']['ok']);
    }
}
