<?php
// Failover time through a valkey+sentinel:// URL: a loop of acquire() (on_unavailable
// deny, timeout_ms 200, retry_interval_ms 50), the primary SIGKILLed, the time from the
// kill to the first decision on the promoted replica, and the calls the policy answered
// in between (one call every 10 ms). Each run starts its own group (tests/php/support/SentinelGroup.php: a
// primary, a replica, three sentinels, down-after-milliseconds 500, failover-timeout
// 3000) on loopback, and stops it. Bounded: RUNS runs (at most 10), 20 s of calls each.
//   VALKEY_SERVER=$(bash -c 'source scripts/lib.sh; valkey_bin') \
//     php -d extension=target/release/libcheckout_guard.so bench/sentinel_failover.php [RUNS]
// Prints one JSON line per run, then min/median/max.
declare(strict_types=1);

namespace CheckoutGuard\Tests;

require __DIR__ . '/../tests/php/support/ValkeyProcess.php';
require __DIR__ . '/../tests/php/support/SentinelGroup.php';

use CheckoutGuard\RateLimiter;

if (!getenv('VALKEY_SERVER')) {
    fwrite(STDERR, "set VALKEY_SERVER (bash -c 'source scripts/lib.sh; valkey_bin')\n");
    exit(2);
}
$runs = max(1, min(10, (int) ($argv[1] ?? 5)));
ini_set('checkout_guard.retry_interval_ms', '50');
$times = [];
for ($run = 1; $run <= $runs; $run++) {
    $g = new SentinelGroup();
    $g->start();
    $l = new RateLimiter([
        'name' => 'bench-' . bin2hex(random_bytes(4)),
        'url' => $g->url(),
        'global' => ['capacity' => 1_000_000, 'refill_per_second' => 1.0],
        'timeout_ms' => 200,
        'on_unavailable' => 'deny',
    ]);
    if ($l->acquire('s')->reason() !== 'allowed') {
        throw new \RuntimeException('no decision before the kill');
    }
    $killed = hrtime(true);
    $g->primary->kill();
    $policy = 0;
    $ms = null;
    $deadline = microtime(true) + 20;
    while (microtime(true) < $deadline) {
        $d = $l->acquire('s');
        if ($d->reason() === 'unavailable') {
            $policy++;
            usleep(10_000); // a checkout every 10 ms
            continue;
        }
        $ms = (hrtime(true) - $killed) / 1e6;
        break;
    }
    $primary = $l->health(false)['sentinel_primary'];
    $g->stop();
    if ($ms === null) {
        throw new \RuntimeException("run $run: no decision within 20 s after the kill");
    }
    if ($primary !== '127.0.0.1:' . $g->replica->port) {
        throw new \RuntimeException("run $run: decided on $primary, not the promoted replica");
    }
    $times[] = $ms;
    echo json_encode(['run' => $run, 'kill_to_decision_ms' => round($ms), 'policy_answers' => $policy]), "\n";
}
sort($times);
echo json_encode([
    'runs' => $runs,
    'down_after_ms' => SentinelGroup::DOWN_AFTER_MS,
    'min_ms' => round($times[0]),
    'median_ms' => round($times[intdiv(count($times), 2)]),
    'max_ms' => round(end($times)),
]), "\n";
