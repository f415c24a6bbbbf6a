<?php
// The page of the Debian package's test (tests/install/deb-inside.sh), served by php-fpm
// behind nginx in a fresh chroot: one acquire() on a bucket of 2 tokens that refills one
// token in 1000 s, so three calls answer allowed, allowed, denied by "global" (only a
// Valkey that keeps the state can say that: unreachable, the answer is "unavailable").
declare(strict_types=1);

header('Content-Type: application/json');
$limiter = new CheckoutGuard\RateLimiter([
    'name' => 'deb-test-' . preg_replace('/[^A-Za-z0-9_.:-]/', '', (string) ($_GET['run'] ?? 'x')),
    'global' => ['capacity' => 2, 'refill_per_second' => 0.001],
]);
$decision = $limiter->acquire('shop-1');
echo json_encode([
    'sapi' => PHP_SAPI,
    'php' => PHP_MAJOR_VERSION . '.' . PHP_MINOR_VERSION,
    'extension' => phpversion('checkout_guard'),
    'allowed' => $decision->isAllowed(),
    'reason' => $decision->reason(),
    'remaining' => $decision->remaining(),
]), "\n";
