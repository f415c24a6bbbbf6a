<?php

// Stubs for checkout_guard

namespace CheckoutGuard {
    /**
     * The outcome of one `RateLimiter::acquire()`. Being limited is a value, not an exception.
     */
    class Decision {
        public function __construct() {}

        /**
         * Whether the request may go ahead (and took its tokens); always true in shadow mode.
         *
         * @return bool
         */
        public function isAllowed(): bool {}

        /**
         * Whether the shop was treated as hot (listed in hot_shops or marked with markHot()).
         *
         * @return bool
         */
        public function isHotShop(): bool {}

        /**
         * Whether the decision was made in shadow mode (the `mode` option, INI
         * checkout_guard.mode, or live `checkout-guard limiter set mode=shadow`).
         *
         * @return bool
         */
        public function isShadow(): bool {}

        /**
         * "allowed" | "global" | "hot_lane" | "hot_shop" | "unavailable": for a denial, the
         * first bucket (in that order) that lacked tokens.
         *
         * @return string
         */
        public function reason(): string {}

        /**
         * Whole tokens left in the tightest bucket that applied, after this decision.
         *
         * @return int
         */
        public function remaining(): int {}

        /**
         * Seconds until this request could pass if nobody else took tokens; 0.0 when allowed.
         *
         * @return float
         */
        public function retryAfter(): float {}

        /**
         * Seconds acquire() slept for a reservation (`maxWaitSeconds`) before its tokens were
         * there; 0.0 when it did not wait.
         *
         * @return float
         */
        public function waited(): float {}

        /**
         * What enforcement answered: equal to isAllowed() in enforce mode; in shadow mode
         * (isAllowed() always true) whether the buckets admitted the request. reason(),
         * retryAfter() and remaining() describe that enforcement decision.
         *
         * @return bool
         */
        public function wouldAllow(): bool {}
    }

    /**
     * A token-bucket limiter in Valkey: a global bucket for every shop, and for hot shops a
     * shared hot lane and a bucket per hot shop. Decided atomically in one round trip.
     */
    class RateLimiter {
        /**
         * Options: name, global, hot_lane, hot_shop, hot_shops, url, timeout_ms, on_unavailable,
         * auto_hot, engine, tls, sentinel, mode, adaptive (see the README). Unknown keys and bad values throw ConfigurationException.
         *
         * @param array $options
         */
        public function __construct(array $options) {}

        /**
         * Takes `tokens` tokens for `shopId` if every bucket that applies holds them. With
         * `maxWaitSeconds` (0 to 10) a reservation: tokens every bucket holds within that
         * time are taken now and the call sleeps until they are there (Decision::waited());
         * later than that, a denial that takes nothing. 0.0 decides as without it.
         *
         * @param string $shopId
         * @param int $tokens
         * @param float $maxWaitSeconds
         * @return \CheckoutGuard\Decision
         */
        public function acquire(string $shopId, int $tokens = 1, float $maxWaitSeconds = 0.0): \CheckoutGuard\Decision {}

        /**
         * Reports what the payment provider answered to a call this limiter admitted for
         * `shopId`: its HTTP status and its Retry-After in seconds (null or 0: none). With
         * the `adaptive` option, a status in its `statuses` lowers the budget of every
         * worker (at most once per second) and a Retry-After pauses the limiter (at most
         * 60 s; INF or any huge value is that longest pause); anything else costs nothing
         * (no round trip). Without the option, nothing. Each change is a RateLimitAdapt
         * event. Bad arguments (NAN or a negative Retry-After among them) throw
         * ConfigurationException; a Valkey that cannot be asked never throws (counted in
         * health()['adaptive']).
         *
         * @param string $shopId
         * @param int $statusCode
         * @param float|null $retryAfterSeconds
         * @return void
         */
        public function feedback(string $shopId, int $statusCode, ?float $retryAfterSeconds = null): void {}

