<?php
// No strict_types on purpose: these calls are weak-mode ones, as in most checkouts; the
// strict-mode calls go through support/StrictCalls.php.

namespace CheckoutGuard\Tests;

use CheckoutGuard\Limiter;
use CheckoutGuard\RateLimiter;
use PHPUnit\Framework\Attributes\DataProvider;

/**
 * The types PHP expects (src/args.rs): a shop id is an int or a string (an int is its
 * decimal string), scalars are coerced as PHP coerces them for a caller without
 * strict_types and refused for a caller with it, and every TypeError names the method,
 * the parameter, the expected and the given type, worded as PHP words its own.
 */
final class ArgumentTypesTest extends LimiterTestCase
{
    /** Tokens left in the global bucket (a peek's remaining() is what one more token would leave). */
    private static function left(RateLimiter $l): int
    {
        return $l->peek('someone-else')->remaining() + 1;
    }

    public function testAnIntShopIdIsItsDecimalStringSameBucketsSameMarks(): void
    {
        $l = $this->limiter(['global' => self::bucket(10), 'hot_shop' => self::bucket(2)]);
        $l->markHot(1234, 60);
        $this->assertTrue($l->isHot('1234'), 'marked as an int, hot as its string');
        $this->assertTrue($l->acquire(1234)->isAllowed());
        $this->assertTrue($l->acquire('1234')->isAllowed());
        $third = $l->acquire(1234);
        $this->assertSame(['hot_shop', true], [$third->reason(), $third->isHotShop()], 'one hot-shop bucket for 1234 and "1234"');
        $this->assertSame('hot_shop', $l->peek(1234)->reason());
        $l->unmarkHot('1234');
        $this->assertFalse($l->isHot(1234));
        $this->assertSame('allowed', $l->acquire(-5)->reason(), 'a negative int is "-5", a valid shop id');
        $this->assertFalse($l->isHot(PHP_INT_MAX));
    }

    public function testWeakModeCoercesNumericStringsAndIntsAsPhpDoes(): void
    {
        $l = $this->limiter(['global' => self::bucket(10)]);
        $d = $l->acquire('s', '3');
        $this->assertSame([true, 7], [$d->isAllowed(), $d->remaining()], '"3" tokens is 3 tokens');
        $d = $l->acquire('s', 2.0);
        $this->assertSame(5, $d->remaining(), 'a float without fraction is an int');
        $d = $l->acquire('s', true);
        $this->assertSame(4, $d->remaining(), 'true is 1, as PHP coerces a bool to int');
        $this->assertSame(3, $l->acquire('s', 1, '0')->remaining(), 'maxWaitSeconds "0"');
        $this->assertSame(2, $l->acquire(12.0)->remaining(), 'a float shop id without fraction is its int');
        $l->feedback('s', '429', '5');
        $l->markHot('s', '60');
        $this->assertTrue($l->isHot('s'));
        $this->assertIsArray($l->health('0'));
    }

    public function testStrictModeTakesExactTypesAndIntsForFloatsOnly(): void
    {
        $l = $this->limiter(['global' => self::bucket(10)]);
        $this->assertSame('allowed', StrictCalls::call($l, 'acquire', [1234])->reason(), 'an int shop id is exact in strict mode too');
        $this->assertSame('allowed', StrictCalls::call($l, 'acquire', ['s', 1, 0])->reason(), 'an int for a float, as PHP allows');
        foreach ([
            [['s', '3'], 'CheckoutGuard\RateLimiter::acquire(): Argument #2 ($tokens) must be of type int, string given'],
            [['s', 2.0], 'CheckoutGuard\RateLimiter::acquire(): Argument #2 ($tokens) must be of type int, float given'],
            [[12.0], 'CheckoutGuard\RateLimiter::acquire(): Argument #1 ($shopId) must be of type string|int, float given'],
            [[true], 'CheckoutGuard\RateLimiter::acquire(): Argument #1 ($shopId) must be of type string|int, bool given'],
            [['s', 1, '0.5'], 'CheckoutGuard\RateLimiter::acquire(): Argument #3 ($maxWaitSeconds) must be of type float, string given'],
        ] as [$args, $message]) {
            $e = StrictCalls::call($l, 'acquire', $args);
            $this->assertInstanceOf(\TypeError::class, $e, json_encode($args));
            $this->assertSame($message, $e->getMessage());
        }
        $e = StrictCalls::call($l, 'feedback', ['s', '429']);
        $this->assertSame('CheckoutGuard\RateLimiter::feedback(): Argument #2 ($statusCode) must be of type int, string given', $e->getMessage());
        $this->assertSame(8, self::left($l), 'the refused calls took nothing (two allowed took one each)');
    }

