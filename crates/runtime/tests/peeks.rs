//! `peek()`: answers as acquire() would, takes nothing, writes nothing, also where the
//! `auto_hot` window cannot be read.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

use checkout_guard_config::Value;
use checkout_guard_model::{Keys, Reason};
use checkout_guard_runtime::store::Fault;
use std::time::Duration;

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{limiter, store};

#[test]
fn a_peek_answers_as_acquire_would_and_takes_nothing() {
    let s = store();
    let l = limiter("peek", &s, "deny", false, vec![]);
    for i in 0..10 {
        let peeked = l.peek(b"shop", 1).unwrap();
        let taken = l.acquire(b"shop", 1).unwrap();
        assert_eq!(peeked, taken, "call {i}");
    }
    let keys_before = s.keys();
    let d = l.peek(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
    assert_eq!(s.keys(), keys_before, "nothing written");
    // Several peeks in a row take nothing either.
    s.advance(Duration::from_millis(100));
    for _ in 0..5 {
        assert!(l.peek(b"shop", 1).unwrap().allowed);
    }
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    assert!(!l.acquire(b"shop", 1).unwrap().allowed);
    // When the store cannot be asked, the policy answers a peek as it answers acquire().
    s.inject(Fault::ErrorReply("ERR injected".into()));
    assert_eq!(l.peek(b"shop", 1).unwrap().reason, Reason::Unavailable);
}

/// Where the `auto_hot` window cannot be read (a key of another type: WRONGTYPE in the
/// script, the module and this store alike), a peek fails as the acquire() after it does.
#[test]
fn a_peek_answers_as_acquire_would_when_the_auto_hot_window_cannot_be_read() {
    let s = store();
    let auto = Value::Map(vec![
        ("window_seconds".into(), Value::Int(10)),
        ("share".into(), Value::Float(0.5)),
        ("ttl_seconds".into(), Value::Int(60)),
        ("min_tokens".into(), Value::Int(2)),
    ]);
    let l = limiter(
        "peek-window",
        &s,
        "deny",
        false,
        vec![("auto_hot".into(), auto)],
    );
    let prefix = Keys::new("peek-window").auto_hot_prefix();
    let win = s.now_us().div_euclid(10_000_000);
    for w in [win - 1, win] {
        s.set(
            &[&prefix[..], w.to_string().as_bytes()].concat(),
            b"not a hash",
        );
    }
    let peeked = l.peek(b"shop", 1).unwrap();
    let taken = l.acquire(b"shop", 1).unwrap();
    assert_eq!(
        (peeked.allowed, peeked.reason),
        (taken.allowed, taken.reason),
        "peek and the acquire() right after it"
    );
}
