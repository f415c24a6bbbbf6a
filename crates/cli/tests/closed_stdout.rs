//! A reader that closes stdout early (`checkout-guard peaks FILE | head -1`): every command
//! that prints much ends quietly with status 141 (as a process ended by SIGPIPE), no panic
//! ("failed printing to stdout: Broken pipe") and no message. Each output is far larger
//! than a pipe's buffer (64 KiB), so the command is still writing when the reader goes.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
const DAY_MS: i64 = 86_400_000;

/// Runs `args`, reads the first bytes of its stdout, closes it, and waits (at most 60 s)
/// for the exit status and stderr.
fn closed_early(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 100];
    stdout.read_exact(&mut first).unwrap();
    drop(stdout);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{args:?} still running 60 s after its stdout closed");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.code(), stderr)
}

/// One `api` call on each of `days` days, and `shops` calls of `pay` by as many shops.
fn events(dir: &std::path::Path, days: i64, shops: i64) -> String {
    let path = dir.join("events.jsonl");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let start = 1_500_000_000_000 - 1_500_000_000_000 % DAY_MS;
    for d in 0..days {
        let api = ["zoneA", "zoneB", "zoneC"][(d % 3) as usize];
        writeln!(
            f,
            r#"{{"eventType":"ExternalApiCall","timestamp":{},"api":"{api}","http.response.status_code":200,"shop.id":"s"}}"#,
            start + d * DAY_MS
        )
        .unwrap();
    }
    let last = start + days * DAY_MS;
    for i in 0..shops {
        writeln!(
            f,
            r#"{{"eventType":"ExternalApiCall","timestamp":{},"api":"pay","http.response.status_code":200,"shop.id":"shop-{i}"}}"#,
            last + i * 10
        )
        .unwrap();
    }
    f.flush().unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn every_command_ends_quietly_when_stdout_closes_early() {
    let dir = std::env::temp_dir().join(format!("cg-closed-stdout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = events(&dir, 3000, 20_000);
    let low = ["--fine-threshold", "0.5", "--coarse-threshold", "0.001"];
    let cases: Vec<Vec<&str>> = vec![
        vec!["peaks", &file],
        vec!["peaks", "--csv", &file],
        vec!["peaks", "--json", &file],
        [&["scan"][..], &low, &[file.as_str()]].concat(),
        [&["scan", "--csv"][..], &low, &[file.as_str()]].concat(),
        [&["scan", "--json"][..], &low, &[file.as_str()]].concat(),
        vec!["generate", "--events", "200000", "-o", "-"],
        vec!["replay", "--api", "pay", "--json", &file],
        vec![
            "replay",
            "--api",
            "pay",
            "--limits",
            "global=10/5",
            "--json",
            &file,
        ],
    ];
    for args in &cases {
        let (code, stderr) = closed_early(args);
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
        assert_eq!(code, Some(141), "{args:?}: {stderr}");
    }
    // Read to the end, the same commands succeed (the status is the closed pipe's only).
    let out = Command::new(BIN).args(["peaks", &file]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.len() > 64 * 1024, "{} bytes", out.stdout.len());
    let _ = std::fs::remove_dir_all(&dir);
}
