<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * tests/support/fault_proxy.py in front of a port (the Rust suite uses the same proxy):
 * replies go through as they are until arm() gives the next one a fault (fin, rst, half,
 * hold, garble, "delay MS", "trickle MS": see the script's docstring). Plain RESP and TLS
 * records alike.
 */
final class FaultProxy
{
    /** @var resource */
    private $proc;
    private string $control;
    public readonly int $port;

    public function __construct(int $target)
    {
        $this->control = sys_get_temp_dir() . '/cg-faults-' . getmypid() . '-' . bin2hex(random_bytes(4));
        file_put_contents($this->control, '');
        $this->proc = proc_open(
            ['python3', dirname(__DIR__, 3) . '/tests/support/fault_proxy.py', (string) $target, $this->control],
            [0 => ['file', '/dev/null', 'r'], 1 => ['pipe', 'w'], 2 => ['file', '/dev/null', 'w']],
            $pipes
        );
        $line = (string) fgets($pipes[1]);
        if (!preg_match('/^listening (\d+)/', $line, $m)) {
            $this->stop();
            throw new \RuntimeException("fault proxy did not start: '$line'");
        }
        $this->port = (int) $m[1];
    }

    public function url(string $scheme = 'redis'): string
    {
        return "$scheme://127.0.0.1:{$this->port}";
    }

    /** The next reply from the server gets $fault. */
    public function arm(string $fault): void
    {
        file_put_contents($this->control, "$fault\n");
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
