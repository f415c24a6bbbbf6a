//! Token-bucket arithmetic in whole microseconds.
//!
//! A bucket is stored as one integer, its "theoretical arrival time" (TAT, as in GCRA):
//! the instant at which it will be full again. With `interval` = microseconds to refill
//! one token and `tolerance` = `capacity * interval`, the credit at `now` is
//! `tolerance - (max(tat, now) - now)` microseconds, i.e. `credit / interval` tokens.
//! Taking `n` tokens moves the TAT forward by `n * interval`. This is exactly a token
//! bucket that starts full and refills continuously, but it needs no floats (the Lua
//! script and Rust agree to the microsecond) and a missing key simply means "full".

use crate::error::ConfigError;

/// Highest refill rate: one token per microsecond.
pub const MAX_REFILL_PER_SECOND: f64 = 1_000_000.0;
/// How far below the configured rate the effective rate may be (whole-µs intervals).
pub const MAX_RATE_ERROR: f64 = 0.001;
/// Largest capacity accepted.
pub const MAX_CAPACITY: i64 = 1_000_000_000;
/// Longest time a bucket may take to refill from empty: 10 years. Keeps every TAT far
/// below 2^53 so Lua's doubles hold it exactly.
pub const MAX_REFILL_SECONDS: i64 = 10 * 365 * 86_400;
/// Largest tolerance (µs) a decided call's bucket may have, 2^60 (36,000 years): far over
/// any bucket the options make, even scaled by the adaptive budget (10 years at 1
/// permille: about 2^58), and low enough that a decision's sums (a TAT, the cost, the
/// room, the longest wait) stay inside i64. A hand-built call with more is refused.
pub const MAX_SCRIPT_TOLERANCE_US: i64 = 1 << 60;

/// One validated bucket: capacity and refill rate, with the integer forms the script uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BucketSpec {
    capacity: i64,
    refill_per_second: f64,
    interval_us: i64,
    tolerance_us: i64,
}

impl BucketSpec {
    /// Validates a bucket; `option` is the option's name for error messages (e.g. `global`).
    ///
    /// The refill interval is rounded *up* to whole microseconds, so the effective rate is
    /// never above the configured one and "allowed <= capacity + rate * t" holds exactly.
    pub fn new(option: &str, capacity: i64, refill_per_second: f64) -> Result<Self, ConfigError> {
        if !(1..=MAX_CAPACITY).contains(&capacity) {
            return Err(ConfigError::new(
                format!("{option}.capacity"),
                format!("must be an integer from 1 to {MAX_CAPACITY}, got {capacity}"),
            ));
        }
        if !refill_per_second.is_finite()
            || refill_per_second <= 0.0
            || refill_per_second > MAX_REFILL_PER_SECOND
        {
            return Err(ConfigError::new(
                format!("{option}.refill_per_second"),
                format!(
                    "must be a number greater than 0 and at most {MAX_REFILL_PER_SECOND}, got {refill_per_second:?}"
                ),
            ));
        }
        let interval_us = (1_000_000.0 / refill_per_second).ceil() as i64;
        // The interval is whole microseconds (the script's TATs are Valkey's TIME in µs,
        // exact in Lua's doubles only as integers), so a rate whose interval is not close
        // to a whole number of microseconds would run slower than configured, up to half
        // near 1,000,000/s. Refused rather than silently cut: within 0.1% or not at all.
        let effective = 1_000_000.0 / interval_us as f64;
        if effective < refill_per_second * (1.0 - MAX_RATE_ERROR) {
            let below = effective;
            let above = 1_000_000.0 / (interval_us - 1).max(1) as f64;
            return Err(ConfigError::new(
                format!("{option}.refill_per_second"),
                format!(
                    "cannot be honoured within 0.1% (the limiter counts whole microseconds per token: {refill_per_second:?}/s would run at {below:.2}/s); the nearest exact rates are {} and {}, got {refill_per_second:?}",
                    short_rate(below),
                    short_rate(above)
                ),
            ));
        }
        let refill_seconds = capacity as f64 * interval_us as f64 / 1_000_000.0;
        if refill_seconds > MAX_REFILL_SECONDS as f64 {
            return Err(ConfigError::new(
                option,
                format!(
                    "takes {refill_seconds:.0} s to refill from empty (capacity {capacity} / refill_per_second {refill_per_second:?}); at most {MAX_REFILL_SECONDS} s (10 years) is allowed"
                ),
            ));
        }
        Ok(Self {
            capacity,
            refill_per_second,
            interval_us,
            tolerance_us: capacity * interval_us,
        })
    }

