<?php
// Prometheus' scrape target: CheckoutGuard\Metrics, the counters every php-fpm worker of
// this master shares (decisions by limiter and reason, near_limit, local denials, the
// adaptive share, throttling answers, telemetry written/dropped, the calls' latency).
// nginx serves it as /metrics on the ops port only, through php-fpm's hidden status pool,
// so a scrape is answered while every checkout worker is busy and never from the public
// server (deploy/config/nginx-checkout.conf.tmpl). No limiter, no Valkey: reading the
// shared memory is all it does.
declare(strict_types=1);

use CheckoutGuard\Metrics;

/** Whether the Accept header asks for OpenMetrics (any q above 0), as Prometheus does. */
function wants_openmetrics(string $accept): bool
{
    foreach (explode(',', $accept) as $range) {
        $params = array_map('trim', explode(';', $range));
        if (strtolower(array_shift($params)) !== 'application/openmetrics-text') {
            continue;
        }
        $q = 1.0;
        foreach ($params as $p) {
            if (preg_match('/^q\s*=\s*([0-9.]+)$/i', $p, $m)) {
                $q = (float) $m[1];
            }
        }
        if ($q > 0) {
            return true;
        }
    }
    return false;
}

$openMetrics = wants_openmetrics($_SERVER['HTTP_ACCEPT'] ?? '');
header('Content-Type: ' . Metrics::contentType($openMetrics));
header('Cache-Control: no-store');
echo Metrics::render($openMetrics);
