//! The live counters of one limiter, in this process (`metrics`): what a decision that
//! threw is counted as in shadow mode, and the adaptive share's gauge after `feedback()`
//! (before any decision in Valkey: a flood answered by local denials shows it too). On
//! `MemoryStore` (a process table: made privately, this binary forks nothing).

use std::time::Duration;

use checkout_guard_config::Value;
use checkout_guard_runtime::metrics;
use checkout_guard_runtime::store::Fault;

#[allow(dead_code)]
mod memory_limiter;

use memory_limiter::{limiter, shadow, store};

fn value(text: &str, sample: &str) -> Option<String> {
    text.lines().find_map(|l| {
        l.strip_prefix(sample)?
            .strip_prefix(' ')
            .map(str::to_string)
    })
}

#[test]
fn a_shadow_limiter_that_throws_counts_the_call_under_shadow() {
    let s = store();
    let l = limiter("mt-shadow-throw", &s, "throw", false, shadow());
    s.inject(Fault::Timeout {
        retry_in: Duration::from_millis(100),
    });
    assert!(
        l.acquire(b"a", 1).is_err(),
        "on_unavailable=throw throws in shadow mode too"
    );
    let text = metrics::render(false);
    assert_eq!(
        value(&text, "checkout_guard_decisions_total{limiter=\"mt-shadow-throw\",outcome=\"denied\",reason=\"unavailable\",mode=\"shadow\"}").as_deref(),
        Some("1"),
        "{text}"
    );
    assert!(!text.contains("limiter=\"mt-shadow-throw\",outcome=\"denied\",reason=\"unavailable\",mode=\"enforce\""), "{text}");
}

#[test]
fn feedback_moves_the_adaptive_share_gauge_before_any_decision() {
    let s = store();
    let l = limiter(
        "mt-adapt",
        &s,
        "deny",
        true,
        vec![("adaptive".into(), Value::Bool(true))],
    );
    l.feedback(b"a", 429, None).unwrap();
    let text = metrics::render(false);
    let share: f64 = value(&text, "checkout_guard_adaptive_share{limiter=\"mt-adapt\"}")
        .unwrap_or_else(|| panic!("no gauge after feedback():\n{text}"))
        .parse()
        .unwrap();
    assert!(share < 1.0, "a 429 lowered the share: {share}\n{text}");
    assert_eq!(
        value(
            &text,
            "checkout_guard_provider_throttled_total{limiter=\"mt-adapt\"}"
        )
        .as_deref(),
        Some("1")
    );
}
