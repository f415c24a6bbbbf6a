<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The New Relic agent's cap on custom events, made visible (runtime's telemetry/agent_cap.rs):
 * the events the newrelic sink handed to newrelic_record_custom_event() are counted per
 * wall-clock minute across the processes sharing the local denial table (here: a child PHP
 * process and the workers it forks with pcntl_fork after module start-up, as a php-fpm
 * master's workers share it), with the cap in force and what went past it, in
 * Telemetry::stats()['sinks']['newrelic'] and phpinfo(), and said once a minute.
 *
 * No agent here: the child defines newrelic_record_custom_event() in PHP (as the project's
 * New Relic stand-in does). The cap is then read as the agent would read its setting: the
 * registered INI entry when the agent's extension is loaded, else the php.ini / -d value
 * (get_cfg_var), else New Relic's default 30,000; no function, no cap (null). So the test
 * sets the real setting, -d newrelic.custom_events.max_samples_stored=50, and no knob of
 * checkout_guard's own.
 */
final class NewRelicCapTest extends HostileCallsTestCase
{
    private const CAP_SETTING = 'newrelic.custom_events.max_samples_stored';

    /** Prints the newrelic sink's stats and the two phpinfo() rows, as JSON. */
    private const REPORT = '
        ob_start();
        phpinfo(INFO_MODULES);
        $rows = [];
        foreach (explode("\n", ob_get_clean()) as $line) {
            if (preg_match("/^(New Relic agent\'s cap|events handed to the New Relic agent) => (.*)$/", $line, $m)) {
                $rows[$m[1]] = $m[2];
            }
        }
        $health = (new CheckoutGuard\RateLimiter(["name" => "cap-health", "url" => "redis://127.0.0.1:1",
            "global" => ["capacity" => 1, "refill_per_second" => 1]]))->health()["newrelic_agent"];
        echo json_encode(["sink" => Telemetry::stats()["sinks"]["newrelic"], "phpinfo" => $rows, "health" => $health]);
    ';

    /**
     * Four workers (forked after module start-up) each record 30 events and flush: 120
     * handed to the agent in one minute, 70 past a cap of 50, counted exactly across the
     * workers, and said once.
     */
    public function testWorkersPastTheCapAreCountedTogetherAndSaidOnce(): void
    {
        $script = sprintf(self::AGENT, '') . '
            $pids = [];
            for ($w = 0; $w < 4; $w++) {
                $pid = pcntl_fork();
                if ($pid === 0) {
                    for ($i = 0; $i < 30; $i++) {
                        Telemetry::record("CheckoutStep", ["worker" => $w, "i" => $i]);
                    }
                    Telemetry::flush();
                    exit(0);
                }
                $pids[] = $pid;
            }
            foreach ($pids as $pid) {
                pcntl_waitpid($pid, $status);
                if (!pcntl_wifexited($status) || pcntl_wexitstatus($status) !== 0) {
                    echo "worker failed: $status";
                    exit(1);
                }
            }
        ' . self::REPORT;
        $ini = ['checkout_guard.events.sinks' => 'newrelic', self::CAP_SETTING => '50'];
        // The count is per wall-clock minute: a run that crossed a minute's end (its
        // events split between two minutes) is run again, at most twice more (a run takes
        // well under a minute, so the next one does not cross).
        for ($try = 1; ; $try++) {
            $r = $this->child($script, $ini);
            $this->assertEnded(0, $r);
            $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
            $sink = $out['sink'];
            $this->assertSame(120, $sink['this_minute']['handed'] + $sink['last_minute']['handed'], $r['out']);
            if ($sink['last_minute']['handed'] === 0 || $try === 3) {
                break;
            }
        }
        // written is this process's (the workers wrote); the minute's count is theirs.
        $this->assertSame(0, $sink['written']);
        $this->assertSame(50, $sink['cap']);
        $this->assertSame(70, $sink['over_cap'], $r['out']);
        // health() says the same (the agent's counts are the process's, not a limiter's).
        $this->assertSame(
            array_intersect_key($sink, array_flip(['cap', 'over_cap', 'this_minute', 'last_minute'])),
            $out['health']
        );
        $this->assertSame(120, $sink['this_minute']['handed']);
        $this->assertSame(70, $sink['this_minute']['over_cap']);
        $this->assertSame(0, $sink['this_minute']['start'] % 60);
        $this->assertSame(['handed' => 0, 'over_cap' => 0], array_diff_key($sink['last_minute'], ['start' => 1]));
        $this->assertSame($sink['this_minute']['start'] - 60, $sink['last_minute']['start']);
        // Said once for the minute, by whichever worker went past the cap.
        $this->assertSame(1, substr_count($r['err'], 'events handed to the New Relic agent in the minute'), $r['err']);
        $this->assertStringContainsString('more than 50 events handed to the New Relic agent', $r['err']);
        $this->assertStringContainsString('(newrelic.custom_events.max_samples_stored = 50)', $r['err']);
        $this->assertSame([
            "New Relic agent's cap" => '50 custom events a minute (newrelic.custom_events.max_samples_stored)',
            'events handed to the New Relic agent' => 'last minute: 0 (0 past the cap); this minute: 120; past the cap in total: 70',
        ], $out['phpinfo']);
    }

    /** Under the cap: counted, nothing past it, nothing said. */
    public function testUnderTheCapNothingIsPastItAndNothingIsSaid(): void
    {
        $r = $this->child(sprintf(self::AGENT, '') . '
            for ($i = 0; $i < 50; $i++) {
                Telemetry::record("CheckoutStep", ["i" => $i]);
            }
            Telemetry::flush();
        ' . self::REPORT, ['checkout_guard.events.sinks' => 'newrelic', self::CAP_SETTING => '50']);
        $this->assertEnded(0, $r);
        $this->assertSame('', $r['err']);
        $sink = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR)['sink'];
        $this->assertSame([50, 0], [$sink['this_minute']['handed'] + $sink['last_minute']['handed'], $sink['over_cap']]);
    }

    /**
     * The cap as the agent reads its setting: unset is New Relic's default, a value above
     * 100,000 is 100,000, a negative or non-numeric one the default; without
     * newrelic_record_custom_event() (no agent) there is no cap, and nothing is handed.
     */
    public function testTheCapInForceIsTheAgentsSettingAndNullWithoutTheAgent(): void
    {
        foreach ([[null, 30000], ['250000', 100000], ['-1', 30000], ['many', 30000], ['0', 0]] as [$setting, $cap]) {
            $ini = ['checkout_guard.events.sinks' => 'newrelic'];
            if ($setting !== null) {
                $ini[self::CAP_SETTING] = $setting;
            }
            $r = $this->child(sprintf(self::AGENT, '') . self::REPORT, $ini);
            $this->assertEnded(0, $r);
            $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
            $this->assertSame($cap, $out['sink']['cap'], "setting $setting");
            $this->assertStringStartsWith("$cap custom events a minute", $out['phpinfo']["New Relic agent's cap"]);
        }

        $r = $this->child('
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            Telemetry::flush();
        ' . self::REPORT, ['checkout_guard.events.sinks' => 'newrelic', self::CAP_SETTING => '50']);
        $this->assertEnded(0, $r);
        $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
        $this->assertNull($out['sink']['cap']);
        $this->assertSame([0, 1, 0], [$out['sink']['written'], $out['sink']['dropped'], $out['sink']['over_cap']]);
        $this->assertSame(0, $out['sink']['this_minute']['handed'] + $out['sink']['last_minute']['handed']);
        $this->assertStringStartsWith('none: newrelic_record_custom_event() is not defined', $out['phpinfo']["New Relic agent's cap"]);
    }
}
