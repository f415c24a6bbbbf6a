<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Health\Readiness;
use CheckoutGuard\RateLimiter;

/**
 * The "managed" profile (docs/operations.md, "Managed services") against a server that
 * behaves like a managed service (ManagedServer: TLS only, CONFIG/MODULE/DEBUG/KEYS/MONITOR
 * disabled, the default user off, the limiter's ACL user with docs/operations.md's list only):
 * decisions with engine auto and lua, auto_hot, peek, a reservation, reset(), the CLI's
 * live limits and hot shops, health() and Readiness, the stream sink; and the server
 * really refuses what such a service refuses.
 */
final class ManagedProfileTest extends LimiterTestCase
{
    private static ManagedServer $server;

    public static function setUpBeforeClass(): void
    {
        if (!TlsServer::available()) {
            self::markTestSkipped('redis-server (with TLS) is needed: apt-get install redis-server (scripts/setup.sh)');
        }
        self::$server = new ManagedServer();
    }

    public static function tearDownAfterClass(): void
    {
        if (isset(self::$server)) {
            self::$server->stop();
        }
    }

    private function managed(array $options): RateLimiter
    {
        return new RateLimiter($options + [
            'name' => self::uniqueName('managed'),
            'url' => self::$server->url(),
            'tls' => ['cafile' => self::$server->cafile()],
            'timeout_ms' => 500,
            'on_unavailable' => 'throw',
        ]);
    }

    /** @return list<string> `checkout-guard limiter` over TLS as the limiter's user */
    private function cli(string $name, string ...$args): array
    {
        return Cli::limiter(self::$server->url(), $name, '--tls-cafile', self::$server->cafile(), ...$args);
    }

    public function testTheServerRefusesWhatAManagedServiceRefuses(): void
    {
        $s = self::$server;
        $this->assertStringContainsString("unknown command 'CONFIG'", $s->asLimiterUser('CONFIG', 'GET', 'maxmemory'));
        $this->assertStringContainsString("unknown command 'KEYS'", $s->asLimiterUser('KEYS', '*'));
        $this->assertStringContainsString("unknown command 'MODULE'", $s->asLimiterUser('MODULE', 'LIST'));
        $this->assertStringContainsString("unknown command 'DEBUG'", $s->asLimiterUser('DEBUG', 'SLEEP', '0'));
        $this->assertStringContainsString("unknown command 'MONITOR'", $s->asLimiterUser('MONITOR'));
        $this->assertStringContainsString('NOPERM', $s->asLimiterUser('SCRIPT', 'FLUSH'));
        $this->assertStringContainsString('NOPERM', $s->asLimiterUser('COMMAND', 'INFO', 'GET'));
        $this->assertStringContainsString('NOPERM', $s->asLimiterUser('FLUSHALL'));
        $this->assertStringContainsString('NOPERM', $s->asLimiterUser('SET', 'outside-the-limiter-keys', '1'));
        $this->assertSame('PONG', $s->asLimiterUser('PING'));
        // The user is docs/operations.md's ("Managed services"), word for word.
        $doc = (string) file_get_contents(dirname(__DIR__, 3) . '/docs/operations.md');
        $this->assertStringContainsString('ACL SETUSER checkout on >PASSWORD ' . ManagedServer::ACL_RULES . "\n", $doc);
        // The default user is off: a URL without the user is refused.
        $default = new RateLimiter(['name' => self::uniqueName('managed'), 'global' => self::bucket(3),
            'url' => "rediss://127.0.0.1:{$s->port}", 'tls' => ['cafile' => $s->cafile()], 'timeout_ms' => 300]);
        $this->assertSame('unavailable', $default->acquire('s')->reason());
        // Redis 7.0 answers an unauthenticated client's script-sized command with a protocol
        // error ("unauthenticated multibulk length"); other versions say NOAUTH.
        $this->assertMatchesRegularExpression('/unauthenticated|NOAUTH/i', (string) $default->health(false)['last_error']);
        $this->assertStringContainsString('the server wants a user: give it in the URL', (string) $default->health(false)['last_error']);
    }

    /** @return array<string, array{0: string}> */
    public static function engines(): array
    {
        return ['auto' => ['auto'], 'lua' => ['lua']];
    }

