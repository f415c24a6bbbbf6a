//! The Valkey script and the Rust model must decide identically: both are driven with the
//! same random sequences of (time, shop, tokens, hot marks) and every reply is compared.
//!
//! The sequences are proptest strategies, run by a [`TestRunner`] with a bounded number
//! of cases (each runs against a real Valkey): a failing sequence is shrunk (calls
//! simplified: shorter gaps, fewer tokens, fewer live changes) and reported. The seed of
//! a run is printed; `PROPTEST_RNG_SEED=<seed>` (proptest's own) or `CG_MODEL_SEED=<seed>`
//! (as the other random tests take it) runs the same sequences again, `PROPTEST_CASES`
//! changes how many.

#[allow(dead_code)]
mod common;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use checkout_guard_connection::scripts::{command, invocation};
use checkout_guard_model::adaptive::AdaptParams;
use checkout_guard_model::cmd::decide::MODULE_COMMAND;
use checkout_guard_model::cmd::decide::{
    source_with_test_clock as decide_source_with_test_clock, AutoHotArgs, DecideCall, LaneArgs,
    ShopKeys, SETTINGS_TTL_SECONDS, TEST_KEY_SLACK_MS,
};
use checkout_guard_model::cmd::decide::{AdaptArgs, EndpointArgs};
use checkout_guard_model::cmd::feedback::{
    source_with_test_clock as feedback_source_with_test_clock, FeedbackCall,
};
use checkout_guard_model::cmd::release::{
    self, source_with_test_clock as release_source_with_test_clock, ReleaseCall,
};
use checkout_guard_model::cmd::with_slices;
use checkout_guard_model::in_flight::stats as lease_stats;
use checkout_guard_model::server::{feedback_on, Keyspace};
use checkout_guard_model::{
    reservation_wait_us, step, BucketSet, BucketSpec, Decision, Keys, Lane, StepInput, StepReply,
    StoredBucket, StoredState,
};
use checkout_guard_model::{InFlight, InFlightArgs, LeaseLevel, LeaseSet};
use common::Valkey;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

const RATES: [f64; 7] = [0.5, 1.0, 3.0, 7.5, 10.0, 33.3, 100.0];

/// Buckets as a constructor could configure them: hot buckets no larger and no faster
/// than global.
fn buckets() -> impl Strategy<Value = BucketSet> {
    (1..=30i64, 0..RATES.len())
        .prop_flat_map(|(g_cap, g_rate)| {
            let smaller = move |name: &'static str| {
                proptest::option::weighted(
                    0.7,
                    (1..=g_cap, 0..=g_rate).prop_map(move |(cap, rate)| {
                        BucketSpec::new(name, cap, RATES[rate]).unwrap()
                    }),
                )
            };
            (
                Just((g_cap, g_rate)),
                smaller("hot_lane"),
                smaller("hot_shop"),
            )
        })
        .prop_map(|((g_cap, g_rate), hot_lane, hot_shop)| BucketSet {
            global: BucketSpec::new("global", g_cap, RATES[g_rate]).unwrap(),
            hot_lane,
            hot_shop,
        })
}

/// `draw` (any number) as one of `1..=max`: the token counts depend on the limits in
/// force when the call is made, so a strategy draws the number and the call maps it.
fn one_to(max: i64, draw: u32) -> i64 {
    1 + i64::from(draw) % max.max(1)
}

