//! The process's connections to Valkey: one persistent connection per process per URL for
//! decisions (and one more for the stream sink's events, when it is on), reused across
//! requests and limiters, never shared across fork, with a short back-off after a failure.
//! Opening, timeouts and the one reconnect are the connection layer's
//! (`checkout_guard_connection`); what is kept per process, and for how long Valkey is left
//! alone, is this file's.
//!
//! Rules a checkout depends on:
//! - every call is bounded by the limiter's timeout: connect, the connection's set-up
//!   (AUTH, SELECT, CLIENT SETINFO) and the call share one deadline;
//! - the back-off after a timeout holds back the callers whose timeout is not longer than
//!   the one that failed (a limiter with a longer timeout still tries); after any other
//!   failure (refused, reset) it holds back every caller;
//! - telemetry (the stream sink) has a connection and a back-off of its own: it never
//!   touches the decisions' connection;
//! - a connection that broke while idle (Valkey restarted, idle timeout) is reconnected
//!   once, transparently;
//! - after a failure nobody tries again for `retry_interval`: calls fail at once, so a
//!   down Valkey costs a checkout nothing but the policy decision. The back-off runs on
//!   the caller's [`Clock`] (the limiter's: a `FakeClock` in tests), not on `Instant`;
//!   the deadlines of real sockets are the connection layer's;
//! - after `fork()` the child never touches the parent's socket.
//!
//! A Valkey Cluster endpoint (`valkey+cluster://`) is one connection of the connection
//! layer's (`checkout_guard_connection`'s `cluster.rs`) under the same rules: it holds a
//! connection per node it needed, follows MOVED and ASK, and after a failure the whole of
//! it is dropped and the slot map asked for again from the seeds, so a failover is
//! survived once the cluster has promoted a replica. The back-off is per endpoint: one
//! node down holds back every limiter on the URL for `retry_interval_ms`, those whose
//! slots live elsewhere too (known: docs/reliability.md).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use crate::clock::{Clock, SystemClock};

use crate::sync::Mutex;
use checkout_guard_connection::{describe, reconnect_once, Budget, Client, Connection, Failure};
use once_cell::sync::Lazy;
use redis::{ConnectionLike, RedisError, RedisResult};

use checkout_guard_config::{Endpoint, Engine};

use super::engine::{engine_index, EngineState, ModuleProbe};
use super::{Decisions, Health, StoreError};

/// An open connection of this process, with what is known of it.
pub(super) struct OpenConnection {
    conn: Connection,
    /// The fork generation that opened the socket; a forked child must not use it.
    generation: u64,
    /// Whether the server of this connection has `CG.DECIDE` (with `engine = auto`).
    module: ModuleProbe,
}

impl AsMut<Connection> for OpenConnection {
    fn as_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
}

/// What the process keeps of one endpoint: its connection (when open), the back-off after
/// a failure, and what `health()` reports.
#[derive(Default)]
pub(super) struct PooledConnection {
    open: Option<OpenConnection>,
    /// When the back-off ends, on the callers' clock ([`Clock::monotonic_ns`]).
    retry_at: Option<u64>,
    /// The back-off until `retry_at` holds back callers whose timeout is at most this:
    /// the timeout that failed, or `Duration::MAX` after a failure no wait would cure.
    backoff_upto: Duration,
    last_error: Option<String>,
    /// Why the back-off until `retry_at` runs (kept when a caller it does not hold back
    /// succeeds and clears `last_error`).
    backoff_cause: String,
    /// Calls that failed in a row (reply errors excluded: Valkey answered).
    failures: u32,
    /// Connections this process opened to the endpoint.
    connects: u64,
    /// The last PING made by [`ping`]: its round trip and when it was made.
    last_ping: Option<(Duration, SystemTime)>,
    /// The engine that made the last decision on this endpoint ("module" or "lua").
    decided_by: Option<&'static str>,
    /// The decisions' outcomes per engine setting (see [`engine_index`]): apart from the
    /// connection's, so a PING that succeeds does not hide decisions that fail.
    decisions: [Decisions; 3],
}

/// The process's connections: one per endpoint (its pool key) and [`Pool`].
type Pooled = HashMap<(String, Pool), Arc<Mutex<PooledConnection>>>;

