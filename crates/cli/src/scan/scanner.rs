use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::record::{parse_line, text, Record, EXTERNAL_API_CALL, RATE_LIMIT_DECISION};
use super::report::ReportData;

/// A fast hash for the scan's integer and short string keys (FxHash's multiply-rotate):
/// the maps are updated once per event, and SipHash would dominate the scan.
#[derive(Default, Clone, Copy)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn write_i64(&mut self, n: i64) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// Which events count.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    /// Event types whose rate is scanned (default: ExternalApiCall).
    pub event_types: Vec<String>,
    pub apis: Vec<String>,
    pub shops: Vec<String>,
    /// Unix ms, inclusive.
    pub from_ms: Option<i64>,
    /// Unix ms, exclusive.
    pub to_ms: Option<i64>,
}

impl Filter {
    fn time_ok(&self, ts: i64) -> bool {
        self.from_ms.is_none_or(|f| ts >= f) && self.to_ms.is_none_or(|t| ts < t)
    }

    fn type_ok(&self, r: &Record<'_>) -> bool {
        let t = r.event_type.as_deref().unwrap_or(b"");
        if self.event_types.is_empty() {
            t == EXTERNAL_API_CALL
        } else {
            self.event_types.iter().any(|x| x.as_bytes() == t)
        }
    }

    fn api_ok(&self, r: &Record<'_>) -> bool {
        self.apis.is_empty()
            || r.api
                .as_deref()
                .is_some_and(|a| self.apis.iter().any(|x| x.as_bytes() == a))
    }

    fn shop_ok(&self, r: &Record<'_>) -> bool {
        self.shops.is_empty()
            || r.shop
                .as_deref()
                .is_some_and(|s| self.shops.iter().any(|x| x.as_bytes() == s))
    }

    fn counts(&self, r: &Record<'_>) -> bool {
        self.type_ok(r) && self.api_ok(r) && self.shop_ok(r)
    }
}

/// What each filter of a report matched inside its time range, one by one: a filter that
/// matched nothing (a typo) is named, with what is there. Gathered only for a report.
#[derive(Debug, Default)]
pub struct Matches {
    /// Events of the event types asked for (`--event-type`, default ExternalApiCall).
    pub types: u64,
    /// Of those, the events of the apis asked for (`--api`).
    pub apis: u64,
    /// Events of any type of the shops asked for (`--shop`).
    pub shops: u64,
    /// With `--event-type`, the event types in the range (at most [`LISTED_APIS`]).
    pub types_seen: std::collections::BTreeSet<Vec<u8>>,
    /// With `--shop`, events per shop in the range (at most [`COUNTED_SHOPS`] shops).
    pub shops_seen: HashMap<Vec<u8>, u64>,
}

/// How many shops `Matches::shops_seen` counts (the busiest are named).
pub const COUNTED_SHOPS: usize = 100_000;

impl Matches {
    fn add(&mut self, f: &Filter, r: &Record<'_>) {
        let type_ok = f.type_ok(r);
        self.types += u64::from(type_ok);
        self.apis += u64::from(type_ok && f.api_ok(r));
        if !f.event_types.is_empty() && self.types_seen.len() < LISTED_APIS {
            let t = r.event_type.as_deref().unwrap_or(b"");
            if !self.types_seen.contains(t) {
                self.types_seen.insert(t.to_vec());
            }
        }
        if !f.shops.is_empty() {
            self.shops += u64::from(f.shop_ok(r));
            let shop = r.shop.as_deref().unwrap_or(b"");
            if let Some(n) = self.shops_seen.get_mut(shop) {
                *n += 1;
            } else if self.shops_seen.len() < COUNTED_SHOPS {
                self.shops_seen.insert(shop.to_vec(), 1);
            }
        }
    }