    public static function refusedEvenInWeakMode(): array
    {
        $obj = new \stdClass();
        return [
            'acquire shop array' => ['acquire', [[]], 'acquire(): Argument #1 ($shopId) must be of type string|int, array given'],
            'acquire shop object' => ['acquire', [$obj], 'acquire(): Argument #1 ($shopId) must be of type string|int, stdClass given'],
            'acquire tokens word' => ['acquire', ['s', 'x'], 'acquire(): Argument #2 ($tokens) must be of type int, string given'],
            'acquire wait array' => ['acquire', ['s', 1, []], 'acquire(): Argument #3 ($maxWaitSeconds) must be of type float, array given'],
            'peek tokens array' => ['peek', ['s', []], 'peek(): Argument #2 ($tokens) must be of type int, array given'],
            'markHot ttl word' => ['markHot', ['s', 'soon'], 'markHot(): Argument #2 ($ttlSeconds) must be of type int, string given'],
            'unmarkHot array' => ['unmarkHot', [[]], 'unmarkHot(): Argument #1 ($shopId) must be of type string|int, array given'],
            'isHot object' => ['isHot', [$obj], 'isHot(): Argument #1 ($shopId) must be of type string|int, stdClass given'],
            'anonymous class' => ['acquire', [new class () {}], 'acquire(): Argument #1 ($shopId) must be of type string|int, class@anonymous given'],
            'feedback status word' => ['feedback', ['s', 'too many'], 'feedback(): Argument #2 ($statusCode) must be of type int, string given'],
            'feedback retry array' => ['feedback', ['s', 429, []], 'feedback(): Argument #3 ($retryAfterSeconds) must be of type float, array given'],
            'health array' => ['health', [[]], 'health(): Argument #1 ($ping) must be of type bool, array given'],
        ];
    }

    /**
     * @dataProvider refusedEvenInWeakMode
     */
    #[DataProvider('refusedEvenInWeakMode')]
    public function testWhatWeakModeRefusesIsATypeErrorNamingParameterAndTypes(string $method, array $args, string $message): void
    {
        $l = $this->limiter(['global' => self::bucket(5)]);
        try {
            $l->$method(...$args);
            $this->fail("$method accepted " . json_encode($args));
        } catch (\TypeError $e) {
            $this->assertSame('CheckoutGuard\RateLimiter::' . $message, $e->getMessage());
        }
        $this->assertSame(5, self::left($l), 'nothing taken');
    }

    public function testPhpsDeprecationsOnTheWayAreTheApplicationsToTurnIntoExceptions(): void
    {
        $l = $this->limiter(['global' => self::bucket(5)]);
        set_error_handler(static function (int $no, string $msg): bool {
            throw new \ErrorException($msg, 0, $no);
        });
        try {
            foreach ([
                [[null], 'CheckoutGuard\RateLimiter::acquire(): Passing null to parameter #1 ($shopId) of type string|int is deprecated'],
                [['s', 1.5], 'Implicit conversion from float 1.5 to int loses precision'],
            ] as [$args, $message]) {
                try {
                    $l->acquire(...$args);
                    $this->fail('no deprecation for ' . json_encode($args));
                } catch (\ErrorException $e) {
                    $this->assertSame($message, $e->getMessage());
                    $this->assertSame(E_DEPRECATED, $e->getSeverity());
                }
            }
        } finally {
            restore_error_handler();
        }
        $this->assertSame(5, self::left($l), 'a call whose argument threw took nothing');
    }

    public function testNullForAParameterWithADefaultIsWhatPhpMakesOfIt(): void
    {
        $l = $this->limiter(['global' => self::bucket(5)]);
        $deprecations = [];
        set_error_handler(static function (int $no, string $msg) use (&$deprecations): bool {
            $deprecations[] = $msg;
            return true;
        }, E_DEPRECATED);
        try {
            try {
                $l->acquire('s', null);
                $this->fail('null tokens taken');
            } catch (\CheckoutGuard\ConfigurationException $e) {
                $this->assertStringContainsString('tokens must be from 1', $e->getMessage(), 'weak mode: null is 0 tokens, refused by the limiter');
            }
            $this->assertSame(0.0, (new \CheckoutGuard\Decision(false, null, null))->retryAfter());
        } finally {
            restore_error_handler();
        }
        $this->assertSame([
            'CheckoutGuard\RateLimiter::acquire(): Passing null to parameter #2 ($tokens) of type int is deprecated',
            'CheckoutGuard\Decision::__construct(): Passing null to parameter #3 ($retryAfter) of type float is deprecated',
        ], $deprecations);
        foreach ([
            [['s', null], 'CheckoutGuard\RateLimiter::acquire(): Argument #2 ($tokens) must be of type int, null given'],
            [['s', 1, null], 'CheckoutGuard\RateLimiter::acquire(): Argument #3 ($maxWaitSeconds) must be of type float, null given'],
        ] as [$args, $message]) {
            $e = StrictCalls::call($l, 'acquire', $args);
            $this->assertInstanceOf(\TypeError::class, $e);
            $this->assertSame($message, $e->getMessage());
        }
        foreach (['acquire' => [1, 2], 'peek' => [1], 'health' => [0]] as $method => $positions) {
            foreach ((new \ReflectionMethod(RateLimiter::class, $method))->getParameters() as $i => $p) {
                if (in_array($i, $positions, true)) {
                    $this->assertFalse($p->allowsNull(), "$method's \${$p->getName()} is not nullable (its default is not null)");
                }
            }
        }
    }

