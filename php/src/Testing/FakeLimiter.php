<?php
declare(strict_types=1);

namespace CheckoutGuard\Testing;

use CheckoutGuard\ConfigurationException;
use CheckoutGuard\Decision;
use CheckoutGuard\Limiter;

/**
 * A `CheckoutGuard\Limiter` for unit tests: in memory, no Valkey, nothing shared with the
 * extension's state (no connection, no local denials, no telemetry). Two ways to use it:
 *
 * Scripted: every call answers what the test says.
 *
 *     $fake = FakeLimiter::allowing();                  // every acquire() allowed
 *     $fake = FakeLimiter::denying('global', 2.5);      // every acquire() denied, retryAfter 2.5 s
 *     $fake->willReturn(new Decision(true), new Decision(false, 'hot_shop', 1.0));
 *                                                       // the next acquire()s, in order, then the default
 *
 * A token-bucket model on a fake clock: the RateLimiter's options (`global`, `hot_lane`,
 * `hot_shop`, `hot_shops`, `mode`, `name`, `endpoints`, `priorities`, `default_priority`;
 * the connection's options are accepted and ignored; `auto_hot`, `adaptive` and
 * `in_flight` are refused: not modelled; off, null or (not for `in_flight`) false, is
 * accepted), decided as the real limiter decides (docs/endpoints.md; all or nothing across
 * global, the call's endpoint, hot lane and hot shop; the denial's reason is the first
 * bucket in that order that lacks the tokens; a priority class leaves its share of every
 * bucket it draws from; retryAfter the wait until the slowest bucket reaches the class's
 * threshold; remaining the whole tokens of the tightest bucket after the decision; the
 * same whole-microsecond arithmetic). Time moves only by advance():
 *
 *     $fake = new FakeLimiter(['global' => ['capacity' => 2, 'refill_per_second' => 1.0]]);
 *     $fake->acquire('shop-1'); $fake->acquire('shop-1');
 *     $fake->acquire('shop-1')->retryAfter();   // 1.0
 *     $fake->advance(1.0);                      // one token back
 *
 * Shop IDs are int or string as for the real limiter (an int is its decimal string; 1 to
 * 128 bytes without control characters, else a ConfigurationException naming `shopId`);
 * every other argument is checked as the real limiter checks it, with the same messages.
 * A reservation (`maxWaitSeconds`) that is allowed moves the fake clock by its wait (the
 * real limiter sleeps); `waited()` says how long.
 *
 * acquire() and peek() take an endpoint and a priority class (`endpoint:`, `priority:`): a
 * name the options do not configure is a ConfigurationException naming it, as the real
 * limiter's. A scripted fake (allowing(), denying(), no options) configures nothing and
 * takes any name. The decision carries the endpoint named and the class decided in (the
 * named one, else `default_priority`) when the loaded extension's Decision takes them
 * (constructor parameters `endpoint` and `priority`, read back by Decision::endpoint() and
 * Decision::priority()); a denial by the endpoint's bucket
 * (reason "endpoint") needs an extension whose Decision knows that reason: with an older
 * one the fake throws a LogicException saying so rather than give another reason.
 *
 * It needs the extension loaded, not Valkey: Limiter, Decision and ConfigurationException
 * are the extension's.
 *
 * Every call that did not throw is recorded: calls() (method, shop, tokens; `endpoint` and
 * `priority` too when the call named them), acquired() (allowed acquire() calls),
 * decisions() and feedbackCalls().
 */
final class FakeLimiter implements Limiter
{
    /** The RateLimiter's options (crates/config/src/options/mod.rs, KNOWN). */
    private const KNOWN = [
        'name', 'global', 'hot_lane', 'hot_shop', 'hot_shops', 'url', 'timeout_ms',
        'on_unavailable', 'auto_hot', 'engine', 'tls', 'sentinel', 'mode', 'adaptive', 'in_flight',
        'endpoints', 'priorities', 'default_priority',
    ];
    private const LANES = ['global', 'hot_lane', 'hot_shop'];
    private const MAX_SHOP_ID_BYTES = 128;
    private const MAX_NAME_BYTES = 64;
    private const MAX_HOT_SHOPS = 10_000;
    private const MAX_CAPACITY = 1_000_000_000;
    private const MAX_REFILL_PER_SECOND = 1_000_000.0;
    private const MAX_RATE_ERROR = 0.001;
    private const MAX_REFILL_SECONDS = 10 * 365 * 86_400;
    private const MAX_TTL_SECONDS = 365 * 86_400;
    private const MAX_WAIT_US = 10_000_000;
    /** The reasons a denial may give (README, Decision::reason()); "endpoint" with an extension that knows it. */
    private const DENIAL_REASONS = [
        'provider', 'global', 'endpoint', 'hot_lane', 'hot_shop',
        'in_flight_global', 'in_flight_hot_lane', 'in_flight_hot_shop', 'unavailable',
    ];
    /** crates/config/src/options/endpoints.rs: most endpoints (and classes) one limiter takes. */
    private const MAX_ENDPOINTS = 1_000;
    /** A share's unit: parts per million of a bucket's capacity. */
    private const SHARE_UNIT = 1_000_000;

    private FakeClock $clock;

    /** @var array<string, array{capacity: int, interval: int, tolerance: int}>|null lane => bucket; null: scripted */
    private ?array $buckets = null;
    /** @var array<string, true> */
    private array $hotShops = [];
    private bool $shadow = false;
    private string $name = 'default';
    /** @var array<string, array{capacity: int, interval: int, tolerance: int}> the `endpoints` option, sorted by name */
    private array $endpoints = [];
    /** @var array<string, int>|null the `priorities` option (class => share in ppm), sorted by name; null: none */
    private ?array $priorities = null;
    private ?string $defaultPriority = null;

