//! `checkout-guard limiter status` shows the in-flight leases (issue 37), text and
//! `--json`: per level the leases held (`ZCOUNT key (now +inf`, now from Valkey's `TIME`),
//! the limit (the live hash's `in_flight.*` fields over the published settings), the
//! oldest lease's time to expiry and, with `lease_seconds` known, its age; the hot shops'
//! lease sets found by a bounded SCAN; the stats hash's counts. A real Valkey; the leases
//! are written by hand with `ZADD` in the runtime's layout (docs/in-flight.md).

use std::process::{Command, Stdio};

use checkout_guard_cli::in_flight::MAX_SHOP_SETS;
use checkout_guard_model::{Keys, Lane};

#[path = "../../runtime/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");

// The runtime's layout, from the model's keys.
fn global_key(keys: &Keys) -> Vec<u8> {
    keys.leases(Lane::Global, b"")
}

fn lane_key(keys: &Keys) -> Vec<u8> {
    keys.leases(Lane::HotLane, b"")
}

fn shop_key(keys: &Keys, shop: &[u8]) -> Vec<u8> {
    keys.leases(Lane::HotShop, shop)
}

fn stats_key(keys: &Keys) -> Vec<u8> {
    keys.lease_stats()
}

fn status(url: &str, name: &str, json: bool) -> String {
    let mut args = vec!["limiter", "--url", url, "--name", name, "status"];
    if json {
        args.push("--json");
    }
    let out = Command::new(BIN)
        .args(&args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn json(url: &str, name: &str) -> serde_json::Value {
    serde_json::from_str(&status(url, name, true)).unwrap()
}

fn now_us(c: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(c).unwrap();
    s * 1_000_000 + us
}

/// Leases `(member, expiry µs)` into `key`.
fn zadd(c: &mut redis::Connection, key: &[u8], leases: &[(&str, i64)]) {
    let mut cmd = redis::cmd("ZADD");
    cmd.arg(key);
    for (m, score) in leases {
        cmd.arg(*score).arg(*m);
    }
    let _: i64 = cmd.query(c).unwrap();
}

fn ms(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn status_shows_the_leases_per_level_the_limits_and_the_stats() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let name = "leases";
    let keys = Keys::new(name);
    // No in_flight option published, nothing held: one line, and nulls/zeros in the
    // JSON. (A limiter of which Valkey holds nothing at all is refused: a typo of --name.)
    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=30/30")
        .query(&mut c)
        .unwrap();
    let text = status(&v.url, name, false);
    assert!(text.contains("in-flight leases: none"), "{text}");
    let j = json(&v.url, name);
    assert_eq!(j["in_flight"]["levels"]["global"]["held"], 0, "{j}");
    assert!(j["in_flight"]["levels"]["global"]["limit"].is_null());
    assert!(j["in_flight"]["lease_seconds"].is_null());
    assert_eq!(j["in_flight"]["leaked"], 0);

    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=30/30 hot_lane=20/20 hot_shop=10/10 in_flight=40/20/5/30s")
        .query(&mut c)
        .unwrap();
    let now = now_us(&mut c);
    let s = 1_000_000;
    // Global: 3 live (the oldest expires in 10 s: taken 20 s ago with a 30 s bound) and
    // one past its expiry, not pruned yet. The lane: 2. Shops: flash-1 2, flash-2 1 (and
    // one expired), a shop ID with a byte that is not UTF-8 1; a value of another type
    // under the pattern is no lease set (skipped by the scan).
    zadd(
        &mut c,
        &global_key(&keys),
        &[
            ("a", now + 10 * s),
            ("b", now + 20 * s),
            ("c", now + 25 * s),
            ("old", now - s),
        ],
    );
    zadd(
        &mut c,
        &lane_key(&keys),
        &[("a", now + 10 * s), ("b", now + 20 * s)],
    );
    zadd(
        &mut c,
        &shop_key(&keys, b"flash-1"),
        &[("a", now + 10 * s), ("b", now + 20 * s)],
    );
    zadd(
        &mut c,
        &shop_key(&keys, b"flash-2"),
        &[("c", now + 25 * s), ("old", now - s)],
    );
    zadd(&mut c, &shop_key(&keys, b"caf\xe9"), &[("d", now + 28 * s)]);
    let _: () = redis::cmd("SET")
        .arg(shop_key(&keys, b"weird"))
        .arg("x")
        .query(&mut c)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(stats_key(&keys))
        .arg(&[
            ("released", "10"),
            ("hold_us", "5000000"),
            ("leaked", "2"),
            ("expired", "3"),
        ])
        .query(&mut c)
        .unwrap();

    let j = json(&v.url, name);
    let f = &j["in_flight"];
    let g = &f["levels"]["global"];
    assert_eq!(g["held"], 3, "{f}");
    assert_eq!(g["expired_not_pruned"], 1);
    assert_eq!(g["limit"], 40);
    assert_eq!(g["limit_source"], "settings");
    // Within the time the command took (generous: 5 s).
    let left = ms(&g["oldest_remaining_ms"]);
    assert!((5_000.0..=10_000.0).contains(&left), "{g}");
    assert!(
        (ms(&g["oldest_age_ms"]) - (30_000.0 - left)).abs() < 1.0,
        "{g}"
    );
    assert_eq!(f["lease_seconds"], 30.0);
    assert_eq!(f["levels"]["hot_lane"]["held"], 2);
    assert_eq!(f["levels"]["hot_lane"]["limit"], 20);
    let hs = &f["levels"]["hot_shop"];
    assert_eq!(hs["held"], 4, "{hs}");
    assert_eq!(hs["limit"], 5);
    let shops: Vec<(String, u64)> = hs["shops"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["shop"].as_str().unwrap().to_string(),
                s["held"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shops,
        [
            ("flash-1".to_string(), 2),
            ("caf\\xe9".to_string(), 1),
            ("flash-2".to_string(), 1)
        ]
    );
    assert_eq!(hs["shops"][2]["expired_not_pruned"], 1);
    assert_eq!(hs["shops"][1]["shop_hex"], "636166e9");
    assert_eq!(hs["shops_truncated"], false);
    assert_eq!(f["released"], 10);
    assert_eq!(f["mean_hold_ms"], 500.0);
    assert_eq!(f["leaked"], 2);
    assert_eq!(f["expired"], 3);
    assert_eq!(f["problems"], serde_json::json!([]));

    let text = status(&v.url, name, false);
    for want in [
        "in-flight leases (lease_seconds 30):",
        "global: 3 held of 40 (settings); oldest lease expires in ",
        "; 1 expired, not yet pruned",
        "hot_lane: 2 held of 20 (settings)",
        "hot_shop: 4 held by 3 shop(s), limit 5 (settings) each",
        "shop \"flash-1\": 2 held of 5 (settings)",
        "shop \"caf\\xe9\": 1 held",
        "released 10 (mean hold 0.500 s), leaked 2 (released at request end), expired 3",
    ] {
        assert!(text.contains(want), "{want:?} in\n{text}");
    }

    // A live limit (limiter set in_flight.global=7) over the settings' 40; a live value
    // that is no limit is named, the settings' limit kept. `lease_seconds` is the option's
    // only (no live field): a hash field of that name changes nothing.
    let _: () = redis::cmd("HSET")
        .arg(keys.limits())
        .arg(&[
            ("in_flight.global", "7"),
            ("in_flight.lease_seconds", "12"),
            ("in_flight.hot_lane", "lots"),
        ])
        .query(&mut c)
        .unwrap();
    let f = json(&v.url, name)["in_flight"].clone();
    assert_eq!(f["levels"]["global"]["limit"], 7, "{f}");
    assert_eq!(f["levels"]["global"]["limit_source"], "live");
    assert_eq!(f["levels"]["hot_lane"]["limit"], 20);
    assert_eq!(f["lease_seconds"], 30.0);
    assert!(f["problems"][0]
        .as_str()
        .unwrap()
        .contains("in_flight.hot_lane \"lots\""));
    // The age is the published bound less the time left: 30 s - at most 10 s.
    assert!(
        ms(&f["levels"]["global"]["oldest_age_ms"]) >= 20_000.0,
        "{f}"
    );
    let text = status(&v.url, name, false);
    assert!(text.contains("global: 3 held of 7 (live)"), "{text}");
    assert!(
        text.contains("PROBLEM: live field in_flight.hot_lane"),
        "{text}"
    );

    // Time passes (Valkey's clock is what counts): leases whose expiry is behind are no
    // longer held. Here: every lease expires in at most 28 s; one at now + 10 s is moved
    // back to the past by hand instead of waiting.
    zadd(&mut c, &global_key(&keys), &[("a", now - 2 * s)]);
    let f = json(&v.url, name)["in_flight"].clone();
    assert_eq!(f["levels"]["global"]["held"], 2, "{f}");
    assert_eq!(f["levels"]["global"]["expired_not_pruned"], 2);
}

/// The hot shops' lease sets are listed up to a bound: a limiter with more says so.
#[test]
fn status_lists_a_bounded_number_of_hot_shop_lease_sets() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let name = "many";
    let keys = Keys::new(name);
    // A worker with the option published its settings (status reads leases only then, or
    // with live in-flight limits: an on-call ACL for a limiter without them stays enough).
    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=30/30 hot_shop=10/10 in_flight=40/0/5/30s")
        .query(&mut c)
        .unwrap();
    let now = now_us(&mut c);
    let n = MAX_SHOP_SETS + 50;
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("ZADD")
            .arg(shop_key(&keys, format!("s{i:05}").as_bytes()))
            .arg(now + 60_000_000)
            .arg("lease")
            .ignore();
    }
    // Another limiter's sets are not this one's.
    pipe.cmd("ZADD")
        .arg(shop_key(&Keys::new("other"), b"x"))
        .arg(now + 60_000_000)
        .arg("lease")
        .ignore();
    let _: () = pipe.query(&mut c).unwrap();
    let f = json(&v.url, name)["in_flight"].clone();
    let hs = &f["levels"]["hot_shop"];
    assert_eq!(hs["shops"].as_array().unwrap().len(), MAX_SHOP_SETS);
    assert_eq!(hs["shops_truncated"], true);
    let text = status(&v.url, name, false);
    assert!(text.contains("(more not listed)"), "{text}");
    assert!(text.contains("... 980 more (--json lists them)"), "{text}");
    let _: () = redis::cmd("SET")
        .arg(Keys::new("other").settings())
        .arg("global=30/30 hot_shop=10/10 in_flight=40/0/5/30s")
        .query(&mut c)
        .unwrap();
    let f = json(&v.url, "other")["in_flight"].clone();
    assert_eq!(f["levels"]["hot_shop"]["held"], 1, "{f}");
}
