<?php
// The limiter benchmark (scripts/bench-limiter.sh runs it; docs/performance.md).
//
//   php -d extension=... bench/limiter.php PORT UNIX_SOCKET MODE OUT.json
//   MODE: full (N = 1, 2, 4, 8; 30 s accuracy run) or short (N = 1, 2: the CI guard)
//
// Against one local Valkey, side by side in one run, each case from N processes forked
// from this one (as php-fpm forks workers), every process timing each decision:
//   ping         phpredis PING: the floor, one round trip
//   acquire      RateLimiter::acquire(), global bucket only
//   acquire_hot  RateLimiter::acquire() for a hot shop: global + hot_lane + hot_shop
//   acquire_auto_hot  acquire() with auto_hot on (the window counters in the same script)
//   evalsha      the same decision script run by hand through phpredis evalSha
//   *_module     acquire() deciding with the native module (CG.DECIDE)
//   module_by_hand  the same CG.DECIDE by hand through phpredis rawCommand (any client's floor)
//   symfony      Symfony RateLimiter token_bucket, Redis cache storage + Redis lock
//   *_unix       the same over Valkey's Unix socket
// and per case Valkey's cost (commandstats µs per call of the top-level command, and
// Valkey's CPU per decision from INFO cpu) and the client's CPU per decision.
// Then the Lua engine's cost as a multiple of an empty script (lua_cost: best of several
// rounds), the flood fast path (a hot shop flooded at 10x its cap, local denials on and
// off), accuracy at saturation (8 processes at 2x a bucket's rate) and the shared counters'
// cost: acquire() and measure() with checkout_guard.metrics on and off (metrics_cost()).
declare(strict_types=1);

use CheckoutGuard\RateLimiter;

[$port, $socket, $mode, $out] = [(int) $argv[1], $argv[2], $argv[3], $argv[4]];
$quick = $mode !== 'full';
$procs = $quick ? [1, 2] : [1, 2, 4, 8];
if ((string) getenv('BENCH_PROCS') !== '') {
    $procs = array_map('intval', explode(',', (string) getenv('BENCH_PROCS')));
}
$ops = $quick ? 1500 : 6000;
$tcp = "redis://127.0.0.1:$port";
$unix = "unix://$socket";

function admin(): Redis
{
    global $port;
    static $r;
    if ($r === null) {
        $r = new Redis();
        $r->connect('127.0.0.1', $port, 2.0);
    }
    return $r;
}

function redis_to(string $transport): Redis
{
    global $port, $socket;
    $r = new Redis();
    $transport === 'unix' ? $r->connect($socket, 0, 2.0) : $r->connect('127.0.0.1', $port, 2.0);
    return $r;
}

/** Valkey's counters: commandstats and CPU seconds. */
function valkey_stats(): array
{
    $r = admin();
    $cpu = $r->info('cpu');
    return [
        'cpu' => (float) $cpu['used_cpu_user'] + (float) $cpu['used_cpu_sys'],
        'cmd' => $r->info('commandstats'),
        // Bytes Valkey read from every client: what a call sends (no timing in it).
        'in_bytes' => (int) $r->info('stats')['total_net_input_bytes'],
    ];
}

function cmd_stat(array $cmd, string $name): array
{
    if (!isset($cmd["cmdstat_$name"]) || !preg_match('/calls=(\d+),usec=(\d+)/', $cmd["cmdstat_$name"], $m)) {
        return [0, 0];
    }
    return [(int) $m[1], (int) $m[2]];
}

function percentile(array $sorted, float $p): float
{
    return $sorted[min(count($sorted) - 1, (int) floor($p * count($sorted)))];
}

function cpu_seconds(): float
{
    $u = getrusage();
    return $u['ru_utime.tv_sec'] + $u['ru_utime.tv_usec'] / 1e6 + $u['ru_stime.tv_sec'] + $u['ru_stime.tv_usec'] / 1e6;
}

/**
 * Runs $make() in each of $n forked processes; $make returns the operation (a closure
 * returning whether the decision allowed). Each process warms up, waits for the common
 * start, then times $count operations one by one.
 */