    /** What the loaded extension's Decision knows: the reason "endpoint", the endpoint and priority parameters. */
    private static ?bool $decisionKnowsEndpoint = null;
    private static ?bool $decisionTakesRoute = null;

    /** Scripted: the answer when nothing is queued (reason; null: allowed). */
    private ?string $defaultReason = null;
    private float $defaultRetryAfter = 0.0;

    /** @var list<Decision> */
    private array $queue = [];
    /** @var array<string, int> bucket ("global", "hot_lane", "hot_shop:<shop>", "endpoint:<name>") => TAT in µs */
    private array $tats = [];
    /** @var array<string, int> shop => when its mark runs out, µs */
    private array $marks = [];

    /** @var list<array{method: string, shop: ?string, tokens: ?int, endpoint?: string, priority?: string}> */
    private array $calls = [];
    /** @var list<Decision> */
    private array $decisions = [];
    /** @var array<string, int> shop => allowed acquire() calls */
    private array $acquired = [];
    /** @var list<array{shop: string, statusCode: int, retryAfterSeconds: ?float}> */
    private array $feedback = [];

    /**
     * @param array<string, mixed>|null $options the RateLimiter's options (see the class
     *        comment); null: scripted, every call allowed (as allowing())
     * @param FakeClock|null $clock the clock to decide by (default: a new one at 0)
     * @throws ConfigurationException bad options, named as the RateLimiter names them
     */
    public function __construct(?array $options = null, ?FakeClock $clock = null)
    {
        $this->clock = $clock ?? new FakeClock();
        if ($options !== null) {
            $this->configure($options);
        }
    }

    /** Scripted: every acquire() and peek() allowed (remaining PHP_INT_MAX: no bucket). */
    public static function allowing(?FakeClock $clock = null): self
    {
        return new self(null, $clock);
    }

    /**
     * Scripted: every acquire() and peek() denied with `$reason` (a denial's reason:
     * "global", "endpoint" (with an extension whose Decision knows it), "hot_lane",
     * "hot_shop", "provider", "in_flight_*", "unavailable") and `$retryAfter` seconds.
     */
    public static function denying(string $reason = 'global', float $retryAfter = 1.0, ?FakeClock $clock = null): self
    {
        $reasons = array_values(array_filter(self::DENIAL_REASONS, static fn (string $r) => $r !== 'endpoint' || self::decisionKnowsEndpoint()));
        if (!in_array($reason, $reasons, true)) {
            throw new ConfigurationException(sprintf(
                'checkout_guard: reason must be one of %s (a denial), got %s',
                implode(', ', $reasons),
                self::quote($reason)
            ));
        }
        if (!is_finite($retryAfter) || $retryAfter < 0.0) {
            throw new ConfigurationException('checkout_guard: retryAfter must be a number of seconds, 0 or more, got ' . self::debugFloat($retryAfter));
        }
        $fake = new self(null, $clock);
        $fake->defaultReason = $reason;
        $fake->defaultRetryAfter = $retryAfter;
        return $fake;
    }

    /**
     * Queues decisions: the next acquire() calls return them in order (taking nothing from
     * the model's buckets), then the fake answers as before. peek() answers the first
     * queued decision without taking it off the queue.
     */
    public function willReturn(Decision ...$next): self
    {
        array_push($this->queue, ...$next);
        return $this;
    }

    /** Moves the fake clock forward (seconds, 0 or more): buckets refill, marks run out. */
    public function advance(float $seconds): self
    {
        $this->clock->advance($seconds);
        return $this;
    }

    public function clock(): FakeClock
    {
        return $this->clock;
    }

    /** The `name` option ("default" without it, and for a scripted fake). */
    public function name(): string
    {
        return $this->name;
    }

    // ---- Limiter ---------------------------------------------------------------------

    /**
     * @param ?string $endpoint one of the `endpoints` option's names (null: none)
     * @param ?string $priority one of the `priorities` option's classes (null: `default_priority`)
     */
    public function acquire(string|int $shopId, int $tokens = 1, float $maxWaitSeconds = 0.0, ?string $endpoint = null, ?string $priority = null): Decision
    {
        $maxWaitUs = self::maxWaitUs($maxWaitSeconds);
        $shop = self::shop($shopId);
        $this->checkTokens($tokens);
        [$class, $sharePpm] = $this->checkRoute($endpoint, $priority, $tokens);
        if ($this->queue !== []) {
            $d = array_shift($this->queue);
        } elseif ($this->buckets === null) {
            $d = $this->scripted($shop, $endpoint, $class);
        } else {
            $d = $this->decide($shop, $tokens, $maxWaitUs, false, $endpoint, $class, $sharePpm);
        }
        $this->record('acquire', $shop, $tokens, $endpoint, $priority);
        $this->decisions[] = $d;
        if ($d->isAllowed()) {
            $this->acquired[$shop] = ($this->acquired[$shop] ?? 0) + 1;
        }
        return $d;
    }

