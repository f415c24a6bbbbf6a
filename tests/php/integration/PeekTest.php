<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Telemetry;

/** `peek()`: what acquire() would answer now, taking nothing and recording nothing. */
final class PeekTest extends LimiterTestCase
{
    public function testAPeekAnswersAsAcquireWouldAndTakesNothing(): void
    {
        foreach (['lua', 'module'] as $engine) {
            $v = new ValkeyProcess();
            $v->start(['--loadmodule', self::valkeyModule()]);
            try {
                $l = new \CheckoutGuard\RateLimiter([
                    'name' => self::uniqueName("peek-$engine"),
                    'url' => $v->url(),
                    'global' => self::bucket(3),
                    'hot_shop' => self::bucket(2),
                    'hot_shops' => ['flash'],
                    'engine' => $engine,
                ]);
                foreach (['flash', 'flash', 'other', 'flash'] as $i => $shop) {
                    $peeked = $l->peek($shop);
                    $this->assertSame($peeked->isAllowed(), $l->peek($shop)->isAllowed(), "$engine: a second peek sees the same");
                    $taken = $l->acquire($shop);
                    $this->assertSame(
                        [$taken->isAllowed(), $taken->reason(), $taken->remaining(), $taken->isHotShop()],
                        [$peeked->isAllowed(), $peeked->reason(), $peeked->remaining(), $peeked->isHotShop()],
                        "$engine, call $i ($shop)"
                    );
                }
                $d = $l->peek('flash');
                $this->assertSame([false, 'global'], [$d->isAllowed(), $d->reason()], $engine);
                $this->assertGreaterThan(0.0, $d->retryAfter());
            } finally {
                $v->stop();
            }
        }
    }

    public function testAPeekRecordsNoEventAndChecksItsArguments(): void
    {
        $l = $this->limiter(['global' => self::bucket(1)]);
        $l->acquire('s');
        $before = Telemetry::stats()['decisions'];
        $this->assertFalse($l->peek('s')->isAllowed());
        $this->assertSame($before, Telemetry::stats()['decisions'], 'a peek is not a decision');
        $this->expectException(ConfigurationException::class);
        $l->peek('s', 0);
    }

    /**
     * A peek that is the first call to meet a live change reloads the limits (as
     * acquire() would); the acquire() after it decides with them already. The worker's
     * RateLimitChange is recorded once, by the peek.
     */
    public function testAPeekThatMeetsALiveChangeDoesNotSwallowTheChangeEvent(): void
    {
        $log = new EventLog(self::redis());
        $name = self::uniqueName('peek-change');
        $l = $this->limiter(['name' => $name, 'global' => self::bucket(10)]);
        $this->assertTrue($l->acquire('s')->isAllowed(), 'settings published');
        $log->mark();
        [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'global=20/0.001');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($l->peek('s')->isAllowed());
        $this->assertTrue($l->acquire('s')->isAllowed());
        $changes = array_values(array_filter($log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitChange'));
        $this->assertCount(1, $changes, 'the change this worker picked up is recorded once');
    }
}
