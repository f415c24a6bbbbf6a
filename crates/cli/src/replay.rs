//! What-if replay: recorded attempts at one API decided again by the limiter's own model
//! ([`checkout_guard_model::step`], the decision the script, the module and the
//! tests share), under candidate limits, in time order, with a provider's own limit as a
//! token bucket after them. No second implementation of the decision: this module only
//! keeps what the store would keep (the buckets, the hot marks, the `auto_hot` windows)
//! and counts what came out.
//!
//! Memory: per scenario, one state per shop and one counter per second of the range;
//! nothing per event. The caller feeds attempts in time order ([`Merge`] puts a few
//! seconds of disorder right, as the workers' batched writes leave it).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};

use checkout_guard_config::live::parse_bucket;
use checkout_guard_config::{auto_hot_from_value, Value};
use checkout_guard_model::bucket::MAX_STORED_NUMBER;
use checkout_guard_model::step::{auto_hot_window, StepInput, StoredState, WindowCounts};
use checkout_guard_model::{
    reservation_wait_us, step, AutoHot, BucketSet, BucketSpec, Lane, StoredBucket,
};

/// Whether `ts_ms` is an instant the model decides at: from the Unix epoch to 2^53 - 1 µs
/// (the year 2255, [`MAX_STORED_NUMBER`]), as Valkey's clock gives them. Anything else
/// (a negative or absurd timestamp in a file) is skipped by [`Sim::attempt`].
pub fn timestamp_in_range(ts_ms: i64) -> bool {
    (0..=MAX_STORED_NUMBER / 1000).contains(&ts_ms)
}

/// A recorded attempt: when (Unix ms) and for which shop.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attempt {
    pub ts_ms: i64,
    pub shop: Vec<u8>,
}

/// One candidate configuration, as `--limits` names it.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    /// What `--limits` said (for display).
    pub text: String,
    /// `None`: no limiter (every attempt admitted; only the provider decides).
    pub limits: Option<BucketSet>,
}

/// What every scenario shares: the hot shops listed, `auto_hot`, reservations, the
/// provider's limit.
#[derive(Debug, Clone, Default)]
pub struct Common {
    pub hot_shops: HashSet<Vec<u8>>,
    pub auto_hot: Option<AutoHot>,
    /// A reservation's longest wait, µs (0: none).
    pub max_wait_us: i64,
    pub provider: Option<BucketSpec>,
}

/// Parses `--limits`: `[name:]global=C/R [hot_lane=C/R] [hot_shop=C/R]` (spaces or
/// commas between buckets; C capacity, R refill per second), validated as the limiter's
/// options are (errors name the bucket). `index` names an unnamed scenario.
pub fn parse_limits(text: &str, index: usize) -> Result<Scenario, String> {
    let (name, body) = match text.split_once(':') {
        Some((n, rest)) if !n.contains('=') && !n.trim().is_empty() => (n.trim().to_string(), rest),
        _ => (
            if index == 0 {
                "limits".to_string()
            } else {
                format!("limits{}", index + 1)
            },
            text,
        ),
    };
    let mut buckets: [Option<BucketSpec>; 3] = [None; 3];
    for part in body.split([' ', ',']).filter(|p| !p.trim().is_empty()) {
        let (bucket, value) = part
            .split_once('=')
            .ok_or_else(|| format!("--limits {text:?}: {part:?} is not BUCKET=CAPACITY/RATE"))?;
        let lane = Lane::from_name(bucket.trim()).ok_or_else(|| {
            format!("--limits {text:?}: {bucket:?} is not a bucket (global, hot_lane, hot_shop)")
        })?;
        let (c, r) = parse_bucket(lane, value).map_err(|e| format!("--limits {text:?}: {e}"))?;
        let spec =
            BucketSpec::new(lane.as_str(), c, r).map_err(|e| format!("--limits {text:?}: {e}"))?;
        if buckets[lane as usize].replace(spec).is_some() {
            return Err(format!("--limits {text:?}: {} given twice", lane.as_str()));
        }
    }
    let global = buckets[0].ok_or_else(|| format!("--limits {text:?}: no global=CAPACITY/RATE"))?;
    Ok(Scenario {
        name,
        text: body.trim().to_string(),
        limits: Some(BucketSet {
            global,
            hot_lane: buckets[1],
            hot_shop: buckets[2],
        }),
    })
}

