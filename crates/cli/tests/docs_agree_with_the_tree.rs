//! What the docs state about the code, checked against the code: a figure or a list in a
//! doc that the tree can answer is read here and compared, so it cannot go stale silently.
//!
//! - the decision's key and argument counts (docs/module.md, README, the Valkey module's
//!   comments) against the contract table (`contract::decide`).

use std::fs;
use std::path::{Path, PathBuf};

use checkout_guard_model::contract::decide;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn read(rel: &str) -> String {
    fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The files under `dir` (relative to the root) whose name ends with `ext`, sorted.
fn files(dir: &str, ext: &str) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(root().join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(ext))
        .map(|n| format!("{dir}/{n}"))
        .collect();
    out.sort();
    out
}

/// Lower-case words and numbers of `text`, with the line each is on.
fn words(text: &str) -> Vec<(usize, String)> {
    text.lines()
        .enumerate()
        .flat_map(|(i, line)| {
            line.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(move |w| (i + 1, w.to_lowercase()))
        })
        .collect()
}

/// Every count of the decision's keys and arguments `text` states, as (line, what it
/// says, keys, arguments): "8 keys and 19 arguments", "<8 keys> <19 arguments>", "8 KEYS,
/// 19 ARGV", and "positions 1 to 8" (the keys' positions: arguments `None`).
fn stated_counts(text: &str) -> Vec<(usize, String, usize, Option<usize>)> {
    let w = words(text);
    let num = |i: usize| w.get(i).and_then(|(_, s)| s.parse::<usize>().ok());
    let is = |i: usize, s: &[&str]| w.get(i).is_some_and(|(_, x)| s.contains(&x.as_str()));
    let mut found = Vec::new();
    for (i, (line, _)) in w.iter().enumerate() {
        let line = *line;
        let (Some(n), true) = (num(i), is(i + 1, &["keys"])) else {
            if is(i, &["positions"]) && num(i + 1) == Some(1) && is(i + 2, &["to"]) {
                if let Some(n) = num(i + 3) {
                    found.push((line, format!("positions 1 to {n}"), n, None));
                }
            }
            continue;
        };
        let j = if is(i + 2, &["and"]) { i + 3 } else { i + 2 };
        if let (Some(m), true) = (num(j), is(j + 1, &["arguments", "argv"])) {
            found.push((line, format!("{n} keys, {m} arguments"), n, Some(m)));
        }
    }
    found
}

#[test]
fn the_decisions_key_and_argument_counts_are_the_contract_tables() {
    let (keys, args) = (decide::keys::LEN, decide::args::LEN);
    let mut sources = vec!["README.md".to_string()];
    sources.extend(files("docs", ".md"));
    sources.extend(files("crates/valkey-module/src", ".rs"));
    let mut wrong = Vec::new();
    let mut in_module_md = 0;
    for file in &sources {
        for (line, said, n, m) in stated_counts(&read(file)) {
            if file == "docs/module.md" {
                in_module_md += 1;
            }
            if n != keys || m.is_some_and(|m| m != args) {
                wrong.push(format!("{file}:{line}: {said}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "the contract (contract::decide) has {keys} keys and {args} arguments; stale: {wrong:#?}"
    );
    assert!(
        in_module_md >= 2,
        "docs/module.md states the counts and the keys' positions"
    );
}

#[test]
fn the_count_reader_finds_what_it_looks_for() {
    let found = stated_counts(
        "the 7 keys and 17 arguments, `CG.DECIDE <8 keys> <19 arguments>`, 7 KEYS, 17 ARGV;\n\
         positions 1 to 7; 16 arguments; 3 keys of",
    );
    let got: Vec<_> = found.iter().map(|f| (f.0, f.2, f.3)).collect();
    assert_eq!(
        got,
        [
            (1, 7, Some(17)),
            (1, 8, Some(19)),
            (1, 7, Some(17)),
            (2, 7, None)
        ]
    );
}
