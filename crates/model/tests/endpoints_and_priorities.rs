//! Endpoints and priority classes in the model (docs/endpoints.md), model-based: random
//! sequences of operations (time passing; acquires and reservations of hot and ordinary
//! shops, with and without an endpoint, of every priority class) decided by
//! `model::step` and by a reference written differently (each bucket's credit in µs,
//! refilled and spent, no TATs), compared decision by decision: allowed, reason,
//! `retryAfter` (to the µs), `remaining`, a reservation's wait. The seed is printed
//! (`CG_ENDPOINT_SEED=<n>` replays one); a failing sequence is shrunk (operations removed
//! while it still fails) and printed at its shortest.

use std::collections::HashMap;

use checkout_guard_model::endpoints::reserve_us;
use checkout_guard_model::step::reservation_wait_with;
use checkout_guard_model::{
    step, BucketSet, BucketSpec, Decision, Reason, StepInput, StoredBucket, StoredState,
};

const T0: i64 = 1_800_000_000_000_000;
/// The classes' shares (ppm): critical, normal, background.
const SHARES: [i64; 3] = [0, 200_000, 500_000];
/// Shops 0 and 1 are listed hot.
const SHOPS: usize = 4;

fn set() -> BucketSet {
    BucketSet {
        global: BucketSpec::new("global", 20, 20.0).unwrap(),
        hot_lane: Some(BucketSpec::new("hot_lane", 10, 10.0).unwrap()),
        hot_shop: Some(BucketSpec::new("hot_shop", 5, 5.0).unwrap()),
    }
}

fn endpoints() -> [BucketSpec; 2] {
    [
        BucketSpec::new("endpoints.confirm", 8, 8.0).unwrap(),
        BucketSpec::new("endpoints.items", 4, 2.5).unwrap(),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Advance(i64),
    Acquire {
        shop: usize,
        endpoint: Option<usize>,
        class: usize,
        tokens: i64,
        max_wait_us: i64,
    },
}

/// What one decision answered, compared between the two.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    reason: &'static str,
    retry_after_us: i64,
    remaining: i64,
    wait_us: i64,
}

/// The model under test: `step` over stored buckets.
#[derive(Default)]
struct Model {
    global: Option<StoredBucket>,
    lane: Option<StoredBucket>,
    shops: HashMap<usize, StoredBucket>,
    endpoints: HashMap<usize, StoredBucket>,
}

impl Model {
    fn decide(&mut self, now: i64, op: &Op) -> Answer {
        let Op::Acquire {
            shop,
            endpoint,
            class,
            tokens,
            max_wait_us,
        } = *op
        else {
            unreachable!()
        };
        let set = set();
        let eps = endpoints();
        let spec = endpoint.map(|e| &eps[e]);
        let stored = StoredState {
            buckets: [self.global, self.lane, self.shops.get(&shop).copied()],
            endpoint: endpoint.and_then(|e| self.endpoints.get(&e).copied()),
            ..Default::default()
        };
        let input = StepInput {
            static_hot: shop < 2,
            max_wait_us,
            endpoint: spec,
            share_ppm: SHARES[class],
            ..StepInput::new(now, tokens)
        };
        let (reply, next) = step(&set, &stored, &input);
        if reply.reason.is_some() {
            assert_eq!(next, stored, "a denial takes nothing");
        }
        self.global = next.buckets[0];
        self.lane = next.buckets[1];
        if let Some(b) = next.buckets[2] {
            self.shops.insert(shop, b);
        }
        if let (Some(e), Some(b)) = (endpoint, next.endpoint) {
            self.endpoints.insert(e, b);
        }
        let d = Decision::from_reply_with(&set, spec, SHARES[class], tokens, &reply);
        Answer {
            reason: d.reason.as_str(),
            retry_after_us: (d.retry_after * 1e6).round() as i64,
            remaining: d.remaining,
            wait_us: if d.allowed {
                reservation_wait_with(&set, spec, SHARES[class], &reply)
            } else {
                0
            },
        }
    }
}

/// The reference: each bucket's credit (µs) as of `at`, refilled up to the bucket's
/// tolerance as time passes; a class must leave `reserve_us` of every bucket.
#[derive(Default)]
struct Reference {
    credits: HashMap<String, (i64, i64)>,
}

