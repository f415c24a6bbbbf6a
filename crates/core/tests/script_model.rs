//! The Valkey script and the Rust model must decide identically: both are driven with the
//! same random sequences of (time, shop, tokens, hot marks) and every reply is compared.

mod common;

use std::collections::{HashMap, HashSet};

use checkout_guard_core::limiter::script::{decide_source, decide_source_with_test_clock};
use checkout_guard_core::limiter::{
    step, BucketSet, BucketSpec, Decision, Keys, Lane, StepReply, StoredState,
};
use common::{Rng, Valkey};

fn random_buckets(rng: &mut Rng) -> BucketSet {
    const RATES: [f64; 7] = [0.5, 1.0, 3.0, 7.5, 10.0, 33.3, 100.0];
    let g_cap = rng.range(1, 30);
    let g_rate = RATES[rng.range(0, 6) as usize];
    let global = BucketSpec::new("global", g_cap, g_rate).unwrap();
    // Hot buckets may not exceed global's capacity or rate.
    let g_rate_idx = RATES.iter().position(|&r| r == g_rate).unwrap() as i64;
    let smaller = |name: &str, rng: &mut Rng| {
        let cap = rng.range(1, g_cap);
        let rate = RATES[rng.range(0, g_rate_idx) as usize];
        BucketSpec::new(name, cap, rate).unwrap()
    };
    let hot_lane = rng.chance(70).then(|| smaller("hot_lane", rng));
    let hot_shop = rng.chance(70).then(|| smaller("hot_shop", rng));
    BucketSet {
        global,
        hot_lane,
        hot_shop,
    }
}

/// The model's view of the store, keyed like Valkey.
#[derive(Default)]
struct ModelStore {
    global: Option<i64>,
    lane: Option<i64>,
    shops: HashMap<usize, i64>,
    marked: HashSet<usize>,
}

impl ModelStore {
    fn state(&self, shop: usize) -> StoredState {
        StoredState {
            tats: [self.global, self.lane, self.shops.get(&shop).copied()],
            marked_hot: self.marked.contains(&shop),
        }
    }

    fn store(&mut self, shop: usize, s: StoredState) {
        self.global = s.tats[0];
        self.lane = s.tats[1];
        if let Some(t) = s.tats[2] {
            self.shops.insert(shop, t);
        }
    }
}

#[test]
fn script_and_model_decide_identically_on_random_sequences() {
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = redis::Script::new(&decide_source_with_test_clock());
    let shops: [&[u8]; 4] = [b"shop-a", b"shop-b", b"{shop}:c", b"\xffshop d"];
    let mut reasons_seen = [0u32; 4];
    let mut steps = 0;
    for seed in 1..=40u64 {
        let mut rng = Rng::new(seed);
        let set = random_buckets(&mut rng);
        let keys = Keys::new(&format!("seed{seed}"));
        let static_hot: Vec<bool> = shops.iter().map(|_| rng.chance(25)).collect();
        let mut model = ModelStore::default();
        let mut now: i64 = 1_800_000_000_000_000 + rng.range(0, 1_000_000_000);
        for _ in 0..600 {
            let shop = rng.range(0, shops.len() as i64 - 1) as usize;
            if rng.chance(5) {
                // Mark or unmark the shop hot, in Valkey and in the model.
                let flag = keys.hot_flag(shops[shop]);
                if model.marked.insert(shop) {
                    redis::cmd("SET")
                        .arg(&flag)
                        .arg(1)
                        .arg("EX")
                        .arg(3600)
                        .query::<()>(&mut conn)
                        .unwrap();
                } else {
                    model.marked.remove(&shop);
                    redis::cmd("DEL").arg(&flag).query::<()>(&mut conn).unwrap();
                }
            }
            // Bursts at one instant, short gaps, and long idle stretches.
            now += match rng.range(0, 9) {
                0..=2 => 0,
                3..=7 => rng.range(1, 300_000),
                _ => rng.range(300_000, 5_000_000),
            };
            let tokens = rng.range(1, set.min_capacity().min(5));
            let (want, next) = step(&set, &model.state(shop), now, tokens, static_hot[shop]);
            model.store(shop, next);

            let mut inv = script.prepare_invoke();
            inv.key(keys.global())
                .key(keys.hot_lane())
                .key(keys.hot_shop(shops[shop]))
                .key(keys.hot_flag(shops[shop]))
                .key(keys.limits_version())
                .key(keys.auto_hot_prefix())
                .key(keys.settings())
                .arg(tokens)
                .arg(if static_hot[shop] { "1" } else { "0" });
            for lane in Lane::ALL {
                let (i, t) = set
                    .get(lane)
                    .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
                inv.arg(i).arg(t);
            }
            // No live limits, no auto-hot, nothing to publish; then the test clock.
            inv.arg(0)
                .arg(shops[shop])
                .arg(0)
                .arg(0)
                .arg(0)
                .arg(0)
                .arg("");
            inv.arg(now);
            let got: Vec<i64> = inv.invoke(&mut conn).unwrap();
            let got = StepReply::from_ints(&got).expect("reply shape");
            assert_eq!(
                got, want,
                "seed {seed}, shop {shop}, tokens {tokens}, buckets {set:?}"
            );
            // Same reply, same decision; and the decision is self-consistent.
            let d = Decision::from_reply(&set, tokens, &got);
            assert_eq!(d.allowed, d.retry_after == 0.0, "{d:?}");
            reasons_seen[got.reason as usize] += 1;
            steps += 1;
        }
    }
    // The sequences must exercise every outcome, or the comparison proves little.
    for (reason, n) in reasons_seen.iter().enumerate() {
        assert!(
            *n > 20,
            "reason {reason} seen only {n} times in {steps} steps: {reasons_seen:?}"
        );
    }
}

#[test]
fn production_script_uses_valkeys_clock_and_lets_idle_buckets_expire() {
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = redis::Script::new(&decide_source());
    let set = BucketSet {
        global: BucketSpec::new("global", 10, 5.0).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let keys = Keys::new("clock");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let before = secs * 1_000_000 + micros;
    let mut inv = script.prepare_invoke();
    inv.key(keys.global())
        .key(keys.hot_lane())
        .key(keys.hot_shop(b"s"))
        .key(keys.hot_flag(b"s"))
        .key(keys.limits_version())
        .key(keys.auto_hot_prefix())
        .key(keys.settings())
        .arg(4)
        .arg("0");
    let g = set.global;
    inv.arg(g.interval_us())
        .arg(g.tolerance_us())
        .arg(0)
        .arg(0)
        .arg(0)
        .arg(0);
    inv.arg(0).arg("s").arg(0).arg(0).arg(0).arg(0).arg("");
    let reply = StepReply::from_ints(&inv.invoke::<Vec<i64>>(&mut conn).unwrap()).unwrap();
    assert_eq!(reply.reason, 0);
    assert!(
        reply.now_us >= before && reply.now_us - before < 5_000_000,
        "{reply:?} vs {before}"
    );
    // Four tokens at 5/s: the bucket is full again 0.8 s later, and the key expires then.
    assert_eq!(reply.tats[0], reply.now_us + 800_000);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(keys.global())
        .query(&mut conn)
        .unwrap();
    assert!((700..=801).contains(&pttl), "PTTL {pttl}");
    assert!(!redis::cmd("EXISTS")
        .arg(keys.hot_shop(b"s"))
        .query::<bool>(&mut conn)
        .unwrap());
    std::thread::sleep(std::time::Duration::from_millis(900));
    assert!(!redis::cmd("EXISTS")
        .arg(keys.global())
        .query::<bool>(&mut conn)
        .unwrap());
}
