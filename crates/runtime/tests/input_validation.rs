//! Hostile input, generated: option arrays, limiter names, shop IDs and event attributes
//! that a PHP caller could pass. Validation must answer with an error naming the option
//! (never panic), keys must stay inside the limiter's namespace and hash tag, and events
//! must encode to one valid JSON line whatever their bytes.

use checkout_guard_config::live::LiveLimits;
use checkout_guard_config::{validate_shop_id, Defaults, LimiterOptions, Value};
use checkout_guard_model::{BucketSet, BucketSpec, Keys};
use checkout_guard_runtime::telemetry::{write_event_line, AttrValue, Event};
use proptest::prelude::*;

/// Any PHP value an options array could hold, biased towards the real option names.
fn php_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::Int),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(-1),
            Just(1_000_000_000),
            Just(1_000_000_001)
        ]
        .prop_map(Value::Int),
        any::<f64>().prop_map(Value::Float),
        prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(0.0),
            Just(1e-9),
            Just(1e6),
            Just(1e6 + 1.0)
        ]
        .prop_map(Value::Float),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Value::Str),
        prop_oneof![
            Just("redis://127.0.0.1:6379"),
            Just("redis://u:p@h:1/2"),
            Just("unix:///tmp/x.sock"),
            Just("rediss://h:1"),
            Just("http://h"),
            Just("allow"),
            Just("throw"),
            Just(""),
        ]
        .prop_map(|s| Value::Str(s.as_bytes().to_vec())),
        "[a-zA-Z]{1,8}".prop_map(Value::Other),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        let key = prop_oneof![
            Just("capacity".to_string()),
            Just("refill_per_second".to_string()),
            Just("share".to_string()),
            Just("window_seconds".to_string()),
            Just("ttl_seconds".to_string()),
            Just("min_tokens".to_string()),
            Just("0".to_string()),
            ".{0,6}".prop_map(|s: String| s),
        ];
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
            proptest::collection::vec((key, inner), 0..4).prop_map(Value::Map),
        ]
    })
}

fn options_array() -> impl Strategy<Value = Value> {
    let key = prop_oneof![
        Just("name"),
        Just("global"),
        Just("hot_lane"),
        Just("hot_shop"),
        Just("hot_shops"),
        Just("url"),
        Just("timeout_ms"),
        Just("on_unavailable"),
        Just("auto_hot"),
        Just("unknown"),
    ]
    .prop_map(str::to_string);
    proptest::collection::vec((key, php_value()), 0..8).prop_map(Value::Map)
}

