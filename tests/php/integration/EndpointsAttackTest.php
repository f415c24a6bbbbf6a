<?php
declare(strict_types=1);

namespace CheckoutGuard\Tests;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\RateLimiter;

/**
 * Failures found attacking issue 42's endpoints and priorities (helper epattack; the
 * reproductions are under repro/). Each test asserts what docs/endpoints.md or the issue
 * promise; each failed on the `endpoints` branch as of ce379a0 and passes since the fix.
 */
final class EndpointsAttackTest extends ModuleValkeyTestCase
{
    /**
     * A class whose share leaves less than a token of a bucket (capacity 1 and normal's
     * 0.2: 0.8 of a token) could never be admitted; each denial's retryAfter() would name a
     * short wait after which the call is denied again, forever. Refused up front, naming
     * the class and the bucket; and a call asking more tokens than its class can ever take
     * is refused as more than a bucket holds is. What can pass, passes after retryAfter().
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testAClassThatCouldNeverPassIsRefusedAndADenialsRetryAfterIsAWaitAfterWhichTheCallCanPass(string $engine): void
    {
        $classes = ['priorities' => ['critical' => 0, 'normal' => 0.2], 'default_priority' => 'normal'];
        $cases = [
            'endpoints.pi.update' => ['global' => self::bucket(100, 100), 'endpoints' => ['pi.update' => self::bucket(1, 1)]],
            'hot_shop' => ['global' => self::bucket(100, 100), 'hot_shop' => self::bucket(1, 1), 'hot_shops' => ['big']],
        ];
        foreach ($cases as $bucket => $more) {
            try {
                new RateLimiter(self::options($engine, $more + $classes));
                $this->fail("$bucket: accepted");
            } catch (ConfigurationException $e) {
                $this->assertStringContainsString('priorities.normal', $e->getMessage());
                $this->assertStringContainsString("$bucket holds 1 tokens: the class could never take one", $e->getMessage());
            }
        }
        // 5 tokens at 5/s: normal takes at most 4 at once.
        $l = new RateLimiter(self::options($engine, ['global' => self::bucket(5, 5), 'endpoints' => ['e' => self::bucket(5, 5)]] + $classes));
        try {
            $l->acquire('s', 5, endpoint: 'e');
            $this->fail('5 tokens of normal accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString('tokens must be from 1 to 4 for priority class "normal"', $e->getMessage());
        }
        $this->assertTrue($l->acquire('s', 5, endpoint: 'e', priority: 'critical')->isAllowed());
        $d = $l->acquire('s', 4, endpoint: 'e');
        $this->assertSame('global', $d->reason());
        $r = $l->acquire('s', 4, $d->retryAfter() + 0.3, 'e');
        $this->assertTrue($r->isAllowed(), sprintf('denied with retryAfter %.3f s; a reservation waiting 0.3 s longer: %s', $d->retryAfter(), $r->reason()));
    }

    /**
     * `limiter set endpoint.NAME=default` / `priorities.CLASS=default` for a name the
     * workers never declared: refused, nothing written (as `endpoint.NAME=C/R` is: "only
     * names the constructor declared"); today a typo is accepted and bumps the version.
     */
    public function testLimiterSetRefusesANameNotConfiguredEvenWithDefault(): void
    {
        $name = self::uniqueName('epa-cli');
        $l = new RateLimiter(self::options('lua', [
            'name' => $name,
            'global' => self::bucket(10),
            'endpoints' => ['charges.create' => self::bucket(5)],
            'priorities' => ['critical' => 0, 'normal' => 0.2],
        ]));
        $this->assertTrue($l->acquire('s')->isAllowed());
        [$code, , $err] = Cli::limiter(self::$valkey->url(), $name, 'set', 'endpoint.chargse.create=1/0.001');
        $this->assertNotSame(0, $code, 'a C/R change of an unknown endpoint is refused');
        foreach (['endpoint.chargse.create=default', 'priorities.crtical=default'] as $arg) {
            [$code, $out, $err] = Cli::limiter(self::$valkey->url(), $name, 'set', $arg);
            $this->assertNotSame(0, $code, "$arg: refused (a typo), got: $out");
            $this->assertStringContainsString('not configured', $err, $arg);
        }
        [, $out] = Cli::limiter(self::$valkey->url(), $name, 'status', '--json');
        $status = json_decode($out, true, 512, JSON_THROW_ON_ERROR);
        $this->assertSame([], $status['changes'] ?? [], 'nothing written: ' . json_encode($status['changes'] ?? null));
    }