/// Parses `--provider CAPACITY/RATE`: the provider's own limit as a token bucket.
pub fn parse_provider(text: &str) -> Result<BucketSpec, String> {
    let (c, r) = text
        .split_once('/')
        .ok_or_else(|| format!("--provider: {text:?} is not CAPACITY/RATE"))?;
    let c = c
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("--provider: capacity {c:?} is not an integer"))?;
    let r = r
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("--provider: rate {r:?} is not a number"))?;
    BucketSpec::new("provider", c, r).map_err(|e| format!("--provider: {e}"))
}

/// Parses `--auto-hot`: empty for the option's defaults (`auto_hot => true`), else the
/// option's fields as `window_seconds=10,share=0.3,ttl_seconds=300,min_tokens=20` (spaces
/// or commas), validated as the option is. Needs the global bucket (`min_tokens`' default
/// is 10% of what it refills in a window).
pub fn parse_auto_hot(text: &str, global: &BucketSpec) -> Result<AutoHot, String> {
    let mut entries = Vec::new();
    for part in text.split([' ', ',']).filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--auto-hot: {part:?} is not FIELD=VALUE"))?;
        let v = v.trim();
        let value = match v.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => match v.parse::<f64>() {
                Ok(f) => Value::Float(f),
                Err(_) => Value::Str(v.as_bytes().to_vec()),
            },
        };
        entries.push((k.trim().to_string(), value));
    }
    let v = if entries.is_empty() {
        Value::Bool(true)
    } else {
        Value::Map(entries)
    };
    match auto_hot_from_value(&v, global) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err("--auto-hot: off".into()),
        Err(e) => Err(format!("--auto-hot: {e}")),
    }
}

/// Counts per shop (and for the whole API).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub attempts: u64,
    pub admitted: u64,
    /// Denied, by the lane whose bucket lacked the tokens.
    pub denied: [u64; 3],
    /// Admitted calls the provider's limit would have answered 429.
    pub provider_429: u64,
    /// Admitted reservations that would have waited (for longer than 0).
    pub waited: u64,
    /// Admitted while hot (listed, marked by `auto_hot`).
    pub admitted_hot: u64,
}

impl Counts {
    pub fn denied_total(&self) -> u64 {
        self.denied.iter().sum()
    }
}

/// One second's counts, for the rates and the charts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    pub attempts: u64,
    pub admitted: u64,
    pub admitted_hot: u64,
    pub denied: u64,
    pub provider_429: u64,
}

#[derive(Debug, Default)]
struct ShopState {
    bucket: Option<StoredBucket>,
    /// An `auto_hot` mark's end, µs.
    mark_until_us: Option<i64>,
    /// `auto_hot`: the window the counts are of, this shop's tokens in it and in the one before.
    window: i64,
    mine: [i64; 2],
    counts: Counts,
}

/// One scenario's replay: the store's state as the model keeps it, and what came out.
pub struct Sim {
    pub scenario: Scenario,
    common: Common,
    global: Option<StoredBucket>,
    lane: Option<StoredBucket>,
    provider: Option<StoredBucket>,
    /// `auto_hot`: the window of `all`, every shop's tokens in it and in the one before.
    window: i64,
    all: [i64; 2],
    shops: HashMap<Vec<u8>, ShopState>,
    pub total: Counts,
    pub seconds: BTreeMap<i64, Second>,
    /// Reservations' waits, µs (a histogram: memory by its buckets, not its entries).
    pub waits: crate::scan::Histogram,
    pub max_wait_us: i64,
    /// Shops `auto_hot` marked, at least once.
    pub marked: HashSet<Vec<u8>>,
}

