//! Automatic hot shops, live limits and the on-call operations, against a real Valkey.

// This test uses the Valkey helper only (not the random generator).
#[allow(dead_code)]
mod common;

use std::time::Duration;

use checkout_guard_cli::admin::Admin;
use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::{Lane, Reason};
use checkout_guard_runtime::Limiter;

fn bucket(capacity: i64, rate: f64) -> Value {
    Value::Map(vec![
        ("capacity".into(), Value::Int(capacity)),
        ("refill_per_second".into(), Value::Float(rate)),
    ])
}

fn limiter(url: &str, name: &str, extra: Vec<(String, Value)>) -> Limiter {
    let mut entries = vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("url".into(), Value::Str(url.as_bytes().to_vec())),
        ("global".into(), bucket(10_000, 0.001)),
        ("hot_shop".into(), bucket(5, 0.001)),
        ("timeout_ms".into(), Value::Int(1000)),
    ];
    entries.extend(extra);
    Limiter::new(LimiterOptions::from_value(&Value::Map(entries), &Defaults::default()).unwrap())
}

/// auto_hot with one window for the whole test (no boundary dilutes a share).
fn auto_hot(min_tokens: i64) -> Vec<(String, Value)> {
    vec![(
        "auto_hot".into(),
        Value::Map(vec![
            ("window_seconds".into(), Value::Int(600)),
            ("min_tokens".into(), Value::Int(min_tokens)),
        ]),
    )]
}

/// `others` ordinary shops then `mine` calls of `shop`; returns how many of `shop`'s
/// calls made it hot.
fn round(l: &Limiter, others: usize, shop: &str, mine: usize, tag: usize) -> usize {
    let mut became = 0;
    for j in 0..others {
        let (d, n) = l
            .acquire_noticed(format!("ordinary-{tag}-{j}").as_bytes(), 1)
            .unwrap();
        assert!(d.allowed);
        assert!(n.became_hot.is_none(), "an ordinary shop became hot");
    }
    for _ in 0..mine {
        let (_, n) = l.acquire_noticed(shop.as_bytes(), 1).unwrap();
        became += usize::from(n.became_hot.is_some());
    }
    became
}

#[test]
fn detection_crossing_just_under_and_a_short_burst() {
    let valkey = common::Valkey::start();
    // Crossing: 2 of every 5 tokens (40% > 30%), hot at its 10th token (min_tokens).
    let l = limiter(&valkey.url, "crossing", auto_hot(10));
    let became: usize = (0..5).map(|i| round(&l, 3, "flood", 2, i)).sum();
    assert_eq!(became, 1, "made hot exactly once");
    assert!(l.is_hot(b"flood").unwrap());
    let reasons: Vec<Reason> = (0..7)
        .map(|_| l.acquire(b"flood", 1).unwrap().reason)
        .collect();
    assert_eq!(reasons[..5], [Reason::Allowed; 5]);
    assert_eq!(
        reasons[5..],
        [Reason::HotShop; 2],
        "its own bucket applies now"
    );

    // Just under: 1 of every 4 tokens (25%), and 29 of 100.
    let l = limiter(&valkey.url, "under", auto_hot(10));
    let became: usize = (0..40).map(|i| round(&l, 3, "steady", 1, i)).sum();
    assert_eq!(became, 0);
    let l = limiter(&valkey.url, "under29", auto_hot(10));
    assert_eq!(round(&l, 71, "close", 29, 0), 0);
    assert!(!l.is_hot(b"close").unwrap());

    // A burst shorter than the window: all the traffic while it lasts, 23% of the window.
    let l = limiter(&valkey.url, "burst", auto_hot(10));
    assert_eq!(round(&l, 100, "burst", 30, 0), 0);
    assert_eq!(
        round(&l, 0, "burst", 14, 1),
        1,
        "sustained: 44 of 144 crosses 30%"
    );
}

