<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\UnavailableException;

/**
 * The engine that decides in Valkey: option `engine` / INI `checkout_guard.engine`
 * (`auto`, `lua`, `module`); `health()['engine']` says which decided last.
 */
final class EngineTest extends LimiterTestCase
{
    public function testAutoUsesTheModuleWhereValkeyHasItAndDecidesTheSame(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            $byEngine = [];
            foreach (['auto', 'lua'] as $engine) {
                $l = new \CheckoutGuard\RateLimiter([
                    'name' => self::uniqueName("engine-$engine"),
                    'url' => $v->url(),
                    'global' => self::bucket(3),
                    'engine' => $engine,
                ]);
                $byEngine[$engine] = array_map(
                    static fn () => [$l->acquire('shop')->isAllowed(), $l->acquire('shop')->remaining()],
                    range(1, 3)
                );
                $this->assertSame($engine === 'auto' ? 'module' : 'lua', $l->health()['engine']);
                ob_start();
                phpinfo(INFO_MODULES);
                $info = (string) ob_get_clean();
                $this->assertStringContainsString(
                    'engine of the last decision => ' . ($engine === 'auto' ? 'module' : 'lua'),
                    $info,
                    'phpinfo() names the engine that decided'
                );
            }
            $this->assertSame($byEngine['lua'], $byEngine['auto'], 'the same decisions from both engines');
            // Three decisions asked Valkey per engine; the denials after them were made in
            // the worker (local denials), whichever engine taught it.
            $stats = $v->client()->rawCommand('INFO', 'commandstats');
            $this->assertMatchesRegularExpression('/cmdstat_CG\.DECIDE:calls=3,/', $stats);
        } finally {
            $v->stop();
        }
    }

    public function testModuleWithoutTheModuleAppliesThePolicyAndSaysWhy(): void
    {
        $name = self::uniqueName('engine-missing');
        $deny = $this->limiter(['name' => $name, 'global' => self::bucket(3), 'engine' => 'module', 'on_unavailable' => 'deny']);
        $d = $deny->acquire('shop');
        $this->assertFalse($d->isAllowed());
        $this->assertSame('unavailable', $d->reason());
        $throw = $this->limiter(['name' => $name, 'global' => self::bucket(3), 'engine' => 'module', 'on_unavailable' => 'throw']);
        try {
            $throw->acquire('shop');
            $this->fail('no exception');
        } catch (UnavailableException $e) {
            $this->assertStringContainsString('checkout_guard module is not loaded', $e->getMessage());
        }
    }

    public function testABadEngineNamesTheOptionAndTheSetting(): void
    {
        try {
            $this->limiter(['global' => self::bucket(3), 'engine' => 'rust']);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('engine must be "auto", "lua" or "module", got "rust"', $e->getMessage());
        }
        $old = ini_set('checkout_guard.engine', 'fast');
        try {
            $this->limiter(['global' => self::bucket(3)]);
            $this->fail('no exception');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('checkout_guard.engine must be', $e->getMessage());
        } finally {
            ini_set('checkout_guard.engine', (string) $old);
        }
    }

    /**
     * engine = auto on a connection that is never replaced (pm.max_requests = 0): a module
     * loaded later decides within MODULE_RECHECK (5 s; bounded here at 15 s), one
     * unloaded is left at once, and without the module COMMAND INFO is not asked per call.
     */
    public function testAutoPicksUpAModuleLoadedIntoTheRunningValkey(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--enable-module-command', 'yes']);
        try {
            $l = new \CheckoutGuard\RateLimiter([
                'name' => self::uniqueName('engine-load'),
                'url' => $v->url(),
                'global' => self::bucket(1_000_000, 1000.0),
                'engine' => 'auto',
            ]);
            $admin = $v->client();
            $commandInfo = static fn () => preg_match('/cmdstat_command\|info:calls=(\d+)/', $admin->rawCommand('INFO', 'commandstats'), $m) ? (int) $m[1] : 0;
            for ($i = 0; $i < 50; $i++) {
                $this->assertTrue($l->acquire('shop')->isAllowed());
            }
            $this->assertSame('lua', $l->health(false)['engine']);
            $this->assertLessThanOrEqual(2, $commandInfo(), 'the module is not asked for on every call');
            $connects = $l->health(false)['connects'];

            $admin->rawCommand('MODULE', 'LOAD', self::valkeyModule());
            $deadline = microtime(true) + 15.0;
            $calls = 0;
            while ($l->health(false)['engine'] !== 'module' && microtime(true) < $deadline) {
                $this->assertTrue($l->acquire('shop')->isAllowed());
                $calls++;
                usleep(50_000);
            }
            $this->assertSame('module', $l->health(false)['engine'], "still the script after $calls decisions in 15 s");
            $this->assertSame($connects, $l->health(false)['connects'], 'on the same connection');

            $admin->rawCommand('MODULE', 'UNLOAD', 'checkout_guard');
            $d = $l->acquire('shop');
            $this->assertTrue($d->isAllowed());
            $this->assertNotSame('unavailable', $d->reason(), 'an unloaded module: the script at once');
            $this->assertSame('lua', $l->health(false)['engine']);
        } finally {
            $v->stop();
        }
    }
}
