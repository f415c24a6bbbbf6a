<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Health\Readiness;
use CheckoutGuard\RateLimiter;

/**
 * RateLimiter::health(): what a readiness endpoint reads on every probe. It must use the
 * pooled connection (never one per check), leave a down Valkey alone during the back-off,
 * and say which state the connection is in. Each test runs its own Valkey.
 */
final class HealthTest extends OwnValkeyTestCase
{
    protected function setUp(): void
    {
        parent::setUp();
        ini_set('checkout_guard.retry_interval_ms', '300');
    }

    protected function tearDown(): void
    {
        ini_restore('checkout_guard.retry_interval_ms');
        parent::tearDown();
    }

    private function own(array $options = []): RateLimiter
    {
        return $this->limiter($options + [
            'url' => $this->valkey->url(),
            'global' => self::bucket(100),
            'timeout_ms' => 50,
        ]);
    }

    public function testAPingReusesThePooledConnection(): void
    {
        $l = $this->own();
        $first = $l->health();
        $this->assertTrue($first['ok']);
        $this->assertTrue($first['connected']);
        $this->assertSame('closed', $first['circuit']);
        $this->assertNull($first['last_error']);
        $this->assertSame(0, $first['consecutive_failures']);
        $this->assertIsFloat($first['ping_ms']);
        $this->assertGreaterThan(0.0, $first['ping_ms']);
        $this->assertEqualsWithDelta(microtime(true), $first['last_ping_at'], 5.0);
        $this->assertSame(getmypid(), $first['pid']);
        // The CLI brackets each request with RINIT/RSHUTDOWN (the worker mode's "worker" is
        // WorkerModeTest's, in the zts row).
        $this->assertSame('request', $first['request_lifecycle']);
        $this->assertSame(0, $first['handled_requests']);
        ob_start();
        phpinfo(INFO_MODULES);
        $info = (string) ob_get_clean();
        $this->assertMatchesRegularExpression('/request lifecycle => cli: RINIT\/RSHUTDOWN per request; requests handled inside one .*: 0 ended in this process; this thread: request/', $info);
        $connects = $first['connects'];
        for ($i = 0; $i < 50; $i++) {
            $this->assertTrue($l->health()['ok']);
        }
        // acquire() and health() share one connection; fifty pings opened nothing new.
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertSame($connects, $l->health()['connects']);
        $this->assertSame(1, $this->ourConnections());
    }

    public function testWithoutPingNothingIsSent(): void
    {
        $l = $this->own();
        $before = $l->health(false);
        $this->assertFalse($before['ok'], 'no connection has been opened yet');
        $this->assertFalse($before['connected']);
        $this->assertNull($before['ping_ms']);
        $this->assertSame(0, $this->ourConnections());

        $l->acquire('s');
        $after = $l->health(false);
        $this->assertTrue($after['ok']);
        $this->assertTrue($after['connected']);
        $this->assertNull($after['ping_ms'], 'no ping was ever made');
        $pings = $this->commandCalls('ping');
        $l->health(false);
        $this->assertSame($pings, $this->commandCalls('ping'));
    }

    public function testTheUrlIsShownWithoutItsPassword(): void
    {
        $admin = $this->valkey->client();
        $admin->rawCommand('CONFIG', 'SET', 'requirepass', 'hunter2-secret');
        $l = $this->own(['url' => str_replace('redis://', 'redis://:hunter2-secret@', $this->valkey->url())]);
        $h = $l->health();
        $this->assertTrue($h['ok'], (string) $h['last_error']);
        $this->assertStringNotContainsString('hunter2', json_encode($h));
        $this->assertStringContainsString('***', $h['url']);
        $admin->rawCommand('CONFIG', 'SET', 'requirepass', '');
    }

