<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The CI-sized limiter benchmark (scripts/bench-limiter.sh short). It fails only on
 * regressions too gross to be noise on a shared 2-core machine; the targets themselves
 * are measured by the full run (docs/results/benchmarks.md). Ratios compare cases of the same run.
 *
 * Why not "acquire() within 3x PING": on this VM any round trip's p50 is bimodal (about
 * 25 µs when the reply beats the client's CPU going idle, 140 µs when it does not), for
 * PING and for the hand-written evalSha alike, so a ratio to either swings between 1x and
 * 6x with no change in the code. The latency guard is therefore 3x the slower of the two
 * references; our own overhead is guarded by client CPU per decision, which the wake-up
 * latency does not touch.
 */
final class BenchmarkGuardTest extends TestCase
{
    private static array $results;

    public static function setUpBeforeClass(): void
    {
        [$rc, $out] = ProjectScript::run('bench-limiter.sh', 'short');
        if ($rc !== 0) {
            self::fail($out);
        }
        self::$results = ProjectScript::results('bench-limiter/results.json');
    }

    private static function case(string $name, int $procs): array
    {
        foreach (self::$results['cases'] as $c) {
            if ($c['case'] === $name && $c['procs'] === $procs) {
                return $c;
            }
        }
        self::fail("no $name N=$procs in the results");
    }

    /** `$field` of case `$name`, the best (lowest) of the run's rounds (N=1 and N=2). */
    private static function best(string $name, string $field): float
    {
        return min(array_map(static fn (int $n): float => (float) self::case($name, $n)[$field], [1, 2]));
    }

    /** `$field`, the best of the cases `$names` over the run's rounds (N=1 and N=2). */
    private static function bestOf(array $names, string $field): float
    {
        return min(array_map(static fn (string $name): float => self::best($name, $field), $names));
    }

    /**
     * Asserts the best client CPU of the cases `$ours` is below `$times` x the best of the
     * cases `$byHand`. When the short run's rounds miss the bound, the two sides are run
     * again (up to twice more, those cases only: BENCH_CASES) and each side is its best
     * over every round: on the 2 cores both rounds of each case can land in a busy moment
     * (a CI run had acquire at 19.56 µs in all four rounds against a by-hand best of 8.58
     * µs; the same build measures 10-12 µs against 8-17 µs), while a real regression
     * raises our side's floor in every round and misses all three runs.
     */
    private function assertClientCpuBelow(array $ours, array $byHand, float $times, string $message): void
    {
        $rounds = ['ours' => [self::bestOf($ours, 'client_cpu_us')], 'by_hand' => [self::bestOf($byHand, 'client_cpu_us')]];
        for ($extra = 0; min($rounds['ours']) >= $times * min($rounds['by_hand']) && $extra < 2; $extra++) {
            [$rc, $out] = ProjectScript::run('bench-limiter.sh', 'short', ['BENCH_CASES' => implode(',', array_merge($ours, $byHand))]);
            $this->assertSame(0, $rc, $out);
            $again = ProjectScript::results('bench-limiter/results.json');
            foreach (['ours' => $ours, 'by_hand' => $byHand] as $side => $names) {
                $cpu = array_column(array_filter($again['cases'], static fn (array $c): bool => in_array($c['case'], $names, true)), 'client_cpu_us');
                $this->assertNotEmpty($cpu, 'the extra run measured ' . implode(',', $names));
                $rounds[$side][] = min($cpu);
            }
            fprintf(STDERR, "%s: best client CPU per run, ours %s µs, by hand %s µs\n", $message, implode(', ', $rounds['ours']), implode(', ', $rounds['by_hand']));
        }
        $this->assertLessThan($times * min($rounds['by_hand']), min($rounds['ours']), $message);
    }

    /**
     * Each figure is the best of the run's rounds (N=1 and N=2): a single round of either
     * side slowed by other work on the 2 cores failed the guard on correct builds (client
     * CPU 19.76 µs against a by-hand round that caught a quiet moment at 9.78 µs).
     */
    public function testAcquireCostsAboutWhatTheSameScriptByHandCosts(): void
    {
        foreach ([1, 2] as $n) {
            $acquire = self::case('acquire', $n);
            $this->assertSame($acquire['decisions'], $acquire['allowed'], 'every decision allowed: the bucket is unlimited');
            $this->assertEqualsWithDelta(1.0, $acquire['valkey_calls_per_decision'], 0.01, 'one script call per decision');
        }
        $floor = max(self::best('evalsha', 'p50_us'), self::best('ping', 'p50_us'));
        $this->assertLessThan(3 * $floor, self::best('acquire', 'p50_us'), 'acquire() p50 vs the slower of PING and evalSha by hand');
        // Client CPU is the same code over TCP and a Unix socket: the best of both transports'
        // rounds on each side (4 rounds each), since other work on the 2 cores once
        // inflated both rounds of the TCP case alone (65 and 44 µs against 15 µs by hand,
        // with acquire_unix at 13 µs in the same run). Extra work per decision shows in all four.
        $this->assertClientCpuBelow(['acquire', 'acquire_unix'], ['evalsha', 'evalsha_unix'], 2.0, 'client CPU per decision vs evalSha by hand');
    }

