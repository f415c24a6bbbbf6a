<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use CheckoutGuard\Telemetry;
use Random\Engine\Mt19937;
use Random\Randomizer;

/**
 * Worker processes forked from the test process (after module start-up, so they share the
 * extension's local denial table, as php-fpm workers do). Each answers JSON commands, one a
 * line, over a socket pair: acquire, markHot, unmarkHot, reset. Each command builds its
 * RateLimiter anew (a limiter object per request, as in php-fpm).
 */
final class ModelWorkers
{
    /** @var list<resource> */
    private array $socks = [];
    /** @var list<int> */
    private array $pids = [];

    /** @param bool $localDenials false: checkout_guard.local_denials=0 in the workers */
    public function __construct(private int $count, private bool $localDenials = true)
    {
        $this->spawn();
    }

    public function count(): int
    {
        return $this->count;
    }

    private function spawn(): void
    {
        // Events buffered in this process would be written again by every child.
        Telemetry::flush();
        for ($i = 0; $i < $this->count; $i++) {
            $pair = stream_socket_pair(STREAM_PF_UNIX, STREAM_SOCK_STREAM, STREAM_IPPROTO_IP);
            $pid = pcntl_fork();
            if ($pid < 0) {
                throw new \RuntimeException('pcntl_fork failed');
            }
            if ($pid === 0) {
                fclose($pair[0]);
                foreach ($this->socks as $s) {
                    fclose($s);
                }
                self::serve($pair[1], $this->localDenials);
            }
            fclose($pair[1]);
            stream_set_timeout($pair[0], 30);
            $this->socks[$i] = $pair[0];
            $this->pids[$i] = $pid;
        }
    }

    /** The worker's loop; never returns (no PHPUnit shutdown, no destructors in a child). */
    private static function serve($sock, bool $localDenials): never
    {
        try {
            if (!$localDenials) {
                ini_set('checkout_guard.local_denials', '0');
            }
            stream_set_timeout($sock, 86400);
            while (true) {
                $line = fgets($sock);
                if ($line === false) {
                    if (!feof($sock) && stream_get_meta_data($sock)['timed_out']) {
                        continue;
                    }
                    break;
                }
                $cmd = json_decode($line, true);
                if (($cmd['op'] ?? '') === 'exit') {
                    break;
                }
                try {
                    $reply = self::handle($cmd);
                } catch (\Throwable $e) {
                    $reply = ['error' => get_class($e) . ': ' . $e->getMessage()];
                }
                fwrite($sock, json_encode($reply, JSON_THROW_ON_ERROR) . "\n");
            }
        } catch (\Throwable) {
        }
        posix_kill(getmypid(), SIGKILL);
        exit(1);
    }

    private static function handle(array $cmd): array
    {
        $l = new RateLimiter($cmd['options']);
        switch ($cmd['op']) {
            case 'acquire':
                $d = $l->acquire($cmd['shop'], $cmd['n']);
                $retry = $d->retryAfter();
                return [
                    'allowed' => $d->isAllowed(),
                    'reason' => $d->reason(),
                    'remaining' => $d->remaining(),
                    'retryAfter' => is_finite($retry) ? $retry : (string) $retry,
                    'isHotShop' => $d->isHotShop(),
                    'wouldAllow' => $d->wouldAllow(),
                    'isShadow' => $d->isShadow(),
                    'pid' => getmypid(),
                ];
            case 'markHot':
                $l->markHot($cmd['shop'], $cmd['ttl']);
                return ['ok' => true];
            case 'unmarkHot':
                $l->unmarkHot($cmd['shop']);
                return ['ok' => true];
            case 'reset':
                $l->reset();
                return ['ok' => true];
            case 'feedback':
                $l->feedback($cmd['shop'], $cmd['status'], $cmd['retryAfter']);
                return ['ok' => true];
        }
        return ['error' => 'unknown command ' . json_encode($cmd)];
    }

    /** Sends one command to worker `$i`, returns its answer (throws when it died or hung). */
    public function call(int $i, array $cmd): array
    {
        $sock = $this->socks[$i];
        if (@fwrite($sock, json_encode($cmd, JSON_THROW_ON_ERROR) . "\n") === false) {
            throw new \RuntimeException("worker $i (pid {$this->pids[$i]}) is gone");
        }
        $line = fgets($sock);
        if ($line === false) {
            $why = stream_get_meta_data($sock)['timed_out'] ? 'did not answer within 30 s' : 'died';
            throw new \RuntimeException("worker $i (pid {$this->pids[$i]}) $why" . self::status($this->pids[$i]));
        }
        return json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    }

    private static function status(int $pid): string
    {
        $r = pcntl_waitpid($pid, $st, WNOHANG);
        if ($r === $pid && pcntl_wifsignaled($st)) {
            return ' (signal ' . pcntl_wtermsig($st) . ')';
        }
        if ($r === $pid && pcntl_wifexited($st)) {
            return ' (exit ' . pcntl_wexitstatus($st) . ')';
        }
        return '';
    }

    /** Stops every worker and starts new ones (after one died or hung). */
    public function respawn(): void
    {
        $this->stop();
        $this->spawn();
    }

