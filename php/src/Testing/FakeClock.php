<?php
declare(strict_types=1);

namespace CheckoutGuard\Testing;

/**
 * The clock of a FakeLimiter: seconds that move only when a test says so (advance()),
 * kept in whole microseconds as the real limiter's buckets are. One clock may drive
 * several fakes (their marks and refills then move together).
 *
 *     $clock = new FakeClock();
 *     $fake = new FakeLimiter(['global' => ['capacity' => 2, 'refill_per_second' => 1]], $clock);
 *     $clock->advance(0.5);   // or $fake->advance(0.5)
 */
final class FakeClock
{
    private int $nowUs;

    /** @param float $start the clock's first reading, in seconds (any origin: only differences count) */
    public function __construct(float $start = 0.0)
    {
        if (!is_finite($start) || $start < 0.0 || $start > 1e12) {
            throw new \InvalidArgumentException(sprintf('start must be a number of seconds from 0 to 1e12, got %s', var_export($start, true)));
        }
        $this->nowUs = (int) round($start * 1e6);
    }

    /** Moves the clock forward by `$seconds` (0 or more), rounded to whole microseconds. */
    public function advance(float $seconds): void
    {
        if (!is_finite($seconds) || $seconds < 0.0 || $seconds > 1e9) {
            throw new \InvalidArgumentException(sprintf('seconds must be a number from 0 to 1e9 (the clock only moves forward), got %s', var_export($seconds, true)));
        }
        $this->nowUs += (int) round($seconds * 1e6);
    }

    /** Now, in seconds. */
    public function now(): float
    {
        return $this->nowUs / 1e6;
    }

    /** Now, in whole microseconds. */
    public function nowUs(): int
    {
        return $this->nowUs;
    }
}
