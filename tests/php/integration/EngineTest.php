<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\UnavailableException;

/**
 * The engine that decides in Valkey: option `engine` / INI `checkout_guard.engine`
 * (`auto`, `lua`, `module`); `health()['engine']` says which decided last. A module
 * loaded into a running Valkey is picked up after the recheck: on a fake clock, in
 * crates/runtime/tests/engine.rs (no test waits the 5 s out).
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
}