    public function stop(): void
    {
        foreach ($this->socks as $i => $sock) {
            @fwrite($sock, "{\"op\":\"exit\"}\n");
            fclose($sock);
        }
        foreach ($this->pids as $pid) {
            for ($k = 0; $k < 100 && pcntl_waitpid($pid, $st, WNOHANG) === 0; $k++) {
                usleep(10_000);
            }
            if (pcntl_waitpid($pid, $st, WNOHANG) === 0) {
                posix_kill($pid, SIGKILL);
                pcntl_waitpid($pid, $st);
            }
        }
        $this->socks = [];
        $this->pids = [];
    }
}

/**
 * The model-based test's driver: generates a random sequence of operations from a seed,
 * runs it against the real extension (ModelWorkers) and the test's own Valkey, checks
 * every decision against LimiterModel, and shrinks a failing sequence.
 *
 * A sequence is data: {seed, options, ops}; each op carries everything it needs (worker,
 * database, shop, tokens, TTL), so a sequence runs again the same way, on fresh state (a
 * FLUSHALL and a new limiter name), which is what the shrinker does.
 *
 * Against a ManagedServer (a managed service: TLS only, the `checkout` ACL user, no
 * SELECT, FLUSHALL, CONFIG) the same sequences run as that user: the limiter with
 * `engine` lua and `tls` cafile, the CLI with `--tls-cafile`, database 0 only (generate()
 * with $databases 1), FLUSHALL done as SCAN + UNLINK of every key
 * (ManagedServer::unlinkAll), the restart on the same port (ManagedServer::restart).
 */
final class ModelDriver
{
    public const WORKERS = 3;
    public const RATES = [0.001, 0.002, 0.0005];
    /** After data loss or an `unhot` from outside, local denials may last this long. */
    public const QUIET_SECONDS = 1.05;

    private ModelWorkers $workers;
    private ?\Redis $redis = null;
    private int $runs = 0;
    /** Per database and shop, when its last acquire ended (for $waitBeforeOutsideMark). */
    private array $lastAcquire = [[], []];
    /** Per database, when a decision last came back denied (local denials may follow). */
    private array $lastDenial = [0.0, 0.0];
    /**
     * What the adaptive operations exercised in the last run: decisions at a share below
     * 1000, denied by the provider's pause, finding the budget recovered; feedback that
     * decreased the share, paused.
     */
    public array $adaptStats = [];
    /** Operations checked, over every run (shrinking included). */
    public int $opsChecked = 0;

    /**
     * @param bool $waitAfterSet no acquire on that database for QUIET_SECONDS after an
     *   accepted CLI `set` (docs/operations.md, "Live limits": a worker denying locally asks Valkey
     *   again within a second; until then its local denials use the limits it knew)
     * @param bool $waitBeforeOutsideMark a hot mark set outside the workers (CLI `hot`, a
     *   SET by hand) only once 1.05 s passed since the shop's last decision on that database
     *   (docs/reliability.md, "How it decides": a shop marked hot elsewhere is answered as not hot by a
     *   local denial for up to 1 s); off: such a local denial must be exactly right
     * @param bool $localDenials checkout_guard.local_denials in the workers
     * @param list<string> $ignore decision fields not compared (to look past a known bug)
     */
    public function __construct(
        private ValkeyProcess|ManagedServer $valkey,
        private bool $waitAfterSet = true,
        private bool $waitBeforeOutsideMark = true,
        private bool $localDenials = true,
        private array $ignore = [],
    ) {
    }

    public function start(): void
    {
        $this->workers = new ModelWorkers(self::WORKERS, $this->localDenials);
    }

    public function stop(): void
    {
        $this->workers->stop();
    }

    // ---- generation ------------------------------------------------------------------

