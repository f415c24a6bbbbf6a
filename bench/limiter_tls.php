<?php
// The limiter benchmark's tls case (BENCH_ONLY=tls scripts/bench-limiter.sh; docs/performance.md).
//
//   php -d extension=... bench/limiter_tls.php PLAIN_PORT TLS_PORT CAFILE CALLS OUT.json
//
// Against one Debian redis-server listening on a plain port and a TLS port (the same
// process, so the server's work is the same), one process, in one run, interleaved in
// rounds so drift on a shared machine hits every case alike:
//   ping_tcp      phpredis PING over plain TCP
//   ping_tls      phpredis PING over TLS (OpenSSL, PHP's stream)
//   acquire_tcp   RateLimiter::acquire() over plain TCP (engine lua)
//   acquire_tls   RateLimiter::acquire() over TLS (rustls in the extension)
// CALLS timed calls of each (after 100 of warm-up); p50/p90/p99 in µs. The handshake is
// paid once, before timing: a worker keeps its connection across requests.
declare(strict_types=1);

use CheckoutGuard\RateLimiter;

[$plain, $tls, $cafile, $calls, $out] = [(int) $argv[1], (int) $argv[2], $argv[3], (int) $argv[4], $argv[5]];

function limiter(string $url, array $more = []): RateLimiter
{
    return new RateLimiter($more + [
        'name' => 'bench-tls-' . bin2hex(random_bytes(4)),
        'url' => $url,
        'engine' => 'lua',
        'global' => ['capacity' => 1_000_000, 'refill_per_second' => 1_000_000],
        'timeout_ms' => 1000,
        'on_unavailable' => 'throw',
    ]);
}

$tcpRedis = new Redis();
$tcpRedis->connect('127.0.0.1', $plain, 2.0);
$tlsRedis = new Redis();
$tlsRedis->connect('tls://127.0.0.1', $tls, 2.0, null, 0, 0, ['stream' => ['cafile' => $cafile, 'verify_peer' => true, 'peer_name' => 'localhost']]);
$tcpLimiter = limiter("redis://127.0.0.1:$plain");
$tlsLimiter = limiter("rediss://localhost:$tls", ['tls' => ['cafile' => $cafile]]);

$cases = [
    'ping_tcp' => static fn () => $tcpRedis->ping(),
    'ping_tls' => static fn () => $tlsRedis->ping(),
    'acquire_tcp' => static fn () => $tcpLimiter->acquire('shop-1')->isAllowed() || throw new RuntimeException('denied'),
    'acquire_tls' => static fn () => $tlsLimiter->acquire('shop-1')->isAllowed() || throw new RuntimeException('denied'),
];
foreach ($cases as $op) {
    for ($i = 0; $i < 100; $i++) {
        $op();
    }
}
if (!str_contains((string) $tlsLimiter->health()['tls'], 'verified against cafile')) {
    throw new RuntimeException('the TLS limiter is not verifying: ' . json_encode($tlsLimiter->health()));
}
$samples = array_fill_keys(array_keys($cases), []);
$rounds = 20;
$per = intdiv($calls, $rounds);
for ($r = 0; $r < $rounds; $r++) {
    foreach ($cases as $name => $op) {
        for ($i = 0; $i < $per; $i++) {
            $t = hrtime(true);
            $op();
            $samples[$name][] = (hrtime(true) - $t) / 1000;
        }
    }
}
$pct = static function (array $s, float $p): float {
    sort($s);
    return round($s[(int) floor($p * (count($s) - 1))], 1);
};
$result = ['calls' => $per * $rounds, 'cases' => []];
foreach ($samples as $name => $s) {
    $result['cases'][$name] = ['p50_us' => $pct($s, 0.5), 'p90_us' => $pct($s, 0.9), 'p99_us' => $pct($s, 0.99)];
    printf("%-12s %6d calls  p50 %7.1f µs  p90 %7.1f µs  p99 %7.1f µs\n", $name, count($s),
        $result['cases'][$name]['p50_us'], $result['cases'][$name]['p90_us'], $result['cases'][$name]['p99_us']);
}
file_put_contents($out, json_encode($result, JSON_PRETTY_PRINT) . "\n");
