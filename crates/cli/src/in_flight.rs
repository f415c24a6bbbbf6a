//! `limiter status`'s in-flight leases (issue 37): per level the leases held now, the
//! limit, the oldest lease, and the stats hash's released/leaked/expired counts, read as
//! the runtime lays them out (docs/in-flight.md, "How it decides"):
//!
//! - lease sets ([`Keys::leases`]; sorted sets, member a lease ID, score its expiry instant
//!   in µs on Valkey's clock); a lease is live while its score is above now
//!   (`ZCOUNT key (now +inf`);
//! - the stats hash ([`Keys::lease_stats`], fields [`stats`]; integers, absent = 0).
//!
//! Two scripts, each one round trip routed by the limiter's hash tag (so a cluster asks
//! the node that holds the limiter): one reads the two shared levels, the stats and the
//! live limits; the other is a SCAN step over the hot shops' lease sets (bounded: at most
//! [`MAX_SHOP_SETS`] sets listed, [`MAX_SCAN_STEPS`] steps).

use checkout_guard_config::live::{self, PublishedSettings};
use checkout_guard_model::in_flight::stats;
use checkout_guard_model::{Keys, Lane};

use crate::valkey::Valkey;

/// The live limits hash's fields for the in-flight levels, as `limiter set
/// in_flight.global=N ...` writes them (`in_flight.<level>`: [`live::in_flight_field`]).
/// `lease_seconds` is the option's only, never live.
fn live_fields() -> [String; 3] {
    Lane::ALL.map(|l| format!("{}{}", live::IN_FLIGHT_PREFIX, l.as_str()))
}

/// Hot shops' lease sets listed at most (the ones found first; `shops_truncated` says so).
pub const MAX_SHOP_SETS: usize = 1000;
/// SCAN steps (1,000 keys each) at most: 10 million keys looked at.
pub const MAX_SCAN_STEPS: usize = 10_000;

/// One level's read of `KEY TYPE` + `ZCOUNT` + the lowest live score. Shared by both
/// scripts: `level(key, now)` returns `{held, expired not pruned, oldest expiry µs or -1}`,
/// `{-1, -1, -1}` for a key that is not a sorted set.
const LEVEL_LUA: &str = r#"
local function level(k, now)
  local t = redis.call('TYPE', k).ok
  if t == 'none' then return {0, 0, -1} end
  if t ~= 'zset' then return {-1, -1, -1} end
  local held = redis.call('ZCOUNT', k, '(' .. now, '+inf')
  local stale = redis.call('ZCOUNT', k, '-inf', now)
  local first = redis.call('ZRANGE', k, '(' .. now, '+inf', 'BYSCORE', 'LIMIT', 0, 1, 'WITHSCORES')
  local oldest = -1
  if first[2] then oldest = tonumber(first[2]) end
  return {held, stale, oldest}
end
"#;

/// KEYS: global set, lane set, stats hash, live limits hash; ARGV: now µs, the 4 stats
/// fields, the live fields. Reply: 3 integers per level (2 levels), the 4 stats as strings
/// ('' absent), the live fields as strings ('' absent).
const READ_LUA: &str = r#"
local out = {}
for i = 1, 2 do
  local l = level(KEYS[i], ARGV[1])
  out[#out + 1] = l[1]; out[#out + 1] = l[2]; out[#out + 1] = l[3]
end
local function fields(key, names)
  if redis.call('TYPE', key).ok == 'hash' then
    local v = redis.call('HMGET', key, unpack(names))
    for i = 1, #names do out[#out + 1] = v[i] or '' end
  else
    for i = 1, #names do out[#out + 1] = '' end
  end
end
fields(KEYS[3], {ARGV[2], ARGV[3], ARGV[4], ARGV[5]})
local live = {}
for i = 6, #ARGV do live[#live + 1] = ARGV[i] end
fields(KEYS[4], live)
return out
"#;

/// KEYS: a key of the limiter (routes the call); ARGV: cursor, pattern, now µs. Reply:
/// next cursor, then per sorted set found its key and `level`'s three integers.
const SCAN_LUA: &str = r#"
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000, 'TYPE', 'zset')
local out = {r[1]}
for _, k in ipairs(r[2]) do
  local l = level(k, ARGV[3])
  out[#out + 1] = k; out[#out + 1] = l[1]; out[#out + 1] = l[2]; out[#out + 1] = l[3]
end
return out
"#;

/// One level's (or one hot shop's) leases now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Level {
    /// Live leases (score above now).
    pub held: u64,
    /// Leases past their expiry still in the set (a later decision prunes them).
    pub stale: u64,
    /// The oldest live lease's expiry (µs, Valkey's clock).
    pub oldest_expiry_us: Option<i64>,
    /// The key holds something that is not a sorted set (nothing read from it).
    pub foreign: bool,
}

