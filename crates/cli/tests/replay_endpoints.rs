//! `checkout-guard replay` with endpoints and priority classes (issue 42): event files whose
//! answer is worked out by hand in each test's comment, read through the binary (the
//! reading of `api`, a denial's `endpoint` and `priority`, several `--api`), its JSON and
//! its text. Rates are frozen (1 token per 1000 s): every count is a capacity.

use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
/// 2026-11-30 00:00:00 UTC.
const DAY: i64 = 1_796_083_200_000 - 86_400_000;

fn call(ts: i64, shop: &str, api: &str, priority: Option<&str>) -> String {
    let p = priority.map_or(String::new(), |p| format!(r#","priority":"{p}""#));
    format!(
        r#"{{"eventType":"ExternalApiCall","timestamp":{},"api":"{api}","http.response.status_code":200,"duration.ms":5.0,"shop.id":"{shop}"{p}}}"#,
        DAY + ts
    )
}

fn denial(ts: i64, shop: &str, endpoint: Option<&str>, priority: Option<&str>) -> String {
    let e = endpoint.map_or(String::new(), |e| format!(r#","endpoint":"{e}""#));
    let p = priority.map_or(String::new(), |p| format!(r#","priority":"{p}""#));
    format!(
        r#"{{"eventType":"RateLimitDecision","timestamp":{},"limiter":"stripe","shop.id":"{shop}","reason":"global","allowed":false{e}{p}}}"#,
        DAY + ts
    )
}

fn file(name: &str, lines: &[String]) -> String {
    let dir = std::env::temp_dir().join(format!("cg-endpoints-{}", std::process::id()));
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

fn json(args: &[&str]) -> serde_json::Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, out, err) = run(&all);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn counts(attempts: u64, admitted: u64, denied: u64, by_endpoint: u64) -> serde_json::Value {
    serde_json::json!({"attempts": attempts, "admitted": admitted, "denied": denied, "denied_by_endpoint": by_endpoint})
}

const LIMITS: &str = "global=6/0.001 endpoint.items=2/0.001 endpoint.charges=6/0.001 priorities.critical=0 priorities.normal=0.5 default_priority=normal";

/// global 6, items 2, charges 6; normal (the default) leaves 3 of every bucket, critical
/// nothing. In time order:
/// - items x3 (shop f, no class: normal): items leaves 1 of 2 for normal: 1 admitted, 2
///   denied by the endpoint (the 2nd a recorded denial naming items);
/// - charges x3 (shop a, normal): global has 5, normal leaves 3: 2 admitted, the 3rd
///   denied by global (a recorded denial naming charges);
/// - charges x3 (shop a, critical): 3 admitted (global empty);
/// - tax x1 (shop b, critical; no endpoint bucket): denied by global;
/// - a denial naming `refunds` (not an --api): not read;
/// - zoneA (not an --api): not read.
///
/// Totals: 6 admitted, 2 by the endpoint, 2 by global.
#[test]
fn calls_are_decided_with_their_apis_endpoint_and_their_class() {
    let lines = [
        call(0, "f", "items", None),
        denial(1, "f", Some("items"), Some("normal")),
        call(2, "f", "items", None),
        call(10, "a", "charges", Some("normal")),
        call(11, "a", "charges", None),
        denial(12, "a", Some("charges"), Some("normal")),
        call(20, "a", "charges", Some("critical")),
        call(21, "a", "charges", Some("critical")),
        call(22, "a", "charges", Some("critical")),
        call(30, "b", "tax", Some("critical")),
        denial(31, "c", Some("refunds"), None),
        call(32, "c", "zoneA", None),
    ];
    let f = file("routes.jsonl", &lines);
    let args = [
        "replay", &f, "--api", "items", "--api", "charges", "--api", "tax", "--limits", LIMITS,
    ];
    let j = json(&args);
    let t = &j["totals"];
    assert_eq!(t["attempts"], 10, "{j}");
    assert_eq!(t["admitted"], 6);
    assert_eq!(t["denied"]["endpoint"], 2);
    assert_eq!(t["denied"]["global"], 2);
    assert_eq!(t["denied_total"], 4);
    assert_eq!(j["endpoints"]["items"], counts(3, 1, 2, 2));
    assert_eq!(j["endpoints"]["charges"], counts(6, 5, 1, 0));
    assert_eq!(j["endpoints"]["(none)"], counts(1, 0, 1, 0));
    assert_eq!(j["classes"]["normal"], counts(6, 3, 3, 2));
    assert_eq!(j["classes"]["critical"], counts(4, 3, 1, 0));
    assert_eq!(
        j["unrouted"],
        serde_json::json!({"apis": {"tax": 1}, "calls": 1})
    );
    assert_eq!(j["shops"]["f"]["denied"]["endpoint"], 2);
    assert_eq!(j["api"], "items,charges,tax");
    assert_eq!(j["scenarios"][0]["endpoints"], j["endpoints"]);
    // Without the classes, the same calls: global 6 and items 2 only; items: 2 admitted,
    // charges: 4 (global empty after 6), tax denied.
    let plain = "global=6/0.001 endpoint.items=2/0.001 endpoint.charges=6/0.001";
    let j = json(&[
        "replay", &f, "--api", "items", "--api", "charges", "--api", "tax", "--limits", plain,
    ]);
    assert_eq!(j["endpoints"]["items"], counts(3, 2, 1, 1));
    assert_eq!(j["endpoints"]["charges"], counts(6, 4, 2, 0));
    assert_eq!(j["classes"]["(none)"], counts(10, 6, 4, 1));
    // --priority: charges' calls naming no class are critical. The 2nd charges call
    // (no class) and the recorded denial (it names normal: stays normal).
    let j = json(&[
        "replay",
        &f,
        "--api",
        "items",
        "--api",
        "charges",
        "--api",
        "tax",
        "--limits",
        LIMITS,
        "--priority",
        "charges=critical",
    ]);
    assert_eq!(j["classes"]["critical"]["attempts"], 5);
    // The text: the rows per endpoint and class, and the unrouted apis said.
    let (code, out, err) = run(&args);
    assert_eq!(code, 0, "{err}");
    for want in [
        "1 calls of apis without an endpoint bucket: tax (decided without an endpoint)",
        "denied by endpoint",
        "per endpoint: admitted/denied (e: by the endpoint's bucket)",
        "endpoint items",
        "1/2 (e:2)",
        "endpoint charges",
        "5/1 (e:0)",
        "class critical",
        "3/1",
        "class normal",
        "denied(global/hot_lane/hot_shop/endpoint)",
    ] {
        assert!(out.contains(want), "{want:?} in\n{out}");
    }
}

/// What `limiter status` and the published settings show is taken as it is; bad parts are
/// refused (exit 2) naming the part as the options do.
#[test]
fn bad_parts_are_refused_naming_the_part() {
    let f = file("one.jsonl", &[call(0, "a", "items", None)]);
    let published = "global=100/100 endpoint.charges.create=25/25 endpoint.items=25/25 priorities.critical=0 priorities.normal=0.2 default_priority=normal";
    let j = json(&["replay", &f, "--api", "items", "--limits", published]);
    assert_eq!(j["endpoints"]["items"]["admitted"], 1, "{j}");
    assert_eq!(j["classes"]["normal"]["admitted"], 1);
    for (args, says) in [
        (
            vec!["--limits", "global=10/10 endpoint.items=11/10"],
            "endpoint.items.capacity may not exceed global.capacity (10), got 11",
        ),
        (
            vec!["--limits", "global=10/10 priorities.normal=1.5"],
            "priorities.normal: \"1.5\" is not a share from 0 (inclusive) to 1 (exclusive)",
        ),
        (
            vec!["--limits", "global=10/10 priorities.a=0 default_priority=b"],
            "default_priority must be one of the priorities (a), got \"b\"",
        ),
        (
            vec![
                "--limits",
                "global=10/10 priorities.a=0",
                "--priority",
                "items=b",
            ],
            "--priority \"items=b\": \"b\" is not a class of --limits limits (a)",
        ),
        (vec!["--priority", "items=b"], "--priority needs --limits"),
    ] {
        let mut all = vec!["replay", f.as_str(), "--api", "items"];
        all.extend(args.iter().copied());
        let (code, out, err) = run(&all);
        assert_eq!(code, 2, "{args:?}: {out}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
