//! `checkout-guard limiter` tells a newcomer what went wrong (issue 38): `status` with the
//! stream sink off says so and where denial counts come from instead of "none recorded";
//! an unknown `--name` (a typo) is an error naming the limiters there, for `status`,
//! `set`, `hot` and `unhot` (the last two unless `--new-limiter`). A real Valkey.

use std::process::{Command, Stdio};

use checkout_guard_model::Keys;

#[path = "../../runtime/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");

fn limiter(url: &str, name: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(["limiter", "--url", url, "--name", name])
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

fn publish(c: &mut redis::Connection, name: &str) {
    let _: () = redis::cmd("SET")
        .arg(Keys::new(name).settings())
        .arg("global=100/10")
        .query(c)
        .unwrap();
}

#[test]
fn status_without_the_events_stream_says_where_the_counts_come_from() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    publish(&mut c, "payments");
    let (code, out, err) = limiter(&v.url, "payments", &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("none recorded"), "{out}");
    for want in [
        "no events stream at \"checkout_guard:events\"",
        "checkout_guard.events.sinks",
        "checkout_guard.events.stream_key",
        "checkout_guard.events.jsonl_path",
        "checkout-guard scan",
    ] {
        assert!(out.contains(want), "{want:?} not in {out}");
    }
    let (code, out, _) = limiter(&v.url, "payments", &["status", "--json"]);
    assert_eq!(code, 0);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["events_stream"]["exists"], false);
    assert!(j["decisions"].is_null(), "{j}");
    assert!(j["decisions_error"]
        .as_str()
        .unwrap()
        .contains("no events stream"));

    // A stream whose newest entry is older than the window: none in it, and said how old.
    let _: String = redis::cmd("XADD")
        .arg("checkout_guard:events")
        .arg("1000-0")
        .arg("e")
        .arg("{}")
        .query(&mut c)
        .unwrap();
    let (_, out, _) = limiter(&v.url, "payments", &["status"]);
    assert!(out.contains("none recorded (the stream \"checkout_guard:events\" holds 1 events, the newest at 1970-01-01 00:00:01.000: is the `stream` sink still on?)"), "{out}");
    let (_, out, _) = limiter(&v.url, "payments", &["status", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["events_stream"]["exists"], true);
    assert_eq!(j["events_stream"]["newest_ms"], 1000);
    assert_eq!(j["decisions"], serde_json::json!({}));
}

#[test]
fn an_unknown_name_is_an_error_naming_the_limiters_there() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    // Nothing at all: says so.
    let (code, out, err) = limiter(&v.url, "payment", &["status"]);
    assert_eq!(code, 2, "{out}");
    assert!(err.contains("unknown limiter \"payment\""), "{err}");
    assert!(err.contains("no limiter has published settings"), "{err}");
    publish(&mut c, "payments");
    publish(&mut c, "search");
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["set", "global=5/5"],
        &["hot", "s1"],
    ] {
        let (code, out, err) = limiter(&v.url, "payment", args);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert_eq!(out, "", "{args:?}");
        assert!(
            err.contains("limiters with published settings") && err.contains("payments, search"),
            "{args:?}: {err}"
        );
    }
    // unhot under a typo would leave the shop hot under the real name with exit 0 (issue
    // 38): refused too, naming the limiters there; the real name's mark is untouched.
    let _: () = redis::cmd("SET")
        .arg(Keys::new("payments").hot_flag(b"s1"))
        .arg("1")
        .arg("EX")
        .arg(600)
        .query(&mut c)
        .unwrap();
    let (code, out, err) = limiter(&v.url, "payment", &["unhot", "s1"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(out, "");
    assert!(
        err.contains("unknown limiter \"payment\"")
            && err.contains("payments, search")
            && err.contains("--new-limiter"),
        "{err}"
    );
    let (_, out, _) = limiter(&v.url, "payments", &["status"]);
    assert!(out.contains("hot shop \"s1\": marked"), "{out}");
    // With --new-limiter (a limiter Valkey holds nothing of, on purpose): nothing to
    // unmark, said, exit 0.
    let (code, out, err) = limiter(&v.url, "payment", &["unhot", "s1", "--new-limiter"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("was not marked hot"), "{out}");
    let (code, out, err) = limiter(&v.url, "payments", &["unhot", "s1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no longer marked hot"), "{out}");
    // Nothing was written under the typo.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{cg:payment}*")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys, Vec::<String>::new());
    // The real name works.
    let (code, out, err) = limiter(&v.url, "payments", &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("settings (workers): global=100/10"), "{out}");
    // A shop marked hot before the workers' first decision: said so explicitly.
    let (code, _, err) = limiter(&v.url, "fresh", &["hot", "s1", "--new-limiter"]);
    assert_eq!(code, 0, "{err}");
    // Then the limiter is known (its hot shop): status, unhot work.
    let (code, out, err) = limiter(&v.url, "fresh", &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("hot shop \"s1\": marked"), "{out}");
    let (code, out, err) = limiter(&v.url, "fresh", &["unhot", "s1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("no longer marked hot"), "{out}");
    // A limiter whose settings expired (idle a day) but with live limits stored: known.
    let _: () = redis::cmd("SET")
        .arg(Keys::new("idle").limits_version())
        .arg("3")
        .query(&mut c)
        .unwrap();
    let (code, out, err) = limiter(&v.url, "idle", &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("settings: none published yet"), "{out}");
}

/// Issue 40: shop ids are never metric labels, so `status` names the hot shops a sale's
/// denials are about: how many are marked, and the most denied hot shops in the window
/// (enforced denials of hot shops; shadow, `unavailable`, allowed and ordinary shops'
/// decisions are not theirs).
#[test]
fn status_counts_the_hot_shops_and_names_the_most_denied() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    publish(&mut c, "payments");
    for shop in [&b"flash"[..], b"drop"] {
        let _: () = redis::cmd("SET")
            .arg(Keys::new("payments").hot_flag(shop))
            .arg("1")
            .arg("EX")
            .arg(600)
            .query(&mut c)
            .unwrap();
    }
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let mut add = |shop: &str, reason: &str, hot: bool, extra: &str, n: usize| {
        for _ in 0..n {
            let line = format!(
                r#"{{"eventType":"RateLimitDecision","timestamp":{now_ms},"limiter":"payments","shop.id":"{shop}","reason":"{reason}","allowed":false,"hot_shop":{hot}{extra}}}"#
            );
            let _: String = redis::cmd("XADD")
                .arg("checkout_guard:events")
                .arg("*")
                .arg("event")
                .arg(line)
                .query(&mut c)
                .unwrap();
        }
    };
    add("flash", "hot_shop", true, "", 7);
    add("drop", "hot_lane", true, "", 3);
    add("drop", "hot_shop", true, r#","mode":"shadow""#, 20);
    add("drop", "unavailable", true, "", 20);
    add("plain", "global", false, "", 30);
    let (code, out, err) = limiter(&v.url, "payments", &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("  hot shops: 2 marked\n"), "{out}");
    assert!(
        out.contains("hot shops most denied in the last 60 s: \"flash\" 7 \"drop\" 3\n"),
        "{out}"
    );
    let (_, out, _) = limiter(&v.url, "payments", &["status", "--json"]);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["hot_shop_count"], 2);
    assert_eq!(
        j["top_hot_shops_by_denials"],
        serde_json::json!([{"shop": "flash", "denied": 7}, {"shop": "drop", "denied": 3}])
    );
}
