//! The back-off after a failure (`store/pool.rs`) on the store's clock, a fake one here:
//! within `retry_interval` every call (and every health probe) answers at once with the
//! failure's cause, without touching the network, whether Valkey is down or back; after
//! it, Valkey is asked again. A real Valkey, killed and started again on the same socket;
//! no sleep (these were `HealthTest` and `FailureTest` waiting out the interval in PHP).

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use checkout_guard_config::{Endpoint, Engine};
use checkout_guard_runtime::clock::FakeClock;
use checkout_guard_runtime::{Store, StoreError, ValkeyStore};
use common::Valkey;

const KEY: &[u8] = b"{cg:backoff}:x";

/// A store on `v` with a back-off of `retry` on `clock`.
fn store(v: &Valkey, retry: Duration, clock: &FakeClock) -> ValkeyStore {
    ValkeyStore::new(
        Endpoint::parse(&v.url).unwrap(),
        Duration::from_secs(2),
        retry,
        Engine::Lua,
    )
    .with_clock(Arc::new(clock.clone()))
}

/// Connections the server accepted since it started (`INFO stats`), read on `admin`.
fn accepted(admin: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO").arg("stats").query(admin).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

/// Every call and probe during the back-off: answered at once with `cause` and what is
/// left of the interval, counted as no attempt.
fn held_back(s: &ValkeyStore, cause: &str, left: Duration, failures: u32, connects: u64) {
    assert_eq!(
        s.exists(KEY),
        Err(StoreError::Backoff {
            retry_in: left,
            cause: cause.to_string()
        })
    );
    for ping in [false, true] {
        let h = s.health(ping, KEY);
        assert!(!h.ok && !h.connected && h.circuit_open, "{h:?}");
        assert_eq!(h.retry_in, left);
        assert_eq!(h.last_error.as_deref(), Some(cause));
        assert_eq!((h.consecutive_failures, h.connects), (failures, connects));
    }
}

#[test]
fn within_the_retry_interval_nothing_is_sent_and_after_it_valkey_is_asked_again() {
    let mut v = Valkey::start();
    let clock = FakeClock::new();
    let retry = Duration::from_millis(300);
    let s = store(&v, retry, &clock);
    assert_eq!(s.exists(KEY), Ok(false));
    let up = s.health(true, KEY);
    assert!(up.ok && up.connected && !up.circuit_open, "{up:?}");
    assert_eq!(up.connects, 1);

    // Down: the call that finds out fails, and starts the back-off.
    v.stop();
    let Err(StoreError::Failed { cause, retry_in }) = s.exists(KEY) else {
        panic!("not a failure")
    };
    assert_eq!(retry_in, retry);
    assert!(!cause.is_empty());
    held_back(&s, &cause, retry, 1, 1);
    clock.advance(retry - Duration::from_nanos(1));
    held_back(&s, &cause, Duration::from_nanos(1), 1, 1);

    // Still down after the interval: one more attempt, one more failure, a new back-off.
    clock.advance(Duration::from_nanos(1));
    let Err(StoreError::Failed { cause, .. }) = s.exists(KEY) else {
        panic!("not asked again after the interval")
    };
    held_back(&s, &cause, retry, 2, 1);

    // Back, but within the interval: nothing is sent to it (it would answer).
    v.start_again();
    let mut admin = v.connection();
    let before = accepted(&mut admin);
    let ms = Duration::from_millis;
    held_back(&s, &cause, retry, 2, 1);
    clock.advance(ms(150));
    held_back(&s, &cause, ms(150), 2, 1);
    clock.advance(ms(149));
    held_back(&s, &cause, ms(1), 2, 1);
    assert_eq!(
        accepted(&mut admin),
        before,
        "no connection during the back-off"
    );

    // After it: asked again, and all is well.
    clock.advance(ms(1));
    assert_eq!(s.exists(KEY), Ok(false));
    let h = s.health(false, KEY);
    assert!(h.ok && h.connected && !h.circuit_open, "{h:?}");
    assert_eq!((h.consecutive_failures, h.connects), (0, 2));
    assert_eq!((h.last_error, h.retry_in), (None, Duration::ZERO));
    assert_eq!(accepted(&mut admin), before + 1);
}

/// A timeout's back-off holds back only the callers whose timeout is not longer than the
/// one that failed: a limiter with a longer timeout still tries, and its success ends
/// neither the back-off of the others nor its cause, which their calls keep answering
/// with until the interval has passed.
#[test]
fn a_timeouts_back_off_holds_back_shorter_timeouts_only_and_keeps_its_cause() {
    let v = Valkey::start();
    let clock = FakeClock::new();
    let retry = Duration::from_secs(1);
    let with_timeout = |timeout| {
        ValkeyStore::new(
            Endpoint::parse(&v.url).unwrap(),
            timeout,
            retry,
            Engine::Lua,
        )
        .with_clock(Arc::new(clock.clone()))
    };
    let short = with_timeout(Duration::from_millis(50));
    let long = with_timeout(Duration::from_secs(5));
    assert_eq!(short.exists(KEY), Ok(false));

    // Valkey holds every command for 300 ms: the short call times out.
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(300)
        .arg("ALL")
        .query::<()>(&mut v.connection())
        .unwrap();
    let Err(StoreError::Failed { cause, .. }) = short.exists(KEY) else {
        panic!("the short call did not time out")
    };
    assert!(cause.contains("timed out"), "{cause}");
    let backoff = StoreError::Backoff {
        retry_in: retry,
        cause: cause.clone(),
    };
    assert_eq!(short.exists(KEY), Err(backoff.clone()));

    // The long one tries, waits out the pause, and succeeds.
    assert_eq!(long.exists(KEY), Ok(false));
    assert!(!long.health(false, KEY).circuit_open);
    // The short ones are still held back, with the timeout as the cause.
    assert_eq!(short.exists(KEY), Err(backoff));
    assert!(short.health(false, KEY).circuit_open);
    clock.advance(retry);
    assert_eq!(short.exists(KEY), Ok(false));
    assert!(!short.health(false, KEY).circuit_open);
}
