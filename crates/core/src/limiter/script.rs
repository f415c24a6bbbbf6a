//! The Valkey script that makes one decision atomically: the Lua twin of [`super::step`].
//!
//! KEYS and ARGV are built by [`DecideCall`] only (the one encoder of the contract):
//! KEYS: global bucket, hot-lane bucket, hot-shop bucket, hot flag, live-limits version,
//! auto-hot window prefix (never read itself: `<prefix><window number>` are the counters),
//! published settings (all share one hash tag, so a cluster routes the call to one slot).
//! ARGV: tokens, static_hot (0/1), then interval and tolerance (µs) of global, hot lane and
//! hot shop (interval 0 = bucket not configured), then the live-limits version the caller
//! decided with ("" = none), the shop ID, auto-hot window (µs, 0 = off), share, TTL (s) and
//! minimum tokens, and the caller's settings (published when the stored ones differ).
//! Reply: `{reason, hot, now, tat_global, tat_lane, tat_shop, became_hot, share_permille,
//! mark_ttl_ms}` (see `StepReply`), or `{-1, 0}` when the live limits changed since the
//! caller read them: nothing was decided, the caller reloads them and asks again.
//!
//! Time is Valkey's own (`TIME`), never the PHP host's. A bucket key expires when the
//! bucket would be full again, so idle buckets vanish and a missing key means "full". A
//! bucket is stored as `"<tat>:<interval>:<tolerance>:<change>"` (the limits it was
//! written under, and the instant of the live change its writer decided with, "" for
//! none): read under other limits, its level in tokens carries over
//! (`StoredBucket::effective_tat`) as of the live change's instant (carried in the version,
//! `"<n>-<epoch>-<µs>"`) when it was written before that change, else as of now (a
//! deploy). A bucket carried over is written back at once, denied or not, so its key
//! expires on the new limits' schedule.
//!
//! All or nothing: everything that can fail (reading the counters, a malformed value) is
//! done before the first write, so an error leaves the store as it was.
//!
//! Cost inside Valkey is mostly the number of `redis.call`s (each crosses from Lua into
//! the command table): TIME, one MGET for the hot flag, every bucket, the version and the
//! settings, a PTTL for a shop hot by a mark, and one SET per applied bucket only when
//! tokens are taken; with auto-hot, two HMGET and one HSET more when tokens are taken (and
//! a PEXPIRE once per window). TATs are written with `string.format('%d')`: Lua's own
//! number formatting keeps 14 digits only.

/// How long published settings live (refreshed whenever a worker publishes them): a
/// worker that finds them missing or different publishes its own in the same call.
pub const SETTINGS_TTL_SECONDS: i64 = 86_400;

/// The shebang makes Valkey treat the script as a write script before it runs: a replica
/// refuses it outright (READONLY), even on a path that would only have read, so a
/// decision is never made on a replica's possibly stale levels; and a Valkey over
/// `maxmemory` refuses it (OOM) rather than answering denials only.
const SHEBANG: &str = "#!lua\n";

/// A stored bucket (`s`) read under the limits `si`/`st` (interval and tolerance, as the
/// decimal strings of ARGV): its TAT, and whether it was carried over from other limits.
/// The Lua twin of `StoredBucket::effective_tat` (before `max(tat, now)`); shared by the
/// decision and by [`CARRY_STEP`].
pub(crate) const CARRY: &str = include_str!("scripts/carry.lua");

/// Marks the clock block that tests swap for a clock they control.
const CLOCK_BLOCK: &str = include_str!("scripts/clock.lua");

const BODY: &str = include_str!("scripts/decide.lua");

/// The keys of one decision, in the script's KEYS order.
#[derive(Debug, Clone, Copy)]
pub struct DecideKeys<'a> {
    pub global: &'a [u8],
    pub hot_lane: &'a [u8],
    pub hot_shop: &'a [u8],
    pub hot_flag: &'a [u8],
    pub limits_version: &'a [u8],
    pub auto_hot_prefix: &'a [u8],
    pub settings: &'a [u8],
}

/// One call of the decision script, by name: the single encoder of its KEYS and ARGV
/// (the extension, the tests and the benchmark all build calls with it).
#[derive(Debug, Clone, Copy)]
pub struct DecideCall<'a> {
    pub keys: DecideKeys<'a>,
    pub tokens: i64,
    pub static_hot: bool,
    /// Interval and tolerance (µs) per lane, as decimal strings ("0" = not configured):
    /// see [`lane_args`].
    pub lane_args: &'a [String; 6],
    /// The live limits' version decided with (empty = none).
    pub version: &'a [u8],
    pub shop: &'a [u8],
    /// Window (µs, "0" = off), share, TTL (s), minimum tokens: see [`auto_hot_args`].
    pub auto_hot_args: &'a [String; 4],
    /// The settings this worker runs with (published when the stored ones differ).
    pub settings: &'a str,
}

impl DecideCall<'_> {
    /// The script invocation with every key and argument in place.
    pub fn invocation<'s>(&self, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
        let k = &self.keys;
        let mut inv = script.prepare_invoke();
        inv.key(k.global)
            .key(k.hot_lane)
            .key(k.hot_shop)
            .key(k.hot_flag)
            .key(k.limits_version)
            .key(k.auto_hot_prefix)
            .key(k.settings)
            .arg(self.tokens)
            .arg(if self.static_hot { "1" } else { "0" });
        for a in self.lane_args {
            inv.arg(a.as_str());
        }
        inv.arg(self.version).arg(self.shop);
        for a in self.auto_hot_args {
            inv.arg(a.as_str());
        }
        inv.arg(self.settings);
        inv
    }
}