    /**
     * A random sequence: limiter options and 80-150 operations, on databases 0 and 1 (on 0
     * only with $databases 1: a managed service has no SELECT; the same draws, every
     * operation moved to database 0).
     */
    public static function generate(int $seed, ?int $length = null, int $databases = 2): array
    {
        if ($databases !== 1 && $databases !== 2) {
            throw new \InvalidArgumentException("databases must be 1 or 2, got $databases");
        }
        $r = new Randomizer(new Mt19937($seed));
        $pick = fn (array $a) => $a[$r->getInt(0, count($a) - 1)];
        $chance = fn (float $p) => $r->getInt(0, 999_999) < $p * 1_000_000;

        $gRate = $pick(self::RATES);
        $gCap = $r->getInt(3, 12);
        $options = ['global' => ['capacity' => $gCap, 'refill_per_second' => $gRate]];
        $slower = array_values(array_filter(self::RATES, fn ($x) => $x <= $gRate));
        foreach (['hot_lane', 'hot_shop'] as $lane) {
            if ($chance(0.7)) {
                $options[$lane] = ['capacity' => $r->getInt(2, $gCap), 'refill_per_second' => $pick($slower)];
            }
        }
        $shops = array_slice(['s-a', 's-b', 's-c', 's-d', 's-e', 's-f'], 0, $r->getInt(4, 6));
        if ($chance(0.4)) {
            $options['hot_shops'] = [$shops[count($shops) - 1]];
        }
        if ($chance(0.5)) {
            $options['auto_hot'] = [
                'window_seconds' => 3600,
                'share' => $pick([0.3, 0.5]),
                'ttl_seconds' => $pick([1, 2, 3600]),
                'min_tokens' => $r->getInt(1, 5),
            ];
        }
        $base = (new LimiterModel($options))->base();
        $maxN = min(array_map(fn ($b) => $b[0], $base));

        // What the generator tracks so that its operations make sense: the databases a
        // worker has decided on since the last data loss (sets before are refused), the
        // live limits (to propose mostly valid changes), shops it marked.
        $decided = [false, false];
        $live = [[], []];
        $marked = [[], []];
        $restarted = false;
        $ops = [];
        $length ??= $r->getInt(80, 150);
        $weights = [
            'acquire' => 775, 'markHot' => 30, 'unmarkHot' => 30, 'shortMark' => 30,
            'cliHot' => 15, 'cliUnhot' => 10, 'set' => 55, 'reset' => 30, 'flushall' => 15,
            'restart' => 5, 'mode' => 30,
        ];
        $total = array_sum($weights);
        while (count($ops) < $length) {
            $x = $r->getInt(0, $total - 1);
            foreach ($weights as $kind => $w) {
                if ($x < $w) {
                    break;
                }
                $x -= $w;
            }
            $db = $r->getInt(0, 9) < 6 || $databases === 1 ? 0 : 1;
            $w = $r->getInt(0, self::WORKERS - 1);
            $hotShops = array_keys($marked[$db] + array_fill_keys($options['hot_shops'] ?? [], true));
            $shop = $hotShops !== [] && $chance(0.35) ? $pick($hotShops) : $pick($shops);
            if ($kind === 'restart' && $restarted) {
                $kind = 'acquire';
            }
            if (($kind === 'set' || $kind === 'mode') && !$decided[$db]) {
                $kind = 'acquire';
            }
            switch ($kind) {
                case 'acquire':
                    $n = $chance(0.7) ? 1 : $r->getInt(1, $maxN);
                    $ops[] = ['op' => 'acquire', 'w' => $w, 'db' => $db, 'shop' => $shop, 'n' => $n];
                    $decided[$db] = true;
                    break;
                case 'markHot':
                case 'cliHot':
                    $shop = $pick($shops);
                    $ops[] = $kind === 'markHot'
                        ? ['op' => 'markHot', 'w' => $w, 'db' => $db, 'shop' => $shop]
                        : ['op' => 'cliHot', 'db' => $db, 'shop' => $shop];
                    $marked[$db][$shop] = true;
                    break;
                case 'unmarkHot':
                case 'cliUnhot':
                    $ops[] = $kind === 'unmarkHot'
                        ? ['op' => 'unmarkHot', 'w' => $w, 'db' => $db, 'shop' => $shop]
                        : ['op' => 'cliUnhot', 'db' => $db, 'shop' => $shop];
                    unset($marked[$db][$shop]);
                    break;
                case 'shortMark':
                    $ops[] = ['op' => 'shortMark', 'db' => $db, 'shop' => $pick($shops), 'ms' => $r->getInt(300, 600)];
                    break;
                case 'set':
                    $changes = self::proposeChange($r, $base, $live[$db]);
                    $ops[] = ['op' => 'set', 'db' => $db, 'changes' => $changes];
                    $next = $live[$db];
                    foreach ($changes as [$lane, $bucket]) {
                        if ($bucket === null) {
                            unset($next[$lane]);
                        } else {
                            $next[$lane] = $bucket;
                        }
                    }
                    if (LimiterModel::refusal($base, $next) === null) {
                        $live[$db] = $next;
                    }
                    break;
                case 'reset':
                    $ops[] = ['op' => 'reset', 'w' => $w, 'db' => $db];
                    break;
                case 'mode':
                    $ops[] = ['op' => 'mode', 'db' => $db, 'mode' => $pick(['shadow', 'shadow', 'enforce', 'default'])];
                    break;
                case 'flushall':
                case 'restart':
                    $ops[] = ['op' => $kind];
                    $decided = [false, false];
                    $live = [[], []];
                    $marked = [[], []];
                    $restarted = $restarted || $kind === 'restart';
                    break;
            }
        }
        return self::withAdaptive(['seed' => $seed, 'options' => $options, 'ops' => $ops], $databases, $shops);
    }