    /// A bucket as the decision's ARGV carry it: interval and tolerance in µs (the server
    /// side knows no more; capacity and rate are derived for completeness). `None` when
    /// the interval is 0 (not configured) or the values are not a bucket: a tolerance
    /// over [`MAX_SCRIPT_TOLERANCE_US`] too.
    pub fn from_script_args(interval_us: i64, tolerance_us: i64) -> Option<Self> {
        if interval_us <= 0 || tolerance_us < interval_us || tolerance_us > MAX_SCRIPT_TOLERANCE_US
        {
            return None;
        }
        Some(Self {
            capacity: tolerance_us / interval_us,
            refill_per_second: 1e6 / interval_us as f64,
            interval_us,
            tolerance_us,
        })
    }

    pub fn capacity(&self) -> i64 {
        self.capacity
    }

    pub fn refill_per_second(&self) -> f64 {
        self.refill_per_second
    }

    /// Microseconds to refill one token.
    pub fn interval_us(&self) -> i64 {
        self.interval_us
    }

    /// Microseconds to refill the whole bucket from empty (`capacity * interval`).
    pub fn tolerance_us(&self) -> i64 {
        self.tolerance_us
    }

    /// Credit in microseconds at `now` for a bucket whose effective TAT is `tat`.
    /// Negative when reservations took tokens from the future.
    pub fn credit_us(&self, tat: i64, now: i64) -> i64 {
        self.tolerance_us - (tat.max(now) - now)
    }

    /// Whole tokens held at `now`.
    pub fn whole_tokens(&self, tat: i64, now: i64) -> i64 {
        self.credit_us(tat, now).max(0) / self.interval_us
    }

    /// Microseconds until `tokens` tokens are held, if nobody else takes any.
    pub fn wait_us(&self, tat: i64, now: i64, tokens: i64) -> i64 {
        (tokens * self.interval_us - self.credit_us(tat, now)).max(0)
    }
}

