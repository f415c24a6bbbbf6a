//! In-flight leases: at most N calls of a limiter in flight at once, beside its token
//! buckets, decided in the same step (see [`crate::step`]). Per level (global, the hot
//! lane, one hot shop: the buckets' [`Lane`]s) a sorted set in Valkey holds one member per
//! lease, scored by the instant it expires (µs, Valkey's clock): a lease is held while its
//! score is after now, so a worker killed holding one frees it after `lease_us` whatever
//! happens to the worker. A decision counts the held leases of every level that applies
//! (check all), and when it is allowed takes a lease on each (take all), as it takes the
//! buckets' tokens; [`crate::cmd::release`] ends one.
//!
//! The stats hash ([`crate::Keys::lease_stats`]) counts what happened to leases: released
//! in time (and their hold time, which the retry estimate reads), released only at the end
//! of the PHP request (leaked), expired.

use crate::bucket::Lane;

/// Longest `in_flight.lease_seconds`: 10 minutes. A lease outlives the call it guards by
/// design only when the worker died (then it frees the level after this long at most); a
/// checkout's call to a provider longer than this is a stuck worker.
pub const MAX_LEASE_SECONDS: i64 = 600;
/// Default `in_flight.lease_seconds`.
pub const DEFAULT_LEASE_SECONDS: f64 = 30.0;
/// How long a lease set lives after the last lease was added (ms): the longest lease and
/// one second, whatever the lease length of the worker that added it, so a set never
/// expires while a lease in it is held.
pub const LEASE_SET_TTL_MS: i64 = MAX_LEASE_SECONDS * 1000 + 1000;

/// The stats hash's fields.
pub mod stats {
    /// Leases released (by `release()`, or at the end of the request), in time.
    pub const RELEASED: &str = "released";
    /// The sum of their hold times, µs.
    pub const HOLD_US: &str = "hold_us";
    /// Leases released only at the end of the PHP request (also counted `released`).
    pub const LEAKED: &str = "leaked";
    /// Leases that expired before their release (a killed worker's, a call longer than
    /// the lease).
    pub const EXPIRED: &str = "expired";
}

/// The `in_flight` option as the decision takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InFlight {
    /// Per level (global, hot lane, hot shop) the most leases held at once; 0: the level
    /// has no limit (global always has one).
    pub limits: [i64; 3],
    /// How long a lease is held at most, µs.
    pub lease_us: i64,
}

impl InFlight {
    /// The limit of `lane`'s level, when it has one.
    pub fn limit(&self, lane: Lane) -> Option<i64> {
        Some(self.limits[lane as usize]).filter(|&n| n > 0)
    }

    /// The levels that apply to a shop, hot or not, in order: global, then the hot levels
    /// that have a limit.
    pub fn applicable(&self, hot: bool) -> impl Iterator<Item = (Lane, i64)> + '_ {
        Lane::ALL
            .into_iter()
            .filter(move |&l| l == Lane::Global || hot)
            .filter_map(|l| self.limit(l).map(|n| (l, n)))
    }
}

/// One level as a decision reads it: the leases held now and the earliest expiry among
/// them (µs; 0 when none is held).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseLevel {
    pub held: i64,
    pub oldest_expiry_us: i64,
}

/// The stats a retry estimate reads: leases released in time and their total hold time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseStats {
    pub released: i64,
    pub hold_us: i64,
}

/// `retryAfter()` of an in-flight denial, µs: with `held` leases held for about `D` each,
/// one comes back about every `D / held`. `D` is the longer of the mean hold of the
/// releases recorded (the stats) and the age of the oldest lease held now (taken
/// `lease_us` before its expiry): the history alone would answer "1 ms" for calls that
/// were fast and are slow now, the case leases are for. Never less than 1 ms, never more
/// than the oldest lease's time to expiry (a bound: that lease is gone by then whatever
/// its holder does); that bound when nothing is known.
pub fn retry_after_us(level: &LeaseLevel, stats: &LeaseStats, now: i64, lease_us: i64) -> i64 {
    let bound = (level.oldest_expiry_us - now).max(1_000);
    let mean = if stats.released > 0 && stats.hold_us > 0 {
        stats.hold_us / stats.released
    } else {
        0
    };
    let age = if level.oldest_expiry_us > 0 {
        (now - (level.oldest_expiry_us - lease_us)).max(0)
    } else {
        0
    };
    let basis = mean.max(age);
    if basis <= 0 || level.held <= 0 {
        return bound;
    }
    (basis / level.held).clamp(1_000, bound)
}

