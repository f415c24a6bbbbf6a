//! Rate-limited warnings for a worker that fails open: a Valkey it cannot reach (decisions
//! follow `on_unavailable`), a telemetry sink that cannot write. Without them those show
//! only in `health()`, `Telemetry::stats()` and readiness; with a line per request they
//! would flood the log. So each (kind, cause) is said at most once per [`INTERVAL`] in a
//! process: the first time it happens, then again only if it still happens a minute later.
//!
//! The lines go to the writer the extension sets ([`set_writer`]: PHP's error log, which
//! reaches php-fpm's or the web server's log), stderr until then. The table is the
//! process's: a forked child starts with an empty one (it has not said anything yet).

use std::time::Duration;

use once_cell::sync::{Lazy, OnceCell};
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};

use crate::sync::Mutex;

/// The least time between two lines of one (kind, cause).
pub const INTERVAL: Duration = Duration::from_secs(60);

/// The table keeps at most this many (kind, cause) pairs; past it, pairs said more than
/// [`INTERVAL`] ago are forgotten, and a new pair is not said while none can be.
const MAX_KEYS: usize = 256;

/// When each (kind, cause) was last said, on a monotonic clock in ns.
pub struct WarnLog {
    interval_ns: u64,
    state: Mutex<Table>,
}

struct Table {
    generation: u64,
    last: FxHashMap<u64, u64>,
}

impl WarnLog {
    pub fn new(interval: Duration) -> Self {
        WarnLog {
            interval_ns: interval.as_nanos() as u64,
            state: Mutex::new(Table {
                generation: crate::process::generation(),
                last: FxHashMap::default(),
            }),
        }
    }

    /// Whether a line for (`kind`, `cause`) is due at `now_ns` (none said in the last
    /// interval); if so, it counts as said now. `cause` is compared with its digits left
    /// out, so "3 of 5 events written" and "retry in 950 ms" are one cause, and by its
    /// first [`CAUSE_BYTES`] bytes, without a refused command's arguments.
    pub fn due(&self, kind: &[&str], cause: &str, now_ns: u64) -> bool {
        let key = key(kind, cause);
        let generation = crate::process::generation();
        let mut t = self.state.lock();
        if t.generation != generation {
            // A forked child: what its parent said is not said in this process.
            t.generation = generation;
            t.last.clear();
        }
        if let Some(&last) = t.last.get(&key) {
            if now_ns.saturating_sub(last) < self.interval_ns {
                return false;
            }
        } else if t.last.len() >= MAX_KEYS {
            let interval = self.interval_ns;
            t.last
                .retain(|_, &mut last| now_ns.saturating_sub(last) < interval);
            if t.last.len() >= MAX_KEYS {
                return false;
            }
        }
        t.last.insert(key, now_ns);
        true
    }
}

/// How many bytes of a cause (digits left out) tell it apart: an error reply may go on
/// with the command's arguments (keys naming the shop), which must not make every shop a
/// cause of its own.
const CAUSE_BYTES: usize = 64;

fn key(kind: &[&str], cause: &str) -> u64 {
    let mut h = FxHasher::default();
    kind.hash(&mut h);
    // redis-rs ends a refused command's error with its arguments.
    let cause = cause
        .split_once(" with args beginning with")
        .map_or(cause, |(c, _)| c);
    for b in cause
        .bytes()
        .filter(|b| !b.is_ascii_digit())
        .take(CAUSE_BYTES)
    {
        b.hash(&mut h);
    }
    h.finish()
}

static LOG: Lazy<WarnLog> = Lazy::new(|| WarnLog::new(INTERVAL));
static WRITER: OnceCell<fn(&str)> = OnceCell::new();

/// Where the lines go (the extension: PHP's error log). Set once; later calls are ignored.
pub fn set_writer(writer: fn(&str)) {
    let _ = WRITER.set(writer);
}

/// Writes one line to the writer (stderr until one is set), unconditionally: for a caller
/// that rate-limits its lines itself (`telemetry::agent_cap`: once a minute across the
/// workers sharing a table).
pub fn write(line: &str) {
    match WRITER.get() {
        Some(write) => write(line),
        None => eprintln!("{line}"),
    }
}

/// Says `message()` (built only then) when (`kind`, its parts, and `cause`) was not said in the last
/// [`INTERVAL`] of `now_ns` (a monotonic clock in ns). Returns whether it was said.
pub fn warn(kind: &[&str], cause: &str, now_ns: u64, message: impl FnOnce() -> String) -> bool {
    if !LOG.due(kind, cause, now_ns) {
        return false;
    }
    write(&message());
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    const SECOND: u64 = 1_000_000_000;

    #[test]
    fn once_a_minute_per_kind_and_cause() {
        let clock = FakeClock::new();
        let log = WarnLog::new(INTERVAL);
        let t0 = clock.monotonic_ns();
        assert!(log.due(&["valkey", "payments"], "connection refused", t0));
        // Every later call within the minute: not said again.
        for i in 1..=59 {
            clock.advance(Duration::from_secs(1));
            assert!(
                !log.due(
                    &["valkey", "payments"],
                    "connection refused",
                    clock.monotonic_ns()
                ),
                "{i} s later"
            );
        }
        // Another cause, another kind: said at once.
        assert!(log.due(&["valkey", "payments"], "timed out", clock.monotonic_ns()));
        assert!(log.due(
            &["valkey", "orders"],
            "connection refused",
            clock.monotonic_ns()
        ));
        // A minute after it was said: said again, once.
        clock.advance(Duration::from_secs(1));
        let t60 = clock.monotonic_ns();
        assert_eq!(t60 - t0, 60 * SECOND);
        assert!(log.due(&["valkey", "payments"], "connection refused", t60));
        assert!(!log.due(&["valkey", "payments"], "connection refused", t60 + SECOND));
    }

    #[test]
    fn digits_do_not_make_a_new_cause() {
        let log = WarnLog::new(INTERVAL);
        assert!(log.due(
            &["sink", "jsonl"],
            "write /x: 3 of 5 events written",
            SECOND
        ));
        assert!(!log.due(
            &["sink", "jsonl"],
            "write /x: 1 of 9 events written",
            2 * SECOND
        ));
    }

    #[test]
    fn a_command_s_arguments_do_not_make_a_new_cause() {
        let log = WarnLog::new(INTERVAL);
        let cause = |shop: &str| {
            format!(
                "engine = module, but the checkout_guard module is not loaded in Valkey \
                 (ResponseError: unknown command 'CG.DECIDE', with args beginning with: \
                 '{{cg:x}}:b:shop:{shop}' )"
            )
        };
        assert!(log.due(&["valkey", "x"], &cause("shop-a"), SECOND));
        assert!(!log.due(&["valkey", "x"], &cause("shop-b"), SECOND));
        let long = |tail: &str| format!("{}{tail}", "e".repeat(CAUSE_BYTES));
        assert!(log.due(&["valkey", "x"], &long("a"), SECOND));
        assert!(!log.due(&["valkey", "x"], &long("b"), SECOND));
    }

    #[test]
    fn a_full_table_forgets_old_pairs_and_never_floods() {
        let log = WarnLog::new(INTERVAL);
        for i in 0..MAX_KEYS {
            assert!(log.due(&["k", &i.to_string()], "cause", SECOND));
        }
        // Full of pairs said within the minute: a new one waits.
        assert!(!log.due(&["k"], "new", 2 * SECOND));
        // A minute on, the old ones are forgotten and the new one is said.
        assert!(log.due(&["k"], "new", 62 * SECOND));
    }
}
