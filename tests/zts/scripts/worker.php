<?php
// The worker script of the worker-mode suite (tests/php/zts/WorkerModeTest.php), run by the
// FrankenPHP-style worker host (tests/zts/worker.c): $argv = [script, THREAD, START, CONFIG].
// It boots (one ExternalApiCall "boot" recorded), then handles requests with
// frankenphp_handle_request() until the host has none left. CONFIG is a JSON file:
//   events    the JSONL sink's file (the ini's checkout_guard.events.jsonl_path)
//   out       each handled request appends one JSON line to OUT.THREAD:
//               t, r, start    thread, request (from 0 per thread), the worker's start
//               count0, count1 Telemetry::callCount() when the request starts, and after
//                              it recorded its 2 calls
//               prev           how many events of this thread's previous request (or of
//                              the boot, for the first request of a start) the JSONL file
//                              holds now: they were written when it ended
//               allowed        (with options) acquire() of a limiter whose in-flight level
//                              takes 1 lease: the lease is never released by the script
//               lifecycle      health()['request_lifecycle'] (with options), else null
//   options   the RateLimiter's options (made once, at the worker's boot)
//   hostile   "THREAD:REQUEST" => what the request does after writing its line:
//             "throw" (an uncaught exception), "exit" (exit(3)), "fatal" (memory exhausted),
//             "timeout" (max_execution_time of 1 s overrun: one request thread only)
declare(strict_types=1);

use CheckoutGuard\RateLimiter;
use CheckoutGuard\Telemetry;

$t = (int) $argv[1];
$start = (int) $argv[2];
$cfg = json_decode((string) file_get_contents($argv[3]), true, 512, JSON_THROW_ON_ERROR);
$limiter = isset($cfg['options']) ? new RateLimiter($cfg['options']) : null;

/** Events in the JSONL file with these attributes. */
$count = static function (array $match) use ($cfg): int {
    $n = 0;
    clearstatcache();
    foreach (is_file($cfg['events']) ? file($cfg['events']) : [] as $line) {
        $e = json_decode($line, true);
        if (is_array($e) && array_intersect_assoc($match, $e) == $match) {
            $n++;
        }
    }
    return $n;
};

Telemetry::recordCall('boot', (int) (microtime(true) * 1000), 1.0, 200, ['thread' => $t, 'start' => $start]);
$first = true;

$handler = static function (array $req) use ($t, $start, $cfg, $limiter, $count, &$first): void {
    $r = $req['request'];
    $count0 = Telemetry::callCount();
    $prev = $first
        ? $count(['api' => 'boot', 'thread' => $t, 'start' => $start])
        : $count(['api' => 'psp', 'thread' => $t, 'request' => $r - 1]);
    $first = false;
    foreach ([200, 429] as $status) {
        Telemetry::recordCall('psp', (int) (microtime(true) * 1000), 1.5, $status, ['thread' => $t, 'request' => $r]);
    }
    $line = ['t' => $t, 'r' => $r, 'start' => $start, 'count0' => $count0, 'count1' => Telemetry::callCount(),
        'prev' => $prev, 'allowed' => null, 'lifecycle' => null];
    if ($limiter !== null) {
        $line['allowed'] = $limiter->acquire("shop-$t")->isAllowed();
        $line['lifecycle'] = $limiter->health(false)['request_lifecycle'];
    }
    file_put_contents($cfg['out'] . ".$t", json_encode($line) . "\n", FILE_APPEND);
    switch ($cfg['hostile']["$t:$r"] ?? '') {
        case 'throw':
            throw new RuntimeException("request $t:$r throws");
        case 'exit':
            exit(3);
        case 'fatal':
            ini_set('memory_limit', '4M');
            $s = str_repeat('x', 8 << 20);
            break;
        case 'timeout':
            set_time_limit(1);
            for ($i = 0;; $i++) {
                $i %= 1000;
            }
    }
};

while (frankenphp_handle_request($handler)) {
}
