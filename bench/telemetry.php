<?php
// Telemetry overhead, one mode per process (sinks are configured per process):
//   php bench/telemetry.php MODE N OUT_FILE
// MODE: direct | measure | hand_buffered | hand_append | flush
// Prints one JSON object: ns per call (or per flush).
declare(strict_types=1);

[, $mode, $n, $out] = $argv + [null, 'direct', '100000', '/dev/null'];
$n = (int) $n;
$call = static fn () => 200;
$attrs = ['shop.id' => 'shop-42', 'http.request.method' => 'POST', 'url.full' => 'https://pay.example/v1/charges?x=1'];

function hand_event(string $api, int $status, float $ms, array $attrs): array
{
    // What a PHP team writes by hand: the same attributes as ExternalApiCall.
    $e = ['eventType' => 'ExternalApiCall', 'timestamp' => (int) (microtime(true) * 1000), 'api' => $api,
        'http.response.status_code' => $status, 'duration.ms' => $ms] + $attrs;
    $e['url.full'] = strtok($e['url.full'], '?');
    return $e;
}

$t0 = hrtime(true);
switch ($mode) {
    case 'direct':
        for ($i = 0; $i < $n; $i++) {
            $call();
        }
        break;
    case 'measure':
        for ($i = 0; $i < $n; $i++) {
            CheckoutGuard\Telemetry::measure('payment', $call, $attrs);
        }
        CheckoutGuard\Telemetry::flush();
        break;
    case 'hand_buffered':
        $buffer = [];
        for ($i = 0; $i < $n; $i++) {
            $s = hrtime(true);
            $r = $call();
            $buffer[] = json_encode(hand_event('payment', $r, (hrtime(true) - $s) / 1e6, $attrs));
            if (count($buffer) >= 1000) {
                file_put_contents($out, implode("\n", $buffer) . "\n", FILE_APPEND | LOCK_EX);
                $buffer = [];
            }
        }
        if ($buffer) {
            file_put_contents($out, implode("\n", $buffer) . "\n", FILE_APPEND | LOCK_EX);
        }
        break;
    case 'hand_append':
        for ($i = 0; $i < $n; $i++) {
            $s = hrtime(true);
            $r = $call();
            file_put_contents($out, json_encode(hand_event('payment', $r, (hrtime(true) - $s) / 1e6, $attrs)) . "\n", FILE_APPEND | LOCK_EX);
        }
        break;
    case 'flush':
        // $n flushes of 1,000 recorded events each (buffer_size above 1,000, so nothing
        // flushes on its own); only the flush is timed.
        $total = 0;
        $samples = [];
        if ((int) ini_get("checkout_guard.events.buffer_size") <= 1000) {
            fwrite(STDERR, "flush mode needs checkout_guard.events.buffer_size > 1000\n");
            exit(2);
        }
        for ($k = 0; $k < $n; $k++) {
            for ($i = 0; $i < 1000; $i++) {
                CheckoutGuard\Telemetry::record('ExternalApiCall', ['api' => 'payment', 'http.response.status_code' => 200, 'duration.ms' => 12.5] + $attrs);
            }
            $s = hrtime(true);
            CheckoutGuard\Telemetry::flush();
            $samples[] = hrtime(true) - $s;
        }
        sort($samples);
        echo json_encode(['mode' => $mode, 'n' => $n, 'median_ns_per_flush' => $samples[intdiv(count($samples), 2)]]), "\n";
        exit(0);
}
$ns = hrtime(true) - $t0;
echo json_encode(['mode' => $mode, 'n' => $n, 'ns_per_call' => $ns / $n]), "\n";
