<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use CheckoutGuard\Telemetry;

/**
 * `checkout-guard replay` with endpoints and priority classes (issue 42) against a real
 * run: a RateLimiter with endpoints, classes and a listed hot shop, on both engines,
 * decides a mixed sequence of calls (a flood of one endpoint, checkouts in three classes,
 * a hot shop, an api without an endpoint bucket); the admitted calls are recorded as
 * ExternalApiCall events (their `priority` as a caller attribute), the denials by the
 * limiter itself. The replay of those events with the same limits (written as `limiter
 * status` and the published settings show them) must give back exactly what the run did:
 * per shop, per endpoint, per class, per reason. Rates are frozen, so the counts do not
 * depend on the clock.
 */
final class ReplayEndpointsTest extends ModuleValkeyTestCase
{
    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testTheReplayGivesBackWhatTheLimiterDidWithEndpointsAndClasses(string $engine): void
    {
        // Api names of this test only (the events file is the PHPUnit process's; fixed,
        // so the live counters get four label sets, not four per run).
        $p = 'replay-ep.';
        [$items, $create, $confirm, $tax] = [$p . 'items', $p . 'create', $p . 'confirm', $p . 'tax'];
        $name = self::uniqueName("replay-ep-$engine");
        $limiter = new RateLimiter([
            'name' => $name,
            'url' => self::$valkey->url(),
            'engine' => $engine,
            'on_unavailable' => 'throw',
            'global' => self::bucket(60),
            'hot_shop' => self::bucket(6),
            'hot_shops' => ['flash'],
            'endpoints' => [$items => self::bucket(12), $create => self::bucket(30), $confirm => self::bucket(30)],
            'priorities' => ['critical' => 0.0, 'normal' => 0.25, 'background' => 0.5],
            'default_priority' => 'normal',
        ]);
        $limits = sprintf(
            'global=60/0.001 hot_shop=6/0.001 endpoint.%s=30/0.001 endpoint.%s=30/0.001 endpoint.%s=12/0.001'
            . ' priorities.background=0.5 priorities.critical=0 priorities.normal=0.25 default_priority=normal',
            $confirm,
            $create,
            $items
        );
        // The sequence: items polled hard in the background; then checkouts (create,
        // confirm) and the rest mixed, seeded; then the last checkouts in every class.
        $calls = [];
        for ($i = 0; $i < 20; $i++) {
            $calls[] = ['poller', $items, 'background'];
        }
        mt_srand(42);
        $shops = ['a', 'b', 'c', 'flash'];
        $apis = [$create, $confirm, $items, null];
        $classes = [null, 'normal', 'background', 'critical'];
        for ($i = 0; $i < 70; $i++) {
            $calls[] = [$shops[mt_rand(0, 3)], $apis[mt_rand(0, 3)], $classes[mt_rand(0, 3)]];
        }
        foreach (['background', null, 'critical'] as $class) {
            for ($i = 0; $i < 8; $i++) {
                $calls[] = ['b', $i % 2 ? $confirm : $create, $class];
            }
        }

        $log = new EventLog(self::redis());
        $log->mark();
        $real = ['reasons' => [], 'shops' => [], 'endpoints' => [], 'classes' => [], 'tax' => 0];
        $tally = function (array &$row, bool $allowed, bool $byEndpoint): void {
            $row += ['attempts' => 0, 'admitted' => 0, 'denied' => 0, 'denied_by_endpoint' => 0];
            $row['attempts']++;
            $row[$allowed ? 'admitted' : 'denied']++;
            $row['denied_by_endpoint'] += (int) $byEndpoint;
        };
        $reserveHeld = 0;
        $lowerDenied = 0;
        foreach ($calls as [$shop, $endpoint, $class]) {
            $d = $limiter->acquire($shop, 1, 0.0, $endpoint, $class);
            $at = (int) floor(microtime(true) * 1000);
            $allowed = $d->isAllowed();
            $reason = $allowed ? 'allowed' : $d->reason();
            $real['reasons'][$reason] = ($real['reasons'][$reason] ?? 0) + 1;
            $real['shops'][$shop][$allowed ? 'admitted' : 'denied'] = ($real['shops'][$shop][$allowed ? 'admitted' : 'denied'] ?? 0) + 1;
            $real['endpoints'][$endpoint ?? '(none)'] ??= [];
            $tally($real['endpoints'][$endpoint ?? '(none)'], $allowed, $reason === 'endpoint');
            $real['classes'][$class ?? 'normal'] ??= [];
            $tally($real['classes'][$class ?? 'normal'], $allowed, $reason === 'endpoint');
            // A class's reserve held: a background or normal call denied, a critical one
            // admitted after it.
            if (!$allowed && $class !== 'critical') {
                $lowerDenied++;
            } elseif ($allowed && $class === 'critical' && $lowerDenied > 0) {
                $reserveHeld++;
            }
            if ($allowed) {
                // The call made: an ExternalApiCall of its api (no endpoint: the tax api).
                $attrs = ['shop.id' => $shop] + ($class === null ? [] : ['priority' => $class]);
                Telemetry::recordCall($endpoint ?? $tax, $at, 1.0, 200, $attrs);
                $real['tax'] += (int) ($endpoint === null);
            }
        }
        $events = $log->jsonl();
        $mine = array_filter($events, fn ($e) => ($e['limiter'] ?? null) === $name
            || str_starts_with((string) ($e['api'] ?? ''), $p));
        $file = tempnam(sys_get_temp_dir(), 'cg-replay-ep');
        file_put_contents($file, implode("\n", array_map('json_encode', $mine)) . "\n");

        // The run bound on every count that matters: the endpoint, the reserve, the hot shop.
        $this->assertGreaterThanOrEqual(8, $real['reasons']['endpoint'] ?? 0, json_encode($real['reasons']));
        $this->assertGreaterThan(0, $real['reasons']['global'] ?? 0, json_encode($real['reasons']));
        $this->assertGreaterThan(0, $real['reasons']['hot_shop'] ?? 0, json_encode($real['reasons']));
        $this->assertGreaterThan(0, $reserveHeld, 'a critical call admitted after a lower class was denied');

        [$rc, $out, $err] = Cli::run(
            'replay', $file, '--api', $items, '--api', $create, '--api', $confirm, '--api', $tax,
            '--limiter', $name, '--limits', $limits, '--hot', 'flash', '--json'
        );
        @unlink($file);
        $this->assertSame(0, $rc, $err);
        $j = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $t = $j['totals'];
        $this->assertSame(count($calls), $t['attempts']);
        $this->assertSame($real['reasons']['allowed'] ?? 0, $t['admitted']);
        foreach (['global', 'endpoint', 'hot_shop', 'hot_lane'] as $r) {
            $this->assertSame($real['reasons'][$r] ?? 0, $t['denied'][$r], "denied by $r");
        }
        foreach ($real['shops'] as $shop => $c) {
            $this->assertSame($c['admitted'] ?? 0, $j['shops'][$shop]['admitted'], "shop $shop admitted");
            $this->assertSame($c['denied'] ?? 0, $j['shops'][$shop]['denied_total'], "shop $shop denied");
        }
        ksort($real['endpoints']);
        ksort($real['classes']);
        foreach ([&$real['endpoints'], &$real['classes']] as &$rows) {
            foreach ($rows as &$row) {
                ksort($row);
            }
        }
        unset($rows, $row);
        $this->assertSame($real['endpoints'], $j['endpoints']);
        $this->assertSame($real['classes'], $j['classes']);
        // The admitted calls without an endpoint are its tax api's: said, not guessed.
        $this->assertSame($real['tax'], $j['unrouted']['calls']);
    }
}
