//! In-flight leases as this worker sees them: the id of each lease it takes, its release,
//! and what became of the leases it held (for `health()`).
//!
//! A lease id is `<pid>.<process random>.<n>` (hex): unique among every worker of every
//! host while a lease can live (the random part is drawn again in every forked child, so
//! a recycled pid does not repeat a dead worker's ids).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use checkout_guard_model::cmd::release::{ReleaseCall, ReleaseOutcome};
use checkout_guard_model::{Lane, LimiterError};

use super::Limiter;
use crate::clock::Clock;
use crate::store::{Store, StoreError};
use crate::sync::Mutex;

static NEXT: AtomicU64 = AtomicU64::new(1);
/// The fork generation the random part was drawn in, and that part (with the pid).
static PROCESS_PART: Mutex<Option<(u64, String)>> = Mutex::new(None);

/// The number and the id of a new lease.
pub(super) fn next_lease_id() -> (u64, Vec<u8>) {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    (n, lease_id(n))
}

/// The id of lease number `n` of this process.
pub(super) fn lease_id(n: u64) -> Vec<u8> {
    let generation = crate::process::generation();
    let mut part = PROCESS_PART.lock();
    let prefix = match &*part {
        Some((g, p)) if *g == generation => p.clone(),
        _ => {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u32(std::process::id());
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            h.write_u64(nanos);
            let p = format!("{:x}.{:x}", std::process::id(), h.finish());
            *part = Some((generation, p.clone()));
            p
        }
    };
    format!("{prefix}.{n:x}").into_bytes()
}

/// What became of the leases this process took from one limiter (by endpoint and name:
/// every `RateLimiter` object of it in the process shares them, so a php-fpm worker's
/// `health()` counts its earlier requests' leases too).
#[derive(Debug, Default)]
pub struct LeaseCounts {
    pub taken: AtomicU64,
    pub released: AtomicU64,
    /// Released only at the end of the request (also `released`).
    pub leaked: AtomicU64,
    /// Found expired at their release (or already removed as expired).
    pub expired: AtomicU64,
    /// Releases that failed when asked (Valkey down, in its back-off, an error): each is
    /// tried again at the end of a later request until its lease would have expired
    /// (`released` then, when it was still held).
    pub release_failed: AtomicU64,
    /// Decisions whose reply was lost after the call was sent: Valkey may have taken
    /// their lease, released like any other (`released` when it was there).
    pub unknown: AtomicU64,
}

/// [`LeaseCounts`] read at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeaseCountsSeen {
    pub taken: u64,
    pub released: u64,
    pub leaked: u64,
    pub expired: u64,
    pub release_failed: u64,
    pub unknown: u64,
}

impl LeaseCounts {
    pub fn seen(&self) -> LeaseCountsSeen {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        LeaseCountsSeen {
            taken: r(&self.taken),
            released: r(&self.released),
            leaked: r(&self.leaked),
            expired: r(&self.expired),
            release_failed: r(&self.release_failed),
            unknown: r(&self.unknown),
        }
    }
}

/// The counts of the limiter `live_id` (endpoint and name) in this process.
pub(super) fn counts_for(live_id: u64) -> Arc<LeaseCounts> {
    static COUNTS: Mutex<Option<HashMap<u64, Arc<LeaseCounts>>>> = Mutex::new(None);
    COUNTS
        .lock()
        .get_or_insert_with(HashMap::new)
        .entry(live_id)
        .or_default()
        .clone()
}

/// A release that failed, to be tried again: everything its call needs.
struct Pending {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    lease_keys: [Vec<u8>; 3],
    stats_key: Vec<u8>,
    id: Vec<u8>,
    lease_us: i64,
    leaked: bool,
    unknown: bool,
    /// When the lease would have expired (the clock's monotonic ns): given up then.
    until_ns: u64,
    counts: Arc<LeaseCounts>,
}

/// The most releases kept for another try (the oldest dropped: their leases expire).
const MAX_PENDING: usize = 4096;
static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());

impl Pending {
    fn send(&self) -> Result<ReleaseOutcome, StoreError> {
        let call = ReleaseCall {
            lease_keys: [
                &self.lease_keys[0],
                &self.lease_keys[1],
                &self.lease_keys[2],
            ],
            stats_key: &self.stats_key,
            lease_id: &self.id,
            lease_us: self.lease_us,
            leaked: self.leaked,
        };
        let ints = self.store.release(&call)?;
        ReleaseCall::decode_reply(&ints)
            .map(|(o, _)| o)
            .map_err(Limiter::bad_reply)
    }

