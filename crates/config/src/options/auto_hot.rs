//! The `auto_hot` option, parsed into the model's [`AutoHot`] (its parts checked by the
//! model's one check of them).

use std::time::Duration;

use checkout_guard_model::auto_hot::{
    min_tokens_ok, share_ok, ttl_expected, ttl_ok, window_ok, AutoHot, MIN_TOKENS_EXPECTED,
    SHARE_EXPECTED, WINDOW_EXPECTED,
};
use checkout_guard_model::bucket::BucketSpec;
use checkout_guard_model::error::ConfigError;

use crate::value::{map_entries, type_error, Value};

const AUTO_HOT_KNOWN: &str = "window_seconds, share, ttl_seconds, min_tokens";

/// `true` for the defaults (10 s, 30%, 5 minutes, min_tokens 10% of what the global
/// bucket refills in one window, at least 1), or an array overriding any of them.
pub fn auto_hot_from_value(v: &Value, global: &BucketSpec) -> Result<Option<AutoHot>, ConfigError> {
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
    let min_tokens = min_tokens
        .unwrap_or_else(|| ((global.refill_per_second() * window_s * 0.1).ceil() as i64).max(1));
    AutoHot::new(
        Duration::from_secs_f64(window_s),
        share,
        ttl_seconds,
        min_tokens,
    )
    .map(Some)
}

#[cfg(test)]
mod tests {
    use checkout_guard_model::cmd::decide::{
        AdaptArgs, AutoHotArgs, DecideCall, LaneArgs, ReceivedCall, ShopKeys,
    };
    use checkout_guard_model::Keys;

    use crate::value::Value;

    proptest::proptest! {
        /// Every `auto_hot` the options accept reaches the server as one its decoder (the
        /// model's `ReceivedCall`) accepts, the same to the microsecond: the decoder
        /// validates what it reads (the script does not), so an option it refused would
        /// make every decision of that limiter an error on the module, and a decision on
        /// the script.
        #[test]
        fn every_auto_hot_the_options_accept_is_decoded_as_sent(
            window_s in proptest::prop_oneof![
                proptest::strategy::Just(1.0f64),
                proptest::strategy::Just(3600.0f64),
                proptest::strategy::Just(1.000_000_000_1_f64),
                proptest::strategy::Just(3_599.999_999_9_f64),
                1.0..=3600.0f64,
            ],
            share in proptest::prop_oneof![
                proptest::strategy::Just(f64::MIN_POSITIVE),
                proptest::strategy::Just(5e-324f64),
                proptest::strategy::Just(1.0 - f64::EPSILON),
                f64::MIN_POSITIVE..1.0f64,
            ],
            ttl in 1..=checkout_guard_model::MAX_TTL_SECONDS,
            min_tokens in proptest::option::of(1..=1_000_000_000i64),
            interval_us in 1..=10_000_000i64,
        ) {
            let mut auto = vec![
                ("window_seconds".to_string(), Value::Float(window_s)),
                ("share".into(), Value::Float(share)),
                ("ttl_seconds".into(), Value::Int(ttl)),
            ];
            if let Some(m) = min_tokens {
                auto.push(("min_tokens".into(), Value::Int(m)));
            }
            let v = Value::Map(vec![
                ("name".into(), Value::Str(b"p".to_vec())),
                // An exact rate (whole µs per token), up to the fastest allowed.
                ("global".into(), crate::options::bucket_value(1000, 1e6 / interval_us as f64)),
                ("auto_hot".into(), Value::Map(auto)),
            ]);
            let options =
                crate::options::LimiterOptions::from_value(&v, &crate::options::Defaults::default())
                    .unwrap();
            let sent = options.auto_hot.expect("auto_hot on");
            let keys = ShopKeys::new(&Keys::new("p"), b"s");
            let (lanes, auto_args) =
                (LaneArgs::new(&options.buckets), AutoHotArgs::new(Some(&sent)));
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &checkout_guard_model::InFlightArgs::off(),
                lease_id: b"",
                adapt: &AdaptArgs::off(),
                keys: keys.decide_keys(),
                tokens: 1,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop: b"s",
                auto_hot: &auto_args,
                settings: "",
                peek: false,
                max_wait_us: 0,
            };
            let argv = call.argv();
            let args: Vec<&[u8]> = call
                .sent_keys()
                .chain(argv.iter().map(|a| a.as_ref()))
                .collect();
            let got = ReceivedCall::parse(&args);
            proptest::prop_assert!(got.is_ok(), "{:?} refused: {:?}", sent, got);
            let got = got.unwrap().auto_hot.unwrap();
            proptest::prop_assert_eq!(got.window.as_micros(), sent.window.as_micros());
            proptest::prop_assert_eq!(
                (got.share, got.ttl_seconds, got.min_tokens),
                (sent.share, sent.ttl_seconds, sent.min_tokens)
            );
        }
    }
}