#[test]
fn live_limits_are_picked_up_validated_and_recorded() {
    let valkey = common::Valkey::start();
    let l = limiter(&valkey.url, "live", vec![]);
    let worker2 = limiter(&valkey.url, "live", vec![]);
    assert_eq!(l.acquire(b"s", 1).unwrap().remaining, 9_999);
    let admin = Admin::new(&valkey.url, "live", Duration::from_secs(2)).unwrap();

    // Refused: a hot_shop above global, as the constructor refuses it. Nothing written.
    let e = admin
        .set(&[(Lane::Global, Some((3, 0.001)))], "t")
        .unwrap_err();
    assert!(e.contains("hot_shop.capacity"), "{e}");
    assert!(e.contains("nothing written"), "{e}");
    let e = admin
        .set(&[(Lane::HotLane, Some((3, 1.0)))], "t")
        .unwrap_err();
    assert!(e.contains("not configured"), "{e}");

    let done = admin
        .set(&[(Lane::Global, Some((50, 0.001)))], "bob")
        .unwrap();
    assert_eq!(done.version, 1);
    assert_eq!(done.old, "global=10000/0.001 hot_shop=5/0.001");
    assert_eq!(done.new, "global=50/0.001 hot_shop=5/0.001");
    assert_eq!(
        done.warnings.len(),
        1,
        "capacity lowered: {:?}",
        done.warnings
    );
    assert!(done.warnings[0].contains("global capacity lowered from 10000 to 50"));
    // The next call decides with it and reports the change, once per process: a later
    // limiter object of the process (the next request) already knows it.
    // 9,999 tokens left, clamped to the new capacity of 50, one taken.
    let (d, n) = l.acquire_noticed(b"s", 1).unwrap();
    assert_eq!(d.remaining, 49);
    let c = n.limits_change.expect("change reported");
    assert_eq!((c.version, c.by.as_str(), c.error), (1, "bob", None));
    let (d, n) = worker2.acquire_noticed(b"s", 1).unwrap();
    assert_eq!(d.remaining, 48);
    assert!(n.limits_change.is_none(), "reported once per process");
    let (_, n) = l.acquire_noticed(b"s", 1).unwrap();
    assert!(n.limits_change.is_none());

    let status = admin.status("no-such-stream", 60).unwrap();
    assert_eq!(status.live.version, 1);
    assert_eq!(status.levels, vec![(Lane::Global, 47, 50)]);
    assert_eq!(status.changes.len(), 1);
    assert_eq!(status.changes[0].by, "bob");

    // A writer that read version 0 (someone else wrote version 1 meanwhile) is refused.
    let mut conn = valkey.connection();
    let keys = checkout_guard_model::Keys::new("live");
    let set_limits = &*checkout_guard_connection::scripts::SET_LIMITS;
    let stale: redis::RedisResult<i64> = set_limits
        .key(keys.limits())
        .key(keys.limits_version())
        .key(keys.changes())
        .arg(0)
        .arg("carol")
        .arg(0)
        .arg("old")
        .arg("new")
        .arg("global")
        .arg("1 1")
        .invoke(&mut conn);
    let e = stale.unwrap_err().to_string();
    assert!(e.contains("changed meanwhile"), "{e}");
    assert_eq!(admin.status("none", 60).unwrap().live.version, 1);

    // Back to the constructor's values: the 47 tokens carry over, nothing more.
    let done = admin.set(&[(Lane::Global, None)], "bob").unwrap();
    assert!(done.warnings.is_empty(), "{:?}", done.warnings);
    assert_eq!(l.acquire(b"s", 1).unwrap().remaining, 46);
}

/// `limiter set mode=...`: the mode rides with the live limits (its own version), a bucket
/// change keeps it, `mode=default` drops it and keeps the buckets; `status` shows it.
#[test]
fn a_live_mode_is_set_kept_over_bucket_changes_and_dropped_by_default() {
    use checkout_guard_config::Mode;
    let valkey = common::Valkey::start();
    // Every decision asks Valkey (a worker denying locally finds a change within 250 ms:
    // shadow_mode.rs, a_live_mode_reaches_a_worker_denying_locally_within_250_ms).
    let options = limiter(&valkey.url, "mode", vec![]).options().clone();
    let l = Limiter::new(LimiterOptions {
        local_denials: false,
        ..options
    });
    assert!(l.acquire(b"s", 1).unwrap().allowed);
    let admin = Admin::new(&valkey.url, "mode", Duration::from_secs(2)).unwrap();
    assert_eq!(admin.status("none", 60).unwrap().mode, Some(Mode::Enforce));
    let done = admin
        .set_with_mode(
            &[(Lane::Global, Some((6, 0.001)))],
            Some(Some(Mode::Shadow)),
            "t",
        )
        .unwrap();
    assert_eq!(done.old, "global=10000/0.001 hot_shop=5/0.001 mode=default");
    assert_eq!(done.new, "global=6/0.001 hot_shop=5/0.001 mode=shadow");
    // 9,999 tokens clamped to 6: six admitted, then would-be denials let through.
    let got: Vec<_> = (0..8).map(|_| l.acquire(b"s", 1).unwrap()).collect();
    assert!(got.iter().all(|d| d.allowed && d.shadow));
    assert_eq!(
        got.iter().map(|d| d.would_allow).collect::<Vec<_>>(),
        [true, true, true, true, true, true, false, false]
    );
    assert_eq!(got[7].reason, Reason::Global);
    let st = admin.status("none", 60).unwrap();
    assert_eq!(
        (st.mode, st.live.mode),
        (Some(Mode::Shadow), Some(Mode::Shadow))
    );
    // A bucket change keeps the mode.
    admin.set(&[(Lane::Global, Some((7, 0.001)))], "t").unwrap();
    assert_eq!(
        admin.status("none", 60).unwrap().live.mode,
        Some(Mode::Shadow)
    );
    assert!(l.acquire(b"s", 1).unwrap().shadow);
    // mode=default: back to the option (enforce), the live buckets stay.
    let done = admin.set_with_mode(&[], Some(None), "t").unwrap();
    assert_eq!(done.new, "global=7/0.001 hot_shop=5/0.001 mode=default");
    let d = l.acquire(b"s", 1).unwrap();
    assert!(
        !d.allowed && !d.shadow && d.reason == Reason::Global,
        "{d:?}"
    );
    let st = admin.status("none", 60).unwrap();
    assert_eq!((st.mode, st.live.mode), (Some(Mode::Enforce), None));
    assert_eq!(st.live.overrides[Lane::Global as usize], Some((7, 0.001)));
    // A worker whose option is shadow publishes it: status says so without a live mode.
    let s = limiter(
        &valkey.url,
        "mode-option",
        vec![("mode".into(), Value::Str(b"shadow".to_vec()))],
    );
    assert!(s.acquire(b"s", 1).unwrap().shadow);
    let admin = Admin::new(&valkey.url, "mode-option", Duration::from_secs(2)).unwrap();
    let st = admin.status("none", 60).unwrap();
    assert_eq!((st.mode, st.live.mode), (Some(Mode::Shadow), None));
    assert!(st.settings.unwrap().ends_with(" mode=shadow"));
}

