<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;
use CheckoutGuard\UnavailableException;

/**
 * The limiter, the CLI and the stream sink through `valkey+sentinel://` against a real
 * group (tests/php/support/SentinelGroup.php): a primary, a replica, three sentinels.
 * The failover test runs last (it kills the primary); every wait is bounded.
 */
final class SentinelTest extends LimiterTestCase
{
    private static SentinelGroup $group;

    public static function setUpBeforeClass(): void
    {
        self::$group = new SentinelGroup();
        self::$group->start();
        ini_set('checkout_guard.retry_interval_ms', '50');
    }

    public static function tearDownAfterClass(): void
    {
        self::$group->stop();
        ini_restore('checkout_guard.retry_interval_ms');
    }

    private function sentineled(string $name, array $options = []): RateLimiter
    {
        return $this->limiter($options + [
            'name' => $name,
            'url' => self::$group->url(),
            'global' => self::bucket(100_000),
            'timeout_ms' => 200,
        ]);
    }

    private static function bucketKey(string $name): string
    {
        return "{cg:$name}:b:global";
    }

    public function testDecisionsThroughASentinelUrlLandOnThePrimary(): void
    {
        $name = self::uniqueName('sen');
        $l = $this->sentineled($name, ['on_unavailable' => 'throw']);
        $primary = self::$group->primary->client();
        $this->assertTrue($l->acquire('s')->isAllowed());
        $first = $primary->get(self::bucketKey($name));
        $this->assertNotFalse($first, 'the bucket key is on the primary');
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertNotSame($first, $primary->get(self::bucketKey($name)), 'the second decision moved it');
        $h = $l->health();
        $this->assertTrue($h['ok'], json_encode($h));
        $this->assertSame(SentinelGroup::SERVICE, $h['sentinel_service']);
        $this->assertSame('127.0.0.1:' . self::$group->primary->port, $h['sentinel_primary']);
    }

    public function testAnUnknownServiceIsUnavailableWithItsCauseNamed(): void
    {
        $l = $this->limiter([
            'url' => self::$group->url('nosuch'),
            'global' => self::bucket(10),
            'timeout_ms' => 200,
            'on_unavailable' => 'throw',
        ]);
        try {
            $l->acquire('s');
            $this->fail('no primary, yet a decision');
        } catch (UnavailableException $e) {
            $this->assertStringContainsString('sentinel: no primary for service nosuch', $e->getMessage());
        }
        $this->assertStringContainsString('sentinel: no primary for service nosuch', (string) $l->health()['last_error']);
    }

    public function testSentinelsThatAreAllDownAreUnavailableWithTheirCauseNamed(): void
    {
        $a = ValkeyProcess::freePort();
        $b = ValkeyProcess::freePort();
        $l = $this->limiter([
            'url' => "valkey+sentinel://127.0.0.1:$a,127.0.0.1:$b/" . SentinelGroup::SERVICE,
            'global' => self::bucket(10),
            'timeout_ms' => 200,
            'on_unavailable' => 'deny',
        ]);
        $d = $l->acquire('s');
        $this->assertFalse($d->isAllowed());
        $this->assertSame('unavailable', $d->reason());
        $this->assertStringContainsString('sentinel: no sentinel answered', (string) $l->health(false)['last_error']);
    }

    public function testTheSentinelOptionIsCheckedAndOnlyForASentinelUrl(): void
    {
        $cases = [
            [['url' => 'redis://127.0.0.1:1', 'sentinel' => ['user' => 'u']], 'sentinel'],
            [['url' => self::$group->url(), 'sentinel' => ['pass' => 'x']], 'sentinel."pass"'],
            [['url' => self::$group->url(), 'sentinel' => ['password' => 7]], 'sentinel.password'],
            [['url' => self::$group->url(), 'sentinel' => 'hunter2secret'], 'sentinel'],
        ];
        foreach ($cases as [$options, $option]) {
            try {
                new RateLimiter($options + ['global' => self::bucket(1)]);
                $this->fail('accepted: ' . json_encode($options));
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString("checkout_guard: $option ", $e->getMessage());
                $this->assertStringNotContainsString('hunter2secret', $e->getMessage());
            }
        }
        // Sentinels that need no password take one given anyway? No: AUTH fails, named.
        $l = $this->sentineled(self::uniqueName('sen'), [
            'sentinel' => ['password' => 'hunter2secret'],
            'on_unavailable' => 'deny',
        ]);
        $this->assertSame('unavailable', $l->acquire('s')->reason());
        $this->assertStringNotContainsString('hunter2secret', json_encode($l->health(false)));
    }

