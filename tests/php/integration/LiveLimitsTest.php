<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\RateLimiter;

/**
 * Live limits and the on-call CLI against the test Valkey: `checkout-guard limiter set`
 * changes a running limiter's buckets (validated like the constructor, nothing written
 * when refused), the next decision of every worker uses them, the change is recorded
 * (stream in Valkey, RateLimitChange event), and `status`, `hot`, `unhot` show and steer.
 */
final class LiveLimitsTest extends LimiterTestCase
{
    private EventLog $log;

    protected function setUp(): void
    {
        $this->log = new EventLog(self::redis());
        $this->log->mark();
    }

    private function named(string $name): RateLimiter
    {
        return $this->limiter([
            'name' => $name,
            'global' => self::bucket(10),
            'hot_lane' => self::bucket(6),
            'hot_shop' => self::bucket(3),
        ]);
    }

    private function changeEvents(): array
    {
        return array_values(array_filter($this->log->jsonl(), fn ($e) => $e['eventType'] === 'RateLimitChange'));
    }

    public function testALiveChangeIsUsedByTheNextDecisionAndRecorded(): void
    {
        $name = self::uniqueName('live');
        $l = $this->named($name);
        $this->assertSame(9, $l->acquire('s')->remaining(), 'constructor values, settings published');
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'set', 'global=100/0.001', '--by', 'alice');
        $this->assertSame(0, $code, $err);
        $this->assertStringContainsString('version 1 by alice', $out);
        $this->assertStringContainsString('old: global=10/0.001 hot_lane=6/0.001 hot_shop=3/0.001', $out);
        $this->assertStringContainsString('new: global=100/0.001 hot_lane=6/0.001 hot_shop=3/0.001', $out);
        // The very next decision, in this process and in a new limiter object (a new request).
        // The bucket's level carries over (9 tokens, not a fresh 100), then refills at the
        // new rate.
        $this->assertSame(8, $l->acquire('s')->remaining());
        $this->assertSame(7, $this->named($name)->acquire('s')->remaining());
        $events = $this->changeEvents();
        $this->assertCount(1, $events, 'one event per worker and change');
        $this->assertSame(
            [$name, 1, 'alice', 'global=10/0.001 hot_lane=6/0.001 hot_shop=3/0.001', 'global=100/0.001 hot_lane=6/0.001 hot_shop=3/0.001', null],
            [$events[0]['limiter'], $events[0]['version'], $events[0]['changed_by'], $events[0]['old'], $events[0]['new'], $events[0]['error']]
        );
        // Back to the constructor's values.
        [$code, , $err] = Cli::limiter(self::url(), $name, 'set', 'global=default');
        $this->assertSame(0, $code, $err);
        $this->assertSame(6, $l->acquire('s')->remaining(), 'the constructor bucket again, the 7 tokens left carry over');
        // Both changes are in the limiter's change stream.
        $this->assertCount(2, self::redis()->xRange("{cg:$name}:changes", '-', '+'));
    }

    public function testInvalidChangesAreRefusedByNameAndNothingIsWritten(): void
    {
        $name = self::uniqueName('live');
        $this->named($name)->acquire('s');
        $cases = [
            ['global=5/0.001', 'hot_lane.capacity may not exceed global.capacity'],
            ['global=0/1', 'global.capacity'],
            ['hot_shop=3/-1', 'hot_shop.refill_per_second'],
            ['hot_shop=x/1', 'hot_shop.capacity'],
            ['lane=5/5', 'BUCKET one of global, hot_lane, hot_shop'],
        ];
        foreach ($cases as [$arg, $message]) {
            [$code, $out, $err] = Cli::limiter(self::url(), $name, 'set', $arg);
            $this->assertSame(2, $code, $arg);
            $this->assertStringContainsString($message, $err, $arg);
            $this->assertSame('', $out);
        }
        $this->assertSame(0, (int) self::redis()->exists("{cg:$name}:limits", "{cg:$name}:limits:v", "{cg:$name}:changes"));
        // A limiter no worker has run is refused too: nothing to validate against.
        [$code, , $err] = Cli::limiter(self::url(), self::uniqueName('never'), 'set', 'global=5/5');
        $this->assertSame(2, $code);
        $this->assertStringContainsString('no settings published', $err);
    }

    public function testLimitsWrittenByHandThatAreInvalidKeepTheConstructorValues(): void
    {
        $name = self::uniqueName('live');
        $l = $this->named($name);
        $l->acquire('s');
        $r = self::redis();
        $r->hMSet("{cg:$name}:limits", ['global' => '2/1', 'by' => 'someone']);
        $r->set("{cg:$name}:limits:v", '7');
        // hot_lane (6) above global (2): refused as the constructor would, decisions go on.
        $this->assertSame(8, $l->acquire('s')->remaining());
        $this->assertSame(7, $l->acquire('s')->remaining());
        $events = $this->changeEvents();
        $this->assertCount(1, $events, 'read once, not on every call');
        $this->assertStringContainsString('hot_lane.capacity may not exceed global.capacity', $events[0]['error']);
        $this->assertSame($events[0]['old'], $events[0]['new']);
        // Garbage, then valid limits: the version is limits:v's, whatever the hash holds.
        $r->hMSet("{cg:$name}:limits", ['global' => 'lots', 'version' => '99']);
        $r->set("{cg:$name}:limits:v", '8');
        $this->assertSame(6, $l->acquire('s')->remaining(), 'constructor values, decisions go on');
        $r->del("{cg:$name}:limits");
        $r->hMSet("{cg:$name}:limits", ['global' => '50/0.001']);
        $r->set("{cg:$name}:limits:v", '9');
        // The 6 tokens left carry over into the bigger bucket.
        $this->assertSame(5, $l->acquire('s')->remaining());
        $this->assertSame(4, $l->acquire('s')->remaining());
        $events = $this->changeEvents();
        $this->assertCount(3, $events);
        $this->assertStringContainsString('stored live limits unreadable', $events[1]['error']);
        $this->assertSame([9, null], [$events[2]['version'], $events[2]['error']]);
    }

    public function testHotUnhotAndStatusFromTheCommandLine(): void
    {
        $name = self::uniqueName('oncall');
        $l = $this->named($name);
        $this->assertSame(['allowed' => 10, 'global' => 2], self::drain($l, 's', 12));
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'hot', 'flash sale', '--ttl', '120');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($l->isHot('flash sale'));
        \CheckoutGuard\Telemetry::flush();
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'status', '--json', '--events-key', EventLog::streamKey());
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame('global=10/0.001 hot_lane=6/0.001 hot_shop=3/0.001', $st['limits']);
        $this->assertSame(['bucket' => 'global', 'capacity' => 10, 'tokens' => 0], $st['buckets'][0]);
        $this->assertSame(['bucket' => 'hot_lane', 'capacity' => 6, 'tokens' => 6], $st['buckets'][1]);
        $this->assertCount(1, $st['hot_shops']);
        $this->assertSame(['flash sale', 'marked'], [$st['hot_shops'][0]['shop'], $st['hot_shops'][0]['kind']]);
        $this->assertGreaterThan(110_000, $st['hot_shops'][0]['ttl_ms']);
        $this->assertSame(['global' => 2], $st['decisions'], 'the two denials, from the events stream');
        [$code, $text] = Cli::limiter(self::url(), $name, 'status', '--events-key', EventLog::streamKey());
        $this->assertSame(0, $code);
        $this->assertStringContainsString('bucket global: 0 of 10 tokens', $text);
        $this->assertStringContainsString('hot shop "flash sale": marked, until', $text);
        $this->assertStringContainsString('denied/unavailable in the last 60 s: global 2', $text);

        [$code, $out] = Cli::limiter(self::url(), $name, 'unhot', 'flash sale');
        $this->assertSame(0, $code);
        $this->assertStringContainsString('no longer marked hot', $out);
        $this->assertFalse($l->isHot('flash sale'));
        [$code, , $err] = Cli::limiter(self::url(), $name, 'hot', "bad\x01shop");
        $this->assertSame(2, $code);
        $this->assertStringContainsString('shopId', $err);
        [$code, , $err] = Cli::limiter(self::url(), 'bad name!', 'status');
        $this->assertSame(2, $code);
        $this->assertStringContainsString('name', $err);
    }

    public function testShopIdsThatAreNotUtf8AreShownDistinctlyAndTakenBackByHotAndUnhot(): void
    {
        $name = self::uniqueName('oncall-bytes');
        $l = $this->named($name);
        // Two shops that a lossy rendering shows alike, one that is valid UTF-8 and holds
        // what looks like an escape, and one with a backslash.
        $shops = ["shop-\xff" => 'shop-\\xff', "shop-\xfe" => 'shop-\\xfe', 'shop-\\xff' => 'shop-\\\\xff', 'a\\b' => 'a\\\\b', "caf\u{e9}" => "caf\u{e9}"];
        foreach (array_keys($shops) as $shop) {
            $l->markHot((string) $shop, 600);
        }
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'status', '--json');
        $this->assertSame(0, $code, $err);
        $st = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $shown = array_column($st['hot_shops'], 'shop', 'shop_hex');
        ksort($shown);
        $want = [];
        foreach ($shops as $raw => $escaped) {
            $want[bin2hex((string) $raw)] = $escaped;
        }
        ksort($want);
        $this->assertSame($want, $shown, 'every shop distinct, escaped, with its bytes in hex');
        [$code, $text] = Cli::limiter(self::url(), $name, 'status');
        $this->assertSame(0, $code);
        foreach ($shops as $escaped) {
            $this->assertStringContainsString("hot shop \"$escaped\": marked, until", $text);
        }
        // The shown form ends the mark of exactly that shop, in Valkey.
        foreach ($shops as $raw => $escaped) {
            $raw = (string) $raw;
            $this->assertTrue($l->isHot($raw));
            [$code, $out, $err] = Cli::limiter(self::url(), $name, 'unhot', $escaped);
            $this->assertSame(0, $code, $err);
            $this->assertStringContainsString("shop \"$escaped\" no longer marked hot", $out);
            $this->assertFalse($l->isHot($raw), "$escaped: mark ended");
            $this->assertSame(0, self::redis()->exists("{cg:$name}:hot:$raw"), "$escaped: flag gone");
        }
        // And hot takes it back the same way. (Valkey now holds nothing of this limiter: it
        // never decided and every mark is gone, so its name is unknown without --new-limiter.)
        [$code, , $err] = Cli::limiter(self::url(), $name, 'hot', 'shop-\\xff', '--ttl', '60');
        $this->assertSame(2, $code);
        $this->assertStringContainsString("unknown limiter \"$name\"", $err);
        $this->assertFalse($l->isHot("shop-\xff"));
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'hot', 'shop-\\xff', '--ttl', '60', '--new-limiter');
        $this->assertSame(0, $code, $err);
        $this->assertTrue($l->isHot("shop-\xff"));
        $this->assertFalse($l->isHot("shop-\xfe"));
        $this->assertFalse($l->isHot('shop-\\xff'));
        // The raw bytes as an argument (bash's $'shop-\xff') are that shop too.
        [$code, $out, $err] = Cli::limiter(self::url(), $name, 'unhot', "shop-\xff");
        $this->assertSame(0, $code, $err);
        $this->assertStringContainsString('shop "shop-\\xff" no longer marked hot', $out);
        $this->assertFalse($l->isHot("shop-\xff"));
        // A backslash that is no escape is refused, naming the form, and nothing is marked.
        [$code, , $err] = Cli::limiter(self::url(), $name, 'hot', 'a\\b');
        $this->assertSame(2, $code);
        $this->assertStringContainsString('bad escape', $err);
        $this->assertFalse($l->isHot('a\\b'));
    }
}
