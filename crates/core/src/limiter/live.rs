//! Live limits: capacities and rates changed while the limiter runs, without a deploy.
//!
//! Stored in Valkey under the limiter's hash tag: `limits` (a hash: per overridden bucket
//! `"<capacity>/<refill_per_second>"`, and `by`, `at`), `limits:v` (the version, read by
//! every decision in the same MGET as the buckets) and `changes` (a stream: version, by,
//! at, old, new). A worker decides with the version it knows; when the script sees another
//! one it decides nothing and says so, the worker reads version and hash together once,
//! validates them exactly like constructor options (same code), and asks again. Nothing
//! stored means the constructor's values.
//!
//! A version is `"<n>-<epoch>-<µs>"`: `n` counts the changes (what people see), `epoch` is
//! drawn at random by the writer whenever the stored limits are created anew, `µs` is
//! Valkey's time of the change (buckets carry their level over from that instant). After
//! Valkey lost its data the count starts again at 1, but with another epoch, so no worker
//! can take the new version 1 for the one it knew.

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
    /// The version as stored in `limits:v` (empty = none), byte for byte: what decisions
    /// compare (a version written by hand need not be UTF-8).
    pub id: Vec<u8>,
    /// Its change count, for people and events (0 = none).
    pub version: i64,
    /// Per lane, the overriding (capacity, refill_per_second).
    pub overrides: [Option<(i64, f64)>; 3],
    pub by: String,
    pub at_ms: i64,
}

impl LiveLimits {
    /// The live limits of version `id` from `HGETALL limits`. A field that is not
    /// understood is an error naming it.
    pub fn from_stored(id: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Self, String> {
        let (live, errors) = Self::from_stored_lenient(id, fields);
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(live),
        }
    }

