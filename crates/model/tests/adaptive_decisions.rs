//! The adaptive budget's seams in the model: a decision after a decrease (the level in
//! tokens carried over as over a live change), a reservation at a reduced share, peek
//! (writes nothing, not even the recovery's DEL), and the envelope: at a reduced share no
//! bucket admits more than its share of the limits over any stretch of time.

use std::collections::HashMap;

use checkout_guard_model::adaptive::{feedback, scaled, AdaptParams, AdaptState};
use checkout_guard_model::cmd::decide::ReceivedCall;
use checkout_guard_model::cmd::with_slices;
use checkout_guard_model::server::{decide_on, Keyspace};
use checkout_guard_model::LeaseLevel;
use checkout_guard_model::{
    reservation_wait_us, step, BucketSet, BucketSpec, Keys, Lane, StepInput, StoredState,
};
use checkout_guard_model::{AdaptArgs, AutoHotArgs, DecideCall, LaneArgs, ShopKeys};
use proptest::prelude::*;

const T: i64 = 1_800_000_000_000_000;

fn global_only(cap: i64, rate: f64) -> BucketSet {
    BucketSet {
        global: BucketSpec::new("global", cap, rate).unwrap(),
        hot_lane: None,
        hot_shop: None,
    }
}

fn params() -> AdaptParams {
    AdaptParams {
        floor_permille: 100,
        recover_us: 60_000_000,
    }
}

/// The most tokens one call could take from `stored` at `now` (each try on the same
/// stored state: nothing taken between them).
fn most_admitted(
    set: &BucketSet,
    stored: &StoredState,
    now: i64,
    version: &str,
    adaptive: Option<&AdaptParams>,
) -> i64 {
    (1..=set.global.capacity())
        .take_while(|&n| {
            step(
                set,
                stored,
                &StepInput {
                    version,
                    adaptive,
                    ..StepInput::new(now, n)
                },
            )
            .0
            .reason
            .is_none()
        })
        .last()
        .unwrap_or(0)
}

#[test]
fn a_decision_after_a_decrease_carries_the_level_in_tokens_as_a_live_change_does() {
    let set = global_only(20, 10.0);
    let p = params();
    // 12 of 20 tokens taken at T: 8 left.
    let (_, taken) = step(&set, &StoredState::default(), &StepInput::new(T, 12));
    // Halved at T.
    let out = feedback(None, T, &p, 0.5, 0);
    assert_eq!((out.from, out.to), (1000, 500));
    let adapted = StoredState {
        adapt: Some(out.next),
        ..taken
    };
    // The same limits (10 tokens, 5/s) set live at T.
    let live = scaled(&set, 500);
    assert_eq!(
        (live.global.capacity(), live.global.refill_per_second()),
        (10, 5.0)
    );
    let version = format!("1-a-{T}");
    for dt in [0, 1, 1000] {
        assert_eq!(out.next.permille_at(T + dt, &p), 500);
        let a = most_admitted(&set, &adapted, T + dt, "", Some(&p));
        let l = most_admitted(&live, &taken, T + dt, &version, None);
        assert_eq!(a, l, "{dt} µs after the decrease");
    }
    // Later, the share has climbed and the buckets carry over to it as over a deploy
    // (other limits, no change instant: the level as of the decision, under the limits
    // the bucket was written with). Between the decrease and the first decision after it
    // a bucket refills at the rate it was written with (at most its new capacity): under
    // load that gap is a few ms; the envelope tests below bound it.
    for dt in [99_999, 100_000, 150_000, 400_000, 2_000_000] {
        let share = out.next.permille_at(T + dt, &p);
        assert!(share > 500 && share < 1000, "{share}");
        let a = most_admitted(&set, &adapted, T + dt, "", Some(&p));
        let deploy = most_admitted(&scaled(&set, share), &taken, T + dt, "", None);
        assert_eq!(a, deploy, "{dt} µs after the decrease");
    }
    // Right at the decrease: the 8 tokens left, no refill by the change (the share climbs
    // in the first µs, the level does not).
    assert_eq!(most_admitted(&set, &adapted, T, "", Some(&p)), 8);
    // An empty bucket stays empty: no debt forgiven by the decrease.
    let (_, empty) = step(&set, &StoredState::default(), &StepInput::new(T, 20));
    let adapted = StoredState {
        adapt: Some(out.next),
        ..empty
    };
    assert_eq!(most_admitted(&set, &adapted, T, "", Some(&p)), 0);
    let (r, _) = step(
        &set,
        &adapted,
        &StepInput {
            adaptive: Some(&p),
            ..StepInput::new(T, 1)
        },
    );
    let (l, _) = step(
        &live,
        &empty,
        &StepInput {
            version: &version,
            ..StepInput::new(T, 1)
        },
    );
    assert_eq!(r.tats, l.tats, "{r:?} vs {l:?}");
    assert_eq!(r.adapt_permille, 500);
}