/// A rate for an error message: at most two decimals, no trailing zeros.
fn short_rate(r: f64) -> String {
    let s = format!("{r:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// What the store holds for one bucket: its TAT, the (interval, tolerance) it was written
/// with (`None`: a value from before they were stored, read as the current ones), and the
/// instant of the live change its writer decided with (`None`: no live limits).
///
/// Stored as `"<tat>:<interval>:<tolerance>:<change>"` (legacy: `"<tat>"`). With the limits
/// it was written under, a TAT can be read at other limits (a live change, a deploy): the
/// level in tokens carries over, see [`StoredBucket::effective_tat`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredBucket {
    pub tat: i64,
    pub params: Option<(i64, i64)>,
    pub change: Option<i64>,
}

/// The largest number a stored bucket value may hold in any of its fields (2^53 - 1): the
/// script reads them as Lua numbers (doubles), exact up to here. A TAT in µs reaches it in
/// the year 2255.
pub const MAX_STORED_NUMBER: i64 = (1 << 53) - 1;

/// Room for an encoded [`StoredBucket`]: four integers of at most 20 characters and
/// three separators.
#[derive(Debug, Clone)]
pub struct EncodedBucket {
    bytes: [u8; 96],
    len: usize,
}

impl Default for EncodedBucket {
    fn default() -> Self {
        Self {
            bytes: [0; 96],
            len: 0,
        }
    }
}

impl EncodedBucket {
    fn push(&mut self, b: u8) {
        self.bytes[self.len] = b;
        self.len += 1;
    }

    /// `n` in decimal, as `to_string` writes it (itoa: no allocation, no formatter).
    fn push_int(&mut self, n: i64) {
        for &d in itoa::Buffer::new().format(n).as_bytes() {
            self.push(d);
        }
    }
}

impl StoredBucket {
    /// The value as the script writes it.
    pub fn encode(&self) -> String {
        let mut buf = EncodedBucket::default();
        String::from_utf8_lossy(self.encode_into(&mut buf)).into_owned()
    }

    /// [`Self::encode`] into `buf`, without allocating (the native module writes it on
    /// every decision that takes tokens).
    pub fn encode_into<'b>(&self, buf: &'b mut EncodedBucket) -> &'b [u8] {
        buf.len = 0;
        buf.push_int(self.tat);
        if let Some((i, t)) = self.params {
            buf.push(b':');
            buf.push_int(i);
            buf.push(b':');
            buf.push_int(t);
            buf.push(b':');
            if let Some(c) = self.change {
                buf.push_int(c);
            }
        }
        &buf.bytes[..buf.len]
    }

    /// A stored value as the decision script reads it (`carry.lua`):
    /// `tat:interval:tolerance[:change]` in ASCII digits only, or a bare TAT in digits only
    /// (written before buckets carried their limits); each number at most
    /// [`MAX_STORED_NUMBER`] (2^53 - 1, where Lua's doubles are still exact; leading
    /// zeros are fine) and the interval at least 1. Anything else (signs, spaces, floats,
    /// exponents, other separators, text such as another library's serialized state, a
    /// number beyond the bound) is `None`: every engine then decides as if the key were
    /// missing (a full bucket) and the next write replaces it.
    pub fn read_like_the_script(raw: &[u8]) -> Option<Self> {
        // Digits only, read without overflow, at most MAX_STORED_NUMBER.
        let num = |p: &[u8]| -> Option<i64> {
            if p.is_empty() {
                return None;
            }
            let mut n: i64 = 0;
            for &b in p {
                let d = b.wrapping_sub(b'0');
                if d > 9 {
                    return None;
                }
                n = n * 10 + i64::from(d);
                if n > MAX_STORED_NUMBER {
                    return None;
                }
            }
            Some(n)
        };
        // Split on ':' without collecting (this runs on every decision): at most 4 parts.
        let mut parts: [&[u8]; 4] = [&[]; 4];
        let mut n = 0;
        for part in raw.split(|&b| b == b':') {
            if n == parts.len() {
                return None;
            }
            parts[n] = part;
            n += 1;
        }
        let params = |i: &[u8], t: &[u8]| Some((num(i).filter(|&i| i >= 1)?, num(t)?));
        match &parts[..n] {
            [a, i, t] => Some(Self {
                tat: num(a)?,
                params: Some(params(i, t)?),
                change: None,
            }),
            [a, i, t, w] => Some(Self {
                tat: num(a)?,
                params: Some(params(i, t)?),
                change: match w.is_empty() {
                    true => None,
                    false => Some(num(w)?),
                },
            }),
            [bare] => Some(Self {
                tat: num(bare)?,
                params: None,
                change: None,
            }),
            _ => None,
        }
    }

    /// The bucket's TAT at `now` under `spec`, and whether it was carried over from other
    /// limits (then the script writes it back, so that its key expires on the new limits'
    /// schedule). Written under the same limits: `max(tat, now)`. Otherwise the level in
    /// tokens carries over, clamped to the new capacity (a full bucket's level is its old
    /// capacity), and refills at the new rate from the instant of the live change decided
    /// with (`change_at`) if the bucket was written before it, else from now (a deploy with
    /// other constructor values). Nothing written after a live change has the old version (the script
    /// refuses callers that decide with an older one), so that is the level it had then.
    /// The arithmetic is the script's, operation for operation (Lua numbers are doubles):
    /// the credit is rounded down, never up.
    pub fn effective_tat(
        stored: Option<&Self>,
        spec: &BucketSpec,
        now: i64,
        change_at: Option<i64>,
    ) -> (i64, bool) {
        let Some(b) = stored else { return (now, false) };
        let (interval, tolerance) = (spec.interval_us(), spec.tolerance_us());
        let mut x = b.tat;
        let mut moved = false;
        if let Some((old_interval, old_tolerance)) = b.params {
            if (old_interval, old_tolerance) != (interval, tolerance) {
                let c = match change_at {
                    Some(c) if b.change != Some(c) => c.min(now),
                    _ => now,
                };
                // Clamped from above only: a TAT beyond `c + old_tolerance` holds tokens
                // reservations took from the future, calls still to be made; that debt
                // carries over too (rounded down, as the credit).
                let credit = (old_tolerance - (x - c)).min(old_tolerance);
                let credit = ((credit as f64 / old_interval as f64 * interval as f64).floor()
                    as i64)
                    .min(tolerance);
                // Clamped to MAX_STORED_NUMBER, as carry.lua: a readable value no release
                // writes (a TAT decades ahead, or days ahead at 1 µs per token) can carry
                // over beyond it (beyond i64 too: saturating); clamped, it stays a debt
                // (a denial) and a value every engine reads, and the script's `%d` and
                // PX stay in range.
                x = c
                    .saturating_add(tolerance)
                    .saturating_sub(credit)
                    .min(MAX_STORED_NUMBER);
                moved = true;
            }
        }
        (x.max(now), moved)
    }
}