/// ARGV of the buckets: interval and tolerance per lane ("0" when not configured).
pub fn lane_args(set: &super::BucketSet) -> [String; 6] {
    let mut out: [String; 6] = Default::default();
    for lane in super::Lane::ALL {
        let (interval, tolerance) = set
            .get(lane)
            .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
        out[2 * lane as usize] = interval.to_string();
        out[2 * lane as usize + 1] = tolerance.to_string();
    }
    out
}

/// ARGV of `auto_hot` (all "0" when off).
pub fn auto_hot_args(auto_hot: Option<&super::AutoHot>) -> [String; 4] {
    match auto_hot {
        Some(a) => [
            (a.window.as_micros() as i64).to_string(),
            a.share.to_string(),
            a.ttl_seconds.to_string(),
            a.min_tokens.to_string(),
        ],
        None => ["0".into(), "0".into(), "0".into(), "0".into()],
    }
}

/// The production script source.
pub fn decide_source() -> String {
    format!("{SHEBANG}{CARRY}{CLOCK_BLOCK}{BODY}")
}

/// The same decision logic with the clock taken from ARGV[16] (µs, appended after the
/// [`DecideCall`] arguments), for tests that compare
/// the script with the Rust model at times they choose. Keys live an hour so Valkey's real
/// clock never expires a key the model still holds.
pub fn decide_source_with_test_clock() -> String {
    let clock = "\
local now = tonumber(ARGV[16])
local slack_ms = 3600000
";
    format!("{SHEBANG}{CARRY}{clock}{BODY}")
}

/// The production script, hashed once per process.
pub static DECIDE: once_cell::sync::Lazy<redis::Script> =
    once_cell::sync::Lazy::new(|| redis::Script::new(&decide_source()));

/// One step of carrying every bucket of a limiter over a live change at once (the CLI
/// runs it after `set` until the cursor is 0), so that no key written under the old limits
/// expires on their schedule before a decision reads it. KEYS: global, hot lane (KEYS[1]
/// routes it). ARGV: SCAN cursor, MATCH pattern (the bucket keys), the new version, then
/// interval and tolerance of global, hot lane, hot shop as the decision takes them.
/// Reply: next cursor, buckets carried over. A bucket full under the new limits is deleted
/// (a missing key means full).
pub static CARRY_STEP: once_cell::sync::Lazy<redis::Script> = once_cell::sync::Lazy::new(|| {
    redis::Script::new(&format!(
        "{SHEBANG}{CARRY}{}",
        r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local change = string.match(ARGV[3], '^%d+%-%w+%-(%d+)$') or ''
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000)
local carried = 0
for _, k in ipairs(r[2]) do
  local i = 3
  if k == KEYS[1] then i = 1 elseif k == KEYS[2] then i = 2 end
  local si, st = ARGV[2 + 2 * i], ARGV[3 + 2 * i]
  local interval = tonumber(si)
  local s = redis.pcall('GET', k)
  if interval > 0 and type(s) == 'string' then
    local x, moved = carry(s, si, st, interval, tonumber(st), now, change)
    if moved then
      if x <= now then redis.call('DEL', k)
      else redis.call('SET', k, string.format('%d:%s:%s:%s', x, si, st, change), 'PX', math.floor((x - now) / 1000) + 1) end
      carried = carried + 1
    end
  end
end
return {r[1], carried}
"#
    ))
});

/// One step of `reset()`: KEYS[1] routes it (any key of the limiter); ARGV: SCAN cursor,
/// MATCH pattern (the limiter's bucket keys, all in KEYS[1]'s slot). Reply: next cursor,
/// keys removed.
pub static RESET_STEP: once_cell::sync::Lazy<redis::Script> = once_cell::sync::Lazy::new(|| {
    redis::Script::new(
        "local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 1000)\n\
         if #r[2] > 0 then redis.call('UNLINK', unpack(r[2])) end\n\
         return {r[1], #r[2]}",
    )
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_clock_variant_differs_only_in_the_clock_block() {
        let prod = decide_source();
        let test = decide_source_with_test_clock();
        assert!(prod.contains("redis.call('TIME')"));
        assert!(!test.contains("TIME"));
        assert_eq!(
            prod.strip_prefix(SHEBANG)
                .and_then(|p| p.strip_prefix(CARRY))
                .and_then(|p| p.strip_prefix(CLOCK_BLOCK)),
            test.split_once("slack_ms = 3600000\n").map(|x| x.1)
        );
    }

    #[test]
    fn the_script_is_the_lua_files_in_order_as_the_benchmark_builds_it() {
        // bench/limiter.php runs "#!lua\n" + carry.lua + clock.lua + decide.lua.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/limiter/scripts/");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).unwrap();
        let files = ["carry.lua", "clock.lua", "decide.lua"].map(read).concat();
        assert_eq!(decide_source(), format!("#!lua\n{files}"));
    }

    #[test]
    fn settings_ttl_in_the_script_is_the_constant() {
        assert!(BODY.contains(&format!("'EX', {SETTINGS_TTL_SECONDS})")));
    }
}
