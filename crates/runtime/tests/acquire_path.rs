//! The acquire path through the limiter to the in-memory store: a bucket emptied and
//! refilled on the store's clock, a mark's hot buckets applying until it runs out, unmark
//! and reset reaching the store.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

use checkout_guard_model::Reason;
use checkout_guard_runtime::store::Fault;
use std::time::Duration;

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{limiter, store};

#[test]
fn a_flood_is_denied_by_the_global_bucket_and_refills_on_the_stores_clock() {
    let s = store();
    let l = limiter("flood", &s, "allow", false, vec![]);
    for i in 0..10 {
        let d = l.acquire(b"shop", 1).unwrap();
        assert!(d.allowed, "call {i}");
        assert_eq!(d.remaining, 9 - i);
    }
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(d.reason, Reason::Global);
    assert_eq!(d.retry_after, 0.1);
    s.advance(Duration::from_millis(100));
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    assert_eq!(s.stats().decisions, 12);
}

#[test]
fn a_mark_makes_the_hot_buckets_apply_until_it_runs_out() {
    let s = store();
    let l = limiter("mark", &s, "deny", false, vec![]);
    l.mark_hot(b"shop", 1).unwrap();
    assert!(l.is_hot(b"shop").unwrap());
    for _ in 0..4 {
        let d = l.acquire(b"shop", 1).unwrap();
        assert!(d.allowed && d.hot_shop);
    }
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::HotShop));
    // A key lives through its expiry millisecond (as in Valkey): 1 s and 1 ms later the
    // mark has run out, and the buckets have refilled: only global applies.
    s.advance(Duration::from_millis(1001));
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(d.allowed && !d.hot_shop);
    assert!(!l.is_hot(b"shop").unwrap());
}

#[test]
fn unmark_and_reset_reach_the_store() {
    let s = store();
    let l = limiter("reset", &s, "deny", false, vec![]);
    l.mark_hot(b"shop", 60).unwrap();
    l.unmark_hot(b"shop").unwrap();
    assert!(!l.is_hot(b"shop").unwrap());
    for _ in 0..10 {
        l.acquire(b"shop", 1).unwrap();
    }
    assert!(!l.acquire(b"shop", 1).unwrap().allowed);
    l.reset().unwrap();
    assert_eq!(l.acquire(b"shop", 1).unwrap().remaining, 9);
    // Administrative calls have no safe default: a failure is an error.
    s.inject(Fault::ErrorReply(
        "READONLY You can't write against a read only replica.".into(),
    ));
    assert!(l.mark_hot(b"shop", 60).is_err());
}
