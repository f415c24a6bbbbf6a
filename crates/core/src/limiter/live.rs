//! Live limits: capacities and rates changed while the limiter runs, without a deploy.
//!
//! Stored in Valkey under the limiter's hash tag: `limits` (a hash: per overridden bucket
//! `"<capacity>/<refill_per_second>"`, and `by`, `at`), `limits:v` (the version, read by
//! every decision in the same MGET as the buckets) and `changes` (a stream: version, by,
//! at, old, new). A worker decides with the version it knows; when the script sees another
//! one it decides nothing and says so, the worker reads version and hash together once,
//! validates them exactly like constructor options (same code), and asks again. Nothing
//! stored means the constructor's values.

use std::collections::HashMap;
use std::sync::Arc;

use once_cell::sync::Lazy;
use parking_lot::Mutex;

use super::bucket::{BucketSet, Lane};
use super::error::ConfigError;
use super::options::{bucket_value, buckets_from_value, buckets_to_value};
use crate::value::Value;

/// The live limits as stored: overrides of some buckets, and who set them when.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveLimits {
    pub version: i64,
    /// Per lane, the overriding (capacity, refill_per_second).
    pub overrides: [Option<(i64, f64)>; 3],
    pub by: String,
    pub at_ms: i64,
}

impl LiveLimits {
    /// The live limits of `version` from `HGETALL limits`. A field that is not understood
    /// is an error naming it.
    pub fn from_stored(version: i64, fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Self, String> {
        let mut out = Self {
            version,
            ..Self::default()
        };
        for (k, v) in fields {
            let text = String::from_utf8_lossy(v);
            let field = String::from_utf8_lossy(k);
            match &*field {
                "by" => out.by = text.into_owned(),
                "at" => out.at_ms = text.parse().map_err(|_| format!("at {text:?}"))?,
                name => {
                    let lane =
                        Lane::from_name(name).ok_or_else(|| format!("unknown field {name:?}"))?;
                    out.overrides[lane as usize] = Some(parse_bucket(lane, &text)?);
                }
            }
        }
        Ok(out)
    }

    /// The buckets with these overrides applied to `base`, validated exactly like the
    /// constructor's options (a bucket may be overridden only if `base` configures it).
    pub fn apply(&self, base: &BucketSet) -> Result<BucketSet, ConfigError> {
        let mut value = buckets_to_value(base);
        let Value::Map(entries) = &mut value else {
            unreachable!("buckets_to_value returns a map")
        };
        for lane in Lane::ALL {
            let Some((capacity, rate)) = self.overrides[lane as usize] else {
                continue;
            };
            let Some(slot) = entries.iter_mut().find(|(k, _)| k == lane.as_str()) else {
                return Err(ConfigError::new(
                    lane.as_str(),
                    "is not configured by this limiter's constructor: only configured buckets can be changed live",
                ));
            };
            slot.1 = bucket_value(capacity, rate);
        }
        buckets_from_value(&value)
    }

    pub fn is_empty(&self) -> bool {
        self.overrides.iter().all(Option::is_none)
    }
}

/// One bucket as the CLI takes it, the settings show it and the limits hash stores it:
/// `"<capacity>/<refill_per_second>"`. Errors name the option, as the constructor's do.
pub fn parse_bucket(lane: Lane, text: &str) -> Result<(i64, f64), String> {
    let name = lane.as_str();
    let (c, r) = text
        .split_once('/')
        .ok_or_else(|| format!("{name}: {text:?} is not CAPACITY/RATE"))?;
    let c = c
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("{name}.capacity: {c:?} is not an integer"))?;
    let r = r
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{name}.refill_per_second: {r:?} is not a number"))?;
    Ok((c, r))
}

/// The live limits as stored: the version (`limits:v`) and the hash's fields.
pub type Stored = (i64, Vec<(Vec<u8>, Vec<u8>)>);

/// Reads the live limits' version and hash in one atomic step (KEYS: limits, limits:v):
/// the version is the one every decision compares with, never a copy that could differ.
pub fn read(
    c: &mut dyn redis::ConnectionLike,
    keys: &super::keys::Keys,
) -> redis::RedisResult<Stored> {
    READ_LIMITS
        .key(keys.limits())
        .key(keys.limits_version())
        .invoke(c)
}

