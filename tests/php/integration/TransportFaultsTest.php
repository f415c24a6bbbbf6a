<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;
use CheckoutGuard\UnavailableException;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * At most once, whatever the socket does (issue 35, items 1-3), from PHP: the project's
 * fault proxy (tests/support/fault_proxy.py) between the extension and a real Valkey, both
 * engines, plain and TLS; signals delivered to the PHP process while it waits for Valkey.
 */
final class TransportFaultsTest extends OwnValkeyTestCase
{
    protected function setUp(): void
    {
        $this->valkey = new ValkeyProcess();
        $this->valkey->start(['--loadmodule', self::valkeyModule()]);
        // No back-off after the fault: the next call asks Valkey again at once.
        ini_set('checkout_guard.retry_interval_ms', '0');
    }

    protected function tearDown(): void
    {
        ini_restore('checkout_guard.retry_interval_ms');
        parent::tearDown();
    }

    /** @return array<string, array{string, string}> */
    public static function faults(): array
    {
        $cases = [];
        foreach (['lua', 'module'] as $engine) {
            foreach (['fin', 'rst', 'half', 'garble', 'hold'] as $fault) {
                $cases["$engine $fault"] = [$engine, $fault];
            }
        }
        return $cases;
    }

    /** @param array<string, mixed> $more */
    private static function faulted(string $url, string $engine, int $capacity, int $timeoutMs = 500, array $more = []): RateLimiter
    {
        return new RateLimiter($more + [
            'name' => self::uniqueName('faults'),
            'url' => $url,
            'global' => self::bucket($capacity),
            'engine' => $engine,
            'timeout_ms' => $timeoutMs,
            'on_unavailable' => 'throw',
        ]);
    }

    /**
     * The reply of a decision Valkey ran is lost: the call is answered by its policy and
     * says the outcome is unknown; the decision took its token once (before: sent again on a
     * new connection, 3 admitted calls took 4 tokens).
     */
    /** @dataProvider faults */
    #[DataProvider('faults')]
    public function testALostReplyTakesItsTokensOnce(string $engine, string $fault): void
    {
        $proxy = new FaultProxy($this->valkey->port);
        $l = self::faulted($proxy->url(), $engine, 3);
        $this->assertSame(2, $l->acquire('s')->remaining());
        $proxy->arm($fault);
        try {
            $l->acquire('s');
            $this->fail('the reply never came: the policy (throw)');
        } catch (UnavailableException $e) {
            $this->assertStringContainsString('outcome unknown', $e->getMessage());
        }
        $d = $l->acquire('s');
        $this->assertSame(['allowed', 0], [$d->reason(), $d->remaining()], 'one token was taken by the lost decision');
        $this->assertSame('global', $l->acquire('s')->reason());
    }

    /** A reservation whose reply is lost is taken once, too. */
    public function testALostReservationIsTakenOnce(): void
    {
        $proxy = new FaultProxy($this->valkey->port);
        $l = self::faulted($proxy->url(), 'auto', 2);
        $this->assertTrue($l->acquire('s')->isAllowed());
        $proxy->arm('fin');
        try {
            $l->acquire('s', 1, 0.2);
            $this->fail('the reply never came');
        } catch (UnavailableException $e) {
            $this->assertStringContainsString('outcome unknown', $e->getMessage());
        }
        $this->assertSame('global', $l->acquire('s')->reason(), 'the lost reservation took the last token, once');
    }

    /** Over TLS (the proxy forwards the TLS records; the fault drops them). */
    public function testALostReplyOverTlsTakesItsTokensOnce(): void
    {
        if (!TlsServer::available()) {
            $this->markTestSkipped('no redis-server with TLS (scripts/setup.sh installs it)');
        }
        $tls = new TlsServer();
        try {
            $port = $tls->start();
            foreach (['fin', 'rst', 'garble'] as $fault) {
                $proxy = new FaultProxy($port);
                $l = self::faulted($proxy->url('rediss'), 'lua', 3, 1000, ['tls' => ['cafile' => $tls->path('ca.pem')]]);
                $this->assertSame(2, $l->acquire('s')->remaining(), $fault);
                $proxy->arm($fault);
                try {
                    $l->acquire('s');
                    $this->fail("$fault: the reply never came");
                } catch (UnavailableException $e) {
                    $this->assertStringContainsString('outcome unknown', $e->getMessage(), $fault);
                }
                $d = $l->acquire('s');
                $this->assertSame(['allowed', 0], [$d->reason(), $d->remaining()], $fault);
                $proxy->stop();
            }
        } finally {
            $tls->stop();
        }
    }

