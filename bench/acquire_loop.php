<?php
// php -n -d extension=SO bench/acquire_loop.php URL ENGINE N: N acquire() on one shop after
// 500 warm-up calls; prints the mean µs a call (docs/performance.md, "What at most once costs").
[$_, $url, $engine, $n] = $argv;
$l = new CheckoutGuard\RateLimiter(['name' => 'bench-' . $engine . getmypid(), 'url' => $url,
    'global' => ['capacity' => 1000000, 'refill_per_second' => 100000], 'engine' => $engine, 'timeout_ms' => 1000]);
for ($i = 0; $i < 500; $i++) { $l->acquire('s'); }
$t = hrtime(true);
for ($i = 0; $i < (int) $n; $i++) { $l->acquire('s'); }
printf("%.2f\n", (hrtime(true) - $t) / 1e3 / $n);
