<?php
// The fault matrix's view of acquire(): every 10 ms one decision for an ordinary shop,
// through the same Valkey URL, timeout and on_unavailable policy as the checkout, each
// written as a JSON line {"t": seconds, "reason": ..., "us": latency, "engine": the engine
// that decided last in this process, "module" or "lua", "tls": health()['tls'], null on a
// plain URL}.
//   php -d extension=... acquire_probe.php URL POLICY SECONDS OUT
declare(strict_types=1);

[, $url, $policy, $seconds, $out] = $argv;
$l = new CheckoutGuard\RateLimiter([
    'name' => 'fault-probe',
    'url' => $url,
    'global' => ['capacity' => 100000, 'refill_per_second' => 100000],
    'on_unavailable' => $policy,
]);
$f = fopen($out, 'w');
$t0 = hrtime(true);
$next = 0.0;
while (($now = (hrtime(true) - $t0) / 1e9) < (float) $seconds) {
    if ($now < $next) {
        usleep((int) (($next - $now) * 1e6));
    }
    $next += 0.01;
    $t = hrtime(true);
    try {
        $reason = $l->acquire('probe-' . mt_rand(1, 1000))->reason();
    } catch (CheckoutGuard\UnavailableException $e) {
        $reason = 'threw';
    }
    $us = (hrtime(true) - $t) / 1e3;
    $health = $l->health(false);
    fwrite($f, json_encode(['t' => round(($t - $t0) / 1e9, 4), 'reason' => $reason, 'us' => round($us, 1), 'engine' => $health['engine'], 'tls' => $health['tls']]) . "\n");
}