        /**
         * What a readiness check needs, from this process's pooled connection to the
         * limiter's Valkey: ok, url (password masked), connected, circuit ("closed" or "open":
         * after a failure calls fail at once for retry_in_ms), last_error,
         * consecutive_failures, connects, ping_ms and last_ping_at (unix seconds), pid; and
         * this process's decisions with the limiter's engine: last_decision_at (the last that
         * succeeded), last_decision_error and last_decision_error_at (kept until a decision
         * succeeds), consecutive_failed_decisions, decisions_failing (the last 3 failed).
         * tls: null for a plain URL, else how the server is verified ("on, verified against
         * ..." or "on, verification off (verify_peer => false)"), and tls_verify_peer.
         * sentinel_service and sentinel_primary: for a Sentinel URL its service and the
         * primary (host:port) the open connection is to, else null.
         * local_denials_table: where this process's local-denial table is ("inherited": made
         * before the fork, shared with its sibling workers; "named": a file in /dev/shm shared
         * by the workers of its php-fpm master; "own": made here, shared with the processes it
         * forks; "private": its alone, see phpinfo()), and local_denials_shared: whether it
         * shares it with sibling workers ("inherited" or "named").
         * mode: the mode in force, "enforce" or "shadow" (live `limiter set mode=...` as this
         * process last saw it, else the `mode` option).
         * adaptive: null without the `adaptive` option, else share (the share of the limits
         * in force, 0..1), paused_until (unix seconds, null: no pause), last_throttle
         * (status, at, retry_after: the last throttling answer reported, or null), source
         * ("valkey": read now, with `ping`; "process": what this process last saw),
         * read_error, feedback_errors and last_feedback_error(_at) (feedback() calls Valkey
         * did not answer; never thrown).
         * With `ping` one PING is sent over the pooled connection (never a new connection per
         * call, nothing while the circuit is open); without it nothing is sent.
         *
         * @param bool $ping
         * @return array
         */
        public function health(bool $ping = true): array {}

        /**
         * Whether the shop is hot (listed in hot_shops, or marked and not expired).
         *
         * @param string $shopId
         * @return bool
         */
        public function isHot(string $shopId): bool {}

        /**
         * Marks the shop hot for every worker at once, until the TTL runs out.
         *
         * @param string $shopId
         * @param int $ttlSeconds
         * @return void
         */
        public function markHot(string $shopId, int $ttlSeconds): void {}

        /**
         * What acquire() would answer now for `tokens` tokens of `shopId`, taking nothing and
         * recording no decision (the same engine, local denials and on_unavailable policy).
         *
         * @param string $shopId
         * @param int $tokens
         * @return \CheckoutGuard\Decision
         */
        public function peek(string $shopId, int $tokens = 1): \CheckoutGuard\Decision {}

        /**
         * Forgets this limiter's bucket state: all buckets are full again. Hot marks stay.
         *
         * @return void
         */
        public function reset(): void {}

        /**
         * Ends a markHot() early; shops listed in hot_shops stay hot.
         *
         * @param string $shopId
         * @return void
         */
        public function unmarkHot(string $shopId): void {}
    }

    /**
     * Unsampled custom events for every external API call, and the call budget's counts.
     */
    class Telemetry {
        public function __construct() {}

        /**
         * ExternalApiCall events measured so far in this request, for one api or for all.
         *
         * @param string|null $api
         * @return int
         */
        public static function callCount(?string $api = null): int {}

        /**
         * Writes buffered events to every configured sink now; returns how many were written.
         *
         * @return int
         */
        public static function flush(): int {}

        /**
         * Times $call on a monotonic clock, records one "ExternalApiCall" event, returns
         * $call's result or rethrows what it threw.
         *
         * @param string $api
         * @param callable $call
         * @param array $attributes
         * @return mixed
         */
        public static function measure(string $api, callable $call, array $attributes = []): mixed {}

        /**
         * Records one custom event; attribute values must be scalars or null.
         *
         * @param string $eventType
         * @param array $attributes
         * @return void
         */
        public static function record(string $eventType, array $attributes): void {}

        /**
         * Records one "ExternalApiCall" event for a call that ended after the code that
         * started it returned (a Guzzle promise settled later), timed by the caller:
         * `$timestampMs` Unix ms when it started, `$durationMs` measured on a monotonic clock
         * (`hrtime()`). `$outcome` is what the call resolved to, or the Throwable it failed
         * with; status and error type are found in it as measure() finds them, and the call
         * counts in callCount() like a measured one.
         *
         * @param string $api
         * @param int $timestampMs
         * @param float $durationMs
         * @param mixed $outcome
         * @param array $attributes
         * @return void
         */
        public static function recordCall(string $api, int $timestampMs, float $durationMs, mixed $outcome, array $attributes = []): void {}

        /**
         * Counters since process start: recorded, written and dropped, per sink.
         *
         * @return array
         */
        public static function stats(): array {}
    }
}
