<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The hostile calls of HostileCallsTest that need a system around them: php-fpm (the stack
 * scripts/test.sh started) and valgrind (children run under memcheck: seconds each).
 */
final class HostileCallsSystemTest extends HostileCallsTestCase
{
    public function testUnderPhpFpmAMeasuredCallbackThatExitsSendsItsResponseAndNoWorkerDies(): void
    {
        $http = getenv('CHECKOUT_GUARD_TEST_HTTP');
        $events = getenv('CHECKOUT_GUARD_TEST_FPM_EVENTS');
        if ($http === false || $events === false) {
            $this->markTestSkipped('no php-fpm stack here: scripts/test.sh starts one');
        }
        $fpmLog = dirname($events) . '/php-fpm.log';
        clearstatcache();
        $offset = is_file($fpmLog) ? filesize($fpmLog) : 0;
        $tag = 'hostile-' . bin2hex(random_bytes(4));
        $noRedirects = ['follow_location' => 0];

        [$body, $headers] = HttpGet::fetch("$http/measure_exit.php?case=exit&tag=$tag", $noRedirects);
        $this->assertIsString($body, 'no response: the connection was reset');
        $this->assertStringContainsString(' 302 ', $headers[0] ?? '', $body);
        $this->assertContains('Location: /next.php', $headers);
        $sent = json_decode($body, true);
        $this->assertSame(['tag' => $tag, 'case' => 'exit'], ['tag' => $sent['tag'] ?? null, 'case' => $sent['case'] ?? null], $body);
        $pids = [$sent['pid']];

        [$body, $headers] = HttpGet::fetch("$http/measure_exit.php?case=fiber&tag=$tag", $noRedirects);
        $this->assertIsString($body, 'no response: the connection was reset');
        $this->assertStringContainsString(' 200 ', $headers[0] ?? '', $body);
        $sent = json_decode($body, true);
        $this->assertSame(true, $sent['after'] ?? null, $body);
        $pids[] = $sent['pid'];

        // Both calls recorded (written at the end of each request).
        $deadline = microtime(true) + 3;
        while (true) {
            $mine = [];
            foreach (file($events, FILE_IGNORE_NEW_LINES) as $line) {
                $e = json_decode($line, true);
                if (($e['tag'] ?? null) === $tag) {
                    $mine[] = [$e['api'], $e['error.type'] ?? null];
                }
            }
            if (count($mine) >= 2 || microtime(true) > $deadline) {
                break;
            }
            usleep(20_000);
        }
        sort($mine);
        $this->assertSame([['fiber', 'fiber_destroyed'], ['redirect', 'exit']], $mine);

        // The workers that served them are alive, and the master saw no child die.
        usleep(100_000);
        foreach (array_unique($pids) as $pid) {
            $this->assertFileExists("/proc/$pid", "worker $pid is gone");
        }
        clearstatcache();
        $log = (string) file_get_contents($fpmLog, false, null, $offset);
        $this->assertStringNotContainsString('signal', $log, 'php-fpm: "child N exited on signal"');
    }

    private const LIMITER = '$l = new \\CheckoutGuard\\RateLimiter(["url" => "redis://127.0.0.1:1", "on_unavailable" => "allow", "global" => ["capacity" => 5, "refill_per_second" => 1]]); ';

    public function testUnderValgrindTheHostileEndsMakeNoInvalidAccess(): void
    {
        $valgrind = trim((string) shell_exec('command -v valgrind'));
        if ($valgrind === '') {
            $this->markTestSkipped('valgrind is not installed (scripts/setup.sh installs it)');
        }
        $cases = [
            'exit' => [3, 'Telemetry::record("CheckoutStep", ["step" => "x"]); Telemetry::measure("redirect", function () { exit(3); });'],
            'fatal' => [255, 'Telemetry::measure("zoneA", fn () => trigger_error("boom", E_USER_ERROR));'],
            'fiber' => [0, '$f = new Fiber(fn () => Telemetry::measure("f", fn () => Fiber::suspend())); $f->start(); unset($f); gc_collect_cycles();'],
            'probe' => [4, 'Telemetry::measure("probe", fn () => new Probe(function () { exit(4); }));'],
            'agent' => [0, sprintf(self::AGENT, 'throw new \RuntimeException("agent broke");') . 'Telemetry::measure("zoneA", fn () => 200);'],
            // A shop id's __toString, called by PHP's weak-mode coercion (src/args.rs;
            // the child's file is strict: array_map's call is a weak one; call_user_func compiles to a direct call).
            'shop id fatal' => [255, self::LIMITER . 'array_map([$l, "acquire"], [new class () { public function __toString(): string { trigger_error("boom", E_USER_ERROR); return "x"; } }]);'],
            'shop id exit' => [6, self::LIMITER . 'array_map([$l, "acquire"], [new class () { public function __toString(): string { exit(6); } }]);'],
        ];
        foreach ($cases as $name => [$code, $script]) {
            $log = "$this->dir/valgrind-$name.log";
            $r = $this->child(
                $script,
                ['checkout_guard.events.sinks' => 'newrelic,jsonl'],
                [$valgrind, '--tool=memcheck', '--error-exitcode=99', '--errors-for-leak-kinds=none', "--log-file=$log"],
                ['USE_ZEND_ALLOC' => '0', 'ZEND_DONT_UNLOAD_MODULES' => '1']
            );
            // Valgrind's records are separated by lines holding only "==PID==".
            $records = preg_split('/^==\d+== ?$/m', (string) file_get_contents($log));
            $errors = preg_grep('/Invalid (read|write|free)|uninitialised|Mismatched free/', $records);
            $this->assertSame([], array_values(array_map('trim', $errors)), "valgrind, $name case");
            $this->assertEnded($code, $r);
        }
        $this->assertCount(5, array_filter($this->takeEvents(), fn ($e) => $e['eventType'] === 'ExternalApiCall'));
    }
}