    /**
     * The `adaptive` option on about half the seeds, drawn from a generator of its own (a
     * sequence without it is the very one the seed gave before the option existed): the
     * option, and feedback (429 / 503 / 200, with or without a Retry-After of a fraction of
     * a second), sleeps and waits for the budget's recovery inserted between the
     * operations.
     */
    private static function withAdaptive(array $seq, int $databases, array $shops): array
    {
        // The salt (114) is chosen so that the CI seeds have it: 1 the defaults, 2 and 3 a
        // fast recovery (2 s; 3 s with 503 a throttling status too), the managed service's
        // 69 a 2 s recovery on the Lua engine.
        $r = new Randomizer(new Mt19937(crc32('adaptive114:' . $seq['seed'])));
        $pick = fn (array $a) => $a[$r->getInt(0, count($a) - 1)];
        $chance = fn (float $p) => $r->getInt(0, 999_999) < $p * 1_000_000;
        if (!$chance(0.5)) {
            return $seq;
        }
        $seq['options']['adaptive'] = $pick([
            true,
            ['recover_seconds' => 2],
            ['recover_seconds' => 3, 'decrease' => 0.5, 'statuses' => [429, 503]],
            ['min_share' => 0.3, 'recover_seconds' => 4],
            ['min_share' => 1.0],
            ['recover_seconds' => 600, 'decrease' => 0.8],
        ]);
        $ops = [];
        foreach ($seq['ops'] as $op) {
            while ($chance(0.08)) {
                $x = $r->getInt(0, 99);
                $db = $r->getInt(0, 9) < 6 || $databases === 1 ? 0 : 1;
                if ($x < 75) {
                    $ops[] = [
                        'op' => 'feedback', 'w' => $r->getInt(0, self::WORKERS - 1), 'db' => $db, 'shop' => $pick($shops),
                        'status' => $pick([429, 429, 429, 429, 503, 200]),
                        'retryAfter' => $chance(0.3) ? $pick([0.3, 0.5, 0.8]) : null,
                    ];
                } elseif ($x < 90) {
                    $ops[] = ['op' => 'sleep', 'ms' => $r->getInt(100, 1200)];
                } else {
                    $ops[] = ['op' => 'recover', 'db' => $db];
                }
            }
            $ops[] = $op;
        }
        $seq['ops'] = $ops;
        return $seq;
    }

    /**
     * One CLI `set`: mostly a valid change of one bucket (sometimes two), sometimes one that
     * must be refused (capacity 0, a hot bucket above global, a bucket the constructor
     * does not configure), sometimes back to the constructor's value.
     *
     * @return list<array{0: string, 1: array{0: int, 1: float}|null}>
     */
    private static function proposeChange(Randomizer $r, array $base, array $live): array
    {
        $pick = fn (array $a) => $a[$r->getInt(0, count($a) - 1)];
        $chance = fn (float $p) => $r->getInt(0, 999_999) < $p * 1_000_000;
        $configured = array_keys($base);
        $lanes = [$pick($configured)];
        if (count($configured) > 1 && $chance(0.2)) {
            $other = array_values(array_diff($configured, $lanes));
            $lanes[] = $pick($other);
        }
        $unconfigured = array_values(array_diff(LimiterModel::LANES, $configured));
        if ($unconfigured !== [] && $chance(0.08)) {
            $lanes = [$pick($unconfigured)];
        }
        $limits = LimiterModel::applyLive($base, $live);
        $changes = [];
        foreach ($lanes as $lane) {
            if (isset($base[$lane]) && $chance(0.25)) {
                $changes[] = [$lane, null];
                continue;
            }
            if ($lane === 'global') {
                $hotMax = max([1, ...array_map(fn ($l) => $limits[$l][0] ?? 1, ['hot_lane', 'hot_shop'])]);
                $cap = match (true) {
                    $chance(0.06) => 0,
                    $chance(0.2) => $r->getInt(1, 3),
                    default => $r->getInt($hotMax, 14),
                };
                $rate = $pick(self::RATES);
                $changes[] = ['global', [$cap, $rate]];
                $limits['global'] = [$cap, $rate];
            } else {
                [$gCap, $gRate] = $limits['global'];
                $cap = $chance(0.15) ? $gCap + $r->getInt(1, 3) : $r->getInt(1, max(1, $gCap));
                $slower = array_values(array_filter(self::RATES, fn ($x) => $x <= $gRate));
                $rate = $chance(0.15) ? $pick(self::RATES) : $pick($slower);
                $changes[] = [$lane, [$cap, $rate]];
            }
        }
        return $changes;
    }

    public static function describeOp(array $op): string
    {
        $w = isset($op['w']) ? "w{$op['w']} " : '';
        $db = isset($op['db']) ? " db{$op['db']}" : '';
        return match ($op['op']) {
            'acquire' => "{$w}acquire$db {$op['shop']} n={$op['n']}",
            'markHot', 'unmarkHot' => "{$w}{$op['op']}$db {$op['shop']}" . ($op['op'] === 'markHot' ? ' 3600' : ''),
            'reset' => "{$w}reset$db",
            'shortMark' => "SET hot$db {$op['shop']} PX {$op['ms']}",
            'cliHot' => "cli hot$db {$op['shop']} --ttl 3600 --new-limiter",
            'cliUnhot' => "cli unhot$db {$op['shop']} --new-limiter",
            'set' => "cli set$db " . implode(' ', self::setArgs($op['changes'])),
            'mode' => "cli set$db mode={$op['mode']}",
            'flushall' => 'FLUSHALL',
            'restart' => 'restart Valkey',
            'feedback' => "{$w}feedback$db {$op['shop']} {$op['status']}" . ($op['retryAfter'] === null ? '' : " Retry-After {$op['retryAfter']}"),
            'sleep' => "sleep {$op['ms']} ms",
            'recover' => "wait$db until the budget recovered",
            default => json_encode($op),
        };
    }

    /** @return list<string> the CLI's BUCKET=CAPACITY/RATE arguments */
    private static function setArgs(array $changes): array
    {
        return array_map(
            fn ($c) => $c[1] === null ? "{$c[0]}=default" : sprintf('%s=%d/%s', $c[0], $c[1][0], self::rate($c[1][1])),
            $changes
        );
    }

