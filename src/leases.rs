//! The leases this request holds: a decision with a lease is listed here until
//! `Decision::release()` ends it; what is left at the end of the request (RSHUTDOWN) is
//! released then and counted leaked (in the limiter's stats hash and this process's
//! counts). Per thread: under ZTS each request runs on its own thread.

use std::cell::RefCell;
use std::sync::Arc;

use checkout_guard_runtime::Limiter;

/// One lease held by the running request.
struct Held {
    limiter: Arc<Limiter>,
    shop: Vec<u8>,
    lease: u64,
    /// The fork generation it was taken in: a child forked by the request
    /// (`pcntl_fork()`) inherits the list, but the leases are its parent's to end.
    generation: u64,
    /// When its lease has expired in Valkey whatever happens: a long-running script (a
    /// queue worker) that never releases does not keep it listed past then.
    expires: std::time::Instant,
}

fn mine(h: &Held) -> bool {
    h.generation == checkout_guard_runtime::process::generation()
}

thread_local! {
    static HELD: RefCell<Vec<Held>> = const { RefCell::new(Vec::new()) };
}

/// Past this many leases listed, the expired ones are dropped (every time the list
/// doubles), so the list of a script that never releases stays bounded by what can be
/// held at once.
const PRUNE_FROM: usize = 256;

/// Lists lease `lease` that `limiter` took for `shop`.
pub fn hold(limiter: &Arc<Limiter>, shop: &[u8], lease: u64) {
    let lease_us = limiter.options().in_flight.map_or(0, |f| f.lease_us);
    let now = std::time::Instant::now();
    HELD.with_borrow_mut(|held| {
        if held.len() >= PRUNE_FROM && held.len().is_power_of_two() {
            held.retain(|h| h.expires > now);
        }
        held.push(Held {
            expires: now + std::time::Duration::from_micros(lease_us as u64),
            limiter: limiter.clone(),
            shop: shop.to_vec(),
            lease,
            generation: checkout_guard_runtime::process::generation(),
        })
    });
}

/// Ends lease `lease` of `limiter` if this request still holds it (a second call, or a
/// call after the request ended, does nothing). Never throws: a failed release is counted
/// by the limiter and the lease expires.
pub fn release(limiter: &Arc<Limiter>, lease: u64) {
    let held = HELD.with_borrow_mut(|held| {
        // The newest first: a lease is most often released by the request that just took it.
        let i = held
            .iter()
            .rposition(|h| h.lease == lease && Arc::ptr_eq(&h.limiter, limiter) && mine(h))?;
        Some(held.remove(i))
    });
    if let Some(h) = held {
        let _ = h.limiter.release(&h.shop, h.lease, false);
    }
}

/// Whether the running request still holds lease `lease` of `limiter`.
pub fn holds(limiter: &Arc<Limiter>, lease: u64) -> bool {
    HELD.with_borrow(|held| {
        held.iter()
            .any(|h| h.lease == lease && Arc::ptr_eq(&h.limiter, limiter) && mine(h))
    })
}

/// Request end: every lease still held is released and counted leaked (in a forked
/// child, none of its parent's). One round trip
/// each (a request rarely leaks more than one).
pub fn release_all_at_request_end() {
    let held = HELD.with_borrow_mut(std::mem::take);
    let now = std::time::Instant::now();
    for h in held.into_iter().filter(mine).filter(|h| h.expires > now) {
        let _ = h.limiter.release(&h.shop, h.lease, true);
    }
    // Releases that failed earlier (Valkey paused, its back-off) are tried again.
    checkout_guard_runtime::limiter::retry_pending_releases();
}
