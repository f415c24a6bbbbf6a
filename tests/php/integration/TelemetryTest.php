<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Telemetry;

final class ProbeResponse
{
    public function __construct(private int $status)
    {
    }

    public function getStatusCode(): int
    {
        return $this->status;
    }
}

final class ProbeException extends \RuntimeException
{
    public function __construct(private ?ProbeResponse $response)
    {
        parent::__construct('provider said no');
    }

    public function getResponse(): ?ProbeResponse
    {
        return $this->response;
    }
}

/** Telemetry::measure/record/flush/callCount/stats, through the three real sinks. */
final class TelemetryTest extends LimiterTestCase
{
    private EventLog $log;

    protected function setUp(): void
    {
        $this->log = new EventLog(self::redis());
        $this->log->mark();
    }

    public function testMeasureReturnsTheResultAndRecordsTheStatusFoundInIt(): void
    {
        $object = new ProbeResponse(503);
        $this->assertSame(200, Telemetry::measure('zoneA', fn () => 200));
        $this->assertSame(['status' => 429, 'body' => 'x'], Telemetry::measure('zoneA', fn () => ['status' => 429, 'body' => 'x']));
        $this->assertSame($object, Telemetry::measure('payment', fn () => $object));
        $this->assertNull(Telemetry::measure('other', fn () => null));
        $before = (int) floor(microtime(true) * 1000);
        Telemetry::measure('slow', function () {
            usleep(30_000);
            return 201;
        });

        $events = $this->log->jsonl();
        $this->assertSame(
            [['zoneA', 200], ['zoneA', 429], ['payment', 503], ['other', 0], ['slow', 201]],
            array_map(fn ($e) => [$e['api'], $e['http.response.status_code']], $events)
        );
        $this->assertSame(['ExternalApiCall'], array_unique(array_column($events, 'eventType')));
        $this->assertSame([null, '429', '503', null, null], array_map(fn ($e) => $e['error.type'] ?? null, $events));
        $slow = $events[4];
        $this->assertGreaterThanOrEqual(30.0, $slow['duration.ms']);
        $this->assertLessThan(3000.0, $slow['duration.ms']);
        $this->assertGreaterThanOrEqual($before - 5, $slow['timestamp']);
        $this->assertLessThanOrEqual((int) (microtime(true) * 1000), $slow['timestamp']);
    }

    public function testMeasureRethrowsTheSameExceptionAndFindsTheStatusInItsResponse(): void
    {
        $withResponse = new ProbeException(new ProbeResponse(502));
        $noResponse = new ProbeException(null);
        $plain = new \LogicException('no response at all');
        foreach ([$withResponse, $noResponse, $plain] as $thrown) {
            try {
                Telemetry::measure('payment', function () use ($thrown) {
                    throw $thrown;
                });
                $this->fail('not rethrown');
            } catch (\Throwable $caught) {
                $this->assertSame($thrown, $caught, 'the very same object, trace intact');
            }
        }
        $events = $this->log->jsonl();
        $this->assertSame([502, 0, 0], array_column($events, 'http.response.status_code'));
        $this->assertSame(['502', ProbeException::class, \LogicException::class], array_column($events, 'error.type'));
    }

