//! What an incident report needs beyond the scan, gathered in the same single pass:
//! per api the status mix over time and a latency histogram, per shop the 429s and the
//! limiter's denials, the purchase funnel and the payment channels. Memory grows with
//! apis x seconds and shops, not with events.

use std::collections::BTreeMap;

use super::record::{text, Record, EXTERNAL_API_CALL, RATE_LIMIT_DECISION};

/// Latency histogram: logarithmic buckets 5% wide from 0.01 ms, so a percentile read from
/// it is within 5% of the exact one.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    buckets: BTreeMap<u32, u64>,
    count: u64,
}

const BASE_MS: f64 = 0.01;
const GROWTH: f64 = 1.05;

impl Histogram {
    pub fn add(&mut self, ms: f64) {
        let i = if ms <= BASE_MS {
            0
        } else {
            ((ms / BASE_MS).ln() / GROWTH.ln()).ceil() as u32
        };
        *self.buckets.entry(i).or_default() += 1;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn merge(&mut self, other: Histogram) {
        for (i, n) in other.buckets {
            *self.buckets.entry(i).or_default() += n;
        }
        self.count += other.count;
    }

    /// The upper bound of the bucket holding the `p`-th percentile.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (&i, &n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Some(BASE_MS * GROWTH.powi(i as i32));
            }
        }
        None
    }
}

/// Status classes counted over time.
pub const CLASSES: [&str; 4] = ["2xx/3xx", "429", "other 4xx/5xx", "no response"];

fn class(status: i64) -> usize {
    match status {
        200..=399 => 0,
        429 => 1,
        400..=599 => 2,
        _ => 3,
    }
}

/// Report data for one time range.
#[derive(Debug, Clone, Default)]
pub struct ReportData {
    /// api -> second -> calls per status class.
    pub status_over_time: BTreeMap<String, BTreeMap<i64, [u64; 4]>>,
    pub latency: BTreeMap<String, Histogram>,
    pub calls_per_api: BTreeMap<String, u64>,
    /// shop -> 429s received.
    pub shop_429: BTreeMap<String, u64>,
    /// shop -> reason -> denied decisions.
    pub shop_denials: BTreeMap<String, BTreeMap<String, u64>>,
    /// checkout step -> events; payment channel -> paid checkouts.
    pub funnel: BTreeMap<String, u64>,
    pub channels: BTreeMap<String, u64>,
    /// The `CheckoutStep` steps that mean a checkout started and a checkout paid.
    pub steps: Steps,
}

/// The names of the two `CheckoutStep` steps the report reads (`report --steps`): the
/// funnel lists every step the events carry; these two give "checkouts started", "paid",
/// the calls per checkout and the payment channels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steps {
    /// A checkout started (default `cart`).
    pub started: String,
    /// A checkout paid, with its `payment.channel` (default `paid`).
    pub paid: String,
}

impl Default for Steps {
    fn default() -> Self {
        Self {
            started: "cart".into(),
            paid: "paid".into(),
        }
    }
}

impl Steps {
    /// `STARTED,PAID` (e.g. `cart,paid`), each a non-empty step name.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once(',') {
            Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(',') => Ok(Self {
                started: a.into(),
                paid: b.into(),
            }),
            _ => Err(format!(
                "--steps {text:?}: expected STARTED,PAID, the two CheckoutStep step names (default cart,paid)"
            )),
        }
    }
}

impl ReportData {
    /// Takes one event inside the report's range. `counts` says whether it passes the
    /// scan's filter (an ExternalApiCall of the selected apis and shops).
    pub fn add(&mut self, r: &Record<'_>, ts: i64, counts: bool) {
        match r.event_type.as_deref() {
            Some(EXTERNAL_API_CALL) if counts => {
                let api = r.api.as_ref().map_or_else(String::new, text);
                let status = r.status.unwrap_or(0);
                let second = ts.div_euclid(1000);
                self.status_over_time
                    .entry(api.clone())
                    .or_default()
                    .entry(second)
                    .or_default()[class(status)] += 1;
                if let Some(ms) = r.duration_ms() {
                    self.latency.entry(api.clone()).or_default().add(ms);
                }
                *self.calls_per_api.entry(api).or_default() += 1;
                if status == 429 {
                    if let Some(shop) = &r.shop {
                        *self.shop_429.entry(text(shop)).or_default() += 1;
                    }
                }
            }
            Some(RATE_LIMIT_DECISION) if r.denial().is_some() => {
                let shop = r.shop.as_ref().map_or_else(|| "?".into(), text);
                let mut reason: String = r.reason.as_ref().map_or_else(|| "?".into(), text);
                // Shadow mode: would have been denied, let through (see the scan).
                if r.denial() == Some(true) {
                    reason.push_str(" (shadow)");
                }
                *self
                    .shop_denials
                    .entry(shop)
                    .or_default()
                    .entry(reason)
                    .or_default() += 1;
            }
            Some(b"CheckoutStep") => {
                if let Some(step) = &r.step {
                    let step = text(step);
                    if step == self.steps.paid {
                        let channel = r.channel.as_ref().map_or_else(|| "(none)".into(), text);
                        *self.channels.entry(channel).or_default() += 1;
                    }
                    *self.funnel.entry(step).or_default() += 1;
                }
            }
            _ => {}
        }
    }

    /// Adds the data of another part of the same input.
    pub fn merge(&mut self, other: ReportData) {
        fn add(a: &mut BTreeMap<String, u64>, b: BTreeMap<String, u64>) {
            for (k, v) in b {
                *a.entry(k).or_default() += v;
            }
        }
        for (api, secs) in other.status_over_time {
            let mine = self.status_over_time.entry(api).or_default();
            for (s, c) in secs {
                let m = mine.entry(s).or_default();
                for i in 0..4 {
                    m[i] += c[i];
                }
            }
        }
        for (api, h) in other.latency {
            self.latency.entry(api).or_default().merge(h);
        }
        add(&mut self.calls_per_api, other.calls_per_api);
        add(&mut self.shop_429, other.shop_429);
        for (shop, reasons) in other.shop_denials {
            add(self.shop_denials.entry(shop).or_default(), reasons);
        }
        add(&mut self.funnel, other.funnel);
        add(&mut self.channels, other.channels);
    }

    /// Checkouts started (the funnel's first step, `cart` unless `--steps` says), when
    /// the events carry steps.
    pub fn checkouts(&self) -> Option<u64> {
        self.funnel.get(&self.steps.started).copied()
    }

    /// Checkouts paid (`paid` unless `--steps` says).
    pub fn paid(&self) -> Option<u64> {
        self.funnel.get(&self.steps.paid).copied()
    }

    /// No data, the same step names: for another part of the same input.
    pub fn empty_like(&self) -> Self {
        Self {
            steps: self.steps.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_percentiles_are_within_five_percent() {
        let mut h = Histogram::default();
        for i in 1..=1000 {
            h.add(i as f64);
        }
        for (p, exact) in [(50.0, 500.0), (95.0, 950.0), (99.0, 990.0)] {
            let got = h.percentile(p).unwrap();
            assert!(
                got >= exact && got <= exact * 1.05,
                "p{p}: {got} vs {exact}"
            );
        }
        assert_eq!(Histogram::default().percentile(50.0), None);
    }
}
