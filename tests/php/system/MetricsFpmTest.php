<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * CheckoutGuard\Metrics under a real php-fpm (4 static workers) of the test's own,
 * checkout_guard loaded globally (`-d extension=`: the counters made at module start-up in
 * the master, before the fork) or per pool (`php_admin_value[extension]`: the /dev/shm file
 * named after the master). The workers serve tests/php/fixtures/metrics_probe.php, which
 * makes decisions (allowed and denied, enforce and shadow, a hot shop, reservations, the
 * adaptive budget's feedback, a Valkey nobody answers under each policy, a flood denied in
 * the workers), measures calls of every status class and says what it did; the exposition
 * (text 0.0.4 and OpenMetrics) read with prometheus_client's own parsers must count exactly
 * what all the workers did. A worker killed with SIGKILL loses nothing and counting goes
 * on; a master reloaded (SIGUSR2) starts from zero with a later start time.
 */
final class MetricsFpmTest extends OwnFpmTestCase
{
    /** OpenTelemetry's http.client.request.duration boundaries (seconds), then +Inf. */
    private const BUCKETS = ['0.005', '0.01', '0.025', '0.05', '0.075', '0.1', '0.25', '0.5', '0.75', '1', '2.5', '5', '7.5', '10', '+Inf'];

    /** The counters compared exactly with what the workers said they did (zeros left out). */
    private const COUNTED = [
        'checkout_guard_decisions_total',
        'checkout_guard_near_limit_total',
        'checkout_guard_local_denials_total',
        'checkout_guard_valkey_decisions_total',
        'checkout_guard_reservations_waited_total',
        'checkout_guard_provider_throttled_total',
        'checkout_guard_events_written_total',
        'checkout_guard_events_dropped_total',
        'checkout_guard_metrics_series_dropped_total',
        'http_client_request_duration_seconds_count',
    ];

    private const FLOOD_CALLS = 25;

    private string $name = '';
    private string $dead = '';
    /** @var array<string, float> what the workers did, as COUNTED's keys */
    private array $expected = [];
    /** @var array<string, float> reservation wait seconds per limiter */
    private array $waited = [];
    /** @var array<string, int> measured calls of the slow API */
    private array $slow = [];

    protected static function dirPrefix(): string
    {
        return 'cg-metrics-fpm-';
    }

    protected function setUp(): void
    {
        parent::setUp();
        if (Exposition::python() === null) {
            $this->markTestSkipped('no prometheus_client in .venv (scripts/setup.sh installs it): the exposition is read with its parser');
        }
        $this->name = self::uniqueName('metrics');
        $this->dead = 'redis://127.0.0.1:' . ValkeyProcess::freePort();   // nobody listens there
    }

    /** @return array<string, array{bool}> */
    public static function loadings(): array
    {
        return ['loaded per pool (php_admin_value[extension])' => [true], 'loaded globally (extension=)' => [false]];
    }

    /** @dataProvider loadings */
    #[\PHPUnit\Framework\Attributes\DataProvider('loadings')]
    public function testTheCountersAreWhatTheWorkersDidAcrossAKilledWorker(bool $perPool): void
    {
        $master = $this->startFpm($perPool);

        // Two rounds of four requests, each in a worker of its own, then the flood.
        $pids = [];
        for ($round = 0; $round < 2; $round++) {
            $pids += array_flip($this->work("a$round"));
        }
        $this->assertCount(4, $pids, 'the four workers each served requests');
        $this->flood('a');
        $first = $this->assertCountersMatch('after the work of four workers');

        // A worker killed: the counters live on in the memory the others share.
        $victim = array_key_first($pids);
        $this->assertTrue(posix_kill($victim, SIGKILL), "SIGKILL to worker $victim");
        $this->waitForWorkers($master, fn (array $w) => count($w) === 4 && !in_array($victim, $w, true), 'php-fpm replaces the killed worker');
        $afterKill = $this->render();
        $this->assertSame($first->all(), $afterKill->all(), 'a killed worker takes no count with it (nor is anything counted twice)');
        // And counting goes on, in the new worker too.
        $newPids = $this->work('b');
        $this->assertCount(4, array_unique($newPids));
        $this->flood('b');
        $this->assertCountersMatch('after a killed worker and more work');

        if ($perPool) {
            // Loaded per pool, the workers meet in a file named after the master.
            $this->assertCount(1, glob("/dev/shm/checkout-guard-denials.*.P$master.*") ?: [], 'one shared file for the pool');
        }
    }