    fn merge(&mut self, other: Matches) {
        self.types += other.types;
        self.apis += other.apis;
        self.shops += other.shops;
        for t in other.types_seen {
            if self.types_seen.len() >= LISTED_APIS {
                break;
            }
            self.types_seen.insert(t);
        }
        for (shop, n) in other.shops_seen {
            if let Some(mine) = self.shops_seen.get_mut(&shop) {
                *mine += n;
            } else if self.shops_seen.len() < COUNTED_SHOPS {
                self.shops_seen.insert(shop, n);
            }
        }
    }

    /// The event types seen, as text: `CheckoutStep, ExternalApiCall`.
    pub fn types_text(&self) -> String {
        if self.types_seen.is_empty() {
            return "none".into();
        }
        let mut t = self
            .types_seen
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        if self.types_seen.len() >= LISTED_APIS {
            t.push_str(", ...");
        }
        t
    }

    /// The `n` busiest shops seen (most events first, then by name), as text, with how
    /// many there are: `a, b, c (12 in all)`.
    pub fn shops_text(&self, n: usize) -> String {
        let mut all: Vec<(&Vec<u8>, u64)> = self.shops_seen.iter().map(|(s, &c)| (s, c)).collect();
        all.sort_unstable_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
        let names = all
            .iter()
            .take(n)
            .map(|(s, _)| {
                if s.is_empty() {
                    "(no shop)".to_string()
                } else {
                    String::from_utf8_lossy(s).into_owned()
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let total = if all.len() >= COUNTED_SHOPS {
            format!("at least {COUNTED_SHOPS}")
        } else {
            all.len().to_string()
        };
        format!("{names} ({total} in all)")
    }
}

/// Bucket sizes and thresholds of the two passes (thresholds in events per second).
#[derive(Debug, Clone)]
pub struct ScanConfig {
    pub coarse_ms: i64,
    pub coarse_threshold: f64,
    pub fine_ms: i64,
    pub fine_threshold: f64,
}

impl Default for ScanConfig {
    fn default() -> Self {
        Self {
            coarse_ms: 300_000,
            coarse_threshold: 5.0,
            fine_ms: 1000,
            fine_threshold: 50.0,
        }
    }
}

impl ScanConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.fine_ms <= 0 || self.coarse_ms <= 0 {
            return Err("bucket sizes must be positive".into());
        }
        if self.coarse_ms % self.fine_ms != 0 {
            return Err(format!(
                "the coarse bucket ({} ms) must be a whole number of fine buckets ({} ms)",
                self.coarse_ms, self.fine_ms
            ));
        }
        let fine_ok = self.fine_threshold.is_finite() && self.fine_threshold > 0.0;
        let coarse_ok = self.coarse_threshold.is_finite() && self.coarse_threshold >= 0.0;
        if !(fine_ok && coarse_ok) {
            return Err(format!(
                "thresholds must be numbers, the fine one above 0 and the coarse one at least 0 (got {} and {})",
                self.fine_threshold, self.coarse_threshold
            ));
        }
        Ok(())
    }

    /// The coarse threshold at or below which the two passes find every window the
    /// brute-force fine scan finds: a bucket holding one hot fine bucket averages at least
    /// this much.
    pub fn complete_coarse_threshold(&self) -> f64 {
        self.fine_threshold * self.fine_ms as f64 / self.coarse_ms as f64
    }
}

/// What one fine bucket saw.
#[derive(Debug, Clone, Default, PartialEq)]
struct Fine {
    calls: u64,
    status: BTreeMap<i64, u64>,
    /// Denied or unavailable decisions by (reason, shop).
    denials: BTreeMap<(String, String), u64>,
}

/// A line that could not be used, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine {
    pub source: String,
    pub line: u64,
    pub what: String,
}