    private static function rate(float $r): string
    {
        return rtrim(rtrim(sprintf('%.6F', $r), '0'), '.');
    }

    public static function describeSequence(array $seq, ?int $upTo = null): string
    {
        $lines = [];
        foreach ($seq['ops'] as $i => $op) {
            if ($upTo !== null && $i > $upTo) {
                break;
            }
            $lines[] = sprintf('  #%d %s', $i, self::describeOp($op));
        }
        return implode("\n", $lines);
    }

    // ---- running ---------------------------------------------------------------------

    /** A client of the server: on a ManagedServer, over TLS as the `checkout` user. */
    private function redis(): \Redis
    {
        return $this->redis ??= $this->valkey->client();
    }

    private function url(int $db): string
    {
        if ($this->valkey instanceof ManagedServer) {
            if ($db !== 0) {
                throw new \LogicException("database $db on a managed service (database 0 only: generate() with \$databases 1)");
            }
            return $this->valkey->url();
        }
        return $this->valkey->url() . '/' . $db;
    }

    /** `checkout-guard limiter` on `$db` (on a ManagedServer: over TLS, its CA file). */
    private function cli(int $db, string $name, string ...$args): array
    {
        if ($this->valkey instanceof ManagedServer) {
            return Cli::limiter($this->url($db), $name, '--tls-cafile', $this->valkey->cafile(), ...$args);
        }
        return Cli::limiter($this->url($db), $name, ...$args);
    }

    private static function sleepUntil(float $t): void
    {
        while (($left = $t - microtime(true)) > 0) {
            usleep((int) ceil($left * 1e6));
        }
    }

    /**
     * Runs `$seq` on fresh state. Returns ['ok' => bool, 'checked' => operations done,
     * 'seconds' => ..., 'failure' => null or [index, op, sig, message]].
     */
    public function run(array $seq): array
    {
        $name = sprintf('model-%d-%d-%s', $seq['seed'], ++$this->runs, bin2hex(random_bytes(3)));
        $this->flushAll();
        $model = new LimiterModel($seq['options']);
        $t0 = microtime(true);
        $quietUntil = [0.0, 0.0];
        $this->lastAcquire = [[], []];
        $this->lastDenial = [0.0, 0.0];
        $this->adaptStats = ['scaled' => 0, 'provider' => 0, 'recovered' => 0, 'decreased' => 0, 'paused' => 0];
        $restartedAt = null;
        $checked = 0;
        foreach ($seq['ops'] as $i => $op) {
            try {
                $fail = $this->step($seq, $name, $op, $model, $t0, $quietUntil, $restartedAt);
            } catch (\Throwable $e) {
                $fail = ['sig' => "{$op['op']}:exception", 'message' => get_class($e) . ': ' . $e->getMessage()];
                if (str_starts_with($e->getMessage(), 'worker ')) {
                    $this->workers->respawn();
                }
            }
            if ($fail !== null) {
                $this->opsChecked += $checked;
                return [
                    'ok' => false, 'checked' => $checked, 'name' => $name, 'seconds' => microtime(true) - $t0,
                    'failure' => $fail + ['index' => $i, 'op' => $op],
                ];
            }
            $checked++;
        }
        $this->opsChecked += $checked;
        return ['ok' => true, 'checked' => $checked, 'name' => $name, 'seconds' => microtime(true) - $t0, 'failure' => null];
    }

    /** FLUSHALL; on a ManagedServer (where the ACL refuses it) SCAN + UNLINK of every key. */
    private function flushAll(): void
    {
        $flush = fn (\Redis $r) => $this->valkey instanceof ManagedServer ? $this->valkey->unlinkAll($r) : $r->flushAll();
        try {
            $flush($this->redis());
        } catch (\RedisException) {
            $this->redis = null;
            $flush($this->redis());
        }
    }

    /**
     * The workers' options: the sequence's, the name, the URL, the timeout (on_unavailable
     * and the rest at their defaults); on a ManagedServer also engine lua (what a managed
     * service runs: no module) and the CA file.
     */
    private function options(array $seq, string $name, int $db): array
    {
        $managed = $this->valkey instanceof ManagedServer
            ? ['engine' => 'lua', 'tls' => ['cafile' => $this->valkey->cafile()]]
            : [];
        return $seq['options'] + ['name' => $name, 'url' => $this->url($db), 'timeout_ms' => 2000] + $managed;
    }

