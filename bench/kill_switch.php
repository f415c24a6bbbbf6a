<?php
// How long the live kill switch (`checkout-guard limiter set mode=shadow`) takes to reach
// every worker (docs/operations.md#rolling-out-a-limit).
//
//   php -d extension=target/release/libcheckout_guard.so bench/kill_switch.php \
//       VALKEY_SERVER target/release/checkout-guard [WORKERS=4] [ROUNDS=5]
//
// Starts its own Valkey on a free loopback port. WORKERS processes forked from this one
// (as php-fpm forks workers) each call acquire() on a drained limiter (frozen refill:
// every call a denial) once a millisecond; the parent runs the CLI's `set mode=shadow`,
// then `set mode=default`, and each worker notes the first decision in the new mode. Per
// switch: from the CLI's exit to each worker's first decision in the new mode (the
// slowest worker counts), with local denials on (the INI default: a flooding worker
// answers from its table, and asks Valkey within 250 ms) and off. Bounded: a worker
// gives up after 3 s; Valkey is stopped at the end.
declare(strict_types=1);

use CheckoutGuard\RateLimiter;

[$valkeyBin, $cli] = [$argv[1], $argv[2]];
$workers = (int) ($argv[3] ?? 4);
$rounds = (int) ($argv[4] ?? 5);

$sock = stream_socket_server('tcp://127.0.0.1:0');
$port = (int) substr(strrchr(stream_socket_get_name($sock, false), ':'), 1);
fclose($sock);
$dir = sys_get_temp_dir() . '/cg-kill-switch-' . getmypid();
@mkdir($dir);
exec(escapeshellarg($valkeyBin) . " --bind 127.0.0.1 --port $port --save '' --appendonly no --daemonize yes --dir $dir --pidfile $dir/valkey.pid --logfile $dir/valkey.log");
$url = "redis://127.0.0.1:$port";
$admin = new Redis();
for ($i = 0; ; $i++) {
    try {
        $admin->connect('127.0.0.1', $port, 0.2);
        $admin->ping();
        break;
    } catch (RedisException $e) {
        if ($i > 50) {
            throw $e;
        }
        usleep(20_000);
    }
}

function limiter(string $url, string $name): RateLimiter
{
    return new RateLimiter(['name' => $name, 'url' => $url, 'global' => ['capacity' => 10, 'refill_per_second' => 0.001], 'timeout_ms' => 500]);
}

/** One switch: returns per worker the ms from the CLI's exit to its first decision in `$want`. */
function round_once(string $url, string $cli, string $name, int $workers, bool $local, string $arg, bool $wantShadow): array
{
    ini_set('checkout_guard.local_denials', $local ? '1' : '0');
    $pipes = [];
    $pids = [];
    for ($w = 0; $w < $workers; $w++) {
        $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
        $pid = pcntl_fork();
        if ($pid === 0) {
            fclose($pair[0]);
            $l = limiter($url, $name);
            fwrite($pair[1], "ready\n");
            $deadline = hrtime(true) + 3_000_000_000;
            $seen = -1;
            while (hrtime(true) < $deadline) {
                $d = $l->acquire("shop-$w");
                if ($d->isShadow() === $wantShadow) {
                    $seen = hrtime(true);
                    break;
                }
                usleep(1000);
            }
            fwrite($pair[1], "$seen\n");
            exit(0);
        }
        fclose($pair[1]);
        $pipes[] = $pair[0];
        $pids[] = $pid;
    }
    foreach ($pipes as $p) {
        fgets($p);
    }
    usleep(300_000); // every worker flooding, its table taught
    exec(escapeshellarg($cli) . ' limiter --url ' . escapeshellarg($url) . " --name $name set $arg --by bench 2>&1", $out, $rc);
    $exited = hrtime(true);
    if ($rc !== 0) {
        fwrite(STDERR, implode("\n", $out) . "\n");
        exit(1);
    }
    $ms = [];
    foreach ($pipes as $i => $p) {
        $seen = (int) trim((string) fgets($p));
        pcntl_waitpid($pids[$i], $status);
        $ms[] = $seen < 0 ? INF : max(0.0, ($seen - $exited) / 1e6);
    }
    return $ms;
}

$report = [];
foreach ([true, false] as $local) {
    $name = 'kill-' . ($local ? 'local' : 'nolocal') . '-' . getmypid();
    ini_set('checkout_guard.local_denials', $local ? '1' : '0');
    $l = limiter($url, $name);
    for ($i = 0; $i < 10; $i++) {
        $l->acquire('drain');
    }
    foreach (['mode=shadow' => true, 'mode=default' => false] as $arg => $shadow) {
        $slowest = [];
        for ($r = 0; $r < $rounds; $r++) {
            // Start each round from the other mode.
            if ($r > 0 || !$shadow) {
                exec(escapeshellarg($cli) . ' limiter --url ' . escapeshellarg($url) . " --name $name set " . ($shadow ? 'mode=default' : 'mode=shadow') . ' --by bench 2>&1');
                usleep(400_000);
            }
            $ms = round_once($url, $cli, $name, $workers, $local, $arg, $shadow);
            $slowest[] = max($ms);
        }
        sort($slowest);
        $report[] = sprintf(
            "local_denials=%d %-12s %d workers x %d rounds: slowest worker after the CLI's exit, ms: min %.1f median %.1f max %.1f",
            $local ? 1 : 0,
            $arg,
            $workers,
            $rounds,
            $slowest[0],
            $slowest[intdiv(count($slowest), 2)],
            $slowest[count($slowest) - 1]
        );
    }
}
echo implode("\n", $report), "\n";
try {
    $admin->rawCommand('SHUTDOWN', 'NOSAVE');
} catch (RedisException $e) {
    // The server closed the connection as it stopped.
}
