<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * Bad arguments to a limiter and the INI defaults, on limiters of the test Valkey
 * (OptionsTest has the bad options, which need no Valkey).
 */
final class OptionsValkeyTest extends LimiterTestCase
{
    public static function badArguments(): array
    {
        return [
            'empty shop' => [fn ($l) => $l->acquire(''), 'shopId must be 1 to 128 bytes, got 0 bytes'],
            'long shop' => [fn ($l) => $l->acquire(str_repeat('s', 129)), 'shopId must be 1 to 128 bytes, got 129 bytes'],
            'control char' => [fn ($l) => $l->acquire("shop\x00x"), 'shopId must not contain control characters (byte 0x00 at offset 4)'],
            'zero tokens' => [fn ($l) => $l->acquire('s', 0), 'tokens must be from 1 to 3 (the smallest configured capacity), got 0'],
            'too many tokens' => [fn ($l) => $l->acquire('s', 4), 'got 4'],
            'ttl zero' => [fn ($l) => $l->markHot('s', 0), 'ttlSeconds must be from 1 to'],
            'hot empty shop' => [fn ($l) => $l->isHot(''), 'shopId must be 1 to 128 bytes'],
        ];
    }

    /** @dataProvider badArguments */
    #[DataProvider('badArguments')]
    public function testBadArgumentsAreRejected(callable $call, string $message): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(3)]);
        $this->expectException(ConfigurationException::class);
        $this->expectExceptionMessage($message);
        $call($l);
    }

    public function testBinaryAndUnicodeShopIdsAreAccepted(): void
    {
        $l = $this->limiter(['global' => self::bucket(10)]);
        foreach (["\xff\xfe", 'ショップ{1}', 'a:b c', str_repeat('x', 128)] as $shop) {
            $this->assertTrue($l->acquire($shop)->isAllowed());
        }
    }

    public function testIniDefaultsApplyAndOptionsOverrideThem(): void
    {
        // The INI default url points at the test Valkey only if set; here the option wins.
        // The built-in default, unless the run set another (scripts/valgrind.sh: 2000).
        $this->assertSame((string) (getenv('CHECKOUT_GUARD_TEST_TIMEOUT_MS') ?: '50'), ini_get('checkout_guard.timeout_ms'));
        $this->assertSame('allow', ini_get('checkout_guard.on_unavailable'));
        ini_set('checkout_guard.url', self::url());
        $l = new RateLimiter(['name' => self::uniqueName(), 'global' => self::bucket(2)]);
        $this->assertSame('allowed', $l->acquire('s')->reason());
        ini_set('checkout_guard.timeout_ms', 'soon');
        try {
            new RateLimiter(['global' => self::bucket(2)]);
            $this->fail('bad INI value accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('checkout_guard.timeout_ms must be an integer from 1 to 60000, got "soon"', $e->getMessage());
        } finally {
            ini_restore('checkout_guard.timeout_ms');
            ini_restore('checkout_guard.url');
        }
    }
}
