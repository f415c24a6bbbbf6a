//! The `adaptive` option: the budget follows the provider's throttling answers.

use crate::value::Value;
use crate::value::{map_entries, type_error};
use checkout_guard_model::error::ConfigError;

/// The `adaptive` option (off by default): on an answer whose status is one of
/// `statuses` (reported by `RateLimiter::feedback()`), every bucket of the limiter is
/// scaled by `decrease`, at most once per [`checkout_guard_model::adaptive::COOLDOWN_US`],
/// never below `min_share` of the limits; without such answers the budget climbs back
/// (CUBIC) to the limits in `recover_seconds` from the floor. See
/// [`checkout_guard_model::adaptive`].
#[derive(Debug, Clone, PartialEq)]
pub struct Adaptive {
    /// The statuses that mean "too fast" (default `[429]`), sorted, no duplicates.
    pub statuses: Vec<u16>,
    /// The factor applied to the budget on a throttling answer (default 0.7).
    pub decrease: f64,
    /// Seconds without throttling for the budget to climb from its floor back to the
    /// limits (default 60).
    pub recover_seconds: f64,
    /// The floor, a share of the limits (default 0.1; 1: never decreased, only the
    /// provider's `Retry-After` pauses).
    pub min_share: f64,
}

const KNOWN: &str = "statuses, decrease, recover_seconds, min_share";
const DECREASE_EXPECTED: &str = "a number above 0 and below 1 (0.7 = down to 70%)";
const RECOVER_EXPECTED: &str = "a number of seconds above 0 and at most 86400";
const MIN_SHARE_EXPECTED: &str = "a number above 0 and at most 1 (1: adaptation off)";
const STATUSES_EXPECTED: &str = "a non-empty list of HTTP status codes from 400 to 599";
/// Longest `recover_seconds`: a day.
pub const MAX_RECOVER_SECONDS: f64 = 86_400.0;

impl Default for Adaptive {
    fn default() -> Self {
        Self {
            statuses: vec![429],
            decrease: 0.7,
            recover_seconds: 60.0,
            min_share: 0.1,
        }
    }
}

impl Adaptive {
    /// `true` for the defaults, `false` for off, or an array overriding any of them.
    pub fn from_value(v: &Value) -> Result<Option<Self>, ConfigError> {
        let entries: &[(String, Value)] = match v {
            Value::Bool(false) => return Ok(None),
            Value::Bool(true) => &[],
            v => map_entries("adaptive", v)?,
        };
        let mut out = Self::default();
        for (key, value) in entries {
            let option = format!("adaptive.{key}");
            let number = match value {
                Value::Int(i) => Some(*i as f64),
                Value::Float(f) if f.is_finite() => Some(*f),
                _ => None,
            };
            match key.as_str() {
                "decrease" => match number {
                    Some(x) if x > 0.0 && x < 1.0 => out.decrease = x,
                    _ => return Err(type_error(&option, DECREASE_EXPECTED, value)),
                },
                "recover_seconds" => match number {
                    Some(x) if x > 0.0 && x <= MAX_RECOVER_SECONDS => out.recover_seconds = x,
                    _ => return Err(type_error(&option, RECOVER_EXPECTED, value)),
                },
                "min_share" => match number {
                    Some(x) if x > 0.0 && x <= 1.0 => out.min_share = x,
                    _ => return Err(type_error(&option, MIN_SHARE_EXPECTED, value)),
                },
                "statuses" => out.statuses = statuses(&option, value)?,
                _ => {
                    return Err(ConfigError::new(
                        option,
                        format!("is not a known option (known: {KNOWN})"),
                    ))
                }
            }
        }
        Ok(Some(out))
    }

    /// Whether `status` is a throttling answer.
    pub fn throttles(&self, status: i64) -> bool {
        u16::try_from(status).is_ok_and(|s| self.statuses.binary_search(&s).is_ok())
    }

    /// What a decision needs: the floor in permille and the recovery time in µs.
    pub fn params(&self) -> checkout_guard_model::adaptive::AdaptParams {
        checkout_guard_model::adaptive::AdaptParams::new(self.min_share, self.recover_seconds)
    }
}

fn statuses(option: &str, v: &Value) -> Result<Vec<u16>, ConfigError> {
    let items: Vec<&Value> = match v {
        Value::List(items) => items.iter().collect(),
        Value::Map(entries) => entries.iter().map(|(_, v)| v).collect(),
        v => return Err(type_error(option, STATUSES_EXPECTED, v)),
    };
    if items.is_empty() {
        return Err(type_error(option, STATUSES_EXPECTED, v));
    }
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item {
            Value::Int(n) if (400..=599).contains(n) => out.push(*n as u16),
            other => {
                return Err(type_error(
                    &format!("{option}[{i}]"),
                    "an HTTP status code from 400 to 599",
                    other,
                ))
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    #[test]
    fn defaults_overrides_and_refusals_name_the_option() {
        assert_eq!(Adaptive::from_value(&Value::Bool(false)).unwrap(), None);
        let d = Adaptive::from_value(&Value::Bool(true)).unwrap().unwrap();
        assert_eq!(d, Adaptive::default());
        assert!(d.throttles(429) && !d.throttles(503) && !d.throttles(-429));
        let a = Adaptive::from_value(&map(&[
            (
                "statuses",
                Value::List(vec![Value::Int(503), Value::Int(429), Value::Int(429)]),
            ),
            ("decrease", Value::Float(0.5)),
            ("recover_seconds", Value::Int(10)),
            ("min_share", Value::Int(1)),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(a.statuses, vec![429, 503]);
        assert_eq!(
            (a.decrease, a.recover_seconds, a.min_share),
            (0.5, 10.0, 1.0)
        );
        let refuse = |pairs: &[(&str, Value)]| {
            let e = Adaptive::from_value(&map(pairs)).unwrap_err();
            format!("{}: {}", e.option, e.message)
        };
        for (pairs, want) in [
            (vec![("decrease", Value::Float(1.0))], "adaptive.decrease"),
            (vec![("decrease", Value::Int(0))], "adaptive.decrease"),
            (
                vec![("decrease", Value::Float(f64::NAN))],
                "adaptive.decrease",
            ),
            (
                vec![("recover_seconds", Value::Int(0))],
                "adaptive.recover_seconds",
            ),
            (
                vec![("recover_seconds", Value::Str(b"60".to_vec()))],
                "adaptive.recover_seconds",
            ),
            (vec![("min_share", Value::Float(1.5))], "adaptive.min_share"),
            (vec![("min_share", Value::Int(0))], "adaptive.min_share"),
            (vec![("statuses", Value::List(vec![]))], "adaptive.statuses"),
            (
                vec![("statuses", Value::List(vec![Value::Int(200)]))],
                "adaptive.statuses[0]",
            ),
            (vec![("statuses", Value::Int(429))], "adaptive.statuses"),
            (vec![("speed", Value::Int(1))], "adaptive.speed"),
        ] {
            let got = refuse(&pairs);
            assert!(got.starts_with(want), "{got} (want {want})");
        }
        let e = Adaptive::from_value(&Value::Str(b"yes".to_vec())).unwrap_err();
        assert_eq!(e.option, "adaptive");
    }
}
