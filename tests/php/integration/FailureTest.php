<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use CheckoutGuard\UnavailableException;

/**
 * A down, restarted, paused or flushed Valkey never hangs or crashes a checkout: the
 * policy decides within about timeout_ms, the back-off answers at once, and a broken
 * connection is replaced transparently. Each test runs its own Valkey.
 *
 * The wall-clock bounds below are hang detectors (10x and more above the expected
 * times), not performance targets.
 */
final class FailureTest extends OwnValkeyTestCase
{
    private function own(array $options = []): RateLimiter
    {
        return $this->limiter($options + [
            'url' => $this->valkey->url(),
            'global' => self::bucket(100),
            'timeout_ms' => 50,
        ]);
    }

    private static function timed(callable $f): array
    {
        $t = hrtime(true);
        $r = $f();
        return [$r, (hrtime(true) - $t) / 1e9];
    }

    public function testOnePersistentConnectionPerProcessAcrossLimiters(): void
    {
        for ($i = 0; $i < 5; $i++) {
            $l = $this->own(['name' => "conn-$i"]);
            $this->assertTrue($l->acquire('s')->isAllowed());
        }
        $this->assertSame(1, $this->ourConnections());
    }

    public function testAForkedChildNeverUsesItsParentsConnection(): void
    {
        $l = $this->own(['global' => self::bucket(10)]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $result = tempnam(sys_get_temp_dir(), 'cg-fork');
        $pid = pcntl_fork();
        if ($pid === 0) {
            // Child: decides, reports, and waits to be killed (never running PHPUnit's
            // shutdown, which would stop this test's Valkey).
            $a = $l->acquire('s');
            $b = $l->acquire('s');
            file_put_contents($result, $a->reason() . ',' . $b->remaining());
            sleep(30);
            posix_kill(getmypid(), SIGKILL);
        }
        for ($i = 0; $i < 500 && filesize($result) === 0; $i++) {
            usleep(10000);
            clearstatcache();
        }
        // While the child lives, it holds a connection of its own next to the parent's.
        $connections = $this->ourConnections();
        posix_kill($pid, SIGKILL);
        pcntl_waitpid($pid, $status);
        $this->assertSame('allowed,7', file_get_contents($result));
        unlink($result);
        $this->assertSame(2, $connections, 'the child opened its own connection');
        // The parent's socket was not touched by the child: its next call is in step.
        $d = $l->acquire('s');
        $this->assertSame(['allowed', 6], [$d->reason(), $d->remaining()]);
        usleep(50000);
        $this->assertSame(1, $this->ourConnections(), 'the child\'s connection died with it');
    }

    public function testValkeyStoppedAndRestartedMidTest(): void
    {
        $l = $this->own(['global' => self::bucket(3)]);
        // Not drained: a drained bucket would be denied locally, without asking Valkey
        // (LocalDenialsTest covers that case).
        $this->assertSame(['allowed' => 2], self::drain($l, 's', 2));

        $this->valkey->stop();
        [$d, $secs] = self::timed(fn () => $l->acquire('s'));
        $this->assertSame('unavailable', $d->reason());
        $this->assertTrue($d->isAllowed(), 'on_unavailable=allow lets the checkout through');
        $this->assertLessThan(1.0, $secs);
        // Within retry_interval_ms (1000 by default) nobody tries again: answered at once.
        [$d, $secs] = self::timed(fn () => $l->acquire('s'));
        $this->assertSame('unavailable', $d->reason());
        $this->assertLessThan(0.05, $secs);

        // Valkey back: still backing off. That Valkey is asked again once the interval
        // has passed is checked on a fake clock (crates/runtime/tests/backoff_after_failure.rs),
        // and that a restarted Valkey gives full buckets below.
        $this->valkey->start();
        [$d, $secs] = self::timed(fn () => $l->acquire('s'));
        $this->assertSame('unavailable', $d->reason(), 'still backing off');
        $this->assertLessThan(0.05, $secs);
    }

    public function testARestartBetweenTwoRequestsIsRecoveredTransparently(): void
    {
        $l = $this->own();
        $this->assertTrue($l->acquire('s')->isAllowed());
        // Restarted while this worker's connection sat idle: the old socket is dead and
        // the script cache is empty. The next call must simply work.
        $this->valkey->stop();
        $this->valkey->start();
        $d = $l->acquire('s');
        $this->assertSame('allowed', $d->reason());
        $this->assertSame(99, $d->remaining(), 'the restarted Valkey is empty: a full bucket');
    }

    public function testScriptFlushIsRecoveredWithoutAnErrorSeenByPhp(): void
    {
        $l = $this->own(['on_unavailable' => 'throw']);
        $this->assertSame('allowed', $l->acquire('s')->reason());
        $this->valkey->client()->rawCommand('SCRIPT', 'FLUSH');
        $d = $l->acquire('s');
        $this->assertSame('allowed', $d->reason());
        $this->assertSame(98, $d->remaining());
    }

    public function testPausedValkeyTimesOutInsteadOfHanging(): void
    {
        $l = $this->own(['on_unavailable' => 'deny', 'timeout_ms' => 100]);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->valkey->pause();
        try {
            [$d, $secs] = self::timed(fn () => $l->acquire('s'));
        } finally {
            $this->valkey->resume();
        }
        $this->assertFalse($d->isAllowed());
        $this->assertSame('unavailable', $d->reason());
        $this->assertGreaterThanOrEqual(0.09, $secs, 'waited for the timeout');
        $this->assertLessThan(1.0, $secs);
        $this->assertGreaterThan(0.0, $d->retryAfter(), 'deny says when it will try again');
        $this->assertLessThanOrEqual(1.0, $d->retryAfter());
    }

    public function testThrowPolicyAndAdministrativeCallsRaiseUnavailableException(): void
    {
        $this->valkey->stop();
        $l = $this->own(['on_unavailable' => 'throw', 'url' => 'redis://app:hunter2@127.0.0.1:' . $this->valkey->port]);
        foreach ([fn () => $l->acquire('s'), fn () => $l->markHot('s', 5), fn () => $l->isHot('s'), fn () => $l->reset()] as $call) {
            try {
                $call();
                $this->fail('no exception');
            } catch (UnavailableException $e) {
                $this->assertStringContainsString('Valkey unavailable at redis://app:***@127.0.0.1', $e->getMessage());
                $this->assertStringNotContainsString('hunter2', $e->getMessage());
            }
        }
        // hot_shops are known without Valkey.
        $l2 = $this->own(['on_unavailable' => 'deny', 'hot_shops' => ['h']]);
        $this->assertTrue($l2->isHot('h'));
        $d = $l2->acquire('h');
        $this->assertSame([false, 'unavailable', true], [$d->isAllowed(), $d->reason(), $d->isHotShop()]);
    }

    public function testAReplicaNeverMakesADecision(): void
    {
        $this->valkey->client()->config('SET', 'repl-diskless-sync-delay', '0');
        $replica = new ValkeyProcess();
        $replica->start(['--replicaof', '127.0.0.1', (string) $this->valkey->port]);
        // Every decision goes to Valkey here (no local denial from this process's table).
        ini_set('checkout_guard.local_denials', '0');
        try {
            $name = self::uniqueName('replica');
            $primary = $this->own(['name' => $name, 'global' => self::bucket(1)]);
            $this->assertTrue($primary->acquire('s')->isAllowed());
            for ($i = 0; $i < 200 && !$replica->client()->exists("{cg:$name}:b:global"); $i++) {
                usleep(20000);
            }
            $this->assertSame(1, (int) $replica->client()->exists("{cg:$name}:b:global"), 'replicated');
            // The drained bucket is on the replica: a denial there would need no write,
            // and is still refused (the script is a write script), as is an allowance.
            foreach ([$name, self::uniqueName('replica')] as $n) {
                $l = $this->own(['name' => $n, 'global' => self::bucket(1), 'url' => $replica->url(), 'on_unavailable' => 'throw']);
                try {
                    $d = $l->acquire('s');
                    $this->fail("a decision was made on a replica: {$d->reason()}");
                } catch (UnavailableException $e) {
                    $this->assertStringContainsString('read only replica', $e->getMessage());
                }
            }
            $d = $this->own(['url' => $replica->url(), 'on_unavailable' => 'deny'])->acquire('s');
            $this->assertSame('unavailable', $d->reason());
            $this->assertFalse($d->isAllowed());
        } finally {
            ini_restore('checkout_guard.local_denials');
            $replica->stop();
        }
    }
}
