//! The `in_flight` option: at most N calls of a limiter in flight at once (leases beside
//! the token buckets, decided in the same call: [`checkout_guard_model::in_flight`]).

use crate::value::{map_entries, type_error, Value};
use checkout_guard_model::bucket::BucketSet;
use checkout_guard_model::error::ConfigError;
use checkout_guard_model::in_flight::{InFlight, DEFAULT_LEASE_SECONDS, MAX_LEASE_SECONDS};

const KNOWN: &str = "global, hot_lane, hot_shop, lease_seconds";
/// The largest limit a level takes (a million calls in flight is no limit).
pub const MAX_IN_FLIGHT: i64 = 1_000_000;

/// `['global' => N, 'hot_lane' => M, 'hot_shop' => K, 'lease_seconds' => S]`: `global`
/// required; the hot levels only where the limiter has that bucket, each at most
/// `global`; `lease_seconds` from 1 to [`MAX_LEASE_SECONDS`] (default 30).
pub fn in_flight_from_value(v: &Value, buckets: &BucketSet) -> Result<InFlight, ConfigError> {
    let entries = map_entries("in_flight", v)?;
    let mut limits = [0i64; 3];
    let mut lease_seconds = DEFAULT_LEASE_SECONDS;
    let limit_expected = format!("an integer from 1 to {MAX_IN_FLIGHT}");
    for (key, value) in entries {
        let option = format!("in_flight.{key}");
        let level = match key.as_str() {
            "global" => 0,
            "hot_lane" => 1,
            "hot_shop" => 2,
            "lease_seconds" => {
                lease_seconds = match value {
                    Value::Int(i) if (1..=MAX_LEASE_SECONDS).contains(i) => *i as f64,
                    Value::Float(f)
                        if f.is_finite() && (1.0..=MAX_LEASE_SECONDS as f64).contains(f) =>
                    {
                        *f
                    }
                    _ => {
                        return Err(type_error(
                            &option,
                            &format!("a number of seconds from 1 to {MAX_LEASE_SECONDS}"),
                            value,
                        ))
                    }
                };
                continue;
            }
            _ => {
                return Err(ConfigError::new(
                    option,
                    format!("is not a known option (known: {KNOWN})"),
                ))
            }
        };
        match value {
            Value::Int(n) if (1..=MAX_IN_FLIGHT).contains(n) => limits[level] = *n,
            _ => return Err(type_error(&option, &limit_expected, value)),
        }
    }
    if limits[0] == 0 {
        return Err(ConfigError::new(
            "in_flight.global",
            "is required (the most calls of this limiter in flight at once)",
        ));
    }
    for (level, name, has) in [
        (1, "hot_lane", buckets.hot_lane.is_some()),
        (2, "hot_shop", buckets.hot_shop.is_some()),
    ] {
        if limits[level] == 0 {
            continue;
        }
        if !has {
            return Err(ConfigError::new(
                format!("in_flight.{name}"),
                format!("needs the {name} bucket: this limiter has none (its hot levels are the buckets it has)"),
            ));
        }
        if limits[level] > limits[0] {
            return Err(ConfigError::new(
                format!("in_flight.{name}"),
                format!(
                    "must be at most in_flight.global ({}), got {}",
                    limits[0], limits[level]
                ),
            ));
        }
    }
    Ok(InFlight {
        limits,
        lease_us: (lease_seconds * 1e6).round() as i64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkout_guard_model::bucket::BucketSpec;

    fn map(pairs: &[(&str, Value)]) -> Value {
        Value::Map(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn set(hot: bool) -> BucketSet {
        BucketSet {
            global: BucketSpec::new("global", 100, 50.0).unwrap(),
            hot_lane: hot.then(|| BucketSpec::new("hot_lane", 80, 40.0).unwrap()),
            hot_shop: hot.then(|| BucketSpec::new("hot_shop", 30, 15.0).unwrap()),
        }
    }

    #[test]
    fn the_option_is_read_with_its_default_lease() {
        let f = in_flight_from_value(
            &map(&[
                ("global", Value::Int(40)),
                ("hot_lane", Value::Int(30)),
                ("hot_shop", Value::Int(10)),
            ]),
            &set(true),
        )
        .unwrap();
        assert_eq!(f.limits, [40, 30, 10]);
        assert_eq!(f.lease_us, 30_000_000);
        let f = in_flight_from_value(
            &map(&[
                ("global", Value::Int(5)),
                ("lease_seconds", Value::Float(2.5)),
            ]),
            &set(false),
        )
        .unwrap();
        assert_eq!((f.limits, f.lease_us), ([5, 0, 0], 2_500_000));
    }

    #[test]
    fn bad_values_are_refused_naming_the_part() {
        let cases: &[(Value, bool, &str)] = &[
            (map(&[]), true, "in_flight.global"),
            (map(&[("global", Value::Int(0))]), true, "in_flight.global"),
            (
                map(&[("global", Value::Float(3.0))]),
                true,
                "in_flight.global",
            ),
            (
                map(&[("global", Value::Int(2)), ("hot_shop", Value::Int(3))]),
                true,
                "in_flight.hot_shop",
            ),
            (
                map(&[("global", Value::Int(2)), ("hot_lane", Value::Int(1))]),
                false,
                "in_flight.hot_lane",
            ),
            (
                map(&[
                    ("global", Value::Int(2)),
                    ("lease_seconds", Value::Int(601)),
                ]),
                true,
                "in_flight.lease_seconds",
            ),
            (
                map(&[
                    ("global", Value::Int(2)),
                    ("lease_seconds", Value::Float(0.5)),
                ]),
                true,
                "in_flight.lease_seconds",
            ),
            (
                map(&[("global", Value::Int(2)), ("burst", Value::Int(1))]),
                true,
                "in_flight.burst",
            ),
            (Value::Int(3), true, "in_flight"),
        ];
        for (v, hot, option) in cases {
            let e = in_flight_from_value(v, &set(*hot)).unwrap_err();
            assert_eq!(e.option, *option, "{v:?}: {e}");
        }
    }
}