    public function peek(string|int $shopId, int $tokens = 1, ?string $endpoint = null, ?string $priority = null): Decision
    {
        $shop = self::shop($shopId);
        $this->checkTokens($tokens);
        [$class, $sharePpm] = $this->checkRoute($endpoint, $priority, $tokens);
        if ($this->queue !== []) {
            $d = $this->queue[0];
        } elseif ($this->buckets === null) {
            $d = $this->scripted($shop, $endpoint, $class);
        } else {
            $d = $this->decide($shop, $tokens, 0, true, $endpoint, $class, $sharePpm);
        }
        $this->record('peek', $shop, $tokens, $endpoint, $priority);
        return $d;
    }

    public function feedback(string|int $shopId, int $statusCode, ?float $retryAfterSeconds = null): void
    {
        $shop = self::shop($shopId);
        if ($statusCode < 100 || $statusCode > 599) {
            throw new ConfigurationException("checkout_guard: statusCode must be an HTTP status code from 100 to 599, got $statusCode");
        }
        $r = $retryAfterSeconds ?? 0.0;
        if (is_nan($r) || $r < 0.0) {
            throw new ConfigurationException('checkout_guard: retryAfterSeconds must be a number of seconds, 0 or more (INF: the longest pause), got ' . self::debugFloat($r));
        }
        // Without the `adaptive` option (refused: not modelled) feedback changes nothing,
        // as the real limiter's; it is recorded for the test.
        $this->record('feedback', $shop, null);
        $this->feedback[] = ['shop' => $shop, 'statusCode' => $statusCode, 'retryAfterSeconds' => $retryAfterSeconds];
    }

    public function markHot(string|int $shopId, int $ttlSeconds): void
    {
        $shop = self::shop($shopId);
        if ($ttlSeconds < 1 || $ttlSeconds > self::MAX_TTL_SECONDS) {
            throw new ConfigurationException(sprintf('checkout_guard: ttlSeconds must be from 1 to %d, got %d', self::MAX_TTL_SECONDS, $ttlSeconds));
        }
        $this->marks[$shop] = $this->clock->nowUs() + $ttlSeconds * 1_000_000;
        $this->record('markHot', $shop, null);
    }

    public function unmarkHot(string|int $shopId): void
    {
        $shop = self::shop($shopId);
        unset($this->marks[$shop]);
        $this->record('unmarkHot', $shop, null);
    }

    public function isHot(string|int $shopId): bool
    {
        $shop = self::shop($shopId);
        $this->record('isHot', $shop, null);
        return $this->hot($shop);
    }

    /** Every bucket full again; hot marks stay (the queue and the records too). */
    public function reset(): void
    {
        $this->tats = [];
        $this->record('reset', null, null);
    }

    // ---- what the test asserts -------------------------------------------------------

    /**
     * Every call that did not throw, in order: the method, the shop ID as a string (null
     * for reset()) and the tokens (acquire() and peek(); null otherwise); `endpoint` and
     * `priority` when an acquire() or peek() named them (absent otherwise).
     *
     * @return list<array{method: string, shop: ?string, tokens: ?int, endpoint?: string, priority?: string}>
     */
    public function calls(): array
    {
        return $this->calls;
    }

    /** How many acquire() calls were allowed, for `$shopId` or (null) for every shop. */
    public function acquired(string|int|null $shopId = null): int
    {
        if ($shopId === null) {
            return array_sum($this->acquired);
        }
        return $this->acquired[(string) $shopId] ?? 0;
    }

    /** @return list<Decision> what acquire() returned, in order */
    public function decisions(): array
    {
        return $this->decisions;
    }

    /** @return list<array{shop: string, statusCode: int, retryAfterSeconds: ?float}> the feedback() calls, in order */
    public function feedbackCalls(): array
    {
        return $this->feedback;
    }

    // ---- the model -------------------------------------------------------------------

    private function hot(string $shop): bool
    {
        if (isset($this->hotShops[$shop])) {
            return true;
        }
        $until = $this->marks[$shop] ?? null;
        if ($until === null) {
            return false;
        }
        if ($this->clock->nowUs() >= $until) {
            unset($this->marks[$shop]);   // expired, as its key in Valkey
            return false;
        }
        return true;
    }

    private function scripted(string $shop, ?string $endpoint, ?string $class): Decision
    {
        $hot = $this->hot($shop);
        if ($this->defaultReason === null) {
            return self::decision([true, 'allowed', 0.0, PHP_INT_MAX, $hot], $endpoint, $class);
        }
        $hot = $hot || in_array($this->defaultReason, ['hot_lane', 'hot_shop', 'in_flight_hot_lane', 'in_flight_hot_shop'], true);
        return self::decision([false, $this->defaultReason, $this->defaultRetryAfter, 0, $hot], $endpoint, $class);
    }

