<?php
// A read of the provider's endpoint API (issue 42; scripts/loadtest.sh endpoints), the
// flood's page: a product page's item data or a payment's status polled.
//   GET /lookup.php?shop=SHOP&what=items|retrieve&id=ID
// items: GET /v1/items/{id} ("zone A", the account's item API); retrieve: GET
// /v1/payment_intents/{id}. Asks the endpoint limiter first (bootstrap.php); answers 200,
// 503 + Retry-After (the limiter said no) or 502 (the provider refused or failed).
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use Nyholm\Psr7\Factory\Psr17Factory;

$shop = (string) ($_GET['shop'] ?? '');
$what = (string) ($_GET['what'] ?? 'items');
$id = (string) ($_GET['id'] ?? 'item-1');
header('Content-Type: application/json');
if ($shop === '' || !in_array($what, ['items', 'retrieve'], true) || $id === '') {
    http_response_code(400);
    echo json_encode(['error' => 'shop, an id and what=items or what=retrieve are required']);
    return;
}
$endpoint = $what === 'items' ? 'items' : 'payment_intents.retrieve';
$path = $what === 'items' ? '/v1/items/' : '/v1/payment_intents/';

$decision = acquire_for(endpoint_limiter(), $shop, $endpoint);
if (!$decision->isAllowed()) {
    http_response_code(503);
    header('Retry-After: ' . max(1, (int) ceil($decision->retryAfter())));
    echo json_encode(['error' => 'busy, please retry', 'endpoint' => $endpoint, 'reason' => $decision->reason()]);
    return;
}
$provider = env('CHECKOUT_PROVIDER_URL', 'http://127.0.0.1:8081');
$requests = new Psr17Factory();
$http = new GuzzleHttp\Client(['timeout' => 3, 'connect_timeout' => 1, 'http_errors' => false]);
try {
    $response = $http->sendRequest($requests->createRequest('GET', $provider . $path . rawurlencode($id) . '?shop=' . rawurlencode($shop)));
} catch (Psr\Http\Client\ClientExceptionInterface $e) {
    http_response_code(502);
    echo json_encode(['error' => "$endpoint unreachable"]);
    return;
}
if ($response->getStatusCode() !== 200) {
    http_response_code(502);
    echo json_encode(['error' => "$endpoint answered " . $response->getStatusCode()]);
    return;
}
echo (string) $response->getBody();
