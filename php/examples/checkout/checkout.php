<?php
// The example checkout, one request per purchase:
//   GET /checkout.php?shop=SHOP&item=ITEM&channel=card|konbini|carrier
// 1. fetch the item from the information API ("zone A"); 2. confirm; 3. pay through the
// payment API, asking the RateLimiter first. Answers 200 (paid), 503 + Retry-After (the
// limiter said no: try again shortly), or 502 (the provider refused or failed).
// With CHECKOUT_MAX_WAIT (ordinary shops) or CHECKOUT_HOT_MAX_WAIT (listed hot shops) set,
// the payment may wait that long for its token (bootstrap.php's max_wait_seconds()); when
// it did, the answer has X-Limiter-Waited: SECONDS and the step after the payment ('paid'
// or 'failed') the attribute limiter.waited (seconds).
// Every step is a CheckoutStep event (the purchase funnel); every API call an
// ExternalApiCall event; every limiter denial a RateLimitDecision event.
declare(strict_types=1);

require __DIR__ . '/bootstrap.php';

use CheckoutGuard\Http\RateLimitedClient;
use CheckoutGuard\Http\RateLimitedException;
use CheckoutGuard\Telemetry;
use Nyholm\Psr7\Factory\Psr17Factory;

$shop = (string) ($_GET['shop'] ?? '');
$itemId = (string) ($_GET['item'] ?? 'item-1');
$channel = (string) ($_GET['channel'] ?? 'card');
header('Content-Type: application/json');
if ($shop === '' || !in_array($channel, ['card', 'konbini', 'carrier'], true)) {
    http_response_code(400);
    echo json_encode(['error' => 'shop and a channel of card, konbini or carrier are required']);
    return;
}

$provider = env('CHECKOUT_PROVIDER_URL', 'http://127.0.0.1:8081');
$requests = new Psr17Factory();
[$items, $payments] = clients($shop);
$step = static fn (string $step, array $extra = []) => Telemetry::record(
    'CheckoutStep',
    ['step' => $step, 'shop.id' => $shop, 'payment.channel' => $channel] + $extra
);

function answer(int $status, array $body, array $headers = []): void
{
    http_response_code($status);
    foreach ($headers as $name => $value) {
        header("$name: $value");
    }
    echo json_encode($body);
}

$step('cart');
try {
    $response = $items->sendRequest($requests->createRequest('GET', "$provider/items/" . rawurlencode($itemId)));
} catch (Psr\Http\Client\ClientExceptionInterface $e) {
    $step('failed', ['cause' => 'zoneA_unreachable']);
    answer(502, ['error' => 'item service unreachable']);
    return;
}
if ($response->getStatusCode() !== 200) {
    $step('failed', ['cause' => 'zoneA_' . $response->getStatusCode()]);
    answer(502, ['error' => 'item service answered ' . $response->getStatusCode()]);
    return;
}
$item = json_decode((string) $response->getBody(), true);
$step('confirm');

$charge = $requests->createRequest('POST', "$provider/v1/charges")
    ->withHeader('X-Shop-Id', $shop)
    ->withHeader('Content-Type', 'application/json')
    ->withBody($requests->createStream(json_encode(['item' => $item['id'], 'amount' => $item['price'], 'channel' => $channel])));
// How long the payment waited for its token: a response header and the next step's attribute.
$waited = static function () use ($payments): array {
    $decision = $payments instanceof RateLimitedClient ? $payments->lastDecision() : null;
    if ($decision === null || $decision->waited() <= 0.0) {
        return [];
    }
    header(sprintf('X-Limiter-Waited: %.4f', $decision->waited()));
    return ['limiter.waited' => round($decision->waited(), 4)];
};
try {
    $response = $payments->sendRequest($charge);
} catch (RateLimitedException $e) {
    $step('limited', ['reason' => $e->getDecision()->reason()]);
    answer(503, ['error' => 'busy, please retry', 'retry_after' => $e->retryAfterSeconds()], ['Retry-After' => (string) $e->retryAfterSeconds()]);
    return;
} catch (CheckoutGuard\UnavailableException $e) {
    // on_unavailable = "throw": this checkout chose to stop paying while the limiter
    // cannot ask Valkey, and says so (it never reaches the provider unlimited).
    $step('failed', ['cause' => 'limiter_unavailable']);
    answer(503, ['error' => 'limiter unavailable, please retry'], ['Retry-After' => '1']);
    return;
} catch (Psr\Http\Client\ClientExceptionInterface $e) {
    $step('failed', ['cause' => 'payment_unreachable'] + $waited());
    answer(502, ['error' => 'payment service unreachable']);
    return;
}
if ($response->getStatusCode() !== 200) {
    $step('failed', ['cause' => 'payment_' . $response->getStatusCode()] + $waited());
    answer(502, ['error' => 'payment refused: ' . $response->getStatusCode()]);
    return;
}
$step('paid', $waited());
answer(200, ['status' => 'paid', 'shop' => $shop, 'item' => $item['id']]);
