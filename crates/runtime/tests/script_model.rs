//! The Valkey script and the Rust model must decide identically: both are driven with the
//! same random sequences of (time, shop, tokens, hot marks) and every reply is compared.

mod common;

use std::collections::{HashMap, HashSet};

use checkout_guard_model::call::{
    decide_source, decide_source_with_test_clock, AutoHotArgs, DecideCall, LaneArgs, ShopKeys,
    SETTINGS_TTL_SECONDS,
};
use checkout_guard_model::{
    reservation_wait_us, step, BucketSet, BucketSpec, Decision, Keys, Lane, StepReply,
    StoredBucket, StoredState,
};
use checkout_guard_runtime::store::invocation;
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

#[test]
fn script_and_model_decide_identically_on_random_sequences() {
    let valkey = Valkey::start();
    let mut conn = valkey.connection();
    let script = redis::Script::new(&decide_source_with_test_clock());
    let shops: [&[u8]; 4] = [b"shop-a", b"shop-b", b"{shop}:c", b"\xffshop d"];
    let mut reasons_seen = [0u32; 4];
    let (mut steps, mut changes, mut carried, mut stale) = (0, 0, 0, 0);
    for seed in 1..=40u64 {
        let mut rng = Rng::new(seed);
        let mut set = random_buckets(&mut rng);
        let keys = Keys::new(&format!("seed{seed}"));
        let static_hot: Vec<bool> = shops.iter().map(|_| rng.chance(25)).collect();
        let mut model = ModelStore::default();
        let mut now: i64 = 1_800_000_000_000_000 + rng.range(0, 1_000_000_000);
        // The live limits' version in Valkey, and the one the caller decides with.
        let mut version = String::new();
        let settings = format!("settings of seed {seed}");
        for _ in 0..600 {
            let shop = rng.range(0, shops.len() as i64 - 1) as usize;
            if rng.chance(5) {
                // Mark or unmark the shop hot, in Valkey and in the model.
                let flag = keys.hot_flag(shops[shop]);
                if model.marked.insert(shop) {
                    redis::cmd("SET")
                        .arg(&flag)
                        .arg(1)
                        .arg("PX")
                        .arg(MARK_TTL_MS)
                        .query::<()>(&mut conn)
                        .unwrap();
                } else {
                    model.marked.remove(&shop);
                    redis::cmd("DEL").arg(&flag).query::<()>(&mut conn).unwrap();
                }
            }
            if rng.chance(3) {
                // A live change (or a deploy): other limits over the same stored state.
                // First a caller that still decides with the old version: nothing happens.
                set = random_buckets(&mut rng);
                changes += 1;
                let next = format!("{changes}-{seed:x}-{now}");
                redis::cmd("SET")
                    .arg(keys.limits_version())
                    .arg(&next)
                    .query::<()>(&mut conn)
                    .unwrap();
                let tokens = rng.range(1, set.min_capacity());
                let call = Call {
                    keys: &keys,
                    shop: shops[shop],
                    tokens,
                    static_hot: static_hot[shop],
                    set: &set,
                    version: &version,
                    settings: &settings,
                    now,
                };
                assert_eq!(
                    invoke(&script, &mut conn, &call),
                    vec![-1, 0],
                    "seed {seed}: stale version"
                );
                stale += 1;
                version = next;
            }
            // Bursts at one instant, short gaps, and long idle stretches.
            now += match rng.range(0, 9) {
                0..=2 => 0,
                3..=7 => rng.range(1, 300_000),
                _ => rng.range(300_000, 5_000_000),
            };
            // Up to more than a capacity (a live change may have lowered it).
            let tokens = rng.range(1, set.min_capacity().min(5) + 1);
            let state = model.state(shop);
            if state.buckets.iter().flatten().any(|b| {
                b.params.is_some_and(|p| {
                    !Lane::ALL.iter().any(|&l| {
                        set.get(l)
                            .is_some_and(|x| (x.interval_us(), x.tolerance_us()) == p)
                    })
                })
            }) {
                carried += 1;
            }
            let (mut want, next) = step(&set, &state, now, tokens, static_hot[shop], &version);
            model.store(shop, next);
            let call = Call {
                keys: &keys,
                shop: shops[shop],
                tokens,
                static_hot: static_hot[shop],
                set: &set,
                version: &version,
                settings: &settings,
                now,
            };
            let got = invoke(&script, &mut conn, &call);
            let got = StepReply::from_ints(&got).expect("reply shape");
            // PTTL reads real time: the mark was set at most a minute ago.
            if want.mark_ttl_ms == MARK_TTL_MS
                && (MARK_TTL_MS - 60_000..=MARK_TTL_MS).contains(&got.mark_ttl_ms)
            {
                want.mark_ttl_ms = got.mark_ttl_ms;
            }
            assert_eq!(
                got, want,
                "seed {seed}, shop {shop}, tokens {tokens}, buckets {set:?}"
            );
            // Same reply, same decision; and the decision is self-consistent.
            let d = Decision::from_reply(&set, tokens, &got);
            assert_eq!(d.allowed, d.retry_after == 0.0, "{d:?}");
            reasons_seen[got.reason.map_or(0, |l| l as usize + 1)] += 1;
            steps += 1;
        }
        // What the script stored is what the model stored, to the character.
        let stored: Option<String> = redis::cmd("GET")
            .arg(keys.global())
            .query(&mut conn)
            .unwrap();
        assert_eq!(stored, model.global.map(|b| b.encode()), "seed {seed}");
        // The settings were published with a TTL.
        let (text, ttl): (Option<String>, i64) = redis::pipe()
            .cmd("GET")
            .arg(keys.settings())
            .cmd("TTL")
            .arg(keys.settings())
            .query(&mut conn)
            .unwrap();
        assert_eq!(text.as_deref(), Some(settings.as_str()));
        assert!(
            (1..=SETTINGS_TTL_SECONDS).contains(&ttl),
            "settings TTL {ttl}"
        );
    }
    // The sequences must exercise every outcome, or the comparison proves little.
    for (reason, n) in reasons_seen.iter().enumerate() {
        assert!(
            *n > 20,
            "reason {reason} seen only {n} times in {steps} steps: {reasons_seen:?}"
        );
    }
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
        let (want, _) = step(set, &StoredState::default(), now, tokens, false, version);
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
    let script = redis::Script::new(&decide_source());
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
    let inv = invocation(&call, &script);
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

/// The three engines of a decision decide every call of random sequences identically:
/// the production script (on a test clock), the native module's `CG.DECIDE` (loaded with
/// `test-clock`) and the in-memory store (the model's `server::decide_on`). The sequences
/// have `auto_hot`, static and marked hot shops, marks removed, live changes (new limits
/// and version, buckets carried over), data loss, foreign values written into bucket keys
/// (other formats, other types), and peeks (decide, write nothing). Marks live 1,000 s, longer than any
/// sequence, so Valkey's real clock and the simulated one never disagree about them; the
/// mark's PTTL (real in Valkey) is compared by sign only.
#[test]
fn script_module_and_model_agree_on_random_sequences() {
    use checkout_guard_model::AutoHot;
    use checkout_guard_runtime::store::{MemoryStore, Store};
    use std::time::Duration;

    let module = common::valkey_module();
    let valkey = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
    ]);
    let mut conn = valkey.connection();
    let script = redis::Script::new(&decide_source_with_test_clock());
    let seed = std::env::var("CG_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("seed {seed} (CG_MODEL_SEED={seed} repeats it)");
    let mut rng = Rng::new(seed);
    let (mut became, mut changes, mut carried, mut peeks, mut reserved) = (0, 0, 0, 0, 0);
    let mut foreign = 0;
    for seq in 0..40 {
        let mem = MemoryStore::new();
        // As the test-clock script and module: buckets live an hour longer.
        mem.keep_buckets_longer(3_600_000);
        let lua_keys = Keys::new(&format!("lua-{seed}-{seq}"));
        let mod_keys = Keys::new(&format!("mod-{seed}-{seq}"));
        let mem_keys = Keys::new("mem");
        let mut set = random_buckets(&mut rng);
        let auto = rng.chance(70).then(|| AutoHot {
            window: Duration::from_millis(rng.range(1000, 3000) as u64),
            share: [0.2, 0.34, 0.5, 0.75][rng.range(0, 3) as usize],
            ttl_seconds: 1000,
            min_tokens: rng.range(1, 8),
        });
        let auto_args = AutoHotArgs::new(auto.as_ref());
        let static_hot = rng.chance(30);
        let mut version = String::new();
        for op in 0..60 {
            mem.advance(Duration::from_micros(rng.range(0, 300_000) as u64));
            let now = mem.now_us();
            let shop_n = rng.range(0, 3);
            let shop = format!("s{shop_n}").into_bytes();
            match rng.range(0, 99) {
                0..=5 => {
                    // A mark, as markHot() sets it.
                    for k in [&lua_keys, &mod_keys] {
                        redis::cmd("SET")
                            .arg(k.hot_flag(&shop))
                            .arg(1)
                            .arg("EX")
                            .arg(1000)
                            .query::<()>(&mut conn)
                            .unwrap();
                    }
                    mem.mark_hot(&mem_keys.hot_flag(&shop), 1000).unwrap();
                    continue;
                }
                6..=8 => {
                    for k in [&lua_keys, &mod_keys] {
                        redis::cmd("DEL")
                            .arg(k.hot_flag(&shop))
                            .query::<()>(&mut conn)
                            .unwrap();
                    }
                    mem.unmark_hot(&mem_keys.hot_flag(&shop)).unwrap();
                    continue;
                }
                9..=12 => {
                    // A live change: new limits, a new version carrying its instant.
                    changes += 1;
                    set = random_buckets(&mut rng);
                    version = format!("{changes}-e{seq}-{now}");
                    for k in [&lua_keys, &mod_keys] {
                        redis::cmd("SET")
                            .arg(k.limits_version())
                            .arg(&version)
                            .query::<()>(&mut conn)
                            .unwrap();
                    }
                    mem.set(&mem_keys.limits_version(), version.as_bytes());
                    continue;
                }
                14..=16 => {
                    // A foreign value in a bucket key (another library's state, an older
                    // release's, a hand edit): what no engine reads is a missing key (a
                    // full bucket) in all three, replaced by the next write; what reads is
                    // read alike (leading zeros, a bare TAT).
                    foreign += 1;
                    let lane = rng.range(0, 2);
                    let key = |k: &Keys| match lane {
                        0 => k.global(),
                        1 => k.hot_lane(),
                        _ => k.hot_shop(&shop),
                    };
                    let bare_tat = format!("{}", now + rng.range(-2_000_000, 2_000_000));
                    let zeros = format!("000{}", now + rng.range(0, 1_000_000));
                    let spec = set.get(Lane::ALL[lane as usize]).unwrap_or(&set.global);
                    let padded = format!(
                        "{}:000{}:0{}:",
                        now + rng.range(0, 1_000_000),
                        spec.interval_us(),
                        spec.tolerance_us()
                    );
                    // Readable but huge: a TAT 285 years ahead, or one whose carry-over to
                    // these limits leaves 2^53 (clamped there alike: still a denial).
                    let huge_same = format!(
                        "9007199254740991:{}:{}:",
                        spec.interval_us(),
                        spec.tolerance_us()
                    );
                    let forms: [&[u8]; 25] = [
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
                    let value = forms[rng.range(0, forms.len() as i64 - 1) as usize];
                    for k in [&lua_keys, &mod_keys] {
                        let _: () = if value == b"hash" {
                            redis::cmd("DEL")
                                .arg(key(k))
                                .query::<()>(&mut conn)
                                .unwrap();
                            redis::cmd("HSET")
                                .arg(key(k))
                                .arg("tokens")
                                .arg(3)
                                .query(&mut conn)
                                .unwrap()
                        } else {
                            redis::cmd("SET")
                                .arg(key(k))
                                .arg(value)
                                .query(&mut conn)
                                .unwrap()
                        };
                    }
                    if value == b"hash" {
                        mem.set_hash(&key(&mem_keys), &[(b"tokens", b"3")]);
                    } else {
                        mem.set(&key(&mem_keys), value);
                    }
                    continue;
                }
                13 => {
                    // Data loss.
                    for k in [&lua_keys, &mod_keys] {
                        let pattern = [k.hash_tag(), b"*"].concat();
                        let found: Vec<Vec<u8>> =
                            redis::cmd("KEYS").arg(pattern).query(&mut conn).unwrap();
                        if !found.is_empty() {
                            redis::cmd("DEL").arg(found).query::<()>(&mut conn).unwrap();
                        }
                    }
                    mem.flush_all();
                    version.clear();
                    continue;
                }
                _ => {}
            }
            let lanes = LaneArgs::new(&set);
            let max_tokens = set.min_capacity().min(3);
            let tokens = rng.range(1, max_tokens);
            // One call in five is a peek: the same answer, nothing written (the calls
            // after it show that nothing was).
            let peek = rng.chance(20);
            peeks += usize::from(peek);
            // One call in four is a reservation: tokens there within up to 2 s are taken
            // now (a peek may ask with a wait too: the contract allows it).
            let max_wait_us = if rng.chance(25) {
                rng.range(1, 2_000_000)
            } else {
                0
            };
            // One call, encoded once per key namespace, sent to each engine.
            let with_call = |keys: &Keys, send: &mut dyn FnMut(&DecideCall<'_>) -> Vec<i64>| {
                let shop_keys = ShopKeys::new(keys, &shop);
                send(&DecideCall {
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
                })
            };
            let lua = with_call(&lua_keys, &mut |call| {
                let mut inv = invocation(call, &script);
                inv.arg(now);
                inv.invoke(&mut conn).unwrap()
            });
            let native = with_call(&mod_keys, &mut |call| {
                let mut cmd = redis::cmd("CG.DECIDE");
                for k in call.keys() {
                    cmd.arg(k);
                }
                for a in call.argv() {
                    cmd.arg(a.as_ref());
                }
                cmd.arg(now).query(&mut conn).unwrap()
            });
            let model = with_call(&mem_keys, &mut |call| mem.decide(call).unwrap());
            let sign = |v: &[i64]| {
                let mut v = v.to_vec();
                if v.len() == 9 {
                    v[8] = v[8].signum();
                }
                v
            };
            let what = format!(
                "seed {seed}, sequence {seq}, call {op} (shop s{shop_n}, {tokens} tokens at {now} µs, version {version:?}, {set:?}, {auto:?})"
            );
            assert_eq!(sign(&native), sign(&lua), "{what}: module vs script");
            assert_eq!(sign(&model), sign(&lua), "{what}: model vs script");
            if lua.len() == 9 {
                let reply = StepReply::from_ints(&lua).unwrap();
                if reply.reason.is_none() && reservation_wait_us(&set, &reply) > 0 {
                    reserved += 1;
                }
                became += usize::from(lua[6] == 1);
                carried += usize::from(!version.is_empty());
            }
        }
    }
    // The sequences did reach the interesting parts.
    assert!(became > 0, "seed {seed}: no shop ever became hot");
    assert!(carried > 0, "seed {seed}: no decision after a live change");
    assert!(peeks > 0, "seed {seed}: no peek");
    assert!(reserved > 0, "seed {seed}: no reservation waited");
    assert!(foreign > 0, "seed {seed}: no foreign value written");
}
