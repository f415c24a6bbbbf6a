<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * The `tls` option and the INI defaults `checkout_guard.tls.*`: a ConfigurationException
 * naming the option and the path, never the file's content. No server: a TLS limiter is
 * made, not asked (TlsTest asks real TLS servers).
 */
final class TlsOptionsTest extends LimiterTestCase
{
    private static string $dir;

    /** A real X.509 v3 certificate (ed25519, self-signed, `openssl req -x509`). */
    private const CERT_V3 = <<<'PEM'
-----BEGIN CERTIFICATE-----
MIIBOjCB7aADAgECAhRPIBDzujyaSKyxMhN2+py9zsbdvjAFBgMrZXAwEjEQMA4G
A1UEAwwHdGVzdC12MzAgFw0yNjEyMDYwMzE4NTdaGA8yMTI2MTExMjAzMTg1N1ow
EjEQMA4GA1UEAwwHdGVzdC12MzAqMAUGAytlcAMhAJH/1n+ayjv/IhWZ7fFl/TZZ
GTdC5EgIqgK4Kj6oeJsZo1MwUTAdBgNVHQ4EFgQUkrb6XYsFG2HpU9UvUD1kapb7
L/swHwYDVR0jBBgwFoAUkrb6XYsFG2HpU9UvUD1kapb7L/swDwYDVR0TAQH/BAUw
AwEB/zAFBgMrZXADQQBroCNKPiVLlE8h1WIYKCyPSGxBpQ9zFu1DoTR0ERRmIdqP
23QuBg8cXVrRWQk6UNQ/d50KclKka1qnB1hS6KoM
-----END CERTIFICATE-----

PEM;

    /** The same key in an X.509 v1 certificate (`openssl x509 -req -signkey`, no -extfile). */
    private const CERT_V1 = <<<'PEM'
-----BEGIN CERTIFICATE-----
MIHgMIGTAhQttmjWyOOAXeMjimrwi7Fc5HDRUDAFBgMrZXAwEjEQMA4GA1UEAwwH
dGVzdC12MTAgFw0yNjEyMDYwMzE4NTdaGA8yMTI2MTExMjAzMTg1N1owEjEQMA4G
A1UEAwwHdGVzdC12MTAqMAUGAytlcAMhAJH/1n+ayjv/IhWZ7fFl/TZZGTdC5EgI
qgK4Kj6oeJsZMAUGAytlcANBAGzgSiyPm3oiVt+Z6mygVt9J6lPf2c1NuDR22yJt
DOZ6jKUb9U717RS922kqttrGboUl/1nx0KPcjsy1VtAekwY=
-----END CERTIFICATE-----

PEM;

    public static function setUpBeforeClass(): void
    {
        self::$dir = sys_get_temp_dir() . '/cg-tls-opts-' . getmypid();
        @mkdir(self::$dir);
        file_put_contents(self::$dir . '/ca.pem', self::CERT_V3);
        file_put_contents(self::$dir . '/v1.pem', self::CERT_V1);
        file_put_contents(self::$dir . '/notder.pem', "-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n");
        file_put_contents(self::$dir . '/key.pem', "-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n");
        file_put_contents(self::$dir . '/garbage.pem', 'top-secret-key-material');
        file_put_contents(self::$dir . '/unreadable.pem', "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");
        chmod(self::$dir . '/unreadable.pem', 0);
    }

    public static function tearDownAfterClass(): void
    {
        foreach ((array) glob(self::$dir . '/*') as $f) {
            @chmod((string) $f, 0600);
            @unlink((string) $f);
        }
        @rmdir(self::$dir);
    }

    protected function tearDown(): void
    {
        foreach (['cafile', 'local_cert', 'local_pk', 'peer_name'] as $k) {
            ini_restore("checkout_guard.tls.$k");
        }
    }

    private static function options(array $tls, string $url = 'rediss://cache.internal:6380'): array
    {
        return ['global' => ['capacity' => 10, 'refill_per_second' => 5.0], 'url' => $url, 'tls' => $tls];
    }