static POOL: Lazy<Mutex<Pooled>> = Lazy::new(Default::default);

/// Whose connection to an endpoint: each has its own socket and back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Limiters' decisions and administration, readiness and health.
    Decisions,
    /// The stream sink's events (telemetry never touches a decision's connection).
    Events,
}

/// `fork()` from a threaded process (ZTS: a request thread calls `pcntl_fork()` while other
/// threads decide): the child has only the forking thread, so a connection's lock held by
/// another thread at the fork (for a round trip) would stay locked in the child, and the
/// child's first decision would wait forever. The pool and every connection in it are
/// locked before a fork (waiting for round trips in flight), unlocked after it in the
/// parent, and made new (unlocked, no waiter) in the child, where the connections are then
/// forgotten (`forget_if_forked`). The child's locks are not unlocked but reset: unlocking
/// a parking_lot lock other threads were parked on may hand it to one of them, and in the
/// child those threads do not exist.
#[cfg(not(feature = "std-locks"))]
static FORK_HANDLERS: std::sync::Once = std::sync::Once::new();

#[cfg(not(feature = "std-locks"))]
extern "C" fn lock_before_fork() {
    let map = POOL.lock();
    for c in map.values() {
        std::mem::forget(c.lock());
    }
    std::mem::forget(map);
}

#[cfg(not(feature = "std-locks"))]
extern "C" fn unlock_in_parent() {
    // SAFETY: lock_before_fork locked the pool and then every connection in it, in this
    // thread, and forgot the guards; nothing changed the map since (its lock is held).
    unsafe {
        let map = &*POOL.data_ptr();
        for c in map.values() {
            c.force_unlock();
        }
        POOL.force_unlock();
    }
}

#[cfg(not(feature = "std-locks"))]
extern "C" fn reset_in_child() {
    // SAFETY: as in unlock_in_parent, this thread holds every lock; it is the only thread
    // of the child. A parking_lot RawMutex is its one state byte, an AtomicU8 (the size is
    // checked below): storing 0 makes it unlocked with no waiter, as a new one.
    const _: () = assert!(std::mem::size_of::<parking_lot::RawMutex>() == 1);
    unsafe fn reset(m: &parking_lot::RawMutex) {
        let state = &*(m as *const parking_lot::RawMutex as *const std::sync::atomic::AtomicU8);
        state.store(0, std::sync::atomic::Ordering::SeqCst);
    }
    unsafe {
        let map = &*POOL.data_ptr();
        for c in map.values() {
            reset(c.raw());
        }
        reset(POOL.raw());
    }
}

/// The process's pooled connection to `endpoint` for `pool` (made on first use).
pub(super) fn pooled(endpoint: &Endpoint, pool: Pool) -> Arc<Mutex<PooledConnection>> {
    // Not with `std-locks` (crate::sync): the handlers need parking_lot's raw locks.
    #[cfg(not(feature = "std-locks"))]
    FORK_HANDLERS.call_once(|| {
        crate::process::at_fork(lock_before_fork, unlock_in_parent, reset_in_child);
    });
    POOL.lock()
        .entry((endpoint.pool_key().to_string(), pool))
        .or_default()
        .clone()
}

impl PooledConnection {
    /// Drops the connection of another process (after fork) without closing or shutting
    /// down the socket the parent still uses.
    fn forget_if_forked(&mut self) {
        let now = crate::process::generation();
        if self.open.as_ref().is_some_and(|o| o.generation != now) {
            std::mem::forget(self.open.take());
        }
    }

    /// The back-off that holds back a caller with `timeout` at `clock`'s now, if one is
    /// running.
    fn backoff_for(&self, timeout: Duration, clock: &dyn Clock) -> Option<Duration> {
        let left = Duration::from_nanos(self.retry_at?.saturating_sub(clock.monotonic_ns()));
        (!left.is_zero() && timeout <= self.backoff_upto).then_some(left)
    }