impl Sim {
    pub fn new(scenario: Scenario, common: Common) -> Self {
        Self {
            scenario,
            common,
            global: None,
            lane: None,
            provider: None,
            window: i64::MIN,
            all: [0; 2],
            shops: HashMap::new(),
            total: Counts::default(),
            seconds: BTreeMap::new(),
            waits: Default::default(),
            max_wait_us: 0,
            marked: HashSet::new(),
        }
    }

    /// Shifts a window pair `(at, [cur, prev])` to window `w`.
    fn shift(at: &mut i64, counts: &mut [i64; 2], w: i64) {
        if *at == w {
            return;
        }
        *counts = if *at != i64::MIN && *at + 1 == w {
            [0, counts[0]]
        } else {
            [0, 0]
        };
        *at = w;
    }

    /// Decides one attempt (one token) at `ts_ms` for `shop`; an instant out of
    /// [`timestamp_in_range`] is not decided (false).
    pub fn attempt(&mut self, ts_ms: i64, shop: &[u8]) -> bool {
        if !timestamp_in_range(ts_ms) {
            return false;
        }
        let now = ts_ms * 1000;
        let static_hot = self.common.hot_shops.contains(shop);
        let st = match self.shops.get_mut(shop) {
            Some(s) => s,
            None => self.shops.entry(shop.to_vec()).or_default(),
        };
        st.counts.attempts += 1;
        self.total.attempts += 1;
        let sec = self.seconds.entry(ts_ms.div_euclid(1000)).or_default();
        sec.attempts += 1;
        let (admitted, hot, call_at) = match &self.scenario.limits {
            None => (true, static_hot, now),
            Some(set) => {
                let auto = self.common.auto_hot.as_ref();
                let mut stored = StoredState {
                    buckets: [self.global, self.lane, st.bucket],
                    mark_ttl_ms: st
                        .mark_until_us
                        .filter(|&u| u > now)
                        .map(|u| (u - now) / 1000),
                    windows: Default::default(),
                    adapt: None,
                };
                if let Some(a) = auto {
                    let w = auto_hot_window(now, a.window.as_micros() as i64);
                    Self::shift(&mut self.window, &mut self.all, w);
                    Self::shift(&mut st.window, &mut st.mine, w);
                    stored.windows = [
                        WindowCounts {
                            mine: st.mine[0],
                            all: self.all[0],
                        },
                        WindowCounts {
                            mine: st.mine[1],
                            all: self.all[1],
                        },
                    ];
                }
                let (reply, next) = step(
                    set,
                    &stored,
                    &StepInput {
                        static_hot,
                        auto_hot: auto,
                        max_wait_us: self.common.max_wait_us,
                        ..StepInput::new(now, 1)
                    },
                );
                [self.global, self.lane, st.bucket] = next.buckets;
                if auto.is_some() && reply.reason.is_none() {
                    st.mine[0] = next.windows[0].mine;
                    self.all[0] = next.windows[0].all;
                }
                if reply.became_hot {
                    let ttl_ms = next.mark_ttl_ms.unwrap_or(0);
                    st.mark_until_us = Some(now + ttl_ms * 1000);
                    self.marked.insert(shop.to_vec());
                }
                match reply.reason {
                    Some(lane) => {
                        st.counts.denied[lane as usize] += 1;
                        self.total.denied[lane as usize] += 1;
                        (false, reply.hot, now)
                    }
                    None => {
                        let wait = reservation_wait_us(set, &reply);
                        if wait > 0 {
                            st.counts.waited += 1;
                            self.total.waited += 1;
                            self.waits.add(wait as f64 / 1000.0);
                            self.max_wait_us = self.max_wait_us.max(wait);
                        }
                        (true, reply.hot, now + wait)
                    }
                }
            }
        };
        if !admitted {
            sec.denied += 1;
            return true;
        }
        st.counts.admitted += 1;
        self.total.admitted += 1;
        sec.admitted += 1;
        if hot {
            st.counts.admitted_hot += 1;
            self.total.admitted_hot += 1;
            sec.admitted_hot += 1;
        }
        // The provider's own limit, on the admitted call as it is made (after a
        // reservation's wait): the same bucket arithmetic, one lane.
        if let Some(p) = self.common.provider {
            let set = BucketSet {
                global: p,
                hot_lane: None,
                hot_shop: None,
            };
            let stored = StoredState {
                buckets: [self.provider, None, None],
                ..Default::default()
            };
            let (reply, next) = step(&set, &stored, &StepInput::new(call_at, 1));
            if reply.reason.is_some() {
                st.counts.provider_429 += 1;
                self.total.provider_429 += 1;
                sec.provider_429 += 1;
            } else {
                self.provider = next.buckets[0];
            }
        }
        true
    }