    /** @dataProvider engines */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testDecisionsPeekAndAReservation(string $engine): void
    {
        $l = $this->managed(['engine' => $engine, 'global' => self::bucket(3), 'hot_shop' => self::bucket(2)]);
        $this->assertTrue($l->peek('s')->isAllowed());
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'shop', 4));
        $this->assertFalse($l->peek('s')->isAllowed(), 'peek sees the empty bucket');
        // auto without COMMAND INFO (refused to this user): the script, at once.
        $this->assertSame('lua', $l->health()['engine']);

        $h = $this->managed(['engine' => $engine, 'global' => self::bucket(100), 'hot_shop' => self::bucket(2)]);
        $h->markHot('flash', 60);
        $this->assertTrue($h->isHot('flash'));
        $this->assertSame(['allowed' => 2, 'hot_shop' => 2], self::drain($h, 'flash', 4));
        $this->assertTrue($h->acquire('ordinary')->isAllowed());
        $h->unmarkHot('flash');
        $this->assertFalse($h->isHot('flash'));
        // reset(): SCAN + UNLINK inside the script, no KEYS.
        $l->reset();
        $this->assertSame(['allowed' => 3, 'global' => 1], self::drain($l, 'shop', 4));

        // Refill and a reservation: one token every 100 ms.
        $r = $this->managed(['engine' => $engine, 'global' => self::bucket(1, 10.0)]);
        $this->assertTrue($r->acquire('a')->isAllowed());
        $this->assertFalse($r->acquire('a')->isAllowed());
        $reserved = $r->acquire('a', 1, 1.0);
        $this->assertTrue($reserved->isAllowed(), 'the next token, reserved');
        $this->assertGreaterThan(0.0, $reserved->waited());
        usleep(250_000);
        $this->assertTrue($r->acquire('a')->isAllowed(), 'refilled');
    }

    public function testAutoHotMarksAFloodingShop(): void
    {
        $l = $this->managed([
            'global' => self::bucket(10_000),
            'hot_shop' => self::bucket(5),
            'auto_hot' => ['window_seconds' => 600, 'min_tokens' => 10],
        ]);
        // 2 of every 5 tokens (40% > 30%) for 5 rounds: hot once past min_tokens.
        for ($i = 0; $i < 5; $i++) {
            foreach (["o-$i-1", "o-$i-2", "o-$i-3", 'flood', 'flood'] as $shop) {
                $this->assertTrue($l->acquire($shop)->isAllowed());
            }
        }
        $this->assertTrue($l->isHot('flood'));
        $this->assertSame(['allowed' => 5, 'hot_shop' => 5], self::drain($l, 'flood', 10));
    }

    public function testHealthAndReadinessAreReady(): void
    {
        $l = $this->managed(['global' => self::bucket(10)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $h = $l->health();
        $this->assertTrue($h['ok'], (string) $h['last_error']);
        $this->assertStringContainsString('verified against cafile', (string) $h['tls']);
        $ready = (new Readiness($l))->check();
        $this->assertTrue($ready['ready'], json_encode($ready));
        // A new limiter that has not decided yet: readiness peeks.
        $fresh = (new Readiness($this->managed(['global' => self::bucket(10)])))->check();
        $this->assertTrue($fresh['ready'], json_encode($fresh));
    }

    public function testTheCliSetsLimitsMarksShopsAndShowsStatus(): void
    {
        $name = self::uniqueName('managedcli');
        $l = $this->managed(['name' => $name, 'global' => self::bucket(100), 'hot_shop' => self::bucket(2)]);
        $this->assertTrue($l->acquire('s')->isAllowed());

        [$code, $out, $err] = $this->cli($name, 'set', 'global=2/0.001', '--by', 'managed-test');
        $this->assertSame(0, $code, $err . $out);
        // Picked up within a second (the version is read by every decision).
        $by = [];
        for ($i = 0; $i < 20 && ($by['global'] ?? 0) === 0; $i++) {
            $by = self::drain($l, 'x', 3);
            usleep(100_000);
        }
        $this->assertArrayHasKey('global', $by, 'the live limit of 2 is in force');

        [$code, , $err] = $this->cli($name, 'set', 'global=default');
        $this->assertSame(0, $code, $err);
        [$code, , $err] = $this->cli($name, 'hot', 'flash', '--ttl', '60');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($l->isHot('flash'));

        [$code, $out, $err] = $this->cli($name, 'status', '--json');
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame($name, $st['limiter']);
        $this->assertSame(['flash'], array_column($st['hot_shops'], 'shop'));
        $this->assertFalse($st['module_loaded']);
        // The server's own words, which differ between versions ("this user has" in Redis
        // 7.0, "User checkout has" in the chroots' newer servers).
        $this->assertMatchesRegularExpression("/NoPerm: .*no permissions to run the 'command\\|info' command/", (string) $st['module_unknown']);
        [$code, $text, $err] = $this->cli($name, 'status');
        $this->assertSame(0, $code, $err);
        $this->assertStringContainsString('unknown whether the native module is loaded: this Valkey refused COMMAND INFO', $text);

        [$code, , $err] = $this->cli($name, 'unhot', 'flash');
        $this->assertSame(0, $code, $err);
        $this->assertFalse($l->isHot('flash'));
    }

    public function testTheStreamSinkWritesOverTlsAsTheLimiterUser(): void
    {
        $run = fn (string $key): array => $this->streamSinkStats(['events.sinks' => 'stream',
            'events.stream_url' => self::$server->url(), 'events.stream_key' => $key,
            'tls.cafile' => self::$server->cafile(), 'timeout_ms' => '500'], 'ManagedProbe');
        $ok = $run('checkout_guard:events');
        $this->assertSame([5, 0], [$ok['written'], $ok['failures']], json_encode($ok));
        $this->assertStringContainsString('ManagedProbe', self::$server->asLimiterUser('XRANGE', 'checkout_guard:events', '-', '+'));
        // A key outside the user's patterns: refused, with the server's reason.
        $refused = $run('elsewhere:events');
        $this->assertSame(0, $refused['written'], json_encode($refused));
        $this->assertStringContainsString('XADD refused: NoPerm', (string) $refused['last_error']);
    }
}
