<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use CheckoutGuard\UnavailableException;

/**
 * The limiter against a Valkey Cluster of three primaries with a replica each, started
 * here from the same valkey-server binary: decisions on every primary, redirections
 * followed (MOVED after a reshard, ASK during one), and a failover of the primary that
 * holds a limiter's slot survived, the script loaded again on the promoted replica.
 * Every node has the native module loaded: limiters decide with `CG.DECIDE` (engine
 * auto), and with the script where a test asks for engine lua.
 */
final class ClusterTest extends LimiterTestCase
{
    private static ValkeyCluster $cluster;

    public static function setUpBeforeClass(): void
    {
        self::$cluster = new ValkeyCluster();
        self::$cluster->start(['--loadmodule', self::valkeyModule()]);
        ini_set('checkout_guard.retry_interval_ms', '100');
    }

    public static function tearDownAfterClass(): void
    {
        self::$cluster->stop();
        ini_restore('checkout_guard.retry_interval_ms');
    }

    private function clustered(string $name, array $options = []): RateLimiter
    {
        return $this->limiter($options + [
            'name' => $name,
            'url' => self::$cluster->url(),
            'global' => self::bucket(5),
            'timeout_ms' => 200,
        ]);
    }

    private static function slotKey(string $name): string
    {
        return "{cg:$name}:b:global";
    }

    /** A fresh limiter name whose slot is served by primary `$i`. */
    private function nameOnPrimary(int $i): string
    {
        for ($n = 0; $n < 1000; $n++) {
            $name = self::uniqueName('cl');
            if (self::$cluster->primaryOf(self::$cluster->slotOf(self::slotKey($name))) === $i) {
                return $name;
            }
        }
        throw new \RuntimeException("no name found for primary $i");
    }

    /** feedback() and health()'s adaptive read run on the primary of the limiter's slot. */
    public function testTheAdaptiveBudgetLivesInTheLimitersSlot(): void
    {
        foreach ([[0, 'auto'], [1, 'lua'], [2, 'auto']] as [$i, $engine]) {
            $name = $this->nameOnPrimary($i);
            $l = $this->clustered($name, ['engine' => $engine, 'adaptive' => ['recover_seconds' => 3600]]);
            $l->acquire('s');
            $l->feedback('s', 429, 5.0);
            $d = $l->acquire('other');
            $this->assertSame('provider', $d->reason(), "primary $i");
            $h = $l->health();
            $this->assertSame('valkey', $h['adaptive']['source'], (string) $h['adaptive']['read_error']);
            $this->assertGreaterThanOrEqual(0.7, $h['adaptive']['share']);
            $this->assertLessThan(0.71, $h['adaptive']['share']);
            $this->assertSame(429, $h['adaptive']['last_throttle']['status']);
            $this->assertSame(0, $h['adaptive']['feedback_errors']);
            $owner = self::$cluster->nodes[$i]->client();
            $keys = $owner->rawCommand('CLUSTER', 'GETKEYSINSLOT', self::$cluster->slotOf(self::slotKey($name)), 100);
            $this->assertContains("{cg:$name}:adapt", $keys);
            $this->assertContains("{cg:$name}:adapt:last", $keys);
        }
    }