    /// Each shop's counts, most attempts first (then by ID).
    pub fn shops(&self) -> Vec<(&[u8], &Counts)> {
        let mut v: Vec<_> = self
            .shops
            .iter()
            .map(|(k, s)| (k.as_slice(), &s.counts))
            .collect();
        v.sort_by(|a, b| b.1.attempts.cmp(&a.1.attempts).then(a.0.cmp(b.0)));
        v
    }

    /// Each shop's counts, in no order.
    pub fn shops_unordered(&self) -> impl Iterator<Item = (&[u8], &Counts)> {
        self.shops.iter().map(|(k, s)| (k.as_slice(), &s.counts))
    }

    /// `shop`'s counts (None: no attempt of it was replayed).
    pub fn shop(&self, shop: &[u8]) -> Option<&Counts> {
        self.shops.get(shop).map(|s| &s.counts)
    }

    /// The provider's limit this replay put after the limiter, if any.
    pub fn provider(&self) -> Option<&BucketSpec> {
        self.common.provider.as_ref()
    }

    /// Whether `shop` was hot at any time: listed, or marked by `auto_hot`.
    pub fn was_hot(&self, shop: &[u8]) -> bool {
        self.common.hot_shops.contains(shop) || self.marked.contains(shop)
    }

    /// The most calls admitted in one second, and that second (Unix s).
    pub fn peak_admitted(&self) -> (u64, Option<i64>) {
        self.seconds.iter().fold((0, None), |(best, at), (&s, c)| {
            if c.admitted > best {
                (c.admitted, Some(s))
            } else {
                (best, at)
            }
        })
    }

    /// Calls admitted per second over `[start_ms, end_ms)` (whole seconds).
    pub fn admitted_rate(&self, start_ms: i64, end_ms: i64) -> f64 {
        let (a, b) = (start_ms.div_euclid(1000), (end_ms - 1).div_euclid(1000));
        let n: u64 = self.seconds.range(a..=b).map(|(_, c)| c.admitted).sum();
        n as f64 / ((b - a + 1).max(1)) as f64
    }
}

/// Attempts from several sources (files) in time order: each source in the order it was
/// written, the sources merged, with up to `tolerance_ms` of disorder inside a source put
/// right (workers write their events in batches at the end of a request). An attempt
/// later than that is decided when it comes (counted in `late`).
pub struct Merge {
    tolerance_ms: i64,
    heap: BinaryHeap<Reverse<(i64, u64, Vec<u8>)>>,
    seq: u64,
    /// The newest attempt decided.
    released: i64,
    pub late: u64,
}

impl Merge {
    pub fn new(tolerance_ms: i64) -> Self {
        Self {
            tolerance_ms,
            heap: BinaryHeap::new(),
            seq: 0,
            released: i64::MIN,
            late: 0,
        }
    }

    pub fn push(&mut self, a: Attempt) {
        if a.ts_ms < self.released {
            self.late += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse((a.ts_ms, self.seq, a.shop)));
    }

    /// Attempts no source can still precede: those at least `tolerance_ms` older than
    /// `frontier` (the oldest newest timestamp of the sources still being read), or all
    /// when `frontier` is `None` (every source read).
    pub fn release(&mut self, frontier: Option<i64>, mut f: impl FnMut(i64, &[u8])) {
        let limit = frontier.map_or(i64::MAX, |t| t.saturating_sub(self.tolerance_ms));
        while let Some(Reverse((ts, _, _))) = self.heap.peek() {
            if *ts > limit {
                break;
            }
            let Reverse((ts, _, shop)) = self.heap.pop().expect("peeked");
            self.released = self.released.max(ts);
            f(ts, &shop);
        }
    }