    /// Drops the connection and starts a back-off for callers whose timeout is at most
    /// `upto` (the failed call's timeout after a timeout, `Duration::MAX` otherwise).
    /// `now` is the caller's clock ([`Clock::monotonic_ns`]).
    fn fail(
        &mut self,
        cause: String,
        retry_interval: Duration,
        upto: Duration,
        now: u64,
    ) -> StoreError {
        self.open = None;
        self.failures = self.failures.saturating_add(1);
        // A back-off still running for more callers keeps holding them back.
        let running = self.retry_at.is_some_and(|at| at > now);
        self.backoff_upto = if running {
            self.backoff_upto.max(upto)
        } else {
            upto
        };
        let interval_ns = u64::try_from(retry_interval.as_nanos()).unwrap_or(u64::MAX);
        self.retry_at = Some(now.saturating_add(interval_ns));
        self.backoff_cause = cause.clone();
        self.last_error = Some(cause.clone());
        StoreError::Failed {
            cause,
            retry_in: retry_interval,
        }
    }

    /// Records one decision's outcome for the limiters with `engine`, at `clock`'s time.
    pub(super) fn record_decision<T>(
        &mut self,
        engine: Engine,
        outcome: &Result<T, StoreError>,
        clock: &dyn Clock,
    ) {
        self.decisions[engine_index(engine)].record_at(outcome, clock.wall());
    }

    /// The connection's state as a caller with `timeout` sees it (a back-off after a
    /// shorter timeout does not hold it back), and the decisions of the limiters with
    /// `engine` (none: the connection alone). `last_error` is the connection's, or while
    /// decisions fail the last decision's: a PING that succeeds does not clear a
    /// decision's error.
    fn health(
        &self,
        ok: bool,
        timeout: Duration,
        engine: Option<Engine>,
        clock: &dyn Clock,
    ) -> Health {
        let decisions = engine
            .map(|e| self.decisions[engine_index(e)].clone())
            .unwrap_or_default();
        let last_error = self.last_error.clone().or_else(|| {
            (decisions.failed_in_row > 0)
                .then(|| decisions.last_error.as_ref().map(|(e, _)| e.clone()))
                .flatten()
        });
        let retry_in = self.backoff_for(timeout, clock).unwrap_or_default();
        let circuit_open = !retry_in.is_zero();
        Health {
            ok: ok && !circuit_open,
            connected: self.open.is_some(),
            circuit_open,
            retry_in,
            last_error,
            consecutive_failures: self.failures,
            connects: self.connects,
            last_ping: self.last_ping,
            engine: self.decided_by,
            decisions,
            primary: self
                .open
                .as_ref()
                .and_then(|o| o.conn.primary().map(str::to_string)),
        }
    }
}

/// Runs `op` on the process's connection to `endpoint`, within `timeout`.
///
/// A connection that was already open and turns out broken (not slow) is replaced and
/// `op` is run once more on the new one. `op` may therefore run twice; it must be a single
/// command or script whose repetition is harmless (at worst a decision takes tokens twice,
/// which only errs on the side of the limit).
pub fn with_connection<T>(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
) -> Result<T, StoreError> {
    with_pooled(
        &pooled(endpoint, Pool::Decisions),
        endpoint,
        timeout,
        retry_interval,
        &SystemClock,
        |c, _| op(c),
    )
}

