<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

/**
 * The JSONL sink under real operations, each in a child PHP process (CLI, no php-fpm) with
 * telemetry going to a file of the test's own: a lock on the file held by another process
 * (`flock -x FILE sleep N`), a full disk (a 64 KB tmpfs, mounted as root), a torn tail left
 * by someone else. A request end never waits on the lock beyond a small bound; `stats()`
 * counts exactly the events that reached the file; the file never holds a torn line
 * followed by good ones.
 */
final class JsonlSinkTest extends HostileCallsTestCase
{
    /** @var resource|null the `flock -x FILE sleep N` holding the events file's lock */
    private $holder = null;
    private ?string $mounted = null;

    protected function tearDown(): void
    {
        if ($this->holder !== null) {
            proc_terminate($this->holder, 9);
            proc_close($this->holder);
        }
        if ($this->mounted !== null) {
            exec('umount ' . escapeshellarg($this->mounted) . ' 2>&1', $out, $rc);
            $this->assertSame(0, $rc, 'umount: ' . implode("\n", $out));
            rmdir($this->mounted);
        }
        parent::tearDown();
    }

    /**
     * Another process takes an exclusive flock on $file and keeps it $seconds s (`-o`: the
     * lock is flock(1)'s own, not inherited by sleep, so killing flock(1) releases it).
     */
    private function holdLock(string $file, int $seconds): void
    {
        if (trim((string) shell_exec('command -v flock')) === '') {
            $this->markTestSkipped('flock(1) (util-linux) is not installed');
        }
        touch($file);
        $this->holder = proc_open(['flock', '-x', '-o', $file, 'sleep', (string) $seconds], [], $pipes);
        // Bounded poll until the lock is taken (a non-blocking try fails).
        $deadline = microtime(true) + 10;
        while (true) {
            $h = fopen($file, 'r');
            $free = flock($h, LOCK_EX | LOCK_NB);
            fclose($h);
            if (!$free) {
                return;
            }
            $this->assertLessThan($deadline, microtime(true), 'flock(1) did not take the lock within 10 s');
            usleep(5000);
        }
    }

    /** Mounts a tmpfs of $size on a directory of its own (root only). */
    private function smallDisk(string $size): string
    {
        if (function_exists('posix_geteuid') ? posix_geteuid() !== 0 : trim((string) shell_exec('id -u')) !== '0') {
            $this->markTestSkipped('mounting a small tmpfs needs root');
        }
        $dir = "$this->dir/disk";
        mkdir($dir);
        exec('mount -t tmpfs -o size=' . escapeshellarg($size) . ' tmpfs ' . escapeshellarg($dir) . ' 2>&1', $out, $rc);
        if ($rc !== 0) {
            rmdir($dir);
            $this->markTestSkipped('cannot mount a tmpfs here: ' . implode("\n", $out));
        }
        $this->mounted = $dir;
        return $dir;
    }

    /** Every line of $file parsed; fails on a line that is not a whole event. */
    private static function wholeLines(string $file): array
    {
        clearstatcache();
        $bytes = (string) file_get_contents($file);
        self::assertTrue($bytes === '' || str_ends_with($bytes, "\n"), 'the file ends with a whole line');
        $lines = $bytes === '' ? [] : explode("\n", substr($bytes, 0, -1));
        $events = [];
        foreach ($lines as $i => $line) {
            $e = json_decode($line, true);
            self::assertIsArray($e, sprintf('line %d is not a whole event: %.80s...', $i + 1, $line));
            $events[] = $e;
        }
        return $events;
    }

