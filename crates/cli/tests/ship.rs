//! `checkout-guard ship` (issue 39) against a real Valkey and the project's stand-ins of
//! New Relic's Event API and of an OTLP/HTTP receiver (`loadtest/event_api_standin.py`,
//! `loadtest/otlp_receiver.py`, which check what the real endpoints check and decode
//! OTLP with OpenTelemetry's own protobuf definitions). Exact accounting: every event
//! written to the stream is delivered (plus counted duplicates) across 429s with
//! `Retry-After`, a destination down, a batch refused for one bad event, a shipper
//! killed with SIGKILL mid-batch, two shippers sharing the stream, Valkey restarting.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../../runtime/tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
const KEY: &str = "test-insert-key";
const STREAM: &str = "cg:events";

fn root() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).to_path_buf()
}

fn python() -> PathBuf {
    let p = root().join(".venv/bin/python");
    assert!(p.exists(), "no .venv: run scripts/setup.sh");
    p
}

/// A stand-in server, stopped when dropped.
struct StandIn {
    child: Child,
    base: String,
    _dir: TempDir,
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let d = std::env::temp_dir().join(format!(
            "cg-ship-{tag}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&d).unwrap();
        Self(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl StandIn {
    fn start(script: &str, extra: &[&str]) -> Self {
        let dir = TempDir::new("standin");
        let store = dir.0.join("store.jsonl");
        let mut child = Command::new(python())
            .arg(root().join("loadtest").join(script))
            .args(["--port", "0", "--store"])
            .arg(&store)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{script} said {line:?}"))
            .to_string();
        Self {
            child,
            base,
            _dir: dir,
        }
    }

    fn event_api() -> Self {
        Self::start("event_api_standin.py", &["--key", KEY])
    }

    fn otlp() -> Self {
        // The receiver checks New Relic's OTLP header, `api-key`.
        Self::start("otlp_receiver.py", &["--key", KEY])
    }

    fn events_url(&self) -> String {
        format!("{}/v1/accounts/1234567/events", self.base)
    }

    fn stats(&self) -> serde_json::Value {
        http("GET", &format!("{}/_stats", self.base), None)
    }

    fn control(&self, body: serde_json::Value) {
        http("POST", &format!("{}/_control", self.base), Some(body));
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small HTTP/1.1 client for the stand-ins' control endpoints (the test's own, not
/// the shipper's: a JSON body, `Connection: close`).
fn http(method: &str, url: &str, body: Option<serde_json::Value>) -> serde_json::Value {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = std::net::TcpStream::connect(host).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, payload) = out.split_once("\r\n\r\n").unwrap();
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200"),
        "{method} {url}: {head}"
    );
    serde_json::from_str(payload.trim()).unwrap_or(serde_json::Value::Null)
}

/// Writes `n` events to the stream as the `stream` sink does (one field `event`, the JSON
/// object), ExternalApiCall events with a status and a duration, numbered from `from`.
fn record(c: &mut redis::Connection, from: usize, n: usize, status: i64) {
    let mut pipe = redis::pipe();
    for i in from..from + n {
        let ev = serde_json::json!({
            "eventType": "ExternalApiCall",
            "timestamp": 1_765_000_000_000i64 + i as i64,
            "api": "payment",
            "http.request.method": "POST",
            "server.address": "psp.example",
            "server.port": 443,
            "http.response.status_code": status,
            "duration.ms": 20.0 + (i % 50) as f64,
            "shop.id": format!("shop-{}", i % 7),
            "seq": i,
        });
        pipe.cmd("XADD")
            .arg(STREAM)
            .arg("*")
            .arg("event")
            .arg(ev.to_string())
            .ignore();
    }
    pipe.query::<()>(c).unwrap();
}

fn ship_cmd(url: &str, to: &str, endpoint: &str, dead: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "ship",
        "--stream",
        url,
        "--stream-key",
        STREAM,
        "--to",
        to,
        "--endpoint",
        endpoint,
    ])
    .arg("--dead-letter")
    .arg(dead)
    .env("NEW_RELIC_INSERT_KEY", KEY)
    .env("OTEL_EXPORTER_OTLP_HEADERS", format!("api-key={KEY}"))
    .env_remove("NEW_RELIC_LICENSE_KEY")
    .stdin(Stdio::null());
    c
}

/// `ship --once --json`: its exit status and numbers.
fn ship_once(
    url: &str,
    to: &str,
    endpoint: &str,
    dead: &Path,
    extra: &[&str],
) -> (i32, serde_json::Value, String) {
    let out = ship_cmd(url, to, endpoint, dead)
        .args(["--once", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let j = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("no JSON: {stderr}"));
    (out.status.code().unwrap_or(-1), j, stderr)
}

fn pending(c: &mut redis::Connection) -> i64 {
    let v: redis::Value = redis::cmd("XPENDING")
        .arg(STREAM)
        .arg("checkout-guard-ship")
        .query(c)
        .unwrap();
    match v {
        redis::Value::Array(a) => match a.first() {
            Some(redis::Value::Int(n)) => *n,
            _ => panic!("{a:?}"),
        },
        other => panic!("{other:?}"),
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < end, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_event_reaches_the_event_api_once_gzipped_with_its_id() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t1");
    record(&mut c, 0, 5_000, 200);
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["taken"].as_u64(), j["delivered"].as_u64()),
        (Some(5_000), Some(5_000)),
        "{j}"
    );
    assert_eq!(j["dead_lettered"], 0);
    let s = api.stats();
    assert_eq!(s["events"], 5_000, "{s}");
    assert_eq!(s["distinct_ids"], 5_000, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    assert_eq!(pending(&mut c), 0, "everything acknowledged");
    // Nothing new: a second run takes nothing.
    let (code, j, _) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &[],
    );
    assert_eq!((code, j["taken"].as_u64()), (0, Some(0)));
    assert_eq!(api.stats()["events"], 5_000);
}

#[test]
fn a_429_with_retry_after_and_a_503_are_waited_through() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t2");
    record(&mut c, 0, 300, 429);
    api.control(serde_json::json!({"faults": [
        {"status": 429, "retry_after": 1, "count": 2},
        {"status": 503, "count": 1},
        {"close": true, "count": 1},
    ]}));
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &["--batch", "100"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 300, "{j}");
    assert_eq!(j["retried"], 4, "{j}");
    assert_eq!(api.stats()["events"], 300);
    assert!(err.contains("429"), "a retry is logged: {err}");
}

#[test]
fn a_destination_down_longer_than_retry_for_leaves_the_batch_pending_then_it_is_delivered() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t3");
    record(&mut c, 0, 50, 200);
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
        + 3.0;
    api.control(serde_json::json!({"down_until": until}));
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &["--retry-for", "1"],
    );
    assert_eq!(code, 1, "{j} {err}");
    assert_eq!(j["delivered"], 0);
    assert!(j["error"].as_str().unwrap().contains("503"), "{j}");
    assert_eq!(pending(&mut c), 50, "left pending for the next run");
    // The next run (same consumer) takes its pending entries again and waits the rest out.
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &["--retry-for", "30"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["again"].as_u64()),
        (Some(50), Some(50)),
        "{j}"
    );
    assert_eq!(api.stats()["events"], 50);
    assert_eq!(pending(&mut c), 0);
}

