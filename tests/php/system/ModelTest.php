<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

require_once __DIR__ . '/../support/LimiterModel.php';
require_once __DIR__ . '/../support/ModelDriver.php';

/**
 * The model-based test of decisions where features meet: random sequences of operations
 * (acquires from three forked workers on two databases, hot marks set, removed and running
 * out, `auto_hot`, CLI `set`/`hot`/`unhot`, reset(), FLUSHALL, a Valkey restart; on about
 * half the seeds the `adaptive` option with feedback (429/503/200, with or without a
 * Retry-After), sleeps and waits for the budget's recovery in between) against
 * the real extension and this test's own Valkey; every decision must be the reference model's
 * (support/LimiterModel.php). A failure names its seed and the shortest failing sequence
 * the shrinker found.
 *
 * The second test runs the same driver against a managed service (ManagedServer): see
 * testRandomSequencesDecideAsTheModelSaysOnAManagedService.
 *
 * CI: seeds 1, 2, 3 and one random seed (1 with `adaptive` at its defaults, 2 and 3 with a
 * 2 s and 3 s recovery; the managed service's 69 with a 2 s recovery). Environment:
 *   MODEL_SEEDS=5,17        exactly these seeds (to replay a failure)
 *   MODEL_SECONDS=600       random seeds for that long (scripts/model-test.sh full)
 *   MODEL_LENGTH=120        operations per sequence (default: 80-150, from the seed)
 *   MODEL_SHRINK_SECONDS=40 time spent shrinking a failure (default 40, 60 in a long run)
 *   MODEL_WAIT_AFTER_SET=0  no pause after an accepted CLI `set` (default: 1.05 s without
 *                           acquires on that database, since docs/operations.md "Live limits" lets a
 *                           local denial use the limits it knew for up to a second)
 *   MODEL_OUTSIDE_MARK_WAIT=0  no pause before a mark set outside the workers (default:
 *                           CLI `hot` and SET by hand only 1.05 s after the shop's last
 *                           decision on that database, since a local denial may answer a
 *                           shop marked elsewhere as not hot for up to a second)
 *   MODEL_LOCAL_DENIALS=0   checkout_guard.local_denials off in the workers
 *   MODEL_IGNORE=isHotShop  decision fields not compared (to look past a known bug)
 *   MODEL_SUMMARY=FILE      a JSON summary for scripts/model-test.sh
 */
final class ModelTest extends OwnValkeyTestCase
{
    private const FIXED_SEEDS = [1, 2, 3];
    /**
     * The managed service's sequences in CI: these seeds, this many operations each. Both
     * have every kind of operation, the restart mid-sequence after all three workers
     * decided; 69: live limits changed 7 times, no auto_hot; 2066: auto_hot (2 s marks),
     * every lane, a static hot shop (generate($seed, 60, 1)).
     */
    private const MANAGED_SEEDS = [69, 2066];
    private const MANAGED_LENGTH = 60;

    /** 'model' or 'model (managed)': the prefix of this test's lines on stderr. */
    private string $label = 'model';

    private function log(string $line): void
    {
        fwrite(STDERR, preg_replace('/^model: /', $this->label . ': ', $line) . "\n");
    }

    public function testRandomSequencesDecideAsTheModelSays(): void
    {
        $seeds = self::seedsFromEnvironment();
        $seconds = (float) getenv('MODEL_SECONDS');
        if ($seeds === [] && $seconds <= 0) {
            $seeds = [...self::FIXED_SEEDS, random_int(4, PHP_INT_MAX >> 16)];
        }
        $this->runSequences(self::driver($this->valkey), $seeds, $seconds, 2, (string) getenv('MODEL_SUMMARY'), 'MODEL_SEEDS=%1$d scripts/model-test.sh short');
    }

    /**
     * The same sequences against a managed service (ManagedServer: TLS only, the `checkout`
     * ACL user of docs/operations.md, CONFIG/KEYS/... disabled, no SELECT, no FLUSHALL): engine lua, the
     * limiter and the CLI over TLS with the CA file, database 0 only, FLUSHALL done as SCAN +
     * UNLINK by that user, the restart on the same port. CI: seeds MANAGED_SEEDS with
     * MANAGED_LENGTH operations each; MODEL_SEEDS and MODEL_LENGTH replace them (a long run's
     * MODEL_SECONDS is for the test above only). Its summary: MODEL_SUMMARY's name with
     * "-managed" before ".json".
     */
    public function testRandomSequencesDecideAsTheModelSaysOnAManagedService(): void
    {
        if (!TlsServer::available()) {
            $this->markTestSkipped('redis-server (with TLS) is needed for the managed service: apt-get install redis-server (scripts/setup.sh)');
        }
        $seeds = self::seedsFromEnvironment() ?: self::MANAGED_SEEDS;
        $summary = getenv('MODEL_SUMMARY') ? preg_replace('/(\.json)?$/', '-managed.json', (string) getenv('MODEL_SUMMARY'), 1) : '';
        $this->label = 'model (managed)';
        $server = new ManagedServer();
        try {
            $this->runSequences(self::driver($server), $seeds, 0.0, 1, $summary,
                'MODEL_SEEDS=%1$d PHP_ONLY=1 scripts/test.sh --testsuite system --filter AManagedService', self::MANAGED_LENGTH);
        } finally {
            $server->stop();
        }
    }

    /** @return list<int> MODEL_SEEDS */
    private static function seedsFromEnvironment(): array
    {
        return array_map('intval', array_values(array_filter(array_map('trim', explode(',', (string) getenv('MODEL_SEEDS'))), 'strlen')));
    }