    /**
     * A Valkey that refuses the password (rotated on the server, not yet in the app): the
     * connection's set-up fails, health() says authentication failed (the server's reason
     * too) without the password, the circuit opens for every caller, and a decision
     * applies on_unavailable without waiting.
     */
    public function testARefusedPasswordOpensTheCircuitAndSaysWhyWithoutThePassword(): void
    {
        $admin = $this->valkey->client();
        $admin->rawCommand('CONFIG', 'SET', 'requirepass', 'the-new-one');
        try {
            $l = $this->own([
                'url' => str_replace('redis://', 'redis://:hunter2-old@', $this->valkey->url()),
                'on_unavailable' => 'allow',
            ]);
            $h = $l->health();
            $this->assertFalse($h['ok']);
            $this->assertFalse($h['connected']);
            $this->assertSame('open', $h['circuit']);
            $this->assertStringContainsStringIgnoringCase('authentication failed', (string) $h['last_error']);
            $this->assertStringContainsString('WRONGPASS', (string) $h['last_error']);
            $this->assertStringNotContainsString('hunter2', json_encode($h));
            $this->assertStringNotContainsString('the-new-one', json_encode($h));
            $d = $l->acquire('shop-1');
            $this->assertTrue($d->isAllowed());
            $this->assertSame('unavailable', $d->reason());
            $this->assertSame(1, $l->health()['consecutive_failures'], 'the decision waited out the back-off');
        } finally {
            $admin->rawCommand('CONFIG', 'SET', 'requirepass', '');
        }
    }

    /**
     * What health() says of the back-off, as PHP reads it. That the back-off ends after
     * retry_interval_ms, Valkey asked again (down: one more failure; back: ok, circuit
     * closed) is checked on a fake clock, without waiting it out:
     * crates/runtime/tests/backoff_after_failure.rs.
     */
    public function testADownValkeyOpensTheCircuitAndIsLeftAloneDuringTheRetryInterval(): void
    {
        $l = $this->own();
        $this->assertTrue($l->health()['ok']);
        $this->valkey->stop();

        $down = $l->health();
        $this->assertFalse($down['ok']);
        $this->assertFalse($down['connected']);
        $this->assertSame('open', $down['circuit']);
        $this->assertGreaterThan(0, $down['retry_in_ms']);
        $this->assertLessThanOrEqual(300, $down['retry_in_ms']);
        $this->assertNotNull($down['last_error']);
        $this->assertSame(1, $down['consecutive_failures']);

        // During the back-off a probe costs nothing and does not count as another attempt.
        $t = hrtime(true);
        $again = $l->health();
        $this->assertLessThan(0.05, (hrtime(true) - $t) / 1e9, 'a probe during the back-off must not wait');
        $this->assertFalse($again['ok']);
        $this->assertSame('open', $again['circuit']);
        $this->assertSame(1, $again['consecutive_failures']);
        $this->assertSame($down['last_error'], $again['last_error'], 'the cause kept');
    }

    public function testAPausedValkeyFailsTheProbeWithinTheTimeout(): void
    {
        $l = $this->own();
        $this->assertTrue($l->health()['ok']);
        $this->valkey->pause();
        try {
            $t = hrtime(true);
            $h = $l->health();
            $elapsed = (hrtime(true) - $t) / 1e9;
        } finally {
            $this->valkey->resume();
        }
        $this->assertFalse($h['ok']);
        $this->assertSame('open', $h['circuit']);
        $this->assertLessThan(1.0, $elapsed, 'timeout_ms bounds the probe (hang detector)');
    }

    public function testReadinessNamesTheCheckThatFailed(): void
    {
        $readiness = new Readiness($this->own());
        $ok = $readiness->check();
        $this->assertTrue($ok['ready']);
        $this->assertSame([], $ok['failed']);
        $this->assertSame('not running under php-fpm', $ok['checks']['fpm']['skipped']);
        $this->assertIsFloat($ok['checks']['valkey']['ping_ms']);

        $this->valkey->stop();
        // The ping finds Valkey gone (the circuit was still closed when checked)...
        $first = $readiness->check();
        $this->assertFalse($first['ready']);
        $this->assertSame(['valkey'], $first['failed']);
        $this->assertNotNull($first['checks']['valkey']['error']);
        // ...and from then on the limiter is in its unavailable state: not pinged at all.
        $second = $readiness->check();
        $this->assertSame(['limiter', 'valkey'], $second['failed']);
        $this->assertSame('open', $second['checks']['limiter']['circuit']);
        $this->assertSame('not pinged: circuit open', $second['checks']['valkey']['error']);
    }

