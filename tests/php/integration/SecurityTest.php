<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Telemetry;
use CheckoutGuard\UnavailableException;

/**
 * AUTH with an ACL user, secrets that never show, and hostile input from PHP. Runs its
 * own Valkey (ACL users are server-wide). Random option arrays, which need no Valkey, are
 * in SecurityFuzzTest.
 */
final class SecurityTest extends OwnValkeyTestCase
{
    private const SECRET = 'Sup3r-s3cret_pw';

    protected function setUp(): void
    {
        parent::setUp();
        // An ACL user allowed exactly what the limiter needs, on its own key namespace.
        $this->valkey->client()->rawCommand(
            'ACL', 'SETUSER', 'checkout', 'on', '>' . self::SECRET, 'resetkeys', '~{cg:*', 'resetchannels',
            '-@all', '+evalsha', '+eval', '+script|load', '+time', '+mget', '+set', '+get', '+del',
            '+exists', '+scan', '+unlink', '+ping', '+client|setinfo', '+hello', '+select',
            // a marked shop's mark TTL, auto_hot's window counters and the live limits' reload
            '+pttl', '+hset', '+hmget', '+pexpire', '+hgetall'
        );
        // On-call: the CLI's reads and the live limits' writes, same namespace.
        $this->valkey->client()->rawCommand(
            'ACL', 'SETUSER', 'oncall', 'on', '>' . self::SECRET, 'resetkeys', '~{cg:*', 'resetchannels',
            '-@all', '+evalsha', '+eval', '+script|load', '+time', '+mget', '+set', '+get', '+del',
            '+scan', '+pttl', '+hgetall', '+hset', '+hdel', '+xadd', '+xrange', '+xrevrange',
            '+client|setinfo', '+hello', '+select'
        );
        // For the tests' own inspection only.
        $this->valkey->client()->rawCommand('ACL', 'SETUSER', 'inspector', 'on', '>inspect', '~*', '+@all');
        $this->valkey->client()->rawCommand('ACL', 'SETUSER', 'default', 'off');
    }

    private function aclUrl(string $password = self::SECRET): string
    {
        return "redis://checkout:$password@127.0.0.1:{$this->valkey->port}/0";
    }

    public function testAnAclUserWithItsPasswordInTheUrlDecides(): void
    {
        $l = $this->limiter(['url' => $this->aclUrl(), 'global' => self::bucket(2), 'hot_shop' => self::bucket(1)]);
        $this->assertSame(['allowed' => 2, 'global' => 1], self::drain($l, 's', 3));
        $l->markHot('h', 60);
        $this->assertTrue($l->isHot('h'));
        $l->reset();
        $this->assertTrue($l->health()['ok']);
    }