    public function testAttributesAreCheckedBeforeTheCallAndUrlsLoseSecrets(): void
    {
        $called = false;
        try {
            Telemetry::measure('zoneA', function () use (&$called) {
                $called = true;
            }, ['shop.id' => 's1', 'cart' => ['a']]);
            $this->fail('non-scalar accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('attributes["cart"] must be a scalar or null', $e->getMessage());
        }
        $this->assertFalse($called, 'a bad attribute must not cost an external call');

        Telemetry::measure('payment', fn () => 200, [
            'shop.id' => 'shop-7',
            'http.request.method' => 'POST',
            'url.full' => 'https://merchant:s3cret@pay.example:8443/v1/charges?card=4111111111111111#frag',
            'api' => 'spoofed',
            'amount' => 1200,
            'express' => true,
            'coupon' => null,
        ]);
        [$e] = $this->log->jsonl();
        $this->assertSame('https://pay.example:8443/v1/charges', $e['url.full']);
        $this->assertSame('pay.example', $e['server.address']);
        $this->assertSame('payment', $e['api'], 'measured attributes win');
        $this->assertSame(['shop-7', 'POST', 1200, true, null], [$e['shop.id'], $e['http.request.method'], $e['amount'], $e['express'], $e['coupon']]);
        $this->assertStringNotContainsString('s3cret', json_encode($e));
        $this->assertStringNotContainsString('4111', json_encode($e));
    }

    public function testNewRelicLimitsAttributesAndStringLengths(): void
    {
        $many = [];
        for ($i = 0; $i < 100; $i++) {
            $many["attr$i"] = $i;
        }
        $many['attr5'] = str_repeat('é', 200);
        Telemetry::measure('zoneA', fn () => 200, $many);
        [$e] = $this->log->jsonl();
        $this->assertCount(1 + 64, $e, 'eventType and at most 64 attributes');
        $this->assertSame(254, strlen($e['attr5']), 'cut to 255 bytes on a character boundary');
        [[$name, $agent]] = $this->log->newRelic();
        $this->assertSame('ExternalApiCall', $name);
        $this->assertCount(64, $agent);
    }

    public function testRecordValidatesAndWritesCustomEvents(): void
    {
        Telemetry::record('CheckoutStep', ['step' => 'confirm', 'shop.id' => 's1', 'payment.channel' => 'card']);
        foreach ([['bad-type', []], ['', []], ['Ok', ['x' => new \stdClass()]]] as [$type, $attrs]) {
            try {
                Telemetry::record($type, $attrs);
                $this->fail("accepted $type");
            } catch (ConfigurationException $e) {
                $this->assertMatchesRegularExpression('/eventType must be|attributes\["x"\]/', $e->getMessage());
            }
        }
        $events = $this->log->jsonl();
        $this->assertCount(1, $events);
        $this->assertSame(['CheckoutStep', 'confirm', 'card'], [$events[0]['eventType'], $events[0]['step'], $events[0]['payment.channel']]);
        $this->assertIsInt($events[0]['timestamp']);
    }

    public function testCallCountPerApiAndInTotal(): void
    {
        $zoneA = Telemetry::callCount('zoneA');
        $total = Telemetry::callCount();
        Telemetry::measure('zoneA', fn () => 200);
        Telemetry::measure('zoneA', fn () => 500);
        Telemetry::measure('payment', fn () => 200);
        Telemetry::record('CheckoutStep', ['step' => 'x']);
        $this->assertSame($zoneA + 2, Telemetry::callCount('zoneA'));
        $this->assertSame($total + 3, Telemetry::callCount(), 'only ExternalApiCall events count');
        $this->assertSame(0, Telemetry::callCount('never-called'));
    }

    public function testEverySinkGetsTheSameEvents(): void
    {
        Telemetry::measure('zoneA', fn () => 200, ['shop.id' => 'a']);
        Telemetry::measure('payment', fn () => 429, ['shop.id' => 'b', 'ratio' => 0.25]);
        Telemetry::record('CheckoutStep', ['step' => 'pay']);
        $jsonl = $this->log->jsonl();
        $this->assertCount(3, $jsonl);
        $this->assertSame($jsonl, $this->log->stream(), 'the stream holds the same JSON objects');
        $agent = array_map(fn ($e) => ['eventType' => $e[0]] + $e[1], $this->log->newRelic());
        $this->assertSame($jsonl, $agent, 'the agent is given the same names, types and values');
    }

    public function testDeniedAndUnavailableDecisionsAreRecordedAllowedOnesCounted(): void
    {
        $name = self::uniqueName('dec');
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(2)]);
        $before = Telemetry::stats()['decisions'];
        self::drain($l, 'shop-1', 5);
        $after = Telemetry::stats()['decisions'];
        $this->assertSame($before['allowed'] + 2, $after['allowed']);
        $this->assertSame($before['denied'] + 3, $after['denied']);

        $down = $this->limiter(['global' => self::bucket(2), 'url' => 'redis://127.0.0.1:' . ValkeyProcess::freePort()]);
        $down->acquire('shop-2');
        $this->assertSame($after['unavailable'] + 1, Telemetry::stats()['decisions']['unavailable']);

        $events = array_values(array_filter($this->log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitDecision'));
        $this->assertCount(4, $events);
        $this->assertSame([$name, 'shop-1', 'global', false], [$events[0]['limiter'], $events[0]['shop.id'], $events[0]['reason'], $events[0]['allowed']]);
        $this->assertGreaterThan(100.0, $events[0]['retry_after.s'], 'the frozen bucket refills in 1000 s');
        $this->assertSame(['unavailable', true], [$events[3]['reason'], $events[3]['allowed']]);
    }

    public function testADecisionWithAnEndpointOrClassSaysWhichInItsEvent(): void
    {
        $l = $this->limiter([
            'global' => self::bucket(3),
            'endpoints' => ['items' => self::bucket(2)],
            'priorities' => ['critical' => 0, 'normal' => 0.5],
        ]);
        $this->assertTrue($l->acquire('s', endpoint: 'items', priority: 'critical')->isAllowed());
        $this->assertTrue($l->acquire('s', endpoint: 'items', priority: 'critical')->isAllowed());
        $this->assertSame('endpoint', $l->acquire('s', endpoint: 'items')->reason());
        $this->assertSame('global', $l->acquire('s', priority: 'normal')->reason(), 'normal leaves 1.5 of 3: 1 left');
        $events = array_values(array_filter($this->log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitDecision'));
        $this->assertCount(2, $events);
        $this->assertSame(['endpoint', 'items'], [$events[0]['reason'], $events[0]['endpoint']]);
        $this->assertArrayNotHasKey('priority', $events[0], 'no class: no default_priority');
        $this->assertSame(['global', 'normal'], [$events[1]['reason'], $events[1]['priority']]);
        $this->assertArrayNotHasKey('endpoint', $events[1]);
    }

    public function testStatsCountRecordedWrittenAndDroppedPerSink(): void
    {
        $s0 = Telemetry::stats();
        Telemetry::measure('zoneA', fn () => 200);
        Telemetry::measure('zoneA', fn () => 200);
        $this->assertSame(2, Telemetry::flush());
        $s1 = Telemetry::stats();
        $this->assertTrue($s1['enabled']);
        $this->assertSame($s0['recorded'] + 2, $s1['recorded']);
        $this->assertSame(0, $s1['buffered']);
        foreach (['jsonl', 'newrelic', 'stream'] as $sink) {
            $this->assertSame($s0['sinks'][$sink]['written'] + 2, $s1['sinks'][$sink]['written'], $sink);
            $this->assertSame(0, $s1['sinks'][$sink]['dropped'], $sink);
        }
        $this->assertSame(0, Telemetry::flush(), 'nothing left to write');
    }
}