    /**
     * One decision as crates/model/src/step.rs makes it (without live limits, auto_hot,
     * adaptive, in_flight) and crates/model/src/decision.rs reads it: the buckets in the
     * order a denial is named (global, the endpoint's, hot lane, hot shop), each of which
     * must keep the class's reserve (`$sharePpm` of its capacity) after the take.
     */
    private function decide(string $shop, int $tokens, int $maxWaitUs, bool $peek, ?string $endpoint, ?string $class, int $sharePpm): Decision
    {
        $now = $this->clock->nowUs();
        $hot = $this->hot($shop);
        $order = [['global', 'global', $this->buckets['global']]];
        if ($endpoint !== null) {
            $order[] = ['endpoint', "endpoint:$endpoint", $this->endpoints[$endpoint]];
        }
        foreach (['hot_lane', 'hot_shop'] as $lane) {
            if ($hot && isset($this->buckets[$lane])) {
                $order[] = [$lane, $lane === 'hot_shop' ? "hot_shop:$shop" : $lane, $this->buckets[$lane]];
            }
        }
        /** @var list<array{key: string, spec: array{capacity: int, interval: int, tolerance: int}, tat: int, room: int}> $applied */
        $applied = [];
        $reason = null;
        foreach ($order as [$bucket, $key, $spec]) {
            $tat = max($this->tats[$key] ?? $now, $now);
            // The class keeps its reserve: the bucket must hold `reserve` more than the cost.
            $room = $spec['tolerance'] - self::reserveUs($spec['tolerance'], $sharePpm);
            $applied[] = ['key' => $key, 'spec' => $spec, 'tat' => $tat, 'room' => $room];
            $cost = $tokens * $spec['interval'];
            if ($reason === null && ($cost > $room || $tat + $cost - $now > $room + $maxWaitUs)) {
                $reason = $bucket;
            }
        }
        $takeAt = $now;
        if ($reason === null) {
            foreach ($applied as $b) {
                $takeAt = max($takeAt, $b['tat'] + $tokens * $b['spec']['interval'] - $b['room']);
            }
            foreach ($applied as $i => $b) {
                $applied[$i]['tat'] = max($b['tat'], $takeAt) + $tokens * $b['spec']['interval'];
                if (!$peek) {
                    $this->tats[$b['key']] = $applied[$i]['tat'];
                }
            }
        }
        $remaining = PHP_INT_MAX;
        $waitUs = 0;
        foreach ($applied as $b) {
            $credit = $b['spec']['tolerance'] - (max($b['tat'], $now) - $now);
            $remaining = min($remaining, intdiv(max($credit, 0), $b['spec']['interval']));
            $reserve = $b['spec']['tolerance'] - $b['room'];
            $waitUs = max($waitUs, $tokens * $b['spec']['interval'] + $reserve - $credit);
        }
        $allowed = $reason === null;
        $reservationUs = $takeAt - $now;
        if ($this->shadow) {
            // Decision::into_shadow: let through; a reservation is not slept, its wait is
            // told as retryAfter.
            $retry = $allowed ? ($reservationUs > 0 ? $reservationUs / 1e6 : 0.0) : $waitUs / 1e6;
            return self::decision([true, $reason ?? 'allowed', $retry, $remaining, $hot, 0.0, true, $allowed], $endpoint, $class);
        }
        $waited = 0.0;
        if ($allowed && $reservationUs > 0 && !$peek) {
            // The real limiter sleeps until its tokens are there; the fake's clock moves.
            $this->clock->advance($reservationUs / 1e6);
            $waited = $reservationUs / 1e6;
        }
        return self::decision([$allowed, $reason ?? 'allowed', $allowed ? 0.0 : $waitUs / 1e6, $remaining, $hot, $waited], $endpoint, $class);
    }

    /**
     * crates/model/src/endpoints.rs reserve_us: the reserve (µs) a class with share `$ppm`
     * leaves in a bucket of `$toleranceUs`, ceil(tolerance * ppm / 1e6), computed as the
     * engines compute it (tolerance = q * 1e6 + r: q * ppm + ceil(r * ppm / 1e6)).
     */
    private static function reserveUs(int $toleranceUs, int $ppm): int
    {
        if ($ppm <= 0) {
            return 0;
        }
        $q = intdiv($toleranceUs, self::SHARE_UNIT);
        $r = $toleranceUs % self::SHARE_UNIT;
        return $q * $ppm + intdiv($r * $ppm + self::SHARE_UNIT - 1, self::SHARE_UNIT);
    }

    /**
     * A Decision from the constructor's positional arguments, with the endpoint named and
     * the class decided in when the loaded extension's Decision takes them. A denial by the
     * endpoint's bucket needs a Decision that knows the reason "endpoint".
     *
     * @param list<mixed> $args
     */
    private static function decision(array $args, ?string $endpoint, ?string $class): Decision
    {
        if ($args[1] === 'endpoint' && !self::decisionKnowsEndpoint()) {
            throw new \LogicException('CheckoutGuard\Testing\FakeLimiter: a denial by the endpoint\'s bucket (reason "endpoint") needs a checkout_guard extension whose Decision knows that reason (issue 42, docs/endpoints.md); the loaded one does not');
        }
        if (self::$decisionTakesRoute ??= self::decisionTakes('endpoint', 'priority')) {
            $args['endpoint'] = $endpoint;
            $args['priority'] = $class;
        }
        return new Decision(...$args);
    }

    /** Whether the loaded extension's Decision knows the reason "endpoint". */
    private static function decisionKnowsEndpoint(): bool
    {
        if (self::$decisionKnowsEndpoint === null) {
            try {
                new Decision(false, 'endpoint');
                self::$decisionKnowsEndpoint = true;
            } catch (ConfigurationException) {
                self::$decisionKnowsEndpoint = false;
            }
        }
        return self::$decisionKnowsEndpoint;
    }

    private static function decisionTakes(string ...$names): bool
    {
        $params = array_map(
            static fn (\ReflectionParameter $p) => $p->getName(),
            (new \ReflectionMethod(Decision::class, '__construct'))->getParameters()
        );
        return array_diff($names, $params) === [];
    }