    fn count(&self, outcome: ReleaseOutcome) {
        let c = &self.counts;
        match outcome {
            ReleaseOutcome::Released => {
                c.released.fetch_add(1, Ordering::Relaxed);
                if self.leaked {
                    c.leaked.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A lease a lost reply may not have taken: not there, nothing to count.
            ReleaseOutcome::NotHeld if self.unknown => {}
            ReleaseOutcome::Expired | ReleaseOutcome::NotHeld => {
                c.expired.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Tries again the releases that failed (a Valkey that paused for a moment, its back-off
/// after a lost reply: without this, their leases stay held with no call behind them
/// until `lease_seconds` run out). Called at the end of every request; one round trip per
/// release, and at the first that fails again the rest wait for the next request (a
/// Valkey still down costs one failed call, no more). Those past their lease's expiry
/// are dropped. Returns how many were released or found gone.
pub fn retry_pending_releases() -> usize {
    let mut pending = std::mem::take(&mut *PENDING.lock());
    if pending.is_empty() {
        return 0;
    }
    let mut done = 0;
    let mut keep = Vec::new();
    let mut failing = false;
    for p in pending.drain(..) {
        if p.clock.monotonic_ns() >= p.until_ns {
            continue;
        }
        if failing {
            keep.push(p);
            continue;
        }
        match p.send() {
            Ok(outcome) => {
                p.count(outcome);
                done += 1;
            }
            Err(_) => {
                failing = true;
                keep.push(p);
            }
        }
    }
    let mut shared = PENDING.lock();
    // Releases that failed meanwhile (another thread) are kept with these.
    keep.append(&mut shared);
    let over = keep.len().saturating_sub(MAX_PENDING);
    keep.drain(..over);
    *shared = keep;
    done
}

/// How many failed releases wait for another try.
pub fn pending_releases() -> usize {
    PENDING.lock().len()
}

impl Limiter {
    /// Ends lease number `lease` that a decision for `shop` took: one round trip (the
    /// release script or `CG.RELEASE`). `leaked`: released at the end of the request, not
    /// by the caller. A release that fails is counted (`release_failed`) and tried again
    /// at the end of later requests ([`retry_pending_releases`]) until the lease would
    /// have expired.
    pub fn release(
        &self,
        shop: &[u8],
        lease: u64,
        leaked: bool,
    ) -> Result<ReleaseOutcome, LimiterError> {
        let Some(f) = self.options.in_flight.as_ref() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let id = lease_id(lease);
        let shop_key = self.keys.leases(Lane::HotShop, shop);
        let call = ReleaseCall {
            lease_keys: [&self.lease_keys[0], &self.lease_keys[1], &shop_key],
            stats_key: &self.lease_stats_key,
            lease_id: &id,
            lease_us: f.lease_us,
            leaked,
        };
        let c = &*self.lease_counts;
        let unknown = self.unknown_leases.lock().remove(&lease);
        let result = self
            .store
            .release(&call)
            .and_then(|ints| ReleaseCall::decode_reply(&ints).map_err(Self::bad_reply));
        match result {
            Ok((outcome, _)) => {
                match outcome {
                    ReleaseOutcome::Released => {
                        c.released.fetch_add(1, Ordering::Relaxed);
                        if leaked {
                            c.leaked.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // A lease a lost reply may not have taken: not there, nothing to count.
                    ReleaseOutcome::NotHeld if unknown => {}
                    ReleaseOutcome::Expired | ReleaseOutcome::NotHeld => {
                        c.expired.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(outcome)
            }
            Err(e) => {
                c.release_failed.fetch_add(1, Ordering::Relaxed);
                let mut pending = PENDING.lock();
                if pending.len() >= MAX_PENDING {
                    pending.remove(0);
                }
                pending.push(Pending {
                    store: self.store.clone(),
                    clock: self.clock.clone(),
                    lease_keys: [
                        self.lease_keys[0].clone(),
                        self.lease_keys[1].clone(),
                        shop_key.clone(),
                    ],
                    stats_key: self.lease_stats_key.clone(),
                    id: id.clone(),
                    lease_us: f.lease_us,
                    leaked,
                    // A release whose reply was lost may have run: not found then, it
                    // counts nothing.
                    unknown: unknown || e.outcome_unknown(),
                    until_ns: self
                        .clock
                        .monotonic_ns()
                        .saturating_add(f.lease_us as u64 * 1000),
                    counts: self.lease_counts.clone(),
                });
                Err(self.unavailable(e))
            }
        }
    }

    /// Lease `n` belongs to a decision whose reply was lost: it may be held.
    pub(super) fn note_unknown_lease(&self, n: u64) {
        self.unknown_leases.lock().insert(n);
        self.lease_counts.unknown.fetch_add(1, Ordering::Relaxed);
    }

    /// `in_flight` in force: the option, or live limits over it (None: off).
    pub fn in_flight_in_force(&self) -> Option<checkout_guard_model::InFlight> {
        self.current().in_flight_args.in_flight().copied()
    }

    /// What became of the leases this process took from this limiter.
    pub fn lease_counts(&self) -> LeaseCountsSeen {
        self.lease_counts.seen()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_are_unique_and_name_the_process() {
        let (a, ia) = next_lease_id();
        let (b, ib) = next_lease_id();
        assert_ne!(a, b);
        assert_ne!(ia, ib);
        let text = String::from_utf8(ia.clone()).unwrap();
        assert!(
            text.starts_with(&format!("{:x}.", std::process::id())),
            "{text}"
        );
        assert_eq!(lease_id(a), ia, "the same number, the same id");
    }
}
