//! The decision as the server makes it: `decide.lua` in Rust, over any key space. The
//! native module's `CG.DECIDE` runs it on Valkey's keys and clock, and the in-memory test
//! store on its own; both therefore are [`step`] with the script's reads and
//! writes around it, and the script is held to them call for call.
//!
//! Order, as the script's: read the hot flag, the buckets, the version and the settings
//! (other types read as nil, like `MGET`); a version other than the caller's answers
//! "limits changed" with nothing done; a bucket value that no engine reads is a missing
//! key; then the buckets taken from (or carried over), the
//! `auto_hot` window and mark, and the settings when they differ.

use crate::adaptive::AdaptState;
use crate::bucket::{EncodedBucket, Lane, StoredBucket};
use crate::cmd::decide::{self, ReceivedCall, LIMITS_CHANGED_REPLY, SETTINGS_TTL_SECONDS};
use crate::cmd::feedback::ReceivedFeedback;
use crate::cmd::release::{ReceivedRelease, ReleaseOutcome};
use crate::in_flight::{stats, LeaseLevel, LeaseStats, LEASE_SET_TTL_MS};
use crate::step::{auto_hot_window, step, StepInput, StepReply, StoredState, WindowCounts};

/// The key space a server-side decision reads and writes.
///
/// Every key passed is one of the call's [`ReceivedCall::keys`] (the very slices, so a
/// server may recognise its own arguments by address) or an `auto_hot` window key.
pub trait Keyspace {
    /// `read` of the string at `key`, `None` when missing or of another type (as `MGET`);
    /// read in place, nothing copied.
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R;
    /// Whether `key` holds a string (what a hot mark is; its value is never read).
    fn has_string(&mut self, key: &[u8]) -> bool {
        self.read_string(key, |v| v.is_some())
    }
    /// `PTTL key` of an existing key: ms left, -1 without expiry.
    fn pttl(&mut self, key: &[u8]) -> i64;
    /// The integer fields `fields` of the hash at `key` (0 when absent), or the error of
    /// `HMGET` on a key of another type (`WRONGTYPE`). `written_next`: the decision
    /// writes this hash next ([`Self::hset`]) unless a later read fails (a server may
    /// open it for writing at once).
    fn hash_ints(
        &mut self,
        key: &[u8],
        fields: [&[u8]; 2],
        written_next: bool,
    ) -> Result<[i64; 2], String>;
    /// `SET key value PX ms`.
    fn set_px(&mut self, key: &[u8], value: &[u8], px_ms: i64);
    /// `SET key value PX ms` of a bucket (test key spaces keep buckets longer, as the
    /// script's test-clock variant does, so the real clock never expires them).
    fn set_bucket(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.set_px(key, value, px_ms);
    }
    /// `HSET key field value ...` with integer values (an existing hash keeps its expiry).
    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], i64)]);
    /// `PEXPIRE key ms`.
    fn pexpire(&mut self, key: &[u8], ms: i64);
    /// `DEL key`.
    fn del(&mut self, key: &[u8]);
    /// The leases held now in the lease set at `key` (`ZCOUNT key (now +inf`), and when
    /// `oldest`, the lowest such score (`ZRANGE key (now +inf BYSCORE LIMIT 0 1
    /// WITHSCORES`; 0 when none): a missing key holds none; a key of another type is
    /// `ZCOUNT`'s error (WRONGTYPE).
    fn leases_held(&mut self, key: &[u8], now: i64, oldest: bool) -> Result<LeaseLevel, String>;
    /// Takes a lease: `ZREMRANGEBYSCORE key -inf now` (its count returned: the expired
    /// leases removed), `ZADD key expiry_us id`, `PEXPIRE key px_ms`.
    fn lease_take(&mut self, key: &[u8], id: &[u8], expiry_us: i64, now: i64, px_ms: i64) -> i64;
    /// `ZSCORE key id`: a lease's expiry (µs), `None` when it is not in the set; a key of
    /// another type is `ZSCORE`'s error.
    fn lease_score(&mut self, key: &[u8], id: &[u8]) -> Result<Option<i64>, String>;
    /// `ZREM key id` of a lease [`Self::lease_score`] found.
    fn lease_remove(&mut self, key: &[u8], id: &[u8]);
    /// `HINCRBY key field n`.
    fn hincrby(&mut self, key: &[u8], field: &[u8], n: i64);
}

/// The integers a decision answers: the script's reply (see [`crate::StepReply`]), or
/// [`LIMITS_CHANGED_REPLY`]. Held without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerReply {
    ints: [i64; 13],
    len: usize,
}

