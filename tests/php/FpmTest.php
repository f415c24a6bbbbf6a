<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Through nginx and php-fpm (2 static workers) with checkout_guard loaded from an ini
 * file, as in production: decisions are right, and each worker keeps one persistent
 * connection across requests (opened after fork, never shared).
 */
final class FpmTest extends LimiterTestCase
{
    protected function setUp(): void
    {
        if (getenv('CHECKOUT_GUARD_TEST_HTTP') === false) {
            $this->fail('CHECKOUT_GUARD_TEST_HTTP is not set: run via scripts/test.sh, which starts php-fpm and nginx');
        }
    }

    private static function get(string $query): array
    {
        $url = getenv('CHECKOUT_GUARD_TEST_HTTP') . '/acquire.php?' . $query;
        $ctx = stream_context_create(['http' => ['ignore_errors' => true, 'timeout' => 5]]);
        $body = file_get_contents($url, false, $ctx);
        $status = (int) explode(' ', $http_response_header[0])[1];
        $retryAfter = null;
        foreach ($http_response_header as $h) {
            if (stripos($h, 'Retry-After:') === 0) {
                $retryAfter = (int) trim(substr($h, 12));
            }
        }
        return [$status, json_decode((string) $body, true, 512, JSON_THROW_ON_ERROR), $retryAfter];
    }

    public function testTwoHundredRequestsThroughTwoWorkers(): void
    {
        $limiter = self::uniqueName('fpm');
        $statuses = [];
        $reasons = [];
        $pids = [];
        for ($i = 0; $i < 200; $i++) {
            $shop = $i % 4 === 0 ? 'hot' : "shop-$i";
            [$status, $body, $retryAfter] = self::get("limiter=$limiter&shop=$shop");
            $statuses[$status] = ($statuses[$status] ?? 0) + 1;
            $reasons[$body['reason']] = ($reasons[$body['reason']] ?? 0) + 1;
            $pids[$body['pid']] = true;
            if ($status === 503) {
                $this->assertGreaterThanOrEqual(1, $retryAfter);
            }
        }
        // The hot shop (every 4th request) is allowed 10 times (its cap) by request 36;
        // its requests 40, 44, 48 and 52 are denied for hot_shop while the others take
        // the rest of the global 50 (reached at request 53); from then on every request,
        // hot or not, is denied for global, which is checked first.
        ksort($reasons);
        $this->assertSame(['allowed' => 50, 'global' => 146, 'hot_shop' => 4], $reasons);
        $this->assertSame([200 => 50, 503 => 150], $statuses);
        $this->assertLessThanOrEqual(2, count($pids));

        // One connection per worker, however many requests each served. The FPM pool's
        // URL selects db 1, which tells its connections apart from this process's.
        $list = self::redis()->rawCommand('CLIENT', 'LIST');
        $fpm = array_filter(
            explode("\n", $list),
            fn ($l) => str_contains($l, 'lib-name=checkout_guard') && str_contains($l, ' db=1 ')
        );
        $this->assertSame(count($pids), count($fpm), implode("\n", $fpm));
    }
}