impl Level {
    fn from_ints(held: i64, stale: i64, oldest: i64) -> Self {
        Self {
            held: held.max(0) as u64,
            stale: stale.max(0) as u64,
            oldest_expiry_us: (oldest >= 0).then_some(oldest),
            foreign: held < 0,
        }
    }

    /// The oldest live lease's time left to its expiry (µs).
    pub fn oldest_remaining_us(&self, now_us: i64) -> Option<i64> {
        self.oldest_expiry_us.map(|e| (e - now_us).max(0))
    }

    /// The oldest live lease's age (µs): its bound less its time left, when the bound
    /// (`lease_seconds`) is known.
    pub fn oldest_age_us(&self, now_us: i64, lease_seconds: Option<f64>) -> Option<i64> {
        let bound = (lease_seconds? * 1e6).round() as i64;
        Some((bound - self.oldest_remaining_us(now_us)?).max(0))
    }
}

/// Where a level's limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The live limits hash (`limiter set in_flight.global=N`).
    Live,
    /// The settings the workers publish.
    Settings,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Live => "live",
            Source::Settings => "settings",
        }
    }
}

/// The stats hash's counters (absent = 0; `None`: a value that is not an integer).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub released: Option<i64>,
    pub hold_us: Option<i64>,
    pub leaked: Option<i64>,
    pub expired: Option<i64>,
}

impl Stats {
    /// Nothing recorded (every field absent or 0).
    pub fn is_zero(&self) -> bool {
        [self.released, self.hold_us, self.leaked, self.expired]
            .iter()
            .all(|f| *f == Some(0))
    }

    /// The mean hold of the leases released in time (µs).
    pub fn mean_hold_us(&self) -> Option<i64> {
        match (self.released, self.hold_us) {
            (Some(n), Some(h)) if n > 0 => Some(h / n),
            _ => None,
        }
    }
}

/// Everything `limiter status` shows of the in-flight leases.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InFlightView {
    /// Valkey's clock when read (µs): what "live" and "left" are measured against.
    pub now_us: i64,
    /// The global and hot-lane levels.
    pub global: Level,
    pub hot_lane: Level,
    /// The hot shops' lease sets found, most held first (then by shop ID).
    pub shops: Vec<(Vec<u8>, Level)>,
    /// More sets than listed (or the scan stopped at its bound).
    pub shops_truncated: bool,
    /// Per level (global, hot lane, hot shop) the limit and where it comes from.
    pub limits: [Option<(u64, Source)>; 3],
    /// The lease's bound (seconds), if published or set live.
    pub lease_seconds: Option<f64>,
    pub stats: Stats,
    /// Values that could not be read (a live field that is no limit, a key of another
    /// type).
    pub problems: Vec<String>,
}

impl InFlightView {
    /// A limiter without leases (no `in_flight` published or set live): nothing read.
    pub fn none(now_us: i64) -> Self {
        Self {
            now_us,
            stats: Stats {
                released: Some(0),
                hold_us: Some(0),
                leaked: Some(0),
                expired: Some(0),
            },
            ..Self::default()
        }
    }

    /// Nothing to show: no limit known, no lease set, no stats.
    pub fn is_empty(&self) -> bool {
        self.limits.iter().all(Option::is_none)
            && self.lease_seconds.is_none()
            && self.global == Level::default()
            && self.hot_lane == Level::default()
            && self.shops.is_empty()
            && self.stats.is_zero()
            && self.problems.is_empty()
    }

