<?php
// One process of bench/limiter.php's `metrics` part (issue 40): the calls that count in the
// shared counters, timed with checkout_guard.metrics as this process was started
// (PHP_INI_SYSTEM: one setting per process, so on and off are two processes).
//
//   php -d extension=... -d checkout_guard.metrics=1|0 bench/metrics_cost.php VALKEY_URL CALLS
//
// Cases, each warmed up, then CALLS calls timed one by one:
//   acquire               acquire() deciding in Valkey (global bucket, random shops, engine lua)
//   acquire_local_denial  acquire() denied in the worker (the flood fast path, no round trip:
//                         where a counter's nanoseconds would show first)
//   measure               Telemetry::measure() of a call returning 200, no sink (the
//                         histogram's observation is the metrics' part of it)
// Prints one JSON object: per case p50 and mean ns per call; `counted`: whether render()
// shows this process's decisions (so an "off" run really was off).
declare(strict_types=1);

use CheckoutGuard\{Metrics, RateLimiter, Telemetry};

[, $url, $calls] = $argv + [null, 'redis://127.0.0.1:6379', '3000'];
$calls = (int) $calls;
$tag = getmypid();
$valkey = new RateLimiter(['name' => "metrics-cost-$tag", 'url' => $url, 'engine' => 'lua',
    'global' => ['capacity' => 1_000_000, 'refill_per_second' => 1_000_000]]);
$flooded = new RateLimiter(['name' => "metrics-cost-flood-$tag", 'url' => $url, 'engine' => 'lua',
    'global' => ['capacity' => 1, 'refill_per_second' => 0.001]]);
$call = static fn () => 200;
$cases = [
    'acquire' => static fn () => $valkey->acquire('shop-' . random_int(1, 1000)),
    // After the first denial from Valkey the worker denies in place; it asks Valkey again
    // when the entry ends (every 250 ms): the p50 is the local denial.
    'acquire_local_denial' => static fn () => $flooded->acquire('flash'),
    'measure' => static fn () => Telemetry::measure('payment', $call),
];
$out = ['metrics' => ini_get('checkout_guard.metrics'), 'calls' => $calls, 'cases' => []];
foreach ($cases as $name => $op) {
    for ($i = 0; $i < 200; $i++) {
        $op();
    }
    $ns = [];
    $t0 = hrtime(true);
    for ($i = 0; $i < $calls; $i++) {
        $t = hrtime(true);
        $op();
        $ns[] = hrtime(true) - $t;
    }
    $total = hrtime(true) - $t0;
    sort($ns);
    $out['cases'][$name] = ['p50_ns' => $ns[intdiv(count($ns), 2)], 'mean_ns' => round($total / $calls, 1)];
}
$out['counted'] = str_contains(Metrics::render(), "metrics-cost-$tag");
echo json_encode($out), "\n";