/// The first `{...}` of a key with at least one byte inside: Valkey Cluster's hash tag.
fn hash_tag_of(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

    /// Live limits as anyone could write them into Valkey: refused with a message or
    /// applied as a coherent bucket set, never a panic.
    #[test]
    fn stored_live_limits_are_parsed_and_validated_without_panicking(
        fields in proptest::collection::vec((
            prop_oneof![Just(b"global".to_vec()), Just(b"hot_lane".to_vec()), Just(b"hot_shop".to_vec()),
                        Just(b"version".to_vec()), Just(b"by".to_vec()), Just(b"at".to_vec()),
                        proptest::collection::vec(any::<u8>(), 0..8)],
            prop_oneof![Just(b"10/5".to_vec()), Just(b"1000000001/1".to_vec()), Just(b"5/NaN".to_vec()),
                        Just(b"-1/1".to_vec()), Just(b"3/0.5".to_vec()), Just(b"7".to_vec()),
                        proptest::collection::vec(any::<u8>(), 0..12)],
        ), 0..6),
    ) {
        let base = BucketSet {
            global: BucketSpec::new("global", 20, 20.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 10, 10.0).unwrap()),
            hot_shop: None,
        };
        match LiveLimits::from_stored(b"1-x-1", &fields) {
            Err(e) => prop_assert!(!e.is_empty()),
            Ok(live) => match live.apply(&base) {
                Ok(set) => {
                    let lane = set.hot_lane.expect("kept");
                    prop_assert!(lane.capacity() <= set.global.capacity());
                    prop_assert!(set.hot_shop.is_none());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            },
        }
    }

    #[test]
    fn option_validation_names_the_problem_and_never_panics(options in options_array()) {
        match LimiterOptions::from_value(&options, &Defaults::default()) {
            Ok(o) => {
                // Whatever passed is coherent: hot buckets never exceed global.
                for b in [&o.buckets.hot_lane, &o.buckets.hot_shop].into_iter().flatten() {
                    prop_assert!(b.capacity() <= o.buckets.global.capacity());
                    prop_assert!(b.refill_per_second() <= o.buckets.global.refill_per_second());
                }
                prop_assert!(!o.name.is_empty() && o.name.len() <= 64);
            }
            Err(e) => {
                prop_assert!(!e.option.is_empty());
                let text = e.to_string();
                prop_assert!(text.len() < 2000, "message too long: {}", text.len());
                prop_assert!(!text.contains("u:p@"), "password shown: {}", text);
            }
        }
    }

    #[test]
    fn keys_stay_in_the_limiters_namespace_and_slot(
        name in "[A-Za-z0-9_.:-]{1,64}",
        shop in proptest::collection::vec(any::<u8>(), 1..200),
        other in proptest::collection::vec(any::<u8>(), 1..200),
    ) {
        let keys = Keys::new(&name);
        let tag = format!("cg:{name}");
        let valid = validate_shop_id(&shop).is_ok();
        prop_assert_eq!(valid, shop.len() <= 128 && !shop.iter().any(|&b| b < 0x20 || b == 0x7f));
        let fixed = [keys.global(), keys.hot_lane()];
        for key in [keys.hot_shop(&shop), keys.hot_flag(&shop)] {
            prop_assert_eq!(hash_tag_of(&key), Some(tag.as_bytes()));
            prop_assert!(key.starts_with(keys.hash_tag()));
            prop_assert!(!fixed.contains(&key), "a shop reached a shared bucket");
        }
        // Distinct shops never share a key, and a shop's bucket never is another's flag.
        if shop != other {
            prop_assert_ne!(keys.hot_shop(&shop), keys.hot_shop(&other));
            prop_assert_ne!(keys.hot_flag(&shop), keys.hot_flag(&other));
        }
        prop_assert_ne!(keys.hot_shop(&shop), keys.hot_flag(&other));
        // Nothing of this limiter matches another limiter's pattern.
        let sibling = Keys::new(&format!("{name}x"));
        prop_assert!(!keys.hot_shop(&shop).starts_with(sibling.hash_tag()));
    }

    #[test]
    fn events_encode_to_one_json_line_that_round_trips(
        event_type in proptest::collection::vec(any::<u8>(), 0..40),
        attrs in proptest::collection::vec(
            (".{0,20}", proptest::collection::vec(any::<u8>(), 0..300), any::<i64>(), any::<f64>()),
            0..80,
        ),
    ) {
        let mut e = match Event::new(&event_type) {
            Ok(e) => e,
            Err(err) => {
                prop_assert_eq!(err.option.as_str(), "eventType");
                Event::new(b"Hostile").unwrap()
            }
        };
        for (i, (name, bytes, int, float)) in attrs.iter().enumerate() {
            let value = match i % 4 {
                0 => AttrValue::from_bytes(bytes),
                1 => AttrValue::Int(*int),
                2 => AttrValue::Float(*float),
                _ => AttrValue::Null,
            };
            e.set(&format!("{name}{i}"), value);
        }
        let mut line = String::new();
        write_event_line(&mut line, &e);
        prop_assert!(line.ends_with('\n'));
        prop_assert_eq!(line.matches('\n').count(), 1, "one event, one line");
        let parsed: serde_json::Value = serde_json::from_str(&line).expect("valid JSON");
        let obj = parsed.as_object().unwrap();
        prop_assert_eq!(obj["eventType"].as_str().unwrap(), &*e.event_type);
        prop_assert!(e.attrs.len() <= 64);
        for (k, v) in &e.attrs {
            match v {
                AttrValue::Str(s) => {
                    prop_assert!(s.len() <= 255);
                    prop_assert_eq!(obj[k.as_ref()].as_str().unwrap(), s.as_str());
                }
                AttrValue::Int(i) => prop_assert_eq!(obj[k.as_ref()].as_i64().unwrap(), *i),
                AttrValue::Float(f) if f.is_finite() => {
                    prop_assert_eq!(obj[k.as_ref()].as_f64().unwrap(), *f);
                }
                _ => prop_assert!(obj[k.as_ref()].is_null()),
            }
        }
    }
}
