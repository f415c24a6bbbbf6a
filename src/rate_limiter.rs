// PHP parameter names are the Rust identifiers verbatim, and PHP callers may use them as
// named arguments: they follow the PHP contract (camelCase), not Rust style.
#![allow(non_snake_case)]

use std::sync::Arc;

use checkout_guard_config::LimiterOptions;
use checkout_guard_runtime::limiter::Route;
use checkout_guard_runtime::Limiter;
use ext_php_rs::boxed::ZBox;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;

use crate::args::{BoolOr, FloatOr, IntArg, IntOr, OptFloatArg, OptStringArg, Param, ShopIdArg};
use crate::convert::array_to_value;
use crate::decision::Decision;
use crate::errors::{configuration, to_php};
use crate::ini;
use crate::recording;

/// A token-bucket limiter in Valkey: a global bucket for every shop, and for hot shops a
/// shared hot lane and a bucket per hot shop. Decided atomically in one round trip.
#[php_class]
#[php(name = "CheckoutGuard\\RateLimiter")]
#[php(flags = ClassFlags::Final)]
#[php(implements(crate::interfaces::PhpInterfaceLimiter))]
pub struct RateLimiter {
    /// Shared with the decisions that hold its leases.
    inner: Arc<Limiter>,
}

#[php_impl]
impl RateLimiter {
    /// Options: name, global, hot_lane, hot_shop, hot_shops, url, timeout_ms, on_unavailable,
    /// auto_hot, engine, tls, sentinel, mode, adaptive, in_flight, endpoints, priorities,
    /// default_priority (see the README and docs/endpoints.md). Unknown keys and bad values throw ConfigurationException.
    pub fn __construct(options: &ZendHashTable) -> PhpResult<Self> {
        let defaults = ini::defaults().map_err(|e| configuration(e.to_string()))?;
        let value = array_to_value(options).map_err(|e| configuration(e.to_string()))?;
        let options = LimiterOptions::from_value(&value, &defaults)
            .map_err(|e| configuration(e.to_string()))?;
        if options.endpoint.tls().is_some_and(|t| !t.verify_peer) {
            crate::info::note_unverified(options.endpoint.display_url());
        }
        let inner = Arc::new(Limiter::new(options));
        crate::info::note_mode(&inner.options().name, inner.mode());
        if let Some(f) = &inner.options().in_flight {
            crate::info::note_in_flight(&inner.options().name, f);
        }
        Ok(Self { inner })
    }

    /// Takes `tokens` tokens for `shopId` if every bucket that applies holds them. With
    /// `maxWaitSeconds` (0 to 10) a reservation: tokens every bucket holds within that
    /// time are taken now and the call sleeps until they are there (Decision::waited());
    /// later than that, a denial that takes nothing. 0.0 decides as without it. `endpoint`
    /// (the `endpoints` option) draws that endpoint's bucket too, all or nothing;
    /// `priority` (the `priorities` option; null: `default_priority`) leaves the class's
    /// share of every bucket untouched. A name not configured throws
    /// ConfigurationException naming it.
    #[php(defaults(tokens = 1i64, maxWaitSeconds = 0.0f64))]
    pub fn acquire(
        &self,
        shopId: ShopIdArg,
        tokens: IntOr,
        maxWaitSeconds: FloatOr,
        endpoint: OptStringArg,
        priority: OptStringArg,
    ) -> PhpResult<Decision> {
        const F: &str = "CheckoutGuard\\RateLimiter::acquire";
        let shopId = shopId.get(Param::new(F, 1, "shopId"))?;
        let tokens = tokens.get(Param::new(F, 2, "tokens"))?;
        let maxWaitSeconds = maxWaitSeconds.get(Param::new(F, 3, "maxWaitSeconds"))?;
        let endpoint = name_arg(endpoint, Param::new(F, 4, "endpoint"))?;
        let priority = name_arg(priority, Param::new(F, 5, "priority"))?;
        let route = Route {
            endpoint: endpoint.as_deref(),
            priority: priority.as_deref(),
        };
        let (d, notices) = self
            .inner
            .acquire_routed(&shopId, tokens, maxWaitSeconds, route)
            .map_err(to_php)?;
        let o = self.inner.options();
        if let Some(c) = &notices.limits_change {
            crate::info::note_mode(&o.name, c.mode);
        }
        recording::observe_notices(&o.name, &shopId, &notices, o.auto_hot.as_ref());
        let class = self.inner.class_name(route.priority);
        let endpoint = shown(endpoint.as_deref());
        recording::observe_decision(
            &o.name,
            &shopId,
            &d,
            (endpoint.as_deref(), class.as_deref()),
        );
        Ok(Decision::of(&self.inner, &shopId, d).routed(endpoint, class))
    }