impl ServerReply {
    fn new(ints: &[i64]) -> Self {
        let mut out = Self {
            ints: [0; 13],
            len: ints.len(),
        };
        out.ints[..ints.len()].copy_from_slice(ints);
        out
    }

    pub fn as_slice(&self) -> &[i64] {
        &self.ints[..self.len]
    }
}

/// What the server answers: the script's reply integers (see [`crate::StepReply`]).
pub fn decide_on(
    ks: &mut impl Keyspace,
    call: &ReceivedCall<'_>,
    now: i64,
) -> Result<ServerReply, String> {
    use decide::keys::*;
    let (kf, kv, kp, kst) = (
        call.key(HOT_FLAG),
        call.key(LIMITS_VERSION),
        call.key(AUTO_HOT_PREFIX),
        call.key(SETTINGS),
    );
    let flagged = ks.has_string(kf);
    let same_version = ks.read_string(kv, |v| v.unwrap_or_default() == call.version);
    if !same_version {
        return Ok(ServerReply::new(&LIMITS_CHANGED_REPLY));
    }
    let mark_ttl_ms = match (flagged, call.static_hot) {
        (true, false) => Some(ks.pttl(kf)),
        _ => None,
    };
    let hot = call.static_hot || mark_ttl_ms.is_some();
    // The reply's short form when only the global bucket applies, as the script answers
    // (see `StepReply::from_ints`): the hot lanes' TATs, `auto_hot`'s fields and the mark
    // at their defaults, left out.
    // The adaptive state, read (as the script's MGET) only with the option.
    let ka = call.key(ADAPT);
    let adapt = call
        .adapt
        .and_then(|_| ks.read_string(ka, |raw| raw.and_then(AdaptState::read_like_the_script)));
    let short =
        !hot && call.auto_hot.is_none() && call.in_flight.is_none() && call.endpoint.is_none();
    let answer = |reply: &StepReply| {
        let (ints, len) = reply.to_ints();
        ServerReply::new(if short && !reply.adapt_seen {
            &ints[..4]
        } else {
            &ints[..len]
        })
    };
    let bucket_keys = Lane::ALL.map(|lane| call.key(decide::bucket_key(lane)));
    let mut buckets = [None; 3];
    for (lane, key) in Lane::ALL.into_iter().zip(bucket_keys) {
        // Only the buckets the decision applies are read (the script reads all three in
        // its MGET, but the others change nothing).
        if call.buckets.get(lane).is_none() || (lane != Lane::Global && !hot) {
            continue;
        }
        // A value no engine reads (another library's, a hand edit) and a key of another
        // type are a missing key, as the script reads them: a full bucket, replaced by
        // the next write.
        buckets[lane as usize] =
            ks.read_string(key, |raw| raw.and_then(StoredBucket::read_like_the_script));
    }
    // A peek reads the window counters (it fails where acquire() would) but counts
    // nothing for `auto_hot`.
    let auto_hot = call.auto_hot.as_ref().filter(|_| !call.peek);
    let window_keys = call.auto_hot.as_ref().map(|a| {
        let win = auto_hot_window(now, a.window.as_micros() as i64);
        let key = |n: i64| {
            use std::io::Write;
            let mut k = Vec::with_capacity(kp.len() + 20);
            k.extend_from_slice(kp);
            let _ = write!(k, "{n}");
            k
        };
        [key(win), key(win - 1)]
    });
    // The decision without `auto_hot`; with it, when the tokens are taken, the window
    // counters are read (as the script reads them then, failing before any write on a
    // key of another type) and the decision made again with them.
    let version = String::from_utf8_lossy(call.version);
    // The endpoint's bucket, read (as the script's second MGET) only when the call names
    // one.
    let ke = call.key(ENDPOINT);
    let endpoint = call
        .endpoint
        .and_then(|_| ks.read_string(ke, |raw| raw.and_then(StoredBucket::read_like_the_script)));
    let mut stored = StoredState {
        buckets,
        mark_ttl_ms,
        windows: [WindowCounts::default(); 2],
        adapt,
        leases: [LeaseLevel::default(); 3],
        lease_stats: LeaseStats::default(),
        endpoint,
    };
    let decide = |stored: &StoredState, auto_hot| {
        let input = StepInput {
            now,
            tokens: call.tokens,
            static_hot: call.static_hot,
            version: &version,
            auto_hot,
            max_wait_us: call.max_wait_us,
            adaptive: call.adapt.as_ref(),
            endpoint: call.endpoint.as_ref(),
            share_ppm: call.share_ppm,
            in_flight: call.in_flight.as_ref(),
        };
        step(&call.buckets, stored, &input)
    };
    let (mut reply, mut next) = decide(&stored, None);
    // The provider's pause: denied, nothing read further, nothing written (the script
    // returns at once).
    if reply.provider {
        return Ok(answer(&reply));
    }
    // The buckets allow: the in-flight levels that apply are read in order, up to the
    // first that is full (for it, the oldest lease and the stats: the retry estimate),
    // as the script reads them; then decided again with them.
    let lease_keys = Lane::ALL.map(|lane| call.key(decide::lease_key(lane)));
    if let (Some(f), None) = (&call.in_flight, reply.reason) {
        for (lane, limit) in f.applicable(hot) {
            let i = lane as usize;
            let level = ks.leases_held(lease_keys[i], now, false)?;
            stored.leases[i] = level;
            if level.held >= limit {
                stored.leases[i] = ks.leases_held(lease_keys[i], now, true)?;
                let [released, hold_us] = ks.hash_ints(
                    call.key(LEASE_STATS),
                    [stats::RELEASED.as_bytes(), stats::HOLD_US.as_bytes()],
                    false,
                )?;
                stored.lease_stats = LeaseStats { released, hold_us };
                break;
            }
        }
        (reply, next) = decide(&stored, None);
    }
    if let (Some(wk), None) = (&window_keys, reply.reason) {
        // A window key that is also one of the call's keys (an `auto_hot` prefix that
        // collides with a bucket, the mark or the settings: a hand-built call) would be
        // written as a hash and as a string in one call: refused before any write (the
        // script fails on it too, at its HMGET or HSET).
        if let Some(i) = wk.iter().position(|w| call.keys.contains(&w.as_slice())) {
            return Err(format!(
                "ERR the auto_hot window key {:?} is also one of the call's keys",
                String::from_utf8_lossy(&wk[i]).escape_default().to_string()
            ));
        }
        for (i, key) in wk.iter().enumerate() {
            // The current window is written next when tokens are counted (not on a peek).
            let written_next = i == 0 && auto_hot.is_some();
            let [mine, all] = ks.hash_ints(key, [call.shop, b""], written_next)?;
            stored.windows[i] = WindowCounts { mine, all };
        }
        if let Some(a) = auto_hot {
            (reply, next) = decide(&stored, Some(a));
        }
    }
    if call.peek {
        return Ok(answer(&reply));
    }
    // The stored settings as the script's MGET read them, before any write (a hand-built
    // call whose settings key is a bucket's or the mark's compares what was stored, not
    // what this call writes there).
    let settings_stored = ks.read_string(kst, |v| v == Some(call.settings));
    let mut encoded = EncodedBucket::default();
    for (i, key) in bucket_keys.iter().enumerate() {
        if let (Some(b), true) = (next.buckets[i], next.buckets[i] != stored.buckets[i]) {
            // The key lives until the bucket is full again (+1 ms).
            let px = (b.tat - now).div_euclid(1000) + 1;
            ks.set_bucket(key, b.encode_into(&mut encoded), px);
        }
    }
    if let (Some(b), true) = (next.endpoint, next.endpoint != stored.endpoint) {
        let px = (b.tat - now).div_euclid(1000) + 1;
        ks.set_bucket(ke, b.encode_into(&mut encoded), px);
    }
    if let (Some([cur, _]), Some(a), None) = (&window_keys, auto_hot, reply.reason) {
        let counts = next.windows[0];
        ks.hset(cur, &[(call.shop, counts.mine), (b"", counts.all)]);
        if stored.windows[0].all == 0 {
            // As the script: floor(2 * window_µs / 1000) + 1000 ms.
            ks.pexpire(
                cur,
                (2 * a.window.as_micros() as i64).div_euclid(1000) + 1000,
            );
        }
        if reply.became_hot {
            ks.set_px(kf, b"auto", a.ttl_seconds * 1000);
        }
    }
    if let (Some(f), None) = (&call.in_flight, reply.reason) {
        for (lane, _) in f.applicable(hot) {
            let i = lane as usize;
            let expired = ks.lease_take(
                lease_keys[i],
                call.lease_id,
                now + f.lease_us,
                now,
                LEASE_SET_TTL_MS,
            );
            // Every lease is on the global level: its expired ones are counted there.
            if lane == Lane::Global && expired > 0 {
                ks.hincrby(call.key(LEASE_STATS), stats::EXPIRED.as_bytes(), expired);
            }
        }
    }
    if !settings_stored {
        ks.set_px(kst, call.settings, SETTINGS_TTL_SECONDS * 1000);
    }
    if stored.adapt.is_some() && next.adapt.is_none() {
        // The budget recovered: its state removed, as the script's DEL.
        ks.del(ka);
    }
    Ok(answer(&reply))
}

