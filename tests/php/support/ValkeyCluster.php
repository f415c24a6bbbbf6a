<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * A Valkey Cluster of the test's own: three primaries with a replica each, all from the
 * same valkey-server binary, formed with CLUSTER commands (the binary ships no
 * valkey-cli): slots assigned, nodes met, replicas attached, then waited on until every
 * node says cluster_state:ok and every replica is in sync.
 */
final class ValkeyCluster
{
    /** @var list<ValkeyProcess> primaries 0..2, then their replicas 3..5 */
    public array $nodes = [];

    private const RANGES = [[0, 5460], [5461, 10922], [10923, 16383]];

    /** @param list<string> $args more valkey-server arguments for every node (e.g. --loadmodule) */
    public function start(array $args = []): void
    {
        for ($i = 0; $i < 6; $i++) {
            $node = new ValkeyProcess();
            $node->start(['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
                '--cluster-node-timeout', '1000', '--cluster-replica-validity-factor', '0', ...$args]);
            $this->nodes[] = $node;
        }
        foreach (self::RANGES as $i => [$from, $to]) {
            $this->nodes[$i]->client()->rawCommand('CLUSTER', 'ADDSLOTSRANGE', $from, $to);
        }
        foreach ($this->nodes as $node) {
            // With the bus port: MEET would take port + 10000 (ValkeyProcess::start).
            $node->client()->rawCommand('CLUSTER', 'MEET', '127.0.0.1', $this->nodes[0]->port, $this->nodes[0]->bus);
        }
        $this->waitFor(fn () => $this->everyNode(
            fn (\Redis $r) => substr_count($r->rawCommand('CLUSTER', 'NODES'), "\n") === 6
        ), 'every node to know the five others');
        for ($i = 3; $i < 6; $i++) {
            $this->nodes[$i]->client()->rawCommand('CLUSTER', 'REPLICATE', $this->nodeId($i - 3));
        }
        $this->waitUntilHealthy();
    }

    public function stop(): void
    {
        foreach ($this->nodes as $node) {
            $node->stop();
        }
    }

    /** The URL the limiter is given: two seeds, either of which gives the slot map. */
    public function url(string $auth = ''): string
    {
        return "valkey+cluster://{$auth}127.0.0.1:{$this->nodes[0]->port},127.0.0.1:{$this->nodes[1]->port}";
    }

    public function nodeId(int $i): string
    {
        return trim($this->nodes[$i]->client()->rawCommand('CLUSTER', 'MYID'));
    }

    public function slotOf(string $key): int
    {
        return (int) $this->nodes[0]->client()->rawCommand('CLUSTER', 'KEYSLOT', $key);
    }

    /** The index of the node that is primary for `$slot` now. */
    public function primaryOf(int $slot): int
    {
        foreach ($this->nodes as $i => $node) {
            if ($this->isAlive($i) && $this->role($i) === 'master') {
                foreach ($node->client()->rawCommand('CLUSTER', 'SLOTS') as [$from, $to, $primary]) {
                    if ($slot >= $from && $slot <= $to) {
                        foreach ($this->nodes as $j => $n) {
                            if ($n->port === (int) $primary[1]) {
                                return $j;
                            }
                        }
                    }
                }
            }
        }
        throw new \RuntimeException("no primary for slot $slot");
    }

    public function role(int $i): string
    {
        return (string) $this->nodes[$i]->client()->rawCommand('ROLE')[0];
    }

    public function isAlive(int $i): bool
    {
        $s = @fsockopen('127.0.0.1', $this->nodes[$i]->port, $errno, $errstr, 0.2);
        if ($s === false) {
            return false;
        }
        fclose($s);
        return true;
    }

    /** The replica index of primary `$i` (as attached in start()). */
    public function replicaOf(int $i): int
    {
        $id = $this->nodeId($i);
        foreach ($this->nodes as $j => $n) {
            if ($j !== $i && $this->isAlive($j) && str_contains($n->client()->rawCommand('CLUSTER', 'NODES'), "myself,slave $id")) {
                return $j;
            }
        }
        throw new \RuntimeException("no replica of node $i");
    }

    /**
     * Moves `$slot` from node `$from` to node `$to` the way valkey-cli reshards:
     * IMPORTING on the target, MIGRATING on the source, MIGRATE every key, then the slot
     * assigned to the target everywhere. `$between` runs while the keys are on the target
     * and the slot is still MIGRATING on the source (a client is then answered ASK).
     */
    public function moveSlot(int $slot, int $from, int $to, ?callable $between = null): void
    {
        $src = $this->nodes[$from]->client();
        $dst = $this->nodes[$to]->client();
        $dst->rawCommand('CLUSTER', 'SETSLOT', $slot, 'IMPORTING', $this->nodeId($from));
        $src->rawCommand('CLUSTER', 'SETSLOT', $slot, 'MIGRATING', $this->nodeId($to));
        while ($keys = $src->rawCommand('CLUSTER', 'GETKEYSINSLOT', $slot, 100)) {
            $src->rawCommand('MIGRATE', '127.0.0.1', $this->nodes[$to]->port, '', 0, 5000, 'KEYS', ...$keys);
        }
        if ($between !== null) {
            $between();
        }
        foreach ([$to, $from] as $i) {
            $this->nodes[$i]->client()->rawCommand('CLUSTER', 'SETSLOT', $slot, 'NODE', $this->nodeId($to));
        }
        foreach ($this->nodes as $i => $node) {
            if ($i !== $to && $i !== $from && $this->isAlive($i) && $this->role($i) === 'master') {
                $node->client()->rawCommand('CLUSTER', 'SETSLOT', $slot, 'NODE', $this->nodeId($to));
            }
        }
    }

    public function waitUntilHealthy(float $seconds = 30.0): void
    {
        $this->waitFor(fn () => $this->everyNode(function (\Redis $r): bool {
            if (!str_contains($r->rawCommand('CLUSTER', 'INFO'), 'cluster_state:ok')) {
                return false;
            }
            $info = $r->rawCommand('INFO', 'replication');
            return str_contains($info, 'role:master') || str_contains($info, 'master_link_status:up');
        }), 'the cluster to be ok with replicas in sync', $seconds);
    }

    private function everyNode(callable $check): bool
    {
        foreach ($this->nodes as $i => $node) {
            if ($this->isAlive($i) && !$check($node->client())) {
                return false;
            }
        }
        return true;
    }

    private function waitFor(callable $ok, string $what, float $seconds = 30.0): void
    {
        $until = microtime(true) + $seconds;
        while (microtime(true) < $until) {
            try {
                if ($ok()) {
                    return;
                }
            } catch (\RedisException) {
                // a node still starting or just killed: ask again
            }
            usleep(50000);
        }
        throw new \RuntimeException("timed out waiting for $what");
    }
}