    /// What acquire() would answer now for `tokens` tokens of `shopId`, taking nothing and
    /// recording no decision (the same engine, local denials and on_unavailable policy).
    #[php(defaults(tokens = 1i64))]
    pub fn peek(
        &self,
        shopId: ShopIdArg,
        tokens: IntOr,
        endpoint: OptStringArg,
        priority: OptStringArg,
    ) -> PhpResult<Decision> {
        const F: &str = "CheckoutGuard\\RateLimiter::peek";
        let shopId = shopId.get(Param::new(F, 1, "shopId"))?;
        let tokens = tokens.get(Param::new(F, 2, "tokens"))?;
        let endpoint = name_arg(endpoint, Param::new(F, 3, "endpoint"))?;
        let priority = name_arg(priority, Param::new(F, 4, "priority"))?;
        let route = Route {
            endpoint: endpoint.as_deref(),
            priority: priority.as_deref(),
        };
        let (d, notices) = self
            .inner
            .peek_routed(&shopId, tokens, route)
            .map_err(to_php)?;
        // Not a decision; but new live limits found on the way are this worker's now.
        let o = self.inner.options();
        if let Some(c) = &notices.limits_change {
            crate::info::note_mode(&o.name, c.mode);
        }
        recording::observe_notices(&o.name, &shopId, &notices, o.auto_hot.as_ref());
        let class = self.inner.class_name(route.priority);
        Ok(Decision::from(d).routed(shown(endpoint.as_deref()), class))
    }

    /// Reports what the payment provider answered to a call this limiter admitted for
    /// `shopId`: its HTTP status and its Retry-After in seconds (null or 0: none). With
    /// the `adaptive` option, a status in its `statuses` lowers the budget of every
    /// worker (at most once per second) and a Retry-After pauses the limiter (at most
    /// 60 s; INF or any huge value is that longest pause); anything else costs nothing
    /// (no round trip). Without the option, nothing. Each change is a RateLimitAdapt
    /// event. Bad arguments (NAN or a negative Retry-After among them) throw
    /// ConfigurationException; a Valkey that cannot be asked never throws (counted in
    /// health()['adaptive']).
    pub fn feedback(
        &self,
        shopId: ShopIdArg,
        statusCode: IntArg,
        retryAfterSeconds: OptFloatArg,
    ) -> PhpResult<()> {
        const F: &str = "CheckoutGuard\\RateLimiter::feedback";
        let shopId = shopId.get(Param::new(F, 1, "shopId"))?;
        let statusCode = statusCode.get(Param::new(F, 2, "statusCode"))?;
        let retryAfterSeconds = retryAfterSeconds.get(Param::new(F, 3, "retryAfterSeconds"))?;
        let changes = self
            .inner
            .feedback(&shopId, statusCode, retryAfterSeconds)
            .map_err(to_php)?;
        recording::observe_adapt(&self.inner.options().name, &changes);
        Ok(())
    }

    /// Marks the shop hot for every worker at once, until the TTL runs out.
    pub fn mark_hot(&self, shopId: ShopIdArg, ttlSeconds: IntArg) -> PhpResult<()> {
        const F: &str = "CheckoutGuard\\RateLimiter::markHot";
        let shopId = shopId.get(Param::new(F, 1, "shopId"))?;
        let ttlSeconds = ttlSeconds.get(Param::new(F, 2, "ttlSeconds"))?;
        self.inner.mark_hot(&shopId, ttlSeconds).map_err(to_php)
    }

    /// Ends a markHot() early; shops listed in hot_shops stay hot.
    pub fn unmark_hot(&self, shopId: ShopIdArg) -> PhpResult<()> {
        let shopId = shopId.get(Param::new(
            "CheckoutGuard\\RateLimiter::unmarkHot",
            1,
            "shopId",
        ))?;
        self.inner.unmark_hot(&shopId).map_err(to_php)
    }

    /// Whether the shop is hot (listed in hot_shops, or marked and not expired).
    pub fn is_hot(&self, shopId: ShopIdArg) -> PhpResult<bool> {
        let shopId = shopId.get(Param::new("CheckoutGuard\\RateLimiter::isHot", 1, "shopId"))?;
        self.inner.is_hot(&shopId).map_err(to_php)
    }