    /**
     * The endpoint and class a call names, checked as the real limiter checks them: an
     * endpoint or class the options do not configure is refused, naming it. A scripted
     * fake configures nothing and takes any name.
     *
     * @return array{0: ?string, 1: int} the class decided in (the named one, else
     *         `default_priority`; null: none) and its share in ppm
     */
    private function checkRoute(?string $endpoint, ?string $priority, int $tokens): array
    {
        if ($this->buckets === null) {
            return [$priority, 0];
        }
        if ($endpoint !== null && !isset($this->endpoints[$endpoint])) {
            self::notConfigured('endpoint', $endpoint, 'endpoints', array_keys($this->endpoints));
        }
        if ($endpoint !== null && $tokens > $this->endpoints[$endpoint]['capacity']) {
            $cap = $this->endpoints[$endpoint]['capacity'];
            throw new ConfigurationException("checkout_guard: tokens must be from 1 to $cap (endpoint \"$endpoint\"'s capacity), got $tokens");
        }
        $named = $priority ?? $this->defaultPriority;
        $ppm = $named === null ? 0 : ($this->priorities[$named] ?? 0);
        if ($ppm > 0) {
            // The class leaves a share of every bucket: more tokens than the rest of the
            // smallest one could never pass (the runtime's check).
            $all = array_values($this->buckets);
            if ($endpoint !== null) {
                $all[] = $this->endpoints[$endpoint];
            }
            $max = min(array_map(static fn (array $b): int => intdiv($b['tolerance'] - self::reserveUs($b['tolerance'], $ppm), $b['interval']), $all));
            if ($tokens > $max) {
                throw new ConfigurationException(sprintf('checkout_guard: tokens must be from 1 to %d for priority class "%s" (it leaves %s%% of every bucket), got %d', $max, $named, self::shareText($ppm), $tokens));
            }
        }
        if ($priority !== null && !isset($this->priorities[$priority])) {
            self::notConfigured('priority', $priority, 'priorities', array_keys($this->priorities ?? []));
        }
        $class = $priority ?? $this->defaultPriority;
        return [$class, $class === null ? 0 : $this->priorities[$class]];
    }

    /** @param list<string> $names */
    private static function notConfigured(string $argument, string $name, string $option, array $names): never
    {
        self::fail($argument, sprintf(
            '%s is not configured (%s)',
            self::quote($name),
            $names === [] ? "the limiter has no $option option" : "$option: " . implode(', ', array_map('strval', $names))
        ));
    }

    private function record(string $method, ?string $shop, ?int $tokens, ?string $endpoint = null, ?string $priority = null): void
    {
        $call = ['method' => $method, 'shop' => $shop, 'tokens' => $tokens];
        if ($endpoint !== null) {
            $call['endpoint'] = $endpoint;
        }
        if ($priority !== null) {
            $call['priority'] = $priority;
        }
        $this->calls[] = $call;
    }

    // ---- argument checks, as crates/config/src/options/checks.rs -----------------------

    /** An int shop ID is its decimal string; 1 to 128 bytes without control characters. */
    private static function shop(string|int $shopId): string
    {
        $shop = (string) $shopId;
        self::checkShop('shopId', $shop);
        return $shop;
    }

    private static function checkShop(string $option, string $shop): void
    {
        $len = strlen($shop);
        if ($len === 0 || $len > self::MAX_SHOP_ID_BYTES) {
            throw new ConfigurationException(sprintf('checkout_guard: %s must be 1 to %d bytes, got %d bytes: %s', $option, self::MAX_SHOP_ID_BYTES, $len, self::quote($shop)));
        }
        if (preg_match('/[\x00-\x1f\x7f]/', $shop, $m, PREG_OFFSET_CAPTURE) === 1) {
            throw new ConfigurationException(sprintf(
                'checkout_guard: %s must not contain control characters (byte 0x%02x at offset %d), got %s',
                $option,
                ord($m[0][0]),
                $m[0][1],
                self::quote($shop)
            ));
        }
    }

    private function checkTokens(int $tokens): void
    {
        if ($this->buckets === null) {
            if ($tokens < 1) {
                throw new ConfigurationException("checkout_guard: tokens must be 1 or more, got $tokens");
            }
            return;
        }
        $max = min(array_column($this->buckets, 'capacity'));
        if ($tokens < 1 || $tokens > $max) {
            throw new ConfigurationException("checkout_guard: tokens must be from 1 to $max (the smallest configured capacity), got $tokens");
        }
    }

    /** validate_max_wait: whole µs, rounded down. */
    private static function maxWaitUs(float $seconds): int
    {
        $max = self::MAX_WAIT_US / 1e6;
        if (is_nan($seconds) || $seconds < 0.0 || $seconds > $max) {
            throw new ConfigurationException(sprintf('checkout_guard: maxWaitSeconds must be a number from 0 to %d (seconds), got %s', (int) $max, self::debugFloat($seconds)));
        }
        $us = (int) round($seconds * 1e6);
        return $us - (int) ($us / 1e6 > $seconds);
    }

    // ---- the options, as crates/config/src/options ------------------------------------