/// [`with_connection`] on the endpoint's pooled connection, already looked up, with the
/// connection's engine state, the back-off on `clock`: every command after the call's
/// first gets only what is left of its deadline (`Connection::within`).
pub(super) fn with_pooled<T>(
    pooled: &Mutex<PooledConnection>,
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    clock: &dyn Clock,
    mut op: impl FnMut(&mut dyn ConnectionLike, EngineState<'_>) -> RedisResult<T>,
) -> Result<T, StoreError> {
    with_open(
        pooled,
        endpoint,
        timeout,
        retry_interval,
        clock,
        |open, decided_by, deadline| {
            let OpenConnection { conn, module, .. } = open;
            conn.within(deadline, |c| {
                op(
                    c,
                    EngineState {
                        module,
                        decided_by,
                        clock,
                    },
                )
            })
        },
    )
}

/// What came back of a pipeline: the replies read, in order (error replies included, as
/// `Value::ServerError`), and why the others were not read (`None`: all were).
#[derive(Debug)]
pub struct Replies {
    pub values: Vec<redis::Value>,
    pub error: Option<StoreError>,
}

/// Sends `pipe` on the process's `pool` connection to `endpoint` and reads its replies,
/// all within `timeout` (connection included): the first reply not in by then ends the
/// call, and the commands not answered count as not done. A connection found broken is
/// replaced once and only the commands not yet answered are sent again.
pub fn pipeline(
    endpoint: &Endpoint,
    pool: Pool,
    timeout: Duration,
    retry_interval: Duration,
    pipe: &redis::Pipeline,
) -> Replies {
    let commands: Vec<&redis::Cmd> = pipe.cmd_iter().collect();
    let mut values = Vec::with_capacity(commands.len());
    let result = with_open(
        &pooled(endpoint, pool),
        endpoint,
        timeout,
        retry_interval,
        &SystemClock,
        |open, _, deadline| {
            let rest = &commands[values.len()..];
            if rest.is_empty() {
                return Ok(());
            }
            let mut packed = Vec::new();
            for c in rest {
                c.write_packed_command(&mut packed);
            }
            let before = values.len();
            let read = open
                .conn
                .pipeline_within(&packed, rest.len(), deadline, &mut values);
            // A READONLY reply (a demoted primary): the connection is to the wrong
            // server. The commands from the first refused one on count as not done and
            // the connection as broken (replaced once: a Sentinel endpoint asks again).
            let refused = values[before..].iter().position(|v| {
                matches!(v, redis::Value::ServerError(e)
                    if checkout_guard_connection::errors::is_readonly(&e.clone().into()))
            });
            if let Some(i) = refused {
                let redis::Value::ServerError(e) = values.swap_remove(before + i) else {
                    unreachable!("matched above")
                };
                values.truncate(before + i);
                return Err(e.into());
            }
            read
        },
    );
    Replies {
        values,
        error: result.err(),
    }
}

/// One call on the pooled connection (see [`with_connection`]): the back-off first (on
/// `clock`), then the connection layer's call within `timeout` (opened if none is,
/// replaced once if broken), its outcome recorded, a failure starting a back-off of
/// `retry_interval`. `op` gets the open connection, the endpoint's last engine and the
/// call's deadline.
fn with_open<T>(
    pooled: &Mutex<PooledConnection>,
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    clock: &dyn Clock,
    mut op: impl FnMut(&mut OpenConnection, &mut Option<&'static str>, Instant) -> RedisResult<T>,
) -> Result<T, StoreError> {
    let mut guard = pooled.lock();
    let p = &mut *guard;
    p.forget_if_forked();
    if let Some(retry_in) = p.backoff_for(timeout, clock) {
        return Err(StoreError::Backoff {
            retry_in,
            cause: p.backoff_cause.clone(),
        });
    }
    let budget = Budget::starting_now(timeout);
    let result = reconnect_once(
        &mut p.open,
        budget,
        |left| {
            let conn = Connection::open(endpoint, Client::WORKER, left)?;
            p.connects += 1;
            Ok(OpenConnection {
                conn,
                generation: crate::process::generation(),
                module: ModuleProbe::default(),
            })
        },
        |open| op(open, &mut p.decided_by, budget.deadline),
    );
    // A timeout's failure: only callers with no longer a timeout wait it out.
    let upto = |e: &RedisError| {
        if e.is_timeout() {
            timeout
        } else {
            Duration::MAX
        }
    };
    // A failure starts a back-off of `retry_interval` from now on `clock`.
    let fail = |p: &mut PooledConnection, cause: String, upto: Duration| {
        p.fail(cause, retry_interval, upto, clock.monotonic_ns())
    };
    match result {
        Ok(v) => {
            p.last_error = None;
            p.failures = 0;
            Ok(v)
        }
        Err(Failure::Reply(e)) => {
            let cause = reply_cause(&e);
            p.last_error = Some(cause.clone());
            Err(StoreError::Failed {
                cause,
                retry_in: Duration::ZERO,
            })
        }
        Err(Failure::NoTimeLeft) => Err(fail(p, "timed out".into(), timeout)),
        Err(Failure::Open(e)) => {
            let cause = format!("connect: {}", describe(&e, timeout));
            Err(fail(p, cause, upto(&e)))
        }
        Err(Failure::Socket(e)) => Err(fail(p, format!("socket: {e}"), Duration::MAX)),
        Err(Failure::Broken(e)) => Err(fail(p, describe(&e, timeout), upto(&e))),
        Err(Failure::Unknown(e)) => {
            let cause = format!(
                "{}{} after the command was sent (Valkey may have run it; not sent again)",
                super::OUTCOME_UNKNOWN,
                describe(&e, timeout)
            );
            Err(fail(p, cause, upto(&e)))
        }
    }
}

/// The state of this process's connection to `endpoint` for a caller with `timeout`,
/// without any I/O: `ok` when the connection is open and no failure is pending.
pub fn status(endpoint: &Endpoint, timeout: Duration) -> Health {
    status_of(endpoint, timeout, None, &SystemClock)
}

/// [`status`], with the decisions of the limiters with `engine`, the back-off on `clock`.
pub(super) fn status_of(
    endpoint: &Endpoint,
    timeout: Duration,
    engine: Option<Engine>,
    clock: &dyn Clock,
) -> Health {
    let pooled = pooled(endpoint, Pool::Decisions);
    let mut p = pooled.lock();
    p.forget_if_forked();
    let ok = p.open.is_some() && p.last_error.is_none();
    p.health(ok, timeout, engine, clock)
}

/// One PING over the pooled connection (opened if none is, unless the back-off after a
/// failure is running: then nothing is sent and the answer is not ok). Never a second
/// connection: this is what a readiness probe calls on every period.
///
/// On a cluster, a PING would go to every node (a replica down would fail every pod's
/// readiness); `EXISTS cluster_key` instead asks only the primary that holds the caller's
/// slot, the one its decisions need.
///
/// On a Sentinel endpoint, `ROLE` instead of PING: a primary demoted while the connection
/// was kept (`REPLICAOF`, `FAILOVER`) still answers PING, and would be ok until the next
/// decision found `READONLY`. Demoted, the connection is dropped and the sentinels asked
/// again within the same timeout ([`Connection::check_still_primary`]): ok on the primary
/// they name now, else not ok with the open's cause (`... is a replica (ROLE slave)` while
/// they still name the demoted one) and the back-off, as a decision would have had.
pub fn ping(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    cluster_key: &[u8],
) -> Health {
    ping_of(
        endpoint,
        timeout,
        retry_interval,
        cluster_key,
        None,
        &SystemClock,
    )
}

/// [`ping`], with the decisions of the limiters with `engine`, on `clock` (the back-off,
/// and the PING's round trip and time).
pub(super) fn ping_of(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    cluster_key: &[u8],
    engine: Option<Engine>,
    clock: &dyn Clock,
) -> Health {
    let started = clock.monotonic_ns();
    let sent = clock.wall();
    let cluster = endpoint.is_cluster();
    let sentinel = endpoint.is_sentinel();
    let pooled = pooled(endpoint, Pool::Decisions);
    let result = with_open(
        &pooled,
        endpoint,
        timeout,
        retry_interval,
        clock,
        |open, _, deadline| {
            if sentinel {
                return open.conn.check_still_primary(deadline);
            }
            open.conn.within(deadline, |c| {
                if cluster {
                    redis::cmd("EXISTS")
                        .arg(cluster_key)
                        .query::<i64>(c)
                        .map(drop)
                } else {
                    redis::cmd("PING").query::<String>(c).map(drop)
                }
            })
        },
    );
    let mut p = pooled.lock();
    let ok = match result {
        Ok(_) => {
            let round_trip = clock.monotonic_ns().saturating_sub(started);
            p.last_ping = Some((Duration::from_nanos(round_trip), sent));
            true
        }
        Err(_) => false,
    };
    p.health(ok, timeout, engine, clock)
}

/// An error reply as the cause of a failed call; one that says the server wants a user
/// (`NOAUTH`, or Redis 7.0's `Protocol error: unauthenticated multibulk length` for a
/// command as long as a script call, where the URL has none and `default` is off or has
/// a password) says where to give it.
fn reply_cause(e: &RedisError) -> String {
    let cause = e.to_string();
    let lower = cause.to_ascii_lowercase();
    if lower.contains("noauth") || lower.contains("unauthenticated") {
        format!("{cause} (the server wants a user: give it in the URL, rediss://USER:PASSWORD@host:port)")
    } else {
        cause
    }
}