    /**
     * A rolling deploy adds endpoint g (deploy B: e and g; deploy A, still running: e). The
     * on-call sets endpoint.g, then lowers endpoint.e to 2 during an incident: A's workers
     * must decide e at 2 (e is their constructor's; "only names the constructor declared"
     * can be changed, and g is simply not A's). Today the unknown g makes A drop every
     * endpoint override: A admits e's 5, over the live limit.
     *
     * @dataProvider engines
     */
    #[\PHPUnit\Framework\Attributes\DataProvider('engines')]
    public function testALiveEndpointLimitHoldsForWorkersThatDoNotKnowAnotherOverriddenEndpoint(string $engine): void
    {
        $name = self::uniqueName("epa-roll-$engine");
        $a = new RateLimiter(self::options($engine, ['name' => $name, 'global' => self::bucket(10), 'endpoints' => ['e' => self::bucket(5)]]));
        $b = new RateLimiter(self::options($engine, ['name' => $name, 'global' => self::bucket(10), 'endpoints' => ['e' => self::bucket(5), 'g' => self::bucket(5)]]));
        $this->assertTrue($b->acquire('setup')->isAllowed(), 'B publishes its settings');
        foreach (['endpoint.g=3/0.001', 'endpoint.e=2/0.001'] as $change) {
            [$code, , $err] = Cli::limiter(self::$valkey->url(), $name, 'set', $change);
            $this->assertSame(0, $code, "$change: $err");
        }
        $admitted = 0;
        for ($i = 0; $i < 6; $i++) {
            $admitted += (int) $a->acquire('s', endpoint: 'e')->isAllowed();
        }
        $this->assertSame(2, $admitted, 'deploy A on e after `limiter set endpoint.e=2/0.001`');
    }

    /**
     * After a deploy removes endpoint `legacy` that had a live override, the on-call cannot
     * lower another endpoint: `set endpoint.e=2/...` is refused naming `legacy`, which the
     * command does not mention (and the workers keep e at its constructor's 5).
     */
    public function testLiveChangesStillWorkAfterADeployRemovesAnOverriddenEndpoint(): void
    {
        $name = self::uniqueName('epa-removed');
        $old = new RateLimiter(self::options('lua', ['name' => $name, 'global' => self::bucket(10), 'endpoints' => ['e' => self::bucket(5), 'legacy' => self::bucket(5)]]));
        $this->assertTrue($old->acquire('setup')->isAllowed());
        [$code, , $err] = Cli::limiter(self::$valkey->url(), $name, 'set', 'endpoint.legacy=1/0.001');
        $this->assertSame(0, $code, $err);
        $new = new RateLimiter(self::options('lua', ['name' => $name, 'global' => self::bucket(10), 'endpoints' => ['e' => self::bucket(5)]]));
        $this->assertTrue($new->acquire('setup')->isAllowed(), 'the new deploy publishes its settings');
        [$code, $out, $err] = Cli::limiter(self::$valkey->url(), $name, 'set', 'endpoint.e=2/0.001');
        $this->assertSame(0, $code, "lowering e after the deploy: $out $err");
        $admitted = 0;
        for ($i = 0; $i < 6; $i++) {
            $admitted += (int) $new->acquire('s', endpoint: 'e')->isAllowed();
        }
        $this->assertSame(2, $admitted);
    }

    /**
     * An endpoint named "0" or "1" (digits only) cannot be told from a list once PHP has
     * made the keys integers: refused, saying so and what to do (a name with a letter).
     */
    public function testEndpointsNamedByDigitsAreRefusedSayingWhy(): void
    {
        try {
            new RateLimiter(self::options('lua', [
                'global' => self::bucket(10),
                'endpoints' => ['0' => self::bucket(2), '1' => self::bucket(2)],
            ]));
            $this->fail('accepted');
        } catch (ConfigurationException $e) {
            $this->assertStringContainsString("keys of digits only", $e->getMessage());
        }
        $l = new RateLimiter(self::options('lua', ['global' => self::bucket(10), 'endpoints' => ['e0' => self::bucket(2)]]));
        $this->assertTrue($l->acquire('s', endpoint: 'e0')->isAllowed());
    }

    /**
     * A share is kept in millionths: one that rounds to 0 (1e-7) silently keeps no reserve;
     * one that rounds to 1 (0.9999999) is refused as "not from 0 to 1" though it is. Either
     * accept what is asked or refuse it saying why (the precision).
     */
    public function testASharesPrecisionIsNamedWhenItChangesTheShare(): void
    {
        foreach ([1e-7, 0.9999999] as $share) {
            try {
                new RateLimiter(self::options('lua', ['global' => self::bucket(10), 'priorities' => ['c' => $share]]));
                $this->fail("priorities.c = $share is taken as " . ($share < 0.5 ? '0' : '1') . ' without a word');
            } catch (ConfigurationException $e) {
                $this->assertMatchesRegularExpression('/millionth|1e-6|0\.000001|precision/i', $e->getMessage());
            }
        }
    }
}