/// Streaming state of a scan: per fine bucket, per day and api, and the problems met.
#[derive(Debug, Default)]
pub struct Accumulator {
    filter: Filter,
    fine_ms: i64,
    fine: FastMap<i64, Fine>,
    /// Per-second counts, overall and per api, for the daily peaks.
    per_second: FastMap<i64, u64>,
    per_second_api: FastMap<Vec<u8>, FastMap<i64, u64>>,
    pub events: u64,
    pub counted: u64,
    pub malformed: u64,
    pub missing_timestamp: u64,
    pub out_of_order: u64,
    pub bad_lines: Vec<BadLine>,
    /// Report data, gathered only when asked for.
    pub report: Option<ReportData>,
    /// The oldest and newest timestamps read, before the time filter: what a window that
    /// matched nothing is told.
    pub first_ms: Option<i64>,
    pub last_ms: Option<i64>,
    /// Events inside the time filter.
    pub in_time: u64,
    /// With an api filter, the apis of the events read (at most [`LISTED_APIS`]): what an
    /// api that matched nothing is told.
    pub apis_seen: std::collections::BTreeSet<Vec<u8>>,
    /// With a report, what each filter matched in the time range.
    pub matches: Matches,
    /// The newest timestamp of the current source, and that source.
    last_ts: Option<i64>,
    last_source: String,
}

/// Events written by several workers at the end of their requests arrive a little out of
/// order; only an event older than this behind the newest one is reported.
pub const DISORDER_TOLERANCE_MS: i64 = 10_000;

/// The longest line a scan reads. A longer one (the NUL bytes a crash can leave in a file,
/// a binary pasted by mistake) is counted as malformed, listed with its file and line, and
/// skipped by the reader without being held in memory.
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// How many apis `apis_seen` keeps.
pub const LISTED_APIS: usize = 50;

/// How many bad lines are listed one by one (all are counted).
const LISTED_BAD_LINES: usize = 50;

impl Accumulator {
    pub fn new(filter: Filter, fine_ms: i64) -> Self {
        Self {
            filter,
            fine_ms,
            ..Default::default()
        }
    }

    fn bad(&mut self, source: &str, line: u64, what: String) {
        if self.bad_lines.len() < LISTED_BAD_LINES {
            self.bad_lines.push(BadLine {
                source: source.to_string(),
                line,
                what,
            });
        }
    }

    /// Counts a line longer than `MAX_LINE_BYTES` (of `bytes` bytes, without its newline)
    /// that the reader skipped.
    pub fn too_long(&mut self, source: &str, line_no: u64, bytes: u64) {
        self.events += 1;
        self.malformed += 1;
        self.bad(
            source,
            line_no,
            format!("line of {bytes} bytes, longer than the cap of {MAX_LINE_BYTES}: skipped"),
        );
    }

    /// Takes one line of input (without its newline). `line_no` is 1-based.
    pub fn line(&mut self, source: &str, line_no: u64, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.events += 1;
        let r = match parse_line(line) {
            Ok(r) => r,
            Err(e) => {
                self.malformed += 1;
                self.bad(
                    source,
                    line_no,
                    format!("{} at column {}", e.what, e.column),
                );
                return;
            }
        };
        let Some(ts) = r.timestamp_ms else {
            self.missing_timestamp += 1;
            self.bad(source, line_no, "no numeric timestamp".into());
            return;
        };
        if self.last_source != source {
            self.last_source = source.to_string();
            self.last_ts = None;
        }
        if self
            .last_ts
            .is_some_and(|last| ts < last.saturating_sub(DISORDER_TOLERANCE_MS))
        {
            // Counted where it belongs; reported so nobody mistakes a merge of files or a
            // clock step for a gap.
            self.out_of_order += 1;
            let last = self.last_ts.unwrap_or(ts);
            self.bad(source, line_no, format!("out of order: {ts} after {last}"));
        }
        self.last_ts = Some(self.last_ts.map_or(ts, |l| l.max(ts)));
        self.first_ms = Some(self.first_ms.map_or(ts, |f| f.min(ts)));
        self.last_ms = Some(self.last_ms.map_or(ts, |l| l.max(ts)));
        if !self.filter.apis.is_empty() && self.apis_seen.len() < LISTED_APIS {
            if let Some(api) = r.api.as_deref() {
                if !self.apis_seen.contains(api) {
                    self.apis_seen.insert(api.to_vec());
                }
            }
        }
        if !self.filter.time_ok(ts) {
            return;
        }
        self.in_time += 1;
        let counts = self.filter.counts(&r);
        if let Some(report) = &mut self.report {
            report.add(&r, ts, counts);
            self.matches.add(&self.filter, &r);
        }
        let bucket = ts.div_euclid(self.fine_ms);
        let denial = r.denial();
        if r.event_type.as_deref() == Some(RATE_LIMIT_DECISION)
            && denial.is_some()
            && self.filter.shop_ok(&r)
        {
            let f = self.fine.entry(bucket).or_default();
            // A shadow decision's reason is shown as `global (shadow)`: counted apart, no
            // buyer was refused.
            let mut reason = r.reason.as_ref().map_or_else(|| "?".to_string(), text);
            if denial == Some(true) {
                reason.push_str(" (shadow)");
            }
            let key = (
                reason,
                r.shop.as_ref().map_or_else(|| "?".to_string(), text),
            );
            *f.denials.entry(key).or_default() += 1;
        }
        if !counts {
            return;
        }
        self.counted += 1;
        let f = self.fine.entry(bucket).or_default();
        f.calls += 1;
        *f.status.entry(r.status.unwrap_or(0)).or_default() += 1;
        let api = r.api.as_deref().unwrap_or(b"");
        let second = ts.div_euclid(1000);
        *self.per_second.entry(second).or_default() += 1;
        let per_api = match self.per_second_api.get_mut(api) {
            Some(m) => m,
            None => self.per_second_api.entry(api.to_vec()).or_default(),
        };
        *per_api.entry(second).or_default() += 1;
    }

