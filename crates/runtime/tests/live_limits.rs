//! Live limits (`limiter set`) met by the worker's calls: a change read once and decided
//! with in the same call, limits changing on every try, a peek that meets a change.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

use checkout_guard_model::Reason;
use checkout_guard_runtime::store::Fault;
use std::time::Duration;

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{limiter, set_live, store};

#[test]
fn a_live_change_is_read_once_and_decided_with_in_the_same_call() {
    let s = store();
    let l = limiter("live", &s, "deny", false, vec![]);
    for _ in 0..10 {
        assert!(l.acquire(b"shop", 1).unwrap().allowed);
    }
    set_live(&s, "live", 1, (20, 10.0));
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    let change = n.limits_change.expect("the change is reported");
    assert_eq!(change.version, 1);
    assert!(change.new.contains("global=20/10"), "{}", change.new);
    // The empty bucket stays empty: its level in tokens carries over.
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
    s.advance(Duration::from_millis(100));
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    assert!(d.allowed && n.limits_change.is_none());
}

#[test]
fn live_limits_changing_on_every_try_end_in_the_policy_after_three() {
    let s = store();
    let l = limiter("churn", &s, "allow", false, vec![]);
    for _ in 0..3 {
        s.inject(Fault::Reply(vec![-1, 0]));
    }
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (true, Reason::Unavailable));
    // The tries reloaded the limits (nothing stored): the next call decides.
    assert_eq!(l.acquire(b"shop", 1).unwrap().reason, Reason::Allowed);
}

/// A peek that is the first call to meet a live change (or data loss) reloads the limits
/// as acquire() would, and reports the change: the acquire() after it decides with the
/// new limits already and finds nothing new, so the peek is the worker's only chance.
#[test]
fn a_peek_that_meets_a_live_change_reports_it() {
    let s = store();
    let l = limiter("peek-live", &s, "deny", false, vec![]);
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    set_live(&s, "peek-live", 1, (20, 10.0));
    let (d, n) = l.peek_noticed(b"shop", 1).unwrap();
    assert!(d.allowed);
    assert!(
        n.limits_change.is_some(),
        "the live change this worker picked up is reported"
    );
    let (_, n) = l.acquire_noticed(b"shop", 1).unwrap();
    assert!(n.limits_change.is_none(), "and only once");
    // The same after data loss (Valkey restarted empty).
    s.flush_all();
    let (_, n) = l.peek_noticed(b"shop", 1).unwrap();
    assert!(
        n.limits_change.is_some(),
        "the loss of the live limits is reported"
    );
}