    /** One operation: done, checked against the model, the model moved on. Null when right. */
    private function step(array $seq, string $name, array $op, LimiterModel &$model, float $t0, array &$quietUntil, ?float &$restartedAt): ?array
    {
        $db = $op['db'] ?? 0;
        switch ($op['op']) {
            case 'acquire':
                // Never while a mark runs out (or an auto_hot window turns), never while a
                // local denial may outlive data loss or a change made outside the workers.
                $now = microtime(true);
                $until = $model->guardUntil(max($now, $quietUntil[$db]));
                if ($until > $now) {
                    self::sleepUntil($until);
                }
                $model->expire(microtime(true));
                $cmd = ['op' => 'acquire', 'options' => $this->options($seq, $name, $db), 'shop' => $op['shop'], 'n' => $op['n']];
                $ta = microtime(true);
                $got = $this->workers->call($op['w'], $cmd);
                $tb = microtime(true);
                $this->lastAcquire[$db][$op['shop']] = $tb;
                if (isset($got['error'])) {
                    return ['sig' => 'acquire:threw', 'message' => "acquire threw {$got['error']}\n  model: " . $model->describe($db)];
                }
                // Shadow mode (a live `set mode=shadow`): let through, the enforcement
                // decision in wouldAllow(); compared as enforcement's from here on.
                $shadow = $model->isShadow($db);
                if ($got['isShadow'] !== $shadow || ($shadow ? $got['allowed'] !== true : $got['wouldAllow'] !== $got['allowed'])) {
                    return [
                        'sig' => 'acquire:mode',
                        'message' => sprintf(
                            "mode differs: isShadow %s allowed %s wouldAllow %s, model %s\n  state before: %s",
                            json_encode($got['isShadow']),
                            json_encode($got['allowed']),
                            json_encode($got['wouldAllow']),
                            $shadow ? 'shadow' : 'enforce',
                            $model->describe($db)
                        ),
                    ];
                }
                $got['allowed'] = $got['wouldAllow'];
                if (!$got['allowed']) {
                    $this->lastDenial[$db] = $tb;
                }
                $branches = $model->hotAmbiguous($db, $op['shop'], $ta, $tb) ? [true, false] : [null];
                $first = null;
                foreach ($branches as $assume) {
                  foreach (self::shares($model, $db, $ta, $tb) as [$permille, $paused, $range]) {
                    $m = clone $model;
                    $want = $m->acquire($db, $op['shop'], $op['n'], $ta, $tb, $assume, $permille, $paused, $range);
                    $diff = array_diff_key(self::compare($want, $got, $tb - $t0), array_flip($this->ignore));
                    if ($diff === []) {
                        if ($model->adaptState($db) !== null) {
                            $k = $paused ? 'provider' : ($permille < 1000 ? 'scaled' : 'recovered');
                            $this->adaptStats[$k]++;
                        }
                        $model = $m;
                        return null;
                    }
                    $first ??= [$want, $diff];
                  }
                }
                [$want, $diff] = $first;
                $note = '';
                if ($got['reason'] === 'unavailable' && $restartedAt !== null) {
                    $note = sprintf(' (Valkey restarted %.2f s before: the reconnect was not transparent)', $ta - $restartedAt);
                }
                ksort($diff);
                return [
                    'sig' => 'acquire:' . implode(',', array_keys($diff)),
                    'message' => sprintf(
                        "decision differs: %s%s\n  model:  %s\n  actual: %s\n  state before: %s",
                        implode('; ', $diff),
                        $note,
                        self::showDecision($want),
                        self::showDecision($got),
                        $model->describe($db)
                    ),
                ];

            case 'markHot':
            case 'unmarkHot':
            case 'reset':
                $cmd = ['op' => $op['op'], 'options' => $this->options($seq, $name, $db), 'shop' => $op['shop'] ?? '', 'ttl' => 3600];
                $got = $this->workers->call($op['w'], $cmd);
                if (isset($got['error'])) {
                    return ['sig' => "{$op['op']}:threw", 'message' => "{$op['op']} threw {$got['error']}"];
                }
                match ($op['op']) {
                    'markHot' => $model->markHot($db, $op['shop']),
                    'unmarkHot' => $model->unmarkHot($db, $op['shop']),
                    'reset' => $model->reset($db),
                };
                return null;

            case 'shortMark':
                $this->beforeOutsideMark($db, $op['shop']);
                $r = $this->redis();
                if (!$this->valkey instanceof ManagedServer) {
                    $r->select($db);
                }
                $ta = microtime(true);
                $r->set("{cg:$name}:hot:{$op['shop']}", '1', ['px' => $op['ms']]);
                $tb = microtime(true);
                $model->markUntil($db, $op['shop'], $ta + $op['ms'] / 1000, $tb + $op['ms'] / 1000);
                return null;

            case 'cliHot':
            case 'cliUnhot':
                // --new-limiter: a mark may come before the limiter's first decision, and an
                // unmark after a FLUSHALL or a restart that left Valkey nothing of it.
                $args = $op['op'] === 'cliHot' ? ['hot', $op['shop'], '--ttl', '3600', '--new-limiter'] : ['unhot', $op['shop'], '--new-limiter'];
                if ($op['op'] === 'cliHot') {
                    $this->beforeOutsideMark($db, $op['shop']);
                }
                [$code, $out, $err] = $this->cli($db, $name, ...$args);
                if ($code !== 0) {
                    return ['sig' => "{$op['op']}:exit", 'message' => "`limiter {$args[0]}` exit $code: " . trim($err . $out)];
                }
                if ($op['op'] === 'cliHot') {
                    $model->markHot($db, $op['shop']);
                } else {
                    $model->unmarkHot($db, $op['shop']);
                    $quietUntil[$db] = microtime(true) + self::QUIET_SECONDS;
                }
                return null;

            case 'set':
                $before = $model->describe($db);
                $changes = [];
                foreach ($op['changes'] as [$lane, $bucket]) {
                    $changes[$lane] = $bucket;
                }
                [$code, $out, $err] = $this->cli($db, $name, 'set', ...self::setArgs($op['changes']));
                $why = $model->set($db, $changes);
                $want = $why === null ? 0 : 2;
                if ($code !== $want) {
                    return [
                        'sig' => 'set:exit',
                        'message' => sprintf(
                            "`limiter set` exit %d, model expects %d (%s)\n  cli: %s\n  state before: %s",
                            $code,
                            $want,
                            $why ?? 'valid',
                            trim(str_replace("\n", ' | ', trim($err . ' ' . $out))),
                            $before
                        ),
                    ];
                }
                if ($this->waitAfterSet && $why === null) {
                    $quietUntil[$db] = microtime(true) + self::QUIET_SECONDS;
                }
                return null;

            case 'mode':
                [$code, $out, $err] = $this->cli($db, $name, 'set', "mode={$op['mode']}");
                $why = $model->setMode($db, $op['mode']);
                if ($code !== ($why === null ? 0 : 2)) {
                    return ['sig' => 'mode:exit', 'message' => "`limiter set mode={$op['mode']}` exit $code, model: " . ($why ?? 'valid') . ' | ' . trim($err . $out)];
                }
                // A worker denying locally answers in the mode it knew for up to 250 ms
                // (docs/operations.md, "Rolling out a limit").
                $quietUntil[$db] = microtime(true) + self::QUIET_SECONDS;
                return null;

            case 'feedback':
                // A local denial learned before this answer would go on answering as the
                // budget was (docs: a worker denying locally asks Valkey again within a
                // second): the answer only once every local denial on that database ran out.
                if ($model->throttles($op['status'])) {
                    self::sleepUntil($this->lastDenial[$db] + self::QUIET_SECONDS);
                }
                $cmd = ['op' => 'feedback', 'options' => $this->options($seq, $name, $db), 'shop' => $op['shop'],
                    'status' => $op['status'], 'retryAfter' => $op['retryAfter']];
                $ta = (int) floor(microtime(true) * 1e6);
                $got = $this->workers->call($op['w'], $cmd);
                $tb = (int) ceil(microtime(true) * 1e6);
                if (isset($got['error'])) {
                    return ['sig' => 'feedback:threw', 'message' => "feedback threw {$got['error']}"];
                }
                $r = $this->redis();
                if (!$this->valkey instanceof ManagedServer) {
                    $r->select($db);
                }
                $raw = $r->get("{cg:$name}:adapt");
                $before = $model->describe($db);
                $was = $model->adaptState($db);
                $now = LimiterModel::decodeAdapt($raw);
                if ($now !== null && $now !== $was) {
                    $this->adaptStats[($was[0] ?? 0) !== $now[0] ? 'decreased' : 'paused']++;
                }
                $why = $model->reconcileFeedback($db, $op['status'], (int) round(($op['retryAfter'] ?? 0.0) * 1e6), $ta, $tb, LimiterModel::decodeAdapt($raw));
                if ($why !== null) {
                    return ['sig' => 'feedback:state', 'message' => "$why (stored " . json_encode($raw) . ")\n  state before: $before"];
                }
                return null;

            case 'sleep':
                usleep($op['ms'] * 1000);
                return null;

            case 'recover':
                // Until the share is back at the limits and any pause is over (at most 5 s).
                $a = $model->adaptive();
                $st = $model->adaptState($db);
                if ($a !== null && $st !== null) {
                    $until = max(LimiterModel::recoveredAt($st, $a['floor'], $a['recover']), $st[3]) / 1e6 + 0.02;
                    self::sleepUntil(min($until, microtime(true) + 5.0));
                }
                return null;

            case 'flushall':
                $this->flushAll();
                $model->flushAll();
                $quietUntil = array_fill(0, 2, microtime(true) + self::QUIET_SECONDS);
                return null;

            case 'restart':
                if ($this->valkey instanceof ManagedServer) {
                    $this->valkey->restart();
                    $this->redis = null;
                } else {
                    $this->valkey->stop();
                    $this->redis = null;
                    $this->valkey->start();
                }
                $model->flushAll();
                $restartedAt = microtime(true);
                $quietUntil = array_fill(0, 2, $restartedAt + self::QUIET_SECONDS);
                return null;
        }
        throw new \LogicException('unknown op ' . json_encode($op));
    }

