<?php
// The "zone A" regression (a change that quietly added a second call to the information
// API) as a small checkout: an information API (zone A) is called before the payment API.
// DuplicateFetchCheckout fetches the item in the confirm step and again in the pay step;
// ReusingCheckout fetches it once at the start and passes it along. Both call the APIs through a measured PSR-18 client, so a
// CallBudget test tells them apart.
declare(strict_types=1);

namespace CheckoutGuard\Examples;

use Psr\Http\Client\ClientInterface;
use Psr\Http\Message\RequestFactoryInterface;

final class ItemApi
{
    public function __construct(
        private ClientInterface $http,
        private RequestFactoryInterface $requests,
        private string $itemsUrl,
        private string $paymentUrl,
    ) {
    }

    public function item(string $id): array
    {
        $response = $this->http->sendRequest($this->requests->createRequest('GET', $this->itemsUrl . '&item=' . rawurlencode($id)));
        return ['id' => $id, 'status' => $response->getStatusCode()];
    }

    public function pay(array $item): int
    {
        return $this->http->sendRequest($this->requests->createRequest('POST', $this->paymentUrl . '&item=' . rawurlencode($item['id'])))->getStatusCode();
    }
}

/** The regression: confirm and pay each fetch the item again. */
final class DuplicateFetchCheckout
{
    public function __construct(private ItemApi $api)
    {
    }

    public function run(string $itemId): int
    {
        $this->confirm($itemId);
        return $this->payFor($itemId);
    }

    private function confirm(string $itemId): void
    {
        $this->api->item($itemId);
    }

    private function payFor(string $itemId): int
    {
        return $this->api->pay($this->api->item($itemId));
    }
}

/** The fix: fetch once at the start of the flow and pass the item along. */
final class ReusingCheckout
{
    public function __construct(private ItemApi $api)
    {
    }

    public function run(string $itemId): int
    {
        $item = $this->api->item($itemId);
        $this->confirm($item);
        return $this->api->pay($item);
    }

    private function confirm(array $item): void
    {
        // Shows the item to the buyer; nothing to fetch.
    }
}
