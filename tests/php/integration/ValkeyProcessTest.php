<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\TestCase;

/**
 * The tests' own servers: a port they are given is theirs. A CI run failed with "valkey did
 * not start on 35205" when a cluster node's port had already gone to another socket.
 */
final class ValkeyProcessTest extends TestCase
{
    public function testFreePortNeverHandsOutAPortTwice(): void
    {
        // bind(0) then close: the kernel hands a released port out again (the Rust tests saw
        // 134 repeats in 2,000); a port handed to one server must not go to the next.
        $seen = [];
        for ($i = 0; $i < 2000; $i++) {
            $p = ValkeyProcess::freePort();
            $this->assertArrayNotHasKey($p, $seen, "port $p handed out twice (call $i)");
            $seen[$p] = true;
        }
    }

    public function testFreePortIsBelowTheEphemeralRange(): void
    {
        // Outgoing connections take their local port from the ephemeral range: a port
        // chosen there can be taken by any client socket before the server binds it.
        $range = @file_get_contents('/proc/sys/net/ipv4/ip_local_port_range');
        if ($range === false) {
            $this->markTestSkipped('no /proc/sys/net/ipv4/ip_local_port_range');
        }
        [$low] = array_map('intval', preg_split('/\s+/', trim($range)));
        if ($low < 11024) {
            $this->markTestSkipped("the ephemeral range starts at $low: no room below it");
        }
        for ($i = 0; $i < 200; $i++) {
            $p = ValkeyProcess::freePort();
            $this->assertGreaterThanOrEqual(1024, $p);
            $this->assertLessThan($low, $p, "port $p is in the ephemeral range (from $low)");
        }
    }

    /** @return array<string, array{string}> */
    public static function takenPorts(): array
    {
        return ['its port' => ['port'], 'its cluster bus port' => ['bus']];
    }

    /**
     * Another process (not this one's freePort) took a port between choosing and starting:
     * the server cannot bind it and exits at once; a first start moves to fresh ports.
     *
     * @dataProvider takenPorts
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('takenPorts')]
    public function testAFirstStartWhosePortWasTakenMeanwhileMoves(string $which): void
    {
        $v = self::valkey();
        if ($which === 'bus') {
            $v->bus = ValkeyProcess::freePort();
        }
        $taken = $v->$which;
        $squatter = $this->hold($taken);
        try {
            $v->start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf']);
            $this->assertNotSame($taken, $v->$which, "a $which of its own");
            $this->assertStringContainsString('cluster_enabled:1', (string) $v->client()->rawCommand('INFO', 'cluster'));
        } finally {
            fclose($squatter);
            $v->stop();
        }
    }

    public function testARestartKeepsItsPortAndSaysWhyItCannot(): void
    {
        // The limiter under test was given this port: a restart must not move.
        $v = self::valkey();
        $v->start();
        $port = $v->port;
        $v->stop();
        $squatter = $this->hold($port);
        try {
            $v->start();
            $this->fail('a restart on a taken port started');
        } catch (\RuntimeException $e) {
            $this->assertSame($port, $v->port);
            $this->assertStringContainsString("valkey did not start on $port: port in use", $e->getMessage());
        } finally {
            fclose($squatter);
        }
    }

    private static function valkey(): ValkeyProcess
    {
        if (getenv('VALKEY_SERVER') === false) {
            self::markTestSkipped('VALKEY_SERVER is not set');
        }
        return new ValkeyProcess();
    }

    /** @return resource a listener on $port, as another process would hold it */
    private function hold(int $port)
    {
        $squatter = stream_socket_server("tcp://127.0.0.1:$port", $errno, $errstr);
        $this->assertNotFalse($squatter, "could not hold port $port: $errstr");
        return $squatter;
    }
}
