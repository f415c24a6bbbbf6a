<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Telemetry;

/**
 * What this PHPUnit process's three sinks received since mark(): the JSONL file, the
 * Valkey stream and the New Relic stand-in (scripts/test.sh configures all three).
 */
final class EventLog
{
    private int $offset = 0;
    private string $lastId = '0-0';

    public function __construct(private \Redis $redis)
    {
    }

    public static function file(): string
    {
        return (string) getenv('CHECKOUT_GUARD_TEST_EVENTS');
    }

    public static function streamKey(): string
    {
        return (string) ini_get('checkout_guard.events.stream_key');
    }

    public function mark(): void
    {
        Telemetry::flush();
        clearstatcache();
        $this->offset = is_file(self::file()) ? filesize(self::file()) : 0;
        $last = $this->redis->xRevRange(self::streamKey(), '+', '-', 1);
        $this->lastId = $last ? array_key_first($last) : '0-0';
        $GLOBALS['__newrelic_events'] = [];
    }

    /** @return list<array> events written to the JSONL file since mark() */
    public function jsonl(): array
    {
        Telemetry::flush();
        clearstatcache();
        $data = (string) file_get_contents(self::file(), false, null, $this->offset);
        $lines = $data === '' ? [] : explode("\n", rtrim($data, "\n"));
        return array_map(fn ($l) => json_decode($l, true, 512, JSON_THROW_ON_ERROR), $lines);
    }

    /** @return list<array> the stream entries' events since mark() */
    public function stream(): array
    {
        Telemetry::flush();
        $entries = $this->redis->xRange(self::streamKey(), '(' . $this->lastId, '+');
        return array_values(array_map(fn ($f) => json_decode($f['event'], true, 512, JSON_THROW_ON_ERROR), $entries));
    }

    /** @return list<array{0: string, 1: array}> what the New Relic agent was given */
    public function newRelic(): array
    {
        Telemetry::flush();
        return $GLOBALS['__newrelic_events'] ?? [];
    }
}