/// A lease's release as the server handles it (`release.lua`'s Rust twin): the lease
/// removed from every level's set; counted released (and its hold time, and leaked when
/// the caller says so) when it was still held, expired when its expiry had passed (unless
/// a decision already removed it from the global set, and counted it).
/// `args` are the call's KEYS then ARGV ([`crate::cmd::release`]).
pub fn release_on(ks: &mut impl Keyspace, args: &[&[u8]], now: i64) -> Result<[i64; 2], String> {
    let call = ReceivedRelease::parse(args)?;
    // Every set read before any is written: an error leaves them as they were.
    let mut found = [None; 3];
    for (i, key) in call.lease_keys.iter().enumerate() {
        found[i] = ks.lease_score(key, call.lease_id)?;
    }
    for (key, f) in call.lease_keys.iter().zip(found) {
        if f.is_some() {
            ks.lease_remove(key, call.lease_id);
        }
    }
    let expiry = found.into_iter().flatten().next();
    let outcome = match expiry {
        None => ReleaseOutcome::NotHeld,
        Some(e) if e <= now => {
            // Counted once a lease: a lease gone from the global set (where every lease
            // is) but left in a hot level's was removed, and counted, by a decision.
            if found[0].is_some() {
                ks.hincrby(call.stats_key, stats::EXPIRED.as_bytes(), 1);
            }
            ReleaseOutcome::Expired
        }
        Some(e) => {
            ks.hincrby(call.stats_key, stats::RELEASED.as_bytes(), 1);
            let hold = (now - (e - call.lease_us)).max(0);
            ks.hincrby(call.stats_key, stats::HOLD_US.as_bytes(), hold);
            if call.leaked {
                ks.hincrby(call.stats_key, stats::LEAKED.as_bytes(), 1);
            }
            ReleaseOutcome::Released
        }
    };
    Ok([outcome as i64, now])
}

