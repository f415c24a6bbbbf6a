<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The New Relic agent's cap under a real php-fpm (4 static workers) of the test's own,
 * checkout_guard loaded per pool or globally (as LocalDenialsFpmTest): the events the
 * workers hand to newrelic_record_custom_event() are counted per minute in the memory
 * they share (the local denial table's), so four workers recording 30 events each under a
 * cap of 50 (-d newrelic.custom_events.max_samples_stored=50: the agent's own setting,
 * read from php-fpm's configuration since no agent registers it here) show 120 handed and
 * 70 past the cap in any worker's Telemetry::stats(), and the warning is logged once for
 * the pool, not once per worker. The agent is a PHP function of the probe (no agent here).
 */
final class NewRelicCapFpmTest extends OwnFpmTestCase
{
    protected static function dirPrefix(): string
    {
        return 'cg-nrcap-fpm-';
    }

    /** @return array<string, array{bool}> */
    public static function loadings(): array
    {
        return ['loaded per pool (php_admin_value[extension])' => [true], 'loaded globally (extension=)' => [false]];
    }

    /** @dataProvider loadings */
    #[\PHPUnit\Framework\Attributes\DataProvider('loadings')]
    public function testTheWorkersOfAPoolCountTheAgentsMinuteTogether(bool $perPool): void
    {
        // The count is per wall-clock minute: a run whose events fell into two minutes is
        // run again on a fresh php-fpm (a fresh table), at most twice more.
        for ($try = 1; ; $try++) {
            $this->startFpm($perPool);
            $barrier = "{$this->dir}/barrier-$try";
            touch($barrier);
            $answers = $this->concurrently(4, ['record' => 30, 'barrier' => $barrier]);
            $this->assertCount(4, array_unique(array_column($answers, 'pid')), 'the barrier holds each request in a worker of its own');
            foreach ($answers as $a) {
                $this->assertSame(30, $a['sink']['written'], 'each worker handed its own 30');
            }
            $sink = $this->concurrently(1, [])[0]['sink'];
            $this->assertSame(120, $sink['this_minute']['handed'] + $sink['last_minute']['handed'], json_encode($sink));
            if ($sink['last_minute']['handed'] === 0 || $try === 3) {
                break;
            }
            $this->restart();
        }
        $this->assertSame(50, $sink['cap']);
        $this->assertSame(70, $sink['over_cap'], json_encode($sink));
        $this->assertSame(['handed' => 120, 'over_cap' => 70], array_diff_key($sink['this_minute'], ['start' => 1]));
        $log = (string) @file_get_contents("{$this->dir}/php-errors.log");
        $this->assertSame(1, substr_count($log, 'more than 50 events handed to the New Relic agent in the minute'), $log);
    }

    private function restart(): void
    {
        $master = $this->stopFpm();
        foreach (glob("/dev/shm/checkout-guard-denials.*.P$master.*") ?: [] as $f) {
            @unlink($f);
        }
        @unlink("{$this->dir}/php-errors.log");
    }

    private function startFpm(bool $perPool): int
    {
        $ext = (string) getenv('CHECKOUT_GUARD_EXT');
        $this->port = ValkeyProcess::freePort();
        file_put_contents("{$this->dir}/probe.php", <<<'PHP'
            <?php
            use CheckoutGuard\Telemetry;

            if (!function_exists('newrelic_record_custom_event')) {
                function newrelic_record_custom_event(string $name, array $attributes): void
                {
                }
            }
            if (isset($_GET['barrier'])) {
                // Arrive, then wait (at most 5 s) until all four have: four workers busy.
                $f = fopen($_GET['barrier'], 'c+');
                flock($f, LOCK_EX);
                $n = (int) stream_get_contents($f) + 1;
                ftruncate($f, 0);
                rewind($f);
                fwrite($f, (string) $n);
                flock($f, LOCK_UN);
                for ($i = 0; $i < 2500 && $n < 4; $i++) {
                    usleep(2000);
                    rewind($f);
                    $n = (int) stream_get_contents($f);
                }
                fclose($f);
            }
            for ($i = 0; $i < (int) ($_GET['record'] ?? 0); $i++) {
                Telemetry::record('CheckoutStep', ['i' => $i]);
            }
            Telemetry::flush();
            echo json_encode(['pid' => getmypid(), 'sink' => Telemetry::stats()['sinks']['newrelic'] ?? null]);
            PHP);
        $pool = "[probe]\nlisten = 127.0.0.1:{$this->port}\npm = static\npm.max_children = 4\n"
            . "request_terminate_timeout = 20s\n"
            . "php_admin_value[error_log] = {$this->dir}/php-errors.log\nphp_admin_flag[log_errors] = on\n"
            . ($perPool ? "php_admin_value[extension] = $ext\n" : '');
        file_put_contents("{$this->dir}/php-fpm.conf", "[global]\nerror_log = {$this->dir}/fpm.log\n"
            . "pid = {$this->dir}/fpm.pid\ndaemonize = no\n$pool");
        $cmd = [self::fpmBinary(), '-n', '-R', '-F', '-y', "{$this->dir}/php-fpm.conf",
            '-d', 'checkout_guard.events.sinks=newrelic', '-d', 'newrelic.custom_events.max_samples_stored=50'];
        if (!$perPool) {
            array_push($cmd, '-d', "extension=$ext");
        }
        $this->fpm = proc_open($cmd, [0 => ['file', '/dev/null', 'r'], 1 => ['file', "{$this->dir}/fpm.out", 'a'],
            2 => ['file', "{$this->dir}/fpm.out", 'a']], $pipes);
        for ($i = 0; $i < 250; $i++) {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
                return proc_get_status($this->fpm)['pid'];
            }
            usleep(20_000);
        }
        $this->fail('php-fpm did not start: ' . @file_get_contents("{$this->dir}/fpm.out") . @file_get_contents("{$this->dir}/fpm.log"));
    }

    private function command(array $query): array
    {
        return ['env', "SCRIPT_FILENAME={$this->dir}/probe.php", 'SCRIPT_NAME=/probe.php', 'REQUEST_METHOD=GET',
            'QUERY_STRING=' . http_build_query($query), 'timeout', '20', 'cgi-fcgi', '-bind', '-connect', "127.0.0.1:{$this->port}"];
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
            $this->assertIsArray($answer, "not a probe's answer: $out $err " . @file_get_contents("{$this->dir}/fpm.log"));
            $this->assertIsArray($answer['sink'], "no newrelic sink in the worker: $body");
            $answers[] = $answer;
        }
        return $answers;
    }
}
