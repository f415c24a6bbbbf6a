<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\UnavailableException;

/**
 * Limiters over TLS against real TLS servers (Debian's redis-server, certificates made by
 * the test): server-only and mutual TLS decide; a wrong CA, a wrong name, an expired
 * certificate or a missing client certificate is an unavailable decision within
 * timeout_ms, with the cause in health() and in UnavailableException's message;
 * verify_peer => false decides, and health() and phpinfo() say verification is off.
 */
final class TlsTest extends LimiterTestCase
{
    private static TlsServer $tls;
    private static int $serverOnly;
    private static int $mutual;
    private static int $otherName;
    private static int $expired;

    public static function setUpBeforeClass(): void
    {
        if (!TlsServer::available()) {
            self::fail('redis-server (with TLS) is needed: apt-get install redis-server (scripts/setup.sh)');
        }
        self::$tls = new TlsServer();
        self::$serverOnly = self::$tls->start('server', 'no');
        self::$mutual = self::$tls->start('server', 'yes');
        self::$otherName = self::$tls->start('other-name', 'no');
        self::$expired = self::$tls->start('expired', 'no');
    }

    public static function tearDownAfterClass(): void
    {
        self::$tls->stop();
    }

    private function tlsLimiter(int $port, array $tls, string $host = 'localhost', array $more = []): RateLimiter
    {
        return new RateLimiter($more + [
            'name' => self::uniqueName('tls'),
            'global' => self::bucket(3),
            'url' => "rediss://$host:$port",
            'tls' => $tls,
            'timeout_ms' => 200,
            'on_unavailable' => 'deny',
        ]);
    }

    private function ca(): array
    {
        return ['cafile' => self::$tls->path('ca.pem')];
    }

