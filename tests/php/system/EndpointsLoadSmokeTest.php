<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The provider's global and per-endpoint limits with the limiter's endpoints and priority
 * classes (issue 42; scripts/loadtest.sh endpoints smoke): the whole load stack, no Locust,
 * buckets that do not refill (the provider's nginx at 1 call a minute, burst 4 per
 * endpoint; the limiter's global 10 and 5 per endpoint at 0.001/s), so every answer is
 * known. Per form, 8 reads of the item API from flash-1 (the flood), then 4 checkouts
 * (create, confirm). One global bucket passes the flood to the provider's 429s and leaves
 * one checkout; with endpoints the provider answers no 429 but a payment is created and
 * not confirmed; with priorities every created payment is confirmed (confirm is critical,
 * create keeps 20% of every bucket, the reads 50%). Nothing is left running.
 */
final class EndpointsLoadSmokeTest extends TestCase
{
    public function testEndpointsStopTheProviders429sAndPrioritiesCompleteTheCheckouts(): void
    {
        $root = ProjectScript::root();
        $before = self::stackProcesses($root);
        [$rc, $out] = ProjectScript::run('loadtest.sh', ['endpoints', 'smoke']);
        $this->assertSame($before, self::stackProcesses($root), 'the smoke run left processes behind');
        $this->assertSame(0, $rc, $out);
        $lines = explode("\n", $out);
        $res = json_decode((string) end($lines), true, 512, JSON_THROW_ON_ERROR);
        $none = ['confirm' => 0, 'create' => 0, 'items' => 0, 'retrieve' => 0];

        // One global bucket: the limiter lets the 8 reads through; the provider's item
        // endpoint takes 5 and refuses 3 (429, the page's 502). Two tokens left: s1 paid.
        $this->assertSame('200 200 200 200 200 502 502 502', $res['global']['reads'], $out);
        $this->assertSame(array_replace($none, ['items' => 3]), $res['global']['provider_429']);
        $this->assertSame('200 503 503 503', $res['global']['checkouts']);
        $this->assertSame('paid none none none', $res['global']['stages']);

        // Global + endpoints: the item endpoint's 5 reads pass, 3 are the limiter's 503s,
        // the provider refuses nothing. Five global tokens: s1, s2 paid, s3 created and
        // refused its confirm (a payment left behind), s4 refused at create.
        $this->assertSame('200 200 200 200 200 503 503 503', $res['endpoints']['reads'], $out);
        $this->assertSame($none, $res['endpoints']['provider_429']);
        $this->assertSame('200 200 503 503', $res['endpoints']['checkouts']);
        $this->assertSame('paid paid created none', $res['endpoints']['stages']);

        // + priorities: reads are background (leave 50% of the item endpoint's 5: 2 pass),
        // create normal (leaves 20% of the global 10), confirm critical: s1..s3 paid, s4
        // refused at create, no payment left created.
        $this->assertSame('200 200 503 503 503 503 503 503', $res['priorities']['reads'], $out);
        $this->assertSame($none, $res['priorities']['provider_429']);
        $this->assertSame('200 200 200 503', $res['priorities']['checkouts']);
        $this->assertSame('paid paid paid none', $res['priorities']['stages']);
    }

    /** The load stack's live processes (not zombies): valkey, provider, php-fpm, nginx masters. */
    private static function stackProcesses(string $root): array
    {
        exec('ps -eo stat=,args=', $ps);
        $mine = array_filter($ps, fn ($l) => !str_starts_with(ltrim($l), 'Z')
            && (str_contains($l, "$root/.run/loadtest/") || str_contains($l, "$root/loadtest/provider.py")));
        sort($mine);
        return array_values($mine);
    }
}
