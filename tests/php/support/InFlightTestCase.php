<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * In-flight leases (the `in_flight` option) on a Valkey of each test's own, for each
 * engine (data provider engines()): the lease sets `{cg:NAME}:f:global`, `:f:lane`,
 * `:f:shop:<shop>` (sorted sets, score = expiry in µs on Valkey's clock) and the stats
 * hash `:f:stats` read directly.
 */
abstract class InFlightTestCase extends LimiterTestCase
{
    protected ?ValkeyProcess $valkey = null;
    protected string $engine = 'lua';

    /** @return array<string, array{0: string}> */
    public static function engines(): array
    {
        return ['lua' => ['lua'], 'module' => ['module']];
    }

    /** A Valkey of this test's own for `$engine` (with the module loaded for `module`). */
    protected function startValkey(string $engine): void
    {
        $this->engine = $engine;
        $this->valkey = new ValkeyProcess();
        $this->valkey->start($engine === 'module' ? ['--loadmodule', self::valkeyModule()] : []);
    }

    protected function tearDown(): void
    {
        $this->valkey?->stop();
        $this->valkey = null;
    }

    /** The options of a limiter on this test's Valkey with this test's engine. */
    protected function options(array $options): array
    {
        return $options + [
            'name' => self::uniqueName('lease'),
            'url' => $this->valkey->url(),
            'engine' => $this->engine,
            'timeout_ms' => 1000,
            'on_unavailable' => 'throw',
        ];
    }

    protected function leaseLimiter(array $options): RateLimiter
    {
        return new RateLimiter($this->options($options));
    }

    /** Another worker with the same options: a child process holding leases. */
    protected function holder(array $options): LeaseHolder
    {
        return new LeaseHolder($this->options($options));
    }

    /** Valkey's clock, µs. */
    protected function valkeyMicros(): int
    {
        [$s, $us] = $this->valkey->client()->time();
        return (int) $s * 1_000_000 + (int) $us;
    }

    /**
     * Leases held now at one level of limiter `$name` (`global`, `lane`, `shop:<id>`):
     * `ZCOUNT key (now +inf` on Valkey's clock.
     */
    protected function held(string $name, string $level): int
    {
        return (int) $this->valkey->client()->zCount("{cg:$name}:f:$level", '(' . $this->valkeyMicros(), '+inf');
    }

    /** Members of a lease set, live or expired (ZCARD). */
    protected function members(string $name, string $level): int
    {
        return (int) $this->valkey->client()->zCard("{cg:$name}:f:$level");
    }

    /** The stats hash `{cg:NAME}:f:stats` (absent fields: 0). */
    protected function leaseStats(string $name): array
    {
        $h = $this->valkey->client()->hGetAll("{cg:$name}:f:stats") ?: [];
        return array_map('intval', $h) + ['released' => 0, 'hold_us' => 0, 'leaked' => 0, 'expired' => 0];
    }

    /** µs until the last lease of a level expires on Valkey's clock (0 when none is live). */
    protected function untilLastExpiry(string $name, string $level): int
    {
        $last = $this->valkey->client()->zRange("{cg:$name}:f:$level", -1, -1, true);
        $score = $last ? (int) array_values($last)[0] : 0;
        return max(0, $score - $this->valkeyMicros());
    }
}
