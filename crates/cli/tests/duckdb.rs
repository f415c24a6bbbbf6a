//! The same two-stage scan as SQL (sql/scan.sql), run by DuckDB straight over the JSONL
//! file, finds the same windows as the CLI, and the daily peaks agree.

use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");

fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn python() -> std::path::PathBuf {
    let p = root().join(".venv/bin/python");
    assert!(
        p.exists(),
        "no .venv: run scripts/setup.sh (installs DuckDB from PyPI)"
    );
    p
}

fn json(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (start_ms, end_ms, calls) of each window, from either tool's JSON.
fn windows(rows: &serde_json::Value) -> Vec<(i64, i64, u64)> {
    rows.as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["start_ms"].as_i64().unwrap(),
                w["end_ms"].as_i64().unwrap(),
                w["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn duckdb_runs_the_same_scan_and_peaks() {
    let file = std::env::temp_dir().join(format!("cg-duck-{}.jsonl", std::process::id()));
    let file = file.to_str().unwrap();
    let gen = Command::new(BIN)
        .args(["generate", "--events", "300000", "--seed", "7", "-o", file])
        .output()
        .unwrap();
    assert!(gen.status.success());
    for (fine, coarse) in [("40", "0.2"), ("40", "3"), ("80", "1")] {
        let cli = json(Command::new(BIN).args([
            "scan",
            "--json",
            "--fine-threshold",
            fine,
            "--coarse-threshold",
            coarse,
            file,
        ]));
        let sql = json(
            Command::new(python())
                .arg(root().join("sql/duckdb_scan.py"))
                .args([
                    "scan",
                    file,
                    "--fine-threshold",
                    fine,
                    "--coarse-threshold",
                    coarse,
                ]),
        );
        let (a, b) = (windows(&cli["windows"]), windows(&sql["rows"]));
        assert!(!a.is_empty(), "the generated day has spikes at {fine}/s");
        assert_eq!(a, b, "fine {fine}, coarse {coarse}");
    }
    let cli = json(Command::new(BIN).args(["peaks", "--json", file]));
    let sql = json(
        Command::new(python())
            .arg(root().join("sql/duckdb_scan.py"))
            .args(["peaks", file]),
    );
    let a: Vec<(String, u64)> = cli["peaks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["api"].as_str().unwrap().replace("(all)", ""),
                p["peak_rps"].as_u64().unwrap(),
            )
        })
        .collect();
    let b: Vec<(String, u64)> = sql["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["api"].as_str().unwrap().to_string(),
                p["peak_rps"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(a, b);
    std::fs::remove_file(file).unwrap();
}