function run_case(string $name, int $n, int $count, callable $make, string $topCommand): array
{
    admin()->rawCommand('CONFIG', 'RESETSTAT');
    $before = valkey_stats();
    $startAt = microtime(true) + 0.4 + 0.1 * $n;
    $files = [];
    $pids = [];
    for ($i = 0; $i < $n; $i++) {
        $files[$i] = tempnam(sys_get_temp_dir(), 'cg-bench');
        $pid = pcntl_fork();
        if ($pid === 0) {
            $op = $make($i);
            $warm = min(200, $count);
            for ($w = 0; $w < $warm; $w++) {
                $op();
            }
            while (microtime(true) < $startAt) {
                usleep(1000);
            }
            $lat = [];
            $allowed = 0;
            $cpu0 = cpu_seconds();
            $t0 = hrtime(true);
            for ($k = 0; $k < $count; $k++) {
                $t = hrtime(true);
                $allowed += (int) $op();
                $lat[] = hrtime(true) - $t;
            }
            $elapsed = (hrtime(true) - $t0) / 1e9;
            $cpu = cpu_seconds() - $cpu0;
            file_put_contents($files[$i], json_encode(['elapsed' => $elapsed, 'cpu' => $cpu, 'allowed' => $allowed, 'warm' => $warm]) . "\n" . pack('P*', ...$lat));
            posix_kill(getmypid(), SIGKILL);
        }
        $pids[] = $pid;
    }
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
    }
    $after = valkey_stats();
    $lat = [];
    $elapsed = $cpu = 0.0;
    $allowed = $warm = 0;
    foreach ($files as $f) {
        $raw = (string) file_get_contents($f);
        unlink($f);
        [$head, $bin] = explode("\n", $raw, 2);
        $h = json_decode($head, true, 512, JSON_THROW_ON_ERROR);
        $elapsed = max($elapsed, $h['elapsed']);
        $cpu += $h['cpu'];
        $allowed += $h['allowed'];
        $warm += $h['warm'];
        array_push($lat, ...array_values(unpack('P*', $bin)));
    }
    sort($lat);
    $decisions = $n * $count;
    [$calls, $usec] = cmd_stat($after['cmd'], $topCommand);
    return [
        'case' => $name,
        'procs' => $n,
        'decisions' => $decisions,
        'allowed' => $allowed,
        'p50_us' => round(percentile($lat, 0.50) / 1e3, 2),
        'p99_us' => round(percentile($lat, 0.99) / 1e3, 2),
        'per_second' => round($decisions / $elapsed),
        'client_cpu_us' => round($cpu / $decisions * 1e6, 2),
        'valkey_cpu_us' => round(($after['cpu'] - $before['cpu']) / ($decisions + $warm) * 1e6, 2),
        'valkey_usec_per_call' => $calls > 0 ? round($usec / $calls, 2) : null,
        'valkey_calls_per_decision' => round($calls / ($decisions + $warm), 3),
        // The bytes sent per decision (admin's INFO calls and the warm-up included: a few
        // bytes more per decision than the call itself).
        'request_bytes' => (int) round(($after['in_bytes'] - $before['in_bytes']) / ($decisions + $warm)),
    ];
}

/**
 * The decision script and, per shop, its KEYS and ARGV exactly as the extension encodes
 * them: `checkout-guard limiter call` prints both from the model's encoder (DecideCall),
 * so this hand-written client can never drift from the extension's contract.
 */
function encoded_calls(string $name, array $shops): array
{
    $cli = getenv('CG_CLI') ?: __DIR__ . '/../target/release/checkout-guard';
    $cmd = array_merge([$cli, 'limiter', '--name', $name, 'call', '--global', '1000000/1000000'], $shops);
    $out = shell_exec(implode(' ', array_map('escapeshellarg', $cmd)));
    $decoded = is_string($out) ? json_decode($out, true) : null;
    if (!is_array($decoded) || !isset($decoded['script'], $decoded['calls'])) {
        throw new RuntimeException("`checkout-guard limiter call` gave no encoded calls (is $cli built?)");
    }
    return $decoded;
}

$always = ['capacity' => 1_000_000, 'refill_per_second' => 1_000_000];
// The script's cases name engine "lua": the benchmark's Valkey has the native module
// loaded too, and its cases (`*_module`) decide with it, side by side.
$limiter = static fn (string $url, string $name, array $extra = []) => new RateLimiter(['name' => $name, 'url' => $url, 'global' => $always] + $extra + ['engine' => 'lua']);
$shops = static fn () => 'shop-' . random_int(1, 1000);