#[test]
fn one_bad_event_is_dead_lettered_and_the_rest_of_its_batch_delivered() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t4");
    record(&mut c, 0, 99, 200);
    // An event type the Event API refuses (a space: set aside without a POST), and an
    // entry that is not JSON.
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("*")
        .arg("event")
        .arg(r#"{"eventType":"Bad Type","timestamp":1}"#)
        .query(&mut c)
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("*")
        .arg("event")
        .arg("not json")
        .query(&mut c)
        .unwrap();
    let dead = dir.0.join("dead.jsonl");
    let (code, j, err) = ship_once(&v.url, "newrelic", &api.events_url(), &dead, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["dead_lettered"].as_u64()),
        (Some(99), Some(2)),
        "{j}"
    );
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&dead)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines.iter().any(|l| l["why"]
            .as_str()
            .unwrap()
            .contains("eventType \"Bad Type\"")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l["why"].as_str().unwrap().contains("not JSON")),
        "{lines:?}"
    );
    assert_eq!(api.stats()["events"], 99);
    assert_eq!(pending(&mut c), 0);
}

#[test]
fn a_batch_refused_with_400_is_split_until_the_refused_event_is_alone() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t4b");
    record(&mut c, 0, 4, 200);
    // The batch of 4, then its first half, then that half's first event: refused.
    api.control(serde_json::json!({"faults": [{"status": 400, "count": 3}]}));
    let dead = dir.0.join("dead.jsonl");
    let (code, j, err) = ship_once(&v.url, "newrelic", &api.events_url(), &dead, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (
            j["delivered"].as_u64(),
            j["dead_lettered"].as_u64(),
            j["posts"].as_u64()
        ),
        (Some(3), Some(1), Some(5)),
        "{j}"
    );
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&dead).unwrap().trim()).unwrap();
    assert!(line["why"].as_str().unwrap().starts_with("400"), "{line}");
    assert_eq!(line["event"]["seq"], 0, "{line}");
    assert_eq!(api.stats()["events"], 3);
}

#[test]
fn values_past_the_event_apis_limits_are_cut_not_the_batch_refused() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t5");
    let long = serde_json::json!({"eventType": "ExternalApiCall", "timestamp": 1, "url.full": "x".repeat(10_000)});
    let mut wide = serde_json::json!({"eventType": "ExternalApiCall", "timestamp": 2});
    for i in 0..300 {
        wide[format!("extra.{i:03}")] = i.into();
    }
    for ev in [long, wide] {
        let _: String = redis::cmd("XADD")
            .arg(STREAM)
            .arg("*")
            .arg("event")
            .arg(ev.to_string())
            .query(&mut c)
            .unwrap();
    }
    record(&mut c, 0, 10, 200);
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 12, "{j}");
    assert_eq!(j["cut"]["values"], 1, "{j}");
    // 300 + eventType, timestamp and event_id: 49 past the 254.
    assert_eq!(j["cut"]["attributes"], 49, "{j}");
    assert_eq!(api.stats()["events"], 12);
}

