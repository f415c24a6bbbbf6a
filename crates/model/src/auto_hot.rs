//! `auto_hot`: what the decision needs of it (its parts, and the one check of them). The
//! option's parser (`checkout-guard-config`) and a decoded call (`server.rs`) both
//! build it with [`AutoHot::new`] and name a refused part with these texts.

use std::time::Duration;

use crate::bounds::MAX_TTL_SECONDS;
use crate::error::ConfigError;

/// The `auto_hot` option: a shop whose share of the tokens taken from the global bucket
/// over the sliding `window` exceeds `share` (and that took at least `min_tokens` in it)
/// becomes hot for `ttl_seconds`, for every worker at once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoHot {
    pub window: Duration,
    pub share: f64,
    pub ttl_seconds: i64,
    pub min_tokens: i64,
}

// What each part must be: the one check of the option and of a decoded call.
pub const WINDOW_EXPECTED: &str = "a number of seconds from 1 to 3600";
pub const SHARE_EXPECTED: &str = "a number above 0 and below 1 (0.3 = 30%)";
pub const MIN_TOKENS_EXPECTED: &str = "an integer from 1 to 1000000000";
pub fn ttl_expected() -> String {
    format!("an integer from 1 to {MAX_TTL_SECONDS}")
}
pub fn window_ok(seconds: f64) -> bool {
    (1.0..=3600.0).contains(&seconds)
}
pub fn share_ok(share: f64) -> bool {
    share > 0.0 && share < 1.0
}
pub fn ttl_ok(seconds: i64) -> bool {
    (1..=MAX_TTL_SECONDS).contains(&seconds)
}
pub fn min_tokens_ok(tokens: i64) -> bool {
    (1..=1_000_000_000).contains(&tokens)
}

impl AutoHot {
    /// An `auto_hot` from its parts, validated exactly as the option's are (what a
    /// decoded call or the published settings build): the error names the option.
    pub fn new(
        window: Duration,
        share: f64,
        ttl_seconds: i64,
        min_tokens: i64,
    ) -> Result<Self, ConfigError> {
        let refuse = |part: &str, expected: &str, got: String| {
            ConfigError::new(
                format!("auto_hot.{part}"),
                format!("must be {expected}, got {got}"),
            )
        };
        let seconds = window.as_secs_f64();
        if !window_ok(seconds) {
            return Err(refuse(
                "window_seconds",
                WINDOW_EXPECTED,
                seconds.to_string(),
            ));
        }
        if !share_ok(share) {
            return Err(refuse("share", SHARE_EXPECTED, share.to_string()));
        }
        if !ttl_ok(ttl_seconds) {
            return Err(refuse(
                "ttl_seconds",
                &ttl_expected(),
                ttl_seconds.to_string(),
            ));
        }
        if !min_tokens_ok(min_tokens) {
            return Err(refuse(
                "min_tokens",
                MIN_TOKENS_EXPECTED,
                min_tokens.to_string(),
            ));
        }
        Ok(Self {
            window,
            share,
            ttl_seconds,
            min_tokens,
        })
    }
}