    public function testTheIniDefaultsGiveTheSentinelsCredentialsMasked(): void
    {
        ini_set('checkout_guard.sentinel.password', 'hunter2secret');
        try {
            // The sentinels have no password: AUTH with the INI's fails, named, not shown.
            $l = $this->sentineled(self::uniqueName('sen'), ['on_unavailable' => 'deny']);
            $this->assertSame('unavailable', $l->acquire('s')->reason());
            $this->assertStringContainsString('sentinel: no sentinel answered', (string) $l->health(false)['last_error']);
            $this->assertStringNotContainsString('hunter2secret', json_encode($l->health(false)));
            ob_start();
            phpinfo(INFO_MODULES);
            $info = (string) ob_get_clean();
            $this->assertStringContainsString('checkout_guard.sentinel.password', $info);
            $this->assertStringNotContainsString('hunter2secret', $info);
            // A plain URL ignores them.
            $plain = $this->limiter(['global' => self::bucket(10), 'on_unavailable' => 'throw']);
            $this->assertTrue($plain->acquire('s')->isAllowed());
        } finally {
            ini_restore('checkout_guard.sentinel.password');
        }
    }

    public function testTheCliAndTheStreamSinkTakeASentinelUrl(): void
    {
        $name = self::uniqueName('sencli');
        $this->sentineled($name)->acquire('s');
        [$code, $out, $err] = Cli::limiter(self::$group->url(), $name, 'status', '--json');
        $this->assertSame(0, $code, $err);
        $this->assertIsArray(json_decode($out, true), $out);
        [$code, , $err] = Cli::limiter(self::$group->url(), $name, '--sentinel-password', 'hunter2secret', 'status');
        $this->assertNotSame(0, $code);
        $this->assertStringNotContainsString('hunter2secret', $err);
        // The same password from the environment, which `ps` does not show.
        putenv('CHECKOUT_GUARD_SENTINEL_PASSWORD=hunter2secret');
        try {
            [$code, , $err] = Cli::limiter(self::$group->url(), $name, 'status');
        } finally {
            putenv('CHECKOUT_GUARD_SENTINEL_PASSWORD');
        }
        $this->assertNotSame(0, $code, 'the sentinels have no password: AUTH with one fails');
        $this->assertStringNotContainsString('hunter2secret', $err);
        [$code, , $err] = Cli::limiter('redis://127.0.0.1:1', $name, '--sentinel-user', 'u', 'status');
        $this->assertNotSame(0, $code);
        $this->assertStringContainsString('--sentinel-user', $err);

        // The stream sink: through the sentinels to the primary; with the INI's
        // sentinel password (which these sentinels do not have), nothing is written.
        foreach (['' => 1, 'hunter2secret' => 0] as $password => $written) {
            $key = 'cg-sentinel:events:' . bin2hex(random_bytes(4));
            $cmd = self::phpWithExtension();
            foreach ([
                'events.sinks' => 'stream',
                'events.stream_url' => self::$group->url(),
                'events.stream_key' => $key,
                'sentinel.password' => (string) $password,
            ] as $k => $v) {
                array_push($cmd, '-d', "checkout_guard.$k=$v");
            }
            array_push($cmd, '-r', 'CheckoutGuard\Telemetry::record("Probe", ["i" => 1]); echo json_encode(CheckoutGuard\Telemetry::flush());');
            $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $printed = stream_get_contents($pipes[1]);
            $stderr = stream_get_contents($pipes[2]);
            $this->assertSame(0, proc_close($p), "$printed $stderr");
            $this->assertSame($written, (int) self::$group->primary->client()->xLen($key), "$printed $stderr");
            $this->assertStringNotContainsString('hunter2secret', $printed . $stderr);
        }
    }

