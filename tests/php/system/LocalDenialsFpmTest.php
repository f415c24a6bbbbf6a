<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The local-denial table under a real php-fpm (4 static workers) of the test's own, with
 * checkout_guard loaded either globally (`-d extension=`: module start-up in the master,
 * before the fork) or per pool (`php_admin_value[extension]`: module start-up in each
 * worker, after the fork). Either way the pool's workers share one table: what one
 * worker learns from Valkey spares the others the round trip.
 *
 * Each round, one request learns that the bucket is empty (one call to Valkey), then four
 * requests held at a barrier (so that each is served by another worker) ask once each.
 * With one table they all find the fresh entry (0 calls); with a table per worker, the
 * three workers that did not learn it ask Valkey (3 calls). Rounds are 300 ms apart, longer
 * than an entry lives (250 ms), so a worker's own table never answers from a former round.
 */
final class LocalDenialsFpmTest extends OwnFpmTestCase
{
    private const ROUNDS = 4;
    private const MAX_ROUNDS = 12;

    protected static function dirPrefix(): string
    {
        return 'cg-ld-fpm-';
    }

    /** @return array<string, array{bool}> */
    public static function loadings(): array
    {
        return ['loaded per pool (php_admin_value[extension])' => [true], 'loaded globally (extension=)' => [false]];
    }

    /** @dataProvider loadings */
    #[\PHPUnit\Framework\Attributes\DataProvider('loadings')]
    public function testTheWorkersOfAPoolShareOneTable(bool $perPool): void
    {
        $master = $this->startFpm($perPool);
        $name = self::uniqueName('ld-fpm');
        $query = ['name' => $name, 'url' => $this->valkey->url()];

        // Drain the bucket (2 tokens, refill once in 1000 s): 2 allowed, then denied.
        $first = $this->request($query + ['n' => 3]);
        $this->assertSame(['allowed' => 2, 'global' => 1], $first['reasons']);
        $tables = [$first['pid'] => [$first['table'], $first['shared']]];

        // A round counts when the probes asked within 200 ms of the reply that taught the
        // entry (it lives 250 ms from the request): on a stalled machine (CI once saw 4,
        // 4, 4, 4, every probe and the learner's own worker asking) a round that came
        // late proves nothing, and more rounds are run, up to MAX_ROUNDS.
        $probeCalls = [];
        $gaps = [];
        for ($round = 0; $round < self::MAX_ROUNDS && count($probeCalls) < self::ROUNDS; $round++) {
            usleep(300_000);
            $learnt = $this->request($query + ['n' => 1]);
            $before = $this->commandCalls('evalsha');
            $barrier = "{$this->dir}/barrier-$round";
            touch($barrier);
            $answers = $this->concurrently(4, $query + ['n' => 1, 'barrier' => $barrier]);
            $calls = $this->commandCalls('evalsha') - $before;
            $pids = array_unique(array_column($answers, 'pid'));
            $this->assertCount(4, $pids, 'the barrier holds each probe in a worker of its own');
            foreach ($answers as $a) {
                $this->assertSame(['global' => 1], $a['reasons']);
                $tables[$a['pid']] = [$a['table'], $a['shared']];
            }
            $gap = (max(array_column($answers, 'asked_ns')) - $learnt['answered_ns']) / 1e6;
            $gaps[] = sprintf('%.0f ms', $gap);
            if ($gap < 200) {
                $probeCalls[] = $calls;
            }
        }
        fwrite(STDERR, sprintf(
            "\n%s: the probes' calls to Valkey per round in time: %s (a table per worker: 3 each); from the reply to the last probe: %s\n",
            $perPool ? 'per pool' : 'global',
            implode(', ', $probeCalls),
            implode(', ', $gaps)
        ));
        if ($probeCalls === []) {
            $this->markTestSkipped('no round in time on this machine (from the reply to the last probe: ' . implode(', ', $gaps) . ')');
        }
        // The best round shows whether the workers share what one learnt.
        $this->assertSame(0, min($probeCalls), 'calls per round: ' . implode(', ', $probeCalls));
        $this->assertLessThanOrEqual(count($probeCalls), array_sum($probeCalls));
        // And health() says so in every worker.
        $this->assertSame(
            array_fill_keys(array_keys($tables), [$perPool ? 'named' : 'inherited', true]),
            $tables,
            "health()'s local_denials_table and local_denials_shared per worker"
        );

        if ($perPool) {
            // The table is a file named after this master (pid and start time).
            $files = glob("/dev/shm/checkout-guard-denials.*.P$master.*") ?: [];
            $this->assertCount(1, $files, 'one table for the pool');
            $this->assertSame(0o600, fileperms($files[0]) & 0o777);
        }
    }

    private function startFpm(bool $perPool): int
    {
        $ext = (string) getenv('CHECKOUT_GUARD_EXT');
        $this->port = ValkeyProcess::freePort();
        file_put_contents("{$this->dir}/probe.php", <<<'PHP'
            <?php
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
            $l = new CheckoutGuard\RateLimiter([
                'name' => $_GET['name'],
                'url' => $_GET['url'],
                'global' => ['capacity' => 2, 'refill_per_second' => 0.001],
            ]);
            $reasons = [];
            $asked = hrtime(true);
            for ($i = 0; $i < (int) $_GET['n']; $i++) {
                $reasons[] = $l->acquire('s')->reason();
            }
            $answered = hrtime(true);
            $h = $l->health(false);
            echo json_encode([
                'pid' => getmypid(),
                'reasons' => array_count_values($reasons),
                'asked_ns' => $asked,
                'answered_ns' => $answered,
                'table' => $h['local_denials_table'] ?? null,
                'shared' => $h['local_denials_shared'] ?? null,
            ]);
            PHP);
        $pool = "[probe]\nlisten = 127.0.0.1:{$this->port}\npm = static\npm.max_children = 4\n"
            . "request_terminate_timeout = 20s\n"
            . ($perPool ? "php_admin_value[extension] = $ext\n" : '');
        file_put_contents("{$this->dir}/php-fpm.conf", "[global]\nerror_log = {$this->dir}/fpm.log\n"
            . "pid = {$this->dir}/fpm.pid\ndaemonize = no\n$pool");
        $cmd = [self::fpmBinary(), '-n', '-R', '-F', '-y', "{$this->dir}/php-fpm.conf"];
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

    /** Stops php-fpm (bounded); returns the master's pid, or 0 if none ran. */
    private function command(array $query): array
    {
        return ['env', "SCRIPT_FILENAME={$this->dir}/probe.php", 'SCRIPT_NAME=/probe.php', 'REQUEST_METHOD=GET',
            'QUERY_STRING=' . http_build_query($query), 'timeout', '20', 'cgi-fcgi', '-bind', '-connect', "127.0.0.1:{$this->port}"];
    }

    private function request(array $query): array
    {
        return $this->concurrently(1, $query)[0];
    }

    /** Sends `$n` requests at once; their decoded answers. */
    private function concurrently(int $n, array $query): array
    {
        $procs = [];
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
            $answers[] = $answer;
        }
        return $answers;
    }
}
