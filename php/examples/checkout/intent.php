<?php
// A checkout against the provider's endpoint API (issue 42; scripts/loadtest.sh endpoints):
//   GET /intent.php?shop=SHOP&item=ITEM
// 1. create the payment (POST /v1/payment_intents), 2. confirm it
// (POST /v1/payment_intents/{id}/confirm), each asking the endpoint limiter first
// (bootstrap.php's endpoint_limiter(), CHECKOUT_EP_LIMITS). Answers 200 (paid), 503 +
// Retry-After (the limiter said no), 502 (the provider refused or failed). The header
// X-Checkout-Stage says how far the sale got: none, created (created, not confirmed: a
// payment left behind), paid. The shop goes to the provider as ?shop= (its access log).
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Nyholm\Psr7\Factory\Psr17Factory;

$shop = (string) ($_GET['shop'] ?? '');
$itemId = (string) ($_GET['item'] ?? 'item-1');
header('Content-Type: application/json');
if ($shop === '') {
    http_response_code(400);
    echo json_encode(['error' => 'shop is required']);
    return;
}

$provider = env('CHECKOUT_PROVIDER_URL', 'http://127.0.0.1:8081');
$requests = new Psr17Factory();
$http = new GuzzleHttp\Client(['timeout' => 3, 'connect_timeout' => 1, 'http_errors' => false]);
$limiter = endpoint_limiter();
$q = '?shop=' . rawurlencode($shop);

function finish(int $status, string $stage, array $body, array $headers = []): void
{
    http_response_code($status);
    header("X-Checkout-Stage: $stage");
    foreach ($headers as $name => $value) {
        header("$name: $value");
    }
    echo json_encode(['stage' => $stage] + $body);
}

/** One call to $endpoint: the limiter's 503 or the provider's answer (null when unreachable). */
$call = function (string $endpoint, string $method, string $url, string $stage, ?string $body = null) use ($limiter, $shop, $http, $requests) {
    $decision = acquire_for($limiter, $shop, $endpoint);
    if (!$decision->isAllowed()) {
        $retry = max(1, (int) ceil($decision->retryAfter()));
        finish(503, $stage, ['error' => 'busy, please retry', 'endpoint' => $endpoint, 'reason' => $decision->reason()], ['Retry-After' => (string) $retry]);
        return null;
    }
    $request = $requests->createRequest($method, $url)->withHeader('X-Shop-Id', $shop);
    if ($body !== null) {
        $request = $request->withHeader('Content-Type', 'application/json')->withBody($requests->createStream($body));
    }
    try {
        $response = $http->sendRequest($request);
    } catch (Psr\Http\Client\ClientExceptionInterface $e) {
        finish(502, $stage, ['error' => "$endpoint unreachable"]);
        return null;
    }
    if ($response->getStatusCode() !== 200) {
        finish(502, $stage, ['error' => "$endpoint answered " . $response->getStatusCode()]);
        return null;
    }
    return json_decode((string) $response->getBody(), true);
};

$intent = $call('payment_intents.create', 'POST', "$provider/v1/payment_intents$q", 'none',
    json_encode(['item' => $itemId, 'amount' => 1200]));
if ($intent === null) {
    return;
}
$id = rawurlencode((string) $intent['id']);
$confirmed = $call('payment_intents.confirm', 'POST', "$provider/v1/payment_intents/$id/confirm$q", 'created');
if ($confirmed === null) {
    return;
}
finish(200, 'paid', ['status' => 'paid', 'shop' => $shop, 'payment' => $intent['id']]);
