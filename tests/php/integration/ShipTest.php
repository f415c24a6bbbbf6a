<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use PHPUnit\Framework\Attributes\Group;

/**
 * Issue 39: what several PHP processes record reaches New Relic's Event API through
 * `checkout-guard ship`, every event once: from the stream sink (a consumer group) and
 * from the jsonl sink's files (a checkpoint). The events are the extension's own (the
 * stream sink's entries, the jsonl sink's lines), the destination the project's Event API
 * stand-in (loadtest/event_api_standin.py: the key, gzip, the documented limits), which
 * counts events and duplicates by `event_id`.
 * Group python-tooling: the PHP matrix's chroots have no Python for the stand-in.
 *
 * @group python-tooling
 */
#[Group('python-tooling')]
final class ShipTest extends OwnValkeyTestCase
{
    private const KEY = 'cg-ship:events';
    private const INSERT_KEY = 'ship-test-key';
    private const WORKERS = 4;
    private const CALLS = 300;

    /** @var resource|null */
    private $standIn = null;
    private string $base = '';
    private string $dir = '';

    protected function setUp(): void
    {
        parent::setUp();
        $this->dir = sys_get_temp_dir() . '/cg-ship-' . bin2hex(random_bytes(6));
        mkdir($this->dir);
        $python = dirname(__DIR__, 3) . '/.venv/bin/python';
        if (!is_executable($python)) {
            $this->markTestSkipped('no .venv/bin/python: run scripts/setup.sh');
        }
        $this->standIn = proc_open(
            [$python, dirname(__DIR__, 3) . '/loadtest/event_api_standin.py', '--port', '0', '--key', self::INSERT_KEY, '--max-seconds', '300',
             '--store', $this->dir . '/store.jsonl'],
            [1 => ['pipe', 'w'], 2 => ['file', $this->dir . '/standin.err', 'w']],
            $pipes
        );
        $line = (string) fgets($pipes[1]);
        $this->assertStringStartsWith('listening on ', $line, (string) @file_get_contents($this->dir . '/standin.err'));
        $this->base = trim(substr($line, strlen('listening on ')));
    }

    protected function tearDown(): void
    {
        if (is_resource($this->standIn)) {
            proc_terminate($this->standIn);
            proc_close($this->standIn);
        }
        foreach (glob($this->dir . '/*') ?: [] as $f) {
            unlink($f);
        }
        @rmdir($this->dir);
        parent::tearDown();
    }

    /** @return array<string, mixed> */
    private function stats(): array
    {
        return json_decode((string) file_get_contents($this->base . '/_stats'), true, 512, JSON_THROW_ON_ERROR);
    }

    /** Several PHP processes at once, each measuring CALLS calls with these sinks. */
    private function record(array $ini): void
    {
        $procs = [];
        for ($w = 0; $w < self::WORKERS; $w++) {
            $cmd = self::phpWithExtension();
            foreach ($ini + ['events.buffer_size' => '100000'] as $k => $v) {
                array_push($cmd, '-d', "checkout_guard.$k=$v");
            }
            array_push($cmd, '-r', sprintf(<<<'PHP'
                for ($i = 0; $i < %d; $i++) {
                    CheckoutGuard\Telemetry::measure('payment', fn () => ['status' => 'paid'], ['shop.id' => 'shop-%d', 'i' => $i]);
                }
                CheckoutGuard\Telemetry::flush();
                PHP, self::CALLS, $w));
            $procs[] = proc_open($cmd, [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes);
            $all[] = $pipes;
        }
        foreach ($procs as $i => $p) {
            $err = stream_get_contents($all[$i][2]);
            $this->assertSame(0, proc_close($p), "worker $i: $err");
        }
    }

    /** @return array{0: int, 1: array<string, mixed>, 2: string} */
    private function ship(string ...$args): array
    {
        $env = ['NEW_RELIC_INSERT_KEY' => self::INSERT_KEY, 'PATH' => (string) getenv('PATH')];
        $p = proc_open(
            [Cli::path(), 'ship', '--to', 'newrelic', '--endpoint', $this->base . '/v1/accounts/1/events',
             '--once', '--json', '--dead-letter', $this->dir . '/dead.jsonl', ...$args],
            [1 => ['pipe', 'w'], 2 => ['pipe', 'w']],
            $pipes,
            null,
            $env
        );
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $code = proc_close($p);
        return [$code, (array) json_decode($out, true), $err];
    }

    public function testEveryCallFromSeveralProcessesReachesTheEventApiOnceFromTheStream(): void
    {
        $url = $this->valkey->url();
        $this->record(['events.sinks' => 'stream', 'events.stream_url' => $url, 'events.stream_key' => self::KEY]);
        $n = self::WORKERS * self::CALLS;
        $this->assertSame($n, (int) $this->valkey->client()->xLen(self::KEY));

        [$code, $j, $err] = $this->ship('--stream', $url, '--stream-key', self::KEY, '--batch', '500');
        $this->assertSame(0, $code, $err);
        $this->assertSame($n, $j['delivered'], json_encode($j));
        $s = $this->stats();
        $this->assertSame($n, $s['events'], json_encode($s));
        $this->assertSame($n, $s['distinct_ids']);
        $this->assertSame(0, $s['duplicates']);
        $this->assertEachWorkersCallsArrived(1);
        // Again: nothing new to take.
        [$code, $j] = $this->ship('--stream', $url, '--stream-key', self::KEY);
        $this->assertSame([0, 0], [$code, $j['taken']]);
    }

    public function testEveryCallFromSeveralProcessesReachesTheEventApiOnceFromTheFiles(): void
    {
        $file = $this->dir . '/events.jsonl';
        $this->record(['events.sinks' => 'jsonl', 'events.jsonl_path' => $file]);
        $n = self::WORKERS * self::CALLS;
        $this->assertCount($n, file($file));

        [$code, $j, $err] = $this->ship('--files', $file, '--checkpoint', $this->dir . '/cp.json');
        $this->assertSame(0, $code, $err);
        $this->assertSame($n, $j['delivered'], json_encode($j));
        $s = $this->stats();
        $this->assertSame([$n, $n, 0], [$s['events'], $s['distinct_ids'], $s['duplicates']], json_encode($s));
        // More calls recorded: only they are delivered.
        $this->record(['events.sinks' => 'jsonl', 'events.jsonl_path' => $file]);
        [$code, $j] = $this->ship('--files', $file, '--checkpoint', $this->dir . '/cp.json');
        $this->assertSame([0, $n], [$code, $j['delivered']]);
        $this->assertSame(2 * $n, $this->stats()['distinct_ids']);
        $this->assertEachWorkersCallsArrived(2);
    }

    /** What the Event API got: each worker's calls, $times each, in the extension's schema. */
    private function assertEachWorkersCallsArrived(int $times): void
    {
        $per = [];
        foreach (file($this->dir . '/store.jsonl') as $line) {
            $e = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
            $this->assertSame('ExternalApiCall', $e['eventType']);
            $this->assertSame('payment', $e['api']);
            $this->assertIsString($e['event_id']);
            $this->assertIsInt($e['timestamp']);
            $per[$e['shop.id']][] = $e['i'];
        }
        ksort($per);
        $this->assertSame(array_map(fn ($w) => "shop-$w", range(0, self::WORKERS - 1)), array_keys($per));
        foreach ($per as $shop => $is) {
            sort($is);
            $want = [];
            foreach (range(0, self::CALLS - 1) as $i) {
                array_push($want, ...array_fill(0, $times, $i));
            }
            $this->assertSame($want, $is, $shop);
        }
    }
}