    /** @param array<mixed> $options */
    private function configure(array $options): void
    {
        $entries = self::entries('options', $options);
        foreach ($entries as $key => $_) {
            if (!in_array((string) $key, self::KNOWN, true)) {
                self::fail(self::quote((string) $key), 'is not a known option (known: ' . implode(', ', self::KNOWN) . ')');
            }
        }
        // A null value counts as not given (value.rs, option()).
        $get = static fn (string $k): mixed => $entries[$k] ?? null;

        if ($get('name') !== null) {
            $name = $get('name');
            if (!is_string($name)) {
                self::typeError('name', 'a string', $name);
            }
            if ($name === '' || strlen($name) > self::MAX_NAME_BYTES || preg_match('/[^A-Za-z0-9_.:-]/', $name) === 1) {
                self::fail('name', sprintf('must be 1 to %d characters from A-Z a-z 0-9 _ . : -, got %s', self::MAX_NAME_BYTES, self::quote($name)));
            }
            $this->name = $name;
        }

        if ($get('global') === null) {
            self::fail('global', "is required: ['capacity' => int >= 1, 'refill_per_second' => float > 0]");
        }
        $buckets = ['global' => self::bucket('global', $get('global'))];
        foreach (['hot_lane', 'hot_shop'] as $lane) {
            if ($get($lane) !== null) {
                $buckets[$lane] = self::bucket($lane, $get($lane));
            }
        }
        foreach (['hot_lane', 'hot_shop'] as $lane) {
            if (isset($buckets[$lane])) {
                self::notAboveGlobal($lane, $buckets[$lane], $buckets['global']);
            }
        }

        self::notModelled('auto_hot', $get('auto_hot'), true);

        $hotShops = $get('hot_shops');
        if ($hotShops !== null) {
            if (!is_array($hotShops)) {
                self::typeError('hot_shops', 'a list of shop IDs', $hotShops);
            }
            if (count($hotShops) > self::MAX_HOT_SHOPS) {
                self::fail('hot_shops', sprintf('may list at most %d shops, got %d', self::MAX_HOT_SHOPS, count($hotShops)));
            }
            foreach (array_values($hotShops) as $i => $shop) {
                if (is_int($shop)) {
                    $shop = (string) $shop;
                } elseif (!is_string($shop)) {
                    self::typeError("hot_shops[$i]", 'a string', $shop);
                } else {
                    self::checkShop("hot_shops[$i]", $shop);
                }
                $this->hotShops[$shop] = true;
            }
        }

        $mode = $get('mode');
        if ($mode !== null) {
            if (!is_string($mode)) {
                self::typeError('mode', '"enforce" or "shadow"', $mode);
            }
            if ($mode !== 'enforce' && $mode !== 'shadow') {
                self::fail('mode', 'must be "enforce" or "shadow", got ' . self::quote($mode));
            }
            $this->shadow = $mode === 'shadow';
        }
        self::notModelled('adaptive', $get('adaptive'), true);
        self::notModelled('in_flight', $get('in_flight'), false);

        $spec = static fn (array $b): array => ['capacity' => $b['capacity'], 'interval' => $b['interval'], 'tolerance' => $b['capacity'] * $b['interval']];
        if ($get('endpoints') !== null) {
            $endpoints = [];
            foreach (self::namedEntries('endpoints', $get('endpoints'), 'endpoint', 'endpoints') as $name => $value) {
                $option = "endpoints.$name";
                $b = self::bucket($option, $value);
                self::notAboveGlobal($option, $b, $buckets['global']);
                $endpoints[$name] = $spec($b);
            }
            ksort($endpoints, SORT_STRING);
            $this->endpoints = $endpoints;
        }
        $this->priorities($get('priorities'), $get('default_priority'));

        $this->buckets = [];
        foreach ($buckets as $lane => $b) {
            $this->buckets[$lane] = $spec($b);
        }
        $this->checkClasses();
    }

    /**
     * endpoints.rs check_classes: every class must be able to take a token from every
     * bucket (global, the hot ones, every endpoint), else it is refused naming the bucket.
     */
    private function checkClasses(): void
    {
        $all = $this->buckets;
        foreach ($this->endpoints as $name => $b) {
            $all["endpoints.$name"] = $b;
        }
        foreach ($this->priorities ?? [] as $class => $ppm) {
            foreach ($all as $bucket => $b) {
                if ($b['tolerance'] - self::reserveUs($b['tolerance'], $ppm) < $b['interval']) {
                    self::fail("priorities.$class", sprintf(
                        'leaves %s%% of every bucket, and %s holds %d tokens: the class could never take one (a smaller share, or a bucket of at least %d tokens)',
                        self::shareText($ppm),
                        $bucket,
                        $b['capacity'],
                        (int) floor(1e6 / (1e6 - $ppm)) + 1
                    ));
                }
            }
        }
    }

    /** A share in percent as Rust's `{}` prints `ppm as f64 / 1e4`. */
    private static function shareText(int $ppm): string
    {
        $x = $ppm / 1e4;
        return $x == floor($x) ? sprintf('%d', $x) : rtrim(rtrim(sprintf('%.10F', $x), '0'), '.');
    }

    /**
     * crates/config/src/options/endpoints.rs priorities_from_value: `priorities` (class =>
     * share in [0, 1)) and `default_priority` (one of the classes).
     */
    private function priorities(mixed $priorities, mixed $default): void
    {
        if ($priorities === null) {
            if ($default !== null) {
                self::fail('default_priority', 'needs the priorities option (the classes it names one of), got ' . self::describe($default));
            }
            return;
        }
        $entries = self::namedEntries('priorities', $priorities, 'priority class', 'priority classes');
        $shares = [];
        foreach ($entries as $name => $value) {
            $option = "priorities.$name";
            if (!is_int($value) && !is_float($value)) {
                self::typeError($option, 'a share from 0 (inclusive) to 1 (exclusive)', $value);
            }
            $share = (float) $value;
            $ppm = is_finite($share) && $share >= 0.0 && $share < 1.0 ? (int) round($share * self::SHARE_UNIT) : self::SHARE_UNIT;
            // share_to_ppm: a share kept as the whole bucket, or above 0 as none, is refused.
            if ($ppm >= self::SHARE_UNIT || ($ppm === 0 && $share !== 0.0)) {
                self::fail($option, 'must be a share from 0 (inclusive) to 1 (exclusive) of every bucket\'s capacity, in millionths (0, or 0.000001 to 0.999999), got ' . self::describe($value));
            }
            $shares[(string) $name] = $ppm;
        }
        if ($default !== null) {
            if (!is_string($default)) {
                self::typeError('default_priority', 'a priority class\'s name', $default);
            }
            if (!isset($shares[$default])) {
                self::fail('default_priority', sprintf('must be one of the priorities (%s), got %s', implode(', ', array_keys($shares)), self::quote($default)));
            }
            $this->defaultPriority = $default;
        }
        ksort($shares, SORT_STRING);
        $this->priorities = $shares;
    }