/// The buckets a limiter checks, in the order a denial is attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Global = 0,
    HotLane = 1,
    HotShop = 2,
}

impl Lane {
    pub const ALL: [Lane; 3] = [Lane::Global, Lane::HotLane, Lane::HotShop];

    /// The lane whose bucket option is called `name`.
    pub fn from_name(name: &str) -> Option<Lane> {
        Lane::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The option name of the lane's bucket.
    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Global => "global",
            Lane::HotLane => "hot_lane",
            Lane::HotShop => "hot_shop",
        }
    }
}

/// The configured buckets of one limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct BucketSet {
    pub global: BucketSpec,
    pub hot_lane: Option<BucketSpec>,
    pub hot_shop: Option<BucketSpec>,
}

impl BucketSet {
    pub fn get(&self, lane: Lane) -> Option<&BucketSpec> {
        match lane {
            Lane::Global => Some(&self.global),
            Lane::HotLane => self.hot_lane.as_ref(),
            Lane::HotShop => self.hot_shop.as_ref(),
        }
    }

    /// The buckets a request must find room in: global, plus the hot buckets for a hot shop.
    pub fn applicable(&self, hot: bool) -> impl Iterator<Item = (Lane, &BucketSpec)> {
        let lanes: &[Lane] = if hot { &Lane::ALL } else { &Lane::ALL[..1] };
        lanes
            .iter()
            .filter_map(move |&lane| self.get(lane).map(|spec| (lane, spec)))
    }

