//! The store a limiter decides against, behind a small trait: [`ValkeyStore`] (the
//! process's pooled connection to Valkey, what the extension uses) or, with the
//! `test-support` feature, `MemoryStore` (the reference model on an in-memory key space
//! whose server clock follows the test's `FakeClock`, with faults the test controls). The
//! limiter's whole acquire path (local denials, the three tries, reloading live limits,
//! the policy when the store fails) runs unchanged against either.

mod engine;
#[cfg(feature = "test-support")]
mod memory;
mod native;
mod pool;
mod valkey;

pub use engine::{last_engine, thread_last_engine, MODULE_RECHECK};
#[cfg(feature = "test-support")]
pub use memory::{Fault, MemoryStats, MemoryStore};
pub use pool::{ping, pipeline, status, with_connection, Pool, Replies};

pub use valkey::ValkeyStore;

use std::fmt;
use std::time::{Duration, SystemTime};

use checkout_guard_config::live::Stored;
use checkout_guard_model::cmd::release::ReleaseCall;
use checkout_guard_model::{DecideCall, FeedbackCall, Keys};

/// Why a call to the store did not happen or did not succeed. Messages carry no password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A recent failure; Valkey is left alone for `retry_in`.
    #[error("not retrying for {} ms after: {cause}", retry_in.as_millis())]
    Backoff { retry_in: Duration, cause: String },
    /// The call failed now (connect, timeout, broken connection, or an error reply).
    #[error("{cause}")]
    Failed { cause: String, retry_in: Duration },
}

/// How the cause of a failure after the command was sent begins: Valkey may have run it.
pub const OUTCOME_UNKNOWN: &str = "outcome unknown: ";

impl StoreError {
    /// The call was sent and no reply came back (lost, cut, unreadable, too late): Valkey
    /// may have run it. Not said of a call never sent (a back-off, a refused connection)
    /// nor of an error reply (Valkey answered: it did nothing).
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, StoreError::Failed { cause, .. } if cause.starts_with(OUTCOME_UNKNOWN))
    }

    /// How long until the next attempt will be made.
    pub fn retry_in(&self) -> Duration {
        match self {
            StoreError::Backoff { retry_in, .. } | StoreError::Failed { retry_in, .. } => *retry_in,
        }
    }
}

/// What a readiness check needs to know about the process's connection to one endpoint,
/// read without any I/O or after one PING over the pooled connection.
#[derive(Debug, Clone, PartialEq)]
pub struct Health {
    /// The last call (or this PING) succeeded and no back-off is running.
    pub ok: bool,
    /// A connection is open in this process (and belongs to it, not to a parent).
    pub connected: bool,
    /// After a failure, calls fail at once without touching Valkey for `retry_in`.
    pub circuit_open: bool,
    pub retry_in: Duration,
    pub last_error: Option<String>,
    pub consecutive_failures: u32,
    pub connects: u64,
    /// Round trip of the last PING, and when it was sent.
    pub last_ping: Option<(Duration, SystemTime)>,
    /// Which engine made this process's last decision on the endpoint: "module" (the
    /// native `CG.DECIDE`), "lua" (the script), or none yet.
    pub engine: Option<&'static str>,
    /// Whether this process's recent decisions could be made (for the limiter's engine
    /// setting): kept apart from the connection's state, which a PING can clear.
    pub decisions: Decisions,
    /// For a Sentinel endpoint, the primary (`host:port`) the open connection was opened
    /// to, as the sentinels named it.
    pub primary: Option<String>,
}

/// What [`Store::read_adapt`] read: the two values (empty: missing) and the store's now.
pub type AdaptRead = (Vec<u8>, Vec<u8>, i64);

/// Failed decisions in a row at or above which [`Decisions::failing`] says so.
pub const FAILING_AFTER: u32 = 3;

/// The outcomes of this process's decisions on one endpoint with one engine setting: a
/// decision that got no answer from the engine (connection down, error reply such as OOM
/// or an unknown `CG.DECIDE`, the back-off) is a failed one, whatever a PING says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    /// When a decision last succeeded.
    pub last_ok_at: Option<SystemTime>,
    /// The last failed decision's error and when it happened; kept until a decision
    /// succeeds.
    pub last_error: Option<(String, SystemTime)>,
    /// Decisions that failed since the last that succeeded.
    pub failed_in_row: u32,
}

