<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Tests that decide on both engines (data provider engines()) against one Valkey of the
 * test class's own, started with the native module loaded: `engine => 'lua'` decides with
 * the script, `'module'` with CG.DECIDE, on the same server.
 */
abstract class ModuleValkeyTestCase extends LimiterTestCase
{
    protected static ?ValkeyProcess $valkey = null;

    public static function setUpBeforeClass(): void
    {
        static::$valkey = new ValkeyProcess();
        static::$valkey->start(['--loadmodule', self::valkeyModule()]);
    }

    public static function tearDownAfterClass(): void
    {
        static::$valkey?->stop();
        static::$valkey = null;
    }

    /** @return array<string, array{string}> */
    public static function engines(): array
    {
        return ['lua' => ['lua'], 'module' => ['module']];
    }

    /**
     * `$more` over the options of a limiter on this class's Valkey deciding with `$engine`,
     * under a name no other test uses, throwing when Valkey cannot be asked.
     */
    protected static function options(string $engine, array $more): array
    {
        return $more + [
            'name' => self::uniqueName("m-$engine"),
            'url' => static::$valkey->url(),
            'engine' => $engine,
            'on_unavailable' => 'throw',
        ];
    }
}
