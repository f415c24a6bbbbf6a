<?php
// A small flash sale on the command line: a popular product goes on sale at one shop, its
// buyers (and bots) flood the checkout, and ordinary shops keep selling. Every checkout
// asks CheckoutGuard\RateLimiter before calling the payment provider, whose budget is
// 20 calls a second. Shows, per shop, what was allowed and why: the problem (a flood at a
// shop nobody marked hot), then no hot shop, a hot shop below its cap, and one at its cap.
//
// Usage: php -d extension=target/release/libcheckout_guard.so php/examples/flash_sale.php redis://127.0.0.1:6379
declare(strict_types=1);

use CheckoutGuard\RateLimiter;

$url = $argv[1] ?? ini_get('checkout_guard.url');
$seconds = (float) ($argv[2] ?? 2.0);

/** The provider's budget, split in three buckets: a hot shop gets most of it, never all. */
function limiter(string $url, string $name): RateLimiter
{
    $limiter = new RateLimiter([
        'name' => $name,
        'url' => $url,
        'on_unavailable' => 'throw',           // a demo should say so if Valkey is missing
        'global' => ['capacity' => 20, 'refill_per_second' => 20],   // the provider: 20/s
        'hot_lane' => ['capacity' => 14, 'refill_per_second' => 14], // all hot shops together
        'hot_shop' => ['capacity' => 12, 'refill_per_second' => 12], // each hot shop
    ]);
    $limiter->reset();
    return $limiter;
}

/**
 * Runs a sale for $seconds: each shop tries to check out at its own rate (attempts per
 * second), spread evenly; returns counts per shop and reason.
 */
function sale(RateLimiter $limiter, array $demand, float $seconds): array
{
    $stats = [];
    $next = [];
    $start = microtime(true);
    foreach ($demand as $shop => $rate) {
        $next[$shop] = $start;
        $stats[$shop] = ['attempts' => 0];
    }
    $shops = array_keys($demand);
    while (($now = microtime(true)) - $start < $seconds) {
        shuffle($shops); // nobody is first in line every time
        foreach ($shops as $shop) {
            $rate = $demand[$shop];
            while ($next[$shop] <= $now) {
                $decision = $limiter->acquire($shop);
                $stats[$shop]['attempts']++;
                $stats[$shop][$decision->reason()] = ($stats[$shop][$decision->reason()] ?? 0) + 1;
                $next[$shop] += 1.0 / $rate;
            }
        }
        usleep(2000);
    }
    return $stats;
}

function report(string $title, string $explain, array $stats, float $seconds, array $hot): void
{
    echo "\n== $title\n   $explain\n";
    printf("   %-14s %9s %8s %8s %9s %9s %12s\n", 'shop', 'attempts', 'allowed', 'global', 'hot_lane', 'hot_shop', 'allowed/s');
    $total = 0;
    foreach ($stats as $shop => $s) {
        $label = $shop . (in_array($shop, $hot, true) ? ' (hot)' : '');
        printf(
            "   %-14s %9d %8d %8d %9d %9d %12.1f\n",
            $label, $s['attempts'], $s['allowed'] ?? 0, $s['global'] ?? 0,
            $s['hot_lane'] ?? 0, $s['hot_shop'] ?? 0, ($s['allowed'] ?? 0) / $seconds
        );
        $total += $s['allowed'] ?? 0;
    }
    printf("   provider calls: %d in %.1f s (budget: 20 + 20/s x %.1f s = %d)\n", $total, $seconds, $seconds, 20 + 20 * $seconds);
}

$ordinary = ['shop-a' => 4, 'shop-b' => 3, 'shop-c' => 3];   // 10 checkouts/s together
$run = bin2hex(random_bytes(3));

echo "checkout_guard " . phpversion('checkout_guard') . " against $url, $seconds s per case\n";
echo "payment provider budget: 20 calls/s (burst 20); hot lane 14/s, each hot shop 12/s\n";

$l = limiter($url, "demo-$run-0");
report(
    'The problem: a flood at a shop nobody marked hot',
    'flash floods at 200/s and, as an ordinary shop, drains the global bucket: shop-a..c are denied.',
    sale($l, ['flash' => 200] + $ordinary, $seconds), $seconds, []
);

$l = limiter($url, "demo-$run-1");
report(
    'Case 1: no hot shop',
    'Ordinary shops alone (45/s of demand) share the whole global budget between them.',
    sale($l, ['shop-a' => 15, 'shop-b' => 15, 'shop-c' => 15], $seconds), $seconds, []
);

$l = limiter($url, "demo-$run-2");
$l->markHot('flash', 60);
report(
    'Case 2: a hot shop below its cap',
    'flash is hot and sells 8/s, under its 12/s: the hot shop and the others all pass.',
    sale($l, ['flash' => 8] + $ordinary, $seconds), $seconds, ['flash']
);

$l = limiter($url, "demo-$run-3");
$l->markHot('flash', 60);
report(
    'Case 3: a hot shop at its cap',
    'flash is hot and floods at 200/s: it stops at 12/s (+ its burst of 12), the rest of global stays for the others.',
    sale($l, ['flash' => 200] + $ordinary, $seconds), $seconds, ['flash']
);
echo "\n";