/// A lease set as a sorted set holds it (member -> score): what an in-memory key space
/// (the test store, test doubles) keeps per key, with the commands' meanings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseSet {
    members: std::collections::BTreeMap<Vec<u8>, i64>,
}

impl LeaseSet {
    /// `ZCOUNT (now +inf`, and the lowest such score (0: none).
    pub fn held(&self, now: i64) -> LeaseLevel {
        let live = self.members.values().filter(|&&e| e > now);
        LeaseLevel {
            held: live.clone().count() as i64,
            oldest_expiry_us: live.min().copied().unwrap_or(0),
        }
    }

    /// `ZREMRANGEBYSCORE -inf now` (how many removed), then `ZADD expiry id`.
    pub fn take(&mut self, id: &[u8], expiry_us: i64, now: i64) -> i64 {
        let before = self.members.len();
        self.members.retain(|_, e| *e > now);
        let removed = (before - self.members.len()) as i64;
        self.members.insert(id.to_vec(), expiry_us);
        removed
    }

    /// `ZSCORE id`.
    pub fn score(&self, id: &[u8]) -> Option<i64> {
        self.members.get(id).copied()
    }

    /// `ZREM id`.
    pub fn remove(&mut self, id: &[u8]) {
        self.members.remove(id);
    }

    /// No member left (Valkey deletes an empty sorted set).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_retry_estimate_is_the_mean_hold_over_the_held_bounded_by_the_oldest_expiry() {
        let now = 1_000_000_000;
        let level = LeaseLevel {
            held: 4,
            oldest_expiry_us: now + 30_000_000,
        };
        let none = LeaseStats::default();
        // Taken just now (a 30 s lease expiring in 30 s), nothing released yet: the bound.
        assert_eq!(retry_after_us(&level, &none, now, 30_000_000), 30_000_000);
        // Mean hold 2 s, 4 held: one back every 0.5 s.
        let s = LeaseStats {
            released: 10,
            hold_us: 20_000_000,
        };
        assert_eq!(retry_after_us(&level, &s, now, 30_000_000), 500_000);
        // Calls slow now: the oldest lease is 6 s old (a 36 s lease expiring in 30 s),
        // longer than the recorded mean: 6 s / 4 held.
        assert_eq!(retry_after_us(&level, &s, now, 36_000_000), 1_500_000);
        // Nothing released yet, the oldest 8 s old: 8 s / 4.
        assert_eq!(retry_after_us(&level, &none, now, 38_000_000), 2_000_000);
        // Bounded by the oldest lease's expiry.
        let soon = LeaseLevel {
            oldest_expiry_us: now + 200_000,
            ..level
        };
        assert_eq!(retry_after_us(&soon, &s, now, 30_000_000), 200_000);
        // Never below 1 ms.
        let fast = LeaseStats {
            released: 1000,
            hold_us: 1000,
        };
        assert_eq!(retry_after_us(&level, &fast, now, 30_000_000), 1_000);
        let expired = LeaseLevel {
            oldest_expiry_us: now - 5,
            ..level
        };
        assert_eq!(retry_after_us(&expired, &s, now, 30_000_000), 1_000);
    }

    #[test]
    fn the_hot_levels_apply_to_hot_shops_only_and_only_with_a_limit() {
        let f = InFlight {
            limits: [10, 0, 3],
            lease_us: 1,
        };
        let levels = |hot| f.applicable(hot).collect::<Vec<_>>();
        assert_eq!(levels(false), [(Lane::Global, 10)]);
        assert_eq!(levels(true), [(Lane::Global, 10), (Lane::HotShop, 3)]);
    }
}