    /// A new accumulator with the same filter and bucket size (and report, if any), for
    /// another part of the input read in parallel.
    pub fn sibling(&self) -> Self {
        let mut a = Self::new(self.filter.clone(), self.fine_ms);
        a.report = self.report.as_ref().map(ReportData::empty_like);
        a
    }

    /// Adds what `other` read from a later part of the same input, whose line numbers
    /// start after `line_offset` lines.
    pub fn merge(&mut self, other: Accumulator, line_offset: u64) {
        for (b, f) in other.fine {
            let mine = self.fine.entry(b).or_default();
            mine.calls += f.calls;
            for (k, v) in f.status {
                *mine.status.entry(k).or_default() += v;
            }
            for (k, v) in f.denials {
                *mine.denials.entry(k).or_default() += v;
            }
        }
        for (s, n) in other.per_second {
            *self.per_second.entry(s).or_default() += n;
        }
        for (api, secs) in other.per_second_api {
            let mine = self.per_second_api.entry(api).or_default();
            for (s, n) in secs {
                *mine.entry(s).or_default() += n;
            }
        }
        self.events += other.events;
        self.counted += other.counted;
        self.malformed += other.malformed;
        self.missing_timestamp += other.missing_timestamp;
        self.out_of_order += other.out_of_order;
        for mut b in other.bad_lines {
            if self.bad_lines.len() >= LISTED_BAD_LINES {
                break;
            }
            b.line += line_offset;
            self.bad_lines.push(b);
        }
        if let (Some(mine), Some(theirs)) = (&mut self.report, other.report) {
            mine.merge(theirs);
        }
        self.last_ts = self.last_ts.max(other.last_ts);
        self.first_ms = match (self.first_ms, other.first_ms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.last_ms = self.last_ms.max(other.last_ms);
        self.in_time += other.in_time;
        self.matches.merge(other.matches);
        for api in other.apis_seen {
            if self.apis_seen.len() >= LISTED_APIS {
                break;
            }
            self.apis_seen.insert(api);
        }
    }

    /// The apis seen (see `apis_seen`), as text: `payment, zoneA` or `none`.
    pub fn apis_text(&self) -> String {
        if self.apis_seen.is_empty() {
            return "none (no event has an api)".into();
        }
        let mut t = self
            .apis_seen
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect::<Vec<_>>()
            .join(", ");
        if self.apis_seen.len() >= LISTED_APIS {
            t.push_str(", ...");
        }
        t
    }

    /// The fine buckets' call counts, in time order.
    pub fn fine_counts(&self) -> BTreeMap<i64, u64> {
        self.fine.iter().map(|(&k, f)| (k, f.calls)).collect()
    }

    /// The two-stage scan over what was read.
    pub fn scan(&self, cfg: &ScanConfig) -> ScanResult {
        let per_coarse = cfg.coarse_ms / cfg.fine_ms;
        let mut coarse: BTreeMap<i64, u64> = BTreeMap::new();
        for (&b, f) in &self.fine {
            *coarse.entry(b.div_euclid(per_coarse)).or_default() += f.calls;
        }
        let coarse_secs = cfg.coarse_ms as f64 / 1000.0;
        let candidates: Vec<i64> = coarse
            .iter()
            .filter(|(_, &n)| n as f64 / coarse_secs >= cfg.coarse_threshold && n > 0)
            .map(|(&c, _)| c)
            .collect();
        let fine_secs = cfg.fine_ms as f64 / 1000.0;
        let mut hot = Vec::new();
        for &c in &candidates {
            // The coarse bucket's fine ones, within the buckets an i64 timestamp has (with
            // 1 ms fine buckets the coarse one of i64::MIN starts before it).
            let first = i128::from(c) * i128::from(per_coarse);
            let clamp = |b: i128| b.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
            let (lo, hi) = (clamp(first), clamp(first + i128::from(per_coarse) - 1));
            for b in lo..=hi {
                if let Some(f) = self.fine.get(&b) {
                    if f.calls as f64 / fine_secs >= cfg.fine_threshold {
                        hot.push(b);
                    }
                }
            }
        }
        ScanResult {
            windows: self.windows(&hot, cfg),
            coarse_buckets: coarse.len() as u64,
            candidates: candidates.len() as u64,
            fine_examined: candidates.len() as u64 * per_coarse as u64,
        }
    }

    /// Merges sorted hot fine buckets into windows with their statistics. A bucket's
    /// bounds are clamped to the timestamps there are: the bucket of i64::MIN starts at
    /// it (a bucket of 1 s would start 808 ms before), the last one ends at i64::MAX.
    fn windows(&self, hot: &[i64], cfg: &ScanConfig) -> Vec<Window> {
        let fine_secs = cfg.fine_ms as f64 / 1000.0;
        let mut out: Vec<Window> = Vec::new();
        for &b in hot {
            let f = &self.fine[&b];
            let rps = f.calls as f64 / fine_secs;
            let (start, end) = bucket_bounds(b, cfg.fine_ms);
            match out.last_mut() {
                Some(w) if w.end_ms == start => {
                    w.end_ms = end;
                    if rps > w.peak_rps {
                        w.peak_rps = rps;
                        w.peak_at_ms = start;
                    }
                    w.add(f);
                }
                _ => {
                    let mut w = Window {
                        start_ms: start,
                        end_ms: end,
                        peak_rps: rps,
                        peak_at_ms: start,
                        ..Default::default()
                    };
                    w.add(f);
                    out.push(w);
                }
            }
        }
        out
    }

    /// Peak rate per UTC day, overall (api "") and per api, in events per second.
    pub fn peaks(&self) -> Vec<Peak> {
        let mut out = Vec::new();
        let all = std::iter::once((String::new(), &self.per_second));
        let apis = self
            .per_second_api
            .iter()
            .map(|(a, m)| (String::from_utf8_lossy(a).into_owned(), m));
        for (api, secs) in all.chain(apis) {
            // day -> (peak, its second, total); the earliest second wins a tie.
            let mut days: BTreeMap<i64, (u64, i64, u64)> = BTreeMap::new();
            for (&sec, &n) in secs {
                let d = days
                    .entry(sec.div_euclid(86_400))
                    .or_insert((0, i64::MAX, 0));
                if n > d.0 || (n == d.0 && sec < d.1) {
                    d.0 = n;
                    d.1 = sec;
                }
                d.2 += n;
            }
            out.extend(days.into_iter().map(|(day, (peak, sec, total))| Peak {
                day,
                api: api.clone(),
                peak_rps: peak,
                at_ms: bucket_bounds(sec, 1000).0,
                total,
            }));
        }
        out.sort_by(|a, b| (a.day, &a.api).cmp(&(b.day, &b.api)));
        out
    }
}

/// The first and the end (exclusive) millisecond of bucket `b` of `size_ms`, clamped to
/// i64: the bucket of i64::MIN starts at i64::MIN, the last bucket ends at i64::MAX
/// (saturating, not wrapping into the other end of time).
pub fn bucket_bounds(b: i64, size_ms: i64) -> (i64, i64) {
    (
        b.saturating_mul(size_ms),
        b.saturating_add(1).saturating_mul(size_ms),
    )
}

/// One high-load window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Window {
    pub start_ms: i64,
    /// Exclusive.
    pub end_ms: i64,
    pub peak_rps: f64,
    pub peak_at_ms: i64,
    pub calls: u64,
    pub status: BTreeMap<i64, u64>,
    pub denials: BTreeMap<(String, String), u64>,
}

