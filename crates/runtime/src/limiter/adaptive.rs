//! The adaptive budget as this process sees it: what replies and `feedback()` told it,
//! `feedback()` itself, and the budget for `health()`.

use std::time::SystemTime;

use checkout_guard_config::validate_shop_id;
use checkout_guard_model::adaptive::{LastThrottle, FULL, MAX_RETRY_AFTER_SECONDS};
use checkout_guard_model::{ConfigError, FeedbackCall, LimiterError, StepReply};

use super::Limiter;
use crate::denials;
use crate::notices::{AdaptChange, AdaptWhy};

/// The adaptive budget as this process last saw it: the share and pause of the last
/// reply that read the state (or the last feedback's), the last throttling answer it
/// reported, and its feedback calls that Valkey did not answer (never thrown: feedback
/// is reported after the provider answered, and must not fail a checkout).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdaptSeen {
    /// Permille (1000: the limits; 0: nothing seen yet, read as 1000).
    pub permille: i64,
    /// Until when the provider's pause holds (Valkey's clock, µs; 0: none).
    pub pause_until_us: i64,
    /// Valkey's `now` of the reply this was seen in (µs; 0: none).
    pub seen_at_us: i64,
    /// The last throttling answer this process reported.
    pub last: Option<LastThrottle>,
    /// Feedback calls that failed (connection, timeout, error reply), and the last error.
    pub feedback_errors: u64,
    pub last_feedback_error: Option<(String, SystemTime)>,
}

impl AdaptSeen {
    /// The share in force as last seen (0..=1).
    pub fn share(&self) -> f64 {
        if self.permille <= 0 {
            1.0
        } else {
            self.permille as f64 / FULL as f64
        }
    }
}

/// The adaptive budget for a readiness check ([`Limiter::adaptive_health`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptHealth {
    /// The share in force (0..=1 of the limits).
    pub share: f64,
    /// Until when the provider's pause holds (Valkey's clock, Unix µs), if it does.
    pub paused_until_us: Option<i64>,
    /// The last throttling answer (any worker's when read from Valkey).
    pub last: Option<LastThrottle>,
    /// Read from Valkey now (else: what this process last saw).
    pub from_valkey: bool,
    /// Why it could not be read from Valkey.
    pub read_error: Option<String>,
    pub feedback_errors: u64,
    pub last_feedback_error: Option<(String, SystemTime)>,
}

