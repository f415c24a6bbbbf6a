<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/** A Valkey server of the test's own, to stop, pause and restart under a limiter. */
final class ValkeyProcess
{
    private string $dir;
    public readonly int $port;
    /** A cluster node's bus port (`--cluster-port`), 0 without cluster mode. */
    public int $bus = 0;

    public function __construct()
    {
        $this->dir = sys_get_temp_dir() . '/cg-valkey-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
        $this->port = self::freePort();
    }

    public static function freePort(): int
    {
        $s = stream_socket_server('tcp://127.0.0.1:0');
        $name = stream_socket_get_name($s, false);
        fclose($s);
        return (int) substr($name, strrpos($name, ':') + 1);
    }

    public function url(): string
    {
        return "redis://127.0.0.1:{$this->port}";
    }

    /** @param list<string> $args more valkey-server arguments (e.g. cluster mode) */
    public function start(array $args = []): void
    {
        // A cluster node's bus port on a free port of its own: the default, port + 10000,
        // is past 65535 for an ephemeral port above 55535, or already taken by another
        // socket (the node then exits at once: "valkey did not start", 1 run in 3 on a
        // busy machine).
        if (in_array('--cluster-enabled', $args, true) && !in_array('--cluster-port', $args, true)) {
            $this->bus = self::freePort();
            $args = [...$args, '--cluster-port', (string) $this->bus];
        }
        $cmd = [getenv('VALKEY_SERVER'), '--bind', '127.0.0.1', '--port', (string) $this->port,
            '--save', '', '--appendonly', 'no', '--daemonize', 'yes', '--dir', $this->dir,
            '--pidfile', "{$this->dir}/valkey.pid", '--logfile', "{$this->dir}/valkey.log", ...$args];
        $p = proc_open($cmd, [], $pipes);
        proc_close($p);
        for ($i = 0; $i < 200; $i++) {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
                return;
            }
            usleep(20000);
        }
        throw new \RuntimeException("valkey did not start on {$this->port}");
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
