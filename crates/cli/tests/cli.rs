//! The `checkout-guard` binary on generated event files: windows, formats, gzip, stdin,
//! bad lines and arguments.

use std::io::Write;
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
/// 2026-11-30 00:00:00 UTC, a multiple of 5 minutes.
const DAY: i64 = 1_796_083_200_000 - 86_400_000;

fn event(ts: i64, api: &str, status: i64) -> String {
    format!(
        r#"{{"eventType":"ExternalApiCall","timestamp":{ts},"api":"{api}","http.response.status_code":{status},"shop.id":"s1"}}"#
    )
}

/// 10 minutes at 2 events/s, with a 3-second spike of 200/s at 00:06:10 (payment, 429s)
/// and a denial of a hot shop inside it.
fn day() -> String {
    let mut lines = Vec::new();
    for s in 0..600 {
        lines.push(event(DAY + s * 1000, "zoneA", 200));
        lines.push(event(DAY + s * 1000 + 500, "payment", 200));
    }
    for i in 0..600 {
        lines.push(event(
            DAY + 370_000 + i * 5,
            "payment",
            if i % 2 == 0 { 429 } else { 200 },
        ));
    }
    lines.push(format!(r#"{{"eventType":"RateLimitDecision","timestamp":{},"shop.id":"flash","reason":"hot_shop","allowed":false}}"#, DAY + 371_000));
    lines.sort_by_key(|l| {
        l.split("\"timestamp\":")
            .nth(1)
            .unwrap()
            .split(',')
            .next()
            .unwrap()
            .parse::<i64>()
            .unwrap()
    });
    lines.join("\n") + "\n"
}

fn run(args: &[&str], stdin: Option<&[u8]>) -> (i32, String, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn temp(name: &str, bytes: &[u8]) -> String {
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p.to_string_lossy().into_owned()
}

#[test]
fn scan_finds_the_spike_in_plain_gzip_and_stdin_alike() {
    let plain = temp("day.jsonl", day().as_bytes());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(day().as_bytes()).unwrap();
    let gz = temp("day.jsonl.gz", &gz.finish().unwrap());
    // The background averages 2/s, the spike's 5-minute bucket 4/s: a coarse threshold of 3
    // keeps only that bucket (not complete in general, but enough here).
    let args = [
        "scan",
        "--json",
        "--fine-threshold",
        "100",
        "--coarse-threshold",
        "3",
    ];
    let (rc, a, err) = run(&[&args[..], &[&plain]].concat(), None);
    assert_eq!(rc, 0, "{err}");
    let (_, b, _) = run(&[&args[..], &[&gz]].concat(), None);
    let (_, c, _) = run(&[&args[..], &["-"]].concat(), Some(day().as_bytes()));
    let a: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(
        a["windows"],
        serde_json::from_str::<serde_json::Value>(&b).unwrap()["windows"]
    );
    assert_eq!(
        a["windows"],
        serde_json::from_str::<serde_json::Value>(&c).unwrap()["windows"]
    );
    let w = &a["windows"].as_array().unwrap()[..];
    assert_eq!(w.len(), 1, "{a}");
    assert_eq!(w[0]["start"], "2026-11-30 00:06:10.000");
    assert_eq!(w[0]["end"], "2026-11-30 00:06:13.000");
    assert_eq!(w[0]["calls"], 606);
    assert_eq!(w[0]["peak_rps"], 202.0);
    assert_eq!(w[0]["status"]["429"], 300);
    assert_eq!(w[0]["denials"][0]["shop"], "flash");
    assert_eq!(a["scan"]["candidates"], 1);
    assert_eq!(a["scan"]["fine_buckets_examined"], 300);
    assert_eq!(a["scan"]["complete"], false);
    // At the complete threshold both buckets are examined, with the same window.
    let (_, d, _) = run(
        &[
            "scan",
            "--json",
            "--fine-threshold",
            "100",
            "--coarse-threshold",
            "0.3",
            &plain,
        ],
        None,
    );
    let d: serde_json::Value = serde_json::from_str(&d).unwrap();
    assert_eq!(d["windows"], a["windows"]);
    assert_eq!(
        (
            d["scan"]["candidates"].as_i64(),
            d["scan"]["complete"].as_bool()
        ),
        (Some(2), Some(true))
    );
    assert_eq!(a["input"]["events"], 1801);
}

#[test]
fn filters_text_and_csv() {
    let plain = temp("day2.jsonl", day().as_bytes());
    let (rc, out, _) = run(
        &["scan", "--api", "zoneA", "--fine-threshold", "100", &plain],
        None,
    );
    assert_eq!(rc, 0);
    assert!(out.starts_with("window start (UTC)"), "{out}");
    assert!(out.contains("0 window(s)"), "zoneA never spikes: {out}");
    let (rc, out, _) = run(
        &[
            "scan",
            "--csv",
            "--fine-threshold",
            "100",
            "--coarse-threshold",
            "0.3",
            "--from",
            "2026-11-30T00:06:11Z",
            &plain,
        ],
        None,
    );
    assert_eq!(rc, 0);
    let rows: Vec<&str> = out.lines().collect();
    assert_eq!(
        rows[0],
        "start,end,start_ms,end_ms,peak_rps,peak_at,calls,status,denials"
    );
    assert_eq!(rows.len(), 2, "{out}");
    assert!(
        rows[1].starts_with("2026-11-30 00:06:11.000,2026-11-30 00:06:13.000,"),
        "{out}"
    );
    let (rc, out, _) = run(&["peaks", "--csv", &plain], None);
    assert_eq!(rc, 0);
    assert!(
        out.contains("2026-11-30,(all),202,2026-11-30 00:06:10.000,1800"),
        "{out}"
    );
    assert!(out.contains("2026-11-30,payment,201,"), "{out}");
}

#[test]
fn bad_lines_are_reported_with_line_numbers_and_bad_arguments_exit_2() {
    let text = format!(
        "{}\n{{\"eventType\":\"ExternalApiCall\",\"timestamp\":17\nnot json\n{{\"eventType\":\"ExternalApiCall\"}}\n{}\n",
        event(DAY + 60_000, "a", 200),
        event(DAY, "a", 200)
    );
    let f = temp("bad.jsonl", text.as_bytes());
    let (rc, out, _) = run(&["scan", &f], None);
    assert_eq!(rc, 0);
    assert!(
        out.contains("5 events read, 2 counted; 2 malformed, 1 without timestamp, 1 out of order"),
        "{out}"
    );
    assert!(
        out.contains("bad.jsonl:2: expected ',' or '}' at column"),
        "{out}"
    );
    assert!(out.contains("bad.jsonl:3: not a JSON object"), "{out}");
    assert!(out.contains("bad.jsonl:4: no numeric timestamp"), "{out}");
    assert!(out.contains("bad.jsonl:5: out of order"), "{out}");
    let (rc, _, err) = run(&["scan", "--coarse", "7s", "--fine", "2s", &f], None);
    assert_eq!(rc, 2);
    assert!(
        err.contains("must be a whole number of fine buckets"),
        "{err}"
    );
    let (rc, _, err) = run(&["scan", "/nonexistent/x.jsonl"], None);
    assert_eq!(rc, 2);
    assert!(err.contains("/nonexistent/x.jsonl"), "{err}");
    let (rc, _, err) = run(&["scan", "--from", "yesterday", &f], None);
    assert_eq!(rc, 2);
    assert!(err.contains("not a time"), "{err}");
}

#[test]
fn a_large_file_read_by_two_threads_gives_the_same_answer_and_line_numbers() {
    let dir = std::env::temp_dir().join(format!("cg-cli-par-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("big.jsonl");
    let out = Command::new(BIN)
        .args([
            "generate",
            "--events",
            "320000",
            "--seed",
            "5",
            "-o",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    // A bad line near the end, far into the second thread's part.
    let mut text = std::fs::read(&file).unwrap();
    let lines = text.iter().filter(|&&b| b == b'\n').count();
    text.extend_from_slice(b"{\"eventType\":\"ExternalApiCall\",\"timestamp\":\n");
    std::fs::write(&file, &text).unwrap();
    assert!(
        text.len() > 64 << 20,
        "large enough to be split: {}",
        text.len()
    );
    let scan = |threads: &str| {
        let (rc, out, err) = run(
            &[
                "scan",
                "--json",
                "--threads",
                threads,
                "--fine-threshold",
                "40",
                "--coarse-threshold",
                "0.2",
                file.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(rc, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let (one, two) = (scan("1"), scan("2"));
    assert_eq!(one, two);
    assert_eq!(one["input"]["bad_lines"][0]["line"], lines as u64 + 1);
    assert!(!one["windows"].as_array().unwrap().is_empty());
    let peaks = |threads: &str| {
        run(
            &["peaks", "--threads", threads, file.to_str().unwrap()],
            None,
        )
        .1
    };
    assert_eq!(peaks("1"), peaks("2"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn limiter_commands_refuse_bad_input_before_touching_valkey_and_mask_passwords() {
    // Nothing listens on port 1: any I/O would fail with a connection error instead.
    let url = "redis://oncall:hunter2@127.0.0.1:1/0";
    let cases: &[(&[&str], &str)] = &[
        (
            &["set", "global=ten/5"],
            "global.capacity: \"ten\" is not an integer",
        ),
        (
            &["set", "global=5/x"],
            "global.refill_per_second: \"x\" is not a number",
        ),
        (
            &["set", "lane=5/5"],
            "BUCKET one of global, hot_lane, hot_shop",
        ),
        (
            &["set", "global"],
            "expected BUCKET=CAPACITY/RATE or BUCKET=default",
        ),
        (
            &["set", "mode=dry-run"],
            "mode must be \"enforce\" or \"shadow\", got \"dry-run\"",
        ),
        (
            &["set", "mode=shadow", "global=x/1"],
            "global.capacity: \"x\" is not an integer",
        ),
        // A bucket (or the mode) given twice is ambiguous: refused, not the last one kept.
        (
            &["set", "global=60/55", "global=6/55"],
            "global is given twice (\"global=60/55\", \"global=6/55\")",
        ),
        (
            &["set", "hot_shop=5/5", "global=6/6", "hot_shop=default"],
            "hot_shop is given twice",
        ),
        (
            &["set", "global=6/6", "global=6/6"],
            "global is given twice",
        ),
        (
            &["set", "mode=shadow", "global=6/6", "mode=enforce"],
            "mode is given twice (\"mode=shadow\", \"mode=enforce\")",
        ),
        // Named as the command line names it, once prefixed (issue 38: `checkout-guard:
        // checkout_guard: ttlSeconds must be ...`).
        (
            &["hot", "s", "--ttl", "0"],
            "checkout-guard: --ttl must be from 1 to ",
        ),
        (
            &["hot", "s", "--ttl", "0", "--new-limiter"],
            "checkout-guard: --ttl must be from 1 to ",
        ),
    ];
    for (args, message) in cases {
        let mut all = vec!["limiter", "--url", url, "--name", "payments"];
        all.extend_from_slice(args);
        let (code, out, err) = run(&all, None);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!err.contains("checkout_guard:"), "{args:?}: {err}");
        assert!(out.is_empty());
    }
    let (code, _, err) = run(
        &["limiter", "--url", url, "--name", "bad name", "status"],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.starts_with("checkout-guard: --name must be"), "{err}");
    // `set --help` lists every form of CHANGES, the in-flight limits too.
    let (code, out, err) = run(&["limiter", "set", "--help"], None);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("in_flight.LEVEL=N") && out.contains("mode=enforce"),
        "{out}"
    );
    // A URL that is not one: named, password masked.
    let (code, _, err) = run(&["limiter", "--url", "http://u:hunter2@x", "status"], None);
    assert_eq!(code, 2);
    assert!(err.contains("--url") && err.contains("u:***@x"), "{err}");
    // Valkey down: a clear error within the timeout, password masked.
    let (code, _, err) = run(
        &["limiter", "--url", url, "--timeout-ms", "200", "status"],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("Valkey at redis://oncall:***@127.0.0.1:1/0"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// `--sentinel-user` needs the sentinels' password (no AUTH could be sent with a user
/// alone): refused before anything is sent; with the password from the environment it goes
/// on to ask the sentinels (none listens on port 1).
#[test]
fn a_sentinel_user_without_a_password_is_refused() {
    let url = "valkey+sentinel://127.0.0.1:1/orders";
    let run_with = |password: Option<&str>| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "limiter",
            "--url",
            url,
            "--sentinel-user",
            "sen",
            "--timeout-ms",
            "200",
            "status",
        ])
        .env_remove("CHECKOUT_GUARD_SENTINEL_PASSWORD");
        if let Some(p) = password {
            cmd.env("CHECKOUT_GUARD_SENTINEL_PASSWORD", p);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, err) = run_with(None);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--sentinel-user is given without a password"),
        "{err}"
    );
    let (code, err) = run_with(Some("hunter2"));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("sentinel: no sentinel answered"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// The TLS URLs with their `--tls-*` options: a file that cannot be used is named with its
/// option and path before anything is sent; `--tls-*` with a plain URL is an error; a TLS
/// server that is not there fails within the timeout, password masked.
#[test]
fn limiter_takes_tls_urls_and_their_options() {
    let missing = "/nonexistent/checkout-guard/ca.pem";
    let (code, _, err) = run(
        &[
            "limiter",
            "--url",
            "rediss://u:hunter2@127.0.0.1:1",
            "--tls-cafile",
            missing,
            "status",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--tls-cafile") && err.contains(missing),
        "{err}"
    );
    let (code, _, err) = run(
        &[
            "limiter",
            "--url",
            "redis://127.0.0.1:1",
            "--tls-peer-name",
            "cache",
            "status",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("need a TLS URL"), "{err}");
    let (code, _, err) = run(
        &[
            "limiter",
            "--url",
            "valkeys://u:hunter2@127.0.0.1:1",
            "--timeout-ms",
            "200",
            "status",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("Valkey at valkeys://u:***@127.0.0.1:1"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

/// `checkout-guard ARGS` under `/usr/bin/time -v`, `stdin` written by a thread as it
/// streams (never whole in this process): (exit code, stdout, peak RSS in KB, stderr).
fn run_measured(
    args: &[&str],
    stdin: impl FnOnce(&mut dyn Write) + Send,
) -> (i32, String, u64, String) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2000000; exec /usr/bin/time -v "$@""#)
        .arg("sh")
        .arg(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let out = std::thread::scope(|s| {
        s.spawn(move || stdin(&mut input));
        child.wait_with_output().unwrap()
    });
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let field = |name: &str| {
        err.lines()
            .find_map(|l| l.trim().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} from /usr/bin/time -v: {err}"))
            .parse::<u64>()
            .unwrap()
    };
    (
        field("Exit status: ") as i32,
        String::from_utf8_lossy(&out.stdout).into_owned(),
        field("Maximum resident set size (kbytes): "),
        err,
    )
}

fn write_bytes(w: &mut dyn Write, byte: u8, n: usize) {
    let block = vec![byte; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(block.len());
        // The reader may stop early (a failed run): nothing more to write then.
        if w.write_all(&block[..k]).is_err() {
            return;
        }
        left -= k;
    }
}

fn bad_lines(scan: &serde_json::Value) -> Vec<(u64, String)> {
    scan["input"]["bad_lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            (
                b["line"].as_u64().unwrap(),
                b["problem"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn lines_longer_than_the_cap_are_skipped_unheld_and_counted_as_malformed() {
    const CAP: usize = 1 << 20;
    // A 200 MB line of NUL bytes (what a crash can leave), a line one byte over the cap
    // (inside one read block), and a 3 MB line of NULs without a newline at the end.
    let (rc, out, kb, err) = run_measured(&["scan", "--json", "-"], |w| {
        let _ = writeln!(w, "{}", event(DAY, "a", 200));
        write_bytes(w, 0, 200 << 20);
        let _ = writeln!(w, "\n{}", event(DAY + 1000, "a", 200));
        write_bytes(w, b'x', CAP + 1);
        let _ = writeln!(w, "\n{}", event(DAY + 2000, "a", 200));
        write_bytes(w, 0, 3 << 20);
    });
    assert_eq!(rc, 0, "{err}");
    let scan: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(scan["input"]["events"], 6, "{out}");
    assert_eq!(scan["input"]["counted"], 3);
    assert_eq!(scan["input"]["malformed"], 3);
    let cap = |n: usize| format!("line of {n} bytes, longer than the cap of {CAP}: skipped");
    assert_eq!(
        bad_lines(&scan),
        [(2, cap(200 << 20)), (4, cap(CAP + 1)), (6, cap(3 << 20))]
    );
    assert_eq!(scan["input"]["bad_lines"][0]["file"], "-");
    // Before the cap, the reader's buffer grew to hold the line: 529 MB for a 400 MB line.
    assert!(kb < 64 * 1024, "peak RSS {kb} KB for a 200 MB line");
}

#[test]
fn a_long_line_across_the_split_of_a_two_thread_read_is_skipped_too() {
    let dir = std::env::temp_dir().join(format!("cg-cli-long-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("crashed.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&file).unwrap());
        for i in 0..1000 {
            writeln!(f, "{}", event(DAY + i * 100, "a", 200)).unwrap();
        }
        // 100 MB of NULs: the middle of the file, where the two threads' parts meet.
        write_bytes(&mut f, 0, 100 << 20);
        writeln!(f).unwrap();
        for i in 0..1000 {
            writeln!(f, "{}", event(DAY + 100_000 + i * 100, "a", 200)).unwrap();
        }
    }
    let path = file.to_str().unwrap();
    let mut answers = Vec::new();
    for threads in ["1", "2"] {
        let (rc, out, kb, err) =
            run_measured(&["scan", "--json", "--threads", threads, path], |_| {});
        assert_eq!(rc, 0, "{err}");
        assert!(kb < 64 * 1024, "{threads} thread(s): peak RSS {kb} KB");
        let scan: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(scan["input"]["counted"], 2000);
        assert_eq!(scan["input"]["malformed"], 1);
        assert_eq!(bad_lines(&scan)[0].0, 1001);
        answers.push(scan);
    }
    assert_eq!(answers[0], answers[1]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn call(ts: i64, shop: &str) -> String {
    format!(
        r#"{{"eventType":"ExternalApiCall","timestamp":{ts},"api":"payment","http.response.status_code":200,"shop.id":"{shop}"}}"#
    )
}

fn denial(ts: i64, limiter: &str, shop: &str) -> String {
    format!(
        r#"{{"eventType":"RateLimitDecision","timestamp":{ts},"limiter":"{limiter}","shop.id":"{shop}","reason":"global","allowed":false}}"#
    )
}

/// 10 s: shop `flood` at 100 attempts/s (calls, and from the 5th second denials of
/// limiter `payment`), `a` and `b` at 2/s; a shadow decision (allowed true: its call is
/// there already), another api's calls and a malformed line, which count nothing.
fn sale() -> Vec<String> {
    let mut lines = Vec::new();
    for ms in (0..10_000).step_by(10) {
        let t = DAY + ms;
        lines.push(if ms < 5_000 {
            call(t, "flood")
        } else {
            denial(t, "payment", "flood")
        });
        if ms % 500 == 0 {
            lines.push(call(t, "a"));
            lines.push(call(t + 1, "b"));
            lines.push(event(t, "zoneA", 200));
        }
    }
    lines.push(format!(r#"{{"eventType":"RateLimitDecision","timestamp":{},"limiter":"payment","shop.id":"a","reason":"global","allowed":true,"would_allow":false,"mode":"shadow"}}"#, DAY + 100));
    lines.push("{not json".into());
    lines
}

fn replay_json(args: &[&str], stdin: Option<&[u8]>) -> serde_json::Value {
    let (code, out, err) = run(args, stdin);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The replay decides every recorded attempt by the model: a global bucket of 50/s with a
/// burst of 50 admits 50 + 50/s over the 10 s to the flood and the ordinary shops together,
/// denied by global; a listed hot shop stops at its own bucket and leaves the others room.
#[test]
fn replay_decides_each_shop_s_attempts_under_the_candidate_limits() {
    let f = temp("sale.jsonl", (sale().join("\n") + "\n").as_bytes());
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=50/50",
            "--json",
        ],
        None,
    );
    assert_eq!(j["input"]["attempts"], 1040, "{j}");
    assert_eq!(j["input"]["malformed"], 1);
    assert_eq!(j["input"]["bad_lines"][0]["line"], 1062, "{j}");
    let shops = &j["shops"];
    assert_eq!(shops["flood"]["attempts"], 1000);
    assert_eq!(shops["a"]["attempts"], 20);
    let admitted: u64 = ["flood", "a", "b"]
        .iter()
        .map(|s| shops[s]["admitted"].as_u64().unwrap())
        .sum();
    // 50 at once, then 50/s for 9.99 s (the first second's refill included): 50 + 499.
    assert_eq!(admitted, 549, "{j}");
    assert_eq!(j["totals"]["admitted"], 549);
    assert_eq!(j["totals"]["denied"]["global"], 1040 - 549);
    assert_eq!(j["totals"]["denied"]["hot_shop"], 0);
    // The flood listed hot with a shop bucket of 10/s: it gets 10 + 10/s, the others all.
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=50/50 hot_shop=10/10",
            "--hot",
            "flood",
            "--json",
        ],
        None,
    );
    let shops = &j["shops"];
    assert_eq!(shops["flood"]["admitted"], 10 + 99, "{j}");
    assert_eq!(shops["flood"]["denied"]["hot_shop"], 1000 - 109);
    assert_eq!(shops["flood"]["hot"], true);
    assert_eq!(shops["a"]["admitted"], 20);
    assert_eq!(shops["b"]["admitted"], 20);
}

/// Several candidate limits in one pass, side by side; the provider's own bucket predicts
/// the 429s; without limits every attempt is admitted and only the provider decides.
#[test]
fn replay_compares_candidates_and_predicts_the_provider_s_429s() {
    let f = temp("sale2.jsonl", (sale().join("\n") + "\n").as_bytes());
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "loose:global=500/500",
            "--limits",
            "tight:global=20/20",
            "--provider",
            "50/50",
            "--json",
        ],
        None,
    );
    let s = j["scenarios"].as_array().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0]["name"], "loose");
    assert_eq!(s[1]["name"], "tight");
    assert_eq!(s[0]["totals"]["admitted"], 1040);
    // Everything admitted, so the provider answers what a 50/s bucket cannot: as without limits.
    let none = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--provider",
            "50/50",
            "--json",
        ],
        None,
    );
    assert_eq!(none["totals"]["admitted"], 1040);
    assert_eq!(none["provider_429"], s[0]["totals"]["provider_429"]);
    assert_eq!(none["provider_429"], 1040 - 549, "{none}");
    // Tight limits admit below the provider's rate: no 429 predicted.
    assert_eq!(s[1]["totals"]["provider_429"], 0);
    assert_eq!(s[1]["totals"]["admitted"], 20 + 199);
    assert_eq!(j["provider_429"], s[0]["totals"]["provider_429"]);
    // The text form names both.
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "loose:global=500/500",
            "--limits",
            "tight:global=20/20",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("loose") && out.contains("tight") && out.contains("flood"),
        "{out}"
    );
    assert!(out.contains(&format!("{f}:1062")), "{out}");
}

/// Files read at once and merged in time order: the sale split in two files by shop (the
/// second starting earlier than the first ends), one gzip, one from stdin, decides as one
/// file; a few seconds of disorder inside a file are put right.
#[test]
fn replay_merges_files_gzip_and_stdin_in_time_order() {
    let all = sale();
    let one = temp("whole.jsonl", (all.join("\n") + "\n").as_bytes());
    let args = |files: &[&str]| {
        let mut a = vec!["replay"];
        a.extend_from_slice(files);
        a.extend([
            "--api",
            "payment",
            "--limits",
            "global=50/50 hot_shop=10/10",
            "--hot",
            "a",
            "--json",
        ]);
        a.into_iter().map(String::from).collect::<Vec<_>>()
    };
    let want = replay_json(
        &args(&[&one]).iter().map(String::as_str).collect::<Vec<_>>(),
        None,
    );
    let (flood, rest): (Vec<_>, Vec<_>) =
        all.iter().cloned().partition(|l| l.contains("\"flood\""));
    let mut rest = rest;
    // Within a file, neighbours swapped (a batch written late by its worker).
    for i in (0..rest.len() - 1).step_by(7) {
        rest.swap(i, i + 1);
    }
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all((flood.join("\n") + "\n").as_bytes()).unwrap();
    let gz = temp("flood.jsonl.gz", &gz.finish().unwrap());
    let got = replay_json(
        &args(&[&gz, "-"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        Some((rest.join("\n") + "\n").as_bytes()),
    );
    assert_eq!(got["shops"], want["shops"]);
    assert_eq!(got["totals"], want["totals"]);
    assert_eq!(got["input"]["late"], 0);
}

/// Denials of several limiters need `--limiter`; bad candidate limits and options are
/// refused naming them (exit 2), before anything is read.
#[test]
fn replay_refuses_ambiguous_input_and_bad_options_naming_them() {
    let mut lines = sale();
    lines.push(denial(DAY + 50, "refunds", "x"));
    let f = temp("two.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (code, _, err) = run(
        &["replay", &f, "--api", "payment", "--limits", "global=5/5"],
        None,
    );
    assert_eq!(code, 2);
    assert!(
        err.contains("payment, refunds") && err.contains("--limiter"),
        "{err}"
    );
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limiter",
            "payment",
            "--limits",
            "global=5000/5000",
            "--json",
        ],
        None,
    );
    assert_eq!(j["totals"]["attempts"], 1040);
    for (bad, says) in [
        (vec!["--limits", "global=0/5"], "global.capacity"),
        (
            vec!["--limits", "global=5/5 hot_lane=x/1"],
            "hot_lane.capacity",
        ),
        (vec!["--limits", "hot_shop=5/5"], "no global"),
        (
            vec!["--limits", "a:global=5/5", "--limits", "a:global=6/6"],
            "same name",
        ),
        (
            vec!["--limits", "global=5/5", "--provider", "5"],
            "--provider",
        ),
        (
            vec!["--limits", "global=5/5", "--auto-hot", "share=7"],
            "auto_hot.share",
        ),
        (
            vec!["--limits", "global=5/5", "--max-wait", "-1"],
            "--max-wait",
        ),
        (vec!["--hot", "a"], "need --limits"),
    ] {
        let mut a = vec!["replay", f.as_str(), "--api", "payment"];
        a.extend(bad.iter().copied());
        let (code, _, err) = run(&a, None);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains(says), "{bad:?}: {err}");
    }
}

/// Reservations: with `--max-wait` the flood's attempts wait for their tokens instead of
/// being denied (how many, and for how long); `auto_hot` marks the flood by itself.
/// `replay --api payments` where the api is `payment` would replay the limiter's denials
/// alone as attempts: refused (exit 2, nothing printed), naming the apis the files hold;
/// so is a --from/--to with no event, naming the files' time range.
#[test]
fn replay_refuses_an_api_or_a_range_that_matched_nothing_naming_what_is_there() {
    let f = temp("sale-typo.jsonl", (sale().join("\n") + "\n").as_bytes());
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payments",
            "--limits",
            "global=50/50",
        ],
        None,
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(out, "");
    assert!(
        err.contains("--api payments matched no ExternalApiCall event")
            && err.contains("the apis in the files: payment, zoneA"),
        "{err}"
    );
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--from",
            "2026-12-01T00:00:00Z",
        ],
        None,
    );
    assert_eq!(code, 2, "{out}");
    assert!(
        err.contains("--from/--to matched no event")
            && err.contains(
                "the files' events run from 2026-11-30 00:00:00.000 to 2026-11-30 00:00:09.99"
            ),
        "{err}"
    );
    let (code, _, err) = run(&["replay", &f, "--api", "payment"], None);
    assert_eq!(code, 0, "{err}");
}

/// `replay --limiter NAME` with a name no decision of the files carries (a typo,
/// `paymnts` for `payment`) would silently leave that limiter's denials out of the
/// attempts: refused (exit 2, nothing printed), naming the limiters the files hold, as
/// `--api` is. A name the files carry, even one with no denial, is taken.
#[test]
fn replay_refuses_a_limiter_no_event_carries_naming_the_limiters_there() {
    let mut lines = sale();
    // A limiter that only allowed: known by its decisions, no denial.
    lines.push(format!(r#"{{"eventType":"RateLimitDecision","timestamp":{},"limiter":"search","shop.id":"a","reason":"allowed","allowed":true}}"#, DAY + 200));
    let f = temp(
        "sale-limiter-typo.jsonl",
        (lines.join("\n") + "\n").as_bytes(),
    );
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limiter",
            "paymnts",
            "--limits",
            "global=50/50",
        ],
        None,
    );
    assert_eq!(code, 2, "{out}");
    assert_eq!(out, "");
    assert!(
        err.contains("--limiter paymnts matched no RateLimitDecision event")
            && err.contains("the limiters in the files: payment, search"),
        "{err}"
    );
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limiter",
            "payment",
            "--json",
        ],
        None,
    );
    assert_eq!(j["totals"]["attempts"], 1040);
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limiter",
            "search",
            "--json",
        ],
        None,
    );
    assert_eq!(j["totals"]["attempts"], 540);
}

#[test]
fn replay_counts_reservations_and_auto_hot_marks() {
    let f = temp("sale3.jsonl", (sale().join("\n") + "\n").as_bytes());
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=50/50",
            "--max-wait",
            "0.2",
            "--json",
        ],
        None,
    );
    let r = &j["totals"]["reservations"];
    assert!(r["waited"].as_u64().unwrap() > 0, "{j}");
    assert!(r["max_s"].as_f64().unwrap() <= 0.2, "{j}");
    assert!(r["p95_s"].as_f64().unwrap() <= 0.2 * 1.05, "{j}");
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=200/200 hot_shop=10/10",
            "--auto-hot",
            "window_seconds=2,share=0.5,min_tokens=20",
            "--json",
        ],
        None,
    );
    assert_eq!(j["shops"]["flood"]["hot"], true, "{j}");
    assert_eq!(j["shops"]["a"]["hot"], false);
    assert!(
        j["shops"]["flood"]["denied"]["hot_shop"].as_u64().unwrap() > 500,
        "{j}"
    );
    assert_eq!(j["shops"]["a"]["admitted"], 20);
}

/// Memory follows the shops and the seconds, not the events: ten times the events over
/// the same hour and shops take about the same memory (max RSS).
#[test]
fn replay_memory_does_not_grow_with_the_events() {
    let rss = |per_second: i64| {
        let (code, out, rss, err) = run_measured(
            &[
                "replay",
                "-",
                "--api",
                "payment",
                "--limits",
                "global=100/100",
                "--provider",
                "80/80",
                "--json",
            ],
            move |w| {
                let mut buf = String::new();
                for s in 0..3600 {
                    for i in 0..per_second {
                        let shop = (s * 7 + i) % 200;
                        buf.push_str(&call(
                            DAY + s * 1000 + i * 1000 / per_second,
                            &format!("shop-{shop}"),
                        ));
                        buf.push('\n');
                    }
                    if buf.len() > 1 << 20 {
                        let _ = w.write_all(buf.as_bytes());
                        buf.clear();
                    }
                }
                let _ = w.write_all(buf.as_bytes());
            },
        );
        assert_eq!(code, 0, "{err}");
        let j: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(j["totals"]["attempts"], 3600 * per_second);
        rss
    };
    let (small, large) = (rss(10), rss(100));
    eprintln!("replay max RSS: {small} kB for 36,000 events, {large} kB for 360,000");
    assert!(large < small * 3 / 2 + 4096, "{small} kB -> {large} kB");
}

/// A timestamp no clock gives (negative, or past 2^53 µs: the year 2255) is skipped and
/// counted, never decided (it overflowed the model's arithmetic: a panic).
#[test]
fn replay_skips_and_counts_timestamps_out_of_range() {
    let mut lines = sale();
    lines.push(
        r#"{"eventType":"ExternalApiCall","timestamp":1e30,"api":"payment","shop.id":"a"}"#.into(),
    );
    lines.push(
        r#"{"eventType":"ExternalApiCall","timestamp":-5,"api":"payment","shop.id":"a"}"#.into(),
    );
    lines.push(r#"{"eventType":"ExternalApiCall","timestamp":9007199254741,"api":"payment","shop.id":"a"}"#.into());
    let f = temp("range.jsonl", (lines.join("\n") + "\n").as_bytes());
    let j = replay_json(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=50/50",
            "--provider",
            "5/5",
            "--json",
        ],
        None,
    );
    assert_eq!(j["input"]["attempts"], 1040, "{j}");
    assert_eq!(j["input"]["out_of_range"], 3, "{j}");
    let (code, out, err) = run(
        &["replay", &f, "--api", "payment", "--limits", "global=50/50"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("3 attempt(s) with a timestamp out of range"),
        "{out}"
    );
}

/// An --output that cannot be written still prints the answer (and exits 2 naming it);
/// a file that cannot be read is named.
#[test]
fn replay_loses_nothing_to_an_unwritable_output_and_names_an_unreadable_file() {
    let f = temp("out.jsonl", (sale().join("\n") + "\n").as_bytes());
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "global=50/50",
            "--json",
            "--output",
            "/nonexistent/x.html",
        ],
        None,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--output /nonexistent/x.html"), "{err}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(j["totals"]["attempts"], 1040);
    let dir = std::env::temp_dir();
    let (code, _, err) = run(
        &["replay", &f, dir.to_str().unwrap(), "--api", "payment"],
        None,
    );
    assert_eq!(code, 2);
    assert!(err.contains(dir.to_str().unwrap()), "{err}");
}

/// A file (or `-`) given twice is refused naming it: it would count twice, and two
/// readers of one stdin hung the merge. A timestamp of i64::MIN overflowed the scan's
/// disorder check (a panic in scan and replay alike).
#[test]
fn replay_refuses_a_file_given_twice_and_survives_the_extreme_timestamps() {
    let f = temp("twice.jsonl", (sale().join("\n") + "\n").as_bytes());
    for files in [vec![f.as_str(), f.as_str()], vec!["-", "-"]] {
        let mut a = vec!["replay"];
        a.extend(files.iter().copied());
        a.extend(["--api", "payment", "--limits", "global=5/5"]);
        let (code, _, err) = run(&a, Some(b""));
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("given twice"), "{err}");
    }
    let lines = format!(
        "{}\n{}\n{}\n",
        call(DAY, "a"),
        r#"{"eventType":"ExternalApiCall","timestamp":-9223372036854775808,"api":"payment","shop.id":"a"}"#,
        r#"{"eventType":"ExternalApiCall","timestamp":9223372036854775807,"api":"payment","shop.id":"a"}"#
    );
    let j = replay_json(
        &[
            "replay",
            "-",
            "--api",
            "payment",
            "--limits",
            "global=5/5",
            "--json",
        ],
        Some(lines.as_bytes()),
    );
    assert_eq!(j["input"]["attempts"], 1, "{j}");
    assert_eq!(j["input"]["out_of_range"], 2, "{j}");
    let (code, _, err) = run(&["scan", "-", "--json"], Some(lines.as_bytes()));
    assert_eq!(code, 0, "{err}");
}

/// `replay --json` of many shops: the output is written as it goes, not built as a tree
/// first (that held about 5.5 KB per shop, 14 times the output: 300,000 shops took
/// 1.6 GB). Its peak memory stays near the text output's (which keeps the same per-shop
/// state): under 1 KB more per shop.
#[test]
fn replay_json_of_many_shops_takes_about_the_memory_of_the_text() {
    const SHOPS: i64 = 40_000;
    let measure = |json: bool| {
        let mut args = vec![
            "replay",
            "-",
            "--api",
            "payment",
            "--limits",
            "global=100/100",
        ];
        if json {
            args.push("--json");
        }
        let (code, out, rss, err) = run_measured(&args, move |w| {
            let mut buf = String::new();
            for i in 0..SHOPS {
                buf.push_str(&call(DAY + i * 10, &format!("shop-{i}")));
                buf.push('\n');
                if buf.len() > 1 << 20 {
                    let _ = w.write_all(buf.as_bytes());
                    buf.clear();
                }
            }
            let _ = w.write_all(buf.as_bytes());
        });
        assert_eq!(code, 0, "{err}");
        (out, rss)
    };
    let (_, text) = measure(false);
    let (out, json) = measure(true);
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(j["shops"].as_object().unwrap().len(), SHOPS as usize);
    assert_eq!(j["totals"]["attempts"], SHOPS);
    eprintln!(
        "replay max RSS for {SHOPS} shops: text {text} kB, --json {json} kB ({} kB of output)",
        out.len() / 1024
    );
    assert!(
        json < text + SHOPS as u64,
        "--json took {json} kB, the text {text} kB: {} bytes more per shop",
        (json - text.min(json)) * 1024 / SHOPS as u64
    );
}

/// `replay --json` prints one compact line with every object's keys in order (as a
/// `serde_json::Value` prints it: what it printed when it was built as one), and the
/// first scenario's `shops`, `totals` and `windows` again at the top; shop IDs are
/// escaped as `limiter status` shows them.
#[test]
fn replay_json_is_compact_with_sorted_keys_and_the_first_scenario_on_top() {
    let mut lines = sale();
    // In the event's JSON: a backslash, a tab and a BEL.
    lines.push(call(DAY + 2_000, "back\\\\slash\\there\u{7}"));
    lines.push(call(DAY + 2_001, "\u{e9}t\u{e9}"));
    // Enough calls in the 5-minute bucket (5/s) for the scan to find a window.
    for i in 0..2_000 {
        lines.push(call(DAY + 10_000 + i, "burst"));
    }
    lines.sort_by_key(|l| {
        l.split("\"timestamp\":")
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|t| t.parse::<i64>().ok())
            .unwrap_or(0)
    });
    let f = temp("shape.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (code, out, err) = run(
        &[
            "replay",
            &f,
            "--api",
            "payment",
            "--limits",
            "a:global=50/50 hot_shop=10/10",
            "--limits",
            "b:global=20/20",
            "--hot",
            "flood",
            "--provider",
            "30/30",
            "--max-wait",
            "0.1",
            "--fine-threshold",
            "20",
            "--json",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.ends_with("}\n") && out.lines().count() == 1, "{out}");
    let j: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(serde_json::to_string(&j).unwrap(), out.trim_end());
    let s = &j["scenarios"];
    assert_eq!(s.as_array().unwrap().len(), 2);
    assert_eq!(j["shops"], s[0]["shops"]);
    assert_eq!(j["totals"], s[0]["totals"]);
    assert_eq!(j["windows"], s[0]["windows"]);
    assert!(!j["windows"].as_array().unwrap().is_empty(), "{j}");
    assert_eq!(j["provider_429"], s[0]["totals"]["provider_429"]);
    assert_ne!(s[0]["shops"], s[1]["shops"]);
    assert_eq!(
        j["shops"]["back\\\\slash\\x09here\\x07"]["attempts"], 1,
        "{j}"
    );
    assert_eq!(j["shops"]["\u{e9}t\u{e9}"]["attempts"], 1, "{j}");
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(&j),
        [
            "api",
            "apis",
            "classes",
            "endpoints",
            "from_ms",
            "input",
            "limiter",
            "provider",
            "provider_429",
            "scenarios",
            "shops",
            "to_ms",
            "totals",
            "unrouted",
            "windows"
        ]
    );
    assert_eq!(j["api"], "payment");
    assert_eq!(j["apis"], serde_json::json!(["payment"]));
    assert_eq!(
        keys(&j["shops"]["flood"]["denied"]),
        ["endpoint", "global", "hot_lane", "hot_shop"]
    );
    // No endpoints, no classes: every attempt under "(none)", nothing unrouted.
    assert_eq!(
        j["endpoints"]["(none)"]["attempts"],
        j["totals"]["attempts"]
    );
    assert_eq!(j["classes"], s[0]["classes"]);
    assert_eq!(j["unrouted"], serde_json::json!({"apis": {}, "calls": 0}));
    assert_eq!(
        keys(&j["shops"]["flood"]),
        [
            "admitted",
            "attempts",
            "denied",
            "denied_in_flight",
            "denied_total",
            "hot",
            "peak_in_flight",
            "provider_429",
            "waited"
        ]
    );
    assert_eq!(
        keys(&j["totals"]["reservations"]),
        ["max_s", "p50_s", "p95_s", "waited"]
    );
}

/// Timestamps at the ends of i64 and around 0: `peaks` puts each event's second on the
/// row of its own day, at the time `scan` puts its window (the first and last seconds
/// clamped to the timestamps there are: a window of the last second ends at i64::MAX).
/// `sec * 1000` of the second of i64::MIN wrapped to the year 292278994 (a panic in a
/// debug build), and the text rows cut the time out of a date at byte 11.
#[test]
fn peaks_and_scan_agree_on_the_extreme_timestamps() {
    let stamps = [
        i64::MIN,
        i64::MIN + 999,
        -86_400_001,
        -5_000,
        0,
        2_000,
        DAY,
        i64::MAX - 2_500,
        i64::MAX,
    ];
    let lines: String = stamps.iter().map(|&t| call(t, "a") + "\n").collect();
    let (code, out, err) = run(&["peaks", "--json", "-"], Some(lines.as_bytes()));
    assert_eq!(code, 0, "{err}");
    let p: serde_json::Value = serde_json::from_str(&out).unwrap();
    let peaks: Vec<&serde_json::Value> = p["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["api"] == "(all)")
        .collect();
    let (code, out, err) = run(
        &[
            "scan",
            "--json",
            "--fine-threshold",
            "0.5",
            "--coarse-threshold",
            "0",
            "-",
        ],
        Some(lines.as_bytes()),
    );
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    let windows = s["windows"].as_array().unwrap();
    // One window per second with events (the first two are in adjacent seconds: one
    // window); one peak per day.
    let starts: Vec<&str> = windows
        .iter()
        .map(|w| w["start"].as_str().unwrap())
        .collect();
    assert_eq!(
        starts,
        [
            "-292275055-05-16 16:47:04.192",
            "1969-12-30 23:59:59.000",
            "1969-12-31 23:59:55.000",
            "1970-01-01 00:00:00.000",
            "1970-01-01 00:00:02.000",
            "2026-11-30 00:00:00.000",
            "292278994-08-17 07:12:53.000",
            "292278994-08-17 07:12:55.000",
        ],
        "{s}"
    );
    for w in windows {
        let (a, b) = (
            w["start_ms"].as_i64().unwrap(),
            w["end_ms"].as_i64().unwrap(),
        );
        assert!(a < b, "{w}");
        assert!(stamps.iter().any(|&t| a <= t && t <= b), "{w}");
    }
    assert_eq!(windows[0]["start_ms"], i64::MIN);
    assert_eq!(windows[0]["calls"], 2);
    assert_eq!(windows[7]["end_ms"], i64::MAX);
    let ats: Vec<(&str, &str)> = peaks
        .iter()
        .map(|r| (r["day"].as_str().unwrap(), r["at"].as_str().unwrap()))
        .collect();
    // Each day's peak is its one busiest second (the earliest of equals): a window's start.
    assert_eq!(
        ats,
        [
            ("-292275055-05-16", starts[0]),
            ("1969-12-30", starts[1]),
            ("1969-12-31", starts[2]),
            ("1970-01-01", starts[3]),
            ("2026-11-30", starts[5]),
            ("292278994-08-17", starts[6]),
        ],
        "{p}"
    );
    for (day, at) in &ats {
        assert!(at.starts_with(&format!("{day} ")), "{day} {at}");
    }
    // The text rows: the time of day of each peak on its day's row.
    let (code, out, err) = run(&["peaks", "-"], Some(lines.as_bytes()));
    assert_eq!(code, 0, "{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|f: &Vec<&str>| f.get(1) == Some(&"(all)"))
        .collect();
    for (day, at) in &ats {
        let clock = at.split_once(' ').unwrap().1;
        // day, api, peak/s, at, events
        assert!(
            rows.iter()
                .any(|f| f[0] == *day && f[3] == clock && f.len() == 5),
            "{day} {clock}: {out}"
        );
    }
    let (code, out, err) = run(
        &[
            "scan",
            "--fine-threshold",
            "0.5",
            "--coarse-threshold",
            "0",
            "-",
        ],
        Some(lines.as_bytes()),
    );
    assert_eq!(code, 0, "{err}");
    // start (date, time), end (date, time), secs, peak/s, peak at, ...
    let first: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        first[..7],
        [
            "-292275055-05-16",
            "16:47:04.192",
            "-292275055-05-16",
            "16:47:06.000",
            "1.8",
            "1.0",
            "16:47:04.192"
        ],
        "{out}"
    );
    // Fine buckets of 1 ms inside 5-minute ones: the candidates' bounds at both ends.
    let (code, out, err) = run(
        &[
            "scan",
            "--json",
            "--fine",
            "1ms",
            "--fine-threshold",
            "0.5",
            "--coarse-threshold",
            "0",
            "-",
        ],
        Some(lines.as_bytes()),
    );
    assert_eq!(code, 0, "{err}");
    let s: serde_json::Value = serde_json::from_str(&out).unwrap();
    let w = s["windows"].as_array().unwrap();
    assert_eq!(w.len(), stamps.len(), "{s}");
    assert_eq!(w[0]["start_ms"], i64::MIN);
    assert_eq!(w[w.len() - 1]["start_ms"], i64::MAX);
    assert_eq!(w[w.len() - 1]["end_ms"], i64::MAX);
    // A report over the first seconds there are.
    let dir = std::env::temp_dir().join(format!("cg-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let html = dir.join("min.html");
    let (code, _, err) = run(
        &[
            "report",
            "--window=-9223372036854775808..-9223372036854770000",
            "--fine-threshold",
            "0.5",
            "--coarse-threshold",
            "0",
            "-o",
            html.to_str().unwrap(),
            "-",
        ],
        Some(lines.as_bytes()),
    );
    assert_eq!(code, 0, "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("-292275055-05-16 16:47:04.192"), "{page}");
}

/// Times and durations typed on the command line that no i64 of milliseconds holds are
/// refused naming them (they overflowed: a panic in a debug build, a wrapped time else).
#[test]
fn times_and_durations_out_of_range_are_refused() {
    for (args, says) in [
        (
            vec!["scan", "--fine", "9223372036854775807s", "-"],
            "not a duration",
        ),
        (
            vec!["scan", "--coarse", "9999999999999999h", "-"],
            "not a duration",
        ),
        (
            vec!["scan", "--from", "99999999999999999-01-01T00:00:00Z", "-"],
            "not a time",
        ),
        (
            vec!["scan", "--to", "2026-01-01T-5:00:00Z", "-"],
            "not a time",
        ),
        (
            vec!["peaks", "--from", "2026-01-01T00:00:00.\u{e9}\u{e9}Z", "-"],
            "not a time",
        ),
    ] {
        let (code, _, err) = run(&args, Some(b""));
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