#[test]
fn a_shipper_killed_mid_batch_loses_nothing_and_its_duplicates_are_counted() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t6");
    let dead = dir.0.join("dead.jsonl");
    record(&mut c, 0, 2_000, 200);
    // The first batch is stored, then its answer is held back: the shipper is killed
    // between the destination's acceptance and its acknowledgement.
    api.control(serde_json::json!({"faults": [{"delay_ms": 5_000, "count": 1}]}));
    let mut child = ship_cmd(&v.url, "newrelic", &api.events_url(), &dead)
        .args(["--batch", "500", "--consumer", "a"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first POST", Duration::from_secs(20), || {
        api.stats()["posts"].as_u64().unwrap_or(0) >= 1
    });
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    assert_eq!(pending(&mut c), 500, "the batch in flight stays pending");
    // Restarted under the same name: it takes its pending entries first.
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dead,
        &["--consumer", "a", "--batch", "500"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["again"], 500, "{j}");
    let s = api.stats();
    assert_eq!(s["distinct_ids"], 2_000, "{s}");
    let dups = s["duplicates"].as_u64().unwrap();
    assert!(
        dups <= 500,
        "duplicates bounded by the batch in flight: {s}"
    );
    assert_eq!(s["events"].as_u64().unwrap(), 2_000 + dups, "{s}");
}

