<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Every call the extension makes into PHP is hostile (src/php_call.rs): a measured
 * callback, the status probes on what it returned or threw, the New Relic agent's
 * newrelic_record_custom_event(). Whatever they do (exit, die, a fatal error, a fiber
 * destroyed while suspended inside measure(), throw, return garbage) the process ends the
 * way PHP would end it without checkout_guard, never with a signal, and the measured call
 * is recorded. Each case runs in a child PHP process (exit codes, fatal errors), with
 * telemetry written to a JSONL file of its own (support/HostileCallsTestCase.php). The
 * php-fpm case and the valgrind case are in HostileCallsSystemTest.
 */
final class HostileCallsTest extends HostileCallsTestCase
{
    public function testExitOrDieInsideMeasureEndsTheProcessWithItsStatusAndEveryEventIsWritten(): void
    {
        $r = $this->child('
            register_shutdown_function(fn () => Telemetry::record("CheckoutStep", ["step" => "shutdown"]));
            Telemetry::record("CheckoutStep", ["step" => "before"]);
            Telemetry::measure("zoneA", fn () => 200);
            Telemetry::measure("redirect", function () {
                echo "body;";
                exit(3);
            }, ["shop.id" => "s1"]);
            echo "not reached";
        ');
        $this->assertEnded(3, $r);
        $this->assertSame('body;', $r['out']);
        $this->assertSame('', $r['err']);
        $events = $this->takeEvents();
        $this->assertSame([
            ['CheckoutStep', 'before', null],
            ['ExternalApiCall', 'zoneA', null],
            ['ExternalApiCall', 'redirect', 'exit'],
            ['CheckoutStep', 'shutdown', null],
        ], self::summary($events));
        $this->assertSame([0, 's1'], [$events[2]['http.response.status_code'], $events[2]['shop.id']]);
        $this->assertLessThan(1000.0, $events[2]['duration.ms']);

        $r = $this->child('Telemetry::measure("redirect", fn () => die("x")); echo "not reached";');
        $this->assertEnded(0, $r);
        $this->assertSame('x', $r['out']);
        $this->assertSame([['ExternalApiCall', 'redirect', 'exit']], self::summary($this->takeEvents()));

        // Nested measured calls, and a measured call in a running fiber: every one is
        // recorded, the exit status is the callee's.
        $r = $this->child('
            Telemetry::measure("outer", fn () => Telemetry::measure("inner", function () { exit(6); }));
            echo "not reached";
        ');
        $this->assertEnded(6, $r);
        $this->assertSame([['ExternalApiCall', 'inner', 'exit'], ['ExternalApiCall', 'outer', 'exit']], self::summary($this->takeEvents()));

        $r = $this->child('
            $f = new Fiber(fn () => Telemetry::measure("in-fiber", function () { exit(8); }));
            $f->start();
            echo "not reached";
        ');
        $this->assertEnded(8, $r);
        $this->assertSame('', $r['out'] . $r['err']);
        $this->assertSame([['ExternalApiCall', 'in-fiber', 'exit']], self::summary($this->takeEvents()));
    }

    public function testAFatalErrorInsideMeasureStaysPhpsOwnFatalError(): void
    {
        // Bounded at 100 MB, should the limit not hold.
        $r = $this->child('
            Telemetry::record("CheckoutStep", ["step" => "before"]);
            Telemetry::measure("export", function () {
                $rows = [];
                for ($i = 0; $i < 1000; $i++) {
                    $rows[] = str_repeat("x", 100000);
                }
                return 200;
            });
            echo "not reached";
        ', ['memory_limit' => '16M']);
        $this->assertEnded(255, $r);
        $this->assertSame('', $r['out']);
        $this->assertStringContainsString('Fatal error: Allowed memory size of 16777216 bytes exhausted', $r['err']);
        $events = $this->takeEvents();
        $this->assertSame([['CheckoutStep', 'before', null], ['ExternalApiCall', 'export', 'fatal_error']], self::summary($events));
        $this->assertSame(0, $events[1]['http.response.status_code']);

        // The same from the status probe of what the call returned.
        $r = $this->child('
            Telemetry::measure("export", fn () => new Probe(function () {
                $rows = [];
                for ($i = 0; $i < 1000; $i++) {
                    $rows[] = str_repeat("x", 100000);
                }
                return 200;
            }));
            echo "not reached";
        ', ['memory_limit' => '16M']);
        $this->assertEnded(255, $r);
        $this->assertSame('', $r['out']);
        $this->assertStringContainsString('Allowed memory size of 16777216 bytes exhausted', $r['err']);
        $this->assertSame([['ExternalApiCall', 'export', 'fatal_error']], self::summary($this->takeEvents()));

        // Any other fatal error.
        $r = $this->child('Telemetry::measure("zoneA", fn () => trigger_error("boom", E_USER_ERROR)); echo "not reached";');
        $this->assertEnded(255, $r);
        $this->assertStringContainsString('Fatal error: boom', $r['err']);
        $this->assertSame([['ExternalApiCall', 'zoneA', 'fatal_error']], self::summary($this->takeEvents()));
    }

    public function testAFiberDestroyedWhileSuspendedInsideMeasureLeavesTheProcessRunning(): void
    {
        $r = $this->child('
            $resumed = new Fiber(fn () => Telemetry::measure("resumed", fn () => "got " . Fiber::suspend("waiting")));
            echo $resumed->start(), ";";
            $resumed->resume("reply");
            echo $resumed->getReturn(), ";";

            $destroyed = new Fiber(function () {
                Telemetry::measure("destroyed", function () {
                    Fiber::suspend();
                    return 200;
                });
                echo "not reached";
            });
            $destroyed->start();
            unset($destroyed);
            gc_collect_cycles();

            // Suspended in the status probe of what the call returned.
            $probe = new Fiber(fn () => Telemetry::measure("probe", fn () => new Probe(function () {
                Fiber::suspend();
                return 200;
            })));
            $probe->start();
            unset($probe);
            gc_collect_cycles();

            // Still suspended when the script ends: destroyed at shutdown.
            $left = new Fiber(fn () => Telemetry::measure("left", fn () => Fiber::suspend()));
            $left->start();
            echo "after";
        ');
        $this->assertEnded(0, $r);
        $this->assertSame('waiting;got reply;after', $r['out']);
        $this->assertSame('', $r['err']);
        $events = $this->takeEvents();
        $this->assertSame([
            ['ExternalApiCall', 'resumed', null],
            ['ExternalApiCall', 'destroyed', 'fiber_destroyed'],
            ['ExternalApiCall', 'probe', 'fiber_destroyed'],
            ['ExternalApiCall', 'left', 'fiber_destroyed'],
        ], self::summary($events));
        $this->assertSame([0, 0, 0, 0], array_column($events, 'http.response.status_code'));
    }

    public function testStatusProbesThatExitThrowOrReturnGarbage(): void
    {
        // getStatusCode() of the returned object exits.
        $r = $this->child('
            Telemetry::measure("probe", fn () => new Probe(function () {
                echo "probe;";
                exit(4);
            }));
            echo "not reached";
        ');
        $this->assertEnded(4, $r);
        $this->assertSame('probe;', $r['out']);
        $events = $this->takeEvents();
        $this->assertSame([['ExternalApiCall', 'probe', 'exit']], self::summary($events));
        $this->assertSame(0, $events[0]['http.response.status_code']);

        // getResponse() of the thrown exception exits: nothing catches the exception.
        $r = $this->child('
            try {
                Telemetry::measure("payment", function () {
                    throw new ProbeFailure(function () { exit(5); });
                });
            } catch (\Throwable $t) {
                echo "caught ", get_class($t);
            }
            echo "not reached";
        ');
        $this->assertEnded(5, $r);
        $this->assertSame('', $r['out'] . $r['err']);
        $this->assertSame([['ExternalApiCall', 'payment', 'exit']], self::summary($this->takeEvents()));

        // getResponse() returns a response whose getStatusCode() exits.
        $r = $this->child('
            try {
                Telemetry::measure("payment", function () {
                    throw new ProbeFailure(fn () => new Probe(function () { exit(7); }));
                });
            } catch (\Throwable $t) {
                echo "caught ", get_class($t);
            }
            echo "not reached";
        ');
        $this->assertEnded(7, $r);
        $this->assertSame('', $r['out'] . $r['err']);
        $this->assertSame([['ExternalApiCall', 'payment', 'exit']], self::summary($this->takeEvents()));

        // A probe that throws or returns what is not a status is swallowed: status 0, the
        // call's own result returned (or its own exception rethrown, the same object).
        $r = $this->child('
            $same = [];
            $returned = [
                "throws" => new Probe(function () { throw new \RuntimeException("probe broke"); }),
                "string" => new Probe(fn () => "503"),
                "array" => new Probe(fn () => [503]),
                "float" => new Probe(fn () => 503.0),
                "object" => new Probe(fn () => new \stdClass()),
                "null" => new Probe(fn () => null),
            ];
            foreach ($returned as $api => $object) {
                $same[$api] = Telemetry::measure($api, fn () => $object) === $object;
            }
            $thrown = new ProbeFailure(function () { throw new \LogicException("probe broke"); });
            try {
                Telemetry::measure("exception", function () use ($thrown) { throw $thrown; });
            } catch (\Throwable $t) {
                $same["exception"] = $t === $thrown && $t->getPrevious() === null;
            }
            echo json_encode($same);
        ');
        $this->assertEnded(0, $r);
        $this->assertSame('', $r['err']);
        $this->assertSame(
            ['throws' => true, 'string' => true, 'array' => true, 'float' => true, 'object' => true, 'null' => true, 'exception' => true],
            json_decode($r['out'], true)
        );
        $events = $this->takeEvents();
        $this->assertSame(['throws', 'string', 'array', 'float', 'object', 'null', 'exception'], array_column($events, 'api'));
        $this->assertSame([0, 0, 0, 0, 0, 0, 0], array_column($events, 'http.response.status_code'));
        $this->assertSame([null, null, null, null, null, null, 'ProbeFailure'], array_map(fn ($e) => $e['error.type'] ?? null, $events));
    }

    public function testANewRelicAgentThatThrowsOrExitsAtRequestEndNeverReachesTheCheckout(): void
    {
        $script = '
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            Telemetry::measure("zoneA", fn () => 200);
            echo "done;";
        ';
        $ini = ['checkout_guard.events.sinks' => 'newrelic,jsonl'];
        $r = $this->child(sprintf(self::AGENT, 'throw new \RuntimeException("agent broke");') . $script, $ini);
        $this->assertEnded(0, $r);
        $this->assertSame('done;', $r['out']);
        $this->assertStringNotContainsString('Fatal', $r['err']);
        $this->assertStringNotContainsString('Uncaught', $r['err']);
        $this->assertOnlySinkWarnings($r['err']);
        $this->assertSame([['CheckoutStep', 'pay', null], ['ExternalApiCall', 'zoneA', null]], self::summary($this->takeEvents()), 'the next sink still written');

        // The exit status is the script's own, not the agent's.
        $r = $this->child(sprintf(self::AGENT, 'echo "agent;"; exit(9);') . $script, $ini);
        $this->assertEnded(0, $r);
        $this->assertStringStartsWith('done;', $r['out']);
        $this->assertOnlySinkWarnings($r['err']);
        $this->assertSame([['CheckoutStep', 'pay', null], ['ExternalApiCall', 'zoneA', null]], self::summary($this->takeEvents()));

        $r = $this->child(sprintf(self::AGENT, 'throw new \RuntimeException("agent broke");') . $script . 'exit(4);', $ini);
        $this->assertEnded(4, $r);
        $this->assertOnlySinkWarnings($r['err']);

        // A fatal error in the agent at request end stays a fatal error: exit 255.
        $r = $this->child(sprintf(self::AGENT, '$x = []; for ($i = 0; $i < 1000; $i++) { $x[] = str_repeat("x", 100000); }') . $script, $ini + ['memory_limit' => '16M']);
        $this->assertEnded(255, $r);
        $this->assertStringContainsString('Allowed memory size', $r['out'] . $r['err']);
    }

    public function testANewRelicAgentThatThrowsDuringARequestIsCountedNeverSurfaced(): void
    {
        $agent = sprintf(self::AGENT, 'throw new \RuntimeException("agent broke");');
        // A buffer of one event: every record() and measure() writes to the sinks at once.
        $r = $this->child($agent . '
            $results = [];
            for ($i = 0; $i < 3; $i++) {
                $results[] = Telemetry::measure("zoneA", fn () => 200 + $i);
            }
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            echo json_encode(["results" => $results, "sinks" => Telemetry::stats()["sinks"]]);
        ', ['checkout_guard.events.sinks' => 'newrelic,jsonl', 'checkout_guard.events.buffer_size' => '1']);
        $this->assertEnded(0, $r);
        $this->assertOnlySinkWarnings($r['err']);
        $out = json_decode($r['out'], true);
        $this->assertSame([200, 201, 202], $out['results']);
        $newRelic = $out['sinks']['newrelic'];
        $this->assertSame([0, 4, 4], [$newRelic['written'], $newRelic['dropped'], $newRelic['failures'] ?? null], $r['out']);
        $this->assertStringContainsString('threw RuntimeException', $newRelic['last_error']);
        // Four failures of one cause: said once (warn_log), naming the cause and what to check.
        $this->assertSame(1, substr_count($r['err'], "telemetry sink 'newrelic' cannot write (newrelic_record_custom_event() threw RuntimeException)"), $r['err']);
        $this->assertStringContainsString('check the New Relic PHP agent', $r['err']);
        $this->assertSame([4, 0, 0], [$out['sinks']['jsonl']['written'], $out['sinks']['jsonl']['dropped'], $out['sinks']['jsonl']['failures'] ?? null]);
        $this->assertCount(4, $this->takeEvents());

        // Explicit flushes: one failure per batch, every event of it dropped.
        $r = $this->child($agent . '
            for ($i = 0; $i < 3; $i++) {
                Telemetry::measure("zoneA", fn () => 200);
            }
            $first = Telemetry::flush();
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            $second = Telemetry::flush();
            echo json_encode(["flushed" => [$first, $second], "sinks" => Telemetry::stats()["sinks"]]);
        ', ['checkout_guard.events.sinks' => 'newrelic,jsonl']);
        $this->assertEnded(0, $r);
        $this->assertOnlySinkWarnings($r['err']);
        $out = json_decode($r['out'], true);
        $this->assertSame([3, 1], $out['flushed'], 'written by the JSONL sink');
        $newRelic = $out['sinks']['newrelic'];
        $this->assertSame([0, 4, 2], [$newRelic['written'], $newRelic['dropped'], $newRelic['failures'] ?? null], $r['out']);
        $this->assertCount(4, $this->takeEvents());
    }

    public function testAttributesTheRecorderOwnsAreDroppedCountedAndSaidOnceOutsideErrorHandlers(): void
    {
        $script = '
            $handled = [];
            set_error_handler(function (int $no, string $message) use (&$handled) {
                $handled[] = $message;
                throw new \ErrorException($message);
            });
            $start = (int) floor(microtime(true) * 1000);
            Telemetry::record("CheckoutStep", ["eventType" => "ExternalApiCall", "timestamp" => 5, "step" => "cart"]);
            $result = Telemetry::measure("payment", fn () => 200, ["eventType" => "X", "api" => "y", "duration.ms" => 1, "shop.id" => "s1"]);
            Telemetry::record("CheckoutStep", ["eventType" => "Again", "step" => "pay"]);
            Telemetry::measure("payment", fn () => 201, ["http.response.status_code" => 500, "error.type" => "fake", "timestamp" => 1]);
            echo json_encode([
                "result" => $result,
                "start" => $start,
                "dropped" => Telemetry::stats()["dropped_attributes"] ?? null,
                "handled" => $handled,
            ]);
        ';
        $errorLog = "$this->dir/php-errors.log";
        $r = $this->child($script, ['error_log' => $errorLog, 'log_errors' => '1']);
        $this->assertEnded(0, $r);
        $this->assertSame('', $r['err']);
        $out = json_decode($r['out'], true);
        $this->assertSame(200, $out['result']);
        $this->assertSame([], $out['handled'], 'never through the error handler');
        $this->assertSame(2 + 3 + 1 + 3, $out['dropped']);

        $lines = $this->lines();
        $this->assertCount(4, $lines);
        foreach ($lines as $line) {
            $this->assertSame(1, substr_count($line, '"eventType":'), $line);
            $this->assertSame(1, substr_count($line, '"timestamp":'), $line);
        }
        [$step, $call, $again, $status] = $this->takeEvents();
        $this->assertSame(['CheckoutStep', 'cart'], [$step['eventType'], $step['step']]);
        $this->assertGreaterThanOrEqual($out['start'] - 5, $step['timestamp']);
        $this->assertSame(['ExternalApiCall', 'payment', 200, 's1'], [$call['eventType'], $call['api'], $call['http.response.status_code'], $call['shop.id']]);
        $this->assertIsFloat($call['duration.ms'], 'measured, not the caller\'s 1');
        $this->assertSame(['CheckoutStep', 'pay'], [$again['eventType'], $again['step']]);
        $this->assertSame([201, false], [$status['http.response.status_code'], isset($status['error.type'])]);
        $this->assertGreaterThanOrEqual($out['start'] - 5, $status['timestamp']);

        $log = file($errorLog, FILE_IGNORE_NEW_LINES);
        $this->assertCount(1, $log, 'said once per process');
        $this->assertStringContainsString('checkout_guard: attribute(s) eventType, timestamp of a CheckoutStep event dropped', $log[0]);
        $this->assertStringContainsString("Telemetry::stats()['dropped_attributes']", $log[0]);

        // Without an error_log setting: once on stderr.
        $r = $this->child($script);
        $this->assertEnded(0, $r);
        $this->assertSame(1, substr_count($r['err'], 'checkout_guard: attribute(s)'), $r['err']);
        $this->assertSame(1, substr_count($r['err'], "\n"), $r['err']);
        $this->assertSame([], json_decode($r['out'], true)['handled']);
    }

    public function testAForkedChildWithBadTelemetrySettingsNeverCallsItsErrorHandlerUnderTheLock(): void
    {
        // The warning that telemetry is off comes on the first call in the forked child (its
        // state is built afresh). An error handler that records, throws, exits or turns it
        // into a fatal error must not run then: it deadlocked the child (record, fatal
        // error) or replaced the measured call's result. Each child is bounded by an alarm
        // (SIGALRM, 14): the parent always sees it end.
        $r = $this->child('
            $handlers = [
                "record" => function (int $no, string $message) {
                    Telemetry::record("Warned", ["message" => $message]);
                    return true;
                },
                "throw" => function (int $no, string $message) {
                    throw new \ErrorException($message);
                },
                "exit" => function () {
                    exit(3);
                },
                "fatal" => function (int $no, string $message) {
                    trigger_error("converted: $message", E_USER_ERROR);
                },
            ];
            Telemetry::record("CheckoutStep", ["step" => "parent"]);
            $ended = [];
            foreach ($handlers as $name => $handler) {
                $pid = pcntl_fork();
                if ($pid === 0) {
                    pcntl_alarm(2);
                    set_error_handler($handler);
                    exit(Telemetry::measure("child-call", fn () => 42));
                }
                pcntl_waitpid($pid, $status);
                $ended[$name] = pcntl_wifexited($status) ? pcntl_wexitstatus($status) : "signal " . pcntl_wtermsig($status);
            }
            echo json_encode($ended);
        ', ['checkout_guard.events.sinks' => 'jsonl,kafka']);
        $this->assertEnded(0, $r);
        $this->assertSame(
            ['record' => 42, 'throw' => 42, 'exit' => 42, 'fatal' => 42],
            json_decode($r['out'], true),
            "each child's exit status is what measure() returned\nstderr: {$r['err']}"
        );
        $this->assertSame([], $this->takeEvents(), 'telemetry is off');
    }

    public function testEventsRecordedByTheAgentAtRequestEndOrBySessionSaveHandlerAreWritten(): void
    {
        // The New Relic agent (called at request end) records and measures while the sinks
        // run: written too, to every sink.
        $r = $this->child(sprintf(self::AGENT, '
            static $calls = 0;
            echo "agent:$name:", $attributes["api"] ?? "", ";";
            if (++$calls === 1) {
                Telemetry::record("FromAgent", ["k" => "v"]);
                Telemetry::measure("agent-call", fn () => 201);
            }
        ') . '
            Telemetry::measure("zoneA", fn () => 200);
            echo "done;";
        ', ['checkout_guard.events.sinks' => 'newrelic,jsonl']);
        $this->assertEnded(0, $r);
        $this->assertSame('', $r['err']);
        $this->assertSame('done;agent:ExternalApiCall:zoneA;agent:FromAgent:;agent:ExternalApiCall:agent-call;', $r['out']);
        $this->assertSame(
            [['ExternalApiCall', 'zoneA', null], ['FromAgent', null, null], ['ExternalApiCall', 'agent-call', null]],
            self::summary($this->takeEvents())
        );

        // A session save handler (not registered as a shutdown function) writes the session
        // after checkout_guard's own request end: its measured call is written too.
        $r = $this->child('
            final class MeasuredSessions implements \SessionHandlerInterface
            {
                public function open(string $path, string $name): bool { return true; }
                public function close(): bool { return true; }
                public function read(string $id): string|false { return Telemetry::measure("session-read", fn () => ""); }
                public function write(string $id, string $data): bool { return Telemetry::measure("session-write", fn () => true); }
                public function destroy(string $id): bool { return true; }
                public function gc(int $max): int|false { return 0; }
            }
            session_set_save_handler(new MeasuredSessions(), false);
            session_id("abc");
            session_start();
            $_SESSION["cart"] = 1;
            Telemetry::record("CheckoutStep", ["step" => "confirm"]);
            echo "done;";
        ', ['session.use_cookies' => '0', 'session.cache_limiter' => '']);
        $this->assertEnded(0, $r);
        $this->assertSame('', $r['err']);
        $this->assertSame('done;', $r['out']);
        $this->assertSame(
            [['ExternalApiCall', 'session-read', null], ['CheckoutStep', 'confirm', null], ['ExternalApiCall', 'session-write', null]],
            self::summary($this->takeEvents())
        );
    }

    public function testAFatalErrorInTheDestructorOfWhatAProbeReturnedIsRecordedAsAFatalError(): void
    {
        $prelude = '
            /** Runs $dtor when destroyed. */
            final class Doomed
            {
                public function __construct(private \Closure $dtor)
                {
                }

                public function __destruct()
                {
                    ($this->dtor)();
                }
            }
        ';
        // getResponse() of the thrown exception returns it.
        $r = $this->child($prelude . '
            try {
                Telemetry::measure("payment", function () {
                    throw new ProbeFailure(fn () => new Doomed(fn () => trigger_error("destructor broke", E_USER_ERROR)));
                });
            } catch (\Throwable $t) {
                echo "caught ", get_class($t);
            }
            echo "not reached";
        ');
        $this->assertEnded(255, $r);
        $this->assertSame('', $r['out']);
        $this->assertStringContainsString('Fatal error: destructor broke', $r['err']);
        $events = $this->takeEvents();
        $this->assertSame([['ExternalApiCall', 'payment', 'fatal_error']], self::summary($events));
        $this->assertSame(0, $events[0]['http.response.status_code']);

        // getStatusCode() of the returned object returns it.
        $r = $this->child($prelude . '
            Telemetry::measure("zoneA", fn () => new Probe(fn () => new Doomed(fn () => trigger_error("destructor broke", E_USER_ERROR))));
            echo "not reached";
        ');
        $this->assertEnded(255, $r);
        $this->assertSame('', $r['out']);
        $this->assertStringContainsString('Fatal error: destructor broke', $r['err']);
        $events = $this->takeEvents();
        $this->assertSame([['ExternalApiCall', 'zoneA', 'fatal_error']], self::summary($events));
        $this->assertSame(0, $events[0]['http.response.status_code']);
    }

    public function testRecordCannotForgeAnExternalApiCall(): void
    {
        $r = $this->child('
            $before = [Telemetry::callCount("payment"), Telemetry::callCount()];
            for ($i = 0; $i < 3; $i++) {
                Telemetry::record("ExternalApiCall", [
                    "api" => "payment",
                    "http.response.status_code" => 500,
                    "duration.ms" => 99999,
                    "error.type" => "500",
                    "step" => "confirm",
                ]);
            }
            echo json_encode([
                "before" => $before,
                "after" => [Telemetry::callCount("payment"), Telemetry::callCount()],
                "dropped" => Telemetry::stats()["dropped_attributes"] ?? null,
            ]);
        ');
        $this->assertEnded(0, $r);
        $out = json_decode($r['out'], true);
        $this->assertSame([0, 0], $out['before'], $r['out']);
        $this->assertSame([0, 0], $out['after'], 'no call counted for the call budget');
        $this->assertSame(3 * 4, $out['dropped'], 'api, status, duration and error.type of each');
        $this->assertStringContainsString('checkout_guard: attribute(s) api, http.response.status_code, duration.ms, error.type of a ExternalApiCall event dropped', $r['err']);
        foreach ($this->takeEvents() as $e) {
            foreach (['api', 'http.response.status_code', 'duration.ms', 'error.type'] as $forged) {
                $this->assertArrayNotHasKey($forged, $e, json_encode($e));
            }
            $this->assertSame('confirm', $e['step']);
        }
    }

    public function testExit255IsAnExitNotAFatalErrorAndAnAgentsExit255LeavesTheScriptsStatus(): void
    {
        $r = $this->child('Telemetry::measure("redirect", function () { exit(255); }); echo "not reached";');
        $this->assertEnded(255, $r);
        $this->assertSame('', $r['out'] . $r['err']);
        $this->assertSame([['ExternalApiCall', 'redirect', 'exit']], self::summary($this->takeEvents()));

        // The New Relic agent exits with 255 at request end: the script's status stays 0.
        $r = $this->child(sprintf(self::AGENT, 'exit(255);') . '
            Telemetry::measure("zoneA", fn () => 200);
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            echo "done;";
        ', ['checkout_guard.events.sinks' => 'newrelic,jsonl']);
        $this->assertEnded(0, $r);
        $this->assertSame('done;', $r['out']);
        $this->assertOnlySinkWarnings($r['err']);
        $this->assertSame([['ExternalApiCall', 'zoneA', null], ['CheckoutStep', 'pay', null]], self::summary($this->takeEvents()));
    }

    public function testANewRelicAgentThatExitsDuringARequestIsCountedNeverEndsTheScript(): void
    {
        // A buffer of one event: every record() and measure() writes to the sinks at once;
        // the agent exits on the second event, the measured call's.
        $r = $this->child(sprintf(self::AGENT, '
            static $calls = 0;
            if (++$calls === 2) {
                exit(7);
            }
        ') . '
            Telemetry::record("CheckoutStep", ["step" => "cart"]);
            $result = Telemetry::measure("zoneA", fn () => 200);
            Telemetry::record("CheckoutStep", ["step" => "pay"]);
            echo json_encode(["result" => $result, "sinks" => Telemetry::stats()["sinks"]]);
        ', ['checkout_guard.events.sinks' => 'newrelic,jsonl', 'checkout_guard.events.buffer_size' => '1']);
        $this->assertEnded(0, $r);
        $this->assertOnlySinkWarnings($r['err']);
        $out = json_decode($r['out'], true);
        $this->assertSame(200, $out['result'] ?? null, $r['out']);
        $newRelic = $out['sinks']['newrelic'];
        $this->assertSame([2, 1, 1], [$newRelic['written'], $newRelic['dropped'], $newRelic['failures'] ?? null], $r['out']);
        $this->assertSame(3, $out['sinks']['jsonl']['written']);
        $this->assertSame(
            [['CheckoutStep', 'cart', null], ['ExternalApiCall', 'zoneA', null], ['CheckoutStep', 'pay', null]],
            self::summary($this->takeEvents())
        );
    }

    /**
     * Nothing on stderr but the rate-limited warnings of a sink that cannot write (they go
     * to PHP's error log, stderr on the CLI): never an error, an exception, a fatal error.
     */
    private function assertOnlySinkWarnings(string $err): void
    {
        $other = preg_replace("/^PHP Warning:  checkout_guard: telemetry sink '[a-z]+' cannot write .*\\n?/m", '', $err);
        $this->assertSame('', $other, $err);
    }
}
