<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Sentinels with a password of their own (`requirepass`, `sentinel sentinel-pass`), a
 * group of their own (tests/php/support/SentinelGroup.php): with the sentinels' password
 * (the `sentinel` option, the INI default, the CLI's) decisions are made on the primary;
 * without it or with a wrong one they are unavailable, the cause named, no password shown.
 */
final class SentinelPasswordTest extends LimiterTestCase
{
    private const PASSWORD = 'sentinel-hunter2';
    private static SentinelGroup $group;

    public static function setUpBeforeClass(): void
    {
        self::$group = new SentinelGroup(self::PASSWORD);
        self::$group->start();
        ini_set('checkout_guard.retry_interval_ms', '50');
    }

    public static function tearDownAfterClass(): void
    {
        self::$group->stop();
        ini_restore('checkout_guard.retry_interval_ms');
    }

    private function sentineled(string $name, array $options): \CheckoutGuard\RateLimiter
    {
        return $this->limiter($options + [
            'name' => $name,
            'url' => self::$group->url(),
            'global' => self::bucket(100_000),
            'timeout_ms' => 200,
        ]);
    }

    public function testWithTheSentinelsPasswordDecisionsLandOnThePrimary(): void
    {
        $name = self::uniqueName('senpw');
        $l = $this->sentineled($name, ['sentinel' => ['password' => self::PASSWORD], 'on_unavailable' => 'throw']);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertNotFalse(self::$group->primary->client()->get("{cg:$name}:b:global"), 'the bucket key is on the primary');
        $h = $l->health();
        $this->assertTrue($h['ok'], json_encode($h));
        $this->assertSame('127.0.0.1:' . self::$group->primary->port, $h['sentinel_primary']);
        $this->assertStringNotContainsString(self::PASSWORD, json_encode($h));

        // The INI default, where the option gives none.
        ini_set('checkout_guard.sentinel.password', self::PASSWORD);
        try {
            $l = $this->sentineled(self::uniqueName('senpw'), ['on_unavailable' => 'throw']);
            $this->assertTrue($l->acquire('s')->isAllowed());
        } finally {
            ini_restore('checkout_guard.sentinel.password');
        }
    }

    public function testWithoutItOrWithAWrongOneDecisionsAreUnavailableAndNoPasswordIsShown(): void
    {
        foreach ([
            'NOAUTH' => [],
            'WRONGPASS' => ['sentinel' => ['password' => 'wrong-secret']],
        ] as $cause => $options) {
            $l = $this->sentineled(self::uniqueName('senpw'), $options + ['on_unavailable' => 'deny']);
            $d = $l->acquire('s');
            $this->assertFalse($d->isAllowed());
            $this->assertSame('unavailable', $d->reason());
            $error = (string) $l->health(false)['last_error'];
            $this->assertStringContainsString('sentinel: no sentinel answered for service ' . SentinelGroup::SERVICE, $error);
            $this->assertStringContainsString($cause, $error);
            $all = json_encode($l->health(false));
            $this->assertStringNotContainsString(self::PASSWORD, $all);
            $this->assertStringNotContainsString('wrong-secret', $all);
        }
    }

    public function testTheCliTakesTheSentinelsPassword(): void
    {
        $name = self::uniqueName('senpwcli');
        $this->sentineled($name, ['sentinel' => ['password' => self::PASSWORD]])->acquire('s');
        putenv('CHECKOUT_GUARD_SENTINEL_PASSWORD=' . self::PASSWORD);
        try {
            [$code, $out, $err] = Cli::limiter(self::$group->url(), $name, 'status', '--json');
        } finally {
            putenv('CHECKOUT_GUARD_SENTINEL_PASSWORD');
        }
        $this->assertSame(0, $code, $err);
        $this->assertIsArray(json_decode($out, true), $out);
        [$code, $out, $err] = Cli::limiter(self::$group->url(), $name, 'status');
        $this->assertNotSame(0, $code, 'no password for the sentinels: ' . $out);
        $this->assertStringContainsString('sentinel: no sentinel answered', $err);
        $this->assertStringNotContainsString(self::PASSWORD, $out . $err);
    }
}