/// Unix µs of a wall-clock instant.
fn wall_us(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl Limiter {
    /// Records the adaptive share and pause a decision's reply carried; returns the
    /// recovery to report when this decision found the budget back at the limits.
    pub(super) fn saw_reply(&self, reply: &StepReply) -> Option<AdaptChange> {
        self.options.adaptive.as_ref()?;
        let mut seen = self.adapt_seen.lock();
        let before = seen.share();
        let (permille, pause) = if reply.adapt_seen {
            (reply.adapt_permille, reply.pause_until_us)
        } else {
            (FULL, 0)
        };
        seen.permille = permille;
        seen.pause_until_us = pause;
        seen.seen_at_us = reply.now_us;
        reply.recovered().then_some(AdaptChange {
            why: AdaptWhy::Recovered,
            from: before,
            to: 1.0,
            status: None,
            retry_after: None,
            paused_until_ms: None,
        })
    }

    /// What the provider answered to a call this limiter admitted for `shop`: `status`,
    /// and its `Retry-After` in seconds (None or 0: none; INF or anything beyond
    /// [`MAX_RETRY_AFTER_SECONDS`] reads as that, the longest pause). Without the `adaptive`
    /// option, or for a status that is not one of its `statuses` (a success), nothing
    /// is sent; a throttling answer is one call of the feedback script. Returns what
    /// changed (for `RateLimitAdapt` events). Bad arguments are errors naming them; a
    /// Valkey that cannot be asked is not: counted and kept for `health()`, nothing
    /// changes.
    pub fn feedback(
        &self,
        shop: &[u8],
        status: i64,
        retry_after_seconds: Option<f64>,
    ) -> Result<Vec<AdaptChange>, LimiterError> {
        validate_shop_id(shop)?;
        if !(100..=599).contains(&status) {
            return Err(ConfigError::new(
                "statusCode",
                format!("must be an HTTP status code from 100 to 599, got {status}"),
            )
            .into());
        }
        let retry_after = retry_after_seconds.unwrap_or(0.0);
        if retry_after.is_nan() || retry_after < 0.0 {
            return Err(ConfigError::new(
                "retryAfterSeconds",
                format!(
                    "must be a number of seconds, 0 or more (INF: the longest pause), got {retry_after:?}"
                ),
            )
            .into());
        }
        // A huge Retry-After (INF: PHP's reading of 309 digits or more) asks for a long
        // pause: the longest one, as any value beyond MAX_PAUSE_US; reported finite.
        let retry_after = retry_after.min(MAX_RETRY_AFTER_SECONDS);
        let Some(adaptive) = &self.options.adaptive else {
            return Ok(Vec::new());
        };
        if !adaptive.throttles(status) {
            return Ok(Vec::new());
        }
        crate::metrics::add(
            crate::metrics::Family::ProviderThrottled,
            &[&self.options.name],
            1,
        );
        // Whole µs, at least 1 for any positive value; beyond the longest pause the
        // script bounds it anyway.
        let retry_after_us = if retry_after > 0.0 {
            ((retry_after * 1e6).ceil()).min(i64::MAX as f64 / 2.0) as i64
        } else {
            0
        };
        let call = FeedbackCall {
            adapt_key: &self.adapt_key,
            last_key: &self.adapt_last_key,
            status,
            decrease: adaptive.decrease,
            params: adaptive.params(),
            retry_after_us,
        };
        let result = self
            .store
            .feedback(&call)
            .and_then(|ints| FeedbackCall::decode_reply(&ints).map_err(Self::bad_reply));
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let mut seen = self.adapt_seen.lock();
                seen.feedback_errors += 1;
                seen.last_feedback_error = Some((e.to_string(), self.clock.wall()));
                return Ok(Vec::new());
            }
        };
        // The gauge follows the share this answer left (a flood answered by local denials
        // would not show it until a decision in Valkey).
        self.series
            .set_share(&self.options.name, out.to as f64 / FULL as f64);
        let mut seen = self.adapt_seen.lock();
        seen.permille = out.to;
        seen.pause_until_us = out.pause_until;
        seen.seen_at_us = out.now;
        seen.last = Some(LastThrottle {
            status,
            at_us: out.now,
            retry_after_us,
        });
        drop(seen);
        if out.decreased || out.paused {
            // Local denials learnt at the old share would answer with its retry times
            // (see `learn`): the next call of this host asks Valkey.
            let in_force = self.current();
            let now = self.clock.monotonic_ns();
            denials::forget(in_force.global_denial_key, now);
            denials::forget(in_force.hot_lane_denial_key, now);
        }
        let share = |p: i64| p as f64 / FULL as f64;
        let paused_until_ms = (out.pause_until > out.now).then(|| out.pause_until.div_euclid(1000));
        let retry_after = (retry_after > 0.0).then_some(retry_after);
        let mut changes = Vec::new();
        if out.decreased && out.to != out.from {
            changes.push(AdaptChange {
                why: AdaptWhy::Throttled,
                from: share(out.from),
                to: share(out.to),
                status: Some(status),
                retry_after,
                paused_until_ms,
            });
        }
        if out.paused {
            changes.push(AdaptChange {
                why: AdaptWhy::RetryAfter,
                from: share(out.to),
                to: share(out.to),
                status: Some(status),
                retry_after,
                paused_until_ms,
            });
        }
        Ok(changes)
    }

    /// The adaptive budget for `health()` (None: the option is off): with `ping`, read
    /// from Valkey (the state and the last throttling answer, one read-only call within
    /// the timeout; during a back-off or when it fails, what this process last saw);
    /// without, what this process last saw. Never an error.
    pub fn adaptive_health(&self, ping: bool) -> Option<AdaptHealth> {
        let adaptive = self.options.adaptive.as_ref()?;
        let seen = self.adapt_seen.lock().clone();
        let mut h = AdaptHealth {
            share: seen.share(),
            // Still ahead on this host's clock (Valkey's may differ by the hosts' skew).
            paused_until_us: (seen.pause_until_us > wall_us(self.clock.wall()))
                .then_some(seen.pause_until_us),
            last: seen.last,
            from_valkey: false,
            read_error: None,
            feedback_errors: seen.feedback_errors,
            last_feedback_error: seen.last_feedback_error.clone(),
        };
        if !ping {
            return Some(h);
        }
        match self.store.read_adapt(&self.adapt_key, &self.adapt_last_key) {
            Ok((state, last, now)) => {
                let params = adaptive.params();
                let state =
                    checkout_guard_model::adaptive::AdaptState::read_like_the_script(&state);
                h.share = state.map_or(1.0, |s| s.permille_at(now, &params) as f64 / FULL as f64);
                h.paused_until_us = state.filter(|s| s.paused_at(now)).map(|s| s.pause_until);
                h.last = LastThrottle::parse(&last).or(h.last);
                h.from_valkey = true;
            }
            Err(e) => h.read_error = Some(e.to_string()),
        }
        Some(h)
    }

    /// The adaptive budget as this process last saw it (None: the option is off).
    pub fn adapt_seen(&self) -> Option<AdaptSeen> {
        self.options.adaptive.as_ref()?;
        Some(self.adapt_seen.lock().clone())
    }
}
