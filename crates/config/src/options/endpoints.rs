//! The `endpoints`, `priorities` and `default_priority` options (issue 42,
//! docs/endpoints.md): per-endpoint buckets under the global one, and priority classes
//! keeping a share of every bucket for the classes with a smaller share.

use super::buckets::{bucket, not_above_global};
use crate::value::{map_entries, quote_bytes, type_error, Value};
use checkout_guard_model::bucket::BucketSpec;
use checkout_guard_model::endpoints::{
    share_to_ppm, valid_name, Endpoints, Priorities, MAX_NAME_BYTES,
};
use checkout_guard_model::error::ConfigError;

/// Most endpoints (and priority classes) one limiter takes.
pub const MAX_ENDPOINTS: usize = 1_000;

const NAME_RULE: &str = "characters from A-Z a-z 0-9 _ . : / -";

/// A map's entries by name (`option` for the errors), each name checked.
fn named_entries<'a>(
    option: &str,
    v: &'a Value,
    what: &str,
    whats: &str,
) -> Result<&'a [(String, Value)], ConfigError> {
    if matches!(v, Value::List(items) if !items.is_empty()) {
        return Err(ConfigError::new(
            option,
            format!("must be an array from {what} name to its value (string keys), got a list (PHP makes keys of digits only, '0', '1', ..., a list: give such a name a letter)"),
        ));
    }
    let entries = map_entries(option, v)?;
    if entries.is_empty() {
        return Err(ConfigError::new(
            option,
            format!("must name at least one {what} (leave the option out for none)"),
        ));
    }
    if entries.len() > MAX_ENDPOINTS {
        return Err(ConfigError::new(
            option,
            format!(
                "may name at most {MAX_ENDPOINTS} {whats}, got {}",
                entries.len()
            ),
        ));
    }
    let article = if what.starts_with('e') { "an" } else { "a" };
    for (name, _) in entries {
        if !valid_name(name.as_bytes()) {
            return Err(ConfigError::new(
                format!("{option}[{}]", quote_bytes(name.as_bytes())),
                format!(
                    "is not {article} {what} name: 1 to {MAX_NAME_BYTES} {NAME_RULE}, got {}",
                    quote_bytes(name.as_bytes())
                ),
            ));
        }
    }
    Ok(entries)
}

/// `['NAME' => ['capacity' => C, 'refill_per_second' => R], ...]`: each bucket checked as
/// `global`'s and at most global's capacity and rate (`endpoints.NAME.capacity`).
pub fn endpoints_from_value(v: &Value, global: &BucketSpec) -> Result<Endpoints, ConfigError> {
    let entries = named_entries("endpoints", v, "endpoint", "endpoints")?;
    let mut pairs = Vec::with_capacity(entries.len());
    for (name, value) in entries {
        let option = format!("endpoints.{name}");
        let spec = bucket(&option, value)?;
        not_above_global(&option, &spec, global)?;
        pairs.push((name.clone(), spec));
    }
    Ok(Endpoints::new(pairs))
}

/// `priorities` (`['CLASS' => share in [0, 1), ...]`) and `default_priority` (one of the
/// classes; without it a call naming no class keeps no reserve).
pub fn priorities_from_value(
    priorities: Option<&Value>,
    default: Option<&Value>,
) -> Result<Option<Priorities>, ConfigError> {
    let Some(v) = priorities else {
        if let Some(d) = default {
            return Err(ConfigError::new(
                "default_priority",
                format!(
                    "needs the priorities option (the classes it names one of), got {}",
                    d.describe()
                ),
            ));
        }
        return Ok(None);
    };
    let entries = named_entries("priorities", v, "priority class", "priority classes")?;
    let mut pairs = Vec::with_capacity(entries.len());
    for (name, value) in entries {
        let option = format!("priorities.{name}");
        let share = match value {
            Value::Int(i) => *i as f64,
            Value::Float(f) => *f,
            v => {
                return Err(type_error(
                    &option,
                    "a share from 0 (inclusive) to 1 (exclusive)",
                    v,
                ))
            }
        };
        let ppm = share_to_ppm(share).ok_or_else(|| {
            ConfigError::new(
                &option,
                format!(
                    "must be a share from 0 (inclusive) to 1 (exclusive) of every bucket's capacity, in millionths (0, or 0.000001 to 0.999999), got {}",
                    value.describe()
                ),
            )
        })?;
        pairs.push((name.clone(), ppm));
    }
    let default = match default {
        None => None,
        Some(Value::Str(s)) => {
            let known = entries.iter().any(|(n, _)| n.as_bytes() == s.as_slice());
            if !known {
                return Err(ConfigError::new(
                    "default_priority",
                    format!(
                        "must be one of the priorities ({}), got {}",
                        entries
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", "),
                        quote_bytes(s)
                    ),
                ));
            }
            Some(String::from_utf8(s.clone()).expect("a known class is ASCII"))
        }
        Some(v) => return Err(type_error("default_priority", "a priority class's name", v)),
    };
    Ok(Some(Priorities::new(pairs, default)))
}

