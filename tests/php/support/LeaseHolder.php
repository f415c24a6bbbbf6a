<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Another worker holding in-flight leases: a child PHP process running
 * fixtures/lease_holder.php with the extension, driven line by line over its stdin, so a
 * test holds leases in several processes at once, then releases them, lets the child exit
 * holding them (released at its RSHUTDOWN, counted leaked) or kills it (they expire).
 */
final class LeaseHolder
{
    /** @var resource */
    private $process;
    /** @var array<int, resource> */
    private array $pipes = [];
    private bool $running = true;

    /** @param array<string, mixed> $options the RateLimiter's options */
    public function __construct(array $options)
    {
        $cmd = [PHP_BINARY, '-n', '-d', 'include_path=' . get_include_path(),
            '-d', 'extension=' . getenv('CHECKOUT_GUARD_EXT'),
            __DIR__ . '/../fixtures/lease_holder.php', json_encode($options, JSON_THROW_ON_ERROR)];
        $this->process = proc_open($cmd, [0 => ['pipe', 'r'], 1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $this->pipes);
        if (!is_resource($this->process)) {
            throw new \RuntimeException('the lease holder did not start');
        }
    }

    /** One acquire() in the child: allowed, reason, would_allow, lease, retry_after, remaining. */
    public function acquire(string $shop): array
    {
        return $this->ask("acquire $shop");
    }

    /** @return list<array<string, mixed>> $n acquire()s for $shop, in order */
    public function acquireMany(string $shop, int $n): array
    {
        return array_map(fn () => $this->acquire($shop), range(1, $n));
    }

    /** Releases every decision the child holds; the child's health()['in_flight']. */
    public function release(): array
    {
        return $this->ask('release');
    }

    /** Exits without releasing (RSHUTDOWN releases the leases); its exit status. */
    public function quit(): int
    {
        fwrite($this->pipes[0], "exit\n");
        return $this->close();
    }

    /** Dies at once holding its leases, as a worker killed by the OOM killer does. */
    public function kill(): void
    {
        proc_terminate($this->process, SIGKILL);
        $this->close();
    }

    private function ask(string $command): array
    {
        fwrite($this->pipes[0], "$command\n");
        $line = fgets($this->pipes[1]);
        if ($line === false) {
            $err = stream_get_contents($this->pipes[2]);
            $this->close();
            throw new \RuntimeException("the lease holder did not answer '$command': $err");
        }
        return json_decode($line, true, 512, JSON_THROW_ON_ERROR);
    }

    private function close(): int
    {
        if (!$this->running) {
            return -1;
        }
        $this->running = false;
        foreach ($this->pipes as $p) {
            fclose($p);
        }
        return proc_close($this->process);
    }

    public function __destruct()
    {
        if ($this->running) {
            $this->kill();
        }
    }
}