    /** A reply trickled a byte every 40 ms ends at the call's deadline (100 ms). */
    public function testATrickledReplyEndsAtTheCallsDeadline(): void
    {
        foreach (['lua', 'module'] as $engine) {
            $proxy = new FaultProxy($this->valkey->port);
            // The connection opened and the script loaded with time to spare (the pooled
            // connection is the process's, per URL): the call below is one round trip.
            self::faulted($proxy->url(), $engine, 100, 2000)->acquire('warm-up');
            $l = self::faulted($proxy->url(), $engine, 100, 100, ['on_unavailable' => 'deny']);
            $proxy->arm('trickle 40');
            $t = hrtime(true);
            $d = $l->acquire('s');
            $secs = (hrtime(true) - $t) / 1e9;
            $this->assertSame('unavailable', $d->reason(), $engine);
            // Over 1.6 s before (each read had the whole 100 ms); room for a busy machine.
            $this->assertLessThan(0.7, $secs, $engine);
            $proxy->stop();
        }
    }

    /**
     * A PHP process with a SIGPROF handler (a sampling profiler's signal, pcntl_signal())
     * decides against a healthy Valkey while signals arrive every ~300 µs: no decision is
     * unavailable, every token is counted once (before: EINTR was a broken connection,
     * most decisions unavailable).
     */
    public function testSignalsDuringAcquireAreNotFailures(): void
    {
        foreach (['lua', 'module'] as $engine) {
            $cmd = self::phpWithExtension();
            array_push($cmd, '-r', <<<'PHP'
                pcntl_async_signals(true);
                // A mask inherited from the parent (PHPUnit's PHP may block SIGPROF while
                // it forks) would keep every signal away and the test would prove nothing.
                pcntl_sigprocmask(SIG_UNBLOCK, [SIGPROF]);
                $handled = 0;
                pcntl_signal(SIGPROF, function () use (&$handled) { $handled++; });
                $l = new CheckoutGuard\RateLimiter(['name' => getenv('CG_NAME'), 'url' => getenv('CG_URL'),
                    'global' => ['capacity' => 100000, 'refill_per_second' => 0.001],
                    'engine' => getenv('CG_ENGINE'), 'timeout_ms' => 1000, 'on_unavailable' => 'deny']);
                $l->acquire('warm-up');
                echo "ready\n";
                $reasons = [];
                $last = null;
                for ($i = 0; $i < 3000; $i++) {
                    $d = $l->acquire('s');
                    $reasons[$d->reason()] = ($reasons[$d->reason()] ?? 0) + 1;
                    $last = $d->remaining();
                }
                // Not killed by a late signal once PHP's shutdown restores the default action.
                pcntl_signal(SIGPROF, SIG_IGN);
                echo json_encode(['reasons' => $reasons, 'remaining' => $last, 'handled' => $handled]), "\n";
                PHP);
            $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null,
                ['CG_URL' => $this->valkey->url(), 'CG_ENGINE' => $engine, 'CG_NAME' => self::uniqueName('sig')] + getenv());
            $ready = fgets($pipes[1]);
            if ($ready !== "ready\n") {
                $this->fail("$engine: the child did not start: " . stream_get_contents($pipes[2]));
            }
            stream_set_blocking($pipes[1], false);
            $out = '';
            $sent = 0;
            $deadline = microtime(true) + 60;
            while (($status = proc_get_status($p))['running'] && !str_contains($out, "\n") && microtime(true) < $deadline) {
                $sent += proc_terminate($p, SIGPROF) ? 1 : 0;
                usleep(300);
                $out .= (string) stream_get_contents($pipes[1]);
            }
            stream_set_blocking($pipes[1], true);
            $out .= (string) stream_get_contents($pipes[1]);
            $err = (string) stream_get_contents($pipes[2]);
            $closed = proc_close($p);
            // proc_get_status() collected the exit code when it saw the child end.
            $this->assertSame(0, $status['running'] ? $closed : $status['exitcode'], "$engine: $err $out");
            $r = json_decode(trim($out), true, 512, JSON_THROW_ON_ERROR);
            $this->assertGreaterThan(100, $r['handled'], "$engine: the signals reached the handler ($sent sent): $out");
            $this->assertSame(['allowed' => 3000], $r['reasons'], "$engine: $out");
            $this->assertSame(100000 - 1 - 3000, $r['remaining'], "$engine: every token once");
        }
    }
}