    public function testServerOnlyTlsDecides(): void
    {
        $l = $this->tlsLimiter(self::$serverOnly, $this->ca());
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'shop', 4));
        $h = $l->health();
        $this->assertTrue($h['ok']);
        $this->assertTrue($h['tls_verify_peer']);
        $this->assertStringContainsString('verified against cafile ' . self::$tls->path('ca.pem'), $h['tls']);
        // By IP too: the certificate carries 127.0.0.1. And valkeys:// is the same.
        $this->assertTrue($this->tlsLimiter(self::$serverOnly, $this->ca(), '127.0.0.1')->acquire('s')->isAllowed());
        $v = new RateLimiter(['global' => self::bucket(3), 'name' => self::uniqueName('tls'),
            'url' => 'valkeys://localhost:' . self::$serverOnly, 'tls' => $this->ca()]);
        $this->assertTrue($v->acquire('s')->isAllowed());
    }

    public function testMutualTlsDecidesWithTheClientCertificate(): void
    {
        $l = $this->tlsLimiter(self::$mutual, $this->ca() + [
            'local_cert' => self::$tls->path('client.pem'),
            'local_pk' => self::$tls->path('client.key'),
        ]);
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'shop', 4));
        $this->assertStringContainsString('client certificate', $l->health()['tls']);
    }

    /** @return array<string, array{0: string, 1: array, 2: string}> */
    public static function refusals(): array
    {
        return [
            'wrong CA' => ['serverOnly', ['cafile' => 'other-ca.pem'], 'UnknownIssuer'],
            'system roots do not know the CA' => ['serverOnly', [], 'UnknownIssuer'],
            'wrong name' => ['otherName', ['cafile' => 'ca.pem'], 'not valid for name'],
            'wrong peer_name' => ['otherName', ['cafile' => 'ca.pem', 'peer_name' => 'cache.wrong.example'], 'not valid for name'],
            'expired' => ['expired', ['cafile' => 'ca.pem'], 'Expired'],
            'missing client certificate' => ['mutual', ['cafile' => 'ca.pem'], 'CertificateRequired'],
        ];
    }

    /** @dataProvider refusals */
    #[\PHPUnit\Framework\Attributes\DataProvider('refusals')]
    public function testAFailedHandshakeIsUnavailableWithinTheTimeoutWithItsCause(string $server, array $tls, string $cause): void
    {
        if (isset($tls['cafile'])) {
            $tls['cafile'] = self::$tls->path($tls['cafile']);
        }
        $port = self::${$server};
        $l = $this->tlsLimiter($port, $tls);
        $started = microtime(true);
        $d = $l->acquire('shop');
        $secs = microtime(true) - $started;
        $this->assertSame('unavailable', $d->reason());
        $this->assertLessThan(1.0, $secs, 'within timeout_ms (200), not hung');
        $h = $l->health(false);
        $this->assertFalse($h['ok']);
        $this->assertStringContainsString('TLS handshake failed', (string) $h['last_error']);
        $this->assertStringContainsStringIgnoringCase($cause, (string) $h['last_error']);
        $t = $this->tlsLimiter($port, $tls, 'localhost', ['on_unavailable' => 'throw']);
        try {
            $t->acquire('shop');
            $this->fail('no exception');
        } catch (UnavailableException $e) {
            $this->assertStringContainsString("Valkey unavailable at rediss://localhost:$port", $e->getMessage());
            $this->assertStringContainsStringIgnoringCase($cause, $e->getMessage());
        }
    }

    /**
     * X.509 v1 certificates (`openssl x509 -req` without `-extfile`), which OpenSSL and so
     * phpredis and the server accept: a v1 client certificate is refused by the TLS library
     * (rustls) and so at construction, a ConfigurationException naming tls.local_cert (ours,
     * not the peer's), v1 and the way out; a v1 CA decides; a v1 server certificate is
     * unavailable, the cause naming the server's certificate.
     */
    public function testX509V1CertificatesAreAcceptedWhereTheTlsLibraryCanAndRefusedByNameWhereItCannot(): void
    {
        self::$tls->makeV1();
        if (!self::$tls->isV1('client-v1') || !self::$tls->isV1('ca-v1')) {
            $this->markTestSkipped('this OpenSSL (3.2 or later) makes X.509 v3 certificates only: no v1 certificate to test with');
        }
        $v1Client = ['local_cert' => self::$tls->path('client-v1.pem'), 'local_pk' => self::$tls->path('client-v1.key')];
        // The server takes the v1 client certificate from phpredis (OpenSSL).
        $r = new \Redis();
        $r->connect('tls://localhost', self::$mutual, 1.0, null, 0, 0.0, ['stream' => $this->ca() + $v1Client]);
        $this->assertTrue($r->ping());
        try {
            $this->tlsLimiter(self::$mutual, $this->ca() + $v1Client);
            $this->fail('a v1 client certificate was accepted at construction');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('tls.local_cert is an X.509 v1', $e->getMessage());
            $this->assertStringContainsString('rustls', $e->getMessage());
            $this->assertStringContainsString('-extfile', $e->getMessage());
            $this->assertStringContainsString(self::$tls->path('client-v1.pem'), $e->getMessage());
            $this->assertStringNotContainsString('peer', $e->getMessage());
        }
        // The INI default is named as itself.
        ini_set('checkout_guard.tls.local_cert', $v1Client['local_cert']);
        ini_set('checkout_guard.tls.local_pk', $v1Client['local_pk']);
        try {
            new RateLimiter(['global' => self::bucket(3), 'url' => 'rediss://localhost:' . self::$mutual]);
            $this->fail('a v1 client certificate was accepted at construction');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('checkout_guard.tls.local_cert is an X.509 v1', $e->getMessage());
        } finally {
            ini_restore('checkout_guard.tls.local_cert');
            ini_restore('checkout_guard.tls.local_pk');
        }
        // A v1 CA: mutual TLS with the v3 certificates it signed decides.
        $byV1 = self::$tls->start('server-by-v1', 'yes', null, 'ca-v1.pem');
        $l = $this->tlsLimiter($byV1, ['cafile' => self::$tls->path('ca-v1.pem'),
            'local_cert' => self::$tls->path('client-by-v1.pem'), 'local_pk' => self::$tls->path('client-by-v1.key')]);
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'shop', 4));
        // A v1 server certificate: unavailable, the cause naming the server's certificate.
        $v1Server = self::$tls->start('server-v1', 'no');
        $l = $this->tlsLimiter($v1Server, $this->ca());
        $this->assertSame('unavailable', $l->acquire('shop')->reason());
        $error = (string) $l->health(false)['last_error'];
        $this->assertStringContainsString('TLS handshake failed', $error);
        $this->assertStringContainsString("the server's certificate", $error);
        $this->assertStringContainsString('X.509 v1', $error);
    }

    public function testPeerNameAcceptsTheNameTheCertificateCarries(): void
    {
        $l = $this->tlsLimiter(self::$otherName, $this->ca() + ['peer_name' => 'cache.other.example'], '127.0.0.1');
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertStringContainsString('peer_name cache.other.example', $l->health()['tls']);
    }

    public function testVerifyPeerFalseDecidesAndSaysVerificationIsOff(): void
    {
        $l = $this->tlsLimiter(self::$otherName, ['verify_peer' => false]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $h = $l->health();
        $this->assertTrue($h['ok']);
        $this->assertFalse($h['tls_verify_peer']);
        $this->assertStringContainsString('verification off', $h['tls']);
        ob_start();
        phpinfo(INFO_MODULES);
        $info = (string) ob_get_clean();
        $this->assertMatchesRegularExpression(
            '/TLS => rustls; verification off \(verify_peer => false\) for .*rediss:\/\/localhost:' . self::$otherName . '/',
            $info
        );
    }

    /**
     * Three TLS primaries whose slot map names them by IP while their certificates carry
     * only `localhost`: with `peer_name` a decision on each node (a limiter whose hash tag
     * is in that node's slots, its bucket key found on that node); without it each is
     * unavailable (the seed reached as `localhost` passing), the certificate's name in the
     * cause.
     */
    public function testEveryNodeOfATlsClusterDecidesWithPeerName(): void
    {
        $ports = self::$tls->startCluster('dns-only');
        $admin = self::$tls->client($ports[0]);
        foreach ($ports as $i => $port) {
            [$from, $to] = TlsServer::clusterSlots($i, count($ports));
            for ($j = 0; ; $j++) {
                $name = self::uniqueName("tlsc$i") . "x$j";
                $slot = (int) $admin->rawCommand('CLUSTER', 'KEYSLOT', "{cg:$name}");
                if ($slot >= $from && $slot <= $to) {
                    break;
                }
            }
            $limiter = fn (array $tls, string $seed = '127.0.0.1') => new RateLimiter([
                'name' => $name,
                'global' => self::bucket(3),
                'url' => "rediss+cluster://$seed:{$ports[0]}",
                'tls' => $tls,
                'timeout_ms' => 500,
                'on_unavailable' => 'deny',
            ]);
            $d = $limiter($this->ca() + ['peer_name' => 'localhost'])->acquire('s');
            $this->assertTrue($d->isAllowed(), "node $i: " . $d->reason());
            $this->assertSame(1, self::$tls->client($port)->exists("{cg:$name}:b:global"), "the bucket of node $i's limiter is on node $i");
            // The seed reached as `localhost` passes; the nodes the slot map names do not.
            $l = $limiter($this->ca(), 'localhost');
            $this->assertSame('unavailable', $l->acquire('s')->reason(), "node $i without peer_name");
            $this->assertStringContainsString('not valid for name', (string) $l->health(false)['last_error']);
        }
    }

    public function testAPlainUrlShowsNoTls(): void
    {
        $h = $this->limiter(['global' => self::bucket(3)])->health(false);
        $this->assertNull($h['tls']);
        $this->assertNull($h['tls_verify_peer']);
    }

    public function testTheCliTakesTlsUrlsAndTheirOptions(): void
    {
        $name = self::uniqueName('tlscli');
        $this->tlsLimiter(self::$serverOnly, $this->ca(), 'localhost', ['name' => $name])->acquire('s');
        $url = 'rediss://localhost:' . self::$serverOnly;
        [$code, $out, $err] = Cli::limiter($url, $name, '--tls-cafile', self::$tls->path('ca.pem'), 'status', '--json');
        $this->assertSame(0, $code, $err);
        $this->assertSame($name, json_decode($out, true)['limiter']);
        // Verified by default: without the CA the system's roots do not know it.
        [$code, , $err] = Cli::limiter($url, $name, '--timeout-ms', '300', 'status');
        $this->assertSame(2, $code);
        $this->assertStringContainsString('UnknownIssuer', $err);
        // Mutual TLS, and peer_name for a server reached by IP under another name. No worker
        // decided there: Valkey answered over TLS that it holds nothing of the limiter.
        [$code, , $err] = Cli::limiter('valkeys://localhost:' . self::$mutual, $name, '--tls-cafile', self::$tls->path('ca.pem'),
            '--tls-local-cert', self::$tls->path('client.pem'), '--tls-local-pk', self::$tls->path('client.key'), 'status');
        $this->assertSame(2, $code, $err);
        $this->assertStringContainsString("unknown limiter \"$name\" at valkeys://localhost:", $err);
        [$code, , $err] = Cli::limiter('rediss://127.0.0.1:' . self::$otherName, $name, '--tls-cafile', self::$tls->path('ca.pem'),
            '--tls-peer-name', 'cache.other.example', 'status');
        $this->assertSame(2, $code, $err);
        $this->assertStringContainsString("unknown limiter \"$name\" at rediss://127.0.0.1:", $err);
    }

    /** The stream sink's TLS URL, verified with the INI's checkout_guard.tls.*. */
    public function testTheStreamSinkWritesOverTls(): void
    {
        $run = fn (array $ini): array => $this->streamSinkStats($ini + ['events.sinks' => 'stream',
            'events.stream_url' => 'rediss://localhost:' . self::$serverOnly,
            'events.stream_key' => 'cg-tls:events', 'timeout_ms' => '300'], 'Probe');
        $ok = $run(['tls.cafile' => self::$tls->path('ca.pem')]);
        $this->assertSame([5, 0], [$ok['written'], $ok['failures']], json_encode($ok));
        $refused = $run([]);
        $this->assertSame(0, $refused['written'], json_encode($refused));
        $this->assertStringContainsString('UnknownIssuer', (string) $refused['last_error']);
    }

    /**
     * One handshake per worker connection, kept across calls; a forked child opens its own
     * TLS connection and never touches its parent's (whose TLS session would break: the
     * parent would have to reconnect).
     */
    public function testAForkedChildHasItsOwnTlsConnection(): void
    {
        $l = $this->tlsLimiter(self::$serverOnly, $this->ca(), 'localhost', ['global' => self::bucket(10)]);
        for ($i = 0; $i < 3; $i++) {
            $this->assertTrue($l->acquire('s')->isAllowed());
        }
        $this->assertSame(1, $l->health(false)['connects'], 'one handshake for three decisions');
        $result = tempnam(sys_get_temp_dir(), 'cg-tls-fork');
        $pid = pcntl_fork();
        if ($pid === 0) {
            $a = $l->acquire('s');
            file_put_contents($result, $a->reason() . ',' . $a->remaining());
            sleep(30);
            posix_kill(getmypid(), SIGKILL);
        }
        for ($i = 0; $i < 500 && filesize($result) === 0; $i++) {
            usleep(10000);
            clearstatcache();
        }
        posix_kill($pid, SIGKILL);
        pcntl_waitpid($pid, $status);
        $this->assertSame('allowed,6', file_get_contents($result));
        unlink($result);
        $d = $l->acquire('s');
        $this->assertSame(['allowed', 5], [$d->reason(), $d->remaining()]);
        $this->assertSame(1, $l->health(false)['connects'], "the parent's TLS connection is intact");
    }
}