#[test]
fn two_shippers_share_the_stream_and_sigterm_stops_them() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t7");
    let dead = dir.0.join("dead.jsonl");
    let spawn = |name: &str| {
        ship_cmd(&v.url, "newrelic", &api.events_url(), &dead)
            .args(["--batch", "200", "--consumer", name, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn("a"), spawn("b"));
    for k in 0..10 {
        record(&mut c, k * 400, 400, 200);
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_until("4,000 events delivered", Duration::from_secs(60), || {
        api.stats()["events"].as_u64().unwrap_or(0) >= 4_000
    });
    let mut delivered = Vec::new();
    for child in [a, b] {
        unsafe { libc_kill(child.id() as i32, 15) };
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "SIGTERM: a clean stop");
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        delivered.push(j["delivered"].as_u64().unwrap());
    }
    assert_eq!(delivered.iter().sum::<u64>(), 4_000, "{delivered:?}");
    assert!(
        delivered.iter().all(|d| *d > 0),
        "both took a share: {delivered:?}"
    );
    let s = api.stats();
    assert_eq!(
        (s["events"].as_u64(), s["duplicates"].as_u64()),
        (Some(4_000), Some(0)),
        "{s}"
    );
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

#[test]
fn a_long_running_shipper_goes_on_after_valkey_restarts() {
    let mut v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("t8");
    let mut child = ship_cmd(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead.jsonl"),
    )
    .args(["--json"])
    .stdout(Stdio::piped())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    record(&mut c, 0, 100, 200);
    wait_until("the first 100", Duration::from_secs(20), || {
        api.stats()["events"] == 100
    });
    v.stop();
    std::thread::sleep(Duration::from_millis(500));
    v.start_again();
    let mut c = v.connection();
    record(&mut c, 100, 100, 200);
    wait_until("the 100 after the restart", Duration::from_secs(30), || {
        api.stats()["events"] == 200
    });
    unsafe { libc_kill(child.id() as i32, 15) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
    assert_eq!(api.stats()["duplicates"], 0);
}

#[test]
fn otlp_gets_a_log_record_per_event_and_the_duration_histogram() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::otlp();
    let dir = TempDir::new("t9");
    record(&mut c, 0, 1_000, 200);
    record(&mut c, 1_000, 200, 429);
    let (code, j, err) = ship_once(
        &v.url,
        "otlp",
        &rx.base,
        &dir.0.join("dead.jsonl"),
        &["--batch", "600"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 1_200, "{j}");
    let s = rx.stats();
    assert_eq!(s["log_records"], 1_200, "{s}");
    assert_eq!(s["duplicates"], 0, "{s}");
    // Per batch one point per status: the counts add up to every call.
    let store = std::fs::read_to_string(rx._dir.0.join("store.jsonl")).unwrap();
    let points: Vec<serde_json::Value> = store
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|l| l["kind"] == "metric")
        .collect();
    assert!(!points.is_empty());
    let total: u64 = points.iter().map(|p| p["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 1_200);
    for p in &points {
        assert_eq!(p["name"], "http.client.request.duration");
        assert_eq!(p["unit"], "s");
        let buckets: u64 = p["bucket_counts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .sum();
        assert_eq!(buckets, p["count"].as_u64().unwrap());
        assert!(
            p["attributes"]["http.response.status_code"].is_number(),
            "{p}"
        );
    }
    let with_429: u64 = points
        .iter()
        .filter(|p| p["attributes"]["http.response.status_code"] == 429)
        .map(|p| p["count"].as_u64().unwrap())
        .sum();
    assert_eq!(with_429, 200);
}

#[test]
fn a_bad_option_is_named() {
    let out = Command::new(BIN)
        .args([
            "ship",
            "--stream",
            "redis://127.0.0.1:1",
            "--to",
            "newrelic",
            "--endpoint",
            "http://127.0.0.1:1/v1/accounts/1/events",
            "--once",
        ])
        .env_remove("NEW_RELIC_INSERT_KEY")
        .env_remove("NEW_RELIC_LICENSE_KEY")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("NEW_RELIC_INSERT_KEY"));
    let out = Command::new(BIN)
        .args([
            "ship",
            "--stream",
            "nope://x",
            "--to",
            "otlp",
            "--endpoint",
            "http://127.0.0.1:1",
            "--once",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--stream"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- --files PATH... --checkpoint FILE ----

fn line(i: usize) -> String {
    serde_json::json!({
        "eventType": "ExternalApiCall", "timestamp": 1_765_000_000_000i64 + i as i64,
        "api": "payment", "http.response.status_code": 200, "duration.ms": 12.5, "seq": i,
    })
    .to_string()
        + "\n"
}

fn lines(range: std::ops::Range<usize>) -> String {
    range.map(line).collect()
}

fn gzip_to(path: &Path, text: &str) {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::default(),
    );
    gz.write_all(text.as_bytes()).unwrap();
    gz.finish().unwrap();
}

/// `ship --to newrelic --files FILES --checkpoint CP --dead-letter DEAD` to the stand-in
/// (add `--once`, `--batch`... and the stdio to taste).
fn files_cmd(api: &StandIn, files: &[&Path], checkpoint: &Path, dead: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.args([
        "ship",
        "--to",
        "newrelic",
        "--endpoint",
        &api.events_url(),
        "--files",
    ])
    .args(files)
    .arg("--checkpoint")
    .arg(checkpoint)
    .arg("--dead-letter")
    .arg(dead)
    .env("NEW_RELIC_INSERT_KEY", KEY)
    .stdin(Stdio::null());
    c
}

fn ship_files(
    api: &StandIn,
    files: &[&Path],
    checkpoint: &Path,
    extra: &[&str],
) -> (i32, serde_json::Value, String) {
    let out = files_cmd(api, files, checkpoint, &checkpoint.with_extension("dead"))
        .args(["--once", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    // No JSON when refused at start (exit 2).
    let j = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), j, stderr)
}

#[test]
fn files_plain_and_gzip_are_delivered_once_and_resume_from_the_checkpoint() {
    let api = StandIn::event_api();
    let dir = TempDir::new("f1");
    let (plain, gz, cp) = (
        dir.0.join("events.jsonl"),
        dir.0.join("old.jsonl.gz"),
        dir.0.join("cp.json"),
    );
    std::fs::write(&plain, lines(0..700)).unwrap();
    gzip_to(&gz, &lines(1000..1300));
    let (code, j, err) = ship_files(&api, &[&plain, &gz], &cp, &["--batch", "256"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["again"].as_u64()),
        (Some(1000), Some(0)),
        "{j}"
    );
    // Nothing new: nothing sent. Then 50 lines appended and half a line being written.
    let (_, j, _) = ship_files(&api, &[&plain, &gz], &cp, &[]);
    assert_eq!(j["taken"], 0, "{j}");
    let mut more = lines(700..750);
    let half = line(750);
    more.push_str(&half[..half.len() / 2]);
    std::fs::OpenOptions::new()
        .append(true)
        .open(&plain)
        .unwrap()
        .write_all(more.as_bytes())
        .unwrap();
    let (_, j, _) = ship_files(&api, &[&plain, &gz], &cp, &[]);
    assert_eq!(j["delivered"], 50, "the unfinished line waits: {j}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&plain)
        .unwrap()
        .write_all(&half.as_bytes()[half.len() / 2..])
        .unwrap();
    let (_, j, _) = ship_files(&api, &[&plain, &gz], &cp, &[]);
    assert_eq!(j["delivered"], 1, "{j}");
    let s = api.stats();
    assert_eq!(
        (s["events"].as_u64(), s["duplicates"].as_u64()),
        (Some(1051), Some(0)),
        "{s}"
    );
}

#[test]
fn a_file_rotated_and_compressed_resumes_where_it_was() {
    let api = StandIn::event_api();
    let dir = TempDir::new("f2");
    let (live, cp) = (dir.0.join("events.jsonl"), dir.0.join("cp.json"));
    std::fs::write(&live, lines(0..400)).unwrap();
    let (code, _, err) = ship_files(&api, &[&live], &cp, &[]);
    assert_eq!(code, 0, "{err}");
    // 100 more written, then logrotate: renamed, compressed, a new file started.
    std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap()
        .write_all(lines(400..500).as_bytes())
        .unwrap();
    let rotated = dir.0.join("events.jsonl.1.gz");
    gzip_to(&rotated, &std::fs::read_to_string(&live).unwrap());
    std::fs::remove_file(&live).unwrap();
    std::fs::write(&live, lines(500..530)).unwrap();
    let (code, j, err) = ship_files(&api, &[&live, &rotated], &cp, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        j["delivered"], 130,
        "the rotated file's last 100, the new file's 30: {j}"
    );
    let s = api.stats();
    assert_eq!(
        (s["distinct_ids"].as_u64(), s["duplicates"].as_u64()),
        (Some(530), Some(0)),
        "{s}"
    );
}

#[test]
fn files_a_shipper_killed_mid_batch_resumes_and_counts_what_it_takes_again() {
    let api = StandIn::event_api();
    let dir = TempDir::new("f3");
    let (live, cp) = (dir.0.join("events.jsonl"), dir.0.join("cp.json"));
    std::fs::write(&live, lines(0..1500)).unwrap();
    api.control(serde_json::json!({"faults": [{"delay_ms": 5_000, "count": 1}]}));
    let mut child = files_cmd(&api, &[&live], &cp, &dir.0.join("dead"))
        .args(["--batch", "500"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first POST", Duration::from_secs(20), || {
        api.stats()["posts"].as_u64().unwrap_or(0) >= 1
    });
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let (code, j, err) = ship_files(&api, &[&live], &cp, &["--batch", "500"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        j["again"], 500,
        "the batch in flight is taken again, counted: {j}"
    );
    let s = api.stats();
    assert_eq!(s["distinct_ids"], 1500, "{s}");
    assert!(s["duplicates"].as_u64().unwrap() <= 500, "{s}");
}

#[test]
fn a_checkpoint_in_a_missing_directory_is_refused_before_anything_is_sent() {
    let api = StandIn::event_api();
    let dir = TempDir::new("f4");
    let live = dir.0.join("events.jsonl");
    std::fs::write(&live, lines(0..3)).unwrap();
    let out = Command::new(BIN)
        .args([
            "ship",
            "--to",
            "newrelic",
            "--endpoint",
            &api.events_url(),
            "--once",
            "--files",
        ])
        .arg(&live)
        .arg("--checkpoint")
        .arg(dir.0.join("nope/cp.json"))
        .env("NEW_RELIC_INSERT_KEY", KEY)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--checkpoint"));
    assert_eq!(api.stats()["posts"], 0);
}

// ---- Found by the adversarial review: each failed before its fix ----

/// A server that answers every request with `302 Location: to` and records what it got.
fn redirector(to: &str) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    use std::io::Read;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (seen2, to) = (seen.clone(), to.to_string());
    std::thread::spawn(move || {
        for s in listener.incoming().take(20) {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let mut buf = vec![0u8; 1 << 16];
            let n = s.read(&mut buf).unwrap_or(0);
            seen2
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            let _ = write!(
                s,
                "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    });
    (at, seen)
}

#[test]
fn a_redirect_is_not_followed_nothing_is_acknowledged_and_the_key_goes_nowhere_else() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("a1");
    record(&mut c, 0, 100, 200);
    let (at, seen) = redirector(&api.events_url());
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &format!("{at}/v1/accounts/1/events"),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 1, "{j} {err}");
    assert!(j["error"].as_str().unwrap().contains("302"), "{j}");
    assert_eq!(j["delivered"], 0);
    assert_eq!(pending(&mut c), 100, "nothing acknowledged");
    assert_eq!(
        api.stats()["posts"],
        0,
        "the redirect's target got nothing, no key"
    );
    assert_eq!(seen.lock().unwrap().len(), 1, "one POST, not sent again");
}

#[test]
fn records_an_otlp_receiver_refuses_in_a_partial_success_are_counted_and_set_aside() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::otlp();
    let dir = TempDir::new("a2");
    record(&mut c, 0, 100, 200);
    rx.control(serde_json::json!({"partial_reject": 30}));
    let dead = dir.0.join("dead");
    let (code, j, err) = ship_once(&v.url, "otlp", &rx.base, &dead, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["dead_lettered"].as_u64()),
        (Some(70), Some(30)),
        "{j}"
    );
    assert_eq!(rx.stats()["log_records"], 70);
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&dead).unwrap().trim()).unwrap();
    assert_eq!(line["refused"], 30, "{line}");
    assert_eq!(
        line["ids"].as_array().unwrap().len(),
        100,
        "the POST's events named: {line}"
    );
}

#[test]
fn entries_trimmed_by_maxlen_before_the_group_read_them_are_counted() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("a3");
    record(&mut c, 0, 100, 200);
    let (code, _, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    // The shipper down while 1,000 more are written with an exact MAXLEN of 100.
    for i in 0..1000 {
        xadd_capped(&mut c, &line(i), 100);
    }
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["trimmed"].as_u64()),
        (Some(100), Some(900)),
        "{j}"
    );
    assert!(
        err.contains("900 entries") && err.contains("trimmed"),
        "said: {err}"
    );
}

#[test]
fn a_reply_lost_after_the_destination_took_the_batch_is_counted_as_maybe_twice() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("a4");
    record(&mut c, 0, 100, 200);
    api.control(serde_json::json!({"accept_then_close": 1}));
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let s = api.stats();
    assert_eq!(s["duplicates"], 100, "{s}");
    assert_eq!(
        j["again"], 100,
        "the duplicates the destination has are counted: {j}"
    );
    assert_eq!(j["delivered"], 100);
}

#[test]
fn a_group_deleted_under_the_shipper_counts_what_it_sends_again() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("a5");
    let child = ship_cmd(&v.url, "newrelic", &api.events_url(), &dir.0.join("dead"))
        .args(["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    record(&mut c, 0, 300, 200);
    wait_until("300 delivered", Duration::from_secs(20), || {
        api.stats()["events"] == 300
    });
    let _: i64 = redis::cmd("XGROUP")
        .arg("DESTROY")
        .arg(STREAM)
        .arg("checkout-guard-ship")
        .query(&mut c)
        .unwrap();
    record(&mut c, 300, 50, 200);
    wait_until("the 50 new ones", Duration::from_secs(20), || {
        api.stats()["distinct_ids"] == 350
    });
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = api.stats();
    assert_eq!(s["duplicates"], 300, "{s}");
    assert_eq!(j["again"], 300, "{j}");
}

#[test]
fn a_mistyped_stream_key_is_named_not_made() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("a6");
    record(&mut c, 0, 10, 200);
    let out = Command::new(BIN)
        .args([
            "ship",
            "--stream",
            &v.url,
            "--stream-key",
            "cg:evnets",
            "--to",
            "newrelic",
            "--endpoint",
            &api.events_url(),
            "--once",
        ])
        .arg("--dead-letter")
        .arg(dir.0.join("dead"))
        .env("NEW_RELIC_INSERT_KEY", KEY)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("cg:evnets") && err.contains(STREAM),
        "names the key and the streams there: {err}"
    );
    let exists: i64 = redis::cmd("EXISTS").arg("cg:evnets").query(&mut c).unwrap();
    assert_eq!(exists, 0, "no stream made under the mistyped name");
}

#[test]
fn an_idle_long_running_shipper_with_a_short_timeout_is_quiet() {
    let v = common::Valkey::start();
    let api = StandIn::event_api();
    let dir = TempDir::new("a7");
    let mut c = v.connection();
    record(&mut c, 0, 5, 200);
    let child = ship_cmd(&v.url, "newrelic", &api.events_url(), &dir.0.join("dead"))
        .args(["--timeout-ms", "200"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("5 delivered", Duration::from_secs(20), || {
        api.stats()["events"] == 5
    });
    std::thread::sleep(Duration::from_millis(1500));
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("outcome unknown"),
        "an idle wait is not a lost reply: {err}"
    );
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn files_a_checkpoint_that_cannot_be_written_for_a_while_loses_no_line() {
    let api = StandIn::event_api();
    let dir = TempDir::new("a8");
    let live = dir.0.join("events.jsonl");
    let cpdir = dir.0.join("state");
    std::fs::create_dir(&cpdir).unwrap();
    std::fs::write(&live, lines(0..10)).unwrap();
    let mut child = files_cmd(&api, &[&live], &cpdir.join("cp.json"), &dir.0.join("dead"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first 10", Duration::from_secs(20), || {
        api.stats()["events"] == 10
    });
    // The checkpoint's directory gone (a full disk does the same): writes fail.
    std::fs::remove_dir_all(&cpdir).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap()
        .write_all(lines(10..20).as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    std::fs::create_dir(&cpdir).unwrap();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&live)
        .unwrap()
        .write_all(lines(20..30).as_bytes())
        .unwrap();
    wait_until("all 30", Duration::from_secs(30), || {
        api.stats()["distinct_ids"] == 30
    });
    unsafe { libc_kill(child.id() as i32, 15) };
    child.wait().unwrap();
}

#[test]
fn files_a_first_line_over_a_mib_is_shipped_cut() {
    let api = StandIn::event_api();
    let dir = TempDir::new("a9");
    let (live, cp) = (dir.0.join("events.jsonl"), dir.0.join("cp.json"));
    let big = serde_json::json!({"eventType": "ExternalApiCall", "timestamp": 1, "note": "x".repeat(2 << 20)}).to_string() + "\n";
    std::fs::write(&live, big + &lines(0..100)).unwrap();
    let (code, j, err) = ship_files(&api, &[&live], &cp, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["cut"]["values"].as_u64()),
        (Some(101), Some(1)),
        "{j}"
    );
}

#[test]
fn files_two_shippers_on_one_checkpoint_are_refused() {
    let api = StandIn::event_api();
    let dir = TempDir::new("a10");
    let (live, cp) = (dir.0.join("events.jsonl"), dir.0.join("cp.json"));
    std::fs::write(&live, lines(0..10)).unwrap();
    let mut first = files_cmd(&api, &[&live], &cp, &dir.0.join("dead"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first one's 10", Duration::from_secs(20), || {
        api.stats()["events"] == 10
    });
    let (code, _, err) = ship_files(&api, &[&live], &cp, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("another shipper"), "{err}");
    unsafe { libc_kill(first.id() as i32, 15) };
    first.wait().unwrap();
    assert_eq!(api.stats()["duplicates"], 0);
}

// ---- The second adversarial round: each failed before its fix ----

#[test]
fn a_receiver_claiming_more_refused_than_it_was_sent_cannot_wrap_the_counts() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::otlp();
    let dir = TempDir::new("b1");
    record(&mut c, 0, 3, 200);
    rx.control(serde_json::json!({"partial_claim": 8}));
    let (code, j, err) = ship_once(&v.url, "otlp", &rx.base, &dir.0.join("dead"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["dead_lettered"].as_u64()),
        (Some(0), Some(3)),
        "at most what the POST held: {j}"
    );
}

#[test]
fn tls_to_a_plain_port_stops_at_once_and_counts_nothing_twice() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("b2");
    record(&mut c, 0, 10, 200);
    let https = api.events_url().replacen("http://", "https://", 1);
    let started = Instant::now();
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &https,
        &dir.0.join("dead"),
        &["--retry-for", "60"],
    );
    assert_eq!(code, 1, "{j} {err}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "not retried for --retry-for"
    );
    assert!(j["error"].as_str().unwrap().contains("TLS"), "{j}");
    assert_eq!(
        (j["again"].as_u64(), j["retried"].as_u64()),
        (Some(0), Some(0)),
        "{j}"
    );
    assert_eq!(pending(&mut c), 10);
}

