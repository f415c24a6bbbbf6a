<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * What HostileCallsTest (unit) and HostileCallsSystemTest (php-fpm, valgrind) share: child
 * PHP processes with the extension loaded, telemetry going to a JSONL file of the test's
 * own (see HostileCallsTest).
 */
abstract class HostileCallsTestCase extends LimiterTestCase
{
    /** The start of every child script: probe classes whose methods run a closure. */
    protected const PRELUDE = <<<'PHP'
        <?php
        declare(strict_types=1);

        use CheckoutGuard\Telemetry;

        /** A response whose getStatusCode() runs $status. */
        final class Probe
        {
            public function __construct(private \Closure $status)
            {
            }

            public function getStatusCode()
            {
                return ($this->status)();
            }
        }

        /** An exception whose getResponse() runs $response. */
        final class ProbeFailure extends \RuntimeException
        {
            public function __construct(private \Closure $response)
            {
                parent::__construct('provider said no');
            }

            public function getResponse()
            {
                return ($this->response)();
            }
        }

        PHP;

    protected const AGENT = '
        function newrelic_record_custom_event(string $name, array $attributes): void
        {
            %s
        }
    ';

    protected string $dir;
    protected int $children = 0;

    protected function setUp(): void
    {
        $this->dir = sys_get_temp_dir() . '/cg-hostile-' . bin2hex(random_bytes(5));
        mkdir($this->dir);
    }

    protected function tearDown(): void
    {
        foreach (glob($this->dir . '/*') ?: [] as $file) {
            unlink($file);
        }
        rmdir($this->dir);
    }

    protected function eventsFile(): string
    {
        return $this->dir . '/events.jsonl';
    }

    /** @return list<string> the JSON lines the children wrote so far */
    protected function lines(): array
    {
        clearstatcache();
        if (!is_file($this->eventsFile())) {
            return [];
        }
        return file($this->eventsFile(), FILE_IGNORE_NEW_LINES | FILE_SKIP_EMPTY_LINES);
    }

    /** @return list<array> the events the children wrote so far (then starts afresh) */
    protected function takeEvents(): array
    {
        $events = array_map(fn ($l) => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $this->lines());
        @unlink($this->eventsFile());
        return $events;
    }

    /** [eventType, api or step, error.type] of each event. */
    protected static function summary(array $events): array
    {
        return array_map(
            fn ($e) => [$e['eventType'], $e['api'] ?? $e['step'] ?? null, $e['error.type'] ?? null],
            $events
        );
    }

    /**
     * Runs PHP code (after PRELUDE) in a child PHP process with the extension loaded and
     * telemetry going to this test's JSONL file. $wrap is a command to run PHP under
     * (valgrind). The child runs with PHP's own allocator (the memory limit needs it), even
     * when this process runs under scripts/valgrind.sh.
     *
     * @return array{code: int, signal: int, out: string, err: string}
     */
    protected function child(string $code, array $ini = [], array $wrap = [], array $env = []): array
    {
        $n = ++$this->children;
        $script = "$this->dir/child$n.php";
        file_put_contents($script, self::PRELUDE . $code);
        $ini += [
            'checkout_guard.events.sinks' => 'jsonl',
            'checkout_guard.events.jsonl_path' => $this->eventsFile(),
            'display_errors' => 'stderr',
            'log_errors' => '0',
        ];
        $cmd = [...$wrap, ...self::phpWithExtension()];
        foreach ($ini as $k => $v) {
            $cmd[] = '-d';
            $cmd[] = "$k=$v";
        }
        $cmd[] = $script;
        $environment = array_diff_key(getenv(), ['USE_ZEND_ALLOC' => true, 'ZEND_DONT_UNLOAD_MODULES' => true]);
        $out = "$this->dir/child$n.out";
        $err = "$this->dir/child$n.err";
        $p = proc_open(
            $cmd,
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', $out, 'w'], 2 => ['file', $err, 'w']],
            $pipes,
            $this->dir,
            $env + $environment
        );
        $deadline = microtime(true) + 60;
        while (($status = proc_get_status($p))['running']) {
            if (microtime(true) > $deadline) {
                proc_terminate($p, 9);
                proc_close($p);
                $this->fail("hang detector: child $n ran for 60 s:\n$code");
            }
            usleep(2000);
        }
        proc_close($p);
        return [
            'code' => $status['signaled'] ? 128 + $status['termsig'] : $status['exitcode'],
            'signal' => $status['signaled'] ? $status['termsig'] : 0,
            'out' => (string) file_get_contents($out),
            'err' => (string) file_get_contents($err),
        ];
    }

    /** The child ended with exit status $code by itself, not by a signal. */
    protected function assertEnded(int $code, array $r): void
    {
        $what = "\nstdout: {$r['out']}\nstderr: {$r['err']}";
        $this->assertSame(0, $r['signal'], "killed by signal {$r['signal']}$what");
        $this->assertSame($code, $r['code'], "exit status$what");
    }
}