impl Reference {
    fn decide(&mut self, now: i64, op: &Op) -> Answer {
        let Op::Acquire {
            shop,
            endpoint,
            class,
            tokens,
            max_wait_us,
        } = *op
        else {
            unreachable!()
        };
        let set = set();
        let eps = endpoints();
        let hot = shop < 2;
        let mut buckets: Vec<(String, Reason, BucketSpec)> =
            vec![("global".into(), Reason::Global, set.global)];
        if let Some(e) = endpoint {
            buckets.push((format!("endpoint {e}"), Reason::Endpoint, eps[e]));
        }
        if hot {
            buckets.push(("lane".into(), Reason::HotLane, set.hot_lane.unwrap()));
            buckets.push((
                format!("shop {shop}"),
                Reason::HotShop,
                set.hot_shop.unwrap(),
            ));
        }
        let credit = |name: &str, spec: &BucketSpec| match self.credits.get(name) {
            None => spec.tolerance_us(),
            Some(&(c, at)) => spec.tolerance_us().min(c + (now - at)),
        };
        let share = SHARES[class];
        let mut reason = None;
        let mut need_max = 0i64;
        let mut levels = Vec::new();
        for (name, r, spec) in &buckets {
            let c = credit(name, spec);
            let cost = tokens * spec.interval_us();
            let reserve = reserve_us(spec.tolerance_us(), share);
            let need = cost + reserve - c;
            if reason.is_none() && (cost > spec.tolerance_us() - reserve || need > max_wait_us) {
                reason = Some(*r);
            }
            need_max = need_max.max(need);
            levels.push(c);
        }
        let whole = |c: i64, spec: &BucketSpec| c.max(0) / spec.interval_us();
        match reason {
            Some(r) => Answer {
                reason: r.as_str(),
                retry_after_us: need_max.max(0),
                remaining: buckets
                    .iter()
                    .zip(&levels)
                    .map(|((_, _, s), &c)| whole(c, s))
                    .min()
                    .unwrap(),
                wait_us: 0,
            },
            None => {
                let wait = need_max.max(0);
                let mut remaining = i64::MAX;
                for ((name, _, spec), &c) in buckets.iter().zip(&levels) {
                    let left = c.min(spec.tolerance_us() - wait) - tokens * spec.interval_us();
                    self.credits.insert(name.clone(), (left, now));
                    remaining = remaining.min(whole(left, spec));
                }
                Answer {
                    reason: "allowed",
                    retry_after_us: 0,
                    remaining,
                    wait_us: wait,
                }
            }
        }
    }
}

/// Runs `ops` on both; the first disagreement, if any.
fn disagreement(ops: &[Op]) -> Option<String> {
    let (mut model, mut reference) = (Model::default(), Reference::default());
    let mut now = T0;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Op::Advance(dt) => now += dt,
            acquire => {
                let (m, r) = (model.decide(now, acquire), reference.decide(now, acquire));
                if m != r {
                    return Some(format!("op {i} {acquire:?}: model {m:?}, reference {r:?}"));
                }
            }
        }
    }
    None
}

/// A small deterministic generator (xorshift64*), so a seed replays a sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn sequence(rng: &mut Rng, len: usize) -> Vec<Op> {
    (0..len)
        .map(|_| match rng.below(4) {
            0 => Op::Advance(rng.below(400_000) as i64),
            _ => Op::Acquire {
                shop: rng.below(SHOPS as u64) as usize,
                endpoint: match rng.below(3) {
                    2 => None,
                    e => Some(e as usize),
                },
                class: rng.below(3) as usize,
                tokens: 1 + rng.below(3) as i64,
                max_wait_us: if rng.below(4) == 0 {
                    rng.below(1_500_000) as i64
                } else {
                    0
                },
            },
        })
        .collect()
}

/// Removes operations while the sequence still fails: the shortest failing one found.
fn shrink(mut ops: Vec<Op>) -> Vec<Op> {
    let mut i = 0;
    while i < ops.len() {
        let mut shorter = ops.clone();
        shorter.remove(i);
        if disagreement(&shorter).is_some() {
            ops = shorter;
        } else {
            i += 1;
        }
    }
    ops
}