#[test]
fn entries_trimmed_before_a_group_made_at_0_ever_read_are_counted() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("b3");
    let _: () = redis::cmd("XGROUP")
        .arg("CREATE")
        .arg(STREAM)
        .arg("checkout-guard-ship")
        .arg("0")
        .arg("MKSTREAM")
        .query(&mut c)
        .unwrap();
    for i in 0..200 {
        xadd_capped(&mut c, &line(i), 100);
    }
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["trimmed"].as_u64()),
        (Some(100), Some(100)),
        "{j}"
    );
}

#[test]
fn files_lag_is_the_age_of_the_oldest_line_not_yet_delivered() {
    let api = StandIn::event_api();
    let dir = TempDir::new("b4");
    let live = dir.0.join("events.jsonl");
    let hour_ago = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
        - 3_600_000;
    let text: String = (0..60)
        .map(|i| {
            serde_json::json!({"eventType": "ExternalApiCall", "timestamp": hour_ago + i, "seq": i})
                .to_string()
                + "\n"
        })
        .collect();
    std::fs::write(&live, text).unwrap();
    // Each POST answered late: stopped after the first, 40 lines are left.
    api.control(serde_json::json!({"faults": [{"delay_ms": 1500, "count": 3}]}));
    let child = files_cmd(&api, &[&live], &dir.0.join("cp.json"), &dir.0.join("dead"))
        .args(["--batch", "20", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first 20", Duration::from_secs(20), || {
        api.stats()["events"] == 20
    });
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["delivered"].as_u64().unwrap() < 60, "{j}");
    let lag = j["lag_ms"].as_u64().unwrap();
    assert!((3_500_000..3_700_000).contains(&lag), "about an hour: {j}");
}