#[test]
fn hot_marks_from_the_admin_side() {
    let valkey = common::Valkey::start();
    let l = limiter(&valkey.url, "marks", vec![]);
    l.acquire(b"s", 1).unwrap();
    let admin = Admin::new(&valkey.url, "marks", Duration::from_secs(2)).unwrap();
    admin.hot(b"shop:{x} y", 60).unwrap();
    assert!(l.is_hot(b"shop:{x} y").unwrap());
    let st = admin.status("none", 60).unwrap();
    assert_eq!(st.hot.len(), 1);
    assert_eq!(
        (st.hot[0].0.as_slice(), st.hot[0].1.as_str()),
        (&b"shop:{x} y"[..], "marked")
    );
    assert!(st.hot[0].2 > 55_000 && st.hot[0].2 <= 60_000);
    assert!(admin.unhot(b"shop:{x} y").unwrap());
    assert!(!admin.unhot(b"shop:{x} y").unwrap());
    assert!(!l.is_hot(b"shop:{x} y").unwrap());
    assert!(admin.hot(b"", 60).unwrap_err().contains("shopId"));
    assert!(admin.hot(b"s", 0).unwrap_err().contains("ttl"));
    assert!(Admin::new(&valkey.url, "no spaces", Duration::from_secs(1))
        .err()
        .unwrap()
        .contains("name"));
}

/// A value no engine reads in the global bucket's key (Symfony's serialized window, a
/// number beyond 2^53): `status` shows the bucket full, as the next decision reads it; a
/// live change carries it over as a full bucket and replaces it; the decision after it
/// takes from a full bucket.
#[test]
fn a_foreign_bucket_value_is_a_full_bucket_for_status_and_live_changes() {
    let valkey = common::Valkey::start();
    let mut conn = valkey.connection();
    let keys = checkout_guard_model::Keys::new("foreign");
    let l = limiter(&valkey.url, "foreign", vec![]);
    assert_eq!(l.acquire(b"s", 1).unwrap().remaining, 9_999);
    let admin = Admin::new(&valkey.url, "foreign", Duration::from_secs(2)).unwrap();
    for value in [
        &br#"O:55:"Symfony\Component\RateLimiter\Tests\Resources\DummyWindow":0:{}"#[..],
        b"9007199254740992",
        b"1800000000000000junk",
    ] {
        redis::cmd("SET")
            .arg(keys.global())
            .arg(value)
            .query::<()>(&mut conn)
            .unwrap();
        let st = admin.status("none", 60).unwrap();
        assert_eq!(st.levels, vec![(Lane::Global, 10_000, 10_000)], "{value:?}");
    }
    admin
        .set(&[(Lane::Global, Some((50, 0.001)))], "t")
        .unwrap();
    let left: Option<Vec<u8>> = redis::cmd("GET")
        .arg(keys.global())
        .query(&mut conn)
        .unwrap();
    assert_ne!(
        left.as_deref(),
        Some(&b"1800000000000000junk"[..]),
        "replaced"
    );
    assert_eq!(
        admin.status("none", 60).unwrap().levels,
        vec![(Lane::Global, 50, 50)]
    );
    assert_eq!(l.acquire(b"s", 1).unwrap().remaining, 49);
}