    /** @dataProvider loadings */
    #[\PHPUnit\Framework\Attributes\DataProvider('loadings')]
    public function testAReloadedMasterStartsFromZeroWithALaterStartTime(bool $perPool): void
    {
        $master = $this->startFpm($perPool);
        $this->work('a');
        $this->flood('a');
        $startTime = $this->startTime($this->assertCountersMatch('before the reload'));

        // SIGUSR2: php-fpm re-executes itself (same pid) and forks new workers.
        $old = $this->workers($master);
        $this->waitUntil(fn () => microtime(true) >= floor($startTime) + 1.0, 'the clock moves past the start time\'s second');
        $reloadedAt = microtime(true);
        $this->assertTrue(posix_kill($master, SIGUSR2), 'SIGUSR2 to the master');
        $this->waitForWorkers($master, fn (array $w) => count($w) === 4 && array_intersect($w, $old) === [], 'php-fpm reloads with four new workers');
        $this->waitForPort();
        $reloaded = $this->render();
        $newStart = $this->startTime($reloaded);
        $this->assertGreaterThan($startTime, $newStart, 'the reset is visible as a later start time');
        $this->assertGreaterThanOrEqual(floor($reloadedAt), $newStart, 'made at the reload, not before');
        $this->assertSame([], $reloaded->nonZero(self::COUNTED), 'a reloaded master starts from zero');
        $this->assertSame([], $reloaded->nonZero(['http_client_request_duration_seconds_sum', 'http_client_request_duration_seconds_bucket', 'checkout_guard_reservation_wait_seconds_total']));

        // Counting after the reload: exactly the new work.
        $this->expected = [];
        $this->waited = [];
        $this->slow = [];
        $this->name .= '-r';   // fresh buckets in Valkey: the decisions are the first round's again
        $this->work('b');
        $this->flood('b');
        $this->assertCountersMatch('after the reload');
    }

    public function testMetricsOffCountsNothing(): void
    {
        $this->startFpm(false, ['-d', 'checkout_guard.metrics=0']);
        $this->work('off');
        $this->flood('off');
        $e = $this->render();
        $this->startTime($e);
        // Nothing counted: no series of a limiter, an api or a sink, and every sample but the
        // start time and whether the counters are shared at zero.
        $this->assertSame(1.0, (float) $e->named('checkout_guard_metrics_shared')[0]['value'], 'the workers share the (empty) counters');
        foreach ($e->samples as $sample) {
            if (!in_array($sample['name'], ['checkout_guard_metrics_start_time_seconds', 'checkout_guard_metrics_shared'], true)) {
                $this->assertSame([], $sample['labels'], 'checkout_guard.metrics=0: ' . json_encode($sample));
                $this->assertSame(0.0, (float) $sample['value'], 'checkout_guard.metrics=0: ' . json_encode($sample));
            }
        }
    }

