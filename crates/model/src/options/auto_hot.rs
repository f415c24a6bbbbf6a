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

impl AutoHot {
    /// `true` for the defaults (10 s, 30%, 5 minutes, min_tokens 10% of what the global
    /// bucket refills in one window, at least 1), or an array overriding any of them.
    pub(super) fn from_value(v: &Value, global: &BucketSpec) -> Result<Option<Self>, ConfigError> {
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
                    Some(x) if (1.0..=3600.0).contains(&x) => window_s = x,
                    _ => {
                        return Err(type_error(
                            &option,
                            "a number of seconds from 1 to 3600",
                            value,
                        ))
                    }
                },
                "share" => match number {
                    Some(x) if x > 0.0 && x < 1.0 => share = x,
                    _ => {
                        return Err(type_error(
                            &option,
                            "a number above 0 and below 1 (0.3 = 30%)",
                            value,
                        ))
                    }
                },
                "ttl_seconds" => match value {
                    Value::Int(t) if (1..=MAX_TTL_SECONDS).contains(t) => ttl_seconds = *t,
                    _ => {
                        return Err(type_error(
                            &option,
                            &format!("an integer from 1 to {MAX_TTL_SECONDS}"),
                            value,
                        ))
                    }
                },
                "min_tokens" => match value {
                    Value::Int(t) if (1..=1_000_000_000).contains(t) => min_tokens = Some(*t),
                    _ => {
                        return Err(type_error(
                            &option,
                            "an integer from 1 to 1000000000",
                            value,
                        ))
                    }
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
        Ok(Some(Self {
            window: Duration::from_secs_f64(window_s),
            share,
            ttl_seconds,
            min_tokens,
        }))
    }
}