    /** Valkey refuses every write (CONFIG SET maxmemory 1, noeviction) until the returned undo runs. */
    private function fillMemory(): \Closure
    {
        $admin = $this->valkey->client();
        $admin->rawCommand('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
        $admin->rawCommand('CONFIG', 'SET', 'maxmemory', '1');
        return static fn () => $admin->rawCommand('CONFIG', 'SET', 'maxmemory', '0');
    }

    public function testReadinessFailsWhileValkeyAtMaxmemoryRefusesEveryDecision(): void
    {
        $l = $this->own();
        $readiness = new Readiness($l);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertTrue($readiness->check()['ready']);
        $undo = $this->fillMemory();
        try {
            for ($i = 0; $i < 20; $i++) {
                $this->assertSame('unavailable', $l->acquire('s')->reason());
            }
            $r = $readiness->check();
            $this->assertFalse($r['ready'], 'a PING answers, but no decision can be made: ' . json_encode($r));
            $this->assertSame(['decisions'], $r['failed']);
            $this->assertStringContainsString('OOM', (string) $r['checks']['decisions']['error']);
            // The PING succeeded; health() still names the decisions' error until one succeeds.
            $h = $l->health();
            $this->assertTrue($h['ok'], 'the connection itself is fine');
            $this->assertStringContainsString('OOM', (string) $h['last_error']);
            $this->assertStringContainsString('OOM', (string) $h['last_decision_error']);
            $this->assertIsFloat($h['last_decision_error_at']);
            $this->assertTrue($h['decisions_failing']);
            $this->assertSame(21, $h['consecutive_failed_decisions'], "20 acquire() and the check's peek");
            $this->assertTrue($readiness->check()['checks']['decisions']['probed'], 'failing: probed every check');
        } finally {
            $undo();
        }
        // An instance out of rotation gets no checkouts: the check's own peek brings it back.
        $back = $readiness->check();
        $this->assertTrue($back['ready'], json_encode($back));
        $this->assertTrue($back['checks']['decisions']['probed']);
        $h = $l->health(false);
        $this->assertNull($h['last_decision_error']);
        $this->assertNull($h['last_error']);
        $this->assertSame(0, $h['consecutive_failed_decisions']);
        $this->assertFalse($h['decisions_failing']);
        $this->assertIsFloat($h['last_decision_at']);
    }

    public function testOneOrTwoFailedDecisionsAmongSuccessesDoNotFailReadiness(): void
    {
        $l = $this->own();
        $readiness = new Readiness($l);
        for ($i = 0; $i < 5; $i++) {
            $this->assertTrue($l->acquire('s')->isAllowed());
        }
        $undo = $this->fillMemory();
        $this->assertSame('unavailable', $l->acquire('s')->reason());
        $this->assertSame('unavailable', $l->acquire('s')->reason());
        $undo();
        $r = $readiness->check();
        $this->assertTrue($r['ready'], json_encode($r));
        $this->assertFalse($r['checks']['decisions']['probed'], 'a recent success and two failures: nothing sent');
        $this->assertSame(2, $r['checks']['decisions']['consecutive_failed']);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $this->assertSame(0, $l->health(false)['consecutive_failed_decisions']);

        // A third failure in a row, and the probe failing too: not ready.
        $undo = $this->fillMemory();
        try {
            for ($i = 0; $i < 3; $i++) {
                $this->assertSame('unavailable', $l->acquire('s')->reason());
            }
            $this->assertTrue($l->health(false)['decisions_failing']);
            $this->assertFalse($readiness->check()['ready']);
        } finally {
            $undo();
        }
    }

    public function testReadinessFailsWithEngineModuleOnAValkeyWithoutTheModule(): void
    {
        $l = $this->own(['engine' => 'module']);
        $readiness = new Readiness($l);
        // A worker that has decided nothing yet: the check's peek finds it out.
        $first = $readiness->check();
        $this->assertFalse($first['ready'], json_encode($first));
        $this->assertSame(['decisions'], $first['failed']);
        $this->assertStringContainsString('module is not loaded', (string) $first['checks']['decisions']['error']);
        for ($i = 0; $i < 20; $i++) {
            $this->assertSame('unavailable', $l->acquire('s')->reason());
        }
        $this->assertFalse($readiness->check()['ready']);
        $h = $l->health();
        $this->assertTrue($h['ok'], 'PING answers');
        $this->assertStringContainsString('module is not loaded', (string) $h['last_error']);
        $this->assertStringContainsString('module is not loaded', (string) $h['last_decision_error']);
        $this->assertNull($h['last_decision_at'], 'never decided');
        // The same Valkey decides for a limiter with the script: its own state, ready.
        $lua = $this->own(['engine' => 'lua']);
        $this->assertTrue((new Readiness($lua))->check()['ready']);
        $this->assertFalse($readiness->check()['ready'], 'the module limiter still cannot decide');
    }
}
