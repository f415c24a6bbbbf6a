<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Through nginx and php-fpm (4 static workers) with checkout_guard loaded from an ini
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
        [$body, $headers] = HttpGet::fetch($url);
        $status = (int) explode(' ', $headers[0])[1];
        $retryAfter = null;
        foreach ($headers as $h) {
            if (stripos($h, 'Retry-After:') === 0) {
                $retryAfter = (int) trim(substr($h, 12));
            }
        }
        return [$status, json_decode((string) $body, true, 512, JSON_THROW_ON_ERROR), $retryAfter];
    }

    public function testTwoHundredRequestsThroughTheWorkers(): void
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
        $this->assertLessThanOrEqual(4, count($pids), 'the pool has 4 workers');

        // One connection per worker, however many requests each served. The FPM pool's
        // URL selects db 1, which tells its connections apart from this process's.
        $list = self::redis()->rawCommand('CLIENT', 'LIST');
        $fpm = array_filter(
            explode("\n", $list),
            fn ($l) => str_contains($l, 'lib-name=checkout_guard') && str_contains($l, ' db=1 ')
        );
        $this->assertSame(count($pids), count($fpm), implode("\n", $fpm));
    }

    public function testWorkersAppendingTheSameJsonlFileNeverTearOrLoseALine(): void
    {
        $file = (string) getenv('CHECKOUT_GUARD_TEST_FPM_EVENTS');
        $tag = bin2hex(random_bytes(4));
        $requests = 40;
        $calls = 50;
        // 40 requests, 8 at a time, each measuring 50 calls (~400-byte lines): the four
        // workers append their batches to one file at the same moments.
        $multi = curl_multi_init();
        $handles = [];
        $pending = range(1, $requests);
        $active = 0;
        do {
            while ($pending !== [] && count($handles) < 8) {
                $i = array_shift($pending);
                $h = curl_init(getenv('CHECKOUT_GUARD_TEST_HTTP') . "/measure.php?n=$calls&tag=$tag-$i");
                curl_setopt_array($h, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 10]);
                curl_multi_add_handle($multi, $h);
                $handles[(int) $h] = $h;
            }
            curl_multi_exec($multi, $active);
            curl_multi_select($multi, 0.05);
            while ($info = curl_multi_info_read($multi)) {
                $h = $info['handle'];
                $this->assertSame(200, curl_getinfo($h, CURLINFO_HTTP_CODE), (string) curl_multi_getcontent($h));
                curl_multi_remove_handle($multi, $h);
                unset($handles[(int) $h]);
            }
        } while ($handles !== [] || $pending !== []);
        curl_multi_close($multi);

        // Every request's events were written before its response completed.
        $mine = [];
        $pids = [];
        foreach (file($file, FILE_IGNORE_NEW_LINES) as $n => $line) {
            $event = json_decode($line, true);
            $this->assertIsArray($event, "line $n is not JSON: " . substr($line, 0, 120));
            if (str_starts_with((string) ($event['tag'] ?? ''), "$tag-")) {
                $mine[$event['tag'] . '/' . $event['i']] = true;
                $pids[$event['pid']] = true;
            }
        }
        $this->assertCount($requests * $calls, $mine, 'no event lost or duplicated');
        $this->assertGreaterThan(1, count($pids), 'several workers wrote');
    }

    public function testALiveLimitChangeReachesEveryWorkerAtItsNextRequest(): void
    {
        $limiter = self::uniqueName('fpm-live');
        $before = [];
        for ($i = 0; $i < 16; $i++) {
            [, $body] = self::get("limiter=$limiter&shop=shop-$i");
            $before[$body['pid']][] = $body['remaining'];
        }
        $this->assertGreaterThanOrEqual(2, count($before), 'several workers decided');
        $this->assertSame(34, min(array_merge(...array_values($before))), '16 of the constructor\'s 50');
        // The workers' Valkey is database 1 of the test Valkey (scripts/test.sh).
        // A lower capacity: the bucket's 34 tokens are clamped to 20 (the level carries
        // over a change, so a higher one would not show in remaining()).
        [$code, , $err] = Cli::limiter(self::url() . '/1', $limiter, 'set', 'global=20/0.001', '--by', 'fpm-test');
        $this->assertSame(0, $code, $err);
        $after = [];
        for ($i = 0; $i < 16; $i++) {
            [$status, $body] = self::get("limiter=$limiter&shop=shop-$i");
            $this->assertSame(200, $status);
            $after[$body['pid']][] = $body['remaining'];
        }
        // No request after the change was decided with the old 50 (that would leave 20 or
        // more): every worker's first request after it already used 20 (19, 18, ... 4).
        $all = array_merge(...array_values($after));
        $this->assertSame([19, 4], [max($all), min($all)]);
        $this->assertGreaterThanOrEqual(2, count(array_intersect_key($after, $before)), 'the same workers, changed without a restart');
    }
}