    public function testDecisionsOnEveryPrimaryKeepEachLimitersKeysInItsSlot(): void
    {
        foreach ([[0, 'auto'], [1, 'auto'], [2, 'auto'], [0, 'lua'], [1, 'lua'], [2, 'lua']] as [$i, $engine]) {
            $name = $this->nameOnPrimary($i);
            $l = $this->clustered($name, ['hot_lane' => self::bucket(3), 'hot_shop' => self::bucket(2), 'hot_shops' => ['flash'], 'engine' => $engine]);
            $this->assertSame(['allowed' => 2, 'hot_shop' => 3], self::drain($l, 'flash', 5), "primary $i");
            $this->assertSame(['allowed' => 3, 'global' => 2], self::drain($l, 'other', 5), "primary $i");
            $l->markHot('marked', 60);
            $this->assertTrue($l->isHot('marked'));
            // Every key the limiter wrote lives on that primary, in the one slot.
            $owner = self::$cluster->nodes[$i]->client();
            $slot = self::$cluster->slotOf(self::slotKey($name));
            $keys = $owner->rawCommand('CLUSTER', 'GETKEYSINSLOT', $slot, 100);
            sort($keys);
            $this->assertSame([
                "{cg:$name}:b:global", "{cg:$name}:b:lane", "{cg:$name}:b:shop:flash", "{cg:$name}:hot:marked",
                "{cg:$name}:settings",
            ], $keys);
            // reset() runs on that primary too: the buckets go, the hot mark stays.
            $l->reset();
            $left = $owner->rawCommand('CLUSTER', 'GETKEYSINSLOT', $slot, 100);
            sort($left);
            $this->assertSame(["{cg:$name}:hot:marked", "{cg:$name}:settings"], $left);
            $this->assertTrue($l->acquire('other')->isAllowed());
            $this->assertSame($engine === 'auto' ? 'module' : 'lua', $l->health()['engine'], "primary $i, engine $engine");
        }
        $health = $l->health();
        $this->assertTrue($health['ok'], json_encode($health));
    }

    public function testMovedAndAskAreFollowedAcrossAReshard(): void
    {
        $name = $this->nameOnPrimary(0);
        $l = $this->clustered($name, ['on_unavailable' => 'throw']);
        $this->assertSame(['allowed' => 3], self::drain($l, 's', 3));
        $l->markHot('flagged', 60);
        $slot = self::$cluster->slotOf(self::slotKey($name));
        // While the slot is MIGRATING, its keys already on the target: node 0 answers ASK.
        $seenDuringMigration = null;
        self::$cluster->moveSlot($slot, 0, 1, function () use ($l, &$seenDuringMigration) {
            $seenDuringMigration = $l->isHot('flagged');
        });
        $this->assertTrue($seenDuringMigration, 'ASK followed to the importing node');
        // Migrated: node 0 answers MOVED; the bucket's level came along with its key.
        $this->assertSame(1, self::$cluster->primaryOf($slot));
        $this->assertSame(['allowed' => 2, 'global' => 1], self::drain($l, 's', 3));
        $this->assertSame(1, (int) self::$cluster->nodes[1]->client()->exists(self::slotKey($name)));
    }

    public function testFailoverOfTheSlotsPrimaryIsSurvived(): void
    {
        $name = $this->nameOnPrimary(2);
        // The script's engine: what this test is about is the script loaded again on the
        // promoted replica (the module's decisions on the cluster are the first test's).
        $l = $this->clustered($name, ['global' => self::bucket(1000), 'on_unavailable' => 'throw', 'engine' => 'lua']);
        $this->assertSame(['allowed' => 10], self::drain($l, 's', 10));
        $slot = self::$cluster->slotOf(self::slotKey($name));
        $replica = self::$cluster->replicaOf(2);
        // The replica has the bucket (replicated); its script cache is emptied, as on a
        // replica that never had the script (script caches are not replicated), so the
        // new primary must be given it again.
        self::$cluster->nodes[$replica]->client()->rawCommand('SCRIPT', 'FLUSH');
        $this->assertSame(0, self::cachedScripts($replica));
        self::$cluster->nodes[2]->kill();

        $failed = 0;
        $recovered = false;
        $until = microtime(true) + 30;
        while (microtime(true) < $until) {
            try {
                $d = $l->acquire('s');
                $recovered = true;
                break;
            } catch (UnavailableException $e) {
                // The cluster has not promoted the replica yet: a clear error, never a hang.
                $this->assertStringContainsString('valkey+cluster://', $e->getMessage());
                $failed++;
                usleep(100000);
            }
        }
        $this->assertTrue($recovered, 'no decision within 30 s of the failover');
        $this->assertGreaterThan(0, $failed, 'the kill was noticed');
        $this->assertSame('master', self::$cluster->role($replica));
        $this->assertSame($replica, self::$cluster->primaryOf($slot));
        // The promoted replica had the bucket: the decision continues the count.
        $this->assertTrue($d->isAllowed());
        $this->assertLessThanOrEqual(989, $d->remaining());
        $this->assertGreaterThanOrEqual(1, self::cachedScripts($replica), 'the script was loaded on the new primary');
        // And every call after recovery is an ordinary decision.
        $this->assertSame(['allowed' => 20], self::drain($l, 's', 20));
    }