#[test]
fn once_stopped_by_sigterm_before_the_stream_is_drained_is_not_a_success() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("b5");
    record(&mut c, 0, 60, 200);
    api.control(serde_json::json!({"faults": [{"delay_ms": 1500, "count": 3}]}));
    let child = ship_cmd(&v.url, "newrelic", &api.events_url(), &dir.0.join("dead"))
        .args(["--once", "--json", "--batch", "20"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until("the first 20", Duration::from_secs(20), || {
        api.stats()["events"] == 20
    });
    unsafe { libc_kill(child.id() as i32, 15) };
    let out = child.wait_with_output().unwrap();
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(out.status.code(), Some(1), "{j}");
    assert!(j["error"].as_str().unwrap().contains("stopped"), "{j}");
}

#[test]
fn a_413_for_every_event_stops_instead_of_dead_lettering_everything() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("b6");
    record(&mut c, 0, 64, 200);
    api.control(serde_json::json!({"faults": [{"status": 413, "count": 1000}]}));
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 1, "{j} {err}");
    assert!(j["error"].as_str().unwrap().contains("413"), "{j}");
    assert_eq!(j["dead_lettered"], 0, "{j}");
    assert!(
        j["posts"].as_u64().unwrap() <= 12,
        "halved down to single events, stopped at the third: {j}"
    );
    assert_eq!(pending(&mut c), 64);
}