/// A throttling answer as the server handles it: [`crate::adaptive::feedback`] on the
/// key space, the Lua twin `feedback.lua`'s reads and writes around it. `args` are the
/// call's KEYS then ARGV ([`crate::cmd::feedback`]).
pub fn feedback_on(ks: &mut impl Keyspace, args: &[&[u8]], now: i64) -> Result<[i64; 6], String> {
    let ReceivedFeedback {
        adapt_key: key,
        last_key,
        status,
        decrease,
        params,
        retry_after_us,
    } = ReceivedFeedback::parse(args)?;
    let stored = ks.read_string(key, |raw| raw.and_then(AdaptState::read_like_the_script));
    let out = crate::adaptive::feedback(stored, now, &params, decrease, retry_after_us);
    if out.decreased || out.paused {
        ks.set_px(key, out.next.encode().as_bytes(), out.px_ms);
    }
    let last = crate::adaptive::LastThrottle {
        status,
        at_us: now,
        retry_after_us,
    };
    ks.set_px(last_key, last.encode().as_bytes(), 86_400_000);
    Ok(out.to_ints())
}

#[cfg(test)]
mod tests {
    use crate::cmd::parse_i64;

    #[test]
    fn integers_are_read_as_rust_reads_them() {
        let mut cases: Vec<Vec<u8>> = [
            "",
            "-",
            "+",
            "0",
            "-0",
            "+0",
            "7",
            "-7",
            "+7",
            "007",
            "1 ",
            " 1",
            "1_000",
            "0x10",
            "1e3",
            "1.0",
            "--1",
            "+-1",
            "-+1",
            "9223372036854775807",
            "9223372036854775808",
            "-9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999999",
            "\u{661}",
            "１",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        cases.push(vec![b'1', 0xff]);
        cases.push(vec![b'1', 0]);
        cases.push(vec![b'/']);
        cases.push(vec![b':']);
        for c in cases {
            let std = std::str::from_utf8(&c)
                .ok()
                .and_then(|s| s.parse::<i64>().ok());
            assert_eq!(parse_i64(&c), std, "{:?}", String::from_utf8_lossy(&c));
        }
        for n in [i64::MIN, -1, 0, 1, 42, i64::MAX] {
            assert_eq!(parse_i64(n.to_string().as_bytes()), Some(n));
        }
    }
}