    public function testTheOnCallCommandLineWorksOnTheCluster(): void
    {
        $name = $this->nameOnPrimary(1);
        $l = $this->clustered($name, ['auto_hot' => ['window_seconds' => 600, 'min_tokens' => 2]]);
        $this->assertSame(['allowed' => 5], self::drain($l, 'flood', 5));
        $this->assertTrue($l->isHot('flood'), 'auto_hot on a cluster: the window counters live in the slot');
        [$code, , $err] = Cli::limiter(self::$cluster->url(), $name, 'set', 'global=50/10', '--by', 'cluster-test');
        $this->assertSame(0, $code, $err);
        // This worker drained the bucket: for at most a second it denies locally what it
        // knows Valkey would (the flood fast path), then its next call finds the change.
        $this->assertSame('global', $l->acquire('other')->reason());
        usleep(1_100_000);
        // The drained bucket carried over empty and refilled at the new 10/s since the
        // change: tokens the old limits (5, one per 1000 s) could never have given.
        $d = $l->acquire('other');
        $this->assertTrue($d->isAllowed(), $d->reason());
        $this->assertGreaterThanOrEqual(5, $d->remaining());
        $this->assertLessThanOrEqual(49, $d->remaining());
        [$code, , $err] = Cli::limiter(self::$cluster->url(), $name, 'hot', 'marked');
        $this->assertSame(0, $code, $err);
        [$code, $out, $err] = Cli::limiter(self::$cluster->url(), $name, 'status', '--json');
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame('global=50/10', $st['limits']);
        $this->assertSame(1, $st['live_version']);
        $this->assertSame([['flood', 'auto'], ['marked', 'marked']], array_map(fn ($h) => [$h['shop'], $h['kind']], $st['hot_shops']));
        $this->assertSame(6.0, (float) $st['window']['tokens']);
    }

    /**
     * A node reset out of the cluster (or restarted without its nodes.conf) still first in
     * the URL answers CLUSTER SLOTS with an empty map: it is passed over like a seed that
     * is down, and the next seed's map decides, with either engine (adversarial review:
     * the empty map was taken, every decision "no node serves the slot" for the process's
     * life), and so does the CLI.
     */
    public function testASeedOutsideTheClusterFirstInTheUrlIsPassedOver(): void
    {
        $lone = new ValkeyProcess();
        $lone->start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--loadmodule', self::valkeyModule()]);
        try {
            $this->assertSame([], $lone->client()->rawCommand('CLUSTER', 'SLOTS'));
            $url = "valkey+cluster://127.0.0.1:{$lone->port},127.0.0.1:{$this->clusterPort(1)}";
            foreach (['lua', 'module', 'auto'] as $engine) {
                $name = $this->nameOnPrimary(0);
                $l = $this->limiter(['name' => $name, 'url' => $url, 'global' => self::bucket(5),
                    'timeout_ms' => 200, 'engine' => $engine, 'on_unavailable' => 'throw']);
                $this->assertSame(['allowed' => 5, 'global' => 1], self::drain($l, 's', 6), $engine);
            }
            [$code, $out, $err] = Cli::limiter($url, $name, 'status', '--json');
            $this->assertSame(0, $code, $err);
            $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
            $this->assertSame([['bucket' => 'global', 'capacity' => 5, 'tokens' => 0]], $st['buckets'], $out);
        } finally {
            $lone->stop();
        }
    }

    private function clusterPort(int $i): int
    {
        return self::$cluster->nodes[$i]->port;
    }

    /** Scripts in node `$i`'s script cache (INFO memory). */
    private static function cachedScripts(int $i): int
    {
        $info = self::$cluster->nodes[$i]->client()->rawCommand('INFO', 'memory');
        return preg_match('/number_of_cached_scripts:(\d+)/', $info, $m) ? (int) $m[1] : -1;
    }
}