    /**
     * The (share, paused, retry range) a decision made between `$ta` and `$tb` may have
     * been made at: both move one way with time, so every share from the start's to the
     * end's, and the pause if it held at the start (retryAfter: what is left of it).
     *
     * @return list<array{0: int, 1: bool, 2: ?array{0: float, 1: float}}>
     */
    private static function shares(LimiterModel $model, int $db, float $ta, float $tb): array
    {
        $a = $model->adaptive();
        $st = $model->adaptState($db);
        if ($a === null || $st === null) {
            return [[1000, false, null]];
        }
        $lo = (int) floor($ta * 1e6);
        $hi = (int) ceil($tb * 1e6);
        $out = [];
        if ($st[3] > $lo) {
            $out[] = [LimiterModel::permilleAt($st, $lo, $a['floor'], $a['recover']), true, [max(0, $st[3] - $hi) / 1e6, ($st[3] - $lo) / 1e6]];
        }
        if ($st[3] <= $hi) {
            $p0 = LimiterModel::permilleAt($st, $lo, $a['floor'], $a['recover']);
            $p1 = LimiterModel::permilleAt($st, $hi, $a['floor'], $a['recover']);
            for ($p = $p0; $p <= $p1; $p++) {
                $out[] = [$p, false, null];
            }
        }
        return $out;
    }

