<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The threaded suite: N request threads at once in one process, as FrankenPHP and Apache's
 * event MPM run PHP. Each test runs the threaded host (tests/zts/host.c, built against the
 * ZTS PHP by scripts/zts.sh: CHECKOUT_GUARD_ZTS_HOST) with tests/zts/scripts/limiter.php
 * and the extension under test, and reads what every request wrote. Runs in the PHP
 * matrix's zts row (scripts/php-matrix.sh short zts).
 */
final class ThreadsTest extends LimiterTestCase
{
    private const SCRIPT = __DIR__ . '/../../zts/scripts/limiter.php';

    private string $dir;

    protected function setUp(): void
    {
        if ((string) getenv('CHECKOUT_GUARD_ZTS_HOST') === '') {
            $this->markTestSkipped('needs the threaded host of a ZTS PHP: run scripts/php-matrix.sh short zts');
        }
        $this->dir = sys_get_temp_dir() . '/cg-threads-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        if (isset($this->dir) && is_dir($this->dir)) {
            array_map('unlink', glob($this->dir . '/*') ?: []);
            rmdir($this->dir);
        }
    }

    /** The ini file the host reads: the extension under test (and phpredis, for nothing). */
    private function ini(array $settings = []): string
    {
        $f = $this->dir . '/php.ini';
        $lines = ['extension=' . getenv('CHECKOUT_GUARD_EXT'), 'memory_limit=128M'];
        foreach ($settings as $k => $v) {
            $lines[] = "$k=$v";
        }
        file_put_contents($f, implode("\n", $lines) . "\n");
        return $f;
    }

    /**
     * Starts the host: THREADS x REQUESTS of limiter.php with this config. Returns the process.
     *
     * @return array{0: resource, 1: string} the process and its name for messages
     */
    private function start(int $threads, int $requests, array $cfg, array $ini = []): array
    {
        $cfg['out'] = $this->dir . '/out';
        $cfgFile = $this->dir . '/cfg.json';
        file_put_contents($cfgFile, json_encode($cfg, JSON_THROW_ON_ERROR));
        $cmd = ['timeout', '120', (string) getenv('CHECKOUT_GUARD_ZTS_HOST'), '-c', $this->ini($ini),
            (string) $threads, (string) $requests, self::SCRIPT, $cfgFile];
        $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $this->dir . '/stdout', 'w'],
            2 => ['file', $this->dir . '/stderr', 'w']], $pipes);
        $this->assertIsResource($p);
        return [$p, "$threads threads x $requests requests"];
    }

    /** @return array{0: int, 1: string} exit status and stderr (the host's per-thread lines) */
    private function finish(array $run): array
    {
        $code = proc_close($run[0]);
        return [$code, (string) file_get_contents($this->dir . '/stderr') . (string) file_get_contents($this->dir . '/stdout')];
    }

    /** Runs the host to its end; every request must succeed. */
    private function runHost(int $threads, int $requests, array $cfg, array $ini = []): array
    {
        [$code, $err] = $this->finish($this->start($threads, $requests, $cfg, $ini));
        $this->assertSame(0, $code, "the host failed:\n$err");
        return $this->results($threads);
    }

    /** @return array<int, array<int, array>> thread => request => its steps' results */
    private function results(int $threads): array
    {
        $by = [];
        for ($t = 0; $t < $threads; $t++) {
            $by[$t] = [];
            foreach (@file($this->dir . "/out.$t", FILE_IGNORE_NEW_LINES) ?: [] as $line) {
                $o = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
                $by[$t][$o['r']] = $o['steps'];
            }
        }
        return $by;
    }

    /** Waits (at most 30 s) until every thread wrote its request 0. */
    private function waitForFirstRequests(int $threads): void
    {
        for ($i = 0; $i < 3000; $i++) {
            $n = 0;
            for ($t = 0; $t < $threads; $t++) {
                $n += (int) (@filesize($this->dir . "/out.$t") > 0);
            }
            if ($n === $threads) {
                return;
            }
            usleep(10_000);
            clearstatcache();
        }
        $this->fail("not every thread finished its first request in 30 s:\n" . @file_get_contents($this->dir . '/stderr'));
    }

    /** The decisions of every thread's requests (the results of "acquire" steps), flattened. */
    private static function decisions(array $by, ?int $request = null): array
    {
        $all = [];
        foreach ($by as $t => $requests) {
            foreach ($requests as $r => $steps) {
                if ($request !== null && $r !== $request) {
                    continue;
                }
                foreach ($steps as $s) {
                    if (is_array($s)) {
                        foreach ($s as $d) {
                            $all[] = $d + [7 => $t];
                        }
                    }
                }
            }
        }
        return $all;
    }

    public function testTheHostReportsEachThreadsFailedRequestsAndRequestsShareNoGlobals(): void
    {
        $p = proc_open([(string) getenv('CHECKOUT_GUARD_ZTS_HOST'), '4', '3', __DIR__ . '/../../zts/scripts/isolation.php'],
            [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $this->assertSame(1, proc_close($p), $err);
        $this->assertSame([
            'thread 0: 3 requests, 0 failed',
            'thread 1: 3 requests, 1 failed, first failed: request 2 status 3',
            'thread 2: 3 requests, 1 failed, first failed: request 1 status 255',
            'thread 3: 3 requests, 0 failed',
        ], array_values(array_filter(explode("\n", $err), fn ($l) => str_starts_with($l, 'thread '))));
        $this->assertStringNotContainsString('leak', $out);
        $lines = array_values(array_filter(explode("\n", $out), fn ($l) => preg_match('/^\d \d$/', $l) === 1));
        sort($lines);
        $this->assertSame(['0 0', '0 1', '0 2', '1 0', '1 1', '2 0', '2 2', '3 0', '3 1', '3 2'], $lines);
        $this->assertStringContainsString('Allowed memory size', $out . $err, 'the fatal error, as PHP reports it');

        $p = proc_open([(string) getenv('CHECKOUT_GUARD_ZTS_HOST'), '0', '3', __FILE__], [2 => ['pipe', 'w']], $pipes);
        $err = (string) stream_get_contents($pipes[2]);
        $this->assertSame(2, proc_close($p));
        $this->assertStringContainsString("THREADS must be a whole number from 1 to 256, got '0'", $err);
    }

    /**
     * Decisions from 8 threads on one bucket: the admitted stay within capacity + rate x
     * elapsed (elapsed from the first decision's start to the last admitted's end).
     */
    public function testDecisionsFromManyThreadsStayWithinTheEnvelope(): void
    {
        $cap = 10;
        $rate = 20.0;
        $by = $this->runHost(8, 40, [
            'options' => ['name' => self::uniqueName('threads-envelope'), 'url' => self::url(),
                'global' => self::bucket($cap, $rate)],
            'steps' => ['*' => [['acquire', 's', 1]]],
        ]);
        $all = self::decisions($by);
        $this->assertCount(320, $all);
        $allowed = array_filter($all, fn ($d) => $d[0]);
        $this->assertGreaterThanOrEqual($cap, count($allowed), 'the whole capacity was there');
        $this->assertLessThan(count($all), count($allowed), 'the threads asked more than the bucket holds');
        $first = min(array_column($all, 4));
        $last = max(array_column($allowed, 5));
        $envelope = $cap + $rate * ($last - $first);
        $this->assertLessThanOrEqual(floor($envelope) + 1, count($allowed),
            sprintf('%d admitted in %.3f s from a bucket of %d + %.0f/s', count($allowed), $last - $first, $cap, $rate));
        foreach ($all as $d) {
            $this->assertContains($d[1], ['allowed', 'global']);
        }
    }

    /**
     * Reservations (maxWait 0.5 s) from 6 threads: counted at the times they return (the
     * calls are made then), any interval holds at most capacity + rate x its length.
     */
    public function testReservationsFromManyThreadsStayWithinTheEnvelope(): void
    {
        $cap = 4;
        $rate = 8.0;
        $by = $this->runHost(6, 6, [
            'options' => ['name' => self::uniqueName('threads-reserve'), 'url' => self::url(),
                'global' => self::bucket($cap, $rate)],
            'steps' => ['*' => [['acquire', 's', 1, 1, 0.5]]],
        ]);
        $all = self::decisions($by);
        $this->assertCount(36, $all);
        $allowed = array_values(array_filter($all, fn ($d) => $d[0]));
        $waited = array_filter($allowed, fn ($d) => $d[6] > 0.0);
        $this->assertNotEmpty($waited, 'some decisions were reservations that slept');
        $ends = array_column($allowed, 5);
        sort($ends);
        $over = [];
        $n = count($ends);
        for ($i = 0; $i < $n; $i++) {
            for ($j = $i; $j < $n; $j++) {
                $in = $j - $i + 1;
                // 20 ms of slack for the clocks (Valkey's vs this process's) and wake-ups.
                $limit = $cap + $rate * ($ends[$j] - $ends[$i] + 0.02);
                if ($in > floor($limit) + 1) {
                    $over[] = sprintf('%d calls in %.3f s', $in, $ends[$j] - $ends[$i]);
                }
            }
        }
        $this->assertSame([], array_slice($over, 0, 5), "admitted $n of 36");
    }

    /**
     * A live change (`checkout-guard limiter set`) while 6 threads run: every thread's next
     * decisions are under the new limits (at most 5 admitted in all, each thread denied).
     */
    public function testALiveChangeIsSeenByEveryThread(): void
    {
        $name = self::uniqueName('threads-live');
        $go = $this->dir . '/go';
        $run = $this->start(6, 2, [
            'options' => ['name' => $name, 'url' => self::url(), 'global' => self::bucket(1000)],
            'steps' => ['0' => [['acquire', 'a', 1]], '1' => [['wait', $go], ['acquire', 'a', 6]]],
        ]);
        $this->waitForFirstRequests(6);
        [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'global=5/0.001');
        $this->assertSame(0, $code, $err);
        touch($go);
        [$code, $err] = $this->finish($run);
        $this->assertSame(0, $code, $err);
        $by = $this->results(6);
        foreach (self::decisions($by, 0) as $d) {
            $this->assertTrue($d[0], 'before the change: 1000 tokens');
        }
        $after = self::decisions($by, 1);
        $this->assertCount(36, $after);
        $allowed = array_filter($after, fn ($d) => $d[0]);
        $this->assertLessThanOrEqual(5, count($allowed), 'the new capacity is 5');
        foreach ($allowed as $d) {
            $this->assertLessThan(5, $d[2], 'remaining under the new capacity');
        }
        $denied = array_unique(array_column(array_filter($after, fn ($d) => !$d[0]), 7));
        sort($denied);
        $this->assertSame(range(0, 5), $denied, 'every thread was denied under the new limits');
    }

    /** A hot mark made while 6 threads run is seen by every thread (isHot, the hot_shop bucket). */
    public function testAHotMarkIsSeenByEveryThread(): void
    {
        $name = self::uniqueName('threads-hot');
        $go = $this->dir . '/go';
        $run = $this->start(6, 2, [
            'options' => ['name' => $name, 'url' => self::url(), 'global' => self::bucket(1000),
                'hot_lane' => self::bucket(1000), 'hot_shop' => self::bucket(2)],
            'steps' => ['0' => [['isHot', 'h'], ['acquire', 'h', 1]],
                '1' => [['wait', $go], ['isHot', 'h'], ['acquire', 'h', 3]]],
        ]);
        $this->waitForFirstRequests(6);
        [$code, , $err] = Cli::limiter(self::url(), $name, 'hot', 'h', '--ttl', '120');
        $this->assertSame(0, $code, $err);
        touch($go);
        [$code, $err] = $this->finish($run);
        $this->assertSame(0, $code, $err);
        $by = $this->results(6);
        foreach ($by as $t => $requests) {
            $this->assertFalse($requests[0][0], "thread $t: not hot before the mark");
            $this->assertTrue($requests[1][1], "thread $t: hot after the mark");
        }
        $after = self::decisions($by, 1);
        $this->assertCount(18, $after);
        $this->assertCount(2, array_filter($after, fn ($d) => $d[0]), 'the hot shop bucket holds 2, for all threads');
        foreach ($after as $d) {
            $this->assertContains($d[1], ['allowed', 'hot_shop']);
        }
        $denied = array_unique(array_column(array_filter($after, fn ($d) => $d[1] === 'hot_shop'), 7));
        sort($denied);
        $this->assertSame(range(0, 5), $denied, 'every thread was denied by the hot shop bucket');
    }

    /**
     * What one thread learns (a drained bucket) the others use: their denials are local,
     * no decision reaches Valkey, and health() says the table is this process's own.
     */
    public function testTheLocalDenialTableIsSharedByTheThreads(): void
    {
        $v = new ValkeyProcess();
        $v->start(['--loadmodule', self::valkeyModule()]);
        try {
            $go = $this->dir . '/go';
            $decides = fn () => preg_match('/cmdstat_cg\.decide:calls=(\d+)/i',
                $v->client()->rawCommand('INFO', 'commandstats'), $m) ? (int) $m[1] : 0;
            $run = $this->start(5, 2, [
                'options' => ['name' => self::uniqueName('threads-denials'), 'url' => $v->url(),
                    'engine' => 'module', 'global' => self::bucket(2, 0.02)],
                // Request 0: thread 0 drains the bucket (2 admitted, 1 denied), the others
                // make their limiter only. Request 1: 20 decisions in every thread.
                'steps' => ['0' => [], '1' => [['wait', $go], ['acquire', 's', 20], ['health']]],
                'threads' => ['0' => ['0' => [['acquire', 's', 3]]]],
            ]);
            $this->waitForFirstRequests(5);
            // 2 admitted; the third is denied here (remaining 0 was in the last reply).
            $this->assertSame(2, $decides(), 'thread 0 drained the bucket');
            touch($go);
            [$code, $err] = $this->finish($run);
            $this->assertSame(0, $code, $err);
            $by = $this->results(5);
            $this->assertSame([true, true, false], array_column(self::decisions($by, 0), 0));
            $all = self::decisions($by, 1);
            $this->assertCount(100, $all);
            foreach ($all as $d) {
                $this->assertSame([false, 'global'], [$d[0], $d[1]]);
            }
            // Thread 0 learnt it; the others' denials are local too: a table per thread
            // would ask Valkey once in each (4 more). A local denial is asked again after
            // 250 ms: one more is allowed for a slow machine.
            $this->assertLessThanOrEqual(2 + 1, $decides(), 'decisions that reached Valkey');
            foreach ($by as $t => $requests) {
                $this->assertSame('own', $requests[1][2], "thread $t: the process's own table");
            }
        } finally {
            $v->stop();
        }
    }

    /**
     * fork() from a threaded process: thread 0 forks 10 children, one after another, while
     * 5 threads decide on the same Valkey; each child (only the forking thread lives in
     * it) makes 10 decisions on a connection of its own. A connection's lock held by
     * another thread at the fork (a round trip in flight) once stayed locked in the child,
     * whose first decision then waited forever.
     */
    public function testForkFromAThreadedProcessGivesAChildThatDecides(): void
    {
        $done = $this->dir . '/done';
        $by = $this->runHost(6, 1, [
            // A child opens its own connection while 5 threads keep 2 cores busy: 2 s for it.
            'options' => ['name' => self::uniqueName('threads-fork'), 'url' => self::url(),
                'global' => self::bucket(100000000, 1000000.0), 'timeout_ms' => 2000],
            'steps' => ['*' => [['acquireUntil', 's', $done]]],
            'threads' => ['0' => ['0' => [['acquire', 's', 1], ['fork', 10, 10, 's'], ['create', $done]]]],
        ]);
        $this->assertSame(array_fill(0, 10, '10 decided'), $by[0][0][1], 'each child decided (none hung)');
        for ($t = 1; $t < 6; $t++) {
            $this->assertGreaterThan(0, $by[$t][0][0], "thread $t decided meanwhile");
        }
    }

    /**
     * Each request's events are its own: 4 requests at once each record 5 events, and
     * while all 4 hold theirs, each sees 5 buffered (stats()) and its flush writes its 5;
     * every event reaches the file once. (A process-wide buffer showed and flushed all 20
     * in whichever request came first.)
     */
    public function testEachRequestBuffersAndFlushesOnlyItsOwnEvents(): void
    {
        $events = $this->dir . '/events.jsonl';
        $ready = $this->dir . '/ready';
        $by = $this->runHost(4, 1, [
            'steps' => ['*' => [['record', 'ZtsThreadTest', 5], ['touch', $ready], ['waitAll', $ready, 4],
                ['buffered'], ['flush'], ['buffered']]],
        ], ['checkout_guard.events.sinks' => 'jsonl', 'checkout_guard.events.jsonl_path' => $events,
            'checkout_guard.events.buffer_size' => '1000']);
        foreach ($by as $t => $requests) {
            $this->assertSame([5, true, true, 5, 5, 0], $requests[0], "thread $t: buffered, flushed, then none");
        }
        $threads = [];
        foreach (file($events, FILE_IGNORE_NEW_LINES) as $line) {
            $e = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
            if (($e['eventType'] ?? '') === 'ZtsThreadTest') {
                $threads[] = $e['thread'] . '/' . $e['i'];
            }
        }
        sort($threads);
        $expected = [];
        foreach (range(0, 3) as $t) {
            foreach (range(0, 4) as $i) {
                $expected[] = "$t/$i";
            }
        }
        $this->assertSame($expected, $threads, 'every event written once');
    }

    /**
     * Hostile callbacks in thread 0 (Telemetry::measure of one that throws, exit()s or dies
     * of a fatal error, one a request) never touch the other threads' requests.
     */
    public function testHostileCallbacksInOneThreadLeaveTheOthersAlone(): void
    {
        [$code, $err] = $this->finish($this->start(6, 30, [
            'options' => ['name' => self::uniqueName('threads-hostile'), 'url' => self::url(),
                'global' => self::bucket(100000)],
            'steps' => ['*' => [['acquire', 's', 2], ['measure', 'ok', 'none'], ['callCount', 'ok']]],
            'hostile_thread' => 0,
            'hostile' => [['measure', 'bad', 'throw'], ['measure', 'bad', 'exit'], ['measure', 'bad', 'fatal']],
        ]));
        $this->assertSame(1, $code, $err);
        $this->assertStringContainsString('thread 0: 30 requests, 30 failed, first failed: request 0 status 255', $err);
        for ($t = 1; $t < 6; $t++) {
            $this->assertStringContainsString("thread $t: 30 requests, 0 failed", $err);
        }
        $this->assertStringContainsString('Allowed memory size', $err);
        $this->assertStringContainsString('hostile callback', $err);
        $by = $this->results(6);
        $this->assertSame([], $by[0], 'no hostile request reached its end');
        for ($t = 1; $t < 6; $t++) {
            $this->assertCount(30, $by[$t]);
            foreach ($by[$t] as $r => $steps) {
                $this->assertSame([true, true], array_column($steps[0], 0), "thread $t request $r");
                $this->assertSame(42, $steps[1]);
                $this->assertSame(1, $steps[2], "thread $t request $r: this request's one measured call");
            }
        }
    }
}
