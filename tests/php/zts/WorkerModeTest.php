<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * FrankenPHP's worker mode: one long PHP request per thread (the worker script) handling
 * requests inside it, each bracketed by the SAPI's activate/deactivate and not by the
 * extension's RINIT/RSHUTDOWN (src/lifecycle.rs). Each test runs the FrankenPHP-style
 * worker host (tests/zts/worker.c, built against the ZTS PHP by scripts/zts.sh:
 * CHECKOUT_GUARD_ZTS_WORKER) with tests/zts/scripts/worker.php and the extension under
 * test, and reads the line each handled request wrote. Runs in the PHP matrix's zts row.
 */
final class WorkerModeTest extends LimiterTestCase
{
    private const SCRIPT = __DIR__ . '/../../zts/scripts/worker.php';

    private string $dir;

    protected function setUp(): void
    {
        if ((string) getenv('CHECKOUT_GUARD_ZTS_WORKER') === '') {
            $this->markTestSkipped('needs the worker host of a ZTS PHP: run scripts/php-matrix.sh short zts');
        }
        $this->dir = sys_get_temp_dir() . '/cg-worker-' . bin2hex(random_bytes(4));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        if (isset($this->dir) && is_dir($this->dir)) {
            array_map('unlink', glob($this->dir . '/*') ?: []);
            rmdir($this->dir);
        }
    }