    /**
     * The native module's cost in Valkey (commandstats µs per CG.DECIDE) against the
     * script's, as a guard against a gross regression only; the targets (1.5 µs and 2.5 µs,
     * 4x below the script) are the benchmark's printed numbers (docs/module.md).
     *
     * Each side is its best of the run's rounds (N=1 and N=2), so one round slowed by
     * other work on the 2 cores does not decide: busy, auto_hot's ratio measured 2.3x-4.6x
     * and a single-round 2.5x guard failed on a correct build. A regression to `RM_Call`
     * is caught without timing by ModuleKeyApiTest (no command runs for a decision); the
     * bounds here (2x global, 1.5x auto_hot) are crossed only when the module costs about
     * what the script costs.
     */
    public function testTheModuleCostsValkeyAFractionOfTheScript(): void
    {
        foreach ([['acquire', 'acquire_module', 2.0], ['acquire_auto_hot', 'acquire_auto_hot_module', 1.5]] as [$script, $module, $times]) {
            $s = self::best($script, 'valkey_usec_per_call');
            $m = self::best($module, 'valkey_usec_per_call');
            $this->assertLessThan($s / $times, $m, sprintf('%s vs %s, best µs per call in Valkey: %.2f vs %.2f (%.1fx; the guard wants %.1fx)', $module, $script, $m, $s, $s / $m, $times));
        }
        // Client CPU: the best of the TCP and Unix-socket rounds on each side, as in the
        // script's guard: a fresh-clone run with two builds on the 2 cores had both TCP rounds
        // of acquire_module at 43.7 and 33.0 µs against 6.4 µs by hand, while
        // acquire_module_unix measured 6.1 µs in the same run.
        $this->assertClientCpuBelow(['acquire_module', 'acquire_module_unix'], ['module_by_hand', 'module_by_hand_unix'], 2.0, 'client CPU per decision vs CG.DECIDE by hand');
    }

    /**
     * What a decision sends, in bytes Valkey read per decision (`total_net_input_bytes`;
     * no timing in it, so a busy machine cannot fail it): a call sends its inputs up to the
     * last group it needs (issue 43, decide::FORMS). The global bucket's call is 4 keys and 8
     * arguments and the contract's mark, about 280 bytes with the benchmark's names; every
     * input (13 keys, 27 arguments) was about 610. A hot shop's adds its 2 buckets (about
     * 445; 630 before).
     */
    public function testADecisionSendsOnlyTheInputsItUses(): void
    {
        foreach ([['acquire', 400], ['acquire_module', 360], ['acquire_hot', 540], ['acquire_hot_module', 500]] as [$name, $bound]) {
            $this->assertLessThan($bound, self::case($name, 1)['request_bytes'], "$name: bytes sent per decision");
        }
    }

    /**
     * The decision script against its floor script (TIME, one MGET, one SET PX per bucket:
     * bench/limiter.php decision_cost), each the best of the run's rounds, as a guard
     * against a gross regression only (the target, 1.5x, is the benchmark's printed row):
     * measured 1.1-1.8x; the bound, 3x, leaves room for a busy machine's rounds and is
     * crossed by a script that costs about twice what it does.
     */
    public function testTheDecisionScriptStaysNearItsFloor(): void
    {
        foreach (['global', 'hot', 'global_endpoint', 'hot_priority'] as $name) {
            $c = self::$results['decision_cost']['cases'][$name];
            $this->assertLessThan(3.0 * $c['floor_us'], $c['script_us'], sprintf('%s: script %.2f µs, floor %.2f µs', $name, $c['script_us'], $c['floor_us']));
        }
    }

    public function testSymfonyRateLimiterIsSlower(): void
    {
        $this->assertGreaterThan(self::case('acquire', 1)['p50_us'], self::case('symfony', 1)['p50_us']);
    }

    public function testTheFloodStaysInTheWorkers(): void
    {
        $flood = array_column(self::$results['flood'], null, 'local_denials');
        [$on, $off] = [$flood[true], $flood[false]];
        $this->assertLessThan(0.2, $on['round_trips_per_denied']);
        $this->assertEqualsWithDelta(1.0, $off['round_trips_per_denied'], 0.05, 'switched off, every denial asks Valkey');
        $this->assertLessThan(20.0, $on['back_to_back_p50_us']);
        foreach ([$on, $off] as $f) {
            $this->assertLessThanOrEqual($f['admitted_limit'], $f['admitted'], 'never above capacity + cap * t');
            $this->assertGreaterThanOrEqual(0.9 * $f['admitted_limit'], $f['admitted']);
            $this->assertSame($f['ordinary_requests'], $f['ordinary_allowed'], 'ordinary shops unaffected');
        }
    }

    public function testSaturationAdmitsCapacityPlusRateTimesTimeAndNeverMore(): void
    {
        $a = self::$results['accuracy'];
        $this->assertLessThanOrEqual($a['limit'], $a['admitted']);
        $this->assertGreaterThanOrEqual(0.95 * $a['limit'], $a['admitted']);
    }
}