$cases = [
    'ping' => ['ping', static function () {
        $r = redis_to('tcp');
        return static fn () => $r->ping() !== false;
    }],
    'acquire' => ['evalsha', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench');
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'acquire_hot' => ['evalsha', static function () use ($limiter, $tcp, $always) {
        $l = $limiter($tcp, 'bench-hot', ['hot_lane' => $always, 'hot_shop' => $always, 'hot_shops' => ['flash']]);
        return static fn () => $l->acquire('flash')->isAllowed();
    }],
    'acquire_auto_hot' => ['evalsha', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-auto', ['auto_hot' => true]);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'acquire_module' => ['CG.DECIDE', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-mod', ['engine' => 'module']);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'acquire_hot_module' => ['CG.DECIDE', static function () use ($limiter, $tcp, $always) {
        $l = $limiter($tcp, 'bench-hot-mod', ['hot_lane' => $always, 'hot_shop' => $always, 'hot_shops' => ['flash'], 'engine' => 'module']);
        return static fn () => $l->acquire('flash')->isAllowed();
    }],
    'acquire_auto_hot_module' => ['CG.DECIDE', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-auto-mod', ['auto_hot' => true, 'engine' => 'module']);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    // In-flight leases (issue 37): a lease taken in the decision's call and released by
    // one more call (the release script here: this limiter decides by script), against
    // acquire() alone.
    // `_held` takes leases and never releases them (the lease sets grow to every decision
    // of the run: what Valkey spends per decision with leases, the release apart).
    'acquire_lease' => ['evalsha', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-lease', ['in_flight' => ['global' => 1_000_000]]);
        return static function () use ($l, $shops): bool {
            $d = $l->acquire($shops());
            $d->release();
            return $d->isAllowed();
        };
    }],
    'acquire_lease_held' => ['evalsha', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-lease-held', ['in_flight' => ['global' => 1_000_000, 'lease_seconds' => 600]]);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'acquire_lease_module' => ['CG.DECIDE', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-lease-mod', ['in_flight' => ['global' => 1_000_000], 'engine' => 'module']);
        return static function () use ($l, $shops): bool {
            $d = $l->acquire($shops());
            $d->release();
            return $d->isAllowed();
        };
    }],
    'acquire_lease_held_module' => ['CG.DECIDE', static function () use ($limiter, $tcp, $shops) {
        $l = $limiter($tcp, 'bench-lease-held-mod', ['in_flight' => ['global' => 1_000_000, 'lease_seconds' => 600], 'engine' => 'module']);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'evalsha' => ['evalsha', static function () use ($shops) {
        return evalsha_op(redis_to('tcp'), $shops);
    }],
    'module_by_hand' => ['CG.DECIDE', static function () use ($shops) {
        return module_op(redis_to('tcp'), $shops);
    }],
    'symfony' => ['*', static function () use ($shops) {
        return symfony_op(redis_to('tcp'), $shops);
    }],
    'ping_unix' => ['ping', static function () {
        $r = redis_to('unix');
        return static fn () => $r->ping() !== false;
    }],
    'acquire_unix' => ['evalsha', static function () use ($limiter, $unix, $shops) {
        $l = $limiter($unix, 'bench');
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'evalsha_unix' => ['evalsha', static function () use ($shops) {
        return evalsha_op(redis_to('unix'), $shops);
    }],
    'acquire_module_unix' => ['CG.DECIDE', static function () use ($limiter, $unix, $shops) {
        $l = $limiter($unix, 'bench-mod', ['engine' => 'module']);
        return static fn () => $l->acquire($shops())->isAllowed();
    }],
    'module_by_hand_unix' => ['CG.DECIDE', static function () use ($shops) {
        return module_op(redis_to('unix'), $shops);
    }],
];

/** What a PHP team would write by hand: the same script through phpredis evalSha. */
function evalsha_op(Redis $r, callable $shops): Closure
{
    // The same call the extension sends for 1 token of a shop that is not hot, global
    // 1,000,000 tokens at 1,000,000/s, no hot buckets; one encoded call per shop.
    $encoded = encoded_calls('bench-php', array_map(static fn ($i) => "shop-$i", range(1, 1000)));
    $script = $encoded['script'];
    $calls = [];
    foreach ($encoded['calls'] as $c) {
        $calls[$c['shop']] = array_merge($c['keys'], $c['argv']);
    }
    // As many keys as the call has (8 since the adaptive budget's key).
    $numKeys = count($encoded['calls'][0]['keys']);
    $sha = $r->script('load', $script);
    return static function () use ($r, $sha, $script, $shops, $calls, $numKeys): bool {
        $args = $calls[$shops()];
        $reply = $r->evalSha($sha, $args, $numKeys);
        if ($reply === false) {
            $reply = $r->eval($script, $args, $numKeys);
        }
        return is_array($reply) && $reply[0] === 0;
    };
}

/** The floor of any client: the same `CG.DECIDE` by hand through phpredis `rawCommand`. */
function module_op(Redis $r, callable $shops): Closure
{
    $encoded = encoded_calls('bench-php-mod', array_map(static fn ($i) => "shop-$i", range(1, 1000)));
    $calls = [];
    foreach ($encoded['calls'] as $c) {
        $calls[$c['shop']] = array_merge($c['keys'], $c['argv']);
    }
    return static function () use ($r, $shops, $calls): bool {
        $reply = $r->rawCommand('CG.DECIDE', ...$calls[$shops()]);
        return is_array($reply) && $reply[0] === 0;
    };
}

function symfony_op(Redis $r, callable $shops): Closure
{
    require_once '/usr/share/php/Symfony/Component/RateLimiter/autoload.php';
    require_once '/usr/share/php/Symfony/Component/Lock/autoload.php';
    require_once '/usr/share/php/Symfony/Component/Cache/autoload.php';
    $factory = new Symfony\Component\RateLimiter\RateLimiterFactory(
        ['id' => 'bench', 'policy' => 'token_bucket', 'limit' => 1_000_000, 'rate' => ['interval' => '1 second', 'amount' => 1_000_000]],
        new Symfony\Component\RateLimiter\Storage\CacheStorage(new Symfony\Component\Cache\Adapter\RedisAdapter($r, 'sf')),
        new Symfony\Component\Lock\LockFactory(new Symfony\Component\Lock\Store\RedisStore($r)),
    );
    return static fn (): bool => $factory->create($shops())->consume(1)->isAccepted();
}

/**
 * What scripts cost inside this Valkey at all: a script that does nothing, one that only
 * reads TIME, and a plain SET ... PX sent as a command (commandstats µs per call).
 */
function script_floor(): array
{
    $r = admin();
    $cost = static function (callable $run, string $cmd) use ($r): float {
        $r->rawCommand('CONFIG', 'RESETSTAT');
        for ($i = 0; $i < 3000; $i++) {
            $run();
        }
        [$calls, $usec] = cmd_stat($r->info('commandstats'), $cmd);
        return round($usec / max(1, $calls), 2);
    };
    $noop = $r->script('load', 'return 1');
    $time = $r->script('load', "local t = redis.call('TIME') return 1");
    return [
        'noop_script_us' => $cost(static fn () => $r->evalSha($noop, [], 0), 'evalsha'),
        'time_script_us' => $cost(static fn () => $r->evalSha($time, [], 0), 'evalsha'),
        'set_px_command_us' => $cost(static fn () => $r->set('{cg:floor}:k', '1796036012345678', ['px' => 1000]), 'set'),
    ];
}

$results = ['mode' => $mode, 'cases' => [], 'flood' => [], 'accuracy' => null, 'floor' => script_floor()];
// BENCH_ONLY=lua_cost, decision_cost, flood, metrics or accuracy: that part alone (while working on it). BENCH_CASES=ping,acquire_module,...:
// those cases only (no flood, no accuracy run).
$only = (string) getenv('BENCH_ONLY');
if ((string) getenv('BENCH_CASES') !== '') {
    $cases = array_intersect_key($cases, array_flip(explode(',', (string) getenv('BENCH_CASES'))));
    $only = 'cases';
}
foreach ($only === '' || $only === 'cases' ? $procs : [] as $n) {
    foreach ($cases as $name => [$top, $make]) {
        // Symfony is ~10x slower: fewer decisions keep the run bounded.
        $count = $name === 'symfony' ? intdiv($ops, 10) : $ops;
        $r = run_case($name, $n, $count, $make, $top === '*' ? 'evalsha' : $top);
        if ($top === '*') {
            // Symfony sends several commands per decision: count them all (a script's
            // inner commands are counted inside its EVAL as well as on their own).
            $r['valkey_usec_per_call'] = null;
        }
        $results['cases'][] = $r;
        fprintf(STDERR, "%-13s N=%d p50 %8.1f us  p99 %8.1f us  %7d/s  valkey %5.1f us/call  cpu %5.1f us  %4d bytes sent\n", $name, $n, $r['p50_us'], $r['p99_us'], $r['per_second'], $r['valkey_usec_per_call'] ?? -1, $r['client_cpu_us'], $r['request_bytes']);
    }
}

/**
 * A hot shop flooded at 10x its cap by 4 processes (random arrivals), while one process
 * buys at ordinary shops; with local denials on or off. Then, for scale: denials of the
 * same shop back to back (warm caches), and md5('abc') timed after the same 8 ms sleeps
 * the flood's processes take (what any PHP call costs here with cold caches).
 */
function flood(bool $local, float $seconds): array
{
    global $tcp;
    ini_set('checkout_guard.local_denials', $local ? '1' : '0');
    $cap = 50.0;
    $l = new RateLimiter([
        'name' => 'flood-' . ($local ? 'on' : 'off'),
        'url' => $tcp,
        'global' => ['capacity' => 100, 'refill_per_second' => 1000],
        'hot_shop' => ['capacity' => 10, 'refill_per_second' => $cap],
        'hot_shops' => ['flash'],
        'engine' => 'lua', // round trips are counted as EVALSHA calls
    ]);
    $floodProcs = 4;
    $pace = 1 / ($cap * 10 / $floodProcs);
    admin()->rawCommand('CONFIG', 'RESETSTAT');
    $startAt = microtime(true) + 0.3;
    $files = [];
    $pids = [];
    for ($i = 0; $i <= $floodProcs; $i++) {
        $files[$i] = tempnam(sys_get_temp_dir(), 'cg-flood');
        $pid = pcntl_fork();
        if ($pid === 0) {
            $ordinary = $i === $floodProcs;
            while (microtime(true) < $startAt) {
                usleep(1000);
            }
            // Arrivals at random (exponential gaps), as independent buyers arrive.
            $gap = static fn (float $mean) => -log(1 - mt_rand() / (mt_getrandmax() + 1)) * $mean;
            mt_srand(getmypid());
            $next = $startAt + $gap($ordinary ? 0.01 : $pace);
            $denied = [];
            $allowed = $n = 0;
            $first = $last = null;
            while ($next < $startAt + $seconds) {
                $now = microtime(true);
                if ($now < $next) {
                    usleep((int) (($next - $now) * 1e6));
                }
                $next += $gap($ordinary ? 0.01 : $pace);
                $first ??= microtime(true);
                $t = hrtime(true);
                $d = $l->acquire($ordinary ? 'shop-' . random_int(1, 1000) : 'flash');
                $ns = hrtime(true) - $t;
                $last = microtime(true);
                $n++;
                if ($d->isAllowed()) {
                    $allowed++;
                } else {
                    $denied[] = $ns;
                }
            }
            file_put_contents($files[$i], json_encode(['n' => $n, 'allowed' => $allowed, 'denied' => $denied, 'first' => $first, 'last' => $last]));
            posix_kill(getmypid(), SIGKILL);
        }
        $pids[] = $pid;
    }
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
    }
    [$calls] = cmd_stat(admin()->info('commandstats'), 'evalsha');
    $flood = ['n' => 0, 'allowed' => 0, 'denied' => [], 'first' => INF, 'last' => 0.0];
    $ordinary = null;
    foreach ($files as $i => $f) {
        $r = json_decode((string) file_get_contents($f), true, 512, JSON_THROW_ON_ERROR);
        unlink($f);
        if ($i === $floodProcs) {
            $ordinary = $r;
            continue;
        }
        $flood['n'] += $r['n'];
        $flood['first'] = min($flood['first'], $r['first']);
        $flood['last'] = max($flood['last'], $r['last']);
        $flood['allowed'] += $r['allowed'];
        array_push($flood['denied'], ...$r['denied']);
    }
    sort($flood['denied']);
    $deniedCount = count($flood['denied']);
    // Round trips spent on denials: all decision scripts, less one per admitted flood
    // request and one per ordinary request.
    $deniedTrips = $calls - $flood['allowed'] - $ordinary['n'];
    $warm = [];
    for ($i = 0; $i < 20000; $i++) {
        $t = hrtime(true);
        $l->acquire('flash');
        $warm[] = hrtime(true) - $t;
    }
    sort($warm);
    $cold = [];
    for ($i = 0; $i < 200; $i++) {
        usleep(8000);
        $t = hrtime(true);
        md5('abc');
        $cold[] = hrtime(true) - $t;
    }
    sort($cold);
    ini_restore('checkout_guard.local_denials');
    return [
        'local_denials' => $local,
        'seconds' => $seconds,
        'offered_per_second' => round($flood['n'] / $seconds, 1),
        'cap_per_second' => $cap,
        'admitted' => $flood['allowed'],
        // From the first flood request sent to the last answer received.
        'admitted_limit' => round(10 + $cap * ($flood['last'] - $flood['first']), 2),
        'admitted_per_second' => round($flood['allowed'] / $seconds, 2),
        'denied' => $deniedCount,
        'round_trips_per_denied' => $deniedCount > 0 ? round(max(0, $deniedTrips) / $deniedCount, 4) : null,
        'denied_p50_us' => $deniedCount > 0 ? round(percentile($flood['denied'], 0.5) / 1e3, 2) : null,
        'denied_p99_us' => $deniedCount > 0 ? round(percentile($flood['denied'], 0.99) / 1e3, 2) : null,
        'back_to_back_p50_us' => round(percentile($warm, 0.5) / 1e3, 2),
        'cold_md5_p50_us' => round(percentile($cold, 0.5) / 1e3, 2),
        'ordinary_requests' => $ordinary['n'],
        'ordinary_allowed' => $ordinary['allowed'],
    ];
}

/**
 * Valkey's own µs per call of each op (`INFO commandstats` of its command), $ops being
 * name => [command, op]: each op run 200 times first (keys made, caches warm), then
 * $rounds rounds, each op in turn $calls times from reset statistics. Returns name => the
 * rounds' µs per call, in order.
 */
function stat_rounds($r, array $ops, int $rounds, int $calls): array
{
    $seen = array_fill_keys(array_keys($ops), []);
    foreach ($ops as [, $op]) {
        for ($i = 0; $i < 200; $i++) {
            $op();
        }
    }
    for ($round = 0; $round < $rounds; $round++) {
        foreach ($ops as $name => [$cmd, $op]) {
            $r->rawCommand('CONFIG', 'RESETSTAT');
            for ($i = 0; $i < $calls; $i++) {
                $op();
            }
            $stats = $r->info('commandstats');
            if (is_array($cmd)) {
                // Several commands per op: their time together, per op.
                $seen[$name][] = array_sum(array_map(static fn ($c) => cmd_stat($stats, $c)[1], $cmd)) / $calls;
                continue;
            }
            [$n, $usec] = cmd_stat($stats, $cmd);
            $seen[$name][] = $usec / max(1, $n);
        }
    }
    return $seen;
}

/**
 * The Lua engine's cost inside Valkey as a multiple of the empty script (issue 25): an empty
 * script (`return 1` by EVALSHA, no KEYS or ARGV) and acquire() deciding by the script
 * (engine lua) for the global bucket, a hot shop (global + hot_lane + hot_shop) and
 * `auto_hot` (random shops, as acquire_auto_hot), in this Valkey, from this one process.
 * Each case's cost is `INFO commandstats` EVALSHA µs per call over $calls calls; the cases
 * run in turn, $rounds times, and the best round per case counts: on a machine shared with
 * other load the best round is the least disturbed one, and all cases get the same chances.
 */
function lua_cost(int $rounds, int $calls): array
{
    global $limiter, $tcp, $always, $shops;
    $r = admin();
    $empty = $r->script('load', 'return 1');
    $global = $limiter($tcp, 'lua-cost');
    $hot = $limiter($tcp, 'lua-cost-hot', ['hot_lane' => $always, 'hot_shop' => $always, 'hot_shops' => ['flash']]);
    $auto = $limiter($tcp, 'lua-cost-auto', ['auto_hot' => true]);
    $ops = [
        'empty' => static fn () => $r->evalSha($empty, [], 0),
        'global' => static fn () => $global->acquire($shops()),
        'hot' => static fn () => $hot->acquire('flash'),
        'auto_hot' => static fn () => $auto->acquire($shops()),
    ];
    $seen = stat_rounds($r, array_map(static fn ($op) => ['evalsha', $op], $ops), $rounds, $calls);
    $best = array_map(static fn (array $v) => round(min($v), 2), $seen);
    $out = ['rounds' => $rounds, 'calls' => $calls, 'best_us' => $best, 'median_us' => [], 'x_empty' => []];
    foreach ($seen as $name => $v) {
        sort($v);
        $out['median_us'][$name] = round($v[intdiv(count($v), 2)], 2);
        if ($name !== 'empty') {
            $out['x_empty'][$name] = round($best[$name] / max(0.01, $best['empty']), 1);
        }
    }
    return $out;
}

/**
 * What a decision costs against its floor (issue 43): for the global bucket and a hot shop,
 * alone and with a lease (`in_flight`), an endpoint and a priority class, acquire()
 * deciding by the script (engine lua) and by the module (engine module), and the case's
 * floor script: `TIME`, one `MGET` of as many keys as the decision reads and one
 * `SET ... PX` per bucket it writes, nothing else (what any script deciding on the store's
 * clock must spend). `INFO commandstats` µs per call (EVALSHA; CG.DECIDE), $calls calls per
 * round, the cases in turn, $rounds rounds, the best round per case (as lua_cost). The
 * module's yardstick is the same reads and writes as plain commands, one at a time (`MGET`
 * and each `SET ... PX`, their µs together per decision): what Valkey spends on the keys
 * alone, before any decision.
 */
function decision_cost(int $rounds, int $calls): array
{
    global $limiter, $tcp, $always, $shops;
    $r = admin();
    $hot = ['hot_lane' => $always, 'hot_shop' => $always, 'hot_shops' => ['flash']];
    // name => [options, acquire's arguments after the shop, keys read, buckets written]
    $cases = [
        'global' => [[], [], 4, 1],
        'global_lease' => [['in_flight' => ['global' => 1_000_000, 'lease_seconds' => 600]], [], 5, 1],
        'global_endpoint' => [['endpoints' => ['confirm' => $always]], [1, 0.0, 'confirm'], 5, 2],
        'global_priority' => [['priorities' => ['normal' => 0.2]], [1, 0.0, null, 'normal'], 4, 1],
        'hot' => [$hot, [], 6, 3],
        'hot_lease' => [$hot + ['in_flight' => ['global' => 1_000_000, 'lease_seconds' => 600]], [], 7, 3],
        'hot_endpoint' => [$hot + ['endpoints' => ['confirm' => $always]], [1, 0.0, 'confirm'], 7, 4],
        'hot_priority' => [$hot + ['priorities' => ['normal' => 0.2]], [1, 0.0, null, 'normal'], 6, 3],
        'auto_hot' => [['auto_hot' => true], [], 4, 1],
    ];
    $ops = [];
    $floors = [];
    foreach ($cases as $name => [$options, $rest, $reads, $writes]) {
        foreach (['lua' => 'evalsha', 'module' => 'CG.DECIDE'] as $engine => $cmd) {
            $l = $limiter($tcp, "cost-$name-$engine", ['engine' => $engine] + $options);
            $shop = str_starts_with($name, 'hot') ? static fn () => 'flash' : $shops;
            $ops["$name/$engine"] = [$cmd, static fn () => $l->acquire($shop(), ...$rest)];
        }
        $key = "$reads/$writes";
        if (!isset($floors[$key])) {
            $keys = array_map(static fn ($i) => "{cg:floor}:k$i", range(1, $reads));
            $lua = "local t = redis.call('TIME')\nlocal now = t[1] * 1000000 + t[2]\n"
                . 'local v = redis.call(\'MGET\', ' . implode(', ', array_map(static fn ($i) => "KEYS[$i]", range(1, $reads))) . ")\n";
            for ($i = 1; $i <= $writes; $i++) {
                $lua .= "redis.call('SET', KEYS[$i], now, 'PX', 1000)\n";
            }
            $lua .= "return {0, 0, now, -1}\n";
            $sha = $r->script('load', $lua);
            $floors[$key] = true;
            $ops["floor/$key"] = ['evalsha', static fn () => $r->evalSha($sha, $keys, $reads)];
            // The module's yardstick: the same reads and writes as plain commands, one at a
            // time (one MGET, one SET ... PX per bucket written, a bucket's stored text),
            // their time in Valkey per decision. No decision in any engine does less.
            $value = '1796645040123456:1000:5000:';
            $ops["cmds/$key"] = [['mget', 'set'], static function () use ($r, $keys, $writes, $value) {
                $r->mget($keys);
                for ($i = 0; $i < $writes; $i++) {
                    $r->rawCommand('SET', $keys[$i], $value, 'PX', 1000);
                }
            }];
        }
    }
    $seen = stat_rounds($r, $ops, $rounds, $calls);
    $best = array_map(static fn (array $v) => round(min($v), 2), $seen);
    $out = ['rounds' => $rounds, 'calls' => $calls, 'cases' => []];
    foreach ($cases as $name => [, , $reads, $writes]) {
        $floor = $best["floor/$reads/$writes"];
        $out['cases'][$name] = [
            'reads' => $reads,
            'writes' => $writes,
            'floor_us' => $floor,
            'script_us' => $best["$name/lua"],
            'module_us' => $best["$name/module"],
            'x_floor' => round($best["$name/lua"] / max(0.01, $floor), 2),
            'cmds_us' => $best["cmds/$reads/$writes"],
            'module_x_cmds' => round($best["$name/module"] / max(0.01, $best["cmds/$reads/$writes"]), 2),
        ];
    }
    return $out;
}

if ($only === '' || $only === 'decision_cost') {
    $dc = $results['decision_cost'] = decision_cost($quick ? 9 : 15, $quick ? 1000 : 2000);
    fprintf(STDERR, "decision cost (best of %d rounds of %d calls, us per call in Valkey):\n", $dc['rounds'], $dc['calls']);
    foreach ($dc['cases'] as $name => $c) {
        fprintf(STDERR, "  %-16s script %6.2f us = %4.2fx its floor (%d reads, %d writes: %5.2f us); module %5.2f us = %4.2fx the plain MGET + SET PX (%4.2f us)\n", $name, $c['script_us'], $c['x_floor'], $c['reads'], $c['writes'], $c['floor_us'], $c['module_us'], $c['module_x_cmds'], $c['cmds_us']);
    }
}

if ($only === '' || $only === 'lua_cost') {
    $lc = $results['lua_cost'] = lua_cost($quick ? 7 : 15, $quick ? 1000 : 2000);
    fprintf(STDERR, "lua cost (best of %d rounds of %d calls, EVALSHA us per call in Valkey): empty script %.2f us\n", $lc['rounds'], $lc['calls'], $lc['best_us']['empty']);
    foreach ($lc['x_empty'] as $name => $x) {
        fprintf(STDERR, "  %-9s %6.2f us = %5.1fx the empty script\n", $name, $lc['best_us'][$name], $x);
    }
}

foreach ($only === '' || $only === 'flood' ? [true, false] : [] as $local) {
    $f = flood($local, $quick ? 3.0 : 10.0);
    $results['flood'][] = $f;
    fprintf(STDERR, "flood local_denials=%s: admitted %d (limit %.0f), %.4f round trips per denied, denied p50 %.2f us, ordinary %d/%d\n", $local ? 'on' : 'off', $f['admitted'], $f['admitted_limit'], $f['round_trips_per_denied'], $f['denied_p50_us'], $f['ordinary_allowed'], $f['ordinary_requests']);
}

/**
 * What the shared counters cost (checkout_guard.metrics, issue 40): bench/metrics_cost.php's
 * cases (acquire() deciding in Valkey, acquire() denied in the worker, Telemetry::measure())
 * in processes started with checkout_guard.metrics=1 and =0 in turn (PHP_INI_SYSTEM: one
 * setting per process), $rounds rounds, the order swapped every round so that a drift of the
 * machine falls on both sides. Per case: the median over the rounds of each process's p50,
 * on/off, and the spread of the rounds (max - min over the median, per side): a ratio
 * inside that spread is noise.
 */
function metrics_cost(int $rounds, int $calls): array
{
    global $tcp;
    $ext = (string) getenv('CG_EXT');
    if ($ext === '') {
        throw new RuntimeException('CG_EXT (the extension to load in the metrics processes) is not set: run scripts/bench-limiter.sh');
    }
    $seen = ['on' => [], 'off' => []];
    for ($round = 0; $round < $rounds; $round++) {
        foreach ($round % 2 === 0 ? ['on', 'off'] : ['off', 'on'] as $side) {
            $cmd = [PHP_BINARY, '-d', "extension=$ext", '-d', 'checkout_guard.metrics=' . ($side === 'on' ? '1' : '0'),
                __DIR__ . '/metrics_cost.php', $tcp, (string) $calls];
            $line = shell_exec(implode(' ', array_map('escapeshellarg', $cmd)));
            $r = json_decode((string) $line, true);
            if (!is_array($r) || $r['counted'] !== ($side === 'on')) {
                throw new RuntimeException("bench/metrics_cost.php with metrics $side: " . var_export($line, true));
            }
            foreach ($r['cases'] as $name => $c) {
                $seen[$side][$name][] = $c['p50_ns'];
            }
        }
    }
    $median = static function (array $v): float {
        sort($v);
        return (float) $v[intdiv(count($v), 2)];
    };
    $out = ['rounds' => $rounds, 'calls' => $calls, 'cases' => []];
    foreach ($seen['on'] as $name => $on) {
        $off = $seen['off'][$name];
        [$mOn, $mOff] = [$median($on), $median($off)];
        $out['cases'][$name] = [
            'on_p50_us' => round($mOn / 1e3, 3),
            'off_p50_us' => round($mOff / 1e3, 3),
            'ratio' => round($mOn / max(1.0, $mOff), 3),
            'spread_on' => round((max($on) - min($on)) / max(1.0, $mOn), 3),
            'spread_off' => round((max($off) - min($off)) / max(1.0, $mOff), 3),
            // The best round of each side (the least disturbed by other load on a shared
            // machine, as lua_cost's): a steadier on/off than the medians where rounds vary.
            'on_best_us' => round(min($on) / 1e3, 3),
            'off_best_us' => round(min($off) / 1e3, 3),
            'best_ratio' => round(min($on) / max(1.0, min($off)), 3),
        ];
    }
    return $out;
}

if ($only === '' || $only === 'metrics') {
    $mc = $results['metrics'] = metrics_cost($quick ? 5 : 11, $quick ? 2000 : 5000);
    fprintf(STDERR, "metrics on vs off (checkout_guard.metrics; median of %d processes' p50 each, %d calls per case):\n", $mc['rounds'], $mc['calls']);
    foreach ($mc['cases'] as $name => $c) {
        fprintf(STDERR, "  %-21s on %9.3f us  off %9.3f us  = %.3fx  (rounds spread: on %.0f%%, off %.0f%%; best rounds %.3f / %.3f us = %.3fx)\n", $name, $c['on_p50_us'], $c['off_p50_us'], $c['ratio'], 100 * $c['spread_on'], 100 * $c['spread_off'], $c['on_best_us'], $c['off_best_us'], $c['best_ratio']);
    }
}

/** 8 processes pushing 2x a bucket's rate: admitted against capacity + rate * t. */
function accuracy(float $seconds): array
{
    global $tcp;
    $rate = 100.0;
    $capacity = 20;
    $procs = 8;
    $l = new RateLimiter(['name' => 'accuracy', 'url' => $tcp, 'global' => ['capacity' => $capacity, 'refill_per_second' => $rate], 'engine' => 'lua']);
    $l->reset();
    $pace = 1 / (2 * $rate / $procs);
    $startAt = microtime(true) + 0.3;
    $files = [];
    $pids = [];
    for ($i = 0; $i < $procs; $i++) {
        $files[$i] = tempnam(sys_get_temp_dir(), 'cg-acc');
        $pid = pcntl_fork();
        if ($pid === 0) {
            while (microtime(true) < $startAt) {
                usleep(500);
            }
            $next = $startAt + $i * $pace / $procs;
            $allowed = 0;
            $first = $last = null;
            while ($next < $startAt + $seconds) {
                $now = microtime(true);
                if ($now < $next) {
                    usleep((int) (($next - $now) * 1e6));
                }
                $next += $pace;
                $t = microtime(true);
                $allowed += (int) $l->acquire('shop-' . $i)->isAllowed();
                $first ??= $t;
                $last = microtime(true);
            }
            file_put_contents($files[$i], json_encode([$allowed, $first, $last]));
            posix_kill(getmypid(), SIGKILL);
        }
        $pids[] = $pid;
    }
    foreach ($pids as $pid) {
        pcntl_waitpid($pid, $status);
    }
    $allowed = 0;
    $first = INF;
    $last = 0.0;
    foreach ($files as $f) {
        [$a, $f0, $f1] = json_decode((string) file_get_contents($f), true, 512, JSON_THROW_ON_ERROR);
        unlink($f);
        $allowed += $a;
        $first = min($first, $f0);
        $last = max($last, $f1);
    }
    // t: from the first request sent to the last answer received, over all processes.
    $t = $last - $first;
    $limit = $capacity + $rate * $t;
    return ['procs' => $procs, 'seconds' => round($t, 3), 'offered_per_second' => 2 * $rate, 'rate' => $rate, 'capacity' => $capacity, 'admitted' => $allowed, 'limit' => $limit, 'ratio' => round($allowed / $limit, 4)];
}

if ($only === '' || $only === 'accuracy') {
    $results['accuracy'] = accuracy($quick ? 3.0 : 30.0);
    fprintf(STDERR, "accuracy: admitted %d of capacity + rate*t = %.0f (%.2f%%)\n", $results['accuracy']['admitted'], $results['accuracy']['limit'], 100 * $results['accuracy']['ratio']);
}
file_put_contents($out, json_encode($results, JSON_PRETTY_PRINT));