    pub fn pending(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(limits: &str, common: Common) -> Sim {
        Sim::new(parse_limits(limits, 0).unwrap(), common)
    }

    #[test]
    fn limits_are_parsed_and_refused_with_the_bucket_named() {
        let s = parse_limits("big: global=100/50 hot_lane=80/40,hot_shop=30/15", 0).unwrap();
        assert_eq!(s.name, "big");
        let set = s.limits.unwrap();
        assert_eq!(set.global.capacity(), 100);
        assert_eq!(set.hot_lane.unwrap().capacity(), 80);
        assert_eq!(set.hot_shop.unwrap().refill_per_second(), 15.0);
        assert_eq!(parse_limits("global=1/1", 1).unwrap().name, "limits2");
        for (bad, says) in [
            ("hot_lane=1/1", "no global"),
            ("global=0/1", "global.capacity"),
            ("global=10/x", "global.refill_per_second"),
            ("global=10", "not CAPACITY/RATE"),
            ("lane=10/1 global=1/1", "not a bucket"),
            ("global=1/1 global=2/2", "twice"),
        ] {
            let e = parse_limits(bad, 0).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(parse_provider("50/x").unwrap_err().contains("rate"));
        let g = BucketSpec::new("global", 100, 100.0).unwrap();
        assert_eq!(parse_auto_hot("", &g).unwrap().share, 0.3);
        assert_eq!(
            parse_auto_hot("share=0.5,window_seconds=5", &g)
                .unwrap()
                .share,
            0.5
        );
        assert!(parse_auto_hot("share=2", &g)
            .unwrap_err()
            .contains("auto_hot.share"));
        assert!(parse_auto_hot("colour=1", &g)
            .unwrap_err()
            .contains("auto_hot.colour"));
    }

    /// A burst at one instant: the global bucket's capacity admitted, the rest denied by
    /// global; a listed hot shop stops at its own bucket first.
    #[test]
    fn a_burst_is_admitted_up_to_the_capacity_of_the_buckets_that_apply() {
        let mut s = sim("global=10/10", Common::default());
        for _ in 0..15 {
            s.attempt(1_000, b"a");
        }
        assert_eq!((s.total.admitted, s.total.denied), (10, [5, 0, 0]));
        let common = Common {
            hot_shops: [b"h".to_vec()].into_iter().collect(),
            ..Default::default()
        };
        let mut s = sim("global=10/10 hot_lane=8/8 hot_shop=4/4", common);
        for _ in 0..6 {
            s.attempt(1_000, b"h");
        }
        for _ in 0..8 {
            s.attempt(1_000, b"o");
        }
        let shops: HashMap<_, _> = s.shops().into_iter().collect();
        assert_eq!(shops[&b"h"[..]].admitted, 4);
        assert_eq!(shops[&b"h"[..]].denied, [0, 0, 2]);
        assert_eq!(shops[&b"h"[..]].admitted_hot, 4);
        // The hot shop took 4 of global's 10: 6 left for the others.
        assert_eq!(shops[&b"o"[..]].admitted, 6);
        assert_eq!(shops[&b"o"[..]].denied, [2, 0, 0]);
    }

    /// Refill: one call every 50 ms at 10/s from an empty bucket admits every other call.
    #[test]
    fn the_buckets_refill_at_their_rate_on_the_recorded_clock() {
        let mut s = sim("global=1/10", Common::default());
        for i in 0..100 {
            s.attempt(1_000 + i * 50, b"a");
        }
        assert_eq!(s.total.admitted, 50);
        assert_eq!(s.peak_admitted().0, 10);
        assert_eq!(s.admitted_rate(1_000, 6_000), 10.0);
    }

    /// Without limits every attempt is admitted; the provider's bucket predicts the 429s.
    #[test]
    fn the_provider_answers_429_past_its_own_bucket() {
        let scenario = Scenario {
            name: "none".into(),
            text: String::new(),
            limits: None,
        };
        let common = Common {
            provider: Some(parse_provider("5/5").unwrap()),
            ..Default::default()
        };
        let mut s = Sim::new(scenario, common);
        for i in 0..40 {
            // 20/s for 1.95 s against 5/s with a burst of 5: 5, then one per 200 ms (9).
            s.attempt(10_000 + i * 50, b"a");
        }
        assert_eq!(s.total.admitted, 40);
        assert_eq!(s.total.provider_429, 40 - 14);
    }

    /// `auto_hot`: a shop that takes most of the global bucket becomes hot and then finds
    /// the hot buckets' room only.
    #[test]
    fn auto_hot_marks_the_flooding_shop_and_the_hot_buckets_then_apply() {
        let set = BucketSet {
            global: BucketSpec::new("global", 100, 100.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 10, 10.0).unwrap()),
        };
        let auto = parse_auto_hot("window_seconds=1,share=0.5,min_tokens=20", &set.global).unwrap();
        let common = Common {
            auto_hot: Some(auto),
            ..Default::default()
        };
        let scenario = Scenario {
            name: "auto".into(),
            text: String::new(),
            limits: Some(set),
        };
        let mut s = Sim::new(scenario, common);
        // 10 s: the flooder at 200/s, two ordinary shops at 5/s each.
        for ms in (0..10_000).step_by(5) {
            s.attempt(1_000_000 + ms, b"flood");
            if ms % 200 == 0 {
                s.attempt(1_000_000 + ms, b"x");
                s.attempt(1_000_000 + ms, b"y");
            }
        }
        assert!(s.was_hot(b"flood") && !s.was_hot(b"x"));
        let shops: HashMap<_, _> = s.shops().into_iter().collect();
        let f = shops[&b"flood"[..]];
        // Hot: at most the hot shop bucket's 10/s (+ its capacity, + what it took before
        // it was marked); every ordinary call admitted.
        assert!(f.admitted < 10 * 10 + 10 + 100 + 40, "{f:?}");
        assert!(f.denied[2] > 0, "{f:?}");
        assert_eq!(shops[&b"x"[..]].admitted, 50);
        assert_eq!(shops[&b"y"[..]].admitted, 50);
    }

    /// A reservation waits for the tokens instead of being denied, within its bound.
    #[test]
    fn reservations_wait_instead_of_being_denied() {
        let common = Common {
            max_wait_us: 500_000,
            ..Default::default()
        };
        let mut s = sim("global=1/10", common);
        for _ in 0..5 {
            s.attempt(1_000, b"a");
        }
        // One at once, then 100 ms apart: within 500 ms, four more.
        assert_eq!(s.total.admitted, 5);
        assert_eq!(s.total.waited, 4);
        assert_eq!(s.max_wait_us, 400_000);
        for _ in 0..10 {
            s.attempt(1_000, b"a");
        }
        assert!(s.total.denied[0] > 0);
    }

    /// The merge releases in time order across sources, and puts a little disorder right.
    #[test]
    fn the_merge_puts_sources_and_disorder_in_time_order() {
        let mut m = Merge::new(100);
        let mut out = Vec::new();
        for (ts, shop) in [(1_000, "a"), (950, "b"), (1_200, "c")] {
            m.push(Attempt {
                ts_ms: ts,
                shop: shop.as_bytes().to_vec(),
            });
        }
        m.release(Some(1_200), |t, s| out.push((t, s.to_vec())));
        assert_eq!(out, vec![(950, b"b".to_vec()), (1_000, b"a".to_vec())]);
        m.push(Attempt {
            ts_ms: 900,
            shop: b"late".to_vec(),
        });
        assert_eq!(m.late, 1);
        m.release(None, |t, s| out.push((t, s.to_vec())));
        assert_eq!(out.len(), 4);
        assert_eq!(m.pending(), 0);
    }
}