    public function testTelemetrysParametersAreTakenAsPhpTakesThem(): void
    {
        $before = \CheckoutGuard\Telemetry::callCount('types-api');
        \CheckoutGuard\Telemetry::recordCall('types-api', floor(microtime(true) * 1000), 12.5, 200);
        \CheckoutGuard\Telemetry::recordCall('types-api', '1796000000000', '1.5', 200);
        $this->assertSame($before + 2, \CheckoutGuard\Telemetry::callCount('types-api'), 'a whole float and numeric strings, as PHP coerces them');
        $this->assertSame(0, \CheckoutGuard\Telemetry::callCount(5), 'an int api name is its string');
        try {
            \CheckoutGuard\Telemetry::recordCall('types-api', 'soon', 1.0, 200);
            $this->fail('a word for timestampMs taken');
        } catch (\TypeError $e) {
            $this->assertSame('CheckoutGuard\Telemetry::recordCall(): Argument #2 ($timestampMs) must be of type int, string given', $e->getMessage());
        }
    }

    public function testAStringableShopIdIsItsStringAndWhatItsToStringThrowsPropagates(): void
    {
        $l = $this->limiter(['global' => self::bucket(5), 'hot_shop' => self::bucket(1), 'hot_shops' => ['from-object']]);
        $shop = new class () {
            public bool $throw = false;
            public function __toString(): string
            {
                if ($this->throw) {
                    throw new \LogicException('no id yet');
                }
                return 'from-object';
            }
        };
        $this->assertTrue($l->acquire($shop)->isHotShop(), 'weak mode: an object with __toString is its string');
        $shop->throw = true;
        try {
            $l->acquire($shop);
            $this->fail('the exception of __toString was lost');
        } catch (\LogicException $e) {
            $this->assertSame('no id yet', $e->getMessage());
        }
        $this->assertSame(4, self::left($l), 'only the first call took a token');
    }

    public static function unwindingToString(): array
    {
        return [
            'exit' => ['exit(7);', 7, ''],
            'fatal error' => ['ini_set("memory_limit", "4M"); str_repeat("x", 64 << 20);', 255, 'Allowed memory size'],
        ];
    }

    /**
     * The engine's coercion calls __toString: an exit in it ends the script with its
     * status, a fatal error bails out through the extension's frames safely (status 255,
     * never a signal), as without the extension.
     *
     * @dataProvider unwindingToString
     */
    #[DataProvider('unwindingToString')]
    public function testAnExitOrFatalErrorInAShopIdsToStringEndsTheScriptAsPhpWould(string $body, int $status, string $stderr): void
    {
        $code = '$l = new CheckoutGuard\RateLimiter(["name" => "types-child", "url" => "' . self::url() . '", "global" => ["capacity" => 5, "refill_per_second" => 1]]);
            $o = new class () { public function __toString(): string { ' . $body . ' return "x"; } };
            register_shutdown_function(function () { echo "shutdown;"; });
            $l->acquire($o);
            echo "not reached";';
        // The child uses PHP's allocator (and so its memory_limit) even under valgrind.
        $env = array_diff_key(getenv(), ['USE_ZEND_ALLOC' => true, 'ZEND_DONT_UNLOAD_MODULES' => true]);
        $p = proc_open(array_merge(self::phpWithExtension(), ['-r', $code]), [1 => ['pipe', 'w'], 2 => ['pipe', 'w']], $pipes, null, $env);
        $out = (string) stream_get_contents($pipes[1]);
        $err = (string) stream_get_contents($pipes[2]);
        $rc = proc_close($p);
        $this->assertSame($status, $rc, "stdout: $out\nstderr: $err");
        $this->assertStringNotContainsString('not reached', $out);
        $this->assertStringContainsString('shutdown;', $out, 'shutdown functions ran');
        if ($stderr !== '') {
            $this->assertStringContainsString($stderr, $out . $err);
        }
    }

    public function testReflectionAndTheInterfaceDeclareStringOrIntShopIds(): void
    {
        foreach ([RateLimiter::class, Limiter::class] as $class) {
            foreach (['acquire', 'peek', 'feedback', 'markHot', 'unmarkHot', 'isHot'] as $method) {
                $p = (new \ReflectionMethod($class, $method))->getParameters()[0];
                $this->assertSame('shopId', $p->getName());
                $this->assertSame('string|int', (string) $p->getType(), "$class::$method");
            }
        }
        $acquire = (new \ReflectionMethod(RateLimiter::class, 'acquire'))->getParameters();
        $this->assertSame(['int', 'float'], [(string) $acquire[1]->getType(), (string) $acquire[2]->getType()]);
        $this->assertSame([1, 0.0], [$acquire[1]->getDefaultValue(), $acquire[2]->getDefaultValue()]);
    }
}