#[test]
fn a_reservation_at_a_reduced_share_waits_for_the_reduced_rate() {
    let set = global_only(20, 10.0);
    let p = params();
    let (_, empty) = step(&set, &StoredState::default(), &StepInput::new(T, 20));
    // At the limits one token is there in 100 ms.
    let (full, _) = step(
        &set,
        &empty,
        &StepInput {
            max_wait_us: 1_000_000,
            ..StepInput::new(T, 1)
        },
    );
    assert!(full.reason.is_none());
    assert_eq!(reservation_wait_us(&set, &full), 100_000);
    // At half of them, in 200 ms; and one asking to wait less is denied.
    let out = feedback(None, T, &p, 0.5, 0);
    let stored = StoredState {
        adapt: Some(out.next),
        ..empty
    };
    let (half, next) = step(
        &set,
        &stored,
        &StepInput {
            max_wait_us: 1_000_000,
            adaptive: Some(&p),
            ..StepInput::new(T, 1)
        },
    );
    assert!(
        half.reason.is_none() && half.adapt_permille == 500,
        "{half:?}"
    );
    assert_eq!(reservation_wait_us(&set, &half), 200_000);
    // The token taken from the future is stored at the reduced rate: a second one 200 ms
    // later still.
    let (second, _) = step(
        &set,
        &next,
        &StepInput {
            max_wait_us: 1_000_000,
            adaptive: Some(&p),
            ..StepInput::new(T, 1)
        },
    );
    assert_eq!(reservation_wait_us(&set, &second), 400_000);
    let (short, _) = step(
        &set,
        &stored,
        &StepInput {
            max_wait_us: 150_000,
            adaptive: Some(&p),
            ..StepInput::new(T, 1)
        },
    );
    assert_eq!(short.reason, Some(Lane::Global), "{short:?}");
}

/// A key space of strings in a map (no expiry: these tests do not run long).
#[derive(Default)]
struct Map(HashMap<Vec<u8>, Vec<u8>>, Vec<String>);

impl Keyspace for Map {
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        read(self.0.get(key).map(|v| v.as_slice()))
    }
    fn pttl(&mut self, _: &[u8]) -> i64 {
        -1
    }
    fn hash_ints(&mut self, _: &[u8], _: [&[u8]; 2], _: bool) -> Result<[i64; 2], String> {
        Ok([0, 0])
    }
    fn set_px(&mut self, key: &[u8], value: &[u8], _: i64) {
        self.1.push(format!("SET {}", String::from_utf8_lossy(key)));
        self.0.insert(key.to_vec(), value.to_vec());
    }
    fn hset(&mut self, key: &[u8], _: &[(&[u8], i64)]) {
        self.1
            .push(format!("HSET {}", String::from_utf8_lossy(key)));
    }
    fn pexpire(&mut self, key: &[u8], _: i64) {
        self.1
            .push(format!("PEXPIRE {}", String::from_utf8_lossy(key)));
    }
    fn del(&mut self, key: &[u8]) {
        self.1.push(format!("DEL {}", String::from_utf8_lossy(key)));
        self.0.remove(key);
    }
    // No lease is taken in these tests (no in_flight): any call is a bug.
    fn leases_held(&mut self, _: &[u8], _: i64, _: bool) -> Result<LeaseLevel, String> {
        unreachable!("no in_flight here")
    }
    fn lease_take(&mut self, _: &[u8], _: &[u8], _: i64, _: i64, _: i64) -> i64 {
        unreachable!("no in_flight here")
    }
    fn lease_score(&mut self, _: &[u8], _: &[u8]) -> Result<Option<i64>, String> {
        unreachable!("no in_flight here")
    }
    fn lease_remove(&mut self, _: &[u8], _: &[u8]) {
        unreachable!("no in_flight here")
    }
    fn hincrby(&mut self, _: &[u8], _: &[u8], _: i64) {
        unreachable!("no in_flight here")
    }
}

