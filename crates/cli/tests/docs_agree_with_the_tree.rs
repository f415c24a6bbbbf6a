//! What the docs state about the code, checked against the code: a figure or a list in a
//! doc that the tree can answer is read here and compared, so it cannot go stale silently.
//!
//! - the decision's key and argument counts (docs/module.md, README, the Valkey module's
//!   comments) against the contract table (`cmd::decide`);
//! - docs/architecture.md names every test file (`crates/*/tests/*.rs`, the PHPUnit
//!   suites' `*Test.php`);
//! - its table of the sleeps left in the PHP integration suite counts what the suite has;
//! - the README stays the front door: at most 250 lines, the reference in docs/.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use checkout_guard_model::cmd::decide;

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
        "the contract (cmd::decide) has {keys} keys and {args} arguments; stale: {wrong:#?}"
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

/// The paths `text` names in code spans, a `{a,b}` group expanded (`x/{a,b}.rs` is
/// `x/a.rs` and `x/b.rs`).
fn named_paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        match (span.find('{'), span.find('}')) {
            (Some(a), Some(b)) if a < b => {
                for alt in span[a + 1..b].split(',') {
                    out.push(format!("{}{}{}", &span[..a], alt.trim(), &span[b + 1..]));
                }
            }
            _ => out.push(span.to_string()),
        }
    }
    out
}

/// Every test file of the tree: each crate's `tests/*.rs` (its helper modules are folders)
/// and each PHPUnit suite's `*Test.php`.
fn test_files() -> Vec<String> {
    let mut all = Vec::new();
    for krate in fs::read_dir(root().join("crates")).unwrap() {
        let name = krate.unwrap().file_name().to_string_lossy().into_owned();
        if root().join("crates").join(&name).join("tests").is_dir() {
            all.extend(files(&format!("crates/{name}/tests"), ".rs"));
        }
    }
    for suite in fs::read_dir(root().join("tests/php")).unwrap() {
        let suite = suite.unwrap();
        let name = suite.file_name().to_string_lossy().into_owned();
        if suite.path().is_dir() {
            all.extend(files(&format!("tests/php/{name}"), "Test.php"));
        }
    }
    all.sort();
    all
}

#[test]
fn architecture_md_names_every_test_file() {
    let doc = read("docs/architecture.md");
    let named = named_paths(&doc);
    let all = test_files();
    assert!(
        all.iter()
            .any(|f| f.ends_with("docs_agree_with_the_tree.rs"))
            && all.iter().any(|f| f.starts_with("tests/php/integration/")),
        "the listing finds the test files: {all:?}"
    );
    let missing: Vec<_> = all.iter().filter(|f| !named.contains(f)).collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md (\"Where to test what\") does not name: {missing:#?}"
    );
    let gone: Vec<_> = named
        .iter()
        .filter(|n| {
            (n.contains("/tests/") || n.starts_with("tests/php/")) && n.ends_with(".rs")
                || n.ends_with("Test.php")
        })
        .filter(|n| n.contains('/') && !root().join(n).exists())
        .collect();
    assert!(
        gone.is_empty(),
        "docs/architecture.md names test files that do not exist: {gone:#?}"
    );
}

/// The calls of `sleep`/`usleep` in `php`'s code: not in a `//` comment or a doc block.
fn sleeps(php: &str) -> usize {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    php.lines()
        .filter(|l| !l.trim_start().starts_with('*') && !l.trim_start().starts_with('#'))
        .map(|line| {
            let code = match line.find("//") {
                Some(i) if !line[..i].ends_with(':') => &line[..i],
                _ => line,
            };
            let b = code.as_bytes();
            code.match_indices("sleep(")
                .filter(|(i, _)| {
                    let start = if *i > 0 && b[i - 1] == b'u' {
                        i - 1
                    } else {
                        *i
                    };
                    start == 0 || !ident(b[start - 1])
                })
                .count()
        })
        .sum()
}

#[test]
fn the_sleeps_table_counts_the_php_integration_suites_sleeps() {
    let doc = read("docs/architecture.md");
    let start = doc.find("### Sleeps that remain").expect("the section");
    let section = &doc[start..];
    let section = &section[..section[4..].find("\n## ").map_or(section.len(), |i| i + 4)];
    let mut table = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<_> = row.split('|').map(str::trim).collect();
        let file = cells[1].trim_matches('`').to_string();
        let n: usize = cells[2]
            .parse()
            .unwrap_or_else(|_| panic!("a count: {row}"));
        table.insert(file, n);
    }
    let suite = files("tests/php/integration", ".php");
    let mut counted = BTreeMap::new();
    for path in &suite {
        let n = sleeps(&read(path));
        if n > 0 {
            counted.insert(path.rsplit('/').next().unwrap().to_string(), n);
        }
    }
    assert_eq!(
        table, counted,
        "docs/architecture.md's sleeps, per file, against the suite"
    );
    let total: usize = counted.values().sum();
    let stated = format!(
        "**{total} sleeps in {} of the {} files**",
        counted.len(),
        suite.len()
    );
    assert!(section.contains(&stated), "the section states {stated}");
}

#[test]
fn the_sleep_counter_counts_calls_not_comments() {
    let php = "usleep(1);\n        sleep(30); // usleep(2)\n * usleep(3)\n// sleep(4)\n$this->sleepy(5); nanosleep(6); $url = 'a://b'; usleep(7);";
    assert_eq!(sleeps(php), 3);
    let named = named_paths("`a/{x,y}.rs` and `b/z.php`");
    assert_eq!(named, ["a/x.rs", "a/y.rs", "b/z.php"]);
}

#[test]
fn the_readme_stays_the_front_door() {
    let lines = read("README.md").lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines: move reference parts into docs/ (at most 250)"
    );
}
