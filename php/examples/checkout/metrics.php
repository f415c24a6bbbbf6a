<?php
// The checkout's counters for Prometheus (issue 40), in the text exposition format. nginx
// serves this file only on the ops listener, as /metrics (deploy/config/nginx-checkout.conf.tmpl).
declare(strict_types=1);

header('Content-Type: ' . \CheckoutGuard\Metrics::contentType());
echo \CheckoutGuard\Metrics::render();