    /**
     * endpoints.rs named_entries: a map from name to value, at least one and at most
     * MAX_ENDPOINTS entries, each name 1 to 64 characters of A-Z a-z 0-9 _ . : / -.
     *
     * @return array<string, mixed>
     */
    private static function namedEntries(string $option, mixed $v, string $what, string $whats): array
    {
        if (is_array($v) && $v !== [] && array_is_list($v)) {
            self::fail($option, "must be an array from $what name to its value (string keys), got a list (PHP makes keys of digits only, '0', '1', ..., a list: give such a name a letter)");
        }
        $entries = self::entries($option, $v);
        if ($entries === []) {
            self::fail($option, "must name at least one $what (leave the option out for none)");
        }
        if (count($entries) > self::MAX_ENDPOINTS) {
            self::fail($option, sprintf('may name at most %d %s, got %d', self::MAX_ENDPOINTS, $whats, count($entries)));
        }
        $article = $what[0] === 'e' ? 'an' : 'a';
        $named = [];
        foreach ($entries as $name => $value) {
            $name = (string) $name;
            if ($name === '' || strlen($name) > self::MAX_NAME_BYTES || preg_match('#[^A-Za-z0-9_.:/-]#', $name) === 1) {
                self::fail(
                    sprintf('%s[%s]', $option, self::quote($name)),
                    sprintf('is not %s %s name: 1 to %d characters from A-Z a-z 0-9 _ . : / -, got %s', $article, $what, self::MAX_NAME_BYTES, self::quote($name))
                );
            }
            $named[$name] = $value;
        }
        return $named;
    }

    /**
     * buckets.rs not_above_global: a bucket under global has at most its capacity and rate.
     *
     * @param array{capacity: int, rate: float, interval: int} $b
     * @param array{capacity: int, rate: float, interval: int} $global
     */
    private static function notAboveGlobal(string $option, array $b, array $global): void
    {
        if ($b['capacity'] > $global['capacity']) {
            self::fail("$option.capacity", sprintf('may not exceed global.capacity (%d), got %d', $global['capacity'], $b['capacity']));
        }
        if ($b['rate'] > $global['rate']) {
            self::fail("$option.refill_per_second", sprintf('may not exceed global.refill_per_second (%s), got %s', self::debugFloat($global['rate']), self::debugFloat($b['rate'])));
        }
    }

    /**
     * `auto_hot`, `adaptive`, `in_flight`: off (not given, null, or false where false means
     * off: not for `in_flight`, whose false the real limiter refuses) or refused; a value of
     * the wrong type with the real limiter's message.
     */
    private static function notModelled(string $option, mixed $value, bool $falseIsOff): void
    {
        if ($value === null || ($falseIsOff && $value === false)) {
            return;
        }
        if (!($falseIsOff && $value === true)) {
            self::entries($option, $value);
        }
        self::fail($option, 'is not modelled by CheckoutGuard\Testing\FakeLimiter (leave it out of the fake\'s options, or test it against a real RateLimiter and Valkey)');
    }

    /** @return array{capacity: int, rate: float, interval: int} BucketSpec::new */
    private static function bucket(string $option, mixed $v): array
    {
        $entries = self::entries($option, $v);
        foreach ($entries as $key => $_) {
            if ($key !== 'capacity' && $key !== 'refill_per_second') {
                self::fail("$option.$key", 'is not a known option (known: capacity, refill_per_second)');
            }
        }
        if (!array_key_exists('capacity', $entries)) {
            self::fail("$option.capacity", 'is required (an integer >= 1)');
        }
        $capacity = $entries['capacity'];
        if (!is_int($capacity)) {
            self::typeError("$option.capacity", 'an integer >= 1', $capacity);
        }
        if (!array_key_exists('refill_per_second', $entries)) {
            self::fail("$option.refill_per_second", 'is required (a number > 0)');
        }
        $rate = $entries['refill_per_second'];
        if (!is_int($rate) && !is_float($rate)) {
            self::typeError("$option.refill_per_second", 'a number > 0', $rate);
        }
        $rate = (float) $rate;
        if ($capacity < 1 || $capacity > self::MAX_CAPACITY) {
            self::fail("$option.capacity", sprintf('must be an integer from 1 to %d, got %d', self::MAX_CAPACITY, $capacity));
        }
        if (!is_finite($rate) || $rate <= 0.0 || $rate > self::MAX_REFILL_PER_SECOND) {
            self::fail("$option.refill_per_second", sprintf('must be a number greater than 0 and at most %d, got %s', (int) self::MAX_REFILL_PER_SECOND, self::debugFloat($rate)));
        }
        $interval = (int) ceil(1_000_000.0 / $rate);
        $effective = 1_000_000.0 / $interval;
        if ($effective < $rate * (1.0 - self::MAX_RATE_ERROR)) {
            $above = 1_000_000.0 / max($interval - 1, 1);
            self::fail("$option.refill_per_second", sprintf(
                'cannot be honoured within 0.1%% (the limiter counts whole microseconds per token: %s/s would run at %.2f/s); the nearest exact rates are %s and %s, got %s',
                self::debugFloat($rate),
                $effective,
                self::shortRate($effective),
                self::shortRate($above),
                self::debugFloat($rate)
            ));
        }
        $refillSeconds = $capacity * $interval / 1_000_000.0;
        if ($refillSeconds > self::MAX_REFILL_SECONDS) {
            self::fail($option, sprintf(
                'takes %.0f s to refill from empty (capacity %d / refill_per_second %s); at most %d s (10 years) is allowed',
                $refillSeconds,
                $capacity,
                self::debugFloat($rate),
                self::MAX_REFILL_SECONDS
            ));
        }
        return ['capacity' => $capacity, 'rate' => $rate, 'interval' => $interval];
    }