impl Window {
    fn add(&mut self, f: &Fine) {
        self.calls += f.calls;
        for (k, v) in &f.status {
            *self.status.entry(*k).or_default() += v;
        }
        for (k, v) in &f.denials {
            *self.denials.entry(k.clone()).or_default() += v;
        }
    }
}

/// The scan's windows and how much work each pass did.
#[derive(Debug, Clone, PartialEq)]
pub struct ScanResult {
    pub windows: Vec<Window>,
    pub coarse_buckets: u64,
    pub candidates: u64,
    /// Fine buckets examined in the fine pass (inside the candidates).
    pub fine_examined: u64,
}

/// One day's peak, overall (`api` empty) or for one api.
#[derive(Debug, Clone, PartialEq)]
pub struct Peak {
    /// Days since the Unix epoch (UTC).
    pub day: i64,
    pub api: String,
    pub peak_rps: u64,
    pub at_ms: i64,
    pub total: u64,
}

/// The reference: every fine bucket of the input checked against the fine threshold.
pub fn brute_force_windows(acc: &Accumulator, cfg: &ScanConfig) -> Vec<Window> {
    let fine_secs = cfg.fine_ms as f64 / 1000.0;
    let hot: Vec<i64> = acc
        .fine_counts()
        .into_iter()
        .filter(|&(_, n)| n as f64 / fine_secs >= cfg.fine_threshold)
        .map(|(b, _)| b)
        .collect();
    acc.windows(&hot, cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(ts: i64, api: &str, status: i64) -> String {
        format!(
            r#"{{"eventType":"ExternalApiCall","timestamp":{ts},"api":"{api}","http.response.status_code":{status},"shop.id":"s1"}}"#
        )
    }

    use crate::scan::synthetic::Rng;

    /// A generated stretch of time: a low background, spikes of various lengths (some
    /// shorter than a second, some straddling a 5-minute boundary), in time order.
    fn generated(seed: u64, seconds: i64) -> Vec<String> {
        let mut rng = Rng::new(seed);
        let t0: i64 = 1_796_000_000_000 - 1_796_000_000_000 % 300_000;
        let mut spikes: Vec<(i64, i64, u64)> = Vec::new(); // (start ms, length ms, per second)
        for _ in 0..8 {
            let start = t0 + rng.below(seconds as u64 * 1000) as i64;
            let len = [300, 800, 1000, 2500, 7000][rng.below(5) as usize];
            spikes.push((start, len, 60 + rng.below(200)));
        }
        // One spike across a 5-minute boundary, starting 1.5 s before it.
        spikes.push((t0 + 600_000 - 1500, 3000, 120));
        let mut events = Vec::new();
        for s in 0..seconds {
            let base = rng.below(4);
            for _ in 0..base {
                events.push(t0 + s * 1000 + rng.below(1000) as i64);
            }
        }
        for (start, len, rate) in spikes {
            let n = rate * len as u64 / 1000;
            for _ in 0..n {
                events.push(start + rng.below(len as u64) as i64);
            }
        }
        events.sort();
        events
            .into_iter()
            .map(|ts| {
                line(
                    ts,
                    if ts % 3 == 0 { "zoneA" } else { "payment" },
                    if ts % 7 == 0 { 429 } else { 200 },
                )
            })
            .collect()
    }

    #[test]
    fn two_stage_scan_matches_brute_force_when_the_coarse_threshold_is_low_enough() {
        for seed in 1..=12 {
            let mut acc = Accumulator::new(Filter::default(), 1000);
            for (i, l) in generated(seed, 1800).iter().enumerate() {
                acc.line("gen", i as u64 + 1, l.as_bytes());
            }
            let mut cfg = ScanConfig {
                fine_threshold: 50.0,
                ..Default::default()
            };
            cfg.coarse_threshold = cfg.complete_coarse_threshold();
            let two = acc.scan(&cfg);
            let brute = brute_force_windows(&acc, &cfg);
            assert!(
                !brute.is_empty(),
                "seed {seed}: the generated day has spikes"
            );
            assert_eq!(two.windows, brute, "seed {seed}");
            assert!(
                two.fine_examined <= 1800 + 300,
                "examined {}",
                two.fine_examined
            );
            // A higher coarse threshold examines less and may only lose (parts of) windows.
            cfg.coarse_threshold = 3.0;
            let pruned = acc.scan(&cfg);
            assert!(pruned.fine_examined <= two.fine_examined);
            for w in &pruned.windows {
                assert!(
                    brute
                        .iter()
                        .any(|b| b.start_ms <= w.start_ms && w.end_ms <= b.end_ms),
                    "seed {seed}: {w:?} is not inside a brute-force window"
                );
            }
        }
    }

    #[test]
    fn reading_in_parts_and_merging_equals_one_pass() {
        let lines = generated(3, 900);
        let mut one = Accumulator::new(Filter::default(), 1000);
        one.report = Some(ReportData::default());
        for (i, l) in lines.iter().enumerate() {
            one.line("f", i as u64 + 1, l.as_bytes());
        }
        let mut first = one.sibling();
        let mut second = one.sibling();
        let cut = lines.len() / 3;
        for (i, l) in lines[..cut].iter().enumerate() {
            first.line("f", i as u64 + 1, l.as_bytes());
        }
        for (i, l) in lines[cut..].iter().enumerate() {
            second.line("f", i as u64 + 1, l.as_bytes());
        }
        first.merge(second, cut as u64);
        let cfg = ScanConfig {
            fine_threshold: 50.0,
            coarse_threshold: 0.1,
            ..Default::default()
        };
        assert_eq!(first.scan(&cfg), one.scan(&cfg));
        assert_eq!(first.peaks(), one.peaks());
        assert_eq!((first.events, first.counted), (one.events, one.counted));
        let (a, b) = (first.report.unwrap(), one.report.unwrap());
        assert_eq!(a.calls_per_api, b.calls_per_api);
        assert_eq!(a.status_over_time, b.status_over_time);
    }

    #[test]
    fn a_spike_across_a_coarse_boundary_is_one_window() {
        // A 5-minute boundary (1_796_000_100_000 is a multiple of 300_000).
        let t0: i64 = 1_796_000_100_000 + 300_000;
        assert_eq!(t0 % 300_000, 0);
        let mut acc = Accumulator::new(Filter::default(), 1000);
        let mut n = 0;
        for ms in (t0 - 2000..t0 + 2000).step_by(10) {
            n += 1;
            acc.line("x", n, line(ms, "payment", 200).as_bytes());
        }
        let cfg = ScanConfig {
            fine_threshold: 90.0,
            coarse_threshold: 0.3,
            ..Default::default()
        };
        let r = acc.scan(&cfg);
        assert_eq!(r.windows.len(), 1);
        assert_eq!(
            (r.windows[0].start_ms, r.windows[0].end_ms),
            (t0 - 2000, t0 + 2000)
        );
        assert_eq!(r.windows[0].calls, 400);
        assert_eq!(r.candidates, 2);
        assert_eq!(r.fine_examined, 600);
    }

    #[test]
    fn bad_input_is_counted_with_line_numbers_and_never_counted_as_calls() {
        let mut acc = Accumulator::new(Filter::default(), 1000);
        let lines = [
            line(1_000_000, "a", 200),
            "{\"eventType\":\"ExternalApiCall\",\"timestamp\":10".to_string(), // truncated
            "garbage".to_string(),
            r#"{"eventType":"ExternalApiCall","api":"a"}"#.to_string(),
            line(989_000, "a", 200), // 11 s behind: counted, reported
            line(995_000, "a", 200), // within the tolerance: counted only
            String::new(),
        ];
        for (i, l) in lines.iter().enumerate() {
            acc.line("f.jsonl", i as u64 + 1, l.as_bytes());
        }
        assert_eq!((acc.events, acc.counted), (6, 3));
        assert_eq!(
            (acc.malformed, acc.missing_timestamp, acc.out_of_order),
            (2, 1, 1)
        );
        let lines: Vec<u64> = acc.bad_lines.iter().map(|b| b.line).collect();
        assert_eq!(lines, vec![2, 3, 4, 5]);
        assert!(acc.bad_lines[0].what.contains("column"));
    }

    #[test]
    fn filters_denials_and_peaks() {
        let mut acc = Accumulator::new(
            Filter {
                apis: vec!["payment".into()],
                ..Default::default()
            },
            1000,
        );
        let t = 1_796_000_000_000;
        let mut n = 0;
        let mut feed = |acc: &mut Accumulator, s: String| {
            n += 1;
            acc.line("x", n, s.as_bytes());
        };
        for i in 0..10 {
            feed(&mut acc, line(t + i, "payment", 429));
            feed(&mut acc, line(t + i, "zoneA", 200));
        }
        feed(
            &mut acc,
            format!(
                r#"{{"eventType":"RateLimitDecision","timestamp":{t},"shop.id":"hot","reason":"hot_shop","allowed":false}}"#
            ),
        );
        feed(
            &mut acc,
            format!(
                r#"{{"eventType":"RateLimitDecision","timestamp":{t},"shop.id":"x","reason":"unavailable","allowed":true}}"#
            ),
        );
        // An in-flight denial (issue 37) is listed by its reason like a bucket's.
        feed(
            &mut acc,
            format!(
                r#"{{"eventType":"RateLimitDecision","timestamp":{t},"shop.id":"hot","reason":"in_flight_hot_shop","allowed":false}}"#
            ),
        );
        feed(
            &mut acc,
            format!(
                r#"{{"eventType":"RateLimitDecision","timestamp":{t},"shop.id":"hot","reason":"global","allowed":true,"would_allow":false,"mode":"shadow"}}"#
            ),
        );
        let cfg = ScanConfig {
            fine_threshold: 5.0,
            coarse_threshold: 0.0,
            ..Default::default()
        };
        let r = acc.scan(&cfg);
        assert_eq!(r.windows.len(), 1);
        let w = &r.windows[0];
        assert_eq!(w.calls, 10, "only the payment api counts");
        assert_eq!(w.status.get(&429), Some(&10));
        assert_eq!(w.denials.get(&("hot_shop".into(), "hot".into())), Some(&1));
        assert_eq!(
            w.denials.get(&("in_flight_hot_shop".into(), "hot".into())),
            Some(&1)
        );
        assert_eq!(
            w.denials.get(&("global (shadow)".into(), "hot".into())),
            Some(&1),
            "a shadow would-be denial, counted apart"
        );
        assert_eq!(
            w.denials.len(),
            3,
            "an allowed unavailable decision is not a denial"
        );
        let peaks = acc.peaks();
        assert_eq!(
            peaks
                .iter()
                .map(|p| (p.api.as_str(), p.peak_rps))
                .collect::<Vec<_>>(),
            vec![("", 10), ("payment", 10)]
        );
    }
}