impl Decisions {
    /// The last [`FAILING_AFTER`] decisions all failed.
    pub fn failing(&self) -> bool {
        self.failed_in_row >= FAILING_AFTER
    }

    /// Records one decision's outcome at wall-clock time `at`.
    pub fn record_at<T>(&mut self, outcome: &Result<T, StoreError>, at: SystemTime) {
        match outcome {
            Ok(_) => {
                self.last_ok_at = Some(at);
                self.last_error = None;
                self.failed_in_row = 0;
            }
            Err(e) => {
                self.last_error = Some((e.to_string(), at));
                self.failed_in_row = self.failed_in_row.saturating_add(1);
            }
        }
    }
}

/// What a limiter asks of its store. Every method is one round trip at most.
pub trait Store: Send + Sync + fmt::Debug {
    /// One decision: the decision script with `call`'s KEYS and ARGV, on the store's
    /// clock; the raw integers of its reply (read with [`DecideCall::decode_reply`]).
    fn decide(&self, call: &DecideCall<'_>) -> Result<Vec<i64>, StoreError>;
    /// One throttling answer of the provider: the feedback script (a write) with `call`'s
    /// KEYS and ARGV, on the store's clock; the raw integers of its reply (read with
    /// [`FeedbackCall::decode_reply`]).
    fn feedback(&self, call: &FeedbackCall<'_>) -> Result<Vec<i64>, StoreError>;
    /// The end of an in-flight lease: the release script (or the module's `CG.RELEASE`)
    /// with `call`'s KEYS and ARGV, on the store's clock; the raw integers of its reply
    /// (read with [`ReleaseCall::decode_reply`]).
    fn release(&self, call: &ReleaseCall<'_>) -> Result<Vec<i64>, StoreError>;
    /// The adaptive budget's state (`adapt_key`) and last throttling answer (`last_key`),
    /// empty when missing, and the store's clock (µs), read together (for `health()`).
    fn read_adapt(&self, adapt_key: &[u8], last_key: &[u8]) -> Result<AdaptRead, StoreError>;
    /// The live limits' version and hash, read together.
    fn read_limits(&self, keys: &Keys) -> Result<Stored, StoreError>;
    /// Marks a shop hot (`key` = its hot flag) for `ttl_seconds`.
    fn mark_hot(&self, key: &[u8], ttl_seconds: i64) -> Result<(), StoreError>;
    /// Removes a hot flag.
    fn unmark_hot(&self, key: &[u8]) -> Result<(), StoreError>;
    fn exists(&self, key: &[u8]) -> Result<bool, StoreError>;
    /// Removes every key matching `pattern` (a prefix followed by `*`), in steps routed
    /// by `routing_key`.
    fn reset(&self, routing_key: &[u8], pattern: &[u8]) -> Result<(), StoreError>;
    /// The connection's state; with `ping`, after one PING (or, on a cluster, an EXISTS
    /// of `cluster_key`, so only the node the limiter needs is asked).
    fn health(&self, ping: bool, cluster_key: &[u8]) -> Health;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;

    /// Failing takes FAILING_AFTER failures in a row; one success ends it and clears the
    /// error; a failure keeps the time of the last success.
    #[test]
    fn decisions_fail_after_three_in_a_row_and_one_success_ends_it() {
        let failed: Result<(), StoreError> = Err(StoreError::Failed {
            cause: "OOM".into(),
            retry_in: Duration::ZERO,
        });
        let clock = crate::clock::FakeClock::new();
        let mut d = Decisions::default();
        d.record_at(&Ok::<(), StoreError>(()), clock.wall());
        let ok_at = d.last_ok_at;
        assert_eq!(ok_at, Some(clock.wall()));
        for n in 1..FAILING_AFTER {
            clock.advance(Duration::from_secs(1));
            d.record_at(&failed, clock.wall());
            assert_eq!(d.last_error.as_ref().map(|e| e.1), Some(clock.wall()));
            assert_eq!(d.failed_in_row, n);
            assert!(!d.failing());
        }
        d.record_at(&failed, clock.wall());
        assert!(d.failing());
        assert_eq!(d.last_error.as_ref().map(|(e, _)| e.as_str()), Some("OOM"));
        assert_eq!(d.last_ok_at, ok_at);
        d.record_at(&Ok::<(), StoreError>(()), clock.wall());
        assert!(!d.failing());
        assert_eq!((d.failed_in_row, d.last_error.is_none()), (0, true));
    }
}
