//! The acquire path's faults, injected into the in-memory store: a timeout and the
//! back-off after it, `throw`, error replies, NOSCRIPT, replies outside the contract, data
//! loss (faults a real Valkey must be broken by hand for).
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
fn a_timeout_applies_the_policy_and_the_back_off_spares_the_store() {
    for (policy, allowed) in [("allow", true), ("deny", false)] {
        let s = store();
        let l = limiter(&format!("timeout-{policy}"), &s, policy, false, vec![]);
        s.inject(Fault::Timeout {
            retry_in: Duration::from_secs(1),
        });
        let d = l.acquire(b"shop", 1).unwrap();
        assert_eq!((d.allowed, d.reason), (allowed, Reason::Unavailable));
        if !allowed {
            assert_eq!(d.retry_after, 1.0, "deny waits for the back-off");
        }
        let calls = s.stats().calls;
        // During the back-off: the policy at once, the store is not asked.
        let d = l.acquire(b"shop", 1).unwrap();
        assert_eq!(d.reason, Reason::Unavailable);
        assert_eq!(s.stats().calls, calls);
        assert!(l.health(false).circuit_open);
        // After it: decided by the store again.
        s.advance(Duration::from_secs(1));
        let d = l.acquire(b"shop", 1).unwrap();
        assert_eq!((d.allowed, d.reason), (true, Reason::Allowed));
        assert_eq!(s.stats().calls, calls + 1);
    }
}

#[test]
fn throw_turns_a_failure_into_an_error_naming_the_store() {
    let s = store();
    let l = limiter("throw", &s, "throw", false, vec![]);
    s.inject(Fault::Timeout {
        retry_in: Duration::from_millis(50),
    });
    let e = l.acquire(b"shop", 1).unwrap_err().to_string();
    assert!(
        e.contains("Valkey unavailable") && e.contains("timed out"),
        "{e}"
    );
}

#[test]
fn an_error_reply_applies_the_policy_without_a_back_off() {
    let s = store();
    let l = limiter("oom", &s, "deny", false, vec![]);
    s.inject(Fault::ErrorReply(
        "OOM command not allowed when used memory > 'maxmemory'".into(),
    ));
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Unavailable));
    assert_eq!(
        d.retry_after, 0.0,
        "Valkey answered: the next call asks again"
    );
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (true, Reason::Allowed));
}

#[test]
fn a_flushed_script_cache_is_loaded_again_and_the_call_decides() {
    let s = store();
    let l = limiter("noscript", &s, "deny", false, vec![]);
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    s.inject(Fault::NoScript);
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!(
        (d.allowed, d.reason, d.remaining),
        (true, Reason::Allowed, 8)
    );
    assert_eq!(s.stats().script_loads, 2);
}

#[test]
fn a_reply_outside_the_contract_is_a_failure_not_a_decision() {
    for bad in [vec![], vec![7, 0, 0, 0, 0, 0, 0, 0, 0], vec![0, 1, 2]] {
        let s = store();
        let l = limiter("garbage", &s, "deny", false, vec![]);
        s.inject(Fault::Reply(bad.clone()));
        let d = l.acquire(b"shop", 1).unwrap();
        assert_eq!(
            (d.allowed, d.reason),
            (false, Reason::Unavailable),
            "{bad:?}"
        );
    }
}

#[test]
fn data_loss_leaves_every_bucket_full_and_drops_the_live_limits() {
    let s = store();
    let l = limiter("loss", &s, "deny", false, vec![]);
    set_live(&s, "loss", 1, (8, 8.0));
    for _ in 0..8 {
        assert!(l.acquire(b"shop", 1).unwrap().allowed);
    }
    assert!(!l.acquire(b"shop", 1).unwrap().allowed);
    s.flush_all();
    // No version stored any more: the constructor's limits, all full.
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    assert!(n.limits_change.is_some());
    assert_eq!((d.allowed, d.remaining), (true, 9));
}