static READ_LIMITS: Lazy<redis::Script> = Lazy::new(|| {
    redis::Script::new("return {redis.call('GET', KEYS[2]) or '0', redis.call('HGETALL', KEYS[1])}")
});

/// How a bucket set is shown in events and by the CLI: `global=30/30 hot_lane=...`
/// (capacity / refill per second).
pub fn describe(set: &BucketSet) -> String {
    Lane::ALL
        .into_iter()
        .filter_map(|lane| {
            set.get(lane).map(|b| {
                format!(
                    "{}={}/{}",
                    lane.as_str(),
                    b.capacity(),
                    b.refill_per_second()
                )
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The identity of a limiter's live limits in this process: its URL and name, hashed once
/// when the limiter is built so that a decision looks its limits up without allocating.
pub(crate) fn limiter_id(url: &str, name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (url, name).hash(&mut h);
    h.finish()
}

/// The newest live limits each limiter (by [`limiter_id`]) is known by in this process:
/// limiter objects are built per request, the knowledge outlives them.
static KNOWN: Lazy<Mutex<HashMap<u64, Arc<LiveLimits>>>> = Lazy::new(Default::default);

pub(crate) fn known(id: u64) -> Option<Arc<LiveLimits>> {
    KNOWN.lock().get(&id).cloned()
}

pub(crate) fn remember(id: u64, live: Arc<LiveLimits>) {
    KNOWN.lock().insert(id, live);
}

/// Writes new live limits atomically, only if the version is still `expected`.
/// KEYS: limits, limits:v, changes. ARGV: expected version, by, at (ms), old, new, then
/// (lane, "capacity/rate" or "" to remove) pairs. Reply: the new version, or an error
/// when someone else changed them first.
pub static SET_LIMITS: Lazy<redis::Script> = Lazy::new(|| {
    redis::Script::new(
        r#"local v = tonumber(redis.call('GET', KEYS[2]) or '0')
if v ~= tonumber(ARGV[1]) then
  return redis.error_reply('live limits changed meanwhile (now version ' .. v .. '): read them again')
end
v = v + 1
for i = 6, #ARGV, 2 do
  if ARGV[i + 1] == '' then redis.call('HDEL', KEYS[1], ARGV[i])
  else redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
redis.call('HSET', KEYS[1], 'by', ARGV[2], 'at', ARGV[3])
redis.call('SET', KEYS[2], v)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 1000, '*', 'version', v, 'by', ARGV[2], 'at', ARGV[3], 'old', ARGV[4], 'new', ARGV[5])
return v"#,
    )
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::bucket::BucketSpec;

    fn base() -> BucketSet {
        BucketSet {
            global: BucketSpec::new("global", 30, 30.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 25, 25.0).unwrap()),
            hot_shop: None,
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn overrides_apply_over_the_constructor_values() {
        let live = LiveLimits::from_stored(
            3,
            &fields(&[
                ("by", "alice"),
                ("at", "1700000000000"),
                ("global", "60/45.5"),
            ]),
        )
        .unwrap();
        assert_eq!((live.version, live.by.as_str()), (3, "alice"));
        let set = live.apply(&base()).unwrap();
        assert_eq!(describe(&set), "global=60/45.5 hot_lane=25/25");
    }

    #[test]
    fn invalid_overrides_are_refused_like_constructor_options() {
        let refuse = |pairs: &[(&str, &str)]| {
            LiveLimits::from_stored(1, &fields(pairs))
                .map_err(|e| e.to_string())
                .and_then(|l| l.apply(&base()).map_err(|e| e.to_string()))
                .unwrap_err()
        };
        // A hot lane above global, as the constructor refuses it.
        assert!(refuse(&[("global", "20/20")]).contains("hot_lane"));
        assert!(refuse(&[("global", "0/5")]).contains("global.capacity"));
        assert!(refuse(&[("global", "10/-1")]).contains("global.refill_per_second"));
        assert!(refuse(&[("hot_shop", "5/5")]).contains("not configured"));
        assert!(
            refuse(&[("global", "ten/5")]).contains("global.capacity: \"ten\" is not an integer")
        );
        assert!(refuse(&[("global", "10 5")]).contains("is not CAPACITY/RATE"));
        assert!(refuse(&[("bogus", "1/1")]).contains("unknown field"));
    }
}
