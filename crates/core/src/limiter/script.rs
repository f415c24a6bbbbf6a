//! The Valkey script that makes one decision atomically: the Lua twin of [`super::step`].
//!
//! KEYS: global bucket, hot-lane bucket, hot-shop bucket, hot flag, live-limits version,
//! auto-hot window prefix (never read itself: `<prefix><window number>` are the counters),
//! published settings (all share one hash tag, so a cluster routes the call to one slot).
//! ARGV: tokens, static_hot (0/1), then interval and tolerance (µs) of global, hot lane and
//! hot shop (interval 0 = bucket not configured), then the live-limits version the caller
//! decided with, the shop ID, auto-hot window (µs, 0 = off), share, TTL (s) and minimum
//! tokens, and the settings to publish ("" = nothing).
//! Reply: `{reason, hot, now, tat_global, tat_lane, tat_shop, became_hot, share_permille}`
//! (see `StepReply`), or `{-1, version}` when the live limits changed since the caller
//! read them: nothing was decided, the caller reloads them and asks again.
//!
//! Time is Valkey's own (`TIME`), never the PHP host's. A bucket key expires when the
//! bucket would be full again, so idle buckets vanish and a missing key means "full".
//!
//! Cost inside Valkey is mostly the number of `redis.call`s (each crosses from Lua into
//! the command table): TIME, one MGET for the hot flag and every bucket, and one SET per
//! applied bucket only when tokens are taken; with auto-hot, two HINCRBY and one HMGET more
//! when tokens are taken (and a PEXPIRE once per window). Values go to SET as Lua numbers (Valkey
//! writes integers below 2^53 exactly), not through `string.format`.

/// The shebang makes Valkey treat the script as a write script before it runs: a replica
/// refuses it outright (READONLY), even on a path that would only have read, so a
/// decision is never made on a replica's possibly stale levels; and a Valkey over
/// `maxmemory` refuses it (OOM) rather than answering denials only.
const SHEBANG: &str = "#!lua\n";

/// Marks the clock block that tests swap for a clock they control.
const CLOCK_BLOCK: &str = "\
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slack_ms = 1
";

const BODY: &str = r#"
local n = tonumber(ARGV[1])
local hot = ARGV[2] == '1'
local v = redis.call('MGET', KEYS[4], KEYS[1], KEYS[2], KEYS[3], KEYS[5])
local version = tonumber(v[5]) or 0
if version ~= tonumber(ARGV[9]) then return {-1, version} end
if ARGV[15] ~= '' then redis.call('SET', KEYS[7], ARGV[15]) end
if not hot then hot = v[1] ~= false end
local last = 1
if hot then last = 3 end
local tat = {-1, -1, -1}
local reason = 0
for i = 1, last do
  local interval = tonumber(ARGV[1 + 2 * i])
  if interval > 0 then
    local x = tonumber(v[i + 1]) or now
    if x < now then x = now end
    tat[i] = x
    if reason == 0 and x + n * interval - now > tonumber(ARGV[2 + 2 * i]) then reason = i end
  end
end
local became, share = 0, 0
if reason == 0 then
  for i = 1, last do
    if tat[i] >= 0 then
      tat[i] = tat[i] + n * tonumber(ARGV[1 + 2 * i])
      redis.call('SET', KEYS[i], tat[i], 'PX', math.floor((tat[i] - now) / 1000) + slack_ms)
    end
  end
  local w = tonumber(ARGV[11])
  if w > 0 then
    local win = math.floor(now / w)
    local cur = KEYS[6] .. string.format('%d', win)
    local mine = redis.call('HINCRBY', cur, ARGV[10], n)
    local all = redis.call('HINCRBY', cur, '', n)
    if all == n then redis.call('PEXPIRE', cur, math.floor(2 * w / 1000) + 1000) end
    local p = redis.call('HMGET', KEYS[6] .. string.format('%d', win - 1), ARGV[10], '')
    local f = 1 - (now % w) / w
    mine = mine + (tonumber(p[1]) or 0) * f
    all = all + (tonumber(p[2]) or 0) * f
    share = math.floor(1000 * mine / all)
    if not hot and mine >= tonumber(ARGV[14]) and mine > tonumber(ARGV[12]) * all then
      redis.call('SET', KEYS[4], 'auto', 'EX', ARGV[13])
      became = 1
    end
  end
end
if hot then hot = 1 else hot = 0 end
return {reason, hot, now, tat[1], tat[2], tat[3], became, share}
"#;

/// The production script source.
pub fn decide_source() -> String {
    format!("{SHEBANG}{CLOCK_BLOCK}{BODY}")
}

/// The same decision logic with the clock taken from ARGV[16] (µs), for tests that compare
/// the script with the Rust model at times they choose. Keys live an hour so Valkey's real
/// clock never expires a key the model still holds.
pub fn decide_source_with_test_clock() -> String {
    let clock = "\
local now = tonumber(ARGV[16])
local slack_ms = 3600000
";
    format!("{SHEBANG}{clock}{BODY}")
}

/// The production script, hashed once per process.
pub static DECIDE: once_cell::sync::Lazy<redis::Script> =
    once_cell::sync::Lazy::new(|| redis::Script::new(&decide_source()));

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
                .and_then(|p| p.strip_prefix(CLOCK_BLOCK)),
            test.split_once("slack_ms = 3600000\n").map(|x| x.1)
        );
    }
}
