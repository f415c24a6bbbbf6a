<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The stream sink and the connections under real faults: a Valkey that refuses writes
 * midway (maxmemory, noeviction), a slow Valkey (loadtest/latency_proxy.py), a Valkey
 * that accepts TCP but never answers (SIGSTOP). Each case runs in a child PHP process of
 * its own, so its pooled connections, back-off and telemetry settings are its own.
 *
 * The time bounds below only the defect crosses: one call on a fresh connection must
 * cost about one timeout (the defect cost two, or one per pipelined command).
 */
final class StreamConnectionTest extends OwnValkeyTestCase
{
    private const KEY = 'cg-streamconn:events';

    /**
     * Runs $code in a child PHP with the extension and $ini; returns what it printed as
     * JSON. With $between, the child prints "ready" first and waits for a line on stdin,
     * sent after $between() ran (to pause Valkey at that instant).
     */
    private function child(array $ini, string $code, ?callable $between = null): array
    {
        $cmd = self::phpWithExtension();
        foreach ($ini as $k => $v) {
            array_push($cmd, '-d', "checkout_guard.$k=$v");
        }
        array_push($cmd, '-r', $code);
        $p = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        if ($between !== null) {
            $line = fgets($pipes[1]);
            if ($line !== "ready\n") {
                $this->fail('the child did not get ready: ' . $line . stream_get_contents($pipes[2]));
            }
            $between();
            fwrite($pipes[0], "go\n");
        }
        fclose($pipes[0]);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        fclose($pipes[1]);
        fclose($pipes[2]);
        $this->assertSame(0, proc_close($p), "child failed: $err $out");
        return json_decode($out, true, 512, JSON_THROW_ON_ERROR);
    }

    private function streamIni(string $url, array $more = []): array
    {
        return $more + [
            'events.sinks' => 'stream',
            'events.stream_url' => $url,
            'events.stream_key' => self::KEY,
            'events.buffer_size' => '100000',
        ];
    }

    // Item 6: a batch refused midway --------------------------------------------------

