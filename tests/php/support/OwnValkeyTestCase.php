<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * Tests that stop, pause, restart or reconfigure Valkey, or count its commands and
 * connections: each test gets a Valkey of its own.
 */
abstract class OwnValkeyTestCase extends LimiterTestCase
{
    protected ValkeyProcess $valkey;

    protected function setUp(): void
    {
        $this->valkey = new ValkeyProcess();
        $this->valkey->start();
    }

    protected function tearDown(): void
    {
        $this->valkey->stop();
    }

    /** This Valkey's client connections opened by checkout_guard. */
    protected function ourConnections(): int
    {
        return substr_count($this->valkey->client()->rawCommand('CLIENT', 'LIST'), 'lib-name=checkout_guard');
    }

    /** How many times this Valkey ran `$command` (INFO commandstats; lower case). */
    protected function commandCalls(string $command): int
    {
        $stats = $this->valkey->client()->rawCommand('INFO', 'commandstats');
        return preg_match('/cmdstat_' . preg_quote($command, '/') . ':calls=(\d+)/', $stats, $m) ? (int) $m[1] : 0;
    }
}