    public function testTheCommandLineWithAnAclUserNeverPrintsThePassword(): void
    {
        $name = self::uniqueName('acl');
        $l = $this->limiter(['name' => $name, 'url' => $this->aclUrl(), 'global' => self::bucket(5), 'auto_hot' => ['min_tokens' => 1]]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $oncall = "redis://oncall:" . self::SECRET . "@127.0.0.1:{$this->valkey->port}/0";
        foreach ([['set', 'global=2/0.001'], ['hot', 'x'], ['unhot', 'x'], ['status'], ['status', '--json']] as $args) {
            [$code, $out, $err] = Cli::limiter($oncall, $name, ...$args);
            $this->assertSame(0, $code, implode(' ', $args) . ": $err");
            $this->assertStringNotContainsString(self::SECRET, $out . $err);
        }
        // 4 tokens left, clamped to the new capacity of 2, one taken (the old limits: 3).
        $this->assertSame(1, $l->acquire('s')->remaining(), 'the live change reached the ACL user');
        // The events stream is outside the user's keys: status says so and goes on.
        [, $out] = Cli::limiter($oncall, $name, 'status');
        $this->assertStringContainsString('events stream not readable', $out);
        $wrong = "redis://oncall:Wr0ng-" . self::SECRET . "@127.0.0.1:{$this->valkey->port}/0";
        [$code, $out, $err] = Cli::limiter($wrong, $name, 'status');
        $this->assertSame(2, $code);
        $this->assertStringContainsString('oncall:***@', $err);
        $this->assertStringNotContainsString(self::SECRET, $out . $err);
    }

    public function testAWrongPasswordIsUnavailableAndNeverShown(): void
    {
        $wrong = 'Wr0ng-' . self::SECRET;
        $l = $this->limiter(['url' => $this->aclUrl($wrong), 'global' => self::bucket(2), 'on_unavailable' => 'throw']);
        try {
            $l->acquire('s');
            $this->fail('expected UnavailableException');
        } catch (UnavailableException $e) {
            $this->assertStringNotContainsString($wrong, $e->getMessage());
            $this->assertStringNotContainsString($wrong, $e->getTraceAsString());
            $this->assertStringContainsString('checkout:***@', $e->getMessage());
        }
        $h = $l->health();
        $this->assertFalse($h['ok']);
        $this->assertStringNotContainsString($wrong, json_encode($h));
        $allow = $this->limiter(['url' => $this->aclUrl($wrong), 'global' => self::bucket(2)]);
        $this->assertSame('unavailable', $allow->acquire('s')->reason());
    }

    public function testSecretsAppearInNoEventNoPhpinfoAndNoLog(): void
    {
        $events = (string) getenv('CHECKOUT_GUARD_TEST_EVENTS');
        $before = is_file($events) ? filesize($events) : 0;
        // Denied and unavailable decisions become events; so do measured calls whose URL
        // carries credentials and a token.
        $ok = $this->limiter(['url' => $this->aclUrl(), 'global' => self::bucket(1)]);
        self::drain($ok, 's', 2);
        $this->limiter(['url' => $this->aclUrl('x' . self::SECRET), 'global' => self::bucket(1)])->acquire('s');
        Telemetry::measure('payment', fn () => 200, [
            'url.full' => 'https://shop:' . self::SECRET . '@api.example/v1/charges?token=' . self::SECRET,
        ]);
        Telemetry::flush();
        $written = (string) file_get_contents($events, false, null, $before);
        $this->assertStringContainsString('RateLimitDecision', $written);
        $this->assertStringNotContainsString(self::SECRET, $written);

        ini_set('checkout_guard.url', $this->aclUrl());
        ob_start();
        phpinfo(INFO_MODULES);
        $info = (string) ob_get_clean();
        ini_restore('checkout_guard.url');
        $this->assertStringContainsString('checkout:***@', $info);
        $this->assertStringNotContainsString(self::SECRET, $info);

        // Nothing the extension logged (PHP's error log) names it either.
        $log = (string) ini_get('error_log');
        if ($log !== '' && is_file($log)) {
            $this->assertStringNotContainsString(self::SECRET, (string) file_get_contents($log));
        }
    }

    public function testThousandsOfRandomShopIdsAreDecidedOrRejectedCleanly(): void
    {
        mt_srand(7);
        // Hot shops get a bucket and a mark of their own that outlive the test's loop.
        $l = $this->limiter(['url' => $this->aclUrl(), 'global' => self::bucket(100000, 100000), 'hot_shop' => self::bucket(10)]);
        $decided = $rejected = 0;
        for ($i = 0; $i < 2000; $i++) {
            $len = mt_rand(0, 160);
            $id = $len === 0 ? '' : random_bytes($len);
            if (mt_rand(0, 3) === 0) {
                $id = '{' . $id . '}:b:global';
            }
            try {
                if ($i % 5 === 0 && $id !== '' && strlen($id) <= 128 && !preg_match('/[\x00-\x1f\x7f]/', $id)) {
                    $l->markHot($id, 60);
                }
                $l->acquire($id);
                $decided++;
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString('shopId', $e->getMessage());
                $rejected++;
            }
        }
        $this->assertGreaterThan(0, $decided);
        $this->assertGreaterThan(0, $rejected);
        // Every key the limiter wrote is inside its namespace.
        $admin = new \Redis();
        $admin->connect('127.0.0.1', $this->valkey->port);
        $admin->auth(['inspector', 'inspect']);
        $keys = $admin->keys('*');
        $this->assertNotEmpty($keys);
        foreach ($keys as $key) {
            $this->assertStringStartsWith('{cg:', $key);
        }
    }
}
