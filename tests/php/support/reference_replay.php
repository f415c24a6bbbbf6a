<?php
declare(strict_types=1);

/*
 * Replays an operation log through the PHP reference model (LimiterModel.php) and prints
 * its answers, one JSON object a line: what the Rust test
 * crates/runtime/tests/reference_models_agree.rs compares with the Rust reference
 * (model::step behind the in-memory store), so the two references cannot drift apart.
 *
 * stdin: {"options": {...RateLimiter options...}, "ops": [
 *   {"op": "acquire", "shop": "s", "n": 1, "t": 1750000000.123},
 *   {"op": "mark", "shop": "s", "ttl": 5, "t": ...},   (ttl >= 3600: marked for good)
 *   {"op": "unmark", "shop": "s"},
 *   {"op": "reset"},
 *   {"op": "feedback", "status": 429, "retry_after_us": 0, "t_us": 1750000000123000}]}
 * Times are Valkey's (the store's clock), exact: each operation happens at one instant.
 * A feedback's answer is the stored adaptive state afterwards; an acquire under the
 * adaptive option is decided at the share and pause that state gives at its instant.
 */

require __DIR__ . '/LimiterModel.php';

use CheckoutGuard\Tests\LimiterModel;

$in = json_decode((string) stream_get_contents(STDIN), true, 512, JSON_THROW_ON_ERROR);
$model = new LimiterModel($in['options']);
$adaptive = $model->adaptive();
foreach ($in['ops'] as $op) {
    switch ($op['op']) {
        case 'acquire':
            $t = (float) $op['t'];
            $model->expire($t);
            $permille = 1000;
            $paused = false;
            if ($adaptive !== null) {
                $state = $model->adaptState(0);
                $nowUs = (int) $op['t_us'];
                if ($state !== null) {
                    $permille = LimiterModel::permilleAt($state, $nowUs, $adaptive['floor'], $adaptive['recover']);
                    $paused = $nowUs < $state[3];
                }
            }
            $r = $model->acquire(0, (string) $op['shop'], (int) $op['n'], $t, $t, null, $permille, $paused);
            $out = ['allowed' => $r['allowed'], 'reason' => $r['reason'], 'remaining' => $r['remaining'], 'hot_shop' => $r['isHotShop']];
            break;
        case 'mark':
            $ttl = (int) $op['ttl'];
            if ($ttl >= 3600) {
                $model->markHot(0, (string) $op['shop']);
            } else {
                $until = (float) $op['t'] + $ttl;
                $model->markUntil(0, (string) $op['shop'], $until, $until);
            }
            $out = ['ok' => true];
            break;
        case 'unmark':
            $model->unmarkHot(0, (string) $op['shop']);
            $out = ['ok' => true];
            break;
        case 'reset':
            $model->reset(0);
            $out = ['ok' => true];
            break;
        case 'feedback':
            $a = $adaptive;
            if ($a === null || !$model->throttles((int) $op['status'])) {
                $out = ['state' => $model->adaptState(0)];
                break;
            }
            $state = LimiterModel::feedbackOutcome($model->adaptState(0), (int) $op['t_us'], $a['floor'], $a['recover'], $a['decrease'], (int) $op['retry_after_us'])['state'];
            $model->setAdaptState(0, $state);
            $out = ['state' => $state];
            break;
        default:
            throw new InvalidArgumentException('unknown operation ' . json_encode($op));
    }
    echo json_encode($out), "\n";
}