    /// As [`Self::from_stored`], keeping what could be read and listing what could not
    /// (the CLI shows a broken hash and can still repair it).
    pub fn from_stored_lenient(id: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> (Self, Vec<String>) {
        let mut out = Self {
            id: id.to_vec(),
            version: version_number(id),
            ..Self::default()
        };
        let mut errors = Vec::new();
        for (k, v) in fields {
            let text = String::from_utf8_lossy(v);
            let field = String::from_utf8_lossy(k);
            match &*field {
                "by" => out.by = text.into_owned(),
                "at" => match text.parse() {
                    Ok(at) => out.at_ms = at,
                    Err(_) => errors.push(format!("at {text:?}")),
                },
                name => match Lane::from_name(name) {
                    None => errors.push(format!("unknown field {name:?}")),
                    Some(lane) => match parse_bucket(lane, &text) {
                        Ok(b) => out.overrides[lane as usize] = Some(b),
                        Err(e) => errors.push(e),
                    },
                },
            }
        }
        (out, errors)
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

/// The change count of a stored version (`"3-9f0c..."` → 3; a hand-written `"7"` → 7).
pub fn version_number(id: &[u8]) -> i64 {
    let digits = id.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&id[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// The instant (Valkey µs) of the change a version comes from: `"<n>-<epoch>-<µs>"`.
pub fn change_instant(id: &[u8]) -> Option<i64> {
    let id = std::str::from_utf8(id).ok()?;
    let mut parts = id.splitn(3, '-');
    let (n, epoch, at) = (parts.next()?, parts.next()?, parts.next()?);
    let digits = |s: &str, alnum: bool| {
        !s.is_empty()
            && s.bytes().all(|b| {
                if alnum {
                    b.is_ascii_alphanumeric()
                } else {
                    b.is_ascii_digit()
                }
            })
    };
    (digits(n, false) && digits(epoch, true) && digits(at, false))
        .then(|| at.parse().ok())
        .flatten()
}

/// A fresh epoch for limits stored anew: random, so never one a worker knew before.
pub fn fresh_epoch() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The live limits as stored: the version (`limits:v`, empty = none) and the hash's
/// fields; a key of another type reads as empty, with the hash's error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub version: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub error: Option<String>,
}

impl Stored {
    /// What a worker decides with, and what could not be read (see
    /// [`LiveLimits::from_stored_lenient`]).
    pub fn parse(&self) -> (LiveLimits, Vec<String>) {
        let (live, mut errors) = LiveLimits::from_stored_lenient(&self.version, &self.fields);
        if let Some(e) = &self.error {
            errors.insert(0, format!("limits: {e}"));
        }
        (live, errors)
    }
}

/// Reads the live limits' version and hash in one atomic step (KEYS: limits, limits:v):
/// the version is the one every decision compares with, never a copy that could differ.
pub fn read(
    c: &mut dyn redis::ConnectionLike,
    keys: &super::keys::Keys,
) -> redis::RedisResult<Stored> {
    type Reply = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, String);
    let (version, fields, error): Reply = READ_LIMITS
        .key(keys.limits())
        .key(keys.limits_version())
        .invoke(c)?;
    Ok(Stored {
        version,
        fields,
        error: (!error.is_empty()).then_some(error),
    })
}

/// Keys of the wrong type (written by hand) read as empty, with the error: the version as
/// the decisions' MGET sees it (nil), the hash as unreadable.
static READ_LIMITS: Lazy<redis::Script> = Lazy::new(|| {
    redis::Script::new(
        "local v = redis.pcall('GET', KEYS[2])\n\
         if type(v) ~= 'string' then v = '' end\n\
         local h = redis.pcall('HGETALL', KEYS[1])\n\
         if h.err then return {v, {}, h.err} end\n\
         return {v, h, ''}",
    )
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

/// Writes new live limits atomically, only if the version is still `expected`: the hash
/// is replaced whole by what the writer validated (so fields nobody could read are gone),
/// and in the same step the global and hot-lane buckets are carried over to the new
/// limits as of the change, a missing one (full) at the old limits' capacity.
/// KEYS: limits, limits:v, changes, global bucket, hot-lane bucket. ARGV: expected version
/// ("" = none), by, at (ms), old, new, a fresh epoch (used when the stored limits are
/// created anew), then interval and tolerance of global and hot lane under the old
/// limits, then the same under the new ("0" = not configured), then (lane, "capacity/rate")
/// pairs: every override of the new limits. Reply: the new version, or an error when
/// someone else changed them first.
pub static SET_LIMITS: Lazy<redis::Script> = Lazy::new(|| {
    redis::Script::new(&format!(
        "{}{}",
        super::script::CARRY,
        r#"
local cur = redis.pcall('GET', KEYS[2])
if type(cur) ~= 'string' then cur = '' end
if cur ~= ARGV[1] then
  return redis.error_reply('live limits changed meanwhile (now version ' .. cur .. '): read them again')
end
local n = tonumber(string.match(cur, '^%d+') or '0') + 1
local epoch = string.match(cur, '^%d+%-(%w+)') or ARGV[6]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local change = t[1] .. string.format('%06d', tonumber(t[2]))
local v = n .. '-' .. epoch .. '-' .. change
redis.call('DEL', KEYS[1], KEYS[2])
for i = 15, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('HSET', KEYS[1], 'by', ARGV[2], 'at', ARGV[3])
redis.call('SET', KEYS[2], v)
redis.call('XADD', KEYS[3], 'MAXLEN', '~', 1000, '*', 'version', n, 'by', ARGV[2], 'at', ARGV[3], 'old', ARGV[4], 'new', ARGV[5])
for j = 0, 1 do
  local oi, ot, ni, nt = ARGV[7 + 2 * j], ARGV[8 + 2 * j], ARGV[11 + 2 * j], ARGV[12 + 2 * j]
  if tonumber(ni) > 0 then
    local s = redis.pcall('GET', KEYS[4 + j])
    if type(s) ~= 'string' then
      s = nil
      if tonumber(oi) > 0 then s = string.format('%d:%s:%s:', now, oi, ot) end
    end
    if s then
      local x, moved = carry(s, ni, nt, tonumber(ni), tonumber(nt), now, change)
      if moved and x and x > now then
        redis.call('SET', KEYS[4 + j], string.format('%d:%s:%s:%s', x, ni, nt, change), 'PX', math.floor((x - now) / 1000) + 1)
      elseif moved then
        redis.call('DEL', KEYS[4 + j])
      end
    end
  end
end
return v"#
    ))
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
            b"3-abc",
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
            LiveLimits::from_stored(b"1-abc", &fields(pairs))
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

    #[test]
    fn versions_count_changes_and_epochs_differ() {
        assert_eq!(version_number(b"3-9f0c"), 3);
        assert_eq!(version_number(b"7"), 7);
        assert_eq!(version_number(b""), 0);
        assert_eq!(version_number(b"\xff"), 0);
        assert_ne!(fresh_epoch(), fresh_epoch());
        assert_eq!(
            change_instant(b"3-9f0c-1800000000000123"),
            Some(1_800_000_000_000_123)
        );
        assert_eq!(change_instant(b"3-9f0c"), None);
        assert_eq!(change_instant(b"7"), None);
        assert_eq!(change_instant(b"x-9f0c-12"), None);
        let (live, errors) = LiveLimits::from_stored_lenient(
            b"2-x",
            &fields(&[("global", "lots"), ("hot_lane", "5/5"), ("bogus", "1")]),
        );
        assert_eq!(live.overrides[1], Some((5, 5.0)));
        assert_eq!(live.overrides[0], None);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }
}