    /**
     * A primary demoted while a worker keeps its connection (`REPLICAOF` by hand; also
     * what the `FAILOVER` command does): its clients stay connected and it still answers
     * PING. health(true) asks `ROLE` on a Sentinel endpoint: the demoted node is not ok,
     * its connection dropped and the sentinels asked again; they still name it (it was
     * demoted behind their back), so the cause is theirs: `is a replica (ROLE slave)`.
     * Made a primary again, it is ok after the back-off. Bounded: a few seconds, well
     * within what the sentinels take to call a master reporting `slave` down (down-after
     * plus two INFO periods, 20 s), so no failover is started.
     */
    public function testHealthOnADemotedPrimaryIsNotOkAndAsksTheSentinelsAgain(): void
    {
        $name = self::uniqueName('senhealth');
        $l = $this->sentineled($name);
        $primary = self::$group->primary;
        $this->assertTrue($l->acquire('s')->isAllowed());
        $h = $l->health(true);
        $this->assertTrue($h['ok'], json_encode($h));
        $this->assertTrue($h['connected']);

        $c = $primary->client();
        $nowhere = ValkeyProcess::freePort();
        try {
            $c->rawCommand('REPLICAOF', '127.0.0.1', (string) $nowhere);
            $this->assertSame('slave', SentinelGroup::role($primary));
            $this->assertNotFalse($c->rawCommand('PING'), 'a demoted primary still answers PING');
            $h = $l->health(true);
            $this->assertFalse($h['ok'], json_encode($h));
            $this->assertFalse($h['connected'], 'the demoted node\'s connection was dropped');
            // The cause is the open's: the sentinels were asked again, and named it.
            $this->assertStringContainsString(
                'the primary named for service ' . SentinelGroup::SERVICE . ', 127.0.0.1:' . $primary->port . ', is a replica (ROLE slave)',
                (string) $h['last_error'],
            );
            // A decision meanwhile gets the policy, never one made on the replica.
            $this->assertSame('unavailable', $l->acquire('s')->reason());
        } finally {
            $c->rawCommand('REPLICAOF', 'NO', 'ONE');
        }
        $this->assertSame('master', SentinelGroup::role($primary));
        // Bounded (5 s): after the back-off (retry_interval_ms 50) the probe opens again.
        $until = microtime(true) + 5;
        do {
            usleep(60_000);
            $h = $l->health(true);
        } while (!$h['ok'] && microtime(true) < $until);
        $this->assertTrue($h['ok'], json_encode($h));
        $this->assertSame('127.0.0.1:' . $primary->port, $h['sentinel_primary']);
        $this->assertTrue($l->acquire('s')->isAllowed());
        // The replica back in sync before the failover test (bounded, 10 s).
        $synced = fn () => str_contains((string) self::$group->replica->client()->rawCommand('INFO', 'replication'), 'master_link_status:up');
        $until = microtime(true) + 10;
        while (!$synced() && microtime(true) < $until) {
            usleep(50_000);
        }
        $this->assertTrue($synced(), 'the replica never synced again');
    }

    /**
     * SIGKILL the primary during a loop of acquire(): every call returns (the policy's
     * answer while no primary is known), decisions resume on the promoted replica by
     * themselves, and the old primary, restarted, is made a replica and takes no write of
     * its own. Bounded: at most 20 s of calls.
     */
    public function testAfterAFailoverDecisionsResumeOnTheNewPrimaryByThemselves(): void
    {
        $name = self::uniqueName('senfo');
        $l = $this->sentineled($name, ['on_unavailable' => 'deny']);
        $old = self::$group->primary;
        $new = self::$group->replica;
        $this->assertTrue($l->acquire('s')->isAllowed());
        $old->kill();
        $deadline = microtime(true) + 20;
        $unavailable = 0;
        $after = 0;
        $newClient = null;
        while (microtime(true) < $deadline) {
            $d = $l->acquire('s');
            if ($d->reason() === 'unavailable') {
                $unavailable++;
                usleep(20_000);
                continue;
            }
            $this->assertTrue($d->isAllowed(), $d->reason());
            $newClient ??= $new->client();
            $this->assertSame('master', SentinelGroup::role($new), 'a decision was made, so on the promoted replica');
            if (++$after === 3) {
                break;
            }
        }
        $this->assertSame(3, $after, "decisions did not resume ($unavailable unavailable)");
        $this->assertGreaterThan(0, $unavailable, 'the policy answered while no primary was known');
        $before = $newClient->get(self::bucketKey($name));
        $this->assertNotFalse($before);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertNotSame($before, $newClient->get(self::bucketKey($name)), 'the decision moved the new primary\'s bucket');
        $this->assertSame('127.0.0.1:' . $new->port, $l->health()['sentinel_primary']);

        // The old primary comes back as the new one's replica: decisions stay on the new
        // primary and reach the old one by replication only (no write of its own).
        self::$group->waitUntilSettledOn($new->port);
        $old->start([...SentinelGroup::DATA_ARGS, '--replicaof', '127.0.0.1', (string) $new->port]);
        $this->assertSame('slave', SentinelGroup::role($old));
        for ($i = 0; $i < 5; $i++) {
            $this->assertTrue($l->acquire('s')->isAllowed());
        }
        // Bounded (10 s): the full sync of the restarted replica.
        $want = $newClient->get(self::bucketKey($name));
        $until = microtime(true) + 10;
        while ($old->client()->get(self::bucketKey($name)) !== $want && microtime(true) < $until) {
            usleep(50_000);
        }
        $this->assertSame($want, $old->client()->get(self::bucketKey($name)), json_encode([
            'old' => $old->client()->info('replication'),
            'new' => $newClient->info('replication'),
        ]));
    }
}