    /// Leases held by every hot shop together.
    pub fn hot_shop_held(&self) -> u64 {
        self.shops.iter().map(|(_, l)| l.held).sum()
    }
}

/// The in-flight limits the workers publish in their settings
/// ([`PublishedSettings::parse`]'s `in_flight`): per level the limit (`None`: the level has
/// none, or nothing is published), and the lease's bound in seconds.
pub fn published_limits(settings: &str) -> ([Option<u64>; 3], Option<f64>) {
    match PublishedSettings::parse(settings)
        .ok()
        .and_then(|p| p.in_flight)
    {
        Some(f) => (
            Lane::ALL.map(|l| f.limit(l).map(|n| n as u64)),
            Some(f.lease_us as f64 / 1e6),
        ),
        None => ([None; 3], None),
    }
}

fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) if !b.is_empty() => Some(String::from_utf8_lossy(b).into()),
        redis::Value::SimpleString(s) if !s.is_empty() => Some(s.clone()),
        _ => None,
    }
}

fn int(v: &redis::Value) -> i64 {
    match v {
        redis::Value::Int(i) => *i,
        _ => -1,
    }
}

/// Reads the leases of limiter `keys` at Valkey's `now_us`, the limits from the live
/// hash over the published `settings`.
pub fn read(
    valkey: &Valkey,
    keys: &Keys,
    now_us: i64,
    settings: Option<&str>,
) -> Result<InFlightView, String> {
    let mut view = InFlightView {
        now_us,
        ..InFlightView::default()
    };
    let read_script = redis::Script::new(&format!("{LEVEL_LUA}{READ_LUA}"));
    let (global, lane, stats_hash, limits) = (
        keys.leases(Lane::Global, b""),
        keys.leases(Lane::HotLane, b""),
        keys.lease_stats(),
        keys.limits(),
    );
    let live_fields = live_fields();
    let reply: Vec<redis::Value> = valkey.call(|c| {
        let mut inv = read_script.key(&global);
        inv.key(&lane).key(&stats_hash).key(&limits).arg(now_us);
        inv.arg(stats::RELEASED)
            .arg(stats::HOLD_US)
            .arg(stats::LEAKED)
            .arg(stats::EXPIRED);
        for f in &live_fields {
            inv.arg(f);
        }
        inv.invoke(c)
    })?;
    if reply.len() != 6 + 4 + live_fields.len() {
        return Err(format!(
            "in-flight leases: an unexpected reply ({} items)",
            reply.len()
        ));
    }
    view.global = Level::from_ints(int(&reply[0]), int(&reply[1]), int(&reply[2]));
    view.hot_lane = Level::from_ints(int(&reply[3]), int(&reply[4]), int(&reply[5]));
    for (level, l) in [("global", &view.global), ("hot_lane", &view.hot_lane)] {
        if l.foreign {
            view.problems.push(format!(
                "the {level} lease set holds something that is not a sorted set"
            ));
        }
    }
    let stat = |i: usize, name: &str, problems: &mut Vec<String>| match text(&reply[6 + i]) {
        None => Some(0),
        Some(t) => t.parse::<i64>().ok().or_else(|| {
            problems.push(format!("stats field {name} {t:?} is not an integer"));
            None
        }),
    };
    view.stats = Stats {
        released: stat(0, stats::RELEASED, &mut view.problems),
        hold_us: stat(1, stats::HOLD_US, &mut view.problems),
        leaked: stat(2, stats::LEAKED, &mut view.problems),
        expired: stat(3, stats::EXPIRED, &mut view.problems),
    };
    // The limits: the live fields (read as the workers read them) over the published
    // settings; the lease's bound is the option's only (published, never live).
    let (published, published_lease) = settings.map_or(([None; 3], None), published_limits);
    for (i, field) in live_fields.iter().enumerate() {
        view.limits[i] = published[i].map(|n| (n, Source::Settings));
        if let Some(t) = text(&reply[10 + i]) {
            match live::parse_in_flight_limit(field, &t) {
                Ok(n) => view.limits[i] = Some((n as u64, Source::Live)),
                Err(_) => view.problems.push(format!(
                    "live field {field} {t:?} is not a limit (an integer from 1 to {})",
                    checkout_guard_config::options::MAX_IN_FLIGHT
                )),
            }
        }
    }
    view.lease_seconds = published_lease;
    let (shops, truncated) = scan_shops(valkey, keys, now_us)?;
    view.shops = shops;
    view.shops_truncated = truncated;
    Ok(view)
}