    /// The smallest configured capacity: the most tokens one request may ask for.
    pub fn min_capacity(&self) -> i64 {
        Lane::ALL
            .iter()
            .filter_map(|&l| self.get(l))
            .map(BucketSpec::capacity)
            .min()
            .unwrap_or(self.global.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A readable value whose carry-over leaves 2^53 (a TAT 285 years ahead, a TAT
    /// days ahead at 1 µs per token) is clamped to MAX_STORED_NUMBER: still a denial,
    /// still a value every engine reads, as carry.lua clamps it.
    #[test]
    fn a_carry_over_beyond_the_stored_range_is_clamped_to_it() {
        let spec = BucketSpec::new("global", 10, 10.0).unwrap();
        let now = 1_796_000_000_000_000;
        for raw in [&b"9007199254740991:1:1"[..], b"1800000000000000:1:0"] {
            let b = StoredBucket::read_like_the_script(raw).unwrap();
            assert_eq!(
                StoredBucket::effective_tat(Some(&b), &spec, now, Some(now - 5)),
                (MAX_STORED_NUMBER, true),
                "{raw:?}"
            );
        }
        let same = StoredBucket {
            tat: MAX_STORED_NUMBER,
            params: Some((spec.interval_us(), spec.tolerance_us())),
            change: None,
        };
        assert_eq!(
            StoredBucket::effective_tat(Some(&same), &spec, now, None),
            (MAX_STORED_NUMBER, false)
        );
    }

    #[test]
    fn interval_rounds_up_so_rate_never_exceeds_configured() {
        let b = BucketSpec::new("global", 10, 3.0).unwrap();
        assert_eq!(b.interval_us(), 333_334);
        assert!(1_000_000.0 / b.interval_us() as f64 <= 3.0);
        assert_eq!(b.tolerance_us(), 3_333_340);
        let b = BucketSpec::new("global", 1, 1_000_000.0).unwrap();
        assert_eq!(b.interval_us(), 1);
        let b = BucketSpec::new("global", 5, 0.5).unwrap();
        assert_eq!(b.interval_us(), 2_000_000);
    }

    #[test]
    fn rejects_out_of_range_values_naming_the_option() {
        let e = BucketSpec::new("hot_lane", 0, 1.0).unwrap_err();
        assert_eq!(e.option, "hot_lane.capacity");
        assert!(e.message.contains("got 0"), "{}", e.message);
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1_000_001.0] {
            let e = BucketSpec::new("global", 1, bad).unwrap_err();
            assert_eq!(e.option, "global.refill_per_second");
        }
        let e = BucketSpec::new("global", 1_000_000_000, 0.001).unwrap_err();
        assert_eq!(e.option, "global");
        assert!(e.message.contains("10 years"), "{}", e.message);
    }

    #[test]
    fn credit_tokens_and_wait() {
        // capacity 4, 2 tokens/s: interval 0.5 s, full after 2 s.
        let b = BucketSpec::new("global", 4, 2.0).unwrap();
        let now = 1_000_000_000;
        // Missing or past TAT: full.
        assert_eq!(b.whole_tokens(now - 5, now), 4);
        assert_eq!(b.wait_us(now - 5, now, 4), 0);
        // TAT 1.25 s ahead: 0.75 s of credit = 1.5 tokens.
        let tat = now + 1_250_000;
        assert_eq!(b.credit_us(tat, now), 750_000);
        assert_eq!(b.whole_tokens(tat, now), 1);
        assert_eq!(b.wait_us(tat, now, 1), 0);
        assert_eq!(b.wait_us(tat, now, 2), 250_000);
        assert_eq!(b.wait_us(tat, now, 4), 1_250_000);
    }

    #[test]
    fn encoding_without_allocation_is_to_string_and_reads_back() {
        let cases = [
            StoredBucket {
                tat: 1_796_036_012_345_678,
                params: Some((1, 1_000_000)),
                change: None,
            },
            StoredBucket {
                tat: 0,
                params: Some((200_000, 2_000_000)),
                change: Some(1_700_000_000_000_000),
            },
            StoredBucket {
                tat: i64::MIN,
                params: Some((i64::MAX, i64::MIN)),
                change: Some(-1),
            },
            StoredBucket {
                tat: 42,
                params: None,
                change: None,
            },
        ];
        for b in cases {
            let expected = match b.params {
                Some((i, t)) => format!(
                    "{}:{i}:{t}:{}",
                    b.tat,
                    b.change.map_or(String::new(), |c| c.to_string())
                ),
                None => b.tat.to_string(),
            };
            assert_eq!(b.encode(), expected);
            if b.tat >= 0
                && b.change.is_none_or(|c| c >= 0)
                && b.params.is_none_or(|(i, t)| i >= 0 && t >= 0)
            {
                assert_eq!(
                    StoredBucket::read_like_the_script(expected.as_bytes()),
                    Some(b)
                );
            }
        }
        for bad in [
            &b"1:2:3:4:5"[..],
            b"1:2",
            b"",
            b"1::3",
            b"-1:2:3",
            b"1:2:3:x",
            b"a",
        ] {
            assert_eq!(StoredBucket::read_like_the_script(bad), None, "{bad:?}");
        }
        // Values Lua's tonumber would take but no release writes: foreign (a missing key).
        for foreign in [
            &b" 17 "[..],
            b"17 ",
            b"+4",
            b"-3",
            b"5.5",
            b"1e3",
            b"0x10",
            b"inf",
            b"nan",
            b"9007199254740992",
            b"99999999999999999999999999",
            b"17abc",
            b"5:0:5:",
            b"5:1:5: ",
            b"a:s:2:{i:0;i:1;}",
        ] {
            assert_eq!(
                StoredBucket::read_like_the_script(foreign),
                None,
                "{foreign:?}"
            );
        }
        let max = MAX_STORED_NUMBER.to_string();
        assert_eq!(
            StoredBucket::read_like_the_script(max.as_bytes()).map(|b| b.tat),
            Some(MAX_STORED_NUMBER)
        );
        assert_eq!(
            StoredBucket::read_like_the_script(b"000000000000000000000000017:01:0:").unwrap(),
            StoredBucket {
                tat: 17,
                params: Some((1, 0)),
                change: None
            }
        );
    }

    /// The reading spelled out with allocations, kept as the reference: digits only,
    /// each number at most MAX_STORED_NUMBER, the interval at least 1.
    fn read_like_the_script_before(raw: &[u8]) -> Option<StoredBucket> {
        let text = std::str::from_utf8(raw).ok()?;
        let num = |p: &str| -> Option<i64> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let n: u128 = p.parse().ok()?;
            (n <= MAX_STORED_NUMBER as u128).then_some(n as i64)
        };
        let parts: Vec<&str> = text.split(':').collect();
        let (tat, rest) = parts.split_first()?;
        let tat = num(tat)?;
        match rest {
            [] => Some(StoredBucket {
                tat,
                params: None,
                change: None,
            }),
            [i, t] | [i, t, ""] => Some(StoredBucket {
                tat,
                params: Some((num(i).filter(|&i| i > 0)?, num(t)?)),
                change: None,
            }),
            [i, t, w] => Some(StoredBucket {
                tat,
                params: Some((num(i).filter(|&i| i > 0)?, num(t)?)),
                change: Some(num(w)?),
            }),
            _ => None,
        }
    }

    #[test]
    fn reading_a_stored_bucket_is_what_it_was() {
        let pieces: [&[u8]; 20] = [
            b"9007199254740991",
            b"9007199254740992",
            b"0000000000000000000000000000009",
            b"1:",
            b"",
            b"0",
            b"17",
            b"-3",
            b"+4",
            b"9223372036854775807",
            b"9223372036854775808",
            b"00012",
            b" 5",
            b"x",
            b"1e3",
            b"\xff",
            b"\x00",
            b"1.5",
            b"\xc3\xa9",
            b"18446744073709551616",
        ];
        let mut n = 0;
        for a in pieces {
            for b in pieces {
                for c in pieces {
                    for sep in [&b":"[..], b"::", b":x"] {
                        for tail in [
                            &b""[..],
                            b":",
                            b":7",
                            b":-7",
                            b":9223372036854775808",
                            b":1:2",
                        ] {
                            let raw = [a, b":", b, sep, c, tail].concat();
                            assert_eq!(
                                StoredBucket::read_like_the_script(&raw),
                                read_like_the_script_before(&raw),
                                "{:?}",
                                String::from_utf8_lossy(&raw)
                            );
                            n += 1;
                        }
                    }
                }
            }
        }
        for a in pieces {
            assert_eq!(
                StoredBucket::read_like_the_script(a),
                read_like_the_script_before(a)
            );
        }
        assert!(n > 10_000);
    }

    #[test]
    fn applicable_lanes_follow_hotness_and_configuration() {
        let set = BucketSet {
            global: BucketSpec::new("global", 10, 10.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 3, 1.0).unwrap()),
        };
        let cold: Vec<_> = set.applicable(false).map(|(l, _)| l).collect();
        let hot: Vec<_> = set.applicable(true).map(|(l, _)| l).collect();
        assert_eq!(cold, vec![Lane::Global]);
        assert_eq!(hot, vec![Lane::Global, Lane::HotShop]);
        assert_eq!(set.min_capacity(), 3);
    }
}