#[test]
fn a_peek_writes_nothing_not_even_the_recoverys_del() {
    let set = global_only(20, 10.0);
    let p = params();
    let keys = Keys::new("peek");
    let shop_keys = ShopKeys::new(&keys, b"s");
    let (lanes, auto, adapt) = (
        LaneArgs::new(&set),
        AutoHotArgs::new(None),
        AdaptArgs::new(Some(&p)),
    );
    let mut ks = Map::default();
    // The settings are published already (else the first decision writes them).
    ks.0.insert(keys.settings(), b"s".to_vec());
    let state = feedback(None, T, &p, 0.5, 0).next;
    ks.0.insert(keys.adapt(), state.encode().into_bytes());
    let decide = |ks: &mut Map, now: i64, peek: bool| {
        let call = DecideCall {
            endpoint: None,
            share_ppm: 0,
            in_flight: &checkout_guard_model::InFlightArgs::off(),
            lease_id: b"",
            adapt: &adapt,
            keys: shop_keys.decide_keys(),
            tokens: 1,
            static_hot: false,
            lanes: &lanes,
            version: b"",
            shop: b"s",
            auto_hot: &auto,
            settings: "s",
            peek,
            max_wait_us: 0,
        };
        with_slices(&call, |args| {
            let received = ReceivedCall::parse(args).unwrap();
            decide_on(ks, &received, now).unwrap().as_slice().to_vec()
        })
    };
    // Scaled, peeked: the share in the reply, nothing written.
    let scaled_peek = decide(&mut ks, T + 1, true);
    assert_eq!((scaled_peek.len(), scaled_peek[9]), (11, 500));
    // Recovered, peeked: the reply says so, the state stays.
    let later = state.recovered_at(&p) + 1;
    let peek = decide(&mut ks, later, true);
    assert_eq!((peek.len(), peek[9]), (11, 1000), "{peek:?}");
    assert!(ks.1.is_empty(), "a peek wrote {:?}", ks.1);
    assert!(ks.0.contains_key(&keys.adapt()));
    // The same decision, not peeked: the bucket written and the state DELeted.
    assert_eq!(decide(&mut ks, later, false), peek);
    assert!(!ks.0.contains_key(&keys.adapt()), "{:?}", ks.1);
    assert!(ks
        .1
        .contains(&format!("DEL {}", String::from_utf8_lossy(&keys.adapt()))));
}

/// One operation of the envelope's sequences, after `gap` µs.
#[derive(Debug, Clone)]
enum Op {
    /// A decision for a shop (0: listed hot, 1: not hot), tokens.
    Decide { shop: usize, tokens: i64 },
    /// A throttling answer, with a `Retry-After` (µs, 0: none).
    Throttled { retry_after_us: i64 },
}

/// The tokens each bucket admitted and the most it could have (its envelope: the largest
/// capacity it had plus its rate at the share its bucket was written with, integrated).
#[derive(Debug, Default)]
struct Envelope {
    admitted: [i64; 3],
    allowance: [f64; 3],
    /// Each bucket's share: of the last decision it applied to (the one its stored limits
    /// are at; the provider's pause applies none), permille.
    share: [i64; 3],
    decreases: u32,
    scaled: u32,
}

/// Runs `ops` from an empty store with `adaptive`, checking every reply's share against
/// the floor; returns the envelope.
fn run_envelope(
    set: &BucketSet,
    p: &AdaptParams,
    decrease: f64,
    ops: &[(i64, Op)],
) -> Result<Envelope, TestCaseError> {
    let mut stored = [StoredState::default(), StoredState::default()];
    let mut adapt: Option<AdaptState> = None;
    let mut now = T;
    let mut env = Envelope {
        share: [1000; 3],
        ..Default::default()
    };
    for lane in Lane::ALL {
        if let Some(s) = set.get(lane) {
            env.allowance[lane as usize] = s.capacity() as f64;
        }
    }
    for (gap, op) in ops {
        // Between decisions each bucket refills at the rate it was last written with.
        for lane in Lane::ALL {
            if let Some(s) = scaled(set, env.share[lane as usize]).get(lane) {
                env.allowance[lane as usize] += *gap as f64 / s.interval_us() as f64;
            }
        }
        now += gap;
        match *op {
            Op::Throttled { retry_after_us } => {
                let out = feedback(adapt, now, p, decrease, retry_after_us);
                for share in [out.from, out.to] {
                    prop_assert!((p.floor_permille..=1000).contains(&share), "{:?}", out);
                }
                if out.decreased || out.paused {
                    adapt = Some(out.next);
                }
                env.decreases += u32::from(out.decreased && out.to < out.from);
            }
            Op::Decide { shop, tokens } => {
                let mut state = stored[shop];
                state.buckets[0] = stored[0].buckets[0];
                state.buckets[1] = stored[0].buckets[1];
                state.adapt = adapt;
                let (reply, next) = step(
                    set,
                    &state,
                    &StepInput {
                        static_hot: shop == 0,
                        adaptive: Some(p),
                        ..StepInput::new(now, tokens)
                    },
                );
                if reply.adapt_seen {
                    prop_assert!(
                        (p.floor_permille..=1000).contains(&reply.adapt_permille),
                        "{:?}",
                        reply
                    );
                }
                let share = if reply.adapt_seen {
                    reply.adapt_permille
                } else {
                    1000
                };
                for (i, tat) in reply.tats.iter().enumerate() {
                    if *tat >= 0 {
                        env.share[i] = share;
                    }
                }
                env.scaled += u32::from(!reply.provider && share < 1000);
                adapt = next.adapt;
                stored[0].buckets[0] = next.buckets[0];
                stored[0].buckets[1] = next.buckets[1];
                stored[shop].buckets[2] = next.buckets[2];
                if reply.reason.is_none() && !reply.provider {
                    for (i, tat) in reply.tats.iter().enumerate() {
                        if *tat >= 0 {
                            env.admitted[i] += tokens;
                        }
                    }
                }
            }
        }
        for i in 0..3 {
            prop_assert!(
                env.admitted[i] as f64 <= env.allowance[i] + 1e-6,
                "lane {} admitted {} over an envelope of {} at {} ({:?})",
                i,
                env.admitted[i],
                env.allowance[i],
                now,
                env
            );
        }
    }
    Ok(env)
}