/// Hot shops' lease sets: shop ID, its level.
type ShopSets = Vec<(Vec<u8>, Level)>;

/// The hot shops' lease sets (at most [`MAX_SHOP_SETS`]; `true` when there were more or
/// the scan stopped at [`MAX_SCAN_STEPS`]), most held first.
fn scan_shops(valkey: &Valkey, keys: &Keys, now_us: i64) -> Result<(ShopSets, bool), String> {
    let script = redis::Script::new(&format!("{LEVEL_LUA}{SCAN_LUA}"));
    let (route, pattern) = (keys.leases(Lane::Global, b""), keys.shop_leases_pattern());
    let prefix_len = keys.leases(Lane::HotShop, b"").len();
    let mut out = Vec::new();
    let mut cursor = b"0".to_vec();
    let mut truncated = false;
    for step in 0.. {
        if step == MAX_SCAN_STEPS || out.len() >= MAX_SHOP_SETS {
            truncated = true;
            break;
        }
        let reply: Vec<redis::Value> = valkey.call(|c| {
            script
                .key(&route)
                .arg(&cursor)
                .arg(&pattern)
                .arg(now_us)
                .invoke(c)
        })?;
        let mut it = reply.into_iter();
        cursor = match it.next() {
            Some(redis::Value::BulkString(b)) => b,
            Some(redis::Value::SimpleString(s)) => s.into_bytes(),
            other => return Err(format!("in-flight scan: an unexpected cursor {other:?}")),
        };
        while let (Some(k), Some(h), Some(s), Some(o)) =
            (it.next(), it.next(), it.next(), it.next())
        {
            let redis::Value::BulkString(key) = k else {
                continue;
            };
            if key.len() < prefix_len || out.len() >= MAX_SHOP_SETS {
                truncated |= out.len() >= MAX_SHOP_SETS;
                continue;
            }
            let level = Level::from_ints(int(&h), int(&s), int(&o));
            out.push((key[prefix_len..].to_vec(), level));
        }
        if cursor == b"0" {
            break;
        }
    }
    out.sort_by(|a, b| b.1.held.cmp(&a.1.held).then_with(|| a.0.cmp(&b.0)));
    Ok((out, truncated))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The limits are what the workers publish (`PublishedSettings`'s codec): a level
    /// published as 0 has none; settings without `in_flight` have none.
    #[test]
    fn published_limits_are_the_published_settings() {
        assert_eq!(
            published_limits("global=30/30 hot_shop=10/10 in_flight=40/0/5/30s mode=shadow"),
            ([Some(40), None, Some(5)], Some(30.0))
        );
        assert_eq!(
            published_limits("global=30/30 in_flight=7/0/0/12.5s"),
            ([Some(7), None, None], Some(12.5))
        );
        assert_eq!(
            published_limits("global=30/30 in_flight=x"),
            ([None; 3], None)
        );
        assert_eq!(published_limits("global=30/30"), ([None; 3], None));
    }

    #[test]
    fn the_oldest_leases_age_needs_its_bound() {
        let l = Level::from_ints(2, 0, 1_000_000_000);
        assert_eq!(l.oldest_remaining_us(999_000_000), Some(1_000_000));
        assert_eq!(l.oldest_age_us(999_000_000, Some(30.0)), Some(29_000_000));
        assert_eq!(l.oldest_age_us(999_000_000, None), None);
        assert!(Level::from_ints(-1, -1, -1).foreign);
    }
}