    /**
     * php/examples/checkout/metrics.php as nginx serves it (deploy/config's /metrics on the
     * ops port): through the pool's hidden status pool (pm.status_listen), which answers
     * while every worker of the pool is busy, and shares the workers' counters (a child of
     * the same master). The Accept header picks the format.
     */
    public function testTheExampleRouteAnswersBothFormatsWhileEveryWorkerIsBusy(): void
    {
        $this->startFpm(false, [], $statusPort = ValkeyProcess::freePort());
        $this->work('ex');
        $expected = $this->expected;
        ksort($expected);

        // Every worker of the pool held busy.
        $release = "{$this->dir}/release";
        $held = [];
        for ($i = 0; $i < 4; $i++) {
            $held[] = proc_open($this->command(['do' => 'hold', 'held' => "{$this->dir}/held", 'until' => $release]),
                [1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']], $pipes);
        }
        try {
            $this->waitUntil(fn () => count(glob("{$this->dir}/held-*") ?: []) === 4, 'four workers held');
            $script = dirname(__DIR__, 3) . '/php/examples/checkout/metrics.php';
            $plain = $this->fcgi($script, [], $statusPort);
            $this->assertSame('text/plain; version=0.0.4; charset=utf-8', $plain['headers']['content-type'] ?? null, json_encode($plain));
            $this->assertSame($expected, Exposition::parse($plain['body'])->nonZero(self::COUNTED), "the status pool sees the workers' counters");
            // Prometheus' Accept asks for OpenMetrics first.
            $om = $this->fcgi($script, ['HTTP_ACCEPT' => 'application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1'], $statusPort);
            $this->assertSame('application/openmetrics-text; version=1.0.0; charset=utf-8', $om['headers']['content-type'] ?? null, json_encode($om['headers']));
            $this->assertStringEndsWith("# EOF\n", $om['body']);
            $this->assertSame($expected, Exposition::parse($om['body'], true)->nonZero(self::COUNTED), 'both formats count alike');
            // A browser's Accept (text/html, */*), or OpenMetrics refused (q=0): the text format.
            foreach (['text/html,application/xhtml+xml,*/*;q=0.8', 'application/openmetrics-text;q=0, text/plain'] as $accept) {
                $other = $this->fcgi($script, ['HTTP_ACCEPT' => $accept], $statusPort);
                $this->assertSame('text/plain; version=0.0.4; charset=utf-8', $other['headers']['content-type'] ?? null, $accept);
            }
        } finally {
            touch($release);
            foreach ($held as $p) {
                proc_close($p);
            }
        }
    }

    /**
     * Renders, parses both formats, and compares every counter with what the workers did;
     * the histogram's buckets, the wait seconds and the adaptive share too. The parsed text.
     */
    private function assertCountersMatch(string $when): Exposition
    {
        $r = $this->renderAnswer();
        $this->assertSame(
            ['text/plain; version=0.0.4; charset=utf-8', 'text/plain; version=0.0.4; charset=utf-8', 'application/openmetrics-text; version=1.0.0; charset=utf-8'],
            $r['content_types']
        );
        $text = Exposition::parse($r['text']);
        $om = Exposition::parse($r['openmetrics'], true);
        $this->assertStringEndsWith("# EOF\n", $r['openmetrics']);
        ksort($this->expected);
        $this->assertSame($this->expected, $text->nonZero(self::COUNTED), "$when: the counters against what the workers did");

        // OpenMetrics says the same: every sample of the text format is there with its value.
        $omAll = $om->all();
        foreach ($text->all() as $key => $value) {
            $this->assertArrayHasKey($key, $omAll, "$when: OpenMetrics has $key");
            $this->assertSame($value, $omAll[$key], "$when: $key in OpenMetrics");
        }

        // Every family named by the contract, with HELP and its TYPE.
        foreach ([
            'checkout_guard_decisions' => 'counter', 'checkout_guard_near_limit' => 'counter',
            'checkout_guard_local_denials' => 'counter', 'checkout_guard_reservations_waited' => 'counter',
            'checkout_guard_reservation_wait_seconds' => 'counter', 'checkout_guard_adaptive_share' => 'gauge',
            'checkout_guard_provider_throttled' => 'counter', 'checkout_guard_events_written' => 'counter',
            'checkout_guard_events_dropped' => 'counter', 'http_client_request_duration_seconds' => 'histogram',
            'checkout_guard_metrics_start_time_seconds' => 'gauge', 'checkout_guard_metrics_series_dropped' => 'counter',
        ] as $family => $type) {
            foreach ([$text, $om] as $i => $e) {
                $f = $e->family($family);
                $this->assertNotNull($f, "$when: family $family (" . ($i ? 'OpenMetrics' : 'text') . ')');
                $this->assertSame($type, $f['type'], "$when: $family's TYPE");
                $this->assertNotSame('', $f['help'], "$when: $family's HELP");
            }
        }

        // The histogram: per api and status class, cumulative buckets at OpenTelemetry's
        // boundaries ending in +Inf == _count; the slow calls in no bucket under 0.05 s.
        $buckets = [];
        foreach ($text->named('http_client_request_duration_seconds_bucket') as $s) {
            $series = $s['labels']['api'] . '/' . $s['labels']['status_class'];
            $le = $s['labels']['le'] === '+Inf' ? '+Inf' : (string) (float) $s['labels']['le'];   // "1.0" and "1" alike
            $buckets[$series][$le] = (float) $s['value'];
        }
        $counts = [];
        $sums = [];
        foreach ($text->named('http_client_request_duration_seconds_count') as $s) {
            $counts[$s['labels']['api'] . '/' . $s['labels']['status_class']] = (float) $s['value'];
        }
        foreach ($text->named('http_client_request_duration_seconds_sum') as $s) {
            $sums[$s['labels']['api'] . '/' . $s['labels']['status_class']] = (float) $s['value'];
        }
        $this->assertSame(array_keys($counts), array_keys($buckets), "$when: a bucket set per counted series");
        foreach ($buckets as $series => $b) {
            $this->assertSame(self::BUCKETS, array_map('strval', array_keys($b)), "$when: $series's boundaries, in order");
            $values = array_values($b);
            $sorted = $values;
            sort($sorted);
            $this->assertSame($sorted, $values, "$when: $series's buckets are cumulative");
            $this->assertSame($counts[$series], $b['+Inf'], "$when: $series: +Inf == _count");
            $this->assertGreaterThanOrEqual(0.0, $sums[$series]);
        }
        foreach ($this->slow as $series => $n) {
            $this->assertSame(0.0, $buckets[$series]['0.025'], "$when: a call of 30 ms or more is in no bucket up to 0.025 s");
            $this->assertGreaterThanOrEqual(0.030 * $n, $sums[$series], "$when: the slow calls' _sum");
        }

        // Reservation waits: the seconds every reservation said it waited (to the µs).
        $waits = [];
        foreach ($text->named('checkout_guard_reservation_wait_seconds_total') as $s) {
            if ((float) $s['value'] !== 0.0) {
                $waits[$s['labels']['limiter']] = (float) $s['value'];
            }
        }
        ksort($waits);
        ksort($this->waited);
        $this->assertSame(array_keys($this->waited), array_keys($waits), "$when: limiters with reservation waits");
        foreach ($this->waited as $limiter => $seconds) {
            $this->assertEqualsWithDelta($seconds, $waits[$limiter], 1e-5 * 16, "$when: $limiter's wait seconds");
        }

        // The adaptive share: lowered by the 429s (0.7 a step, recovering over 60 s), 1
        // where no throttling answer was reported.
        foreach ($text->named('checkout_guard_adaptive_share') as $s) {
            if ($s['labels']['limiter'] === "{$this->name}-adaptive") {
                $this->assertGreaterThan(0.0, (float) $s['value'], $when);
                $this->assertLessThan(1.0, (float) $s['value'], "$when: the share lowered by the 429s");
            } elseif (str_starts_with($s['labels']['limiter'], "{$this->name}-")) {
                $this->assertSame(1.0, (float) $s['value'], "$when: {$s['labels']['limiter']}'s share");
            }
        }
        return $text;
    }

    /** The start-time gauge, checked for its one sample. */
    private function startTime(Exposition $e): float
    {
        $s = $e->named('checkout_guard_metrics_start_time_seconds');
        $this->assertCount(1, $s);
        $this->assertSame([], $s[0]['labels']);
        $this->assertGreaterThan(1.7e9, (float) $s[0]['value'], 'Unix seconds');
        $this->assertLessThanOrEqual(microtime(true), (float) $s[0]['value']);
        return (float) $s[0]['value'];
    }

    /** Four `work` requests at a barrier (each in a worker of its own); their pids. */
    private function work(string $round): array
    {
        $barrier = "{$this->dir}/barrier-$round";
        touch($barrier);
        $answers = $this->concurrently(4, $this->query() + ['do' => 'work', 'barrier' => $barrier]);
        $this->tally($answers);
        return array_column($answers, 'pid');
    }

    /** Four `flood` requests at once, FLOOD_CALLS decisions each; the local denials are
     *  the flood's decisions that never reached Valkey. */
    private function flood(string $round): void
    {
        $barrier = "{$this->dir}/barrier-flood-$round";
        touch($barrier);
        $before = $this->commandCalls('evalsha');
        $answers = $this->concurrently(4, $this->query() + ['do' => 'flood', 'barrier' => $barrier, 'n' => self::FLOOD_CALLS]);
        $inValkey = $this->commandCalls('evalsha') - $before;
        $this->tally($answers);
        $local = 4 * self::FLOOD_CALLS - $inValkey;
        $this->assertGreaterThan(0, $local, "a flood of one bucket's denials is mostly denied in the workers ($inValkey of " . 4 * self::FLOOD_CALLS . ' reached Valkey)');
        $this->add('checkout_guard_local_denials_total', ['limiter' => "{$this->name}-flood"], $local);
        $this->add('checkout_guard_valkey_decisions_total', ['limiter' => "{$this->name}-flood", 'engine' => 'lua'], $inValkey);
    }

    /** Adds what the requests say they did to the expected counts. */
    private function tally(array $answers): void
    {
        foreach ($answers as $a) {
            foreach ($a['decisions'] as [$limiter, $outcome, $reason, $mode, $near]) {
                $this->add('checkout_guard_decisions_total', compact('limiter', 'outcome', 'reason', 'mode'), 1);
                // Outside the flood every decision is Valkey's (engine lua, local denials off)
                // but the unreachable ones'; the flood's are counted from commandstats.
                if ($reason !== 'unavailable' && !str_ends_with($limiter, '-flood')) {
                    $this->add('checkout_guard_valkey_decisions_total', ['limiter' => $limiter, 'engine' => 'lua'], 1);
                }
                if ($near) {
                    $this->add('checkout_guard_near_limit_total', compact('limiter'), 1);
                }
            }
            foreach ($a['waits'] as [$limiter, $seconds]) {
                $this->add('checkout_guard_reservations_waited_total', compact('limiter'), 1);
                $this->waited[$limiter] = ($this->waited[$limiter] ?? 0.0) + $seconds;
            }
            foreach ($a['throttled'] as [$limiter, $n]) {
                $this->add('checkout_guard_provider_throttled_total', compact('limiter'), $n);
            }
            foreach ($a['calls'] as [$api, $status_class]) {
                $this->add('http_client_request_duration_seconds_count', compact('api', 'status_class'), 1);
                if ($api === 'slow') {
                    $this->slow["$api/$status_class"] = ($this->slow["$api/$status_class"] ?? 0) + 1;
                }
            }
            foreach ($a['sinks'] as $sink => $n) {
                $this->add('checkout_guard_events_written_total', compact('sink'), $n['written']);
                $this->add('checkout_guard_events_dropped_total', compact('sink'), $n['dropped']);
            }
        }
    }

    private function add(string $name, array $labels, int $n): void
    {
        if ($n !== 0) {
            $key = Exposition::key($name, $labels);
            $this->expected[$key] = ($this->expected[$key] ?? 0.0) + $n;
        }
    }

    private function query(): array
    {
        return ['name' => $this->name, 'url' => $this->valkey->url(), 'dead' => $this->dead];
    }

    private function renderAnswer(): array
    {
        return $this->concurrently(1, ['do' => 'render'])[0];
    }

    private function render(): Exposition
    {
        return Exposition::parse($this->renderAnswer()['text']);
    }

    /** The master's children (its workers), by /proc. @return list<int> */
    private function workers(int $master): array
    {
        $children = [];
        foreach (glob('/proc/[0-9]*/stat') ?: [] as $f) {
            $stat = @file_get_contents($f);
            // pid (comm) state ppid ...: comm may hold spaces, so read after its last ')'.
            if ($stat !== false && preg_match('/\) \S+ (\d+) /', substr($stat, (int) strrpos($stat, ')')), $m) && (int) $m[1] === $master) {
                $children[] = (int) basename(dirname($f));
            }
        }
        sort($children);
        return $children;
    }

    private function waitForWorkers(int $master, callable $ok, string $what): void
    {
        $this->waitUntil(fn () => $ok($this->workers($master)), $what);
    }

    private function waitUntil(callable $ok, string $what): void
    {
        for ($i = 0; $i < 500; $i++) {
            if ($ok()) {
                return;
            }
            usleep(20_000);
        }
        $this->fail("$what: not within 10 s; " . @file_get_contents("{$this->dir}/fpm.log"));
    }

    private function waitForPort(): void
    {
        $this->waitUntil(function () {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
            }
            return (bool) $s;
        }, 'php-fpm listens again');
    }

    /** @param list<string> $more php-fpm's own arguments */
    private function startFpm(bool $perPool, array $more = [], int $statusPort = 0): int
    {
        $ext = (string) getenv('CHECKOUT_GUARD_EXT');
        $this->port = ValkeyProcess::freePort();
        // Telemetry to two sinks: a JSONL file (written) and a stream nobody answers
        // (every event dropped), so both counters have something to count.
        $pool = "[probe]\nlisten = 127.0.0.1:{$this->port}\npm = static\npm.max_children = 4\n"
            . "request_terminate_timeout = 20s\n"
            . "php_admin_value[error_log] = {$this->dir}/php-errors.log\nphp_admin_flag[log_errors] = on\n"
            . ($statusPort > 0 ? "pm.status_path = /status\npm.status_listen = 127.0.0.1:$statusPort\n" : '')
            . ($perPool ? "php_admin_value[extension] = $ext\n" : '');
        file_put_contents("{$this->dir}/php-fpm.conf", "[global]\nerror_log = {$this->dir}/fpm.log\n"
            . "pid = {$this->dir}/fpm.pid\ndaemonize = no\n$pool");
        $cmd = [self::fpmBinary(), '-n', '-R', '-F', '-y', "{$this->dir}/php-fpm.conf",
            '-d', 'checkout_guard.events.sinks=jsonl,stream', '-d', "checkout_guard.events.jsonl_path={$this->dir}/events.jsonl",
            '-d', "checkout_guard.events.stream_url={$this->dead}", ...$more];
        if (!$perPool) {
            array_push($cmd, '-d', "extension=$ext");
        }
        $this->fpm = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', "{$this->dir}/fpm.out", 'a'],
            2 => ['file', "{$this->dir}/fpm.out", 'a']], $pipes);
        $this->waitForPort();
        return proc_get_status($this->fpm)['pid'];
    }

    /** A FastCGI GET of `$script` with `$env`: its headers (lower-case names) and body. */
    private function fcgi(string $script, array $env, int $port): array
    {
        $cmd = ['env', "SCRIPT_FILENAME=$script", 'SCRIPT_NAME=/' . basename($script), 'REQUEST_METHOD=GET', 'QUERY_STRING='];
        foreach ($env as $k => $v) {
            $cmd[] = "$k=$v";
        }
        array_push($cmd, 'timeout', '20', 'cgi-fcgi', '-bind', '-connect', "127.0.0.1:$port");
        $p = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
        $out = (string) stream_get_contents($pipes[1]);
        stream_get_contents($pipes[2]);
        proc_close($p);
        $split = strpos($out, "\r\n\r\n");
        $this->assertNotFalse($split, "not a FastCGI answer: $out");
        $headers = [];
        foreach (explode("\r\n", substr($out, 0, $split)) as $line) {
            [$k, $v] = array_map('trim', explode(':', $line, 2)) + [1 => ''];
            $headers[strtolower($k)] = $v;
        }
        return ['headers' => $headers, 'body' => substr($out, $split + 4)];
    }

    private function command(array $query): array
    {
        return ['env', 'SCRIPT_FILENAME=' . dirname(__DIR__) . '/fixtures/metrics_probe.php', 'SCRIPT_NAME=/metrics_probe.php',
            'REQUEST_METHOD=GET', 'QUERY_STRING=' . http_build_query($query),
            'timeout', '20', 'cgi-fcgi', '-bind', '-connect', "127.0.0.1:{$this->port}"];
    }

    /** Sends `$n` requests at once; their decoded answers. */
    private function concurrently(int $n, array $query): array
    {
        $procs = [];
        $outs = [];
        for ($i = 0; $i < $n; $i++) {
            $procs[] = proc_open($this->command($query), [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $outs[] = $pipes;
        }
        $answers = [];
        foreach ($procs as $i => $p) {
            $out = (string) stream_get_contents($outs[$i][1]);
            $err = (string) stream_get_contents($outs[$i][2]);
            proc_close($p);
            $body = substr($out, (int) strpos($out, "\r\n\r\n") + 4);
            $answer = json_decode($body, true);
            $this->assertIsArray($answer, "not a probe's answer: $out $err " . @file_get_contents("{$this->dir}/fpm.log")
                . @file_get_contents("{$this->dir}/php-errors.log"));
            $answers[] = $answer;
        }
        return $answers;
    }
}