    private function beforeOutsideMark(int $db, string $shop): void
    {
        if ($this->waitBeforeOutsideMark && isset($this->lastAcquire[$db][$shop])) {
            self::sleepUntil($this->lastAcquire[$db][$shop] + self::QUIET_SECONDS);
        }
    }

    /** The fields of `$got` that differ from the model's `$want` (field => why). */
    public static function compare(array $want, array $got, float $elapsed): array
    {
        $diff = [];
        foreach (['allowed', 'reason', 'remaining', 'isHotShop'] as $f) {
            if ($want[$f] !== $got[$f]) {
                $diff[$f] = sprintf('%s %s, model %s', $f, json_encode($got[$f]), json_encode($want[$f]));
            }
        }
        $retry = $got['retryAfter'];
        if (!is_float($retry) && !is_int($retry)) {
            $diff['retryAfter'] = 'retryAfter ' . json_encode($retry) . ' (not finite)';
        } elseif (isset($want['retryRange'])) {
            // The provider's pause: what is left of it when the call ran.
            [$lo, $hi] = $want['retryRange'];
            if ($retry < $lo - 0.002 || $retry > $hi + 0.002) {
                $diff['retryAfter'] = sprintf('retryAfter %.6f, the pause left %.6f..%.6f', $retry, $lo, $hi);
            }
        } elseif ($want['allowed']) {
            if ($got['allowed'] && (float) $retry !== 0.0) {
                $diff['retryAfter'] = "retryAfter $retry on an allowed decision";
            }
        } elseif (!$want['retryExact']) {
            // A request above a bucket's capacity (lowered live): finite, not negative.
            if ($retry < 0) {
                $diff['retryAfter'] = "retryAfter $retry";
            }
        } else {
            // Below the model by at most what refilled since the sequence began.
            $lo = $want['retryAfter'] - $elapsed * LimiterModel::MAX_RATE / $want['minRate'] - 0.05;
            $hi = $want['retryAfter'] + 0.05;
            if ($retry < $lo || $retry > $hi) {
                $diff['retryAfter'] = sprintf('retryAfter %.3f, model %.3f (accepted %.3f..%.3f)', $retry, $want['retryAfter'], $lo, $hi);
            }
        }
        return $diff;
    }

    private static function showDecision(array $d): string
    {
        $retry = is_float($d['retryAfter']) || is_int($d['retryAfter']) ? sprintf('%.3f', $d['retryAfter']) : $d['retryAfter'];
        $s = sprintf(
            '%s reason=%s remaining=%d retryAfter=%s isHotShop=%s',
            $d['allowed'] ? 'allowed' : 'denied',
            $d['reason'],
            $d['remaining'],
            $retry,
            $d['isHotShop'] ? 'true' : 'false'
        );
        if (isset($d['lanes'])) {
            $s .= ' lanes=' . implode(',', $d['lanes']) . ($d['becameHot'] ? ' (becomes hot)' : '');
        }
        if (isset($d['permille']) && $d['permille'] < 1000) {
            $s .= " share={$d['permille']}";
        }
        if (isset($d['pid'])) {
            $s .= " (worker pid {$d['pid']})";
        }
        return $s;
    }

    // ---- shrinking -------------------------------------------------------------------

    /**
     * The shortest sequence found within `$budget` seconds that still fails the same way
     * (same kind of operation, same fields wrong): cut after the failing operation, then
     * chunks of operations removed (halves, quarters, ... single operations), each
     * candidate run on fresh state. Returns [sequence, failure, runs].
     */
    public function shrink(array $seq, array $failure, float $budget): array
    {
        $deadline = microtime(true) + $budget;
        $sig = $failure['sig'];
        $best = $seq;
        $best['ops'] = array_slice($seq['ops'], 0, $failure['index'] + 1);
        $bestFailure = $failure;
        $runs = 0;
        $chunk = max(1, intdiv(count($best['ops']), 2));
        while (microtime(true) < $deadline) {
            $progress = false;
            $i = 0;
            while ($i < count($best['ops']) && microtime(true) < $deadline) {
                $cand = $best;
                $cand['ops'] = array_merge(array_slice($best['ops'], 0, $i), array_slice($best['ops'], $i + $chunk));
                if ($cand['ops'] === []) {
                    $i += $chunk;
                    continue;
                }
                $res = $this->run($cand);
                $runs++;
                if (!$res['ok'] && $res['failure']['sig'] === $sig) {
                    $cand['ops'] = array_slice($cand['ops'], 0, $res['failure']['index'] + 1);
                    $best = $cand;
                    $bestFailure = $res['failure'];
                    $progress = true;
                } else {
                    $i += $chunk;
                }
            }
            if (!$progress) {
                if ($chunk === 1) {
                    break;
                }
                $chunk = max(1, intdiv($chunk, 2));
            }
        }
        return [$best, $bestFailure, $runs];
    }
}
