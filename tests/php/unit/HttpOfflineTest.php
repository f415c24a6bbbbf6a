<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\Http\ApiNamer;
use CheckoutGuard\Http\GuzzleMiddleware;
use GuzzleHttp\Client as Guzzle;
use GuzzleHttp\HandlerStack;
use GuzzleHttp\Promise\Utils;
use GuzzleHttp\Psr7\Request as GuzzleRequest;
use Nyholm\Psr7\Factory\Psr17Factory;

/**
 * The Guzzle middleware on a mock handler and the API namer: no network, no Valkey
 * (HttpTest and HttpFpmTest send requests).
 */
final class HttpOfflineTest extends LimiterTestCase
{
    private Psr17Factory $factory;

    protected function setUp(): void
    {
        $this->factory = new Psr17Factory();
    }

    public function testGuzzleMiddlewareHandsOnTheTransferWhenTheAttributesAreNotScalars(): void
    {
        $response = new \GuzzleHttp\Psr7\Response(200);
        $request = new GuzzleRequest('GET', 'https://items.example/x');
        $rejection = new \GuzzleHttp\Exception\ServerException('boom', $request, new \GuzzleHttp\Psr7\Response(503));
        $stack = HandlerStack::create(new \GuzzleHttp\Handler\MockHandler([$response, $rejection]));
        $stack->push(GuzzleMiddleware::measure(
            fn () => ['zoneA', null],
            fn () => ['shop.id' => new class () {
                public function __toString(): string
                {
                    return 's1';
                }
            }]
        ));
        $client = new Guzzle(['handler' => $stack, 'http_errors' => false]);

        // The transfer happened: the caller gets its response, not a ConfigurationException.
        $this->assertSame($response, $client->get('https://items.example/x'));
        $results = Utils::settle([$client->getAsync('https://items.example/x')])->wait();
        $this->assertSame('rejected', $results[0]['state']);
        $this->assertSame($rejection, $results[0]['reason'], 'the handler\'s very reason');
    }

    public function testApiNamerMatchesHostPathTemplateAndMethod(): void
    {
        $namer = new ApiNamer([
            ['api' => 'item', 'host' => 'items.example', 'path' => '/items/{id}'],
            ['api' => 'charge', 'host' => 'pay.example', 'path' => '/v1/charges', 'method' => 'POST'],
        ]);
        $f = $this->factory;
        $this->assertSame(['item', '/items/{id}'], $namer->name($f->createRequest('GET', 'https://Items.Example/items/42?x=1')));
        $this->assertSame(['items.example', null], $namer->name($f->createRequest('GET', 'https://items.example/items/42/reviews')));
        $this->assertSame(['charge', '/v1/charges'], $namer->name($f->createRequest('POST', 'https://pay.example/v1/charges')));
        $this->assertSame(['pay.example', null], $namer->name($f->createRequest('GET', 'https://pay.example/v1/charges')));
    }
}
