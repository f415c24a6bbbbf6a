//! One call on a kept connection: opened when there is none, its per-command timeout
//! from the call's budget, and replaced once when it turns out broken.

use std::time::{Duration, Instant};

use redis::{RedisError, RedisResult};

use crate::connection::Connection;
use crate::errors::{is_demoted, is_readonly, is_reply_error};

/// One call's time: `timeout` from when the call started.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub timeout: Duration,
    pub deadline: Instant,
}

impl Budget {
    pub fn starting_now(timeout: Duration) -> Self {
        Self {
            timeout,
            deadline: Instant::now() + timeout,
        }
    }

    /// What is left of it.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

/// Why a call failed.
#[derive(Debug)]
pub enum Failure {
    /// The deadline passed before a connection could be opened (after the one that broke).
    NoTimeLeft,
    /// No connection could be opened (connect, handshake, slot map).
    Open(RedisError),
    /// The per-command timeout could not be set on the socket; the connection was dropped.
    Socket(RedisError),
    /// Valkey answered with an error: the connection is in step and was kept.
    Reply(RedisError),
    /// The connection broke or timed out before a command was written in full (the server
    /// never ran it), or on a connection this call opened; it was dropped.
    Broken(RedisError),
    /// The connection broke, timed out or answered what could not be read after a command
    /// was written in full and before its reply was read: the server may have run it. It
    /// was dropped, and the command not sent again.
    Unknown(RedisError),
}

impl Failure {
    /// The error behind it (a timeout's for [`Failure::NoTimeLeft`]).
    pub fn into_error(self) -> RedisError {
        match self {
            Failure::NoTimeLeft => crate::errors::timed_out(),
            Failure::Open(e)
            | Failure::Socket(e)
            | Failure::Reply(e)
            | Failure::Broken(e)
            | Failure::Unknown(e) => e,
        }
    }
}

/// Runs `op` on the connection kept in `kept` (anything holding a [`Connection`], with
/// what its owner keeps beside it), opening one with `open` (given what is left of the
/// budget) when there is none.
///
/// The command timeout: a connection opened by this call gets what is left of the budget
/// (at least 1 ms), one already open the whole timeout (as on its last call: no syscall).
///
/// At most once: a command written in full on a connection is never sent again on
/// another, whatever happens to its reply (lost with the connection, timed out, trickled
/// past the deadline, unreadable): the call fails with [`Failure::Unknown`], and the caller
/// says the outcome is unknown. So a kept connection is replaced *before* anything is sent
/// on it when it was closed by the server while idle (Valkey restarted, an idle timeout:
/// [`Connection::closed_while_idle`], a look without blocking), and `op` runs on the new
/// one. After that, `op` runs again on a new connection only when it failed before a byte
/// of it was written (the server never saw it), or on a `READONLY` reply (a
/// primary demoted by a failover refused it: the next open of a Sentinel endpoint asks the
/// sentinels again). A connection this call opened is not retried: the endpoint is down,
/// the caller reports it. On a cluster the same holds over every node (`cluster.rs`: only
/// a node's refusal, MOVED, ASK, TRYAGAIN or CLUSTERDOWN, sends a command again).
pub fn reconnect_once<C: AsMut<Connection>, T>(
    kept: &mut Option<C>,
    budget: Budget,
    mut open: impl FnMut(Duration) -> RedisResult<C>,
    mut op: impl FnMut(&mut C) -> RedisResult<T>,
) -> Result<T, Failure> {
    let mut fresh = false;
    loop {
        if !fresh
            && kept
                .as_mut()
                .is_some_and(|k| k.as_mut().closed_while_idle())
        {
            *kept = None;
        }
        if kept.is_none() {
            let left = budget.left();
            if left.is_zero() {
                return Err(Failure::NoTimeLeft);
            }
            *kept = Some(open(left).map_err(Failure::Open)?);
            fresh = true;
        }
        let held = kept.as_mut().expect("opened above");
        let want = if fresh {
            budget.left().max(Duration::from_millis(1))
        } else {
            budget.timeout
        };
        if let Err(e) = held.as_mut().set_timeout(want) {
            *kept = None;
            return Err(Failure::Socket(e));
        }
        let sent_before = held.as_mut().sent();
        match op(held) {
            Ok(v) => return Ok(v),
            // READONLY: a demoted primary, the wrong server: dropped as a broken one.
            Err(e) if is_reply_error(&e) && !is_readonly(&e) => return Err(Failure::Reply(e)),
            Err(e) => {
                // Anything written may have run, whatever came back (nothing, a reply cut
                // or garbled, one of the wrong shape); a READONLY refusal did not run, nor
                // did the ROLE that found a primary demoted.
                let unknown =
                    held.as_mut().sent() > sent_before && !is_readonly(&e) && !is_demoted(&e);
                *kept = None;
                if unknown {
                    return Err(Failure::Unknown(e));
                }
                if fresh || e.is_timeout() {
                    return Err(Failure::Broken(e));
                }
            }
        }
    }
}
