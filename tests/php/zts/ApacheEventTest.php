<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Apache with the event MPM and the ZTS PHP as its module (mod_php): what teams on Apache
 * run. scripts/apache.sh starts it (2 children of 8 threads, the extension under test
 * loaded) serving tests/php/fixtures/apache/steps.php; the requests come at once through
 * curl_multi. Runs in the PHP matrix's zts row (scripts/php-matrix.sh short zts), which
 * builds the module (scripts/zts.sh apache) and names it in CHECKOUT_GUARD_ZTS_APACHE.
 */
final class ApacheEventTest extends LimiterTestCase
{
    private const CHILDREN = 2;
    private const THREADS = 8;

    private static string $run = '';
    private static int $port = 0;
    private static string $startError = '';
    private string $barrier;

    public static function setUpBeforeClass(): void
    {
        if ((string) getenv('CHECKOUT_GUARD_ZTS_APACHE') === '') {
            return;
        }
        self::$run = sys_get_temp_dir() . '/cg-apache-' . bin2hex(random_bytes(4));
        mkdir(self::$run . '/b', 0777, true);
        $p = proc_open(['bash', dirname(__DIR__, 3) . '/scripts/apache.sh', 'start', self::$run,
            dirname(__DIR__) . '/fixtures/apache', self::url()],
            [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, getenv() + [
                'CG_EXT' => (string) getenv('CHECKOUT_GUARD_EXT'),
                'APACHE_PHP_MODULE' => (string) getenv('CHECKOUT_GUARD_ZTS_APACHE'),
                'APACHE_CHILDREN' => (string) self::CHILDREN, 'APACHE_THREADS' => (string) self::THREADS,
                'CHECKOUT_INI' => 'checkout_guard.events.buffer_size=1000',
            ]);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        if (proc_close($p) !== 0) {
            self::$startError = "scripts/apache.sh start failed:\n$out$err";
            return;
        }
        self::$port = (int) trim($out);
    }

    public static function tearDownAfterClass(): void
    {
        if (self::$run !== '') {
            exec('bash ' . escapeshellarg(dirname(__DIR__, 3) . '/scripts/apache.sh') . ' stop ' . escapeshellarg(self::$run));
            exec('rm -rf ' . escapeshellarg(self::$run));
            self::$run = '';
        }
    }

    protected function setUp(): void
    {
        if ((string) getenv('CHECKOUT_GUARD_ZTS_APACHE') === '') {
            $this->markTestSkipped('needs Apache with the ZTS PHP as its module: run scripts/php-matrix.sh short zts');
        }
        $this->assertSame('', self::$startError);
        $this->barrier = self::$run . '/b/' . bin2hex(random_bytes(4));
    }

    /** PHP errors under Apache fail the test that caused them (less the fail-open notices). */
    protected function tearDown(): void
    {
        if (self::$run === '' || self::$startError !== '') {
            return;
        }
        $errors = array_filter(@file(self::$run . '/php-errors.log', FILE_IGNORE_NEW_LINES) ?: [],
            fn ($l) => preg_match("/checkout_guard: (limiter '.*' (cannot reach|got no decision from) Valkey)/", $l) !== 1);
        file_put_contents(self::$run . '/php-errors.log', '');
        $this->assertSame([], array_values($errors), 'PHP errors under Apache');
        $this->assertDoesNotMatchRegularExpression('/PHP (Startup|Fatal|Warning|Notice|Deprecated|Parse)/',
            (string) @file_get_contents(self::$run . '/error.log'), "PHP's messages in Apache's error log");
    }

    /**
     * The requests, all at once; $during is called while they are in flight until it returns
     * true. Every answer must be 200 with JSON.
     *
     * @param list<array{id: string, steps: array, options?: array}> $requests
     * @return array<string, array{id: string, pid: int, steps: array}> by id
     */
    private function requests(array $requests, ?callable $during = null): array
    {
        $mh = curl_multi_init();
        $handles = [];
        foreach ($requests as $r) {
            $q = ['id' => $r['id'], 'steps' => json_encode($r['steps'], JSON_THROW_ON_ERROR)];
            if (isset($r['options'])) {
                $q['options'] = json_encode($r['options'], JSON_THROW_ON_ERROR);
            }
            $h = curl_init('http://127.0.0.1:' . self::$port . '/steps.php?' . http_build_query($q));
            curl_setopt_array($h, [CURLOPT_RETURNTRANSFER => true, CURLOPT_TIMEOUT => 60, CURLOPT_FORBID_REUSE => true]);
            curl_multi_add_handle($mh, $h);
            $handles[$r['id']] = $h;
        }
        $deadline = microtime(true) + 90;
        do {
            curl_multi_exec($mh, $running);
            if ($during !== null && $during()) {
                $during = null;
            }
            if ($running > 0) {
                curl_multi_select($mh, 0.05);
            }
        } while ($running > 0 && microtime(true) < $deadline);
        $this->assertSame(0, $running, 'every request answered in 90 s');
        $this->assertNull($during, 'the step while the requests ran was taken');
        $by = [];
        foreach ($handles as $id => $h) {
            $body = (string) curl_multi_getcontent($h);
            $this->assertSame(200, curl_getinfo($h, CURLINFO_RESPONSE_CODE), "request $id: $body");
            $by[(string) $id] = json_decode($body, true, 512, JSON_THROW_ON_ERROR);
            curl_multi_remove_handle($mh, $h);
        }
        curl_multi_close($mh);
        return $by;
    }

    /** The decisions of every answer's acquire steps (or of step $step only), flattened. */
    private static function decisions(array $by, ?int $step = null): array
    {
        $all = [];
        foreach ($by as $r) {
            foreach ($r['steps'] as $i => $s) {
                if (($step === null || $step === $i) && is_array($s)) {
                    array_push($all, ...$s);
                }
            }
        }
        return $all;
    }

    /** Requests served by one pid: Apache's threads, not processes of their own. */
    private function assertThreadsShareAProcess(array $by): void
    {
        $pids = array_count_values(array_column($by, 'pid'));
        $this->assertLessThanOrEqual(self::CHILDREN, count($pids), 'Apache runs its 2 children');
        $this->assertGreaterThan(1, max($pids), 'requests served by threads of one process');
    }

    private static function requestsOf(int $n, array $steps, ?array $options = null): array
    {
        $all = [];
        for ($i = 0; $i < $n; $i++) {
            $all[] = ['id' => "r$i", 'steps' => $steps] + ($options === null ? [] : ['options' => $options]);
        }
        return $all;
    }

    /** 96 requests of 2 decisions each on a bucket of 12 that does not refill: exactly 12 pass. */
    public function testConcurrentRequestsTakeExactlyTheCapacity(): void
    {
        $options = ['name' => self::uniqueName('apache-cap'), 'url' => self::url(), 'global' => self::bucket(12)];
        $by = $this->requests(self::requestsOf(96, [['acquire', 's', 2]], $options));
        $all = self::decisions($by);
        $this->assertCount(192, $all);
        $this->assertCount(12, array_filter($all, fn ($d) => $d[0]), 'the whole capacity, and not one more');
        $remaining = array_column(array_filter($all, fn ($d) => $d[0]), 2);
        sort($remaining);
        $this->assertSame(range(0, 11), $remaining, 'each token handed out once');
        $this->assertThreadsShareAProcess($by);
    }

    /**
     * 96 requests of 3 decisions each on a bucket of 10 + 20/s: the admitted stay within
     * capacity + rate x elapsed (from the first decision's start to the last admitted's end).
     */
    public function testDecisionsFromConcurrentRequestsStayWithinTheEnvelope(): void
    {
        $cap = 10;
        $rate = 20.0;
        $options = ['name' => self::uniqueName('apache-envelope'), 'url' => self::url(),
            'global' => self::bucket($cap, $rate)];
        $by = $this->requests(self::requestsOf(96, [['acquire', 's', 3]], $options));
        $all = self::decisions($by);
        $this->assertCount(288, $all);
        $allowed = array_filter($all, fn ($d) => $d[0]);
        $this->assertGreaterThanOrEqual($cap, count($allowed), 'the whole capacity was there');
        $this->assertLessThan(count($all), count($allowed), 'the requests asked more than the bucket holds');
        $first = min(array_column($all, 3));
        $last = max(array_column($allowed, 4));
        $envelope = $cap + $rate * ($last - $first);
        $this->assertLessThanOrEqual(floor($envelope) + 1, count($allowed),
            sprintf('%d admitted in %.3f s from a bucket of %d + %.0f/s', count($allowed), $last - $first, $cap, $rate));
        foreach ($all as $d) {
            $this->assertContains($d[1], ['allowed', 'global']);
        }
        $this->assertThreadsShareAProcess($by);
    }

    /**
     * Each request's events are its own: 8 requests at once (one per thread of a child at
     * least) each record 5 events and, while all 8 hold theirs, see 5 buffered and flush
     * their 5; each counts its own measured call from 0. Every event reaches the file once.
     */
    public function testEachRequestsEventsAndCallsAreItsOwn(): void
    {
        $type = 'ApacheEvent' . bin2hex(random_bytes(3));
        $by = $this->requests(self::requestsOf(8, [['callCount', 'ok'], ['record', $type, 5], ['touch', $this->barrier],
            ['waitAll', $this->barrier, 8], ['buffered'], ['flush'], ['buffered'], ['measure', 'ok'], ['callCount', 'ok']]));
        foreach ($by as $id => $r) {
            $this->assertSame($id, $r['id']);
            $this->assertSame([0, 5, true, true, 5, true, 0, 42, 1], $r['steps'], "request $id");
        }
        $this->assertThreadsShareAProcess($by);
        $seen = [];
        foreach (file(self::$run . '/events.jsonl', FILE_IGNORE_NEW_LINES) as $line) {
            $e = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
            if (($e['eventType'] ?? '') === $type) {
                $seen[] = $e['id'] . '/' . $e['i'];
            }
        }
        sort($seen);
        $expected = [];
        foreach (array_keys($by) as $id) {
            foreach (range(0, 4) as $i) {
                $expected[] = "$id/$i";
            }
        }
        sort($expected);
        $this->assertSame($expected, $seen, 'every event written once, with its own request\'s id');
    }

    /**
     * A live change (`checkout-guard limiter set`) while Apache's threads hold 8 requests:
     * each request's next decisions, in the same threads, follow the new limits.
     */
    public function testALiveChangeIsSeenByRequestsInFlight(): void
    {
        $name = self::uniqueName('apache-live');
        $go = $this->barrier . '-go';
        $options = ['name' => $name, 'url' => self::url(), 'global' => self::bucket(1000)];
        $changed = false;
        $by = $this->requests(self::requestsOf(8, [['acquire', 'a', 1], ['touch', $this->barrier], ['wait', $go],
            ['acquire', 'a', 6]], $options), function () use ($name, $go, &$changed): bool {
                if (count(glob($this->barrier . '.*') ?: []) < 8) {
                    return false;
                }
                [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'global=5/0.001');
                $this->assertSame(0, $code, $err);
                touch($go);
                return $changed = true;
            });
        $this->assertTrue($changed);
        foreach (self::decisions($by, 0) as $d) {
            $this->assertTrue($d[0], 'before the change: 1000 tokens');
        }
        $after = self::decisions($by, 3);
        $this->assertCount(48, $after);
        $allowed = array_filter($after, fn ($d) => $d[0]);
        $this->assertLessThanOrEqual(5, count($allowed), 'the new capacity is 5');
        foreach ($allowed as $d) {
            $this->assertLessThan(5, $d[2], 'remaining under the new capacity');
        }
        foreach ($by as $id => $r) {
            $this->assertContains(false, array_column($r['steps'][3], 0), "request $id was denied under the new limits");
        }
        $this->assertThreadsShareAProcess($by);
    }
}
