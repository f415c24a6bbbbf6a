//! Shadow mode (`mode => 'shadow'`, `limiter set mode=...`): the same decisions and the
//! same buckets as enforcement, every call let through; a live mode switching every
//! decision.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

use checkout_guard_model::Reason;
use checkout_guard_runtime::store::Fault;
use std::time::Duration;

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{bucket, limiter, set_live_in, shadow, store};

#[test]
fn shadow_and_enforce_decide_alike_and_move_the_buckets_alike() {
    let (se, ss) = (store(), store());
    let enforce = limiter("same-enforce", &se, "deny", false, vec![]);
    let shadowed = limiter("same-shadow", &ss, "deny", false, shadow());
    assert_eq!(shadowed.mode(), checkout_guard_config::Mode::Shadow);
    let mut denied = 0;
    // A flood of one shop, then another, with time moving: denials included.
    for i in 0..40 {
        let shop: &[u8] = if i % 3 == 0 { b"b" } else { b"a" };
        let tokens = 1 + (i % 2);
        let e = enforce.acquire(shop, tokens).unwrap();
        let s = shadowed.acquire(shop, tokens).unwrap();
        assert!(
            s.allowed && s.shadow,
            "call {i}: shadow lets every call through"
        );
        assert!(!e.shadow && e.would_allow == e.allowed);
        assert_eq!(
            (s.would_allow, s.reason, s.retry_after, s.remaining),
            (e.allowed, e.reason, e.retry_after, e.remaining),
            "call {i}"
        );
        denied += usize::from(!e.allowed);
        if i % 7 == 0 {
            se.advance(Duration::from_millis(50));
            ss.advance(Duration::from_millis(50));
        }
    }
    assert!(denied > 10, "the sequence has denials: {denied}");
    // An enforce limiter on the shadow limiter's keys sees the buckets enforcement left.
    let after = limiter("same-shadow", &ss, "deny", false, vec![]);
    for shop in [&b"a"[..], b"b"] {
        let want = enforce.peek(shop, 1).unwrap();
        let got = after.peek(shop, 1).unwrap();
        assert_eq!((got.allowed, got.remaining), (want.allowed, want.remaining));
        assert!(!got.shadow);
    }
}

#[test]
fn a_shadow_reservation_takes_its_tokens_but_never_sleeps() {
    let s = store();
    let mut options = shadow();
    for lane in ["hot_lane", "hot_shop"] {
        options.push((lane.into(), bucket(10, 10.0)));
    }
    let l = limiter("shadow-wait", &s, "deny", false, options);
    assert!(l.acquire(b"shop", 10).unwrap().allowed);
    let before = s.now_us();
    // 5 tokens are due in 0.5 s: enforcement would take them now and sleep 0.5 s.
    let (d, _) = l.acquire_within(b"shop", 5, 1.0).unwrap();
    assert_eq!(s.now_us(), before, "no sleep in shadow mode");
    assert!(d.allowed && d.would_allow && d.shadow);
    assert_eq!(
        (d.waited, d.retry_after),
        (0.0, 0.5),
        "the wait it would have slept"
    );
    // The tokens were taken, as enforcement takes them: 5 more are due 0.5 s later.
    let (d, _) = l.acquire_within(b"shop", 5, 0.9).unwrap();
    assert!(d.allowed && !d.would_allow, "{d:?}");
    assert_eq!(d.reason, Reason::Global);
}

#[test]
fn shadow_local_denials_spare_the_store_as_enforcements_do() {
    let (se, ss) = (store(), store());
    let enforce = limiter("local-enforce", &se, "deny", true, vec![]);
    let shadowed = limiter("local-shadow", &ss, "deny", true, shadow());
    for _ in 0..30 {
        let e = enforce.acquire(b"shop", 1).unwrap();
        let s = shadowed.acquire(b"shop", 1).unwrap();
        assert!(s.allowed);
        assert_eq!((s.would_allow, s.reason), (e.allowed, e.reason));
    }
    assert_eq!(ss.stats().calls, se.stats().calls);
    assert!(ss.stats().calls < 30, "local denials answered some calls");
}

