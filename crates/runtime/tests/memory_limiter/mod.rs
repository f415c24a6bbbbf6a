//! What the acquire path's tests on the in-memory store share: a limiter of three buckets
//! (global 10, hot lane 6, hot shop 4, each refilling its capacity per second) on a
//! `MemoryStore` and the clock it follows, live limits written as `limiter set` writes
//! them, a local-denial limiter on its own fake clock, the shadow mode option.

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::Keys;
use checkout_guard_runtime::clock::FakeClock;
use checkout_guard_runtime::store::MemoryStore;
use checkout_guard_runtime::Limiter;
use std::sync::Arc;

pub fn bucket(capacity: i64, rate: f64) -> Value {
    Value::Map(vec![
        ("capacity".into(), Value::Int(capacity)),
        ("refill_per_second".into(), Value::Float(rate)),
    ])
}

/// A limiter named `name` (names keep the tests' process-wide caches apart) on `store`,
/// on the clock the store follows.
pub fn limiter(
    name: &str,
    store: &Arc<MemoryStore>,
    policy: &str,
    local_denials: bool,
    extra: Vec<(String, Value)>,
) -> Limiter {
    let mut entries = vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("global".into(), bucket(10, 10.0)),
        ("hot_lane".into(), bucket(6, 6.0)),
        ("hot_shop".into(), bucket(4, 4.0)),
        (
            "on_unavailable".into(),
            Value::Str(policy.as_bytes().to_vec()),
        ),
    ];
    for (k, v) in extra {
        entries.retain(|(e, _)| *e != k);
        entries.push((k, v));
    }
    let defaults = Defaults {
        local_denials,
        retry_interval_ms: 1000,
        ..Defaults::default()
    };
    let options = LimiterOptions::from_value(&Value::Map(entries), &defaults).unwrap();
    Limiter::with_store(options, store.clone(), Arc::new(store.clock()))
}

pub fn store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::new())
}

/// Writes live limits as `limiter set` does (hash and version), at the store's clock.
pub fn set_live(s: &MemoryStore, name: &str, n: u32, global: (i64, f64)) {
    set_live_in(s, name, n, global, None);
}

/// [`set_live`], with a live `mode` (`limiter set mode=...`) when given.
pub fn set_live_in(s: &MemoryStore, name: &str, n: u32, global: (i64, f64), mode: Option<&str>) {
    let keys = Keys::new(name);
    let value = format!("{}/{}", global.0, global.1);
    let mut fields: Vec<(&[u8], &[u8])> = vec![
        (b"global", value.as_bytes()),
        (b"by", b"test"),
        (b"at", b"0"),
    ];
    if let Some(m) = mode {
        fields.push((b"mode", m.as_bytes()));
    }
    s.set_hash(&keys.limits(), &fields);
    let version = format!("{n}-e{n}-{}", s.now_us());
    s.set(&keys.limits_version(), version.as_bytes());
}

/// A local-denial limiter of global 100 (1000/s), hot lane 50 (500/s) and a slow hot-shop
/// bucket of 2, on its own fake clock.
pub fn hot_limiter(name: &str) -> (Arc<MemoryStore>, FakeClock, Limiter) {
    let clock = FakeClock::new();
    let s = Arc::new(MemoryStore::on(&clock));
    let l = limiter(
        name,
        &s,
        "deny",
        true,
        vec![
            ("global".into(), bucket(100, 1000.0)),
            ("hot_lane".into(), bucket(50, 500.0)),
            ("hot_shop".into(), bucket(2, 0.01)),
        ],
    );
    (s, clock, l)
}

pub fn shadow() -> Vec<(String, Value)> {
    vec![("mode".into(), Value::Str(b"shadow".to_vec()))]
}