    /**
     * Runs the worker host: THREADS threads handling REQUESTS requests each.
     *
     * @return array{0: int, 1: string, 2: array<int, list<array<string, mixed>>>} exit status,
     *         the host's stderr and stdout, and per thread the lines its handled requests wrote
     */
    private function runWorker(int $threads, int $requests, array $cfg): array
    {
        $cfg += ['events' => $this->dir . '/events.jsonl', 'out' => $this->dir . '/out', 'hostile' => new \stdClass()];
        file_put_contents($this->dir . '/cfg.json', json_encode($cfg, JSON_THROW_ON_ERROR));
        file_put_contents($this->dir . '/php.ini', implode("\n", [
            'extension=' . getenv('CHECKOUT_GUARD_EXT'),
            'memory_limit=128M',
            'checkout_guard.events.sinks=jsonl',
            'checkout_guard.events.jsonl_path=' . $cfg['events'],
        ]) . "\n");
        $cmd = ['timeout', '120', (string) getenv('CHECKOUT_GUARD_ZTS_WORKER'), '-c', $this->dir . '/php.ini',
            (string) $threads, (string) $requests, self::SCRIPT, $this->dir . '/cfg.json'];
        $p = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', $this->dir . '/stdout', 'w'],
            2 => ['file', $this->dir . '/stderr', 'w']], $pipes);
        $this->assertIsResource($p);
        $code = proc_close($p);
        $said = (string) file_get_contents($this->dir . '/stderr') . (string) file_get_contents($this->dir . '/stdout');
        $lines = [];
        for ($t = 0; $t < $threads; $t++) {
            $f = $this->dir . "/out.$t";
            $lines[$t] = is_file($f)
                ? array_map(static fn (string $l) => json_decode($l, true, 512, JSON_THROW_ON_ERROR), file($f, FILE_IGNORE_NEW_LINES))
                : [];
        }
        return [$code, $said, $lines];
    }

    /** The events in the JSONL file, decoded. */
    private function events(): array
    {
        $f = $this->dir . '/events.jsonl';
        return is_file($f) ? array_map(static fn (string $l) => json_decode($l, true, 512, JSON_THROW_ON_ERROR), file($f, FILE_IGNORE_NEW_LINES)) : [];
    }

    /**
     * Each handled request starts with callCount() at 0, and its events are in the file
     * when the next one starts (the boot's before the first); nothing is written twice;
     * its lease is released at its end (an in-flight level of 1, never released by the
     * script, lets every request in); health() says "worker".
     */
    public function testEachHandledRequestIsARequestOfItsOwn(): void
    {
        $threads = 4;
        $requests = 6;
        $opts = ['name' => self::uniqueName('wm'), 'url' => self::url(), 'global' => self::bucket(1000)];
        [$code, $said, $lines] = $this->runWorkerPerThread($threads, $requests, $opts);
        $this->assertSame(0, $code, $said);
        for ($t = 0; $t < $threads; $t++) {
            $this->assertCount($requests, $lines[$t], "thread $t:\n$said");
            foreach ($lines[$t] as $i => $l) {
                $this->assertSame($i, $l['r']);
                $this->assertSame(0, $l['count0'], "thread $t request $i: callCount() at the request's start");
                $this->assertSame(2, $l['count1'], "thread $t request $i: callCount() after its 2 calls");
                $this->assertSame($i === 0 ? 1 : 2, $l['prev'], "thread $t request $i: the events of the request before it written when it ended");
                $this->assertTrue($l['allowed'], "thread $t request $i: the lease of the request before it released when it ended");
                $this->assertSame('worker', $l['lifecycle'], "thread $t request $i");
            }
        }
        // The last request's events came out when it ended too, each event once.
        $psp = array_filter($this->events(), static fn (array $e) => $e['api'] === 'psp');
        $this->assertCount($threads * $requests * 2, $psp);
        $keys = array_map(static fn (array $e) => "{$e['thread']}:{$e['request']}:{$e['http.response.status_code']}", $psp);
        $this->assertCount(count($keys), array_unique($keys), 'no event written twice');
    }

    /**
     * Runs the worker with a limiter whose in-flight level takes 1 lease per shop: each
     * thread acquires for a shop of its own ("shop-THREAD", hot), so a lease not released
     * at a request's end denies that thread's next request.
     */
    private function runWorkerPerThread(int $threads, int $requests, array $opts): array
    {
        $opts['hot_lane'] = self::bucket(1000);
        $opts['hot_shop'] = self::bucket(1000);
        $opts['in_flight'] = ['global' => 1000, 'hot_lane' => 1000, 'hot_shop' => 1, 'lease_seconds' => 60];
        $l = $this->limiter($opts);
        for ($t = 0; $t < $threads; $t++) {
            $l->markHot("shop-$t", 600);
        }
        return $this->runWorker($threads, $requests, ['options' => $opts]);
    }

    /**
     * An uncaught exception, exit() and a fatal error inside a handled request: the next
     * request on that thread starts clean (callCount() at 0, the hostile request's events
     * written), the worker restarted where FrankenPHP restarts it (exit and fatal end the
     * worker's request: its RSHUTDOWN is the request's end), and the other threads see none
     * of it.
     */
    public function testHostileRequestsLeaveTheNextRequestAndTheOtherThreadsClean(): void
    {
        $hostile = ['0:1' => 'throw', '0:3' => 'exit', '1:2' => 'fatal', '1:4' => 'throw'];
        [$code, $said, $lines] = $this->runWorker(3, 6, ['hostile' => $hostile]);
        $this->assertSame(0, $code, $said);
        $this->assertStringContainsString('thread 0: 6 handled, 2 worker starts', $said, 'exit() restarts the worker');
        $this->assertStringContainsString('thread 1: 6 handled, 2 worker starts', $said, 'a fatal error restarts the worker');
        $this->assertStringContainsString('thread 2: 6 handled, 1 worker starts', $said);
        $this->assertStringContainsString('request 0:1 throws', $said, 'the exception reported as FrankenPHP reports it');
        for ($t = 0; $t < 3; $t++) {
            $this->assertCount(6, $lines[$t], "thread $t:\n$said");
            foreach ($lines[$t] as $i => $l) {
                $this->assertSame(0, $l['count0'], "thread $t request $i: callCount() at the request's start");
                $restarted = $i > 0 && $l['start'] !== $lines[$t][$i - 1]['start'];
                // After a restart the first request sees its own start's boot event.
                $this->assertSame($i === 0 || $restarted ? 1 : 2, $l['prev'], "thread $t request $i:\n$said");
            }
        }
        $this->assertSame(1, $lines[0][4]['start'], 'thread 0 restarted after its exit() at request 3');
        $this->assertSame(1, $lines[1][3]['start'], 'thread 1 restarted after its fatal error at request 2');
        $byRequest = [];
        foreach ($this->events() as $e) {
            if ($e['api'] === 'psp') {
                $k = "{$e['thread']}:{$e['request']}";
                $byRequest[$k] = ($byRequest[$k] ?? 0) + 1;
            }
        }
        $this->assertCount(18, $byRequest, 'every request\'s events written, the hostile ones\' too');
        $this->assertSame([2], array_values(array_unique($byRequest)), 'each request\'s 2 events, once');
    }

    /**
     * A handled request killed by max_execution_time (one request thread: PHP 8.2 without
     * ZEND_MAX_EXECUTION_TIMERS has one timer per process): its events are written, the
     * worker restarts, the next request starts at 0.
     */
    public function testARequestKilledByMaxExecutionTime(): void
    {
        [$code, $said, $lines] = $this->runWorker(1, 3, ['hostile' => ['0:1' => 'timeout']]);
        $this->assertSame(0, $code, $said);
        $this->assertStringContainsString('Maximum execution time of 1 second exceeded', $said);
        $this->assertStringContainsString('thread 0: 3 handled, 2 worker starts', $said);
        $this->assertCount(3, $lines[0], $said);
        $this->assertSame(0, $lines[0][2]['count0']);
        $this->assertSame(1, $lines[0][2]['start']);
        $killed = array_filter($this->events(), static fn (array $e) => $e['api'] === 'psp' && $e['request'] === 1);
        $this->assertCount(2, $killed, 'the killed request\'s events written');
    }
}
