//! `checkout-guard limiter status` shows the adaptive budget: the share in force (computed
//! from the state with the option the workers publish), the provider's pause and the last
//! throttling answer, in text and JSON. A real Valkey; the state is written by the
//! feedback script itself, as a worker's `feedback()` writes it.

use std::process::{Command, Stdio};

use checkout_guard_model::adaptive::AdaptParams;
use checkout_guard_model::cmd::feedback::FeedbackCall;
use checkout_guard_model::Keys;

#[path = "../../runtime/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");

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

/// One throttling answer through the feedback script (decrease 0.7, floor 0.1, recovery
/// an hour: the share moves by about a permille while the test runs).
fn report(c: &mut redis::Connection, keys: &Keys, status: i64, retry_after_us: i64) -> Vec<i64> {
    let (adapt, last) = (keys.adapt(), keys.adapt_last());
    let call = FeedbackCall {
        adapt_key: &adapt,
        last_key: &last,
        status,
        decrease: 0.7,
        params: AdaptParams::new(0.1, 3600.0),
        retry_after_us,
    };
    checkout_guard_connection::scripts::invoke(&call, c).unwrap()
}

#[test]
fn status_shows_the_share_the_pause_and_the_last_throttling_answer() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let name = "adaptive-status";
    let keys = Keys::new(name);
    // Without the option published and no state: no adaptive line.
    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=100/1")
        .query(&mut c)
        .unwrap();
    let text = status(&v.url, name, false);
    assert!(!text.contains("adaptive:"), "{text}");
    let j: serde_json::Value = serde_json::from_str(&status(&v.url, name, true)).unwrap();
    assert!(j["adaptive"].is_null());
    // Published, not throttled: the full share.
    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=100/1 adaptive=0.1/3600s/0.7/429,503")
        .query(&mut c)
        .unwrap();
    let j: serde_json::Value = serde_json::from_str(&status(&v.url, name, true)).unwrap();
    assert_eq!(j["adaptive"]["share"], 1.0);
    assert_eq!(
        j["adaptive"]["option"]["statuses"],
        serde_json::json!([429, 503])
    );
    assert!(j["adaptive"]["last_throttle"].is_null());
    // A 503 with Retry-After 30 s: share 0.7, paused, the answer remembered.
    let reply = report(&mut c, &keys, 503, 30_000_000);
    assert_eq!(reply[..4], [1, 1000, 700, 1], "{reply:?}");
    let j: serde_json::Value = serde_json::from_str(&status(&v.url, name, true)).unwrap();
    let share = j["adaptive"]["share"].as_f64().unwrap();
    assert!((0.7..0.705).contains(&share), "{share}");
    assert_eq!(j["adaptive"]["paused_until_ms"], reply[4] / 1000);
    assert_eq!(j["adaptive"]["last_throttle"]["status"], 503);
    assert_eq!(j["adaptive"]["last_throttle"]["retry_after"], 30.0);
    let text = status(&v.url, name, false);
    assert!(text.contains("adaptive: share 0.70"), "{text}");
    assert!(text.contains("PAUSED by the provider"), "{text}");
    assert!(text.contains("last throttling answer: 503"), "{text}");
    // The state without the option published: the share is not guessed.
    let _: () = redis::cmd("SET")
        .arg(keys.settings())
        .arg("global=100/1")
        .query(&mut c)
        .unwrap();
    let j: serde_json::Value = serde_json::from_str(&status(&v.url, name, true)).unwrap();
    assert!(j["adaptive"]["share"].is_null());
    assert_eq!(j["adaptive"]["last_throttle"]["status"], 503);
}
