<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * Bad options: a ConfigurationException naming the option and the value. No Valkey: bad
 * arguments to a limiter and the INI defaults are in OptionsValkeyTest.
 */
final class OptionsTest extends LimiterTestCase
{
    public static function badOptions(): array
    {
        $g = ['capacity' => 10, 'refill_per_second' => 5.0];
        return [
            'unknown key' => [['global' => $g, 'burst' => 3], '"burst" is not a known option'],
            'missing global' => [[], 'global is required'],
            'capacity zero' => [['global' => ['capacity' => 0, 'refill_per_second' => 1]], 'global.capacity must be an integer from 1'],
            'capacity float' => [['global' => ['capacity' => 1.5, 'refill_per_second' => 1]], 'global.capacity must be an integer >= 1, got float 1.5'],
            'capacity string' => [['global' => ['capacity' => '10', 'refill_per_second' => 1]], 'global.capacity must be an integer >= 1, got string "10"'],
            'rate negative' => [['global' => ['capacity' => 1, 'refill_per_second' => -2]], 'global.refill_per_second must be a number greater than 0'],
            'unknown bucket key' => [['global' => $g + ['burst' => 1]], 'global.burst is not a known option'],
            'lane above global' => [['global' => $g, 'hot_lane' => ['capacity' => 11, 'refill_per_second' => 1]], 'hot_lane.capacity may not exceed global.capacity (10), got 11'],
            'lane rate above global' => [['global' => $g, 'hot_lane' => ['capacity' => 5, 'refill_per_second' => 6]], 'hot_lane.refill_per_second may not exceed'],
            'shop above global' => [['global' => $g, 'hot_shop' => ['capacity' => 20, 'refill_per_second' => 1]], 'hot_shop.capacity may not exceed'],
            'hot_shops not a list' => [['global' => $g, 'hot_shops' => 'shop-1'], 'hot_shops must be a list of shop IDs'],
            'hot_shops control char' => [['global' => $g, 'hot_shops' => ["a\nb"]], 'hot_shops[0] must not contain control characters'],
            'bad name' => [['global' => $g, 'name' => 'a b'], 'name must be 1 to 64 characters'],
            'bad url' => [['global' => $g, 'url' => 'http://127.0.0.1'], 'url must be a redis://'],
            'timeout zero' => [['global' => $g, 'timeout_ms' => 0], 'timeout_ms must be an integer from 1 to 60000, got 0'],
            'bad policy' => [['global' => $g, 'on_unavailable' => 'open'], 'on_unavailable must be "allow", "deny" or "throw", got "open"'],
            'bad mode' => [['global' => $g, 'mode' => 'dry-run'], 'mode must be "enforce" or "shadow", got "dry-run"'],
            'mode not a string' => [['global' => $g, 'mode' => true], 'mode must be "enforce" or "shadow", got bool'],
        ];
    }

    /** @dataProvider badOptions */
    #[DataProvider('badOptions')]
    public function testBadOptionsAreRejectedWithTheOptionAndValueNamed(array $options, string $message): void
    {
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($message);
        new RateLimiter($options);
    }

    public function testConfigurationExceptionIsAnInvalidArgumentExceptionWithATrace(): void
    {
        try {
            new RateLimiter([]);
            $this->fail('no exception');
        } catch (\InvalidArgumentException $e) {
            $this->assertInstanceOf(ConfigurationException::class, $e);
            $this->assertSame(__FILE__, $e->getFile());
            $this->assertGreaterThan(0, $e->getLine());
        }
        $this->assertInstanceOf(\RuntimeException::class, new \CheckoutGuard\UnavailableException('x'));
    }

    /**
     * A sentinels' user without their password would send no AUTH at all (AUTH takes a
     * password): refused, named where the user came from; a password alone is fine.
     */
    public function testASentinelUserWithoutAPasswordIsRefusedNamed(): void
    {
        $url = 'valkey+sentinel://127.0.0.1:1/orders';
        $cases = [
            [['sentinel' => ['user' => 'sen']], [], 'checkout_guard: sentinel.user is given without a password'],
            [[], ['checkout_guard.sentinel.user' => 'sen'], 'checkout_guard: checkout_guard.sentinel.user is given without a password'],
            [['sentinel' => []], ['checkout_guard.sentinel.user' => 'sen'], 'checkout_guard: checkout_guard.sentinel.user is given without a password'],
        ];
        foreach ($cases as [$options, $ini, $message]) {
            foreach ($ini as $k => $v) {
                ini_set($k, $v);
            }
            try {
                new RateLimiter($options + ['global' => self::bucket(1), 'url' => $url]);
                $this->fail('accepted: ' . json_encode([$options, $ini]));
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString($message, $e->getMessage());
            } finally {
                foreach ($ini as $k => $v) {
                    ini_restore($k);
                }
            }
        }
        // With the password (the option's or the INI's), or a password alone: made.
        new RateLimiter(['global' => self::bucket(1), 'url' => $url, 'sentinel' => ['user' => 'sen', 'password' => 'pw']]);
        new RateLimiter(['global' => self::bucket(1), 'url' => $url, 'sentinel' => ['password' => 'pw']]);
        ini_set('checkout_guard.sentinel.password', 'pw');
        try {
            new RateLimiter(['global' => self::bucket(1), 'url' => $url, 'sentinel' => ['user' => 'sen']]);
        } finally {
            ini_restore('checkout_guard.sentinel.password');
        }
        $this->addToAssertionCount(3);
    }

