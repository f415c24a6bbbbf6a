//! `checkout-guard replay --limits '... in_flight=N[/M/K]'` (issue 37): leases modelled
//! from the recorded calls' start (`timestamp`) and `duration.ms`. Hand-made event files
//! whose answer is worked out by hand in each test's comment (through the binary, JSON and
//! text), and a property test of the library against a brute-force reference: random
//! calls, a call denied iff at its start a level that applies is full, and at no instant
//! more calls in flight than a level's limit.

use std::collections::{HashMap, HashSet};
use std::process::{Command, Stdio};

use checkout_guard_cli::replay::{parse_limits, Common, Sim, Verdict};
use checkout_guard_model::Lane;
use proptest::prelude::*;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
/// 2026-11-30 00:00:00 UTC.
const DAY: i64 = 1_796_083_200_000 - 86_400_000;

fn call(ts: i64, shop: &str, ms: f64) -> String {
    format!(
        r#"{{"eventType":"ExternalApiCall","timestamp":{},"api":"payment","http.response.status_code":200,"shop.id":"{shop}","duration.ms":{ms}}}"#,
        DAY + ts
    )
}

fn denial(ts: i64, shop: &str) -> String {
    format!(
        r#"{{"eventType":"RateLimitDecision","timestamp":{},"limiter":"payments","shop.id":"{shop}","reason":"global","allowed":false}}"#,
        DAY + ts
    )
}