#[test]
fn random_sequences_with_endpoints_and_priorities_match_the_reference() {
    let seed = std::env::var("CG_ENDPOINT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("CG_ENDPOINT_SEED={seed}");
    let mut rng = Rng(seed);
    let (mut decisions, mut seen) = (0, HashMap::<&'static str, usize>::new());
    for _ in 0..300 {
        let ops = sequence(&mut rng, 80);
        if let Some(first) = disagreement(&ops) {
            let short = shrink(ops);
            panic!(
                "CG_ENDPOINT_SEED={seed}: {first}\nshortest failing sequence ({} operations):\n{short:#?}\n{}",
                short.len(),
                disagreement(&short).unwrap()
            );
        }
        let mut model = Model::default();
        let mut now = T0;
        for op in &ops {
            match op {
                Op::Advance(dt) => now += dt,
                a => {
                    *seen.entry(model.decide(now, a).reason).or_default() += 1;
                    decisions += 1;
                }
            }
        }
    }
    eprintln!("{decisions} decisions: {seen:?}");
    // The sequences reach every reason the buckets give.
    for reason in ["allowed", "global", "endpoint", "hot_lane", "hot_shop"] {
        assert!(
            seen.get(reason).copied().unwrap_or(0) > 0,
            "{reason} never seen: {seen:?}"
        );
    }
}

/// The example at exactly its share: with `normal` at 0.2 of a bucket of 10, a
/// normal call takes 8 and is then refused while 2 are left, which a critical call takes;
/// the normal call's retryAfter is the time until 3 tokens are back (its threshold: the
/// cost above the reserve), not until 1 is.
#[test]
fn the_reserve_is_held_for_critical_calls_at_exactly_its_share() {
    let set = BucketSet {
        global: BucketSpec::new("global", 10, 10.0).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let confirm = BucketSpec::new("endpoints.confirm", 10, 10.0).unwrap();
    let call = |stored: &StoredState, now: i64, share_ppm: i64| {
        let input = StepInput {
            endpoint: Some(&confirm),
            share_ppm,
            ..StepInput::new(now, 1)
        };
        let (reply, next) = step(&set, stored, &input);
        let d = Decision::from_reply_with(&set, Some(&confirm), share_ppm, 1, &reply);
        (d, next)
    };
    let mut s = StoredState::default();
    for i in 0..8 {
        let (d, next) = call(&s, T0, 200_000);
        assert!(d.allowed, "normal call {i}");
        s = next;
    }
    let (d, same) = call(&s, T0, 200_000);
    assert_eq!(
        (d.allowed, d.reason, d.remaining),
        (false, Reason::Global, 2)
    );
    assert_eq!(same, s, "a denial takes nothing");
    assert_eq!(
        (d.retry_after * 1e6).round() as i64,
        100_000,
        "one token more than the reserve"
    );
    for i in 0..2 {
        let (d, next) = call(&s, T0, 0);
        assert!(d.allowed, "critical call {i} takes the reserve");
        s = next;
    }
    let (d, _) = call(&s, T0, 0);
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
    let (d, _) = call(&s, T0, 200_000);
    assert_eq!(
        (d.retry_after * 1e6).round() as i64,
        300_000,
        "3 tokens back: 2 reserved, 1 to take"
    );
}

/// All or nothing across global and endpoint: an endpoint that is empty refuses, takes
/// nothing from global, and is named `endpoint`; global empty is named `global` first.
#[test]
fn global_and_endpoint_are_taken_together_or_not_at_all() {
    let set = BucketSet {
        global: BucketSpec::new("global", 10, 10.0).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let items = BucketSpec::new("endpoints.items", 2, 1.0).unwrap();
    let with = |s: &StoredState, e: Option<&BucketSpec>| {
        step(
            &set,
            s,
            &StepInput {
                endpoint: e,
                ..StepInput::new(T0, 1)
            },
        )
    };
    let (r, s) = with(&StoredState::default(), Some(&items));
    let (r2, s) = with(&s, Some(&items));
    assert!(r.reason.is_none() && r2.reason.is_none());
    let (denied, same) = with(&s, Some(&items));
    assert!(denied.endpoint_denied);
    assert_eq!(same, s, "the global bucket kept its tokens");
    let d = Decision::from_reply_with(&set, Some(&items), 0, 1, &denied);
    assert_eq!((d.reason.as_str(), d.remaining), ("endpoint", 0));
    assert_eq!((d.retry_after * 1e6).round() as i64, 1_000_000);
    // Calls without the endpoint still pass, 8 of them: global had 10.
    let mut s = same;
    for _ in 0..8 {
        let (r, next) = with(&s, None);
        assert!(r.reason.is_none());
        s = next;
    }
    let (r, _) = with(&s, Some(&items));
    let d = Decision::from_reply_with(&set, Some(&items), 0, 1, &r);
    assert_eq!(d.reason, Reason::Global, "global is named first");
}
