<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A server that behaves like a managed Valkey/Redis service (docs/operations.md, "Managed
 * services"): Debian's `redis-server`, TLS only (`--port 0 --tls-port P`, TlsServer's
 * certificates), CONFIG, MODULE, DEBUG, KEYS and MONITOR renamed to "" (disabled), the
 * default user off, and one ACL user, `checkout`, with exactly docs/operations.md's list of commands
 * (SCRIPT FLUSH is denied by the ACL: rename-command cannot disable a subcommand). No
 * admin user: the tests set nothing up behind the limiter's back.
 */
final class ManagedServer
{
    /** docs/operations.md's "Managed services" ACL rules, after `ACL SETUSER checkout on >PASSWORD`. */
    public const ACL_RULES = '~{cg:*}* ~checkout_guard:events resetchannels -@all'
        . ' +evalsha +script|load +ping +role +exists +get +set +del +unlink +mget +hmget +hset +hgetall'
        . ' +pexpire +pttl +time +scan +xadd +xrange +xrevrange';

    /** The commands a managed service disables with `rename-command X ""`. */
    public const DISABLED = ['CONFIG', 'MODULE', 'DEBUG', 'KEYS', 'MONITOR'];

    public readonly TlsServer $tls;
    public readonly int $port;
    public readonly string $password;

    public function __construct()
    {
        $this->tls = new TlsServer();
        $this->password = bin2hex(random_bytes(12));
        $conf = $this->tls->path('managed.conf');
        $lines = array_map(fn ($c) => "rename-command $c \"\"", self::DISABLED);
        $lines[] = 'user default off';
        $lines[] = "user checkout on >{$this->password} " . self::ACL_RULES;
        file_put_contents($conf, implode("\n", $lines) . "\n");
        $this->port = $this->tls->start('server', 'no', $conf);
    }

    public function url(): string
    {
        return "rediss://checkout:{$this->password}@127.0.0.1:{$this->port}";
    }

    public function cafile(): string
    {
        return $this->tls->path('ca.pem');
    }

    /**
     * One command as the `checkout` user, with redis-cli over TLS: its reply's text
     * (errors included, as redis-cli prints them).
     */
    public function asLimiterUser(string ...$command): string
    {
        $cmd = ['redis-cli', '--tls', '--cacert', $this->cafile(), '-h', '127.0.0.1', '-p', (string) $this->port,
            '--user', 'checkout', '--pass', $this->password, '--no-auth-warning', ...$command];
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]) . (string) stream_get_contents($pipes[2]);
        proc_close($p);
        return trim($out);
    }

    /**
     * A phpredis client over TLS (verified against the CA), authenticated as the
     * `checkout` user: it can do what the limiter's user can, nothing more.
     */
    public function client(): \Redis
    {
        $r = new \Redis();
        $r->connect('tls://127.0.0.1', $this->port, 1.0, null, 0, 0, [
            'auth' => ['checkout', $this->password],
            'stream' => ['cafile' => $this->cafile(), 'verify_peer' => true, 'verify_peer_name' => true],
        ]);
        return $r;
    }

    /**
     * What a managed user has instead of FLUSHALL (refused by the ACL): SCAN every key and
     * UNLINK it, as the `checkout` user. Every key the limiter writes is under its
     * patterns (`{cg:NAME}:...`, the stream sink's `checkout_guard:events`); a key it may
     * not remove is an error that names it. Returns how many keys were removed.
     */
    public function unlinkAll(\Redis $r): int
    {
        $r->setOption(\Redis::OPT_SCAN, \Redis::SCAN_RETRY);
        $removed = 0;
        $it = null;
        while (($keys = $r->scan($it, '*', 1000)) !== false) {
            if ($keys === []) {
                continue;
            }
            try {
                $n = $r->unlink($keys);
            } catch (\RedisException $e) {
                // phpredis throws NOPERM; anything else (a lost connection) is the caller's.
                if (!str_contains($e->getMessage(), 'NOPERM')) {
                    throw $e;
                }
                $n = $e->getMessage();
            }
            if (!is_int($n)) {
                throw new \RuntimeException('UNLINK ' . implode(' ', $keys) . ' as the checkout user: ' . ($r->getLastError() ?? $n));
            }
            $removed += $n;
        }
        // DBSIZE is not the user's; a second SCAN checks that nothing is left.
        $it = null;
        while (($keys = $r->scan($it, '*', 1000)) !== false) {
            if ($keys !== []) {
                throw new \RuntimeException('SCAN + UNLINK as the checkout user left ' . implode(' ', $keys));
            }
        }
        return $removed;
    }

    /** Restarts the server on the same port, empty (no persistence), as a managed service's restart. */
    public function restart(): void
    {
        $this->tls->restart($this->port);
    }

    public function stop(): void
    {
        $this->tls->stop();
    }
}
