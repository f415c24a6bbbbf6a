//! Review of reservations (`acquire_within`): what the provider sees. A reservation's
//! calls reach the provider when its sleep ends, not when it was decided; every bucket
//! promises that the calls it admitted, at the times they are *made*, stay within
//! `capacity + rate * t` over every interval.
//!
//! The store here is the in-memory reference on a fake clock, except that a reservation's
//! sleep does not move that clock: the caller sleeps in its own worker while every other
//! worker goes on (as in php-fpm). A reserved call is made at `decision time + waited`.
//! The random test runs on proptest (seed printed, `CG_MODEL_SEED` repeats it: see
//! `seeded/mod.rs`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::Keys;
use checkout_guard_runtime::clock::{Clock, FakeClock};
use checkout_guard_runtime::store::MemoryStore;
use checkout_guard_runtime::Limiter;
use proptest::prelude::*;

mod seeded;

/// The store's [`FakeClock`], except that a sleep leaves it alone (the sleeping worker is
/// one of many; the others go on deciding at the store's time).
#[derive(Debug)]
struct OneWorkerOfMany(FakeClock);

impl Clock for OneWorkerOfMany {
    fn monotonic_ns(&self) -> u64 {
        self.0.monotonic_ns()
    }
    fn wall(&self) -> SystemTime {
        self.0.wall()
    }
    fn sleep(&self, d: Duration) -> Duration {
        d
    }
}

fn bucket(capacity: i64, rate: f64) -> Value {
    Value::Map(vec![
        ("capacity".into(), Value::Int(capacity)),
        ("refill_per_second".into(), Value::Float(rate)),
    ])
}

fn unique(name: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{name}-{}", N.fetch_add(1, Ordering::Relaxed))
}

fn limiter(name: &str, mem: &Arc<MemoryStore>, extra: Vec<(String, Value)>) -> Limiter {
    let mut entries = vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("global".into(), bucket(10, 10.0)),
        ("on_unavailable".into(), Value::Str(b"throw".to_vec())),
    ];
    for (k, v) in extra {
        entries.retain(|(e, _)| *e != k);
        entries.push((k, v));
    }
    let defaults = Defaults {
        local_denials: false,
        ..Defaults::default()
    };
    let options = LimiterOptions::from_value(&Value::Map(entries), &defaults).unwrap();
    Limiter::with_store(options, mem.clone(), Arc::new(OneWorkerOfMany(mem.clock())))
}

/// The calls the provider sees: (µs on the store's clock, tokens).
#[derive(Default)]
struct Calls(Vec<(i64, i64)>);

impl Calls {
    /// One acquire (a reservation when `wait` > 0): its tokens are made as calls when the
    /// caller wakes up.
    fn acquire(&mut self, l: &Limiter, mem: &MemoryStore, shop: &[u8], n: i64, wait: f64) -> bool {
        let d = l.acquire_within(shop, n, wait).unwrap().0;
        if d.allowed {
            let at = mem.now_us() + (d.waited * 1e6).round() as i64;
            self.0.push((at, n));
        }
        d.allowed
    }

    /// The first interval `[a, b]` (from `from` on) in which more tokens were called than
    /// a bucket of `capacity` refilling `rate`/s allows: `capacity + rate * (b - a)`.
    fn excess(&self, capacity: i64, rate: f64, from: i64) -> Option<String> {
        let mut calls: Vec<_> = self.0.iter().filter(|c| c.0 >= from).copied().collect();
        calls.sort();
        for (i, &(a, _)) in calls.iter().enumerate() {
            let mut sum = 0;
            for &(b, n) in &calls[i..] {
                sum += n;
                let allowed = capacity as f64 + rate * (b - a) as f64 / 1e6;
                if sum as f64 > allowed + 1e-9 {
                    // Every call at instant b counts: report them all.
                    let within: i64 = calls
                        .iter()
                        .filter(|c| c.0 >= a && c.0 <= b)
                        .map(|c| c.1)
                        .sum();
                    return Some(format!(
                        "{within} tokens called in [{:.3} s, {:.3} s], at most {allowed} allowed",
                        (a - from) as f64 / 1e6,
                        (b - from) as f64 / 1e6
                    ));
                }
            }
        }
        None
    }
}

/// HIGH. A hot shop's reservation waits for its slowest bucket (its own), but takes the
/// tokens of the global bucket (and of the hot lane) *now*: the global bucket counts the
/// reserved calls at the decision, while they are made up to `maxWaitSeconds` later.
/// When the reservation wakes up, the global bucket has refilled as if those calls had
/// been made long ago, and hands its full capacity to other shops at the very instant
/// the reserved calls are made: the provider sees capacity + the reserved tokens at once.
#[test]
fn a_reservation_waiting_for_its_shop_bucket_keeps_the_global_envelope() {
    let mem = Arc::new(MemoryStore::new());
    let l = limiter(
        &unique("envelope-hot"),
        &mem,
        vec![
            ("hot_lane".into(), bucket(6, 6.0)),
            ("hot_shop".into(), bucket(4, 4.0)),
            (
                "hot_shops".into(),
                Value::List(vec![Value::Str(b"h".to_vec())]),
            ),
        ],
    );
    let start = mem.now_us();
    let mut calls = Calls::default();
    // t = 0: the hot shop spends its own bucket (4), then reserves 4 more: its own bucket
    // has them in 1 s; global holds them now (6 left) and lends them at once.
    assert!(calls.acquire(&l, &mem, b"h", 4, 0.0));
    assert!(calls.acquire(&l, &mem, b"h", 4, 1.0), "reserved within 1 s");
    // Other shops ask for what global has left (2).
    calls.acquire(&l, &mem, b"o", 2, 0.0);
    // t = 1 s: global is full again (10 tokens); other shops take all of it, at the very
    // instant the reserved 4 calls are made.
    mem.advance(Duration::from_secs(1));
    for _ in 0..10 {
        calls.acquire(&l, &mem, b"o", 1, 0.0);
    }
    assert_eq!(
        calls.excess(10, 10.0, start),
        None,
        "global (10 tokens, 10/s) as the provider sees it; calls {:?}",
        calls
            .0
            .iter()
            .map(|(t, n)| ((t - start) as f64 / 1e6, *n))
            .collect::<Vec<_>>()
    );
}