fn file(name: &str, lines: &[String]) -> String {
    let dir = std::env::temp_dir().join(format!("cg-inflight-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, lines.join("\n") + "\n").unwrap();
    p.to_string_lossy().into_owned()
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn replay(f: &str, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["replay", f, "--api", "payment", "--json"];
    args.extend_from_slice(extra);
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn levels(g: u64, l: u64, s: u64) -> serde_json::Value {
    serde_json::json!({"global": g, "hot_lane": l, "hot_shop": s})
}

/// in_flight=2, every call 1 s: A at 0 ms [0, 1000), B at 100 [100, 1100); C at 200 finds
/// both held: denied; D at 1000 finds A released at that instant: admitted [1000, 2000);
/// E at 1050 finds B and D: denied; F at 1100 finds B released: admitted.
#[test]
fn the_global_level_denies_while_its_leases_are_all_held() {
    let f = file(
        "global.jsonl",
        &[0, 100, 200, 1000, 1050, 1100].map(|t| call(t, "a", 1000.0)),
    );
    let j = replay(&f, &["--limits", "global=100/100 in_flight=2"]);
    let t = &j["totals"];
    assert_eq!(t["admitted"], 4, "{j}");
    assert_eq!(t["denied_in_flight"], levels(2, 0, 0));
    assert_eq!(t["denied"]["global"], 0);
    assert_eq!(t["denied_total"], 2);
    assert_eq!(t["in_flight"]["peak"], levels(2, 0, 0));
    assert_eq!(t["in_flight"]["peak_at_ms"]["global"], DAY + 100);
    assert_eq!(
        t["in_flight"]["limits"],
        serde_json::json!({"global": 2, "hot_lane": null, "hot_shop": null, "lease_seconds": 30.0})
    );
    assert_eq!(j["shops"]["a"]["denied_in_flight"], levels(2, 0, 0));
    assert_eq!(j["shops"]["a"]["peak_in_flight"], 2);
    // Without in_flight the same calls are all admitted; the peak is still measured (4:
    // B, C, D and E at 1050 ms), which is what sizing N needs.
    let j = replay(&f, &["--limits", "global=100/100"]);
    assert_eq!(j["totals"]["admitted"], 6);
    assert_eq!(j["totals"]["in_flight"]["peak"]["global"], 4);
    assert_eq!(j["totals"]["in_flight"]["peak_at_ms"]["global"], DAY + 1050);
    assert!(j["totals"]["in_flight"]["limits"].is_null());
}

/// in_flight=3/2/1, hot h1 h2 h3, every call 500 ms:
/// 0 h1 admitted; 10 h1 its shop holds 1: in_flight_hot_shop; 20 h2 admitted (lane 2);
/// 30 h3 the lane holds 2: in_flight_hot_lane; 40 o (not hot) admitted (global 3); 50 o
/// global holds 3: in_flight_global; 500 h3: h1's lease ended, admitted; 510 h1: global
/// holds 3 again (h2, o, h3): in_flight_global, global first though h1's level is free.
#[test]
fn the_hot_levels_apply_to_hot_shops_after_the_global_level() {
    let calls = [
        (0, "h1"),
        (10, "h1"),
        (20, "h2"),
        (30, "h3"),
        (40, "o"),
        (50, "o"),
        (500, "h3"),
        (510, "h1"),
    ]
    .map(|(t, s)| call(t, s, 500.0));
    let f = file("hot.jsonl", &calls);
    let limits = "global=1000/1000 hot_lane=1000/1000 hot_shop=1000/1000 in_flight=3/2/1";
    let mut args = vec!["--limits", limits];
    for h in ["h1", "h2", "h3"] {
        args.extend(["--hot", h]);
    }
    let j = replay(&f, &args);
    let t = &j["totals"];
    assert_eq!(t["admitted"], 4, "{j}");
    assert_eq!(t["denied_in_flight"], levels(2, 1, 1));
    assert_eq!(t["in_flight"]["peak"], levels(3, 2, 1));
    let s = &j["shops"];
    assert_eq!(s["h1"]["denied_in_flight"], levels(1, 0, 1));
    assert_eq!(s["h3"]["denied_in_flight"], levels(0, 1, 0));
    assert_eq!(s["o"]["denied_in_flight"], levels(1, 0, 0));
    assert_eq!(s["h3"]["admitted"], 1);
    // The text says the same, per level and per shop.
    let (code, out, err) = run(&[
        "replay", &f, "--api", "payment", "--limits", limits, "--hot", "h1", "--hot", "h2",
        "--hot", "h3",
    ]);
    assert_eq!(code, 0, "{err}");
    for want in [
        "denied by in_flight_global",
        "2 (at 3)",
        "1 (at 2)",
        "1 (at 1)",
        "peak in flight g/l/s",
        "3/2/1",
        " if:1/0/1 1 hot",
    ] {
        assert!(out.contains(want), "{want:?} in\n{out}");
    }
    // A hot level needs its bucket (the option's rule), and at most the global level.
    for (bad, says) in [
        (
            "global=10/10 in_flight=3/2",
            "in_flight.hot_lane needs the hot_lane bucket",
        ),
        (
            "global=10/10 hot_shop=5/5 in_flight=3/-/4",
            "in_flight.hot_shop must be at most in_flight.global (3), got 4",
        ),
    ] {
        let (code, _, err) = run(&["replay", &f, "--api", "payment", "--limits", bad]);
        assert_eq!(code, 2);
        assert!(err.contains(says), "{bad}: {err}");
    }
}

/// All or nothing with the buckets, the buckets first. global=2/0.1 (one token per 10 s),
/// in_flight=1, calls of 5 s: at 0 admitted (1 token left); at 100 and 200 the lease is
/// held: in_flight_global, no token taken; at 5000 the lease ended, 1.5 tokens: admitted
/// (0.5 left); at 5001 both would deny: the bucket's reason, global. Had the in-flight
/// denials taken tokens, 200 would have been denied by global and 5000 too.
#[test]
fn an_in_flight_denial_takes_no_tokens_and_the_buckets_are_asked_first() {
    let f = file(
        "all-or-nothing.jsonl",
        &[0, 100, 200, 5000, 5001].map(|t| call(t, "a", 5000.0)),
    );
    let j = replay(&f, &["--limits", "global=2/0.1 in_flight=1"]);
    let t = &j["totals"];
    assert_eq!(t["admitted"], 2, "{j}");
    assert_eq!(t["denied_in_flight"], levels(1 + 1, 0, 0));
    assert_eq!(t["denied"]["global"], 1);
    let j = replay(&f, &["--limits", "global=2/0.1"]);
    assert_eq!(j["totals"]["admitted"], 2);
    assert_eq!(j["totals"]["denied"]["global"], 3);
}

/// A recorded denial admitted by the candidate made no call: its lease is held for the
/// mean duration of the calls read before it (1 s here), and counted. in_flight=2: a's call
/// [0, 1000), b's denial [100, 1100) estimated, c at 200 denied, c at 1100 admitted.
/// `lease_seconds=1` frees a 5 s call's lease after 1 s (counted as expired).
#[test]
fn denials_hold_the_mean_duration_and_a_lease_ends_at_its_bound() {
    let f = file(
        "estimated.jsonl",
        &[
            call(0, "a", 1000.0),
            denial(100, "b"),
            call(200, "c", 10.0),
            call(1100, "c", 10.0),
        ],
    );
    let j = replay(&f, &["--limits", "global=100/100 in_flight=2"]);
    let t = &j["totals"];
    assert_eq!(t["attempts"], 4, "{j}");
    assert_eq!(t["admitted"], 3);
    assert_eq!(j["shops"]["c"]["denied_in_flight"], levels(1, 0, 0));
    assert_eq!(t["in_flight"]["estimated_durations"], 1);
    let f = file(
        "lease.jsonl",
        &[
            call(0, "a", 5000.0),
            call(500, "a", 10.0),
            call(1000, "a", 10.0),
        ],
    );
    let j = replay(
        &f,
        &["--limits", "global=100/100 in_flight=1 lease_seconds=1"],
    );
    let t = &j["totals"];
    assert_eq!(t["admitted"], 2, "{j}");
    assert_eq!(t["in_flight"]["lease_expired"], 1);
    assert_eq!(t["in_flight"]["limits"]["lease_seconds"], 1.0);
    // The default bound (30 s) keeps it: both later calls denied.
    let j = replay(&f, &["--limits", "global=100/100 in_flight=1"]);
    assert_eq!(j["totals"]["admitted"], 1, "{j}");
}

#[test]
fn a_bad_in_flight_value_is_named() {
    let f = file("bad.jsonl", &[call(0, "a", 1.0)]);
    for (bad, says) in [
        (
            "global=1/1 in_flight=x",
            r#"--limits "global=1/1 in_flight=x": in_flight=x is not N[/M/K]"#,
        ),
        ("global=1/1 in_flight=0", "in_flight=0 is not N[/M/K]"),
        (
            "global=1/1 in_flight=1/2/3/4",
            "in_flight=1/2/3/4 is not N[/M/K]",
        ),
        ("global=1/1 in_flight=2.5", "in_flight=2.5 is not N[/M/K]"),
        (
            "global=1/1 in_flight=1 lease_seconds=601",
            "in_flight.lease_seconds must be a number of seconds from 1 to 600",
        ),
        (
            "global=1/1 lease_seconds=5",
            "lease_seconds needs in_flight=N[/M/K]",
        ),
        (
            "global=1/1 in_flight=1 in_flight=2",
            "in_flight given twice",
        ),
    ] {
        let (code, _, err) = run(&["replay", &f, "--api", "payment", "--limits", bad]);
        assert_eq!(code, 2, "{bad}");
        assert!(err.contains(says), "{bad}: {err}");
    }
}

// ---------------------------------------------------------------------------------------
// The property: the replay against a brute-force reference.

/// One generated call: start (ms from the first), shop (0..4; 0 and 1 hot), duration (ms;
/// None: a recorded denial, estimated).
type Gen = (i64, usize, Option<i64>);

#[derive(Debug, Clone, Copy)]
struct Limits {
    n: u64,
    m: Option<u64>,
    k: Option<u64>,
    lease_ms: i64,
}

/// Decides every call by looking at every admitted call before it: the levels that apply
/// (global; the hot lane and the shop's own when the shop is hot) are counted from scratch
/// at the call's start (a call in flight over `[start, end)`, `end` its duration or the
/// lease's bound later), denied at the first full one.
fn reference(calls: &[Gen], l: Limits) -> Vec<Verdict> {
    let hot = |shop: usize| shop < 2;
    let mut admitted: Vec<(i64, i64, usize)> = Vec::new();
    let (mut sum, mut n) = (0i128, 0i128);
    let mut out = Vec::new();
    for &(t, shop, dur) in calls {
        let t = t * 1000;
        let hold = match dur {
            Some(d) => {
                sum += i128::from(d * 1000);
                n += 1;
                d * 1000
            }
            None if n > 0 => (sum / n) as i64,
            None => 0,
        };
        let live = |f: &dyn Fn(usize) -> bool| {
            admitted
                .iter()
                .filter(|&&(s, e, sh)| s <= t && t < e && f(sh))
                .count() as u64
        };
        let g = live(&|_| true);
        let lane = live(&|sh| hot(sh));
        let own = live(&|sh| sh == shop);
        let v = if g >= l.n {
            Verdict::DeniedInFlight(Lane::Global)
        } else if hot(shop) && l.m.is_some_and(|m| lane >= m) {
            Verdict::DeniedInFlight(Lane::HotLane)
        } else if hot(shop) && l.k.is_some_and(|k| own >= k) {
            Verdict::DeniedInFlight(Lane::HotShop)
        } else {
            admitted.push((t, t + hold.min(l.lease_ms * 1000), shop));
            Verdict::Admitted
        };
        out.push(v);
    }
    out
}

/// The most of `intervals` in flight at once: at each start, those started at or before it
/// and not ended (the call itself counted, also one of no duration).
fn max_overlap(intervals: &[(i64, i64)]) -> u64 {
    intervals
        .iter()
        .enumerate()
        .map(|(i, &(t, _))| {
            1 + intervals
                .iter()
                .enumerate()
                .filter(|&(j, &(s, e))| j != i && s <= t && t < e && (s < t || j < i))
                .count() as u64
        })
        .max()
        .unwrap_or(0)
}

fn gen_calls() -> impl Strategy<Value = Vec<Gen>> {
    prop::collection::vec(
        (
            0i64..4_000,
            0usize..4,
            prop_oneof![
                8 => (0i64..2_500).prop_map(Some),
                1 => Just(Some(0)),
                1 => Just(None),
            ],
        ),
        0..120,
    )
    .prop_map(|mut v| {
        // In time order, the order of equal instants kept (as the merge keeps it).
        v.sort_by_key(|c| c.0);
        v
    })
}

fn gen_limits() -> impl Strategy<Value = Limits> {
    (1u64..6, 0u64..6, 0u64..6, 1i64..4).prop_map(|(n, m, k, lease)| Limits {
        n,
        m: (m > 0).then_some(m.min(n)),
        k: (k > 0).then_some(k.min(n)),
        lease_ms: lease * 1000,
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn replay_leases_agree_with_the_brute_force_reference(calls in gen_calls(), l in gen_limits()) {
        let level = |x: Option<u64>| x.map_or("-".to_string(), |n| n.to_string());
        // Buckets that never bind: what decides is the leases.
        let text = format!(
            "global=10000/10000 hot_lane=10000/10000 hot_shop=10000/10000 in_flight={}/{}/{} lease_seconds={}",
            l.n, level(l.m), level(l.k), l.lease_ms / 1000
        );
        let common = Common {
            hot_shops: [b"s0".to_vec(), b"s1".to_vec()].into_iter().collect::<HashSet<_>>(),
            ..Default::default()
        };
        let mut sim = Sim::new(parse_limits(&text, 0).unwrap(), common);
        let got: Vec<Verdict> = calls
            .iter()
            .map(|&(t, shop, dur)| {
                sim.attempt_call(DAY + t, format!("s{shop}").as_bytes(), dur.map(|d| d * 1000))
                    .unwrap()
            })
            .collect();
        let want = reference(&calls, l);
        prop_assert_eq!(&got, &want);
        // What was admitted never had more in flight than a level's limit, and the peaks
        // the replay reports are the brute force's.
        let mut by_level: [Vec<(i64, i64)>; 3] = Default::default();
        let mut by_shop: HashMap<usize, Vec<(i64, i64)>> = HashMap::new();
        let (mut sum, mut n) = (0i64, 0i64);
        for (&(t, shop, dur), v) in calls.iter().zip(&got) {
            let hold = match dur {
                Some(d) => { sum += d; n += 1; d }
                None if n > 0 => sum / n,
                None => 0,
            };
            if *v != Verdict::Admitted {
                continue;
            }
            let iv = (t, t + hold.min(l.lease_ms));
            by_level[0].push(iv);
            by_shop.entry(shop).or_default().push(iv);
            if shop < 2 {
                by_level[1].push(iv);
            }
        }
        let peaks = sim.peaks_in_flight();
        prop_assert_eq!(peaks[0].0, max_overlap(&by_level[0]));
        prop_assert_eq!(peaks[1].0, max_overlap(&by_level[1]));
        prop_assert!(peaks[0].0 <= l.n);
        if let Some(m) = l.m {
            prop_assert!(peaks[1].0 <= m);
        }
        let hot_shop_peak = (0..2).map(|s| by_shop.get(&s).map_or(0, |v| max_overlap(v))).max().unwrap();
        prop_assert_eq!(peaks[2].0, hot_shop_peak);
        if let Some(k) = l.k {
            prop_assert!(hot_shop_peak <= k);
        }
        for (shop, ivs) in &by_shop {
            let c = sim.shop(format!("s{shop}").as_bytes()).unwrap();
            prop_assert_eq!(c.peak_in_flight, max_overlap(ivs));
        }
        let denied: u64 = got.iter().filter(|v| **v != Verdict::Admitted).count() as u64;
        prop_assert_eq!(sim.total.denied_in_flight.iter().sum::<u64>(), denied);
    }
}