    public function testAStreamRefusedMidwayCountsWhatReachedItAsWritten(): void
    {
        $r = $this->valkey->client();
        $r->rawCommand('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
        $used = (int) $r->info('memory')['used_memory'];
        // Room for a few hundred of the 3,000 events (each ~400 bytes): refused midway.
        $r->rawCommand('CONFIG', 'SET', 'maxmemory', (string) ($used + 256 * 1024));
        $out = $this->child($this->streamIni($this->valkey->url(), ['timeout_ms' => '5000']), <<<'PHP'
            $pad = str_repeat('x', 300);
            for ($i = 0; $i < 3000; $i++) {
                CheckoutGuard\Telemetry::record('Probe', ['i' => $i, 'pad' => $pad]);
            }
            $flushed = CheckoutGuard\Telemetry::flush();
            echo json_encode(['flushed' => $flushed, 'stats' => CheckoutGuard\Telemetry::stats()['sinks']['stream']]);
            PHP);
        $r->rawCommand('CONFIG', 'SET', 'maxmemory', '0');
        $stream = $out['stats'];
        $len = (int) $r->xLen(self::KEY);
        $this->assertGreaterThan(0, $len, 'some events reached the stream');
        $this->assertLessThan(3000, $len, 'Valkey refused the rest (maxmemory)');
        $this->assertSame($len, $stream['written'], 'written is what reached the stream');
        $this->assertSame(3000 - $len, $stream['dropped'], 'dropped is the rest of what was recorded');
        $this->assertSame(1, $stream['failures'], 'one batch failed (in part)');
        $this->assertStringContainsString('OOM', (string) $stream['last_error']);
        $this->assertSame($len, $out['flushed'], 'flush() says how many events were written');
        // What reached the stream is the batch's beginning, in order.
        $first = $r->xRange(self::KEY, '-', '+', 1);
        $this->assertSame(0, json_decode(reset($first)['event'], true)['i']);
    }

    public function testAStreamTrimmedByMaxlenStillCountsEveryEventWritten(): void
    {
        $r = $this->valkey->client();
        $out = $this->child($this->streamIni($this->valkey->url(), ['events.stream_maxlen' => '100']), <<<'PHP'
            for ($i = 0; $i < 1000; $i++) {
                CheckoutGuard\Telemetry::record('Probe', ['i' => $i]);
            }
            CheckoutGuard\Telemetry::flush();
            echo json_encode(CheckoutGuard\Telemetry::stats()['sinks']['stream']);
            PHP);
        $this->assertSame([1000, 0, 0], [$out['written'], $out['dropped'], $out['failures']]);
        $this->assertLessThan(1000, (int) $r->xLen(self::KEY), 'MAXLEN ~ 100 trimmed the stream');
    }

    public function testABatchAfterAValkeyRestartIsWrittenOnceOnANewConnection(): void
    {
        $out = $this->child($this->streamIni($this->valkey->url(), ['timeout_ms' => '1000']), <<<'PHP'
            CheckoutGuard\Telemetry::record('Probe', ['i' => -1]);
            CheckoutGuard\Telemetry::flush(); // connected
            for ($i = 0; $i < 20; $i++) {
                CheckoutGuard\Telemetry::record('Probe', ['i' => $i]);
            }
            echo "ready\n";
            fgets(STDIN);
            $n = CheckoutGuard\Telemetry::flush(); // on the connection Valkey closed
            echo json_encode(['flushed' => $n, 'stream' => CheckoutGuard\Telemetry::stats()['sinks']['stream']]);
            PHP, function () {
                $this->valkey->stop();
                $this->valkey->start();
            });
        $this->assertSame(20, $out['flushed'], json_encode($out));
        $this->assertSame([21, 0], [$out['stream']['written'], $out['stream']['dropped']]);
        $events = array_map(fn ($e) => json_decode($e['event'], true)['i'], $this->valkey->client()->xRange(self::KEY, '-', '+'));
        $this->assertSame(range(0, 19), array_values($events), 'each event once, in order');
    }

    // Item 7: telemetry never changes a decision ----------------------------------------

    private const FOUR_DECISIONS_WITH_A_FLUSH_EACH = <<<'PHP'
        $l = new CheckoutGuard\RateLimiter(['name' => 'slowsink', 'url' => getenv('CG_URL'),
            'global' => ['capacity' => 100, 'refill_per_second' => 0.001],
            'timeout_ms' => 2000, 'on_unavailable' => 'deny']);
        $reasons = [];
        for ($i = 0; $i < 4; $i++) {
            $reasons[] = $l->acquire('s')->reason();
            CheckoutGuard\Telemetry::record('Probe', ['i' => $i]);
            CheckoutGuard\Telemetry::flush();
        }
        echo json_encode(['reasons' => $reasons, 'stream' => CheckoutGuard\Telemetry::stats()['sinks']['stream'] ?? null]);
        PHP;

    public function testASlowStreamSinkNeverChangesTheLimitersDecisions(): void
    {
        if (LatencyProxy::python() === null) {
            $this->markTestSkipped('no .venv/bin/python to run loadtest/latency_proxy.py');
        }
        // Every reply 60 ms late each way: a decision (2 s timeout) waits, the stream's
        // flush (the INI timeout, 20 ms) times out.
        $proxy = new LatencyProxy($this->valkey->port, 60);
        try {
            putenv('CG_URL=' . $proxy->url());
            $ini = ['url' => $proxy->url(), 'timeout_ms' => '20'];
            $off = $this->child($ini, self::FOUR_DECISIONS_WITH_A_FLUSH_EACH);
            $this->valkey->client()->del('{cg:slowsink}:b:global');
            // The stream sink on the limiter's URL (the default: no stream_url).
            $on = $this->child($ini + ['events.sinks' => 'stream', 'events.stream_key' => self::KEY],
                self::FOUR_DECISIONS_WITH_A_FLUSH_EACH);
        } finally {
            putenv('CG_URL');
            $proxy->stop();
        }
        $this->assertSame(['allowed', 'allowed', 'allowed', 'allowed'], $off['reasons'], 'telemetry off');
        $this->assertSame($off['reasons'], $on['reasons'], 'the slow stream sink changed no decision');
        $this->assertGreaterThan(0, $on['stream']['dropped'], 'the stream sink did time out: ' . json_encode($on['stream']));
        $this->assertStringNotContainsString('refused', (string) $on['stream']['last_error'], 'it reached the proxy');
    }

    /**
     * Issue 35 item 5, as reported: a link of 100 ms a round trip (50 ms each way), the
     * stream sink on with the INI timeout at 50 ms, a limiter of its own 500 ms, on a
     * Valkey that has not got the decision script yet. The first process to reach it was
     * answered `unavailable` ("timed out after 500 ms") every time, the next ones (sink
     * off, or INI timeout at 1000) `allowed`: whichever ran first, sink or not, paid two
     * round trips more (EVALSHA answered NOSCRIPT, SCRIPT LOAD, EVALSHA again: five round
     * trips with the connection's set-up and COMMAND INFO, over 500 ms). The sink was
     * innocent (it opens nothing before a flush); a connection's first script decision now
     * loads the script in the same round trip, so the order no longer matters.
     */
    public function testOnASlowLinkTheFirstProcessOnAFreshValkeyDecidesAsTheNextWithTheStreamSinkOn(): void
    {
        if (LatencyProxy::python() === null) {
            $this->markTestSkipped('no .venv/bin/python to run loadtest/latency_proxy.py');
        }
        $code = <<<'PHP'
            $l = new CheckoutGuard\RateLimiter(['name' => 'slowlink', 'url' => getenv('CG_URL'),
                'global' => ['capacity' => 100, 'refill_per_second' => 0.001],
                'timeout_ms' => 500, 'on_unavailable' => 'deny']);
            $reasons = [];
            for ($i = 0; $i < 4; $i++) {
                $reasons[] = $l->acquire('s')->reason();
            }
            echo json_encode(['reasons' => $reasons, 'error' => $l->health(false)['last_error'] ?? null]);
            PHP;
        $proxy = new LatencyProxy($this->valkey->port, 50);
        try {
            putenv('CG_URL=' . $proxy->url());
            $base = ['url' => $proxy->url(), 'events.stream_key' => self::KEY];
            $runs = [
                'sink on, INI timeout 50 (first)' => $this->child($base + ['events.sinks' => 'stream', 'timeout_ms' => '50'], $code),
                'sink off' => $this->child($base + ['timeout_ms' => '50'], $code),
                'sink on, INI timeout 1000' => $this->child($base + ['events.sinks' => 'stream', 'timeout_ms' => '1000'], $code),
            ];
        } finally {
            putenv('CG_URL');
            $proxy->stop();
        }
        // Deterministic, whatever the machine's load: one EVALSHA per decision, none
        // answered NOSCRIPT and sent again (the defect: 13, the first process's first
        // decision twice), and the script loaded with each process's first decision.
        $this->assertSame(12, $this->commandCalls('evalsha'), 'one EVALSHA a decision: ' . json_encode($runs));
        $this->assertSame(3, $this->commandCalls('script|load'), 'loaded with each connection\'s first decision');
        $this->assertSame(0, $this->commandCalls('xadd'), 'the stream sink wrote nothing: no flush');
        foreach ($runs as $name => $run) {
            $this->assertSame(['allowed', 'allowed', 'allowed', 'allowed'], $run['reasons'], "$name: " . json_encode($runs));
        }
    }

    public function testOneLimitersTimeoutPutsNoLimiterWithALongerTimeoutIntoBackOff(): void
    {
        if (LatencyProxy::python() === null) {
            $this->markTestSkipped('no .venv/bin/python to run loadtest/latency_proxy.py');
        }
        $proxy = new LatencyProxy($this->valkey->port, 60);
        try {
            putenv('CG_URL=' . $proxy->url());
            $out = $this->child([], <<<'PHP'
                $make = fn ($name, $t) => new CheckoutGuard\RateLimiter(['name' => $name, 'url' => getenv('CG_URL'),
                    'global' => ['capacity' => 100, 'refill_per_second' => 0.001],
                    'timeout_ms' => $t, 'on_unavailable' => 'deny']);
                $patient = $make('patient', 2000);
                $hasty = $make('hasty', 20);
                $seen = [];
                for ($i = 0; $i < 3; $i++) {
                    $seen[] = 'patient:' . $patient->acquire('s')->reason();
                    $seen[] = 'hasty:' . $hasty->acquire('s')->reason();
                }
                $seen[] = 'patient:' . $patient->acquire('s')->reason();
                echo json_encode(['seen' => $seen]);
                PHP);
        } finally {
            putenv('CG_URL');
            $proxy->stop();
        }
        $this->assertSame([
            'patient:allowed', 'hasty:unavailable',
            'patient:allowed', 'hasty:unavailable',
            'patient:allowed', 'hasty:unavailable',
            'patient:allowed',
        ], $out['seen'], 'the hasty limiter timed out; the patient one was never in its back-off');
    }

    // Item 11: one call, connection included, within about timeout_ms -------------------

    /** The best of three calls, each in a new process (a fresh connection), in seconds. */
    private function bestOfThree(array $ini, string $code): float
    {
        $best = INF;
        for ($i = 0; $i < 3; $i++) {
            $best = min($best, $this->child($ini, $code)['secs']);
        }
        return $best;
    }

    public function testAFreshConnectionToAnUnresponsiveValkeyCostsOneTimeout(): void
    {
        $this->valkey->pause(); // TCP still connects (the kernel's backlog); nothing answers
        try {
            putenv('CG_URL=' . $this->valkey->url());
            $acquire = $this->bestOfThree([], <<<'PHP'
                $l = new CheckoutGuard\RateLimiter(['name' => 'fresh', 'url' => getenv('CG_URL'),
                    'global' => ['capacity' => 100, 'refill_per_second' => 0.001],
                    'timeout_ms' => 200, 'on_unavailable' => 'deny']);
                $t = hrtime(true);
                $reason = $l->acquire('s')->reason();
                $secs = (hrtime(true) - $t) / 1e9;
                if ($reason !== 'unavailable') { throw new \Exception($reason); }
                echo json_encode(['secs' => $secs]);
                PHP);
            $flush = $this->bestOfThree($this->streamIni($this->valkey->url(), ['timeout_ms' => '200']), <<<'PHP'
                CheckoutGuard\Telemetry::record('Probe', ['i' => 1]);
                $t = hrtime(true);
                $n = CheckoutGuard\Telemetry::flush();
                $secs = (hrtime(true) - $t) / 1e9;
                if ($n !== 0) { throw new \Exception("flushed $n"); }
                echo json_encode(['secs' => $secs]);
                PHP);
        } finally {
            putenv('CG_URL');
            $this->valkey->resume();
        }
        // The defect: 2 x 200 ms (the connection waited the timeout for each of two replies).
        $this->assertGreaterThanOrEqual(0.19, $acquire, 'waited for the timeout');
        $this->assertLessThan(0.32, $acquire, 'acquire(): connection and call within about timeout_ms');
        $this->assertGreaterThanOrEqual(0.19, $flush, 'waited for the timeout');
        $this->assertLessThan(0.32, $flush, 'the stream flush: connection and batch within about timeout_ms');
    }

    public function testAStreamBatchToAValkeyThatStoppedAnsweringCostsOneTimeout(): void
    {
        $out = $this->child($this->streamIni($this->valkey->url(), ['timeout_ms' => '200']), <<<'PHP'
            CheckoutGuard\Telemetry::record('Probe', ['i' => -1]);
            CheckoutGuard\Telemetry::flush(); // connected, in step
            for ($i = 0; $i < 50; $i++) {
                CheckoutGuard\Telemetry::record('Probe', ['i' => $i]);
            }
            echo "ready\n";
            fgets(STDIN);
            $t = hrtime(true);
            $n = CheckoutGuard\Telemetry::flush();
            $secs = (hrtime(true) - $t) / 1e9;
            echo json_encode(['secs' => $secs, 'flushed' => $n, 'stream' => CheckoutGuard\Telemetry::stats()['sinks']['stream']]);
            PHP, fn () => $this->valkey->pause());
        $this->valkey->resume();
        $this->assertSame(0, $out['flushed']);
        $this->assertSame([1, 50], [$out['stream']['written'], $out['stream']['dropped']]);
        // The defect: one timeout per pipelined XADD (50 x 200 ms).
        $this->assertLessThan(0.32, $out['secs'], 'a batch costs one timeout, not one per event');
    }
}
