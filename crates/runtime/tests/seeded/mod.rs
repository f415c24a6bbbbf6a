//! The random tests' seed, printed and replayable: proptest's RNG seeded from
//! `CG_MODEL_SEED` when it is set (a failure's message names the seed to set), else from
//! the time (printed before the run). `PROPTEST_CASES` changes the number of cases.
//!
//! Replay a failure: `CG_MODEL_SEED=<seed> cargo test -p checkout-guard-runtime --test
//! <file> <test>`; proptest then generates the same cases and shrinks to the same
//! shortest sequence.

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngSeed, TestError, TestRunner};

/// The seed of this run.
pub fn seed() -> u64 {
    std::env::var("CG_MODEL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// Runs `test` on `cases` values of `strategy` (or `PROPTEST_CASES`) from the seed; a
/// failure panics with the seed, the shrunk value and its failure.
pub fn run<S: Strategy>(
    what: &str,
    cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), String>,
) where
    S::Value: std::fmt::Debug,
{
    let seed = seed();
    println!("{what}: seed {seed} (CG_MODEL_SEED={seed} repeats it)");
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(cases);
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    match runner.run(&strategy, |v| {
        test(v).map_err(proptest::test_runner::TestCaseError::fail)
    }) {
        Ok(()) => {}
        Err(TestError::Fail(why, shrunk)) => panic!(
            "{what}: seed {seed} (CG_MODEL_SEED={seed} repeats it): {why}\nshrunk to: {shrunk:#?}"
        ),
        Err(TestError::Abort(why)) => panic!("{what}: seed {seed}: aborted: {why}"),
    }
}
