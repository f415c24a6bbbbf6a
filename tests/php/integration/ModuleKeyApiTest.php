<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * The native module decides on Valkey's key API, never through `RM_Call`: what keeps it
 * several times cheaper than the script (docs/module.md#what-it-costs). A regression to
 * `RM_Call` is caught here by what Valkey counts, not by timing: every command a module
 * (or a script) runs through the server's call path shows in `INFO commandstats`, as the
 * script's control case shows, while the key API runs no command at all.
 */
final class ModuleKeyApiTest extends LimiterTestCase
{
    private const DECISIONS = 60;

    /** Every commandstats entry but the ones the test itself sends: name => calls. */
    private static function commands(\Redis $r): array
    {
        preg_match_all('/^cmdstat_([^:]+):calls=(\d+)/m', (string) $r->rawCommand('INFO', 'commandstats'), $m, PREG_SET_ORDER);
        $seen = [];
        foreach ($m as [, $name, $calls]) {
            if (!in_array(strtolower($name), ['info', 'config|resetstat', 'config', 'ping', 'hello', 'client|setinfo', 'client'], true)) {
                $seen[strtolower($name)] = (int) $calls;
            }
        }
        ksort($seen);
        return $seen;
    }

    /** Decisions of every kind (global; hot lane + hot shop; auto_hot's window) under `$engine`. */
    private static function decide(ValkeyProcess $v, string $engine): array
    {
        $r = $v->client();
        $r->rawCommand('CONFIG', 'RESETSTAT');
        $old = ini_set('checkout_guard.local_denials', '0');
        try {
            $l = new RateLimiter([
                'name' => self::uniqueName("keyapi-$engine"),
                'url' => $v->url(),
                'engine' => $engine,
                'global' => self::bucket(1000, 100.0),
                'hot_lane' => self::bucket(500, 50.0),
                'hot_shop' => self::bucket(5, 1.0),
                'hot_shops' => ['hot'],
                'auto_hot' => true,
            ]);
            for ($i = 0; $i < self::DECISIONS / 3; $i++) {
                $l->acquire('shop-' . ($i % 4));
                $l->acquire('hot');
                $l->peek('shop-9');
            }
            self::assertSame($engine === 'lua' ? 'lua' : 'module', $l->health(false)['engine']);
        } finally {
            ini_set('checkout_guard.local_denials', $old === false ? '1' : $old);
        }
        return self::commands($r);
    }

    public function testTheModuleRunsNoCommandsForADecision(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            // Control: the script's commands are counted, so the check below can fail.
            $script = self::decide($v, 'lua');
            $nested = array_sum(array_diff_key($script, ['evalsha' => 0, 'eval' => 0, 'script|load' => 0]));
            $this->assertGreaterThanOrEqual(self::DECISIONS, $nested, 'the script runs commands for its decisions: ' . json_encode($script));

            $module = self::decide($v, 'module');
            $this->assertSame(self::DECISIONS, $module['cg.decide'] ?? 0, 'one CG.DECIDE per decision: ' . json_encode($module));
            unset($module['cg.decide']);
            // What else the limiter sends (its live-limits read, once per limiter and
            // cache period) stays a few calls, however many decisions were made.
            foreach ($module as $name => $calls) {
                $this->assertLessThan(self::DECISIONS / 4, $calls, "$name ran $calls times for " . self::DECISIONS . ' module decisions: CG.DECIDE runs commands (RM_Call) instead of using the key API');
            }
        } finally {
            $v->stop();
        }
    }
}
