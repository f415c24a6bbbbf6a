//! The bucket options (`global`, `hot_lane`, `hot_shop`): shared by the constructor and
//! live limits.

use crate::value::Value;
use crate::value::{map_entries, option, type_error};
use checkout_guard_model::bucket::{BucketSet, BucketSpec, Lane};
use checkout_guard_model::error::ConfigError;

/// Validates the bucket options (`global` required, `hot_lane` and `hot_shop` optional and
/// not above global): the constructor and live limits share this code.
pub fn buckets_from_value(options: &Value) -> Result<BucketSet, ConfigError> {
    let entries = map_entries("options", options)?;
    let get = |k: &str| option(entries, k);
    let global = match get("global") {
        None => {
            return Err(ConfigError::new(
                "global",
                "is required: ['capacity' => int >= 1, 'refill_per_second' => float > 0]",
            ))
        }
        Some(v) => bucket("global", v)?,
    };
    let hot_lane = get("hot_lane").map(|v| bucket("hot_lane", v)).transpose()?;
    let hot_shop = get("hot_shop").map(|v| bucket("hot_shop", v)).transpose()?;
    for (option, spec) in [("hot_lane", &hot_lane), ("hot_shop", &hot_shop)] {
        if let Some(spec) = spec {
            not_above_global(option, spec, &global)?;
        }
    }
    Ok(BucketSet {
        global,
        hot_lane,
        hot_shop,
    })
}

/// The bucket options as the constructor takes them, e.g. for live limits to override.
pub fn buckets_to_value(set: &BucketSet) -> Value {
    let mut entries = Vec::new();
    for lane in Lane::ALL {
        if let Some(b) = set.get(lane) {
            entries.push((
                lane.as_str().to_string(),
                bucket_value(b.capacity(), b.refill_per_second()),
            ));
        }
    }
    Value::Map(entries)
}

/// One bucket option as the constructor takes it.
pub fn bucket_value(capacity: i64, refill_per_second: f64) -> Value {
    Value::Map(vec![
        ("capacity".into(), Value::Int(capacity)),
        ("refill_per_second".into(), Value::Float(refill_per_second)),
    ])
}

pub(super) fn bucket(option: &str, v: &Value) -> Result<BucketSpec, ConfigError> {
    let entries = map_entries(option, v)?;
    let mut capacity = None;
    let mut rate = None;
    for (key, value) in entries {
        match key.as_str() {
            "capacity" => capacity = Some(value),
            "refill_per_second" => rate = Some(value),
            _ => {
                return Err(ConfigError::new(
                    format!("{option}.{key}"),
                    "is not a known option (known: capacity, refill_per_second)",
                ))
            }
        }
    }
    let capacity = match capacity {
        Some(Value::Int(c)) => *c,
        Some(v) => {
            return Err(type_error(
                &format!("{option}.capacity"),
                "an integer >= 1",
                v,
            ))
        }
        None => {
            return Err(ConfigError::new(
                format!("{option}.capacity"),
                "is required (an integer >= 1)",
            ))
        }
    };
    let rate = match rate {
        Some(Value::Int(r)) => *r as f64,
        Some(Value::Float(r)) => *r,
        Some(v) => {
            return Err(type_error(
                &format!("{option}.refill_per_second"),
                "a number > 0",
                v,
            ))
        }
        None => {
            return Err(ConfigError::new(
                format!("{option}.refill_per_second"),
                "is required (a number > 0)",
            ))
        }
    };
    BucketSpec::new(option, capacity, rate)
}

pub(super) fn not_above_global(
    option: &str,
    spec: &BucketSpec,
    global: &BucketSpec,
) -> Result<(), ConfigError> {
    if spec.capacity() > global.capacity() {
        return Err(ConfigError::new(
            format!("{option}.capacity"),
            format!(
                "may not exceed global.capacity ({}), got {}",
                global.capacity(),
                spec.capacity()
            ),
        ));
    }
    if spec.refill_per_second() > global.refill_per_second() {
        return Err(ConfigError::new(
            format!("{option}.refill_per_second"),
            format!(
                "may not exceed global.refill_per_second ({:?}), got {:?}",
                global.refill_per_second(),
                spec.refill_per_second()
            ),
        ));
    }
    Ok(())
}
