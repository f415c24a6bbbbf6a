<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/** A Valkey server of the test's own, to stop, pause and restart under a limiter. */
final class ValkeyProcess
{
    private string $dir;
    /** Fixed once started: a first start moves only if another process took the port. */
    public int $port;
    private bool $started = false;
    /** A cluster node's bus port (`--cluster-port`), 0 without cluster mode. */
    public int $bus = 0;

    public function __construct()
    {
        $this->dir = sys_get_temp_dir() . '/cg-valkey-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
        $this->port = self::freePort();
    }

    /** Every port this process handed out: none is handed out twice. */
    private static array $given = [];

    /**
     * A loopback port nobody listens on now, one this process never handed out before, and
     * one below the kernel's ephemeral range. bind(0) then close gives a released port out
     * again (a cluster node and another server then race for one port, and the loser
     * exits: "valkey did not start"); and a port in the ephemeral range can meanwhile
     * become the local end of any outgoing connection the tests make.
     */
    public static function freePort(): int
    {
        [$low] = array_map('intval', preg_split('/\s+/', trim((string) @file_get_contents('/proc/sys/net/ipv4/ip_local_port_range'))) ?: ['0']);
        for ($i = 0; $i < 1000; $i++) {
            // Below the range when it leaves room (Linux's default starts at 32768), else
            // whatever bind(0) gives.
            $want = $low >= 11024 ? random_int($low - 10000, $low - 1) : 0;
            $s = @stream_socket_server("tcp://127.0.0.1:$want");
            if ($s === false) {
                continue;
            }
            $name = stream_socket_get_name($s, false);
            fclose($s);
            $port = (int) substr($name, strrpos($name, ':') + 1);
            if (!isset(self::$given[$port])) {
                self::$given[$port] = true;
                return $port;
            }
        }
        throw new \RuntimeException('no loopback port this process has not handed out already');
    }

    public function url(): string
    {
        return "redis://127.0.0.1:{$this->port}";
    }

    /** @param list<string> $args more valkey-server arguments (e.g. cluster mode) */
    public function start(array $args = []): void
    {
        for ($attempt = 1; ; $attempt++) {
            $extra = [];
            // A cluster node's bus port on a free port of its own: the default, port + 10000,
            // is past 65535 for an ephemeral port above 55535, or already taken by another
            // socket (the node then exits at once: "valkey did not start", 1 run in 3 on a
            // busy machine).
            if (in_array('--cluster-enabled', $args, true) && !in_array('--cluster-port', $args, true)) {
                $this->bus = $this->bus ?: self::freePort();
                $extra = ['--cluster-port', (string) $this->bus];
            }
            $log = "{$this->dir}/valkey.log";
            clearstatcache(true, $log);
            $from = is_file($log) ? (int) filesize($log) : 0;
            $cmd = [getenv('VALKEY_SERVER'), '--bind', '127.0.0.1', '--port', (string) $this->port,
                '--save', '', '--appendonly', 'no', '--daemonize', 'yes', '--dir', $this->dir,
                '--pidfile', "{$this->dir}/valkey.pid", '--logfile', $log, ...$args, ...$extra];
            $p = proc_open($cmd, [], $pipes);
            proc_close($p);
            $why = $this->waitUntilServing($log, $from);
            if ($why === null) {
                $this->started = true;
                return;
            }
            // Another process took a port between freePort() and the bind (freePort keeps
            // only this process's own ports apart). A first start moves to fresh ports; a
            // restart keeps its port, the one the test's limiter was given.
            if (!$this->started && $attempt < 5 && str_contains($why, 'in use')) {
                $this->port = self::freePort();
                $this->bus = 0;
                continue;
            }
            throw new \RuntimeException("valkey did not start on {$this->port}: $why");
        }
    }

    /**
     * Null once the server answers a PING (any reply: a listener that only accepts is not
     * it, and a port taken by another process accepts too), else why not: the log's
     * complaint about a port in use, or its last lines after 4 s.
     */
    private function waitUntilServing(string $log, int $from): ?string
    {
        for ($i = 0; $i < 200; $i++) {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                stream_set_timeout($s, 0, 200000);
                fwrite($s, "PING\r\n");
                $reply = (string) fgets($s);
                fclose($s);
                if ($reply !== '' && ($reply[0] === '+' || $reply[0] === '-')) {
                    return null;
                }
            }
            $new = (string) @file_get_contents($log, false, null, $from);
            if (preg_match('/^.*Address already in use.*$/m', $new, $m)) {
                return 'port in use: ' . trim($m[0]);
            }
            usleep(20000);
        }
        $lines = array_slice(explode("\n", trim((string) @file_get_contents($log, false, null, $from))), -5);
        return 'no answer to PING after 4 s; its log ends: ' . implode(' | ', $lines);
    }

    public function pid(): int
    {
        return (int) trim((string) @file_get_contents("{$this->dir}/valkey.pid"));
    }

    public function stop(): void
    {
        $pid = $this->pid();
        if ($pid <= 0) {
            return;
        }
        posix_kill($pid, SIGCONT);
        posix_kill($pid, SIGTERM);
        for ($i = 0; $i < 200 && self::alive($pid); $i++) {
            usleep(20000);
        }
        @unlink("{$this->dir}/valkey.pid");
    }

    /** Running, and not a zombie (a daemon's parent may never reap it in a container). */
    private static function alive(int $pid): bool
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        return $stat !== false && !preg_match('/^\d+ \(.*\) Z/', $stat);
    }

    /** Dies at once, as a crashed host would (no shutdown, no goodbye to the cluster). */
    public function kill(): void
    {
        $pid = $this->pid();
        if ($pid > 0) {
            posix_kill($pid, SIGKILL);
            for ($i = 0; $i < 200 && self::alive($pid); $i++) {
                usleep(20000);
            }
            @unlink("{$this->dir}/valkey.pid");
        }
    }

    public function pause(): void
    {
        posix_kill($this->pid(), SIGSTOP);
    }

    public function resume(): void
    {
        posix_kill($this->pid(), SIGCONT);
    }

    public function client(): \Redis
    {
        $r = new \Redis();
        $r->connect('127.0.0.1', $this->port, 1.0);
        return $r;
    }

    public function __destruct()
    {
        $this->stop();
        foreach (glob("{$this->dir}/*") ?: [] as $f) {
            @unlink($f);
        }
        @rmdir($this->dir);
    }
}
