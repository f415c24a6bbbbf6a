//! The `auto_hot` option.

use std::time::Duration;

use super::{map_entries, type_error, MAX_TTL_SECONDS};
use crate::bucket::BucketSpec;
use crate::error::ConfigError;
use crate::value::Value;

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

const AUTO_HOT_KNOWN: &str = "window_seconds, share, ttl_seconds, min_tokens";

// What each part must be: the one check of the option and of a decoded call.
const WINDOW_EXPECTED: &str = "a number of seconds from 1 to 3600";
const SHARE_EXPECTED: &str = "a number above 0 and below 1 (0.3 = 30%)";
const MIN_TOKENS_EXPECTED: &str = "an integer from 1 to 1000000000";
fn ttl_expected() -> String {
    format!("an integer from 1 to {MAX_TTL_SECONDS}")
}
fn window_ok(seconds: f64) -> bool {
    (1.0..=3600.0).contains(&seconds)
}
fn share_ok(share: f64) -> bool {
    share > 0.0 && share < 1.0
}
fn ttl_ok(seconds: i64) -> bool {
    (1..=MAX_TTL_SECONDS).contains(&seconds)
}
fn min_tokens_ok(tokens: i64) -> bool {
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

    /// `true` for the defaults (10 s, 30%, 5 minutes, min_tokens 10% of what the global
    /// bucket refills in one window, at least 1), or an array overriding any of them.
    pub fn from_value(v: &Value, global: &BucketSpec) -> Result<Option<Self>, ConfigError> {
        let entries: &[(String, Value)] = match v {
            Value::Bool(false) => return Ok(None),
            Value::Bool(true) => &[],
            v => map_entries("auto_hot", v)?,
        };
        let mut window_s = 10.0;
        let mut share = 0.3;
        let mut ttl_seconds = 300;
        let mut min_tokens = None;
        for (key, value) in entries {
            let option = format!("auto_hot.{key}");
            let number = match value {
                Value::Int(i) => Some(*i as f64),
                Value::Float(f) => Some(*f),
                _ => None,
            };
            match key.as_str() {
                "window_seconds" => match number {
                    Some(x) if window_ok(x) => window_s = x,
                    _ => return Err(type_error(&option, WINDOW_EXPECTED, value)),
                },
                "share" => match number {
                    Some(x) if share_ok(x) => share = x,
                    _ => return Err(type_error(&option, SHARE_EXPECTED, value)),
                },
                "ttl_seconds" => match value {
                    Value::Int(t) if ttl_ok(*t) => ttl_seconds = *t,
                    _ => return Err(type_error(&option, &ttl_expected(), value)),
                },
                "min_tokens" => match value {
                    Value::Int(t) if min_tokens_ok(*t) => min_tokens = Some(*t),
                    _ => return Err(type_error(&option, MIN_TOKENS_EXPECTED, value)),
                },
                _ => {
                    return Err(ConfigError::new(
                        option,
                        format!("is not a known option (known: {AUTO_HOT_KNOWN})"),
                    ))
                }
            }
        }
        let min_tokens = min_tokens.unwrap_or_else(|| {
            ((global.refill_per_second() * window_s * 0.1).ceil() as i64).max(1)
        });
        Self::new(
            Duration::from_secs_f64(window_s),
            share,
            ttl_seconds,
            min_tokens,
        )
        .map(Some)
    }
}