    private static function driver(ValkeyProcess|ManagedServer $server): ModelDriver
    {
        return new ModelDriver(
            $server,
            getenv('MODEL_WAIT_AFTER_SET') !== '0',
            getenv('MODEL_OUTSIDE_MARK_WAIT') !== '0',
            getenv('MODEL_LOCAL_DENIALS') !== '0',
            array_values(array_filter(explode(',', (string) getenv('MODEL_IGNORE')))),
        );
    }

    /**
     * Runs `$seeds` (then random seeds until `$seconds` passed), shrinks the first failure
     * (in a long run, each of the first three), writes the summary to `$summary` (when not
     * ''), fails with every failure's report. `$replay`: the replay command, %1$d the seed.
     *
     * @param list<int> $seeds
     */
    private function runSequences(ModelDriver $driver, array $seeds, float $seconds, int $databases, string $summary, string $replay, ?int $defaultLength = null): void
    {
        $length = getenv('MODEL_LENGTH') ? (int) getenv('MODEL_LENGTH') : $defaultLength;
        // CI: 40 s, so that a failing run still ends within about 90 s; a long run: 60 s.
        $shrinkSeconds = getenv('MODEL_SHRINK_SECONDS') !== false ? (float) getenv('MODEL_SHRINK_SECONDS') : ($seconds > 0 ? 60.0 : 40.0);
        $driver->start();
        $started = microtime(true);
        $results = [];
        $failures = [];
        try {
            $next = 0;
            while (true) {
                if ($next < count($seeds)) {
                    $seed = $seeds[$next++];
                } elseif ($seconds > 0 && microtime(true) - $started < $seconds) {
                    $seed = random_int(4, PHP_INT_MAX >> 16);
                } else {
                    break;
                }
                $seq = ModelDriver::generate($seed, $length, $databases);
                $res = $driver->run($seq);
                $results[] = ['seed' => $seed, 'ok' => $res['ok'], 'ops' => $res['checked'], 'of' => count($seq['ops'])];
                if ($res['ok']) {
                    $a = array_filter($driver->adaptStats);
                    $this->log(sprintf('model: seed %d: %d operations, passed (%.1f s)%s', $seed, $res['checked'], $res['seconds'],
                        isset($seq['options']['adaptive']) ? ', adaptive: ' . json_encode($a) : ''));
                    continue;
                }
                $f = $res['failure'];
                $this->log(sprintf(
                    "model: seed %d: FAILED at operation #%d of %d (%.1f s): %s\n  options: %s\n  operations:\n%s\n  first mismatch, at #%d %s:\n  %s",
                    $seed,
                    $f['index'],
                    count($seq['ops']),
                    $res['seconds'],
                    $f['sig'],
                    json_encode($seq['options']),
                    ModelDriver::describeSequence($seq, $f['index']),
                    $f['index'],
                    ModelDriver::describeOp($f['op']),
                    $f['message']
                ));
                $failures[] = ['seq' => $seq, 'failure' => $f];
            }

            // Shrink: the first failure gets the budget (in a long run, each of the first three).
            $reports = [];
            foreach ($failures as $k => $fail) {
                $budget = $seconds > 0 ? ($k < 3 ? $shrinkSeconds : 0.0) : ($k === 0 ? $shrinkSeconds : 0.0);
                $seq = $fail['seq'];
                $f = $fail['failure'];
                $seq['ops'] = array_slice($seq['ops'], 0, $f['index'] + 1);
                $runs = 0;
                if ($budget > 0) {
                    $this->log(sprintf('model: shrinking seed %d (%s) for up to %.0f s', $seq['seed'], $f['sig'], $budget));
                    [$seq, $f, $runs] = $driver->shrink($seq, $f, $budget);
                }
                $report = sprintf(
                    "seed %d (%s), replay: $replay\n  options: %s\n  %s sequence (%d operations%s):\n%s\n  mismatch at #%d %s:\n  %s",
                    $fail['seq']['seed'],
                    $f['sig'],
                    json_encode($seq['options']),
                    $runs > 0 ? 'shortest failing' : 'failing',
                    count($seq['ops']),
                    $runs > 0 ? sprintf(', shrunk from %d in %d runs', $fail['failure']['index'] + 1, $runs) : '',
                    ModelDriver::describeSequence($seq),
                    $f['index'],
                    ModelDriver::describeOp($f['op']),
                    $f['message']
                );
                $this->log("model: " . $report);
                $reports[] = $report;
            }
        } finally {
            $driver->stop();
            if ($summary !== '') {
                file_put_contents($summary, json_encode([
                    'seeds' => array_column($results, 'seed'),
                    'results' => $results,
                    'operations_checked' => $driver->opsChecked,
                    'passed' => count(array_filter($results, fn ($r) => $r['ok'])),
                    'failed' => count(array_filter($results, fn ($r) => !$r['ok'])),
                    'seconds' => round(microtime(true) - $started, 1),
                    'failures' => $reports ?? [],
                ], JSON_PRETTY_PRINT));
            }
        }
        $this->log(sprintf(
            'model: %d sequences, %d operations checked, %d passed, %d failed (%.1f s)',
            count($results),
            $driver->opsChecked,
            count($results) - count($failures),
            count($failures),
            microtime(true) - $started
        ));
        $this->assertNotEmpty($results);
        if ($reports !== []) {
            $this->fail(count($failures) . ' of ' . count($results) . " sequences failed:\n\n" . implode("\n\n", $reports));
        }
    }
}