    public static function badTls(): array
    {
        $d = sys_get_temp_dir() . '/cg-tls-opts-' . getmypid();
        return [
            'tls on a plain url' => [self::options(['cafile' => "$d/ca.pem"], 'redis://127.0.0.1:6379'), 'tls is for a TLS URL'],
            'tls on a plain cluster url' => [self::options([], 'valkey+cluster://127.0.0.1:7000'), 'tls is for a TLS URL'],
            'unknown key' => [self::options(['ca_file' => "$d/ca.pem"]), 'tls."ca_file" is not a known TLS option'],
            'verify_peer a string' => [self::options(['verify_peer' => 'false']), 'tls.verify_peer must be a bool (true or false), got string "false"'],
            'verify_peer an int' => [self::options(['verify_peer' => 0]), 'tls.verify_peer must be a bool'],
            'missing file' => [self::options(['cafile' => "$d/missing.pem"]), "tls.cafile names a file that cannot be read: \"$d/missing.pem\""],
            'not a pem' => [self::options(['cafile' => "$d/garbage.pem"]), "tls.cafile is not a PEM file (no -----BEGIN block): \"$d/garbage.pem\""],
            'key as certificate' => [self::options(['local_cert' => "$d/key.pem", 'local_pk' => "$d/key.pem"]), 'tls.local_cert holds no CERTIFICATE block'],
            'certificate as key' => [self::options(['local_cert' => "$d/ca.pem", 'local_pk' => "$d/ca.pem"]), 'tls.local_pk holds no PRIVATE KEY'],
            'v1 client certificate' => [self::options(['local_cert' => "$d/v1.pem", 'local_pk' => "$d/key.pem"]),
                "tls.local_cert is an X.509 v1 (or v2) certificate: the TLS library (rustls) accepts only v3 as the client's own certificate"],
            'certificate rustls cannot parse' => [self::options(['local_cert' => "$d/notder.pem", 'local_pk' => "$d/key.pem"]),
                "tls.local_cert is a certificate the TLS library (rustls) cannot use as the client's own certificate (BadDer): \"$d/notder.pem\""],
            'CA rustls cannot parse' => [self::options(['cafile' => "$d/notder.pem"]), 'tls.cafile holds a certificate (number 1 in the file) that the TLS library (rustls) cannot use as a CA'],
            'cert without key' => [self::options(['local_cert' => "$d/ca.pem"]), 'tls.local_cert needs its private key'],
            'fragment in the url' => [['global' => ['capacity' => 1, 'refill_per_second' => 1], 'url' => 'rediss://h:6380#insecure'], 'takes no #fragment'],
        ];
    }

    /** @dataProvider badTls */
    #[DataProvider('badTls')]
    public function testBadTlsOptionsNameTheOptionAndPath(array $options, string $message): void
    {
        try {
            new RateLimiter($options);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString($message, $e->getMessage());
            $this->assertStringNotContainsString('top-secret', $e->getMessage());
            $this->assertStringNotContainsString('MIIB', $e->getMessage());
        }
    }

    public function testAnUnreadableFileIsNamed(): void
    {
        if (posix_geteuid() === 0) {
            // root reads a file of mode 0: a directory is unreadable as a file for everyone.
            $path = self::$dir;
        } else {
            $path = self::$dir . '/unreadable.pem';
        }
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage("tls.cafile names a file that cannot be read: \"$path\"");
        new RateLimiter(self::options(['cafile' => $path]));
    }

    public function testTlsUrlsAndOptionsAreAccepted(): void
    {
        foreach (['rediss://u:pw@cache.internal:6380/1', 'valkeys://cache.internal:6380',
            'rediss+cluster://10.0.0.1:7000,10.0.0.2:7000', 'valkeys+cluster://10.0.0.1:7000'] as $url) {
            $l = new RateLimiter(self::options([
                'cafile' => self::$dir . '/ca.pem',
                'local_cert' => self::$dir . '/ca.pem',
                'local_pk' => self::$dir . '/key.pem',
                'peer_name' => 'cache.internal',
                'verify_peer' => true,
            ], $url));
            $this->assertInstanceOf(RateLimiter::class, $l);
        }
        // A v1 CA is a trust anchor rustls takes.
        new RateLimiter(self::options(['cafile' => self::$dir . '/v1.pem']));
        // A TLS URL without the option: verified against the system's roots.
        new RateLimiter(['global' => ['capacity' => 1, 'refill_per_second' => 1], 'url' => 'rediss://h:6380']);
        $this->addToAssertionCount(1);
    }

    public function testTheIniDefaultsApplyToTlsUrlsAndAreNamedWhenWrong(): void
    {
        $g = ['capacity' => 1, 'refill_per_second' => 1];
        ini_set('checkout_guard.tls.cafile', self::$dir . '/missing.pem');
        // A plain URL does not read them.
        new RateLimiter(['global' => $g, 'url' => 'redis://127.0.0.1:6379']);
        try {
            new RateLimiter(['global' => $g, 'url' => 'rediss://h:6380']);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('checkout_guard.tls.cafile names a file that cannot be read', $e->getMessage());
        }
        // The option overrides the INI default.
        new RateLimiter(['global' => $g, 'url' => 'rediss://h:6380', 'tls' => ['cafile' => self::$dir . '/ca.pem']]);
        ini_set('checkout_guard.tls.cafile', '');
        ini_set('checkout_guard.tls.local_cert', self::$dir . '/ca.pem');
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage('checkout_guard.tls.local_cert needs its private key');
        new RateLimiter(['global' => $g, 'url' => 'rediss://h:6380']);
    }

    public function testTheIniSettingsAreRegistered(): void
    {
        foreach (['cafile', 'local_cert', 'local_pk', 'peer_name'] as $k) {
            $this->assertSame('', ini_get("checkout_guard.tls.$k"), $k);
        }
    }
}
