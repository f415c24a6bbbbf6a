<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/**
 * Endpoints and priority classes (issue 42, docs/endpoints.md) on a real Valkey with the
 * module loaded, on both engines: a call with an endpoint draws from global and its
 * endpoint all or nothing; a class leaves its share of every bucket; names not configured
 * are refused; several processes together get exactly what the buckets hold (frozen
 * rates: the counts do not depend on the interleaving).
 */
final class EndpointsTest extends ModuleValkeyTestCase
{
    private function make(string $engine, array $more): RateLimiter
    {
        return new RateLimiter(self::options($engine, $more));
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testAnEndpointCallTakesFromGlobalAndItsEndpointAllOrNothing(string $engine): void
    {
        $options = self::options($engine, [
            'global' => self::bucket(5),
            'endpoints' => ['items' => self::bucket(3), 'charges.create' => self::bucket(5)],
        ]);
        $l = new RateLimiter($options);
        $this->assertTrue($l->acquire('a', endpoint: 'items')->isAllowed());
        $this->assertTrue($l->acquire('a', 1, 0.0, 'items')->isAllowed());
        $d = $l->acquire('b', 2, endpoint: 'items');
        $this->assertSame('endpoint', $d->reason(), 'items holds 1 token, 2 asked');
        $this->assertSame('items', $d->endpoint());
        $this->assertNull($d->priority());
        // The denial took nothing from global: 3 plain calls still pass.
        $this->assertSame(3, $l->peek('c', 1)->remaining() + 1, 'global holds 3');
        $this->assertTrue($l->acquire('c')->isAllowed());
        $this->assertTrue($l->acquire('c')->isAllowed());
        // Global holds 1, items 1: one call with items passes and empties both.
        $d = $l->acquire('a', endpoint: 'items');
        $this->assertTrue($d->isAllowed());
        $this->assertSame(0, $d->remaining(), 'the tightest bucket');
        // Global empty: an endpoint with tokens left is denied by global (checked first),
        // and keeps its tokens (the charges.create key never written).
        $d = $l->acquire('a', endpoint: 'charges.create');
        $this->assertSame('global', $d->reason());
        $this->assertGreaterThan(100, $d->retryAfter(), 'frozen: 1 token in 1000 s');
        $keys = self::$valkey->client()->keys('{cg:' . $options['name'] . '}:e:*');
        sort($keys);
        $this->assertCount(1, $keys, 'only items was ever taken from: ' . json_encode($keys));
        $this->assertStringEndsWith(':e:items', $keys[0]);
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testEachClassLeavesExactlyItsShareOfEveryBucket(string $engine): void
    {
        $more = [
            'global' => self::bucket(20),
            'endpoints' => ['confirm' => self::bucket(10)],
            'priorities' => ['critical' => 0.0, 'normal' => 0.2, 'background' => 0.5],
            'default_priority' => 'normal',
        ];
        $l = $this->make($engine, $more);
        // background leaves 50% of confirm's 10: 5 pass.
        $this->assertSame(['allowed' => 5, 'endpoint' => 3], self::tally($l, 8, 'confirm', 'background'));
        // The default class, normal, leaves 20%: 3 more (8 taken).
        $this->assertSame(['allowed' => 3, 'endpoint' => 2], self::tally($l, 5, 'confirm', null));
        $d = $l->acquire('s', endpoint: 'confirm');
        $this->assertSame('normal', $d->priority());
        // critical takes the reserve, to the last token.
        $this->assertSame(['allowed' => 2, 'endpoint' => 1], self::tally($l, 3, 'confirm', 'critical'));
        // Global: 10 taken of 20; normal leaves 4: 6 more plain calls; critical the last 4.
        $this->assertSame(['allowed' => 6, 'global' => 1], self::tally($l, 7, null, null));
        $this->assertSame(['allowed' => 4, 'global' => 1], self::tally($l, 5, null, 'critical'));
        // A peek answers as acquire() would, per class.
        $this->assertSame('global', $l->peek('s', 1, null, 'critical')->reason());
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testRetryAfterIsTheTimeToTheClasssThreshold(string $engine): void
    {
        // 10 tokens at 10/s; normal leaves 2.
        $l = $this->make($engine, [
            'global' => ['capacity' => 10, 'refill_per_second' => 10],
            'priorities' => ['critical' => 0, 'normal' => 0.2],
        ]);
        $allowed = 0;
        while ($l->acquire('s', priority: 'normal')->isAllowed()) {
            $allowed++;
        }
        $this->assertGreaterThanOrEqual(8, $allowed);
        $d = $l->acquire('s', priority: 'normal');
        $this->assertSame('global', $d->reason());
        $this->assertSame('normal', $d->priority());
        // One token above the reserve comes within 0.1 s (no more: the bucket refills
        // 10/s), and a critical call passes now: the reserve is there.
        $this->assertGreaterThan(0.0, $d->retryAfter());
        $this->assertLessThanOrEqual(0.1, $d->retryAfter());
        $this->assertTrue($l->acquire('s', priority: 'critical')->isAllowed());
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testSeveralProcessesGetExactlyWhatTheBucketsHold(string $engine): void
    {
        // Sized so that only the buckets named below bind, whatever the interleaving:
        // at most 5 + 9 + 8 = 22 of global's 50 are taken, so background (which leaves 25)
        // and normal (10) always find global above their reserve.
        $options = self::options($engine, [
            'global' => self::bucket(50),
            'endpoints' => ['items' => self::bucket(10), 'confirm' => self::bucket(30)],
            'priorities' => ['critical' => 0.0, 'normal' => 0.2, 'background' => 0.5],
            'default_priority' => 'normal',
            'hot_lane' => self::bucket(30),
            'hot_shop' => self::bucket(12),
            'hot_shops' => ['hot'],
        ]);
        // Four processes, each: items in the background, confirms of a hot shop (normal,
        // the default) and critical confirms of an ordinary shop, interleaved.
        $calls = [['cold', 'items', 'background', 6], ['hot', 'confirm', null, 6], ['cold', 'confirm', 'critical', 2]];
        $procs = [];
        $pipes = [];
        foreach (range(0, 3) as $i) {
            $cmd = [...self::phpWithExtension(), __DIR__ . '/../fixtures/endpoint_worker.php', json_encode($options), json_encode($calls)];
            $procs[$i] = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes[$i]);
        }
        $sum = [[], [], []];
        foreach ($procs as $i => $p) {
            $out = (string) stream_get_contents($pipes[$i][1]);
            $err = (string) stream_get_contents($pipes[$i][2]);
            $this->assertSame(0, proc_close($p), "worker $i: $err");
            foreach (json_decode(trim($out), true, 512, JSON_THROW_ON_ERROR) as $c => $by) {
                foreach ($by as $reason => $n) {
                    $sum[$c][$reason] = ($sum[$c][$reason] ?? 0) + $n;
                }
            }
        }
        array_walk($sum, static fn (array &$by) => ksort($by));
        $seen = json_encode($sum);
        // background leaves half of items' 10; normal leaves ceil(20% of 12) of the hot
        // shop's bucket, so 9 pass; critical calls all pass.
        $this->assertSame(['allowed' => 5, 'endpoint' => 19], $sum[0], "background items: $seen");
        $this->assertSame(['allowed' => 9, 'hot_shop' => 15], $sum[1], "normal hot confirms: $seen");
        $this->assertSame(['allowed' => 8], $sum[2], "critical confirms: $seen");
        // Every token taken came from global too: 22 of 50.
        $l = new RateLimiter($options);
        $this->assertSame(50 - 22 - 1, $l->peek('other', 1, null, 'critical')->remaining(), $seen);
        $this->assertSame(30 - 17 - 1, $l->peek('other', 1, 'confirm', 'critical')->remaining(), $seen);
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testResetFillsTheEndpointsBucketsToo(string $engine): void
    {
        $l = $this->make($engine, ['global' => self::bucket(10), 'endpoints' => ['items' => self::bucket(2)]]);
        $this->assertSame(['allowed' => 2, 'endpoint' => 1], self::tally($l, 3, 'items', null));
        $l->reset();
        $this->assertSame(['allowed' => 2, 'endpoint' => 1], self::tally($l, 3, 'items', null));
    }

    /**
     * `limiter set endpoint.NAME=C/R` carries the endpoint's bucket over at once, at its
     * new limits (its level in tokens): its key holds the new interval and tolerance
     * before any decision reads it, so it never expires on the old limits' schedule.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testALiveEndpointChangeCarriesItsBucketOverAtOnce(string $engine): void
    {
        $options = self::options($engine, ['global' => self::bucket(10), 'endpoints' => ['items' => self::bucket(5)]]);
        $l = new RateLimiter($options);
        $this->assertSame(['allowed' => 3], self::tally($l, 3, 'items', null));
        [$code, , $err] = Cli::limiter(self::$valkey->url(), $options['name'], 'set', 'endpoint.items=4/0.0005');
        $this->assertSame(0, $code, $err);
        $stored = (string) self::$valkey->client()->get('{cg:' . $options['name'] . '}:e:items');
        // 0.0005 tokens/s: an interval of 2,000 s, a tolerance of 4 of them.
        $this->assertMatchesRegularExpression('/^\d+:2000000000:8000000000:\d+$/', $stored, 'carried to the new limits');
        // 2 tokens were left of 5; they are 2 of 4 now.
        $this->assertSame(['allowed' => 2, 'endpoint' => 1], self::tally($l, 3, 'items', null));
    }

    public function testNamesNotConfiguredAreRefusedNamingThem(): void
    {
        $l = $this->make('lua', ['global' => self::bucket(5), 'endpoints' => ['items' => self::bucket(3)]]);
        $cases = [
            [fn () => $l->acquire('s', endpoint: 'charges'), 'endpoint "charges" is not configured (endpoints: items)'],
            [fn () => $l->peek('s', endpoint: 'Items'), 'endpoint "Items" is not configured (endpoints: items)'],
            [fn () => $l->acquire('s', priority: 'critical'), 'priority "critical" is not configured (the limiter'],
            [fn () => $l->acquire('s', 4, endpoint: 'items'), 'tokens must be from 1 to 3 (endpoint "items"\'s capacity), got 4'],
        ];
        foreach ($cases as [$call, $message]) {
            try {
                $call();
                $this->fail("no exception for $message");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($message, $e->getMessage());
            }
        }
        $p = $this->make('lua', ['global' => self::bucket(5), 'priorities' => ['critical' => 0, 'normal' => 0.2]]);
        try {
            $p->acquire('s', priority: 'vip');
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('priority "vip" is not configured (priorities: critical, normal)', $e->getMessage());
        }
        $this->assertSame(5, $p->peek('s')->remaining() + 1, 'nothing was taken by the refused calls');
    }

    /** @return array<string, int> counts by reason of $n calls */
    private static function tally(RateLimiter $l, int $n, ?string $endpoint, ?string $priority): array
    {
        $by = [];
        for ($i = 0; $i < $n; $i++) {
            $r = $l->acquire('shop', endpoint: $endpoint, priority: $priority)->reason();
            $by[$r] = ($by[$r] ?? 0) + 1;
        }
        ksort($by);
        return $by;
    }
}
