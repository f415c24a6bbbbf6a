//! A synthetic day of events, for tests and benchmarks: a background that follows the
//! day (quiet at night, busier in the evening), a few flash-sale spikes of various lengths
//! (some shorter than a second, one straddling a 5-minute boundary), in time order, in
//! the exact format the extension writes.

use std::io::{self, BufWriter, Write};

/// 2026-11-30 00:00:00 UTC.
pub const DAY_START_MS: i64 = 1_796_083_200_000 - 86_400_000;

/// The generator of synthetic days: `rand_xorshift` (the generator proptest uses), so a
/// generated day replays from its seed.
pub struct Rng(rand_xorshift::XorShiftRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(rand_core::SeedableRng::seed_from_u64(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        rand_core::Rng::next_u64(&mut self.0)
    }

    /// Uniform in `0..n` (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// Writes about `events` events (ExternalApiCall, plus RateLimitDecision denials during
/// spikes) to `out`.
pub fn day(events: u64, seed: u64, out: impl Write) -> io::Result<u64> {
    let mut rng = Rng::new(seed);
    let mut w = BufWriter::with_capacity(1 << 20, out);
    // A third of the events in spikes, the rest spread over the day by the hour's weight.
    let spike_events = events / 3;
    let background = events - spike_events;
    const WEIGHT: [u64; 24] = [
        2, 1, 1, 1, 1, 2, 3, 5, 7, 8, 8, 9, 10, 9, 8, 8, 9, 10, 12, 14, 14, 12, 8, 4,
    ];
    let total_weight: u64 = WEIGHT.iter().sum();
    let mut spikes: Vec<(i64, i64, u64)> = (0..6)
        .map(|_| {
            let start = DAY_START_MS + rng.below(86_000_000) as i64;
            let len = [400, 900, 3_000, 20_000, 90_000, 240_000][rng.below(6) as usize];
            (start, len, spike_events / 7)
        })
        .collect();
    // One across the 5-minute boundary at 12:00.
    spikes.push((DAY_START_MS + 43_200_000 - 2_000, 5_000, spike_events / 7));
    spikes.sort();
    let apis = ["zoneA", "payment", "zoneA", "points"];
    let mut written = 0u64;
    let mut buf: Vec<(i64, u8)> = Vec::new();
    for hour in 0..24i64 {
        buf.clear();
        let n = background * WEIGHT[hour as usize] / total_weight;
        for _ in 0..n {
            buf.push((
                DAY_START_MS + hour * 3_600_000 + rng.below(3_600_000) as i64,
                0,
            ));
        }
        for &(start, len, n) in &spikes {
            let hour_start = DAY_START_MS + hour * 3_600_000;
            let (lo, hi) = (
                start.max(hour_start),
                (start + len).min(hour_start + 3_600_000),
            );
            if lo < hi {
                let part = n * (hi - lo) as u64 / len as u64;
                for _ in 0..part {
                    buf.push((lo + rng.below((hi - lo) as u64) as i64, 1));
                }
            }
        }
        buf.sort_unstable();
        for &(ts, spike) in &buf {
            let api = if spike == 1 {
                "payment"
            } else {
                apis[(ts % 4) as usize]
            };
            let status = if spike == 1 && ts % 3 == 0 { 429 } else { 200 };
            let shop = if spike == 1 { 7 } else { ts % 500 };
            writeln!(
                w,
                r#"{{"eventType":"ExternalApiCall","timestamp":{ts},"api":"{api}","http.response.status_code":{status},"duration.ms":{}.{},"shop.id":"shop-{shop}","http.request.method":"POST","url.full":"https://pay.example/v1/{api}"}}"#,
                20 + ts % 60,
                ts % 1000
            )?;
            written += 1;
            if spike == 1 && ts % 5 == 0 {
                writeln!(
                    w,
                    r#"{{"eventType":"RateLimitDecision","timestamp":{ts},"limiter":"payments","shop.id":"shop-{shop}","reason":"hot_shop","allowed":false,"retry_after.s":0.04,"hot_shop":true}}"#
                )?;
                written += 1;
            }
        }
    }
    w.flush()?;
    Ok(written)
}