/// A runner of `cases` cases (unless `PROPTEST_CASES` says otherwise) whose seed is
/// printed and taken from `PROPTEST_RNG_SEED` or `CG_MODEL_SEED` when given.
fn runner(cases: u32) -> TestRunner {
    let mut config = Config {
        failure_persistence: None,
        // A failing case replays against Valkey for every shrinking step: bounded.
        max_shrink_iters: 512,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    let seed = match (config.rng_seed, std::env::var("CG_MODEL_SEED").ok()) {
        (_, Some(s)) => s.parse().expect("CG_MODEL_SEED is a u64"),
        (RngSeed::Fixed(s), None) => s,
        (RngSeed::Random, None) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    config.rng_seed = RngSeed::Fixed(seed);
    println!("seed {seed} (PROPTEST_RNG_SEED={seed} or CG_MODEL_SEED={seed} repeats it)");
    TestRunner::new(config)
}

/// A namespace no earlier run of a case used (shrinking runs a case again on the same
/// server).
fn fresh(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Runs `runner` over `strategy`, failing the test with the shrunk case.
fn run<S: Strategy>(
    mut runner: TestRunner,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

/// The model's view of the store, keyed like Valkey.
#[derive(Default)]
struct ModelStore {
    global: Option<StoredBucket>,
    lane: Option<StoredBucket>,
    shops: HashMap<usize, StoredBucket>,
    marked: HashSet<usize>,
}

/// The TTL every mark gets in this test; PTTL in the script reads a little less.
const MARK_TTL_MS: i64 = 3_600_000;

impl ModelStore {
    fn state(&self, shop: usize) -> StoredState {
        StoredState {
            buckets: [self.global, self.lane, self.shops.get(&shop).copied()],
            mark_ttl_ms: self.marked.contains(&shop).then_some(MARK_TTL_MS),
            ..Default::default()
        }
    }

    fn store(&mut self, shop: usize, s: StoredState) {
        self.global = s.buckets[0];
        self.lane = s.buckets[1];
        if let Some(t) = s.buckets[2] {
            self.shops.insert(shop, t);
        }
    }
}

struct Call<'a> {
    keys: &'a Keys,
    shop: &'a [u8],
    tokens: i64,
    static_hot: bool,
    set: &'a BucketSet,
    version: &'a str,
    settings: &'a str,
    now: i64,
}

/// Runs the test-clock script through the extension's own encoder.
fn invoke(script: &redis::Script, conn: &mut redis::Connection, c: &Call) -> Vec<i64> {
    let shop_keys = ShopKeys::new(c.keys, c.shop);
    let lanes = LaneArgs::new(c.set);
    let auto = AutoHotArgs::new(None);
    let call = DecideCall {
        endpoint: None,
        share_ppm: 0,
        in_flight: &checkout_guard_model::InFlightArgs::off(),
        lease_id: b"",
        adapt: &checkout_guard_model::AdaptArgs::off(),
        keys: shop_keys.decide_keys(),
        tokens: c.tokens,
        static_hot: c.static_hot,
        lanes: &lanes,
        version: c.version.as_bytes(),
        shop: c.shop,
        auto_hot: &auto,
        settings: c.settings,
        peek: false,
        max_wait_us: 0,
    };
    let mut inv = invocation(&call, script);
    inv.arg(c.now);
    inv.invoke(conn).unwrap()
}
/// One step of the script-and-model sequences.
#[derive(Debug, Clone)]
struct Step {
    shop: usize,
    /// Mark the shop hot (or unmark it) first.
    toggle_mark: bool,
    /// A live change first: the new limits, and the tokens of a call that still decides
    /// with the old version.
    change: Option<(BucketSet, u32)>,
    /// µs since the step before: bursts at one instant, short gaps, long idle stretches.
    gap_us: i64,
    tokens: u32,
}

const SHOPS: [&[u8]; 4] = [b"shop-a", b"shop-b", b"{shop}:c", b"\xffshop d"];

/// A sequence: limits, which shops are listed hot, a start time, 600 steps.
fn script_sequence() -> impl Strategy<Value = (BucketSet, [bool; 4], i64, Vec<Step>)> {
    let step = (
        0..SHOPS.len(),
        proptest::bool::weighted(0.05),
        proptest::option::weighted(0.03, (buckets(), any::<u32>())),
        prop_oneof![3 => Just(0i64), 5 => 1..=300_000i64, 2 => 300_000..=5_000_000i64],
        any::<u32>(),
    )
        .prop_map(|(shop, toggle_mark, change, gap_us, tokens)| Step {
            shop,
            toggle_mark,
            change,
            gap_us,
            tokens,
        });
    (
        buckets(),
        [(); 4].map(|_| proptest::bool::weighted(0.25)),
        0..=1_000_000_000i64,
        proptest::collection::vec(step, 600),
    )
}

#[test]
fn script_and_model_decide_identically_on_random_sequences() {
    let valkey = Valkey::start();
    let conn = RefCell::new(valkey.connection());
    let script = redis::Script::new(&decide_source_with_test_clock());
    let reasons_seen = Cell::new([0u32; 4]);
    let (steps, changes, carried, stale) = (Cell::new(0), Cell::new(0), Cell::new(0), Cell::new(0));
    let count = |c: &Cell<u32>| c.set(c.get() + 1);
    run(
        runner(40),
        script_sequence(),
        |(mut set, static_hot, start, ops)| {
            let conn = &mut *conn.borrow_mut();
            let name = fresh("seq");
            let keys = Keys::new(&name);
            let mut model = ModelStore::default();
            let mut now: i64 = 1_800_000_000_000_000 + start;
            // The live limits' version in Valkey, and the one the caller decides with.
            let mut version = String::new();
            let settings = format!("settings of {name}");
            for (k, op) in ops.iter().enumerate() {
                let shop = op.shop;
                if op.toggle_mark {
                    // Mark or unmark the shop hot, in Valkey and in the model.
                    let flag = keys.hot_flag(SHOPS[shop]);
                    if model.marked.insert(shop) {
                        redis::cmd("SET")
                            .arg(&flag)
                            .arg(1)
                            .arg("PX")
                            .arg(MARK_TTL_MS)
                            .query::<()>(conn)
                            .unwrap();
                    } else {
                        model.marked.remove(&shop);
                        redis::cmd("DEL").arg(&flag).query::<()>(conn).unwrap();
                    }
                }
                if let Some((next_set, tokens)) = &op.change {
                    // A live change (or a deploy): other limits over the same stored state.
                    // First a caller that still decides with the old version: nothing happens.
                    set = next_set.clone();
                    count(&changes);
                    let next = format!("{}-{k:x}-{now}", changes.get());
                    redis::cmd("SET")
                        .arg(keys.limits_version())
                        .arg(&next)
                        .query::<()>(conn)
                        .unwrap();
                    let call = Call {
                        keys: &keys,
                        shop: SHOPS[shop],
                        tokens: one_to(set.min_capacity(), *tokens),
                        static_hot: static_hot[shop],
                        set: &set,
                        version: &version,
                        settings: &settings,
                        now,
                    };
                    prop_assert_eq!(invoke(&script, conn, &call), vec![-1, 0], "stale version");
                    count(&stale);
                    version = next;
                }
                now += op.gap_us;
                // Up to more than a capacity (a live change may have lowered it).
                let tokens = one_to(set.min_capacity().min(5) + 1, op.tokens);
                let state = model.state(shop);
                if state.buckets.iter().flatten().any(|b| {
                    b.params.is_some_and(|p| {
                        !Lane::ALL.iter().any(|&l| {
                            set.get(l)
                                .is_some_and(|x| (x.interval_us(), x.tolerance_us()) == p)
                        })
                    })
                }) {
                    count(&carried);
                }
                let (mut want, next) = step(
                    &set,
                    &state,
                    &StepInput {
                        static_hot: static_hot[shop],
                        version: &version,
                        ..StepInput::new(now, tokens)
                    },
                );
                model.store(shop, next);
                let call = Call {
                    keys: &keys,
                    shop: SHOPS[shop],
                    tokens,
                    static_hot: static_hot[shop],
                    set: &set,
                    version: &version,
                    settings: &settings,
                    now,
                };
                let got = invoke(&script, conn, &call);
                let got = StepReply::from_ints(&got).expect("reply shape");
                // PTTL reads real time: the mark was set at most a minute ago.
                if want.mark_ttl_ms == MARK_TTL_MS
                    && (MARK_TTL_MS - 60_000..=MARK_TTL_MS).contains(&got.mark_ttl_ms)
                {
                    want.mark_ttl_ms = got.mark_ttl_ms;
                }
                prop_assert_eq!(
                    got,
                    want,
                    "step {}, shop {}, tokens {}, buckets {:?}",
                    k,
                    shop,
                    tokens,
                    set
                );
                // Same reply, same decision; and the decision is self-consistent.
                let d = Decision::from_reply(&set, tokens, &got);
                prop_assert_eq!(d.allowed, d.retry_after == 0.0, "{:?}", d);
                let mut seen = reasons_seen.get();
                seen[got.reason.map_or(0, |l| l as usize + 1)] += 1;
                reasons_seen.set(seen);
                count(&steps);
            }
            // What the script stored is what the model stored, to the character.
            let stored: Option<String> = redis::cmd("GET").arg(keys.global()).query(conn).unwrap();
            prop_assert_eq!(stored, model.global.map(|b| b.encode()));
            // The settings were published with a TTL.
            let (text, ttl): (Option<String>, i64) = redis::pipe()
                .cmd("GET")
                .arg(keys.settings())
                .cmd("TTL")
                .arg(keys.settings())
                .query(conn)
                .unwrap();
            prop_assert_eq!(text.as_deref(), Some(settings.as_str()));
            prop_assert!(
                (1..=SETTINGS_TTL_SECONDS).contains(&ttl),
                "settings TTL {}",
                ttl
            );
            Ok(())
        },
    );
    // The sequences must exercise every outcome, or the comparison proves little.
    let (reasons_seen, steps) = (reasons_seen.get(), steps.get());
    for (reason, n) in reasons_seen.iter().enumerate() {
        assert!(
            *n > 20,
            "reason {reason} seen only {n} times in {steps} steps: {reasons_seen:?}"
        );
    }
    let (changes, stale, carried) = (changes.get(), stale.get(), carried.get());
    assert!(
        changes > 200 && stale == changes,
        "{changes} live changes, {stale} stale calls"
    );
    assert!(
        carried > 200,
        "only {carried} decisions read a bucket written under other limits"
    );
}

#[test]
fn a_live_change_carries_the_level_in_tokens_over_from_its_instant() {
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = redis::Script::new(&decide_source_with_test_clock());
    let spec = |cap, rate| BucketSet {
        global: BucketSpec::new("global", cap, rate).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let t0: i64 = 1_800_000_000_000_000;
    let mut call = |name: &str, set: &BucketSet, tokens, now, version: &str| {
        let keys = Keys::new(name);
        // The live limits' version as stored, so the script decides with it.
        let _: () = if version.is_empty() {
            redis::cmd("DEL")
                .arg(keys.limits_version())
                .query(&mut conn)
                .unwrap()
        } else {
            redis::cmd("SET")
                .arg(keys.limits_version())
                .arg(version)
                .query(&mut conn)
                .unwrap()
        };
        let c = Call {
            keys: &keys,
            shop: b"s",
            tokens,
            static_hot: false,
            set,
            version,
            settings: "",
            now,
        };
        let reply = StepReply::from_ints(&invoke(&script, &mut conn, &c)).unwrap();
        let (want, _) = step(
            set,
            &StoredState::default(),
            &StepInput {
                version,
                ..StepInput::new(now, tokens)
            },
        );
        assert_eq!(reply.now_us, want.now_us);
        reply
    };
    let (fast, slow) = (spec(100, 100.0), spec(100, 1.0));
    // A drained 100/100 bucket set to 100/1 5 ms later: half a token then, not 100, and it
    // refills at 1/s from the change on (not at 100/s until it is next read).
    assert_eq!(call("a", &fast, 100, t0, "").reason, None);
    let v = format!("1-e-{}", t0 + 5_000);
    let r = call("a", &slow, 1, t0 + 5_000, &v);
    assert_eq!(r.reason, Some(Lane::Global), "{r:?}");
    let d = Decision::from_reply(&slow, 1, &r);
    assert!((d.retry_after - 0.5).abs() < 1e-6, "{d:?}");
    assert_eq!(
        call("a", &slow, 1, t0 + 300_000, &v).reason,
        Some(Lane::Global)
    );
    assert_eq!(call("a", &slow, 1, t0 + 505_000, &v).reason, None);
    // And back: a drained 100/1 bucket set to 100/100 refills within 10 ms, not 97 s.
    assert_eq!(call("b", &slow, 100, t0, "").reason, None);
    let v = format!("1-e-{}", t0 + 1_000);
    assert_eq!(
        call("b", &fast, 1, t0 + 1_000, &v).reason,
        Some(Lane::Global)
    );
    assert_eq!(call("b", &fast, 1, t0 + 11_000, &v).reason, None);
    // A lower capacity clamps the level; a bucket that was full stays full at the new one.
    let (big, small) = (spec(100, 0.001), spec(50, 0.001));
    assert_eq!(call("c", &big, 10, t0, "").reason, None);
    let r = call("c", &small, 1, t0, "");
    assert_eq!(
        Decision::from_reply(&small, 1, &r).remaining,
        49,
        "90 clamped to 50, one taken"
    );
    assert_eq!(call("d", &small, 1, t0, "").reason, None);
    let r = call("d", &big, 60, t0, "");
    assert_eq!(
        r.reason,
        Some(Lane::Global),
        "49 tokens carried over, not a full 100"
    );
}

#[test]
fn production_script_uses_valkeys_clock_and_lets_idle_buckets_expire() {
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = &*checkout_guard_connection::scripts::DECIDE;
    let set = BucketSet {
        global: BucketSpec::new("global", 10, 5.0).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let keys = Keys::new("clock");
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(&mut conn).unwrap();
    let before = secs * 1_000_000 + micros;
    let shop_keys = ShopKeys::new(&keys, b"s");
    let (lanes, auto) = (LaneArgs::new(&set), AutoHotArgs::new(None));
    let call = DecideCall {
        endpoint: None,
        share_ppm: 0,
        in_flight: &checkout_guard_model::InFlightArgs::off(),
        lease_id: b"",
        adapt: &checkout_guard_model::AdaptArgs::off(),
        keys: shop_keys.decide_keys(),
        tokens: 4,
        static_hot: false,
        lanes: &lanes,
        version: b"",
        shop: b"s",
        auto_hot: &auto,
        settings: "global=10/5",
        peek: false,
        max_wait_us: 0,
    };
    let inv = invocation(&call, script);
    let reply = StepReply::from_ints(&inv.invoke::<Vec<i64>>(&mut conn).unwrap()).unwrap();
    assert_eq!(reply.reason, None);
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
/// One operation of the three-engine sequences.
#[derive(Debug, Clone)]
enum Op {
    /// A mark, as markHot() sets it.
    Mark,
    Unmark,
    /// A live change: new limits, a new version carrying its instant.
    LiveChange(BucketSet),
    /// A foreign value in a bucket key (lane, which of [`FOREIGN_FORMS`], and the random
    /// offsets of the forms built from now).
    Foreign {
        lane: usize,
        form: usize,
        offsets: (i64, i64, i64),
    },
    DataLoss,
    /// A throttling answer reported (status, `Retry-After` in µs, 0: none): feedback.lua
    /// in Valkey (both namespaces: the module has no command of its own for it) and
    /// `server::feedback_on` on the model's key space.
    Feedback {
        status: i64,
        retry_after_us: i64,
    },
    /// A long quiet stretch (µs): long enough for the budget to climb back.
    Jump(i64),
    /// A foreign value in the adapt key (which of [`ADAPT_FORMS`], an offset from now).
    ForeignAdapt {
        form: usize,
        offset: i64,
    },
    /// A decision: tokens (drawn), a peek, a reservation's wait (0: none), the endpoint
    /// (0: none, else one of the sequence's two) and the class (0: none, else one of the
    /// sequence's shares).
    Decide {
        tokens: u32,
        peek: bool,
        max_wait_us: i64,
        endpoint: u8,
        class: u8,
    },
    /// The end of an in-flight lease: `release.lua` in Valkey, `CG.RELEASE` and
    /// `server::release_on` (the in-memory store). `pick` chooses among the lease ids
    /// the sequence's decisions sent (taken or not, released already or not: a lease not
    /// held is answered too); `leaked`: released at the end of the request.
    Release {
        pick: u32,
        leaked: bool,
    },
    /// A live change of the `in_flight` limits (drawn, as [`in_flight`] draws them), the
    /// lease length kept; nothing when the sequence has no `in_flight`.
    InFlightChange([u32; 3]),
}

/// The sequences' endpoint names.
const ENDPOINT_NAMES: [&str; 2] = ["charges.create", "v1/items"];

/// How many forms [`foreign_value`] has.
const FOREIGN_FORMS: usize = 25;

/// What another library, an older release or a hand wrote into a bucket key: what no
/// engine reads is a missing key (a full bucket) in all three, replaced by the next write;
/// what reads is read alike (leading zeros, a bare TAT). `None`: a hash.
fn foreign_value(
    form: usize,
    now: i64,
    spec: &BucketSpec,
    offsets: (i64, i64, i64),
) -> Option<Vec<u8>> {
    let bare_tat = format!("{}", now + offsets.0);
    let zeros = format!("000{}", now + offsets.1);
    let padded = format!(
        "{}:000{}:0{}:",
        now + offsets.2,
        spec.interval_us(),
        spec.tolerance_us()
    );
    // Readable but huge: a TAT 285 years ahead, or one whose carry-over to these limits
    // leaves 2^53 (clamped there alike: still a denial).
    let huge_same = format!(
        "9007199254740991:{}:{}:",
        spec.interval_us(),
        spec.tolerance_us()
    );
    let forms: [&[u8]; FOREIGN_FORMS] = [
        b"abc",
        b"",
        b"1e3",
        b" 5",
        b"5.5",
        b"-3",
        b"0x10",
        b"nan",
        b"99999999999999999999999",
        b"9007199254740992",
        b"1800000000000000junk",
        b"1800000000000000:100000:1000000:x",
        b"1800000000000000:0:0:",
        br#"O:56:"Symfony\Component\RateLimiter\Tests\Resources\DummyWindow":0:{}"#,
        br#"a:3:{s:2:"id";s:3:"foo";s:6:"tokens";d:4.5;s:5:"timer";d:1.7E9;}"#,
        b"\xff\x00",
        bare_tat.as_bytes(),
        zeros.as_bytes(),
        padded.as_bytes(),
        b"9007199254740991:1:1",
        b"1800000000000000:1:0",
        b"9007199254740991:9007199254740991:0:",
        b"9007199254740991",
        huge_same.as_bytes(),
        b"hash",
    ];
    let value = forms[form];
    (value != b"hash").then(|| value.to_vec())
}

/// How many forms [`foreign_adapt`] has.
const ADAPT_FORMS: usize = 12;

/// What else may sit in the adapt key: what the scripts do not read is no state (the full
/// budget) in all three, replaced by the next throttling answer; what reads is read
/// alike. `None`: a hash.
fn foreign_adapt(form: usize, now: i64, offset: i64) -> Option<Vec<u8>> {
    let t0 = (now + offset).max(0);
    let forms: [String; ADAPT_FORMS] = [
        "abc".into(),
        String::new(),
        "1:2:3".into(),
        format!("{t0}:0:1001:0"),
        format!("{t0}:-1:500:0"),
        format!("{t0}:1000000:500:0:"),
        // Readable: a decrease at t0 from 600, no pause; one paused until t0.
        format!("{t0}:1000000:600:0"),
        format!("{t0}:0:300:{}", now + offset.abs()),
        format!("000{t0}:0002000000:0700:0"),
        "9007199254740991:0:0:0".into(),
        "9007199254740992:0:0:0".into(),
        "hash".into(),
    ];
    let value = &forms[form];
    (value != "hash").then(|| value.clone().into_bytes())
}

fn op() -> impl Strategy<Value = Op> {
    let wait = prop_oneof![3 => Just(0i64), 1 => 1..=2_000_000i64];
    let retry_after = prop_oneof![3 => Just(0i64), 1 => 1..=3_000_000i64, 1 => Just(90_000_000i64)];
    prop_oneof![
        8 => (prop::sample::select(vec![429i64, 503]), retry_after)
            .prop_map(|(status, retry_after_us)| Op::Feedback { status, retry_after_us }),
        2 => (2_000_000..=40_000_000i64).prop_map(Op::Jump),
        2 => (0..ADAPT_FORMS, -3_000_000..=3_000_000i64)
            .prop_map(|(form, offset)| Op::ForeignAdapt { form, offset }),
        6 => Just(Op::Mark),
        3 => Just(Op::Unmark),
        4 => buckets().prop_map(Op::LiveChange),
        1 => Just(Op::DataLoss),
        3 => (0..3usize, 0..FOREIGN_FORMS, (-2_000_000..=2_000_000i64, 0..=1_000_000i64, 0..=1_000_000i64))
            .prop_map(|(lane, form, offsets)| Op::Foreign { lane, form, offsets }),
        // One call in five is a peek: the same answer, nothing written (the calls after it
        // show that nothing was). One in four is a reservation: tokens there within up to
        // 2 s are taken now (a peek may ask with a wait too: the contract allows it).
        // Half the calls name an endpoint, half a class (issue 42).
        83 => (any::<u32>(), proptest::bool::weighted(0.2), wait, prop_oneof![2 => Just(0u8), 1 => 1..=2u8], prop_oneof![2 => Just(0u8), 1 => 1..=2u8])
            .prop_map(|(tokens, peek, max_wait_us, endpoint, class)| Op::Decide { tokens, peek, max_wait_us, endpoint, class }),
        // Fewer releases than decisions: leases pile up to the limits, and some are never
        // released (a worker that died holding them): they expire.
        30 => (any::<u32>(), proptest::bool::weighted(0.2))
            .prop_map(|(pick, leaked)| Op::Release { pick, leaked }),
        2 => any::<[u32; 3]>().prop_map(Op::InFlightChange),
    ]
}

/// The `in_flight` option as a sequence has it (None: off): small limits per level (the
/// hot levels 0, no limit, or up to 4 for the lane and 2 for a shop, at most global's,
/// so that they, not global, are often what is full), leases from 1 ms (expired by the next call) to 30 s
/// (outliving the sequence).
fn in_flight() -> impl Strategy<Value = Option<InFlight>> {
    proptest::option::weighted(
        0.7,
        (
            1..=8i64,
            0..=4i64,
            prop_oneof![Just(0i64), Just(1), Just(1), Just(2)],
            prop_oneof![
                2 => 1_000..=400_000i64,
                3 => 400_000..=5_000_000i64,
                1 => Just(30_000_000i64),
            ],
        )
            .prop_map(|(g, l, s, lease_us)| InFlight {
                limits: [g, l.min(g), s.min(g)],
                lease_us,
            }),
    )
}

/// A lease set as Valkey holds it: (member, score), by score (the ids are text).
fn zset(conn: &mut redis::Connection, key: &[u8]) -> Vec<(String, i64)> {
    redis::cmd("ZRANGE")
        .arg(key)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(conn)
        .unwrap()
}

/// The lease stats hash as Valkey holds it: every field, sorted.
fn stats_hash(conn: &mut redis::Connection, key: &[u8]) -> Vec<(String, i64)> {
    let mut h: Vec<(String, i64)> = redis::cmd("HGETALL").arg(key).query(conn).unwrap();
    h.sort();
    h
}

/// An `auto_hot` as the options could configure it (windows of 1 to 3 s, so 60 calls
/// cross several).
fn auto_hot() -> impl Strategy<Value = Option<checkout_guard_model::AutoHot>> {
    proptest::option::weighted(
        0.7,
        (
            1000..=3000u64,
            prop::sample::select(vec![0.2, 0.34, 0.5, 0.75]),
            1..=8i64,
        )
            .prop_map(|(window_ms, share, min_tokens)| {
                let window = std::time::Duration::from_millis(window_ms);
                checkout_guard_model::AutoHot::new(window, share, 1000, min_tokens).unwrap()
            }),
    )
}

/// The `adaptive` option as a sequence has it (None: off): floor (permille), recovery
/// (µs, short enough for a sequence to see it back at the limits), decrease.
fn adaptive() -> impl Strategy<Value = Option<(AdaptParams, f64)>> {
    proptest::option::weighted(
        0.6,
        (
            prop_oneof![4 => 1..=900i64, 1 => Just(1000i64)],
            1_000_000..=20_000_000i64,
            prop::sample::select(vec![0.3, 0.5, 0.7, 0.9]),
        )
            .prop_map(|(floor_permille, recover_us, decrease)| {
                (
                    AdaptParams {
                        floor_permille,
                        recover_us,
                    },
                    decrease,
                )
            }),
    )
}

/// `server::feedback_on` over a [`MemoryStore`]'s strings (the adapt keys are set without
/// expiry, as the test-clock script's hour of slack keeps them in Valkey).
struct MemKeys<'a>(&'a checkout_guard_runtime::store::MemoryStore);

impl Keyspace for MemKeys<'_> {
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        read(self.0.get(key).as_deref())
    }
    fn pttl(&mut self, _: &[u8]) -> i64 {
        unreachable!("feedback reads no TTL")
    }
    fn hash_ints(&mut self, _: &[u8], _: [&[u8]; 2], _: bool) -> Result<[i64; 2], String> {
        unreachable!("feedback reads no hash")
    }
    fn set_px(&mut self, key: &[u8], value: &[u8], _px_ms: i64) {
        self.0.set(key, value);
    }
    fn hset(&mut self, _: &[u8], _: &[(&[u8], i64)]) {
        unreachable!("feedback writes no hash")
    }
    fn pexpire(&mut self, _: &[u8], _: i64) {
        unreachable!("feedback sets no expiry")
    }
    fn del(&mut self, key: &[u8]) {
        self.0.delete(key);
    }
    fn leases_held(&mut self, _: &[u8], _: i64, _: bool) -> Result<LeaseLevel, String> {
        unreachable!("feedback reads no lease")
    }
    fn lease_take(&mut self, _: &[u8], _: &[u8], _: i64, _: i64, _: i64) -> i64 {
        unreachable!("feedback takes no lease")
    }
    fn lease_score(&mut self, _: &[u8], _: &[u8]) -> Result<Option<i64>, String> {
        unreachable!("feedback reads no lease")
    }
    fn lease_remove(&mut self, _: &[u8], _: &[u8]) {
        unreachable!("feedback ends no lease")
    }
    fn hincrby(&mut self, _: &[u8], _: &[u8], _: i64) {
        unreachable!("feedback counts no lease")
    }
}

/// The three engines of a decision decide every call of random sequences identically:
/// the production script (on a test clock), the native module's `CG.DECIDE` (loaded with
/// `test-clock`) and the in-memory store (the model's `server::decide_on`). The sequences
/// have `auto_hot`, static and marked hot shops, marks removed, live changes (new limits
/// and version, buckets carried over), data loss, foreign values written into bucket keys
/// (other formats, other types), and peeks (decide, write nothing). Marks live 1,000 s,
/// longer than any sequence, so Valkey's real clock and the simulated one never disagree
/// about them; the mark's PTTL (real in Valkey) is compared by sign only.
///
/// Six sequences in ten have the `adaptive` option (random floor, recovery, decrease),
/// the others off (their throttling answers are stored, never read by a decision). The
/// operations include throttling answers (429 or 503, with or without `Retry-After`, some
/// past the 60 s bound: `feedback.lua` in Valkey, `server::feedback_on` in the model, the
/// replies compared), long quiet stretches (the budget climbs back, the decision that
/// finds it at the limits DELs the state) and foreign values in the adapt key; after every
/// operation the adapt key and the last throttling answer must be stored alike.
///
/// Seven sequences in ten have the `in_flight` option (random limits per level, the hot
/// levels among them, leases of 1 ms to 30 s): decisions take leases, and releases
/// (`release.lua`, `CG.RELEASE`, `server::release_on`) end them, some at the end of the
/// request (leaked), some twice or never taken; leases never released expire as time
/// passes (a worker that died holding them) and the next lease taken counts them; live
/// changes lower and raise the limits below what is held. After every operation each
/// lease set must hold the same members with the same expiry in the script's and the
/// module's key space, as an independent account of the contract (`model::LeaseSet`,
/// fed by the decisions' replies) has them, with the in-memory store holding as many;
/// the stats hash must count alike in all three.
#[test]
fn script_module_and_model_agree_on_random_sequences() {
    use checkout_guard_runtime::store::{MemoryStore, Store};
    use std::time::Duration;

    let module = common::valkey_module();
    let valkey = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
    ]);
    let conn = RefCell::new(valkey.connection());
    let script = redis::Script::new(&decide_source_with_test_clock());
    let (became, changes, carried, peeks, reserved, foreign) = (
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
    );
    let feedback_script = redis::Script::new(&feedback_source_with_test_clock());
    // What the adaptive budget did over the run (the comparison proves little otherwise).
    let (provider, decreases, recoveries, scaled_decisions, adapt_foreign) = (
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
        Cell::new(0),
    );
    let count = |c: &Cell<u32>, n: bool| c.set(c.get() + u32::from(n));
    let release_script = redis::Script::new(&release_source_with_test_clock());
    // What the leases did over the run: in-flight denials per level, releases per
    // outcome (not held, released, expired), decisions that pruned expired leases.
    let in_flight_denials = Cell::new([0u32; 3]);
    let release_outcomes = Cell::new([0u32; 3]);
    let (pruned, leaked, lowered) = (Cell::new(0), Cell::new(0), Cell::new(0));
    let (endpoint_denials, reserve_denials) = (Cell::new(0), Cell::new(0));
    let sequence = (
        buckets(),
        auto_hot(),
        proptest::bool::weighted(0.3),
        adaptive(),
        in_flight(),
        proptest::collection::vec((0..=300_000u64, 0..4u8, op()), 80),
        // Two endpoints' buckets (the hot ones' strategy: often smaller than global),
        // and two classes' shares.
        (buckets(), buckets()),
        (
            prop_oneof![Just(200_000i64), 0..1_000_000i64],
            prop_oneof![Just(500_000i64), 0..1_000_000i64],
        ),
    );
    run(
        runner(40),
        sequence,
        |(mut set, auto, static_hot, adaptive, mut in_flight, ops, (e1, e2), (s1, s2))| {
            let endpoints = [e1.global, e2.global];
            let shares = [s1, s2];
            let conn = &mut *conn.borrow_mut();
            let mem = MemoryStore::new();
            // As the test-clock script and module: buckets live longer.
            mem.keep_buckets_longer(TEST_KEY_SLACK_MS);
            let name = fresh("seq");
            let lua_keys = Keys::new(&format!("lua-{name}"));
            let mod_keys = Keys::new(&format!("mod-{name}"));
            let mem_keys = Keys::new("mem");
            let auto_args = AutoHotArgs::new(auto.as_ref());
            let adapt_args = AdaptArgs::new(adaptive.as_ref().map(|(p, _)| p));
            // Off: throttling answers are still stored (the decisions must not read them).
            let (params, decrease) = adaptive.unwrap_or((
                AdaptParams {
                    floor_permille: 100,
                    recover_us: 10_000_000,
                },
                0.7,
            ));
            let mut version = String::new();
            // The lease ids sent (with the shop and the lease length they were sent
            // with), and the lease sets as the contract has them (by the in-memory
            // store's key names).
            let mut leases: Vec<(String, Vec<u8>, i64)> = Vec::new();
            let mut account: HashMap<Vec<u8>, LeaseSet> = HashMap::new();
            // The stats as the contract counts them: released, hold_us, leaked, expired
            // (each lease once: pruned from the global set, or released after its expiry
            // while the global set still held it).
            let mut counted = [0i64; 4];
            // The adapt key and the last throttling answer, as each engine stored them.
            let stored_adapt = |conn: &mut redis::Connection| -> Result<(), TestCaseError> {
                let mut got = Vec::new();
                for k in [&lua_keys, &mod_keys] {
                    let mut pair = Vec::new();
                    for key in [k.adapt(), k.adapt_last()] {
                        let kind: String = redis::cmd("TYPE").arg(&key).query(conn).unwrap();
                        pair.push(if kind == "string" {
                            redis::cmd("GET")
                                .arg(&key)
                                .query::<Option<Vec<u8>>>(conn)
                                .unwrap()
                        } else {
                            None
                        });
                    }
                    got.push(pair);
                }
                let model = vec![mem.get(&mem_keys.adapt()), mem.get(&mem_keys.adapt_last())];
                prop_assert_eq!(&got[1], &got[0], "adapt keys: module vs script");
                prop_assert_eq!(&model, &got[0], "adapt keys: model vs script");
                Ok(())
            };
            for (op_n, (advance_us, shop_n, op)) in ops.into_iter().enumerate() {
                mem.advance(Duration::from_micros(advance_us));
                let now = mem.now_us();
                let shop = format!("s{shop_n}").into_bytes();
                let (call_endpoint, call_share): (u8, i64);
                let (tokens, peek, max_wait_us) = match op {
                    Op::Feedback {
                        status,
                        retry_after_us,
                    } => {
                        let mut replies = Vec::new();
                        for k in [&lua_keys, &mod_keys, &mem_keys] {
                            let (adapt_key, last_key) = (k.adapt(), k.adapt_last());
                            let call = FeedbackCall {
                                adapt_key: &adapt_key,
                                last_key: &last_key,
                                status,
                                decrease,
                                params,
                                retry_after_us,
                            };
                            replies.push(if std::ptr::eq(k, &mem_keys) {
                                with_slices(&call, |args| {
                                    feedback_on(&mut MemKeys(&mem), args, now)
                                })
                                .unwrap()
                                .to_vec()
                            } else {
                                let mut inv = invocation(&call, &feedback_script);
                                inv.arg(now);
                                inv.invoke::<Vec<i64>>(conn).unwrap()
                            });
                        }
                        let what = format!("feedback {op_n} ({status}, retry after {retry_after_us} µs at {now} µs, {params:?}, decrease {decrease})");
                        prop_assert_eq!(
                            &replies[1],
                            &replies[0],
                            "{}: module's namespace vs script",
                            what
                        );
                        prop_assert_eq!(&replies[2], &replies[0], "{}: model vs script", what);
                        count(
                            &decreases,
                            replies[0][0] == 1 && replies[0][2] < replies[0][1],
                        );
                        stored_adapt(conn)?;
                        continue;
                    }
                    Op::Jump(us) => {
                        mem.advance(Duration::from_micros(us as u64));
                        continue;
                    }
                    Op::ForeignAdapt { form, offset } => {
                        count(&adapt_foreign, true);
                        let value = foreign_adapt(form, now, offset);
                        for k in [&lua_keys, &mod_keys] {
                            let _: () = match &value {
                                None => {
                                    redis::cmd("DEL").arg(k.adapt()).query::<()>(conn).unwrap();
                                    redis::cmd("HSET")
                                        .arg(k.adapt())
                                        .arg("t0")
                                        .arg(3)
                                        .query(conn)
                                        .unwrap()
                                }
                                Some(v) => {
                                    redis::cmd("SET").arg(k.adapt()).arg(v).query(conn).unwrap()
                                }
                            };
                        }
                        match &value {
                            None => mem.set_hash(&mem_keys.adapt(), &[(b"t0", b"3")]),
                            Some(v) => mem.set(&mem_keys.adapt(), v),
                        }
                        continue;
                    }
                    Op::Mark => {
                        for k in [&lua_keys, &mod_keys] {
                            redis::cmd("SET")
                                .arg(k.hot_flag(&shop))
                                .arg(1)
                                .arg("EX")
                                .arg(1000)
                                .query::<()>(conn)
                                .unwrap();
                        }
                        mem.mark_hot(&mem_keys.hot_flag(&shop), 1000).unwrap();
                        continue;
                    }
                    Op::Unmark => {
                        for k in [&lua_keys, &mod_keys] {
                            redis::cmd("DEL")
                                .arg(k.hot_flag(&shop))
                                .query::<()>(conn)
                                .unwrap();
                        }
                        mem.unmark_hot(&mem_keys.hot_flag(&shop)).unwrap();
                        continue;
                    }
                    Op::LiveChange(next) => {
                        count(&changes, true);
                        set = next;
                        version = format!("{}-e{op_n}-{now}", changes.get());
                        for k in [&lua_keys, &mod_keys] {
                            redis::cmd("SET")
                                .arg(k.limits_version())
                                .arg(&version)
                                .query::<()>(conn)
                                .unwrap();
                        }
                        mem.set(&mem_keys.limits_version(), version.as_bytes());
                        continue;
                    }
                    Op::Foreign {
                        lane,
                        form,
                        offsets,
                    } => {
                        count(&foreign, true);
                        let key = |k: &Keys| match lane {
                            0 => k.global(),
                            1 => k.hot_lane(),
                            _ => k.hot_shop(&shop),
                        };
                        let spec = set.get(Lane::ALL[lane]).unwrap_or(&set.global);
                        let value = foreign_value(form, now, spec, offsets);
                        for k in [&lua_keys, &mod_keys] {
                            let _: () = match &value {
                                None => {
                                    redis::cmd("DEL").arg(key(k)).query::<()>(conn).unwrap();
                                    redis::cmd("HSET")
                                        .arg(key(k))
                                        .arg("tokens")
                                        .arg(3)
                                        .query(conn)
                                        .unwrap()
                                }
                                Some(v) => {
                                    redis::cmd("SET").arg(key(k)).arg(v).query(conn).unwrap()
                                }
                            };
                        }
                        match &value {
                            None => mem.set_hash(&key(&mem_keys), &[(b"tokens", b"3")]),
                            Some(v) => mem.set(&key(&mem_keys), v),
                        }
                        continue;
                    }
                    Op::DataLoss => {
                        for k in [&lua_keys, &mod_keys] {
                            let pattern = [k.hash_tag(), b"*"].concat();
                            let found: Vec<Vec<u8>> =
                                redis::cmd("KEYS").arg(pattern).query(conn).unwrap();
                            if !found.is_empty() {
                                redis::cmd("DEL").arg(found).query::<()>(conn).unwrap();
                            }
                        }
                        mem.flush_all();
                        version.clear();
                        account.clear();
                        counted = [0; 4];
                        continue;
                    }
                    Op::InFlightChange(draws) => {
                        if let Some(f) = &mut in_flight {
                            let g = 1 + i64::from(draws[0] % 8);
                            let next = [
                                g,
                                i64::from(draws[1] % 5).min(g),
                                i64::from(draws[2] % 3).min(g),
                            ];
                            count(&lowered, next.iter().zip(f.limits).any(|(n, o)| *n < o));
                            f.limits = next;
                        }
                        continue;
                    }
                    Op::Release {
                        pick,
                        leaked: at_end,
                    } => {
                        if leases.is_empty() {
                            continue;
                        }
                        let (id, lease_shop, lease_us) =
                            leases[pick as usize % leases.len()].clone();
                        let mut replies = Vec::new();
                        for k in [&lua_keys, &mod_keys, &mem_keys] {
                            let lease_keys = Lane::ALL.map(|l| k.leases(l, &lease_shop));
                            let stats_key = k.lease_stats();
                            let call = ReleaseCall {
                                lease_keys: [&lease_keys[0], &lease_keys[1], &lease_keys[2]],
                                stats_key: &stats_key,
                                lease_id: id.as_bytes(),
                                lease_us,
                                leaked: at_end,
                            };
                            replies.push(if std::ptr::eq(k, &mem_keys) {
                                mem.release(&call).unwrap()
                            } else if std::ptr::eq(k, &mod_keys) {
                                command(release::MODULE_COMMAND, &call)
                                    .arg(now)
                                    .query::<Vec<i64>>(conn)
                                    .unwrap()
                            } else {
                                let mut inv = invocation(&call, &release_script);
                                inv.arg(now);
                                inv.invoke::<Vec<i64>>(conn).unwrap()
                            });
                        }
                        let what = format!("release {op_n} (lease {id} of {lease_us} µs, shop {}, leaked {at_end}, at {now} µs)", String::from_utf8_lossy(&lease_shop));
                        prop_assert_eq!(&replies[1], &replies[0], "{}: module vs script", what);
                        prop_assert_eq!(&replies[2], &replies[0], "{}: model vs script", what);
                        let (outcome, _) =
                            ReleaseCall::decode_reply(&replies[0]).map_err(TestCaseError::fail)?;
                        let mut seen = release_outcomes.get();
                        seen[outcome as usize] += 1;
                        release_outcomes.set(seen);
                        count(&leaked, at_end && outcome as usize == 1);
                        let mut found = [None; 3];
                        for lane in Lane::ALL {
                            let key = mem_keys.leases(lane, &lease_shop);
                            if let Some(set) = account.get_mut(&key) {
                                found[lane as usize] = set.score(id.as_bytes());
                                set.remove(id.as_bytes());
                                if set.is_empty() {
                                    account.remove(&key);
                                }
                            }
                        }
                        let want = match found.iter().flatten().next() {
                            None => 0,
                            Some(&e) if e <= now => {
                                counted[3] += i64::from(found[0].is_some());
                                2
                            }
                            Some(&e) => {
                                counted[0] += 1;
                                counted[1] += (now - (e - lease_us)).max(0);
                                counted[2] += i64::from(at_end);
                                1
                            }
                        };
                        prop_assert_eq!(outcome as i64, want, "{}: the contract's outcome", what);
                        stored_leases(
                            conn,
                            &mem,
                            [&lua_keys, &mod_keys, &mem_keys],
                            (&account, counted),
                            now,
                        )
                        .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
                        continue;
                    }
                    Op::Decide {
                        tokens,
                        peek,
                        max_wait_us,
                        endpoint,
                        class,
                    } => {
                        call_endpoint = endpoint;
                        call_share = match class {
                            0 => 0,
                            c => shares[c as usize - 1],
                        };
                        (one_to(set.min_capacity().min(3), tokens), peek, max_wait_us)
                    }
                };
                count(&peeks, peek);
                let lanes = LaneArgs::new(&set);
                let in_flight_args = InFlightArgs::new(in_flight.as_ref());
                let lease_id = format!("{name}-{op_n}");
                // One call, encoded once per key namespace, sent to each engine.
                let with_call = |keys: &Keys, send: &mut dyn FnMut(&DecideCall<'_>) -> Vec<i64>| {
                    let shop_keys = ShopKeys::new(keys, &shop);
                    let endpoint_args = match call_endpoint {
                        0 => None,
                        e => Some(EndpointArgs::new(
                            keys,
                            ENDPOINT_NAMES[e as usize - 1],
                            &endpoints[e as usize - 1],
                        )),
                    };
                    send(&DecideCall {
                        endpoint: endpoint_args.as_ref(),
                        share_ppm: call_share,
                        adapt: &adapt_args,
                        keys: shop_keys.decide_keys(),
                        tokens,
                        static_hot: static_hot && shop_n == 0,
                        lanes: &lanes,
                        version: version.as_bytes(),
                        shop: &shop,
                        auto_hot: &auto_args,
                        settings: "s",
                        peek,
                        max_wait_us,
                        in_flight: &in_flight_args,
                        lease_id: lease_id.as_bytes(),
                    })
                };
                let lua = with_call(&lua_keys, &mut |call| {
                    let mut inv = invocation(call, &script);
                    inv.arg(now);
                    inv.invoke(conn).unwrap()
                });
                let native = with_call(&mod_keys, &mut |call| {
                    command(MODULE_COMMAND, call).arg(now).query(conn).unwrap()
                });
                let model = with_call(&mem_keys, &mut |call| mem.decide(call).unwrap());
                let sign = |v: &[i64]| {
                    let mut v = v.to_vec();
                    if v.len() >= 9 {
                        v[8] = v[8].signum();
                    }
                    v
                };
                let what = format!(
                "call {op_n} (shop s{shop_n}, {tokens} tokens at {now} µs, version {version:?}, {set:?}, {auto:?}, adaptive {adaptive:?}, in_flight {in_flight:?}, peek {peek}, endpoint {call_endpoint} of {endpoints:?}, share {call_share} ppm)"
            );
                prop_assert_eq!(sign(&native), sign(&lua), "{}: module vs script", what);
                prop_assert_eq!(sign(&model), sign(&lua), "{}: model vs script", what);
                stored_adapt(conn)?;
                if lua.len() >= 9 {
                    let reply = StepReply::from_ints(&lua).unwrap();
                    prop_assert!(
                        adaptive.is_some() || !reply.adapt_seen,
                        "{}: adaptive off read the state: {:?}",
                        what,
                        reply
                    );
                    count(&provider, reply.provider);
                    count(&recoveries, reply.recovered());
                    count(
                        &scaled_decisions,
                        reply.adapt_seen && !reply.provider && reply.adapt_permille < 1000,
                    );
                    count(
                        &reserved,
                        reply.reason.is_none() && reservation_wait_us(&set, &reply) > 0,
                    );
                    count(&became, lua[6] == 1);
                    count(&endpoint_denials, reply.endpoint_denied);
                    count(
                        &reserve_denials,
                        call_share > 0
                            && reply.reason.is_some()
                            && !reply.provider
                            && !reply.in_flight,
                    );
                    count(&carried, !version.is_empty());
                    if reply.in_flight {
                        let mut seen = in_flight_denials.get();
                        seen[reply.reason.map_or(0, |l| l as usize)] += 1;
                        in_flight_denials.set(seen);
                    }
                    if let (Some(f), None, false) = (&in_flight, reply.reason, peek) {
                        // Taken: a lease on every level that applies, expired ones
                        // removed first (those of the global level counted).
                        leases.push((lease_id.clone(), shop.clone(), f.lease_us));
                        for (lane, _) in f.applicable(reply.hot) {
                            let set = account.entry(mem_keys.leases(lane, &shop)).or_default();
                            let gone = set.take(lease_id.as_bytes(), now + f.lease_us, now);
                            if lane == Lane::Global {
                                counted[3] += gone;
                            }
                            count(&pruned, lane == Lane::Global && gone > 0);
                        }
                    }
                }
                stored_leases(
                    conn,
                    &mem,
                    [&lua_keys, &mod_keys, &mem_keys],
                    (&account, counted),
                    now,
                )
                .map_err(|e| TestCaseError::fail(format!("{what}: {e}")))?;
            }
            Ok(())
        },
    );
    // The sequences did reach the interesting parts.
    let leases = (
        in_flight_denials.get(),
        release_outcomes.get(),
        pruned.get(),
        leaked.get(),
        lowered.get(),
    );
    println!("in-flight denials per level, releases per outcome (not held, released, expired), decisions that pruned expired leases, leaked releases, live changes lowering a limit: {leases:?}");
    assert!(
        leases.0.iter().chain(&leases.1).all(|&n| n > 0)
            && leases.2 > 0
            && leases.3 > 0
            && leases.4 > 0,
        "a lease outcome never seen: {leases:?}"
    );
    assert!(became.get() > 0, "no shop ever became hot");
    assert!(
        endpoint_denials.get() > 0 && reserve_denials.get() > 0,
        "no endpoint denial ({}) or denial of a class with a reserve ({})",
        endpoint_denials.get(),
        reserve_denials.get()
    );
    assert!(carried.get() > 0, "no decision after a live change");
    assert!(peeks.get() > 0, "no peek");
    assert!(reserved.get() > 0, "no reservation waited");
    assert!(foreign.get() > 0, "no foreign value written");
    let adapt = [
        ("provider denials", provider.get()),
        ("decreases", decreases.get()),
        ("recoveries", recoveries.get()),
        ("scaled decisions", scaled_decisions.get()),
        ("foreign adapt values", adapt_foreign.get()),
    ];
    println!("adaptive: {adapt:?}");
    for (what, n) in adapt {
        assert!(n > 0, "no {what} over the run: {adapt:?}");
    }
}

/// The lease sets and the stats hash of the three engines' key spaces (`keys`: the
/// script's, the module's, the in-memory store's) against the contract's account of the
/// sets (by the in-memory store's key names) and of the stats (released, hold_us, leaked,
/// expired): the same members and expiry instants in Valkey, as many held in the store,
/// the same set present; the stats alike and as counted, every field one of the
/// contract's. A lease set lives 601 s after its last lease (Valkey's clock).
fn stored_leases(
    conn: &mut redis::Connection,
    mem: &checkout_guard_runtime::store::MemoryStore,
    keys: [&Keys; 3],
    (account, counted): (&HashMap<Vec<u8>, LeaseSet>, [i64; 4]),
    now: i64,
) -> Result<(), String> {
    let [lua_keys, mod_keys, mem_keys] = keys;
    let present = mem.keys();
    let mut levels = vec![(Lane::Global, Vec::new()), (Lane::HotLane, Vec::new())];
    levels.extend((0..4).map(|n| (Lane::HotShop, format!("s{n}").into_bytes())));
    for (lane, shop) in &levels {
        let what = format!("lease set {lane:?} {}", String::from_utf8_lossy(shop));
        let lua = zset(conn, &lua_keys.leases(*lane, shop));
        let native = zset(conn, &mod_keys.leases(*lane, shop));
        if native != lua {
            return Err(format!("{what}: module {native:?}, script {lua:?}"));
        }
        let mk = mem_keys.leases(*lane, shop);
        let want = account.get(&mk);
        let expected = |id: &[u8]| want.and_then(|w| w.score(id));
        if lua.len() != want.map_or(0, LeaseSet::len)
            || lua
                .iter()
                .any(|(id, score)| expected(id.as_bytes()) != Some(*score))
        {
            return Err(format!("{what}: script {lua:?}, contract {want:?}"));
        }
        let held = want.map_or(0, |w| w.held(now).held);
        if mem.leases_held(&mk) != held || present.contains(&mk) != want.is_some() {
            return Err(format!(
                "{what}: the in-memory store holds {} (present: {}), contract {want:?} ({held} held)",
                mem.leases_held(&mk),
                present.contains(&mk)
            ));
        }
        if !lua.is_empty() {
            for k in [lua_keys, mod_keys] {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(k.leases(*lane, shop))
                    .query(conn)
                    .unwrap();
                if !(590_000..=601_000).contains(&pttl) {
                    return Err(format!("{what}: PTTL {pttl}"));
                }
            }
        }
    }
    let lua = stats_hash(conn, &lua_keys.lease_stats());
    let native = stats_hash(conn, &mod_keys.lease_stats());
    if native != lua {
        return Err(format!("lease stats: module {native:?}, script {lua:?}"));
    }
    let fields = [
        lease_stats::RELEASED,
        lease_stats::HOLD_US,
        lease_stats::LEAKED,
        lease_stats::EXPIRED,
    ];
    let model: Vec<(String, i64)> = fields
        .iter()
        .map(|f| (f.to_string(), mem.hash_field(&mem_keys.lease_stats(), f)))
        .collect();
    for (f, v) in &model {
        let got = lua.iter().find(|(g, _)| g == f).map_or(0, |(_, v)| *v);
        if got != *v {
            return Err(format!("lease stats: model {model:?}, script {lua:?}"));
        }
    }
    if lua.iter().any(|(f, _)| !fields.contains(&f.as_str())) {
        return Err(format!("lease stats: a field not in the contract: {lua:?}"));
    }
    if model.iter().map(|(_, v)| *v).ne(counted) {
        return Err(format!(
            "lease stats: model {model:?}, contract {counted:?} (released, hold_us, leaked, expired)"
        ));
    }
    Ok(())
}

/// The production feedback script (Valkey's clock) stores what `adaptive::feedback`
/// computes, with its expiry: until the budget is back at the limits (or the pause is
/// over) and a minute; the last throttling answer for a day.
#[test]
fn production_feedback_script_stores_the_models_state_and_expiry() {
    use checkout_guard_model::adaptive::{feedback, AdaptState};
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = &*checkout_guard_connection::scripts::FEEDBACK;
    let keys = Keys::new("fb");
    let (adapt_key, last_key) = (keys.adapt(), keys.adapt_last());
    let params = AdaptParams {
        floor_permille: 100,
        recover_us: 30_000_000,
    };
    for (retry_after_us, want_paused) in [(0, false), (90_000_000, true)] {
        let _: () = redis::cmd("DEL").arg(&adapt_key).query(&mut conn).unwrap();
        let call = FeedbackCall {
            adapt_key: &adapt_key,
            last_key: &last_key,
            status: 429,
            decrease: 0.7,
            params,
            retry_after_us,
        };
        let inv = invocation(&call, script);
        let got = FeedbackCall::decode_reply(&inv.invoke::<Vec<i64>>(&mut conn).unwrap()).unwrap();
        let want = feedback(None, got.now, &params, 0.7, retry_after_us);
        assert_eq!(got.to_ints(), want.to_ints());
        assert_eq!(got.paused, want_paused);
        let stored: Vec<u8> = redis::cmd("GET").arg(&adapt_key).query(&mut conn).unwrap();
        assert_eq!(AdaptState::read_like_the_script(&stored), Some(want.next));
        let pttl: i64 = redis::cmd("PTTL").arg(&adapt_key).query(&mut conn).unwrap();
        assert!(
            (want.px_ms - 1000..=want.px_ms).contains(&pttl),
            "PTTL {pttl}, model {} ms",
            want.px_ms
        );
        let last: String = redis::cmd("GET").arg(&last_key).query(&mut conn).unwrap();
        assert_eq!(last, format!("429:{}:{retry_after_us}", got.now));
        let pttl: i64 = redis::cmd("PTTL").arg(&last_key).query(&mut conn).unwrap();
        assert!((86_399_000..=86_400_000).contains(&pttl), "PTTL {pttl}");
    }
}