    /// What a readiness check needs, from this process's pooled connection to the
    /// limiter's Valkey: ok, url (password masked), connected, circuit ("closed" or "open":
    /// after a failure calls fail at once for retry_in_ms), last_error,
    /// consecutive_failures, connects, ping_ms and last_ping_at (unix seconds), pid; and
    /// this process's decisions with the limiter's engine: last_decision_at (the last that
    /// succeeded), last_decision_error and last_decision_error_at (kept until a decision
    /// succeeds), consecutive_failed_decisions, decisions_failing (the last 3 failed).
    /// tls: null for a plain URL, else how the server is verified ("on, verified against
    /// ..." or "on, verification off (verify_peer => false)"), and tls_verify_peer.
    /// sentinel_service and sentinel_primary: for a Sentinel URL its service and the
    /// primary (host:port) the open connection is to, else null.
    /// local_denials_table: where this process's local-denial table is ("inherited": made
    /// before the fork, shared with its sibling workers; "named": a file in /dev/shm shared
    /// by the workers of its php-fpm master; "own": made here, shared with the processes it
    /// forks; "private": its alone, see phpinfo()), and local_denials_shared: whether it
    /// shares it with sibling workers ("inherited" or "named").
    /// request_lifecycle: "request" (each request is a PHP request: RINIT/RSHUTDOWN), or
    /// "worker" inside a worker's long request that has ended handled requests
    /// (FrankenPHP's worker mode: each one started and ended at the SAPI's
    /// activate/deactivate); handled_requests: how many this PHP request has ended.
    /// mode: the mode in force, "enforce" or "shadow" (live `limiter set mode=...` as this
    /// process last saw it, else the `mode` option).
    /// adaptive: null without the `adaptive` option, else share (the share of the limits
    /// in force, 0..1), paused_until (unix seconds, null: no pause), last_throttle
    /// (status, at, retry_after: the last throttling answer reported, or null), source
    /// ("valkey": read now, with `ping`; "process": what this process last saw),
    /// read_error, feedback_errors and last_feedback_error(_at) (feedback() calls Valkey
    /// did not answer; never thrown).
    /// With `ping` one PING is sent over the pooled connection (never a new connection per
    /// call, nothing while the circuit is open); without it nothing is sent.
    #[php(defaults(ping = true))]
    pub fn health(&self, ping: BoolOr) -> PhpResult<ZBox<ZendHashTable>> {
        let ping = ping.get(Param::new("CheckoutGuard\\RateLimiter::health", 1, "ping"))?;
        let h = self.inner.health(ping);
        let build = || -> ext_php_rs::error::Result<ZBox<ZendHashTable>> {
            let mut out = ZendHashTable::new();
            out.insert("ok", h.ok)?;
            out.insert("mode", self.inner.mode().as_str())?;
            let endpoint = &self.inner.options().endpoint;
            out.insert("url", endpoint.display_url())?;
            out.insert("tls", endpoint.tls().map(|t| t.describe()))?;
            out.insert("tls_verify_peer", endpoint.tls().map(|t| t.verify_peer))?;
            // A Sentinel URL: its service, and the primary the open connection is to.
            let service = match endpoint.target() {
                checkout_guard_config::endpoint::Target::Sentinel(s) => Some(s.service.clone()),
                _ => None,
            };
            out.insert("sentinel_service", service)?;
            out.insert("sentinel_primary", h.primary.clone())?;
            out.insert("connected", h.connected)?;
            out.insert("circuit", if h.circuit_open { "open" } else { "closed" })?;
            out.insert("retry_in_ms", h.retry_in.as_millis() as i64)?;
            out.insert("last_error", h.last_error.clone())?;
            out.insert("consecutive_failures", i64::from(h.consecutive_failures))?;
            out.insert("connects", h.connects as i64)?;
            // Which engine decided last in this process: "module", "lua", or null.
            out.insert("engine", h.engine)?;
            // Unix seconds, as PHP's microtime(true).
            let unix = |t: std::time::SystemTime| {
                t.duration_since(std::time::UNIX_EPOCH)
                    .ok()
                    .map(|d| d.as_secs_f64())
            };
            let (ms, at) = match h.last_ping {
                Some((rtt, at)) => (Some(rtt.as_secs_f64() * 1e3), unix(at)),
                None => (None, None),
            };
            out.insert("ping_ms", ms)?;
            out.insert("last_ping_at", at)?;
            out.insert("pid", i64::from(std::process::id()))?;
            // "request" (RINIT/RSHUTDOWN bracket each request), or "worker" inside a
            // worker's long request whose handled requests the SAPI's activate/deactivate
            // bracket (FrankenPHP's worker mode); see lifecycle.rs.
            out.insert("request_lifecycle", crate::lifecycle::current().as_str())?;
            out.insert("handled_requests", crate::lifecycle::handled_here() as i64)?;
            // This process's decisions with the limiter's engine, apart from the
            // connection: a PING that answers clears none of it.
            let d = &h.decisions;
            out.insert("last_decision_at", d.last_ok_at.and_then(unix))?;
            out.insert(
                "last_decision_error",
                d.last_error.as_ref().map(|(e, _)| e.clone()),
            )?;
            out.insert(
                "last_decision_error_at",
                d.last_error.as_ref().and_then(|(_, t)| unix(*t)),
            )?;
            out.insert("consecutive_failed_decisions", i64::from(d.failed_in_row))?;
            out.insert("decisions_failing", d.failing())?;
            // The adaptive budget (null when the option is off): read from Valkey when
            // pinging (source "valkey"), else what this process last saw ("process").
            match self.inner.adaptive_health(ping) {
                None => out.insert("adaptive", ())?,
                Some(a) => {
                    let mut t = ZendHashTable::new();
                    t.insert("share", a.share)?;
                    t.insert("paused_until", a.paused_until_us.map(|us| us as f64 / 1e6))?;
                    match a.last {
                        None => t.insert("last_throttle", ())?,
                        Some(l) => {
                            let mut lt = ZendHashTable::new();
                            lt.insert("status", l.status)?;
                            lt.insert("at", l.at_us as f64 / 1e6)?;
                            lt.insert(
                                "retry_after",
                                (l.retry_after_us > 0).then(|| l.retry_after_us as f64 / 1e6),
                            )?;
                            t.insert("last_throttle", lt)?;
                        }
                    }
                    t.insert("source", if a.from_valkey { "valkey" } else { "process" })?;
                    t.insert("read_error", a.read_error)?;
                    t.insert("feedback_errors", a.feedback_errors as i64)?;
                    t.insert(
                        "last_feedback_error",
                        a.last_feedback_error.as_ref().map(|(e, _)| e.clone()),
                    )?;
                    t.insert(
                        "last_feedback_error_at",
                        a.last_feedback_error.as_ref().and_then(|(_, at)| unix(*at)),
                    )?;
                    out.insert("adaptive", t)?;
                }
            }
            // The in_flight option (null when off) and what became of this process's
            // leases.
            match &self.inner.in_flight_in_force() {
                None => out.insert("in_flight", ())?,
                Some(f) => {
                    let mut t = ZendHashTable::new();
                    let limit = |i: usize| (f.limits[i] > 0).then_some(f.limits[i]);
                    t.insert("global", f.limits[0])?;
                    t.insert("hot_lane", limit(1))?;
                    t.insert("hot_shop", limit(2))?;
                    t.insert("lease_seconds", f.lease_us as f64 / 1e6)?;
                    let c = self.inner.lease_counts();
                    t.insert("taken", c.taken as i64)?;
                    t.insert("released", c.released as i64)?;
                    t.insert("leaked", c.leaked as i64)?;
                    t.insert("expired", c.expired as i64)?;
                    t.insert("release_failed", c.release_failed as i64)?;
                    t.insert("unknown_outcome", c.unknown as i64)?;
                    out.insert("in_flight", t)?;
                }
            }
            // The New Relic agent's cap and what the workers handed it past the cap (the
            // process's telemetry, as in Telemetry::stats()['sinks']['newrelic']): on-call
            // looks at health() first.
            let mut agent = ZendHashTable::new();
            crate::telemetry::agent_cap_stats(&mut agent)?;
            out.insert("newrelic_agent", agent)?;
            let table = checkout_guard_runtime::denials::sharing();
            out.insert("local_denials_table", table.as_ref().map(|t| t.kind()))?;
            out.insert(
                "local_denials_shared",
                table.as_ref().is_some_and(|t| t.with_siblings()),
            )?;
            Ok(out)
        };
        build().map_err(|e| PhpException::from(e.to_string()))
    }

    /// Forgets this limiter's bucket state: all buckets are full again. Hot marks stay.
    pub fn reset(&self) -> PhpResult<()> {
        self.inner.reset().map_err(to_php)
    }
}

/// An endpoint or class name argument (`?string`): null is none; the bytes as given (a
/// name not configured is refused with them quoted).
fn name_arg(arg: OptStringArg, param: Param) -> PhpResult<Option<Vec<u8>>> {
    arg.get(param)
}

/// A name as PHP is shown it (a configured name is ASCII: only those reach a decision).
fn shown(name: Option<&[u8]>) -> Option<String> {
    name.map(|b| String::from_utf8_lossy(b).into_owned())
}
