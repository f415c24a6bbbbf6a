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

use crate::adaptive::{AdaptParams, AdaptState};
use crate::auto_hot::AutoHot;
use crate::bounds::MAX_WAIT_US;
use crate::bucket::{BucketSet, BucketSpec, EncodedBucket, Lane, StoredBucket};
use crate::call::{LIMITS_CHANGED_REPLY, SETTINGS_TTL_SECONDS};
use crate::contract::decide;
use crate::step::{auto_hot_window, step, StepInput, StepReply, StoredState, WindowCounts};

/// A decision call as the server receives it (`CG.DECIDE`'s arguments, or the script's
/// KEYS then ARGV), decoded: the inverse of [`crate::DecideCall`]'s encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedCall<'a> {
    /// The keys, at their positions in [`decide::keys`].
    pub keys: [&'a [u8]; decide::keys::LEN],
    pub tokens: i64,
    pub static_hot: bool,
    pub buckets: BucketSet,
    pub version: &'a [u8],
    pub shop: &'a [u8],
    pub auto_hot: Option<AutoHot>,
    pub settings: &'a [u8],
    /// `peek()`: decide, write nothing.
    pub peek: bool,
    /// A reservation's longest wait, µs (0: none).
    pub max_wait_us: i64,
    /// The `adaptive` option (None: off, its state not read).
    pub adapt: Option<AdaptParams>,
}

/// `raw` as an integer, exactly as `str::parse::<i64>` reads it (an optional sign, then
/// at least one ASCII digit, no overflow), without the UTF-8 check first: every decision
/// reads a dozen of them.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, raw),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        // Accumulated negative when negative, so i64::MIN reads too.
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(i64::from(d))?
        } else {
            n.checked_add(i64::from(d))?
        };
    }
    Some(n)
}

fn int(name: &str, raw: &[u8]) -> Result<i64, String> {
    parse_i64(raw).ok_or_else(|| {
        format!(
            "{name} must be an integer, got {:?}",
            String::from_utf8_lossy(raw)
        )
    })
}

impl<'a> ReceivedCall<'a> {
    /// Decodes the call's KEYS then ARGV, each by its name in [`decide`]. What it holds
    /// is valid as the options are: the buckets are buckets, `auto_hot` passed
    /// [`AutoHot::new`].
    pub fn parse(args: &[&'a [u8]]) -> Result<Self, String> {
        const KEYS: usize = decide::keys::LEN;
        const ARGS: usize = decide::args::LEN;
        if args.len() != KEYS + ARGS {
            return Err(format!(
                "expected {KEYS} keys and {ARGS} arguments, got {}",
                args.len()
            ));
        }
        let (keys, argv) = args.split_at(KEYS);
        let keys: [&'a [u8]; KEYS] = keys.try_into().expect("split at KEYS");
        use decide::args::*;
        let arg = |i: usize| argv[i];
        let tokens = int("tokens", arg(TOKENS))?;
        if tokens < 1 {
            return Err(format!("tokens must be at least 1, got {tokens}"));
        }
        let bucket = |lane: Lane| -> Result<Option<BucketSpec>, String> {
            let name = lane.as_str();
            let i = int(name, arg(decide::interval_arg(lane)))?;
            let t = int(name, arg(decide::tolerance_arg(lane)))?;
            match i {
                0 => Ok(None),
                _ => BucketSpec::from_script_args(i, t).map(Some).ok_or_else(|| {
                    format!("{name}: interval {i} and tolerance {t} are not a bucket")
                }),
            }
        };
        let global = bucket(Lane::Global)?.ok_or("the global bucket is required")?;
        let buckets = BucketSet {
            global,
            hot_lane: bucket(Lane::HotLane)?,
            hot_shop: bucket(Lane::HotShop)?,
        };
        let max_wait_us = int("max wait", arg(MAX_WAIT))?;
        if !(0..=MAX_WAIT_US).contains(&max_wait_us) {
            return Err(format!(
                "max wait must be from 0 to {MAX_WAIT_US} µs, got {max_wait_us}"
            ));
        }
        let window_us = int("auto_hot window", arg(AUTO_HOT_WINDOW))?;
        let auto_hot = match window_us {
            0 => None,
            w if w > 0 => Some(
                AutoHot::new(
                    std::time::Duration::from_micros(w as u64),
                    std::str::from_utf8(arg(AUTO_HOT_SHARE))
                        .ok()
                        .and_then(|s| s.parse::<f64>().ok())
                        .filter(|x| x.is_finite())
                        .ok_or("auto_hot share must be a number")?,
                    int("auto_hot ttl", arg(AUTO_HOT_TTL))?,
                    int("auto_hot min_tokens", arg(AUTO_HOT_MIN_TOKENS))?,
                )
                .map_err(|e| format!("{} {}", e.option, e.message))?,
            ),
            w => return Err(format!("auto_hot window must be >= 0, got {w}")),
        };
        let floor = int("adaptive floor", arg(ADAPT_FLOOR))?;
        let adapt = match floor {
            0 => None,
            f if (1..=crate::adaptive::FULL).contains(&f) => {
                let recover_us = int("adaptive recovery", arg(ADAPT_RECOVER))?;
                if recover_us < 1 {
                    return Err(format!(
                        "adaptive recovery must be at least 1 µs, got {recover_us}"
                    ));
                }
                Some(AdaptParams {
                    floor_permille: f,
                    recover_us,
                })
            }
            f => return Err(format!("adaptive floor must be from 0 to 1000, got {f}")),
        };
        Ok(Self {
            adapt,
            keys,
            tokens,
            static_hot: arg(STATIC_HOT) == b"1",
            buckets,
            version: arg(VERSION),
            shop: arg(SHOP),
            auto_hot,
            settings: arg(SETTINGS),
            peek: arg(PEEK) == b"1",
            max_wait_us,
        })
    }

    /// The key at `at` (a position in [`decide::keys`]).
    pub fn key(&self, at: usize) -> &'a [u8] {
        self.keys[at]
    }
}

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
}