/// Every class must be able to take a token from every bucket it may draw from: a bucket
/// of capacity C keeps `ceil(C x share)` (in µs of its tolerance) for the classes below, so
/// what is left must hold at least one token. A class that could never pass is refused
/// here, naming it and the bucket, rather than denied forever with a `retryAfter()` that
/// promises a wait (global, the hot buckets and every endpoint; the constructor's limits,
/// and live ones by the same check).
pub fn check_classes(
    buckets: &checkout_guard_model::bucket::BucketSet,
    endpoints: &Endpoints,
    priorities: Option<&Priorities>,
) -> Result<(), ConfigError> {
    let Some(p) = priorities else {
        return Ok(());
    };
    let lanes = checkout_guard_model::bucket::Lane::ALL
        .into_iter()
        .filter_map(|l| buckets.get(l).map(|b| (l.as_str().to_string(), *b)));
    let all: Vec<(String, BucketSpec)> = lanes
        .chain(
            endpoints
                .iter()
                .map(|(n, b)| (format!("endpoints.{n}"), *b)),
        )
        .collect();
    for (class, ppm) in p.iter() {
        for (bucket, spec) in &all {
            let room = spec.tolerance_us()
                - checkout_guard_model::endpoints::reserve_us(spec.tolerance_us(), ppm);
            if room < spec.interval_us() {
                return Err(ConfigError::new(
                    format!("priorities.{class}"),
                    format!(
                        "leaves {}% of every bucket, and {bucket} holds {} tokens: the class could never take one (a smaller share, or a bucket of at least {} tokens)",
                        ppm as f64 / 1e4,
                        spec.capacity(),
                        ((1e6 / (1e6 - ppm as f64)).floor() as i64) + 1
                    ),
                ));
            }
        }
    }
    Ok(())
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

    fn b(c: i64, r: f64) -> Value {
        crate::options::bucket_value(c, r)
    }

    fn global() -> BucketSpec {
        BucketSpec::new("global", 100, 100.0).unwrap()
    }

    #[test]
    fn endpoints_are_read_by_name() {
        let e = endpoints_from_value(
            &map(&[
                ("charges.create", b(25, 25.0)),
                ("v1/items:list", b(100, 100.0)),
            ]),
            &global(),
        )
        .unwrap();
        assert_eq!(e.get("charges.create").unwrap().capacity(), 25);
        assert_eq!(e.get("v1/items:list").unwrap().refill_per_second(), 100.0);
        assert!(e.get("items").is_none());
    }

    #[test]
    fn bad_endpoints_are_refused_naming_the_option_and_value() {
        let long = "x".repeat(65);
        let cases: Vec<(Value, &str, &str)> = vec![
            (map(&[("a b", b(1, 1.0))]), "endpoints[\"a b\"]", "\"a b\""),
            (
                map(&[("{x}", b(1, 1.0))]),
                "endpoints[\"{x}\"]",
                "A-Z a-z 0-9 _ . : / -",
            ),
            (map(&[(&long, b(1, 1.0))]), "endpoints[", "1 to 64"),
            (map(&[("", b(1, 1.0))]), "endpoints[\"\"]", "got \"\""),
            (
                map(&[("items", b(101, 10.0))]),
                "endpoints.items.capacity",
                "got 101",
            ),
            (
                map(&[("items", b(10, 100.5))]),
                "endpoints.items.refill_per_second",
                "100.5",
            ),
            (
                map(&[("items", b(0, 1.0))]),
                "endpoints.items.capacity",
                "got 0",
            ),
            (
                map(&[("items", map(&[("capacity", Value::Int(3))]))]),
                "endpoints.items.refill_per_second",
                "required",
            ),
            (
                map(&[("items", map(&[("cap", Value::Int(3))]))]),
                "endpoints.items.cap",
                "not a known option",
            ),
            (
                map(&[("items", Value::Int(3))]),
                "endpoints.items",
                "got int 3",
            ),
            (Value::List(vec![]), "endpoints", "at least one"),
            (Value::List(vec![b(1, 1.0)]), "endpoints", "got a list"),
            (
                Value::Str(b"items".to_vec()),
                "endpoints",
                "got string \"items\"",
            ),
        ];
        for (v, option, needle) in cases {
            let e = endpoints_from_value(&v, &global()).unwrap_err();
            assert!(e.option.starts_with(option), "{v:?}: {e}");
            assert!(
                e.to_string().contains(needle),
                "{e} should contain {needle}"
            );
        }
    }

    #[test]
    fn priorities_and_their_default() {
        let p = priorities_from_value(
            Some(&map(&[
                ("critical", Value::Int(0)),
                ("normal", Value::Float(0.2)),
                ("background", Value::Float(0.5)),
            ])),
            Some(&"normal".into()),
        )
        .unwrap()
        .unwrap();
        assert_eq!(p.share_ppm("critical"), Some(0));
        assert_eq!(p.share_ppm("normal"), Some(200_000));
        assert_eq!(p.share_ppm("background"), Some(500_000));
        assert_eq!(p.default_class(), Some("normal"));
        let p = priorities_from_value(Some(&map(&[("low", Value::Float(0.3))])), None)
            .unwrap()
            .unwrap();
        assert_eq!(p.default_class(), None);
        assert_eq!(priorities_from_value(None, None).unwrap(), None);
    }

    #[test]
    fn bad_priorities_are_refused_naming_the_option_and_value() {
        let ok = || map(&[("critical", Value::Int(0)), ("normal", Value::Float(0.2))]);
        let cases: Vec<(Option<Value>, Option<Value>, &str, &str)> = vec![
            (
                Some(map(&[("normal", Value::Float(1.0))])),
                None,
                "priorities.normal",
                "got 1.0",
            ),
            (
                Some(map(&[("normal", Value::Int(1))])),
                None,
                "priorities.normal",
                "got 1",
            ),
            (
                Some(map(&[("normal", Value::Float(-0.1))])),
                None,
                "priorities.normal",
                "-0.1",
            ),
            (
                Some(map(&[("normal", Value::Float(f64::NAN))])),
                None,
                "priorities.normal",
                "NaN",
            ),
            (
                Some(map(&[("normal", "0.2".into())])),
                None,
                "priorities.normal",
                "got string \"0.2\"",
            ),
            (
                Some(map(&[("a b", Value::Int(0))])),
                None,
                "priorities[\"a b\"]",
                "priority class name",
            ),
            (
                Some(Value::List(vec![])),
                None,
                "priorities",
                "at least one",
            ),
            (
                Some(ok()),
                Some("urgent".into()),
                "default_priority",
                "got \"urgent\"",
            ),
            (
                Some(ok()),
                Some(Value::Int(1)),
                "default_priority",
                "got int 1",
            ),
            (
                None,
                Some("normal".into()),
                "default_priority",
                "needs the priorities option",
            ),
        ];
        for (p, d, option, needle) in cases {
            let e = priorities_from_value(p.as_ref(), d.as_ref()).unwrap_err();
            assert_eq!(e.option, option, "{p:?} {d:?}: {e}");
            assert!(
                e.to_string().contains(needle),
                "{e} should contain {needle}"
            );
        }
    }
}