#[test]
fn hot_shop_and_hot_lane_at_a_reduced_share_stay_in_the_shares_envelope() {
    let set = BucketSet {
        global: BucketSpec::new("global", 30, 20.0).unwrap(),
        hot_lane: Some(BucketSpec::new("hot_lane", 10, 5.0).unwrap()),
        hot_shop: Some(BucketSpec::new("hot_shop", 4, 2.0).unwrap()),
    };
    let p = AdaptParams {
        floor_permille: 200,
        recover_us: 20_000_000,
    };
    // The hot shop asks for a token every 10 ms for 30 s; throttled at 1 s, 1.5 s (inside
    // the cooldown), 3 s, 4 s and 10 s.
    let mut ops = Vec::new();
    for i in 1..=3000i64 {
        if [100, 150, 300, 400, 1000].contains(&i) {
            ops.push((0, Op::Throttled { retry_after_us: 0 }));
        }
        ops.push((10_000, Op::Decide { shop: 0, tokens: 1 }));
    }
    let env = run_envelope(&set, &p, 0.7, &ops).unwrap();
    assert_eq!(env.decreases, 4, "{env:?}");
    assert!(env.scaled > 2000, "{env:?}");
    // The hot shop's bucket was the bound, and its envelope a fraction of its limits'.
    let limits = 4.0 + 2.0 * 30.0;
    assert!(env.allowance[2] < 0.8 * limits, "{env:?}");
    assert!(env.admitted[2] as f64 > env.allowance[2] - 2.0, "{env:?}");
}

fn op() -> impl Strategy<Value = (i64, Op)> {
    (
        prop_oneof![3 => Just(0i64), 5 => 1..=200_000i64, 1 => 200_000..=5_000_000i64],
        prop_oneof![
            10 => (0..2usize, 1..=3i64).prop_map(|(shop, tokens)| Op::Decide { shop, tokens }),
            2 => Just(Op::Throttled { retry_after_us: 0 }),
            1 => (1..=3_000_000i64).prop_map(|retry_after_us| Op::Throttled { retry_after_us }),
        ],
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    /// Over random decisions and throttling answers at random times, no bucket admits
    /// more than its largest capacity plus its rate integrated over the share in force,
    /// and the share is always within [floor, 1000].
    #[test]
    fn admitted_never_exceeds_the_share_integrated_over_time(
        g in (1..=30i64, prop::sample::select(vec![1.0, 5.0, 20.0, 100.0])),
        lane in (1..=30i64, prop::sample::select(vec![0.5, 1.0, 5.0])),
        floor_permille in 1..=1000i64,
        recover_us in 1_000_000..=30_000_000i64,
        decrease in prop::sample::select(vec![0.3, 0.5, 0.7, 0.9]),
        ops in proptest::collection::vec(op(), 1..300),
    ) {
        let set = BucketSet {
            global: BucketSpec::new("global", g.0, g.1).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", lane.0.min(g.0), lane.1).unwrap()),
            hot_shop: Some(BucketSpec::new("hot_shop", 3.min(g.0), 1.0).unwrap()),
        };
        let p = AdaptParams { floor_permille, recover_us };
        run_envelope(&set, &p, decrease, &ops)?;
    }
}