#[test]
fn otlp_calls_without_a_usable_duration_are_counted_and_a_string_status_is_the_number() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::otlp();
    let dir = TempDir::new("b7");
    let call = |extra: serde_json::Value| {
        let mut e = serde_json::json!({"eventType": "ExternalApiCall", "timestamp": 1_765_000_000_000i64,
            "api": "payment", "http.request.method": "POST", "server.address": "psp.example", "server.port": 443});
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e.to_string()
    };
    for ev in [
        call(serde_json::json!({"http.response.status_code": 200, "duration.ms": 10.0})),
        call(serde_json::json!({"http.response.status_code": "200", "duration.ms": 20.0})),
        call(serde_json::json!({"http.response.status_code": 200})),
        call(serde_json::json!({"http.response.status_code": 200, "duration.ms": "fast"})),
        call(serde_json::json!({"http.response.status_code": 200, "duration.ms": -5.0})),
    ] {
        let _: String = redis::cmd("XADD")
            .arg(STREAM)
            .arg("*")
            .arg("event")
            .arg(ev)
            .query(&mut c)
            .unwrap();
    }
    let (code, j, err) = ship_once(&v.url, "otlp", &rx.base, &dir.0.join("dead"), &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["metric_calls_skipped"].as_u64()),
        (Some(5), Some(3)),
        "{j}"
    );
    assert_eq!(j["metric_points"], 1, "\"200\" and 200 are one series: {j}");
}

#[test]
fn an_entry_that_is_no_event_keeps_its_content_in_the_dead_letter_file() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("b8");
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("*")
        .arg("host")
        .arg("web-1")
        .arg("event")
        .arg("{broken json")
        .query(&mut c)
        .unwrap();
    let dead = dir.0.join("dead");
    let (code, j, err) = ship_once(&v.url, "newrelic", &api.events_url(), &dead, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["dead_lettered"], 1);
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&dead).unwrap().trim()).unwrap();
    let raw = line["raw"].as_str().unwrap();
    assert!(
        raw.contains("{broken json") && raw.contains("web-1"),
        "{line}"
    );
}

#[test]
fn files_whose_first_lines_are_blank_are_still_told_apart() {
    let api = StandIn::event_api();
    let dir = TempDir::new("b9");
    let (a, b, cp) = (
        dir.0.join("a.jsonl"),
        dir.0.join("b.jsonl"),
        dir.0.join("cp.json"),
    );
    std::fs::write(&a, "\n".to_string() + &lines(0..5)).unwrap();
    std::fs::write(&b, "\n".to_string() + &lines(100..105)).unwrap();
    let (code, j, err) = ship_files(&api, &[&a, &b], &cp, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 10, "{j}");
}

