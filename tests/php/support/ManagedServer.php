<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A server that behaves like a managed Valkey/Redis service (docs/operations.md, "Managed
 * services"): Debian's `redis-server`, TLS only (`--port 0 --tls-port P`, TlsServer's
 * certificates), CONFIG, MODULE, DEBUG, KEYS and MONITOR renamed to "" (disabled), the
 * default user off, and one ACL user, `checkout`, with exactly README's list of commands
 * (SCRIPT FLUSH is denied by the ACL: rename-command cannot disable a subcommand). No
 * admin user: the tests set nothing up behind the limiter's back.
 */
final class ManagedServer
{
    /** README's "Managed Valkey/Redis services" ACL rules, after `ACL SETUSER checkout on >PASSWORD`. */
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

    public function stop(): void
    {
        $this->tls->stop();
    }
}
