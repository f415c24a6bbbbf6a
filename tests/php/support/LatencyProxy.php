<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * loadtest/latency_proxy.py in front of a port: every chunk in each direction is delayed
 * by the milliseconds set with delay() (the "slow Valkey" fault).
 */
final class LatencyProxy
{
    /** @var resource */
    private $proc;
    private string $control;
    public readonly int $port;

    public function __construct(int $target, int $delayMs)
    {
        $root = dirname(__DIR__, 3);
        $python = self::python() ?? throw new \RuntimeException('no .venv/bin/python: check LatencyProxy::python() and skip');
        $this->port = ValkeyProcess::freePort();
        $this->control = sys_get_temp_dir() . '/cg-proxy-' . getmypid() . '-' . bin2hex(random_bytes(4));
        $this->delay($delayMs);
        $this->proc = proc_open(
            [$python, "$root/loadtest/latency_proxy.py", (string) $this->port, (string) $target, $this->control],
            [0 => ['file', '/dev/null', 'r'], 1 => ['file', '/dev/null', 'w'], 2 => ['file', '/dev/null', 'w']],
            $pipes
        );
        for ($i = 0; $i < 250; $i++) {
            $s = @fsockopen('127.0.0.1', $this->port, $errno, $errstr, 0.1);
            if ($s) {
                fclose($s);
                return;
            }
            usleep(20000);
        }
        $this->stop();
        throw new \RuntimeException("latency proxy did not start on {$this->port}");
    }

    /** The Python that runs the proxy, or null (a test then skips, saying so). */
    public static function python(): ?string
    {
        $python = dirname(__DIR__, 3) . '/.venv/bin/python';
        return is_executable($python) ? $python : null;
    }

    public function url(): string
    {
        return "redis://127.0.0.1:{$this->port}";
    }

    /** Sets the delay; the proxy reads it within about 50 ms (a poll of the file). */
    public function delay(int $ms): void
    {
        file_put_contents($this->control, (string) $ms);
    }

    public function stop(): void
    {
        if (is_resource($this->proc)) {
            proc_terminate($this->proc, SIGKILL);
            proc_close($this->proc);
        }
        @unlink($this->control);
    }

    public function __destruct()
    {
        $this->stop();
    }
}