    public function testAHeldLockNeitherStallsTheRequestNorItsEndAndWhatCannotBeWrittenIsCountedAsDropped(): void
    {
        $file = $this->eventsFile();
        $this->holdLock($file, 10);

        // flush() during the request, then events left for the request end.
        $started = microtime(true);
        $r = $this->child('
            for ($i = 0; $i < 3; $i++) {
                Telemetry::record("CheckoutStep", ["step" => "s$i"]);
            }
            $t = hrtime(true);
            $written = Telemetry::flush();
            $ms = (hrtime(true) - $t) / 1e6;
            $jsonl = Telemetry::stats()["sinks"]["jsonl"];
            echo json_encode(["written" => $written, "ms" => $ms] + $jsonl);
            Telemetry::record("CheckoutStep", ["step" => "at-request-end"]);
        ');
        $elapsed = microtime(true) - $started;
        $this->assertEnded(0, $r);
        $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
        // A bound only the unbounded wait crosses (the lock is held 10 s), not a timing target.
        $this->assertLessThan(1000.0, $out['ms'], 'flush() waited on the held lock');
        $this->assertLessThan(5.0, $elapsed, 'the request end waited on the held lock');
        $this->assertSame(
            [0, 0, 3, 1],
            [$out['written'], $out['written'], $out['dropped'], $out['failures']],
            $r['out']
        );
        $this->assertStringContainsString('lock held', (string) $out['last_error']);
        $this->assertSame('', (string) file_get_contents($file), 'nothing was written under the lock');

        // The lock released: the next batch is written whole and counted.
        proc_terminate($this->holder, 9);
        proc_close($this->holder);
        $this->holder = null;
        $r = $this->child('
            Telemetry::record("CheckoutStep", ["step" => "after"]);
            echo json_encode(["written" => Telemetry::flush()] + Telemetry::stats()["sinks"]["jsonl"]);
        ');
        $this->assertEnded(0, $r);
        $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame([1, 1, 0], [$out['written'], $out['written'], $out['dropped']], $r['out']);
        $this->assertSame(['after'], array_column(self::wholeLines($file), 'step'));
    }

    public function testAFullDiskLeavesOnlyWholeLinesCountsExactlyWhatReachedTheFileAndTheNextBatchIsWhole(): void
    {
        $disk = $this->smallDisk('64k');
        $file = "$disk/events.jsonl";
        // A filler to free later ("space is back"); 200 events of ~330 bytes (a string
        // attribute holds 255 bytes at most) do not fit in the rest.
        file_put_contents("$disk/filler", str_repeat('f', 32 * 1024));
        $r = $this->child(sprintf('
            $pad = str_repeat("x", 250);
            for ($i = 0; $i < 200; $i++) {
                Telemetry::record("CheckoutStep", ["step" => "full-$i", "pad" => $pad]);
            }
            $first = Telemetry::flush();
            $stats1 = Telemetry::stats()["sinks"]["jsonl"];
            unlink(%s);
            for ($i = 0; $i < 10; $i++) {
                Telemetry::record("CheckoutStep", ["step" => "back-$i"]);
            }
            $second = Telemetry::flush();
            echo json_encode(["first" => $first, "stats1" => $stats1, "second" => $second, "stats2" => Telemetry::stats()["sinks"]["jsonl"]]);
        ', var_export("$disk/filler", true)), ['checkout_guard.events.jsonl_path' => $file]);
        $this->assertEnded(0, $r);
        $out = json_decode($r['out'], true, 512, JSON_THROW_ON_ERROR);
        $events = self::wholeLines($file);
        $steps = array_column($events, 'step');
        $full = array_values(array_filter($steps, fn ($s) => str_starts_with($s, 'full-')));
        $n = count($full);
        $this->assertGreaterThan(0, $n, 'the disk holds some of the batch: ' . $r['out']);
        $this->assertLessThan(200, $n, 'the disk must fill up mid-batch: ' . $r['out']);
        // The first events of the batch, in order, then the whole next batch.
        $this->assertSame(
            [...array_map(fn ($i) => "full-$i", range(0, $n - 1)), ...array_map(fn ($i) => "back-$i", range(0, 9))],
            $steps
        );
        $this->assertSame(
            [$n, $n, 200 - $n, 1],
            [$out['first'], $out['stats1']['written'], $out['stats1']['dropped'], $out['stats1']['failures']],
            $r['out']
        );
        $this->assertStringContainsString('No space left on device', (string) $out['stats1']['last_error']);
        $this->assertSame([10, $n + 10, 200 - $n], [$out['second'], $out['stats2']['written'], $out['stats2']['dropped']], $r['out']);
    }

    public function testATornTailLeftBySomeoneElseStaysOneBadLineAndTheNextBatchStartsOnANewLine(): void
    {
        $file = $this->eventsFile();
        $good = '{"eventType":"CheckoutStep","timestamp":' . (int) (microtime(true) * 1000) . ',"step":"old"}';
        file_put_contents($file, "$good\n" . '{"eventType":"CheckoutStep","timest');
        $r = $this->child('
            Telemetry::record("CheckoutStep", ["step" => "a"]);
            Telemetry::record("CheckoutStep", ["step" => "b"]);
            echo Telemetry::flush();
        ');
        $this->assertEnded(0, $r);
        $this->assertSame('2', $r['out']);
        $lines = explode("\n", (string) file_get_contents($file));
        $this->assertCount(5, $lines, 'old, torn, a, b and the final newline');
        $this->assertSame(['{"eventType":"CheckoutStep","timest', ''], [$lines[1], $lines[4]]);
        $this->assertSame(['a', 'b'], [json_decode($lines[2], true)['step'], json_decode($lines[3], true)['step']]);

        // The scan counts the torn line once, and every whole event.
        [$rc, $scan, $err] = Cli::run('scan', '--json', $file);
        $this->assertSame(0, $rc, $err);
        $input = json_decode($scan, true, 512, JSON_THROW_ON_ERROR)['input'];
        $this->assertSame([4, 1], [$input['events'], $input['malformed']], $scan);
        $this->assertSame([2], array_column($input['bad_lines'], 'line'));
    }
}