/// One step of random traffic: the clock moving (ms), or an acquire by a hot shop (0, 1)
/// or another (2) of 1 to 3 tokens, waiting up to 0, 0.25 or 1 s.
#[derive(Debug, Clone)]
enum Step {
    Advance(u64),
    Acquire { who: usize, n: i64, wait: f64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0..150u64).prop_map(Step::Advance),
        3 => (0..3usize, 1..=3i64, prop::sample::select(vec![0.0, 0.0, 0.25, 1.0]))
            .prop_map(|(who, n, wait)| Step::Acquire { who, n, wait }),
    ]
}

/// The property behind the test above, on random traffic: hot and other shops, plain
/// acquires and reservations, the clock moving in small steps (no live change). Every
/// bucket's envelope, at the times the calls are made: global over all calls, the hot
/// lane over the hot shops' calls, each hot shop's bucket over its own.
#[test]
fn random_traffic_with_reservations_stays_within_every_buckets_envelope() {
    seeded::run(
        "random_traffic_with_reservations_stays_within_every_buckets_envelope",
        40,
        prop::collection::vec(step(), 0..=200),
        |steps| {
            let mem = Arc::new(MemoryStore::new());
            let hot: [&[u8]; 2] = [b"h1", b"h2"];
            let l = limiter(
                &unique("envelope-random"),
                &mem,
                vec![
                    ("hot_lane".into(), bucket(6, 6.0)),
                    ("hot_shop".into(), bucket(4, 4.0)),
                    (
                        "hot_shops".into(),
                        Value::List(hot.iter().map(|h| Value::Str(h.to_vec())).collect()),
                    ),
                ],
            );
            let start = mem.now_us();
            let (mut all, mut lane) = (Calls::default(), Calls::default());
            let mut own = [Calls::default(), Calls::default()];
            for step in steps {
                let (who, n, wait) = match step {
                    Step::Advance(ms) => {
                        mem.advance(Duration::from_millis(ms));
                        continue;
                    }
                    Step::Acquire { who, n, wait } => (who, n, wait),
                };
                let shop: &[u8] = if who < 2 { hot[who] } else { b"other" };
                let d = l.acquire_within(shop, n, wait).unwrap().0;
                if d.allowed {
                    let call = (mem.now_us() + (d.waited * 1e6).round() as i64, n);
                    all.0.push(call);
                    if who < 2 {
                        lane.0.push(call);
                        own[who].0.push(call);
                    }
                }
            }
            for (what, calls, cap, rate) in [
                ("global", &all, 10, 10.0),
                ("hot_lane", &lane, 6, 6.0),
                ("hot_shop h1", &own[0], 4, 4.0),
                ("hot_shop h2", &own[1], 4, 4.0),
            ] {
                if let Some(e) = calls.excess(cap, rate, start) {
                    return Err(format!("{what}: {e}"));
                }
            }
            Ok(())
        },
    );
}

/// HIGH. A live change forgives every reservation in flight: a bucket written with its
/// TAT beyond `now + tolerance` (tokens taken from the future) is carried over to the new
/// limits with its level clamped at 0 tokens (`effective_tat`, `carry.lua`), so the
/// reserved calls, still to be made, are forgotten. Here the change even keeps the refill
/// time (10/10 to 20/20, a raise): at the instant the 10 reserved calls are made the new
/// bucket hands out its whole capacity (20) as well.
#[test]
fn a_live_change_carries_the_tokens_reservations_took_from_the_future() {
    let mem = Arc::new(MemoryStore::new());
    let name = unique("envelope-live");
    let l = limiter(&name, &mem, vec![]);
    let mut calls = Calls::default();
    assert!(calls.acquire(&l, &mem, b"a", 10, 0.0));
    assert!(calls.acquire(&l, &mem, b"a", 10, 1.0), "10 more within 1 s");
    // The operator raises the limits (`limiter set`): the change is read by the next call.
    let change = mem.now_us();
    let keys = Keys::new(&name);
    mem.set_hash(
        &keys.limits(),
        &[(b"global", b"20/20"), (b"by", b"test"), (b"at", b"0")],
    );
    mem.set(&keys.limits_version(), format!("1-e1-{change}").as_bytes());
    // At t = 1 s the reserved 10 calls are made; others ask for what the bucket holds.
    mem.advance(Duration::from_secs(1));
    for _ in 0..20 {
        calls.acquire(&l, &mem, b"b", 1, 0.0);
    }
    // The new bucket: 20 tokens, 20/s. What the reservations took is owed to it.
    assert_eq!(
        calls.excess(20, 20.0, change),
        None,
        "global after the change (20 tokens, 20/s) as the provider sees it"
    );
}
