//! Reservations (`acquire($shop, $tokens, $maxWaitSeconds)`): the wait asked for is
//! honoured to the microsecond.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{bucket, limiter, store};

/// LOW (review). `maxWaitSeconds` is turned into µs with `floor(seconds * 1e6)`: for
/// decimal waits whose product falls just below the integer (4.1 * 1e6 =
/// 4099999.9999999995, also 1.001, 2.01, ...) the wait honoured is 1 µs shorter than
/// the one asked for, and a reservation due in exactly that time is denied.
#[test]
fn a_decimal_max_wait_is_honoured_to_the_microsecond() {
    let s = store();
    // 41 tokens, one every 100 ms: the bucket refills in 4.1 s.
    let l = limiter(
        "max-wait-decimal",
        &s,
        "deny",
        false,
        vec![
            ("global".into(), bucket(41, 10.0)),
            ("hot_lane".into(), bucket(41, 10.0)),
            ("hot_shop".into(), bucket(41, 10.0)),
        ],
    );
    assert!(l.acquire(b"shop", 41).unwrap().allowed);
    // The next 41 tokens are there in exactly 4.1 s.
    let d = l.acquire_within(b"shop", 41, 4.1).unwrap().0;
    assert!(
        d.allowed,
        "due in exactly 4.1 s, asked to wait up to 4.1 s: {d:?}"
    );
    assert_eq!(d.waited, 4.1);
}