    public function testPasswordInABadUrlIsNotShown(): void
    {
        try {
            new RateLimiter(['global' => self::bucket(1), 'url' => 'rediss://app:hunter2@127.0.0.1:6379#insecure']);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringNotContainsString('hunter2', $e->getMessage());
            $this->assertStringContainsString('app:***@', $e->getMessage());
        }
    }

    public function testModeIsEnforceByDefaultTheIniSetsEveryLimitersAndTheOptionWins(): void
    {
        $g = self::bucket(1);
        $url = 'redis://127.0.0.1:' . ValkeyProcess::freePort();
        // health(false) sends nothing: no Valkey needed.
        $this->assertSame('enforce', $this->limiter(['global' => $g, 'url' => $url])->health(false)['mode']);
        $this->assertSame('shadow', $this->limiter(['global' => $g, 'url' => $url, 'mode' => 'shadow'])->health(false)['mode']);
        $old = ini_set('checkout_guard.mode', 'shadow');
        try {
            $this->assertSame('shadow', $this->limiter(['global' => $g, 'url' => $url])->health(false)['mode']);
            $this->assertSame('enforce', $this->limiter(['global' => $g, 'url' => $url, 'mode' => 'enforce'])->health(false)['mode']);
            ini_set('checkout_guard.mode', 'Shadow');
            try {
                $this->limiter(['global' => $g, 'url' => $url]);
                $this->fail('a bad checkout_guard.mode is refused');
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString('checkout_guard.mode must be "enforce" or "shadow", got "Shadow"', $e->getMessage());
            }
        } finally {
            ini_set('checkout_guard.mode', (string) $old);
        }
    }

    public function testAShadowLimiterLetsAnUnavailableDenyThroughAndSaysSo(): void
    {
        $url = 'redis://127.0.0.1:' . ValkeyProcess::freePort();
        $d = $this->limiter(['global' => self::bucket(1), 'url' => $url, 'timeout_ms' => 20, 'on_unavailable' => 'deny', 'mode' => 'shadow'])->acquire('s');
        $this->assertSame([true, false, true, 'unavailable'], [$d->isAllowed(), $d->wouldAllow(), $d->isShadow(), $d->reason()]);
        $d = $this->limiter(['global' => self::bucket(1), 'url' => $url, 'timeout_ms' => 20, 'on_unavailable' => 'deny'])->acquire('s');
        $this->assertSame([false, false, false], [$d->isAllowed(), $d->wouldAllow(), $d->isShadow()]);
        // throw still throws in shadow mode: the mode changes isAllowed(), not the control flow.
        $this->expectException(\CheckoutGuard\UnavailableException::class);
        $this->limiter(['global' => self::bucket(1), 'url' => $url, 'timeout_ms' => 20, 'on_unavailable' => 'throw', 'mode' => 'shadow'])->acquire('s');
    }

    public function testPhpinfoShowsSettingsWithThePasswordMasked(): void
    {
        ini_set('checkout_guard.url', 'redis://app:hunter2@127.0.0.1:6379/0');
        ob_start();
        phpinfo(INFO_MODULES);
        $info = ob_get_clean();
        ini_restore('checkout_guard.url');
        $this->assertStringContainsString('checkout_guard.url => redis://app:***@127.0.0.1:6379/0', $info);
        $this->assertStringContainsString('checkout_guard.on_unavailable => allow', $info);
        $this->assertStringContainsString('checkout_guard.mode => enforce', $info);
        $this->assertMatchesRegularExpression('/mode in force => /', $info);
        $this->assertMatchesRegularExpression('/version => \d+\.\d+\.\d+/', $info);
        $this->assertStringNotContainsString('hunter2', $info);
    }
}
