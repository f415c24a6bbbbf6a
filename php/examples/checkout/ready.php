<?php
// Readiness probe (Kubernetes readinessProbe httpGet): 200 when this instance can take a
// checkout, 503 with the failed checks otherwise. Behind the same flow control as
// checkout.php on purpose: a saturated instance leaves the rotation until it recovers.
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

(new CheckoutGuard\Health\Readiness(limiter()))->respond();
