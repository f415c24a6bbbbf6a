<?php
// One worker of scripts/bench-threads.sh: N acquire() calls on a bucket that never empties
// (every decision asks Valkey: no local denial), then one line "WORKER N SECONDS".
// Run by the threaded host ($argv = [script, THREAD, REQUEST, URL, N]) or by php
// ($argv = [script, WORKER, 0, URL, N]).
declare(strict_types=1);

[, $worker, , $url, $n] = $argv;
$l = new CheckoutGuard\RateLimiter(['name' => 'bench-threads', 'url' => $url,
    'global' => ['capacity' => 1_000_000_000, 'refill_per_second' => 1_000_000.0]]);
$l->acquire("w$worker"); // the connection opened, the limits read
$t0 = hrtime(true);
for ($i = 0; $i < (int) $n; $i++) {
    if (!$l->acquire("w$worker")->isAllowed()) {
        exit(3);
    }
}
$s = (hrtime(true) - $t0) / 1e9;
echo "$worker $n $s\n";