#[test]
fn shadow_mode_lets_an_unavailable_deny_through_and_still_throws_for_throw() {
    let s = store();
    let l = limiter("shadow-deny", &s, "deny", false, shadow());
    s.inject(Fault::Timeout {
        retry_in: Duration::from_secs(1),
    });
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(d.allowed && !d.would_allow && d.shadow);
    assert_eq!((d.reason, d.retry_after), (Reason::Unavailable, 1.0));
    let s = store();
    let l = limiter("shadow-throw", &s, "throw", false, shadow());
    s.inject(Fault::Timeout {
        retry_in: Duration::from_secs(1),
    });
    assert!(
        l.acquire(b"shop", 1).is_err(),
        "throw throws as enforcement does"
    );
    let s = store();
    let l = limiter("shadow-allow", &s, "allow", false, shadow());
    s.inject(Fault::ErrorReply("ERR injected".into()));
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(d.allowed && d.would_allow && d.reason == Reason::Unavailable);
}

#[test]
fn a_live_mode_switches_every_decision_and_default_goes_back_to_the_option() {
    use checkout_guard_config::Mode;
    let s = store();
    let l = limiter("live-mode", &s, "deny", false, vec![]);
    for _ in 0..10 {
        assert!(l.acquire(b"shop", 1).unwrap().allowed);
    }
    assert!(!l.acquire(b"shop", 1).unwrap().allowed);
    set_live_in(&s, "live-mode", 1, (10, 10.0), Some("shadow"));
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    let change = n.limits_change.expect("the change is reported");
    assert_eq!(
        (change.old_mode, change.mode),
        (Mode::Enforce, Mode::Shadow)
    );
    assert!(d.allowed && !d.would_allow && d.shadow && d.reason == Reason::Global);
    assert_eq!(l.mode(), Mode::Shadow);
    // A limiter made later in this process (the next request) knows it at once.
    assert_eq!(
        limiter("live-mode", &s, "deny", false, vec![]).mode(),
        Mode::Shadow
    );
    // mode=default: the hash without `mode`, a new version.
    set_live_in(&s, "live-mode", 2, (10, 10.0), None);
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    assert_eq!(n.limits_change.unwrap().mode, Mode::Enforce);
    assert!(!d.allowed && !d.shadow);
    // The option's shadow stays shadow under live limits without a mode; a live
    // `enforce` overrides it.
    let s = store();
    let l = limiter("live-mode-2", &s, "deny", false, shadow());
    set_live_in(&s, "live-mode-2", 1, (10, 10.0), None);
    assert!(l.acquire(b"shop", 1).unwrap().shadow);
    set_live_in(&s, "live-mode-2", 2, (10, 10.0), Some("enforce"));
    assert!(!l.acquire(b"shop", 1).unwrap().shadow);
    // An unreadable mode written by hand is reported and leaves the option's mode.
    set_live_in(&s, "live-mode-2", 3, (10, 10.0), Some("dry-run"));
    let (d, n) = l.acquire_noticed(b"shop", 1).unwrap();
    let err = n.limits_change.unwrap().error.unwrap();
    assert!(err.contains("dry-run"), "{err}");
    assert!(d.shadow);
}

/// The kill switch's bound for a worker in a flood: a worker that denies locally (it
/// drained the bucket) does not ask Valkey, so it finds a live `mode=shadow` at its first
/// call that does, within `MAX_LOCAL_DENIAL_NS` (250 ms) of the reply that taught it.
#[test]
fn a_live_mode_reaches_a_worker_denying_locally_within_250_ms() {
    let s = store();
    // A frozen refill: the bucket stays drained, only the local denial's bound ends.
    let frozen = vec![
        ("global".into(), bucket(10, 0.001)),
        ("hot_lane".into(), bucket(6, 0.001)),
        ("hot_shop".into(), bucket(4, 0.001)),
    ];
    let l = limiter("local-mode", &s, "deny", true, frozen);
    for _ in 0..10 {
        assert!(l.acquire(b"shop", 1).unwrap().allowed);
    }
    assert!(!l.acquire(b"shop", 1).unwrap().allowed);
    set_live_in(&s, "local-mode", 1, (10, 0.001), Some("shadow"));
    let calls = s.stats().calls;
    s.advance(Duration::from_millis(249));
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(
        !d.allowed && !d.shadow,
        "denied locally: the change not seen yet"
    );
    assert_eq!(s.stats().calls, calls);
    s.advance(Duration::from_millis(1));
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(d.allowed && d.shadow && !d.would_allow, "{d:?}");
    // Shadow from then on, local denials included (they still spare the store).
    let calls = s.stats().calls;
    let d = l.acquire(b"shop", 1).unwrap();
    assert!(d.allowed && d.shadow && !d.would_allow);
    assert_eq!(s.stats().calls, calls, "a shadow local denial");
}