/// The integers a decision answers: the script's reply (see [`crate::StepReply`]), or
/// [`LIMITS_CHANGED_REPLY`]. Held without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerReply {
    ints: [i64; 11],
    len: usize,
}

impl ServerReply {
    fn new(ints: &[i64]) -> Self {
        let mut out = Self {
            ints: [0; 11],
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
    let short = !hot && call.auto_hot.is_none();
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
    let mut stored = StoredState {
        buckets,
        mark_ttl_ms,
        windows: [WindowCounts::default(); 2],
        adapt,
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
        };
        step(&call.buckets, stored, &input)
    };
    let (mut reply, mut next) = decide(&stored, None);
    // The provider's pause: denied, nothing read further, nothing written (the script
    // returns at once).
    if reply.provider {
        return Ok(answer(&reply));
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
    if !settings_stored {
        ks.set_px(kst, call.settings, SETTINGS_TTL_SECONDS * 1000);
    }
    if stored.adapt.is_some() && next.adapt.is_none() {
        // The budget recovered: its state removed, as the script's DEL.
        ks.del(ka);
    }
    Ok(answer(&reply))
}

/// A throttling answer as the server handles it: [`crate::adaptive::feedback`] on the
/// key space, the Lua twin `feedback.lua`'s reads and writes around it. `args` are the
/// call's KEYS then ARGV ([`crate::contract::feedback`]).
pub fn feedback_on(ks: &mut impl Keyspace, args: &[&[u8]], now: i64) -> Result<[i64; 6], String> {
    use crate::contract::feedback as fb;
    if args.len() != fb::keys::LEN + fb::args::LEN {
        return Err(format!(
            "expected {} keys and {} arguments, got {}",
            fb::keys::LEN,
            fb::args::LEN,
            args.len()
        ));
    }
    let (keys, argv) = args.split_at(fb::keys::LEN);
    let key = keys[fb::keys::ADAPT];
    let status = int("status", argv[fb::args::STATUS])?;
    if !(100..=599).contains(&status) {
        return Err(format!("status must be from 100 to 599, got {status}"));
    }
    let decrease = std::str::from_utf8(argv[fb::args::DECREASE])
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|d| *d > 0.0 && *d < 1.0)
        .ok_or("decrease must be a number above 0 and below 1")?;
    let floor = int("floor", argv[fb::args::FLOOR])?;
    let recover_us = int("recovery", argv[fb::args::RECOVER])?;
    let retry_after_us = int("retry after", argv[fb::args::RETRY_AFTER])?;
    if !(1..=crate::adaptive::FULL).contains(&floor) || recover_us < 1 || retry_after_us < 0 {
        return Err(format!(
            "floor {floor}, recovery {recover_us} µs or retry after {retry_after_us} µs out of range"
        ));
    }
    let params = AdaptParams {
        floor_permille: floor,
        recover_us,
    };
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
    ks.set_px(keys[fb::keys::LAST], last.encode().as_bytes(), 86_400_000);
    Ok(out.to_ints())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    use crate::call::{AutoHotArgs, DecideCall, LaneArgs, ShopKeys};
    use crate::Keys;

    #[test]
    fn a_received_call_is_what_the_encoder_sent() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
        };
        let auto = AutoHot {
            window: std::time::Duration::from_millis(1500),
            share: 0.34,
            ttl_seconds: 60,
            min_tokens: 3,
        };
        let keys = ShopKeys::new(&Keys::new("n"), b"s\x00p");
        let (lanes, auto_args) = (LaneArgs::new(&set), AutoHotArgs::new(Some(&auto)));
        let call = DecideCall {
            adapt: &crate::call::AdaptArgs::off(),
            keys: keys.decide_keys(),
            tokens: 2,
            static_hot: true,
            lanes: &lanes,
            version: b"3-ab-17",
            shop: b"s\x00p",
            auto_hot: &auto_args,
            settings: "global=30/7.5",
            peek: true,
            max_wait_us: 250_000,
        };
        let argv = call.argv();
        let args: Vec<&[u8]> = call
            .keys()
            .into_iter()
            .chain(argv.iter().map(|a| a.as_ref()))
            .collect();
        let got = ReceivedCall::parse(&args).unwrap();
        assert_eq!(got.keys, call.keys());
        assert_eq!((got.tokens, got.static_hot), (2, true));
        assert_eq!(got.version, b"3-ab-17");
        assert_eq!(got.shop, b"s\x00p");
        assert_eq!(got.auto_hot, Some(auto));
        assert_eq!(got.settings, b"global=30/7.5");
        assert!(got.peek);
        assert_eq!(got.max_wait_us, 250_000);
        for lane in Lane::ALL {
            let (a, b) = (got.buckets.get(lane), set.get(lane));
            assert_eq!(
                a.map(|x| (x.interval_us(), x.tolerance_us())),
                b.map(|x| (x.interval_us(), x.tolerance_us()))
            );
        }
        assert!(ReceivedCall::parse(&args[..23]).is_err());
    }

    proptest::proptest! {
        /// Every `auto_hot` its constructor accepts (what the option's parser ends in)
        /// reaches the server as one its decoder accepts, the same to the microsecond:
        /// the decoder validates what it reads (the script does not), so an option it
        /// refused would make every decision of that limiter an error on the module, and
        /// a decision on the script. (checkout-guard-config's `options::auto_hot` holds
        /// the option itself to the decoder.)
        #[test]
        fn every_auto_hot_the_constructor_accepts_is_decoded_as_sent(
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
            ttl in 1..=crate::bounds::MAX_TTL_SECONDS,
            min_tokens in proptest::option::of(1..=1_000_000_000i64),
            interval_us in 1..=10_000_000i64,
        ) {
            // What the option's parser (checkout-guard-config) ends in: the window in
            // seconds as given, min_tokens by default 10% of what the global bucket
            // refills in one window (at least 1).
            let global = BucketSpec::new("global", 1000, 1e6 / interval_us as f64).unwrap();
            let min_tokens = min_tokens.unwrap_or_else(|| {
                ((global.refill_per_second() * window_s * 0.1).ceil() as i64).max(1)
            });
            let sent = AutoHot::new(
                std::time::Duration::from_secs_f64(window_s),
                share,
                ttl,
                min_tokens,
            )
            .unwrap();
            let set = BucketSet {
                global,
                hot_lane: None,
                hot_shop: None,
            };
            let keys = ShopKeys::new(&Keys::new("p"), b"s");
            let (lanes, auto_args) = (LaneArgs::new(&set), AutoHotArgs::new(Some(&sent)));
            let call = DecideCall {
                adapt: &crate::call::AdaptArgs::off(),
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
                .keys()
                .into_iter()
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

    /// A call whose `auto_hot` the options would refuse is refused, naming the part.
    #[test]
    fn a_received_auto_hot_is_validated_as_the_option_is() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: None,
        };
        let keys = ShopKeys::new(&Keys::new("n"), b"s");
        let lanes = LaneArgs::new(&set);
        let parse = |window_us: &str, share: &str, ttl: &str, min: &str| {
            let auto = AutoHotArgs::new(None);
            let call = DecideCall {
                adapt: &crate::call::AdaptArgs::off(),
                keys: keys.decide_keys(),
                tokens: 1,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop: b"s",
                auto_hot: &auto,
                settings: "",
                peek: false,
                max_wait_us: 0,
            };
            let mut argv: Vec<Vec<u8>> = call.argv().iter().map(|a| a.to_vec()).collect();
            use decide::args::*;
            for (at, v) in [
                (AUTO_HOT_WINDOW, window_us),
                (AUTO_HOT_SHARE, share),
                (AUTO_HOT_TTL, ttl),
                (AUTO_HOT_MIN_TOKENS, min),
            ] {
                argv[at] = v.as_bytes().to_vec();
            }
            let args: Vec<&[u8]> = call
                .keys()
                .into_iter()
                .chain(argv.iter().map(|a| a.as_slice()))
                .collect();
            ReceivedCall::parse(&args).map(|c| c.auto_hot)
        };
        let ok = parse("1000000", "0.3", "60", "1").unwrap().unwrap();
        assert_eq!(
            ok,
            AutoHot::new(std::time::Duration::from_secs(1), 0.3, 60, 1).unwrap()
        );
        for (args, part) in [
            (("200000", "0.3", "60", "1"), "auto_hot.window_seconds"),
            (("3600000001", "0.3", "60", "1"), "auto_hot.window_seconds"),
            (("1000000", "1.5", "60", "1"), "auto_hot.share"),
            (("1000000", "0", "60", "1"), "auto_hot.share"),
            (("1000000", "0.3", "0", "1"), "auto_hot.ttl_seconds"),
            (("1000000", "0.3", "60", "0"), "auto_hot.min_tokens"),
        ] {
            let e = parse(args.0, args.1, args.2, args.3).unwrap_err();
            assert!(e.starts_with(part), "{args:?}: {e}");
        }
        // Off is off, whatever the other parts hold.
        assert_eq!(parse("0", "x", "y", "z"), Ok(None));
    }
}
