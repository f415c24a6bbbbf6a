//! What a decision learnt beside its answer, for telemetry: a shop made hot, new live
//! limits, a change of the adaptive budget. Plain data: telemetry builds its events from
//! these without depending on the limiter that notices them.

use checkout_guard_config::Mode;

/// Why the adaptive budget changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdaptWhy {
    /// A throttling answer decreased the share.
    Throttled,
    /// The provider's `Retry-After` paused the limiter (or extended the pause).
    RetryAfter,
    /// A decision found the share back at the limits (and removed the state).
    Recovered,
}

impl AdaptWhy {
    pub fn as_str(self) -> &'static str {
        match self {
            AdaptWhy::Throttled => "throttled",
            AdaptWhy::RetryAfter => "retry_after",
            AdaptWhy::Recovered => "recovered",
        }
    }
}

/// One change of the adaptive budget, for a `RateLimitAdapt` event.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptChange {
    pub why: AdaptWhy,
    /// The share before and after (0..=1 of the limits).
    pub from: f64,
    pub to: f64,
    /// The provider's status (None for a recovery).
    pub status: Option<i64>,
    /// The `Retry-After` reported, seconds (None: none).
    pub retry_after: Option<f64>,
    /// Until when the limiter is paused, Unix ms on Valkey's clock (None: no pause).
    pub paused_until_ms: Option<i64>,
}

/// What one acquire() learnt beside its decision, for telemetry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Notices {
    /// `auto_hot` made the shop hot in this call: its share of the global consumption.
    pub became_hot: Option<f64>,
    /// This worker changed to new live limits in this call.
    pub limits_change: Option<LimitsChange>,
    /// This decision found the adaptive budget recovered (why = recovered).
    pub adapt: Option<AdaptChange>,
}

/// A change of live limits as one worker saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitsChange {
    pub version: i64,
    pub by: String,
    pub at_ms: i64,
    pub old: String,
    pub new: String,
    /// The stored limits were invalid for this limiter: it keeps its constructor values.
    pub error: Option<String>,
    /// The mode in force before and after the change (`enforce`, `shadow`).
    pub old_mode: Mode,
    pub mode: Mode,
}
