<?php
// One request of the threaded suite (tests/php/zts/ThreadsTest.php), run by the threaded
// host: $argv = [script, THREAD, REQUEST, CONFIG]; CONFIG is a JSON file:
//   options   the RateLimiter's options (a limiter is made in every request, as an app does)
//   out       results go to OUT.THREAD, one JSON line per request (a file per thread: no
//             interleaving)
//   steps     per request number (or "*"): a list of steps, each [op, args...]:
//             ["acquire", shop, n, tokens, maxWait]  n decisions; each [allowed, reason,
//                                                     remaining, isHotShop, start, end, waited]
//             ["isHot", shop]                         bool
//             ["acquireUntil", shop, file]           decisions for shop until FILE exists
//                                                     (at most 30 s); how many were made
//             ["wait", file]                          until FILE exists (at most 30 s, else exit 4)
//             ["health"]                              local_denials_table
//             ["measure", api, how]                  Telemetry::measure of a callback that
//                                                     returns 42, or is hostile: "throw",
//                                                     "exit" (exit(7)), "fatal" (memory exhausted)
//             ["callCount", api]                     Telemetry::callCount(api)
//             ["record", type, n]                    n Telemetry::record(type, [thread, i])
//             ["touch", file]                        creates FILE.THREAD
//             ["create", file]                       creates FILE
//             ["waitAll", file, n]                   until FILE.0 .. FILE.(n-1) exist (30 s)
//             ["buffered"]                           Telemetry::stats()['buffered']
//             ["flush"]                              Telemetry::flush()
//             ["fork", k, n, shop]                   k children forked one after another,
//                                                     each making n decisions for shop and
//                                                     writing how many it got; each is
//                                                     "N decided" or "hung" (no answer in 5 s)
//   threads   per thread number: steps per request number, instead of "steps"
//   hostile_thread, hostile  that thread runs one of the "hostile" steps a request
//             (request R: step R mod count)
declare(strict_types=1);

use CheckoutGuard\RateLimiter;
use CheckoutGuard\Telemetry;

$t = (int) $argv[1];
$r = (int) $argv[2];
$cfg = json_decode((string) file_get_contents($argv[3]), true, 512, JSON_THROW_ON_ERROR);
$steps = $cfg['threads'][(string) $t][(string) $r] ?? $cfg['steps'][(string) $r] ?? $cfg['steps']['*'] ?? [];
if (isset($cfg['hostile_thread']) && $t === $cfg['hostile_thread']) {
    $steps = $cfg['hostile'];
    $steps = [$steps[$r % count($steps)]];
}
$l = isset($cfg['options']) ? new RateLimiter($cfg['options']) : null;
$out = ['t' => $t, 'r' => $r, 'steps' => []];
foreach ($steps as $step) {
    $op = array_shift($step);
    switch ($op) {
        case 'acquire':
            [$shop, $n, $tokens, $wait] = $step + [null, 1, 1, 0.0];
            $res = [];
            for ($i = 0; $i < $n; $i++) {
                $start = microtime(true);
                $d = $l->acquire($shop, $tokens, (float) $wait);
                $res[] = [$d->isAllowed(), $d->reason(), $d->remaining(), $d->isHotShop(), $start, microtime(true), $d->waited()];
            }
            $out['steps'][] = $res;
            break;
        case 'acquireUntil':
            $made = 0;
            $until = microtime(true) + 30;
            while (!file_exists($step[1]) && microtime(true) < $until) {
                for ($i = 0; $i < 20; $i++) {
                    $l->acquire($step[0]);
                }
                $made += 20;
                clearstatcache();
            }
            $out['steps'][] = $made;
            break;
        case 'isHot':
            $out['steps'][] = $l->isHot($step[0]);
            break;
        case 'wait':
            for ($i = 0; $i < 3000 && !file_exists($step[0]); $i++) {
                usleep(10_000);
                clearstatcache();
            }
            if (!file_exists($step[0])) {
                exit(4);
            }
            $out['steps'][] = true;
            break;
        case 'health':
            $out['steps'][] = $l->health(false)['local_denials_table'];
            break;
        case 'measure':
            [$api, $how] = $step;
            $out['steps'][] = Telemetry::measure($api, function () use ($how) {
                switch ($how) {
                    case 'throw':
                        throw new RuntimeException('hostile callback');
                    case 'exit':
                        exit(7);
                    case 'fatal':
                        ini_set('memory_limit', '8M');
                        return strlen(str_repeat('x', 64 << 20));
                }
                return 42;
            });
            break;
        case 'callCount':
            $out['steps'][] = Telemetry::callCount($step[0]);
            break;
        case 'record':
            for ($i = 0; $i < $step[1]; $i++) {
                Telemetry::record($step[0], ['thread' => $t, 'i' => $i]);
            }
            $out['steps'][] = $step[1];
            break;
        case 'touch':
            touch($step[0] . ".$t");
            $out['steps'][] = true;
            break;
        case 'create':
            touch($step[0]);
            $out['steps'][] = true;
            break;
        case 'waitAll':
            for ($i = 0; $i < 3000; $i++) {
                $all = true;
                for ($k = 0; $k < $step[1] && $all; $k++) {
                    $all = file_exists($step[0] . ".$k");
                }
                if ($all) {
                    break;
                }
                usleep(10_000);
                clearstatcache();
            }
            if (!$all) {
                exit(4);
            }
            $out['steps'][] = true;
            break;
        case 'fork':
            [$k, $n, $shop] = $step;
            $res = [];
            for ($c = 0; $c < $k; $c++) {
                $file = $cfg['out'] . ".fork.$t.$r.$c";
                $pid = pcntl_fork();
                if ($pid === 0) {
                    // The child: only this thread exists in it.
                    $got = 0;
                    for ($i = 0; $i < $n; $i++) {
                        $got += (int) ($l->acquire($shop)->reason() !== 'unavailable');
                    }
                    $why = $got === $n ? '' : ' (' . $l->health(false)['last_decision_error'] . ')';
                    file_put_contents($file, "$got decided$why");
                    posix_kill(getmypid(), SIGKILL);
                }
                $status = 0;
                for ($i = 0; $i < 500 && pcntl_waitpid($pid, $status, WNOHANG) === 0; $i++) {
                    usleep(10_000);
                }
                if ($i === 500) {
                    posix_kill($pid, SIGKILL);
                    pcntl_waitpid($pid, $status);
                    $res[] = 'hung';
                } else {
                    $res[] = (string) @file_get_contents($file);
                }
                @unlink($file);
            }
            $out['steps'][] = $res;
            break;
        case 'buffered':
            $out['steps'][] = Telemetry::stats()['buffered'];
            break;
        case 'flush':
            $out['steps'][] = Telemetry::flush();
            break;
        default:
            file_put_contents("php://stderr", "unknown step $op\n");
            exit(5);
    }
}
file_put_contents($cfg['out'] . ".$t", json_encode($out) . "\n", FILE_APPEND);