    /** map_entries: an array with string keys (an empty array is one). */
    private static function entries(string $option, mixed $v): array
    {
        if (!is_array($v) || ($v !== [] && array_is_list($v))) {
            self::typeError($option, 'an array with string keys', $v);
        }
        return $v;
    }

    private static function fail(string $option, string $message): never
    {
        throw new ConfigurationException("checkout_guard: $option $message");
    }

    /** type_error: "must be EXPECTED, got TYPE VALUE". */
    private static function typeError(string $option, string $expected, mixed $v): never
    {
        $type = match (true) {
            $v === null => 'null',
            is_bool($v) => 'bool',
            is_int($v) => 'int',
            is_float($v) => 'float',
            is_string($v) => 'string',
            is_array($v) => 'array',
            default => get_debug_type($v),
        };
        self::fail($option, "must be $expected, got $type " . self::describe($v));
    }

    /** Value::describe: a short rendering of a value for a message. */
    private static function describe(mixed $v): string
    {
        return match (true) {
            $v === null => 'null',
            is_bool($v) => $v ? 'true' : 'false',
            is_int($v) => (string) $v,
            is_float($v) => self::debugFloat($v),
            is_string($v) => self::quote($v),
            is_array($v) => 'array',
            default => get_debug_type($v),
        };
    }

    /** quote_bytes: in quotes, `"` and `\` escaped, control characters and bytes that are not UTF-8 as \xNN, cut at 64 bytes. */
    private static function quote(string $bytes): string
    {
        $shown = substr($bytes, 0, 64);
        $out = '"';
        $n = strlen($shown);
        for ($i = 0; $i < $n;) {
            $b = ord($shown[$i]);
            $len = $b < 0x80 ? 1 : ($b >= 0xF0 ? 4 : ($b >= 0xE0 ? 3 : ($b >= 0xC0 ? 2 : 0)));
            $char = $len > 0 ? substr($shown, $i, $len) : '';
            if ($len === 0 || strlen($char) < $len || preg_match('//u', $char) !== 1) {
                $out .= sprintf('\\x%02x', $b);
                $i++;
                continue;
            }
            // Control characters (C0, DEL, and C1: U+0080..U+009F, two bytes C2 80..C2 9F).
            $control = match ($len) {
                1 => $b < 0x20 || $b === 0x7f ? $b : null,
                2 => $b === 0xC2 && ord($char[1]) <= 0x9F ? ord($char[1]) : null,
                default => null,
            };
            $out .= match (true) {
                $char === '"' => '\\"',
                $char === '\\' => '\\\\',
                $control !== null => sprintf('\\x%02x', $control),
                default => $char,
            };
            $i += $len;
        }
        $out .= '"';
        if (strlen($bytes) > 64) {
            $out .= sprintf('... (%d bytes)', strlen($bytes));
        }
        return $out;
    }

    /** A float as Rust's `{:?}` writes it (1.0, 0.5, 1e-5, 1e16, NaN, inf). */
    private static function debugFloat(float $x): string
    {
        if (is_nan($x)) {
            return 'NaN';
        }
        if (is_infinite($x)) {
            return $x > 0 ? 'inf' : '-inf';
        }
        if ($x == 0.0) {
            return (fdiv(1.0, $x) < 0 ? '-' : '') . '0.0';
        }
        // The shortest digits that read back as $x.
        for ($p = 0; $p < 17; $p++) {
            $e = sprintf("%.{$p}e", $x);
            if ((float) $e === $x) {
                break;
            }
        }
        [$mantissa, $exp] = explode('e', $e);
        $exp = (int) $exp;
        $neg = $mantissa[0] === '-';
        $digits = str_replace(['-', '.'], '', $mantissa);
        $digits = rtrim($digits, '0') ?: '0';
        $abs = abs($x);
        if ($abs >= 1e-4 && $abs < 1e16) {
            if ($exp >= 0) {
                $int = substr(str_pad($digits, $exp + 1, '0'), 0, $exp + 1);
                $frac = substr($digits, $exp + 1);
            } else {
                $int = '0';
                $frac = str_repeat('0', -$exp - 1) . $digits;
            }
            $s = $int . '.' . ($frac === '' ? '0' : $frac);
        } else {
            $s = $digits[0] . (strlen($digits) > 1 ? '.' . substr($digits, 1) : '') . 'e' . $exp;
        }
        return ($neg ? '-' : '') . $s;
    }

    /** short_rate: at most two decimals, no trailing zeros. */
    private static function shortRate(float $r): string
    {
        $s = sprintf('%.2f', $r);
        return rtrim(rtrim($s, '0'), '.');
    }
}
