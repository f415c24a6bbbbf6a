<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A lease belongs to the process that took it: a child forked by the request
 * (`pcntl_fork()`) inherits the request's list of leases, but at its own request end it
 * must not release (nor count as leaked) its parent's, whose call may still be in flight.
 */
final class InFlightForkTest extends LimiterTestCase
{
    public function testAForkedChildLeavesItsParentsLeasesAlone(): void
    {
        if (!function_exists('pcntl_fork')) {
            $this->markTestSkipped('pcntl is not loaded');
        }
        $name = self::uniqueName('fork');
        $l = $this->limiter([
            'name' => $name,
            'global' => self::bucket(100),
            'in_flight' => ['global' => 5],
        ]);
        $d = $l->acquire('a');
        $this->assertTrue($d->hasLease());
        $held = static fn (): int => (int) self::redis()->zCount("{cg:$name}:f:global", '-inf', '+inf');
        $this->assertSame(1, $held());
        $pid = pcntl_fork();
        if ($pid === 0) {
            // The child's request ends here (RSHUTDOWN runs in the child).
            exit(0);
        }
        pcntl_waitpid($pid, $status);
        // The child ended its request (its exit status is PHPUnit's business: newer
        // PHPUnits' shutdown handlers in a forked child exit 255), no signal killed it.
        $this->assertTrue(pcntl_wifexited($status), 'the child exited');
        $this->assertSame(1, $held(), 'the parent still holds its lease after the child ended');
        $this->assertTrue($d->hasLease());
        $this->assertSame('0', (string) (self::redis()->hGet("{cg:$name}:f:stats", 'leaked') ?: '0'), 'nothing counted leaked');
        $d->release();
        $this->assertSame(0, $held());
        $this->assertFalse($d->hasLease());
        $this->assertSame('1', (string) self::redis()->hGet("{cg:$name}:f:stats", 'released'));
    }
}