// ---- The third adversarial round: each failed before its fix ----

/// An ExternalApiCall event padded with `pad` bytes that gzip cannot shrink much.
fn padded(i: usize, pad: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15 ^ i as u64;
    let noise: String = (0..pad)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect();
    serde_json::json!({"eventType": "ExternalApiCall", "timestamp": 1_765_000_000_000i64 + i as i64,
        "api": "payment", "http.response.status_code": 200, "duration.ms": 5.0, "seq": i, "note": noise})
    .to_string()
}

/// As the stream sink writes: `XADD KEY MAXLEN max * event EVENT` (an exact MAXLEN).
fn xadd_capped(c: &mut redis::Connection, event: &str, max: usize) {
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("MAXLEN")
        .arg(max)
        .arg("*")
        .arg("event")
        .arg(event)
        .query(c)
        .unwrap();
}

fn xadd(c: &mut redis::Connection, event: &str) {
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("*")
        .arg("event")
        .arg(event)
        .query(c)
        .unwrap();
}

#[test]
fn otlp_one_event_over_the_receivers_limit_is_set_aside_and_the_rest_delivered() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::start("otlp_receiver.py", &["--key", KEY, "--max-body", "20000"]);
    let dir = TempDir::new("c1");
    for i in 0..5 {
        xadd(&mut c, &padded(i, 10));
    }
    xadd(&mut c, &padded(5, 60_000));
    for i in 6..11 {
        xadd(&mut c, &padded(i, 10));
    }
    let (code, j, err) = ship_once(&v.url, "otlp", &rx.base, &dir.0.join("dead"), &[]);
    assert_eq!(code, 0, "{j} {err}");
    assert_eq!(
        (j["delivered"].as_u64(), j["dead_lettered"].as_u64()),
        (Some(10), Some(1)),
        "{j}"
    );
    assert_eq!(rx.stats()["log_records"], 10);
    assert_eq!(pending(&mut c), 0);
}

#[test]
fn otlp_a_batch_over_the_receivers_limit_is_split_not_sent_for_ever() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let rx = StandIn::start("otlp_receiver.py", &["--key", KEY, "--max-body", "200000"]);
    let dir = TempDir::new("c2");
    for i in 0..200 {
        xadd(&mut c, &padded(i, 4000));
    }
    let (code, j, err) = ship_once(
        &v.url,
        "otlp",
        &rx.base,
        &dir.0.join("dead"),
        &["--retry-for", "30"],
    );
    assert_eq!(code, 0, "{j} {err}");
    assert_eq!(j["delivered"], 200, "{j}");
    assert_eq!(
        rx.stats()["log_records"].as_u64().unwrap() - rx.stats()["duplicates"].as_u64().unwrap(),
        200
    );
    assert!(
        j["again"].as_u64().unwrap() <= j["taken"].as_u64().unwrap(),
        "{j}"
    );
}

#[test]
fn a_batch_of_large_entries_is_bounded_in_bytes_not_only_in_count() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("c3");
    // 150 entries of ~200 KB (30 MB): batches of about 16 MiB, not one of 30 MB.
    for i in 0..150 {
        xadd(&mut c, &padded(i, 200_000));
    }
    let (code, j, err) = ship_once(
        &v.url,
        "newrelic",
        &api.events_url(),
        &dir.0.join("dead"),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 150, "{j}");
    assert!(j["batches"].as_u64().unwrap() >= 2, "bounded in bytes: {j}");
}

#[test]
fn an_entry_that_is_not_utf8_keeps_its_bytes_in_the_dead_letter_file() {
    let v = common::Valkey::start();
    let mut c = v.connection();
    let api = StandIn::event_api();
    let dir = TempDir::new("c4");
    let bytes: &[u8] = b"\x1f\x8b\x08\x00\xff\xfe\x80\x81binary";
    let _: String = redis::cmd("XADD")
        .arg(STREAM)
        .arg("*")
        .arg("event")
        .arg(bytes)
        .query(&mut c)
        .unwrap();
    let dead = dir.0.join("dead");
    let (code, j, err) = ship_once(&v.url, "newrelic", &api.events_url(), &dead, &[]);
    assert_eq!((code, j["dead_lettered"].as_u64()), (0, Some(1)), "{err}");
    let line: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&dead).unwrap().trim()).unwrap();
    let raw: serde_json::Value = serde_json::from_str(line["raw"].as_str().unwrap()).unwrap();
    let kept = raw["event"]
        .as_str()
        .unwrap()
        .strip_prefix("base64:")
        .expect("base64 for bytes that are not UTF-8");
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(kept)
            .unwrap(),
        bytes
    );
}

#[test]
fn files_a_mib_of_blank_lines_first_does_not_hide_the_file() {
    let api = StandIn::event_api();
    let dir = TempDir::new("c5");
    let (live, cp) = (dir.0.join("events.jsonl"), dir.0.join("cp.json"));
    std::fs::write(&live, "\n".repeat((1 << 20) + 10) + &lines(0..5)).unwrap();
    let (code, j, err) = ship_files(&api, &[&live], &cp, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(j["delivered"], 5, "{j}");
}
