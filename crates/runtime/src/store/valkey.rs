//! The connection to Valkey: one persistent connection per process per URL for decisions
//! (and one more for the stream sink's events, when it is on), reused across requests and
//! limiters, never shared across fork, with a short back-off after a failure.
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
//!   down Valkey costs a checkout nothing but the policy decision;
//! - after `fork()` the child never touches the parent's socket.
//!
//! A Valkey Cluster endpoint (`valkey+cluster://`) is one redis-rs `ClusterConnection`
//! under the same rules: it holds a connection per node it needed, follows MOVED and ASK,
//! and after a failure the whole of it is dropped and the slot map asked for again from
//! the seeds, so a failover is survived once the cluster has promoted a replica.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use once_cell::sync::Lazy;
use parking_lot::Mutex;
use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::{
    Connection, ConnectionInfo, ConnectionLike, ErrorKind, IntoConnectionInfo, RedisError,
    RedisResult,
};

use checkout_guard_model::call::{self, READ_LIMITS};
use checkout_guard_model::endpoint::Target;
use checkout_guard_model::keys::mark_hot_command;
use checkout_guard_model::live::Stored;
use checkout_guard_model::{DecideCall, Endpoint, Engine, Keys};

use super::{Decisions, Health, Store, StoreError};

/// An open connection: to one server, or to the nodes of a cluster.
enum Conn {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

impl Conn {
    fn set_timeouts(&mut self, t: Duration) -> RedisResult<()> {
        match self {
            Conn::Single(c) => {
                c.set_read_timeout(Some(t))?;
                c.set_write_timeout(Some(t))?;
            }
            Conn::Cluster(c) => {
                c.set_read_timeout(Some(t))?;
                c.set_write_timeout(Some(t))?;
            }
        }
        Ok(())
    }
}

struct Live {
    conn: Conn,
    /// The fork generation that opened the socket; a forked child must not use it.
    generation: u64,
    /// The read/write timeout currently set on the socket, to skip needless syscalls.
    timeout: Option<Duration>,
    /// Whether the server of this connection has `CG.DECIDE` (with `engine = auto`).
    module: ModuleProbe,
}

/// See [`checkout_guard_model::options::MODULE_RECHECK_SECONDS`].
pub const MODULE_RECHECK: Duration =
    Duration::from_secs(checkout_guard_model::options::MODULE_RECHECK_SECONDS);

/// What `engine = auto` knows of the connection's server: whether it has the module, and
/// when that was last asked (`COMMAND INFO`, only when [`MODULE_RECHECK`] has passed
/// since it answered no; never while it answers yes).
#[derive(Default)]
pub struct ModuleProbe {
    has: Option<bool>,
    asked_at: Option<Instant>,
}

impl ModuleProbe {
    /// Whether to send `CG.DECIDE`; asks the server when not known or known to be no for
    /// [`MODULE_RECHECK`]. An error reply to the question counts as no (the script works
    /// everywhere); a broken connection is the call's failure.
    fn has(&mut self, c: &mut dyn ConnectionLike) -> RedisResult<bool> {
        match self.has {
            Some(true) => return Ok(true),
            Some(false) if self.asked_at.is_some_and(|t| t.elapsed() < MODULE_RECHECK) => {
                return Ok(false)
            }
            _ => {}
        }
        let has = has_module(c)?;
        self.has = Some(has);
        self.asked_at = Some(Instant::now());
        Ok(has)
    }

    /// The server answered that `CG.DECIDE` cannot be used: the script until the next
    /// recheck.
    fn lost(&mut self) {
        self.has = Some(false);
        self.asked_at = Some(Instant::now());
    }
}

#[derive(Default)]
struct Slot {
    live: Option<Live>,
    retry_at: Option<Instant>,
    /// The back-off until `retry_at` holds back callers whose timeout is at most this:
    /// the timeout that failed, or `Duration::MAX` after a failure no wait would cure.
    backoff_upto: Duration,
    last_error: Option<String>,
    /// Calls that failed in a row (reply errors excluded: Valkey answered).
    failures: u32,
    /// Connections this process opened to the endpoint.
    connects: u64,
    /// The last PING made by [`ping`]: its round trip and when it was made.
    last_ping: Option<(Duration, SystemTime)>,
    /// The engine that made the last decision on this endpoint ("module" or "lua").
    engine: Option<&'static str>,
    /// The decisions' outcomes per engine setting (see [`engine_index`]): apart from the
    /// connection's, so a PING that succeeds does not hide decisions that fail.
    decisions: [Decisions; 3],
}

fn engine_index(engine: Engine) -> usize {
    match engine {
        Engine::Auto => 0,
        Engine::Lua => 1,
        Engine::Module => 2,
    }
}

/// The process's connections: one slot per endpoint (its pool key) and [`Pool`].
type Slots = HashMap<(String, Pool), Arc<Mutex<Slot>>>;

static POOL: Lazy<Mutex<Slots>> = Lazy::new(Default::default);

/// Whose connection to an endpoint: each has its own socket and back-off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Limiters' decisions and administration, readiness and health.
    Decisions,
    /// The stream sink's events (telemetry never touches a decision's connection).
    Events,
}

fn slot(endpoint: &Endpoint, pool: Pool) -> Arc<Mutex<Slot>> {
    POOL.lock()
        .entry((endpoint.pool_key().to_string(), pool))
        .or_default()
        .clone()
}

/// A failure as `health()['last_error']` shows it: a timeout says so (the OS says
/// "Resource temporarily unavailable").
fn describe(e: &RedisError, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("timed out after {} ms", timeout.as_millis())
    } else {
        e.to_string()
    }
}

/// Errors that came back as a reply: the connection is still in step and stays.
fn is_reply_error(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

impl Slot {
    /// Drops the connection of another process (after fork) without closing or shutting
    /// down the socket the parent still uses.
    fn forget_if_forked(&mut self) {
        let now = crate::process::generation();
        if self.live.as_ref().is_some_and(|l| l.generation != now) {
            std::mem::forget(self.live.take());
        }
    }

    /// The back-off that holds back a caller with `timeout`, if one is running.
    fn backoff_for(&self, timeout: Duration) -> Option<Duration> {
        let left = self.retry_at?.saturating_duration_since(Instant::now());
        (!left.is_zero() && timeout <= self.backoff_upto).then_some(left)
    }

    /// Drops the connection and starts a back-off for callers whose timeout is at most
    /// `upto` (the failed call's timeout after a timeout, `Duration::MAX` otherwise).
    fn fail(&mut self, cause: String, retry_interval: Duration, upto: Duration) -> StoreError {
        self.live = None;
        self.failures = self.failures.saturating_add(1);
        let now = Instant::now();
        // A back-off still running for more callers keeps holding them back.
        let running = self.retry_at.is_some_and(|at| at > now);
        self.backoff_upto = if running {
            self.backoff_upto.max(upto)
        } else {
            upto
        };
        self.retry_at = Some(now + retry_interval);
        self.last_error = Some(cause.clone());
        StoreError::Failed {
            cause,
            retry_in: retry_interval,
        }
    }

    fn connect(&mut self, endpoint: &Endpoint, timeout: Duration) -> RedisResult<()> {
        let conn = match endpoint.target() {
            Target::Single(url) => Conn::Single(connect_single(url, timeout)?),
            Target::Cluster(seeds) => {
                let seeds = seeds
                    .iter()
                    .map(|s| connection_info(s))
                    .collect::<RedisResult<Vec<_>>>()?;
                // Redirects (MOVED, ASK) and one reconnection are retried inside the call;
                // waits between retries stay a small part of the call's timeout.
                let wait_ms = (timeout.as_millis() as u64 / 10).clamp(2, 50);
                let client = ClusterClientBuilder::new(seeds)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .retries(3)
                    .min_retry_wait(1)
                    .max_retry_wait(wait_ms)
                    .build()?;
                let conn = client.get_connection()?;
                Conn::Cluster(Box::new(conn))
            }
        };
        self.live = Some(Live {
            conn,
            generation: crate::process::generation(),
            timeout: None,
            module: ModuleProbe::default(),
        });
        self.connects += 1;
        Ok(())
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
    with_engine(endpoint, timeout, retry_interval, |c, _| op(c))
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
    let deadline = Instant::now() + timeout;
    let commands: Vec<&redis::Cmd> = pipe.cmd_iter().collect();
    let mut values = Vec::with_capacity(commands.len());
    let result = with_live(
        &slot(endpoint, pool),
        endpoint,
        timeout,
        retry_interval,
        |live, _| {
            let rest = &commands[values.len()..];
            if rest.is_empty() {
                return Ok(());
            }
            let mut packed = Vec::new();
            for c in rest {
                c.write_packed_command(&mut packed);
            }
            match &mut live.conn {
                Conn::Single(c) => {
                    // The socket's timeouts are set per reply here: they are set again
                    // before the next call.
                    live.timeout = None;
                    set_left(c, deadline)?;
                    c.send_packed_command(&packed)?;
                    read_replies(c, rest.len(), deadline, &mut values)
                }
                Conn::Cluster(c) => {
                    let got = c.req_packed_commands(&packed, 0, rest.len())?;
                    values.extend(got);
                    Ok(())
                }
            }
        },
    );
    Replies {
        values,
        error: result.err(),
    }
}

/// Sets `c`'s read and write timeouts to what is left until `deadline`; an error once
/// nothing is.
fn set_left(c: &Connection, deadline: Instant) -> RedisResult<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out());
    }
    c.set_read_timeout(Some(left))?;
    c.set_write_timeout(Some(left))
}

fn timed_out() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out").into()
}

/// Reads `count` replies into `into` by `deadline`, stopping at the first that is not in
/// by then or at a broken connection (redis-rs's own pipeline reading waits a whole
/// timeout for every reply after a first one timed out).
fn read_replies(
    c: &mut Connection,
    count: usize,
    deadline: Instant,
    into: &mut Vec<redis::Value>,
) -> RedisResult<()> {
    let mut read = 0;
    while read < count {
        set_left(c, deadline)?;
        match c.recv_response()? {
            // RESP3 out-of-band data is not a reply.
            redis::Value::Push { .. } => {}
            v => {
                into.push(v);
                read += 1;
            }
        }
    }
    Ok(())
}

/// What a call knows of its connection's engine: whether the server has the module (see
/// [`Live::module`]) and which engine decided last.
pub struct EngineState<'a> {
    pub module: &'a mut ModuleProbe,
    pub decided_by: &'a mut Option<&'static str>,
}

/// [`with_connection`], with the connection's engine state.
fn with_engine<T>(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    op: impl FnMut(&mut dyn ConnectionLike, EngineState<'_>) -> RedisResult<T>,
) -> Result<T, StoreError> {
    with_slot(
        &slot(endpoint, Pool::Decisions),
        endpoint,
        timeout,
        retry_interval,
        op,
    )
}

/// [`with_engine`] on the endpoint's slot, already looked up.
fn with_slot<T>(
    slot: &Mutex<Slot>,
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    mut op: impl FnMut(&mut dyn ConnectionLike, EngineState<'_>) -> RedisResult<T>,
) -> Result<T, StoreError> {
    let deadline = Instant::now() + timeout;
    with_live(
        slot,
        endpoint,
        timeout,
        retry_interval,
        |live, decided_by| {
            let state = EngineState {
                module: &mut live.module,
                decided_by,
            };
            match &mut live.conn {
                Conn::Single(conn) => op(
                    &mut Bounded {
                        conn,
                        deadline,
                        sent: 0,
                        timeout: &mut live.timeout,
                    },
                    state,
                ),
                Conn::Cluster(c) => op(c.as_mut(), state),
            }
        },
    )
}

/// One server's connection as one call sees it: every command after the call's first
/// (`COMMAND INFO` before a decision, `EVAL` after `NOSCRIPT`, the steps of a reset) gets
/// only what is left of the call's deadline, so a call of several round trips still ends
/// within its timeout. The first command runs on the timeout already set (no syscall on
/// the hot path of one command per call).
struct Bounded<'a> {
    conn: &'a mut Connection,
    deadline: Instant,
    sent: u32,
    /// The socket's timeout as [`Live`] records it (changed here, set again next call).
    timeout: &'a mut Option<Duration>,
}

impl Bounded<'_> {
    fn before(&mut self) -> RedisResult<()> {
        self.sent += 1;
        if self.sent > 1 {
            *self.timeout = None;
            set_left(self.conn, self.deadline)?;
        }
        Ok(())
    }
}

impl ConnectionLike for Bounded<'_> {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<redis::Value> {
        self.before()?;
        self.conn.req_packed_command(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<redis::Value>> {
        self.before()?;
        self.conn.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.conn.check_connection()
    }

    fn is_open(&self) -> bool {
        self.conn.is_open()
    }
}

/// [`with_slot`], giving `op` the open connection itself and the slot's last engine.
fn with_live<T>(
    slot: &Mutex<Slot>,
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    mut op: impl FnMut(&mut Live, &mut Option<&'static str>) -> RedisResult<T>,
) -> Result<T, StoreError> {
    let mut s = slot.lock();
    s.forget_if_forked();
    if let Some(retry_in) = s.backoff_for(timeout) {
        return Err(StoreError::Backoff {
            retry_in,
            cause: s.last_error.clone().unwrap_or_default(),
        });
    }
    // A timeout's failure: only callers with no longer a timeout wait it out.
    let upto = |e: &RedisError| {
        if e.is_timeout() {
            timeout
        } else {
            Duration::MAX
        }
    };
    let deadline = Instant::now() + timeout;
    let mut fresh = false;
    loop {
        if s.live.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(s.fail("timed out".into(), retry_interval, timeout));
            }
            if let Err(e) = s.connect(endpoint, left) {
                let upto = upto(&e);
                let cause = format!("connect: {}", describe(&e, timeout));
                return Err(s.fail(cause, retry_interval, upto));
            }
            fresh = true;
        }
        let live = s.live.as_mut().expect("connected above");
        // Whatever is left of this call's budget bounds the command (at least 1 ms).
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1));
        let want = if fresh { left } else { timeout };
        if live.timeout != Some(want) {
            if let Err(e) = live.conn.set_timeouts(want) {
                return Err(s.fail(format!("socket: {e}"), retry_interval, Duration::MAX));
            }
            live.timeout = Some(want);
        }
        let slot = &mut *s;
        let live = slot.live.as_mut().expect("connected above");
        match op(live, &mut slot.engine) {
            Ok(v) => {
                s.last_error = None;
                s.failures = 0;
                return Ok(v);
            }
            Err(e) if is_reply_error(&e) => {
                s.last_error = Some(e.to_string());
                return Err(StoreError::Failed {
                    cause: e.to_string(),
                    retry_in: Duration::ZERO,
                });
            }
            Err(e) if !fresh && !e.is_timeout() => {
                // An idle connection that broke (Valkey restarted, idle timeout): once more
                // on a new connection, transparently.
                s.live = None;
            }
            Err(e) => {
                let upto = upto(&e);
                return Err(s.fail(describe(&e, timeout), retry_interval, upto));
            }
        }
    }
}

impl Slot {
    /// The connection's state as a caller with `timeout` sees it (a back-off after a
    /// shorter timeout does not hold it back), and the decisions of the limiters with
    /// `engine` (none: the connection alone). `last_error` is the connection's, or while
    /// decisions fail the last decision's: a PING that succeeds does not clear a
    /// decision's error.
    fn health(&self, ok: bool, timeout: Duration, engine: Option<Engine>) -> Health {
        let decisions = engine
            .map(|e| self.decisions[engine_index(e)].clone())
            .unwrap_or_default();
        let last_error = self.last_error.clone().or_else(|| {
            (decisions.failed_in_row > 0)
                .then(|| decisions.last_error.as_ref().map(|(e, _)| e.clone()))
                .flatten()
        });
        let retry_in = self.backoff_for(timeout).unwrap_or_default();
        let circuit_open = !retry_in.is_zero();
        Health {
            ok: ok && !circuit_open,
            connected: self.live.is_some(),
            circuit_open,
            retry_in,
            last_error,
            consecutive_failures: self.failures,
            connects: self.connects,
            last_ping: self.last_ping,
            engine: self.engine,
            decisions,
        }
    }
}

/// The state of this process's connection to `endpoint` for a caller with `timeout`,
/// without any I/O: `ok` when the connection is open and no failure is pending.
pub fn status(endpoint: &Endpoint, timeout: Duration) -> Health {
    status_of(endpoint, timeout, None)
}

fn status_of(endpoint: &Endpoint, timeout: Duration, engine: Option<Engine>) -> Health {
    let slot = slot(endpoint, Pool::Decisions);
    let mut s = slot.lock();
    s.forget_if_forked();
    let ok = s.live.is_some() && s.last_error.is_none();
    s.health(ok, timeout, engine)
}

/// One PING over the pooled connection (opened if none is, unless the back-off after a
/// failure is running: then nothing is sent and the answer is not ok). Never a second
/// connection: this is what a readiness probe calls on every period.
///
/// On a cluster, a PING would go to every node (a replica down would fail every pod's
/// readiness); `EXISTS cluster_key` instead asks only the primary that holds the caller's
/// slot, the one its decisions need.
pub fn ping(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    cluster_key: &[u8],
) -> Health {
    ping_of(endpoint, timeout, retry_interval, cluster_key, None)
}

fn ping_of(
    endpoint: &Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    cluster_key: &[u8],
    engine: Option<Engine>,
) -> Health {
    let started = Instant::now();
    let sent = SystemTime::now();
    let cluster = endpoint.is_cluster();
    let result = with_connection(endpoint, timeout, retry_interval, |c| {
        if cluster {
            redis::cmd("EXISTS")
                .arg(cluster_key)
                .query::<i64>(c)
                .map(drop)
        } else {
            redis::cmd("PING").query::<String>(c).map(drop)
        }
    });
    let slot = slot(endpoint, Pool::Decisions);
    let mut s = slot.lock();
    let ok = match result {
        Ok(_) => {
            s.last_ping = Some((started.elapsed(), sent));
            true
        }
        Err(_) => false,
    };
    s.health(ok, timeout, engine)
}

/// A URL the model's endpoint accepted, as redis-rs connects to it; the connections are
/// named in `CLIENT LIST` (`lib-name=checkout_guard`).
fn connection_info(url: &str) -> RedisResult<ConnectionInfo> {
    let info = url.into_connection_info()?;
    let settings = info
        .redis_settings()
        .clone()
        .set_lib_name("checkout_guard", checkout_guard_model::VERSION);
    Ok(info.set_redis_settings(settings))
}

/// A connection to one server, its whole set-up within `timeout`: TCP connect, then AUTH,
/// SELECT and the two CLIENT SETINFO (the name in `CLIENT LIST`) pipelined in one round
/// trip whose replies share the deadline. (redis-rs's own set-up waits the whole timeout
/// for each of its replies in turn when the server does not answer.) With RESP3, redis-rs
/// sends HELLO (with the credentials) itself: one reply, within the same deadline.
fn connect_single(url: &str, timeout: Duration) -> RedisResult<Connection> {
    let deadline = Instant::now() + timeout;
    let info = url.into_connection_info()?;
    let wanted = info.redis_settings().clone();
    let resp3 = wanted.protocol().supports_resp3();
    let mut bare = redis::RedisConnectionInfo::default()
        .set_protocol(wanted.protocol())
        .set_skip_set_lib_name();
    if resp3 {
        if let Some(user) = wanted.username() {
            bare = bare.set_username(user);
        }
        if let Some(pass) = wanted.password() {
            bare = bare.set_password(pass);
        }
    }
    let mut con =
        redis::Client::open(info.set_redis_settings(bare))?.get_connection_with_timeout(timeout)?;
    let mut setup = redis::pipe();
    let mut checked = Vec::new();
    if !resp3 {
        if let Some(pass) = wanted.password() {
            let auth = setup.cmd("AUTH");
            if let Some(user) = wanted.username() {
                auth.arg(user);
            }
            auth.arg(pass);
            checked.push("AUTH");
        }
    }
    if wanted.db() != 0 {
        setup.cmd("SELECT").arg(wanted.db());
        checked.push("SELECT");
    }
    setup
        .cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-NAME")
        .arg("checkout_guard");
    setup
        .cmd("CLIENT")
        .arg("SETINFO")
        .arg("LIB-VER")
        .arg(checkout_guard_model::VERSION);
    set_left(&con, deadline)?;
    con.send_packed_command(&setup.get_packed_pipeline())?;
    let mut replies = Vec::new();
    read_replies(&mut con, setup.len(), deadline, &mut replies)?;
    for (what, reply) in checked.iter().zip(replies) {
        // CLIENT SETINFO's answer is ignored (an old server does not know it).
        if let redis::Value::ServerError(e) = reply {
            let why = RedisError::from(e).to_string();
            return Err(if *what == "AUTH" {
                RedisError::from((
                    ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                    why,
                ))
            } else {
                RedisError::from((ErrorKind::Client, "Valkey refused to switch database", why))
            });
        }
    }
    con.set_read_timeout(None)?;
    con.set_write_timeout(None)?;
    Ok(con)
}

/// The decision script as Valkey runs it: hashed once per process, sent by EVALSHA (and
/// loaded again by EVAL when Valkey answers NOSCRIPT).
static DECIDE: Lazy<redis::Script> = Lazy::new(|| redis::Script::new(&call::decide_source()));
static READ: Lazy<redis::Script> = Lazy::new(|| redis::Script::new(READ_LIMITS));
static RESET: Lazy<redis::Script> = Lazy::new(|| redis::Script::new(call::RESET_STEP));

/// `call` on `script` (the production script, or a test's variant of it): KEYS and ARGV
/// exactly as [`DecideCall`] encodes them.
pub fn invocation<'s>(
    call: &DecideCall<'_>,
    script: &'s redis::Script,
) -> redis::ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    for k in call.keys() {
        inv.key(k);
    }
    for a in call.args() {
        inv.arg(a.as_ref());
    }
    inv
}

/// The store of the extension: the process's pooled connection to one endpoint, every
/// call bounded by `timeout`, and left alone for `retry_interval` after a failure.
#[derive(Clone)]
pub struct ValkeyStore {
    endpoint: Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    engine: Engine,
    /// The endpoint's pooled connection, looked up once (not per decision).
    slot: Arc<Mutex<Slot>>,
}

impl std::fmt::Debug for ValkeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyStore")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .field("retry_interval", &self.retry_interval)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl ValkeyStore {
    pub fn new(
        endpoint: Endpoint,
        timeout: Duration,
        retry_interval: Duration,
        engine: Engine,
    ) -> Self {
        let slot = slot(&endpoint, Pool::Decisions);
        Self {
            endpoint,
            timeout,
            retry_interval,
            engine,
            slot,
        }
    }

    fn call<T>(
        &self,
        op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, StoreError> {
        with_connection(&self.endpoint, self.timeout, self.retry_interval, op)
    }
}

/// The engine of this process's last decision on any endpoint (for `phpinfo()`): 0 none
/// yet, [`LUA`] or [`MODULE`].
static LAST_ENGINE: AtomicU8 = AtomicU8::new(0);
const LUA: u8 = 1;
const MODULE: u8 = 2;

fn engine_name(engine: u8) -> Option<&'static str> {
    match engine {
        LUA => Some("lua"),
        MODULE => Some("module"),
        _ => None,
    }
}

/// Which engine made this process's last decision: "module", "lua", or none yet.
pub fn last_engine() -> Option<&'static str> {
    engine_name(LAST_ENGINE.load(Ordering::Relaxed))
}

/// Records that `engine` made a decision, for the connection (`health()`) and the process
/// (`phpinfo()`), only when it answered: a failed call decided nothing.
fn decided<T, E>(by: &mut Option<&'static str>, engine: u8, reply: Result<T, E>) -> Result<T, E> {
    if reply.is_ok() {
        *by = engine_name(engine);
        LAST_ENGINE.store(engine, Ordering::Relaxed);
    }
    reply
}

impl Store for ValkeyStore {
    /// With `engine = auto`, the module where the connection's server has it (asked once
    /// per connection), the script elsewhere, and the script at once when a node answers
    /// that it does not know `CG.DECIDE` (a cluster half upgraded, a node restarted
    /// without the module). With `module`, a server without it cannot decide.
    fn decide(&self, call: &DecideCall<'_>) -> Result<Vec<i64>, StoreError> {
        let engine = self.engine;
        // On one server the command is packed here, in one buffer (a cluster connection
        // routes a `Cmd` by its keys, so it gets one).
        let packed = (!self.endpoint.is_cluster()).then(|| pack_native(call));
        let result = with_slot(
            &self.slot,
            &self.endpoint,
            self.timeout,
            self.retry_interval,
            |c, state| {
                let module = match engine {
                    Engine::Lua => false,
                    Engine::Module => true,
                    Engine::Auto => state.module.has(c)?,
                };
                if module {
                    let reply = match &packed {
                        Some(bytes) => c
                            .req_packed_command(bytes)
                            .and_then(|v| v.extract_error())
                            .and_then(|v| Ok(redis::from_redis_value::<Vec<i64>>(v)?)),
                        None => native(call).query::<Vec<i64>>(c),
                    };
                    match reply {
                        Err(e) if engine == Engine::Auto && is_unknown_command(&e) => {
                            state.module.lost();
                        }
                        other => return decided(state.decided_by, MODULE, other),
                    }
                }
                let reply = invocation(call, &DECIDE).invoke::<Vec<i64>>(c);
                decided(state.decided_by, LUA, reply)
            },
        );
        let result = result.map_err(|e| match e {
            StoreError::Failed { cause, retry_in } if cause.contains("unknown command") => {
                StoreError::Failed {
                    cause: format!(
                        "engine = module, but the checkout_guard module is not loaded in Valkey ({cause})"
                    ),
                    retry_in,
                }
            }
            other => other,
        });
        self.slot.lock().decisions[engine_index(engine)].record(&result);
        result
    }

    fn read_limits(&self, keys: &Keys) -> Result<Stored, StoreError> {
        type Reply = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, String);
        let (version, fields, error): Reply =
            self.call(|c| READ.key(keys.limits()).key(keys.limits_version()).invoke(c))?;
        Ok(Stored {
            version,
            fields,
            error: (!error.is_empty()).then_some(error),
        })
    }

    fn mark_hot(&self, key: &[u8], ttl_seconds: i64) -> Result<(), StoreError> {
        let mut cmd = redis::Cmd::new();
        for a in mark_hot_command(key, ttl_seconds) {
            cmd.arg(a);
        }
        self.call(|c| cmd.query::<()>(c))
    }

    fn unmark_hot(&self, key: &[u8]) -> Result<(), StoreError> {
        self.call(|c| redis::cmd("DEL").arg(key).query::<()>(c))
    }

    fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.call(|c| redis::cmd("EXISTS").arg(key).query::<bool>(c))
    }

    /// A script step at a time (SCAN + UNLINK inside Valkey, 1000 keys per step) routed by
    /// `routing_key`, so on a cluster it runs on the node holding the limiter's slot, and
    /// no step blocks Valkey for long.
    fn reset(&self, routing_key: &[u8], pattern: &[u8]) -> Result<(), StoreError> {
        self.call(|c| {
            let mut cursor = b"0".to_vec();
            loop {
                let (next, _removed): (Vec<u8>, i64) =
                    RESET.key(routing_key).arg(&cursor).arg(pattern).invoke(c)?;
                if next == b"0" {
                    return Ok(());
                }
                cursor = next;
            }
        })
    }

    fn health(&self, ping_now: bool, cluster_key: &[u8]) -> Health {
        let engine = Some(self.engine);
        if ping_now {
            ping_of(
                &self.endpoint,
                self.timeout,
                self.retry_interval,
                cluster_key,
                engine,
            )
        } else {
            status_of(&self.endpoint, self.timeout, engine)
        }
    }
}

/// [`native`], packed as it goes on the wire (RESP), in one buffer of the exact size.
fn pack_native(call: &DecideCall<'_>) -> Vec<u8> {
    const NAME: &[u8] = b"CG.DECIDE";
    let keys = call.keys();
    let args = call.argv();
    let count = 1 + keys.len() + args.len();
    let bulk = |len: usize| 1 + decimal_len(len) + 2 + len + 2;
    let size = 1
        + decimal_len(count)
        + 2
        + bulk(NAME.len())
        + keys.iter().map(|k| bulk(k.len())).sum::<usize>()
        + args.iter().map(|a| bulk(a.len())).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.push(b'*');
    push_decimal(&mut out, count);
    out.extend_from_slice(b"\r\n");
    let mut put = |bytes: &[u8]| {
        out.push(b'$');
        push_decimal(&mut out, bytes.len());
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(bytes);
        out.extend_from_slice(b"\r\n");
    };
    put(NAME);
    for k in keys {
        put(k);
    }
    for a in &args {
        put(a);
    }
    debug_assert_eq!(out.len(), size);
    out
}

fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

fn push_decimal(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// `CG.DECIDE` with `call`'s keys and arguments (the script's KEYS then ARGV).
fn native(call: &DecideCall<'_>) -> redis::Cmd {
    let mut cmd = redis::cmd("CG.DECIDE");
    for k in call.keys() {
        cmd.arg(k);
    }
    for a in call.args() {
        cmd.arg(a.as_ref());
    }
    cmd
}

/// Whether the server has `CG.DECIDE` (`COMMAND INFO` answers nil for an unknown
/// command; on a cluster, the node asked; a node without it is found by its answer). An
/// error reply (`COMMAND` disabled, as on some managed services) counts as no: the script
/// works everywhere. A connection that broke or timed out is an error: its stream may be
/// out of step, so the call fails (or is retried on a new connection) as any other.
fn has_module(c: &mut dyn ConnectionLike) -> RedisResult<bool> {
    match redis::cmd("COMMAND")
        .arg("INFO")
        .arg("CG.DECIDE")
        .query::<Vec<redis::Value>>(c)
    {
        Ok(v) => Ok(v.first().is_some_and(|i| !matches!(i, redis::Value::Nil))),
        Err(e) if is_reply_error(&e) || !e.is_io_error() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The module cannot be used on this connection: the server does not know the command
/// (not loaded, unloaded, a node not upgraded), the connection's ACL user may not run it
/// (`CG.DECIDE` is in no ACL category a user given `+@write` would have), or it is
/// another build's, with another number of arguments (a rolling upgrade). The script,
/// sent by this build, decides then.
fn is_unknown_command(e: &RedisError) -> bool {
    let text = e.to_string().to_ascii_lowercase();
    text.contains("unknown command")
        || text.contains("noperm")
        || text.contains("wrong number of arguments")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The command packed by hand is byte for byte what redis-rs packs from a `Cmd`.
    #[test]
    fn the_packed_command_is_the_cmds() {
        use checkout_guard_model::{AutoHotArgs, BucketSet, BucketSpec, LaneArgs, ShopKeys};
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
        };
        let lanes = LaneArgs::new(&set);
        let none = AutoHotArgs::new(None);
        for (shop, tokens, wait) in [
            (&b"s"[..], 1, 0),
            (b"s\x00p\r\n", 12, 250_000),
            (b"", 1_000_000_000, 10_000_000),
        ] {
            let keys = ShopKeys::new(&Keys::new("n"), shop);
            let call = DecideCall {
                keys: keys.decide_keys(),
                tokens,
                static_hot: true,
                lanes: &lanes,
                version: b"3-ab-17",
                shop,
                auto_hot: &none,
                settings: "global=30/7.5",
                peek: false,
                max_wait_us: wait,
            };
            assert_eq!(pack_native(&call), native(&call).get_packed_command());
        }
    }

    /// The model checks URLs without a Valkey client; the connection layer parses them
    /// again when it connects. The two must agree, or a URL the constructor accepted would
    /// fail at every call (or one redis-rs takes would be refused).
    #[test]
    fn the_models_url_check_agrees_with_the_connection_layer() {
        let urls = [
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1",
            "redis://localhost:6379/0",
            "redis://localhost:6379/15",
            "redis://localhost:6379/x",
            "redis://localhost:6379/-1",
            "redis://localhost:99999",
            "redis://localhost:0",
            "redis://:pw@localhost:6379",
            "redis://user:p%40ss@localhost:6379/2",
            "redis://user@localhost",
            "redis://[::1]:6379",
            "redis://[::1",
            "redis://",
            "redis:///3",
            "redis://host:6379/1?protocol=resp3",
            "redis://host:6379/1?protocol=resp9",
            "redis://host:6379/?protocol=3",
            "redis://0.0.0.0:6379",
            "redis://[::]:6379",
            "redis://u:%ff@host",
            "redis://%ff:pw@host",
            "redis://u:%e2%82%ac@host",
            "unix:///tmp/valkey.sock?protocol=resp3&db=1",
            "unix:///tmp/valkey.sock?protocol=x",
            "valkey+unix:///tmp/valkey.sock",
            "unix://host/tmp/valkey.sock",
            "redis://host#frag",
            "redis://host:6379/1?db=2",
            "redis://host:6379/1/2",
            "redis://ho st:6379",
            "valkey://localhost:7000",
            "unix:///tmp/valkey.sock",
            "unix:///tmp/valkey.sock?db=3",
            "unix:///tmp/valkey.sock?db=x",
            "unix:///tmp/valkey.sock?user=u&pass=p",
            "redis+unix:///tmp/valkey.sock",
            "unix://",
            "unix:///",
            "http://127.0.0.1",
            "127.0.0.1:6379",
            "",
            "redis:127.0.0.1",
            "valkey+cluster://127.0.0.1:7000,127.0.0.1:7001",
            "valkey+cluster://u:p@127.0.0.1:7000",
        ];
        // And every combination of these parts.
        let mut all: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        for scheme in [
            "redis://",
            "valkey://",
            "unix://",
            "redis+unix://",
            "rediss://",
            "x://",
        ] {
            for auth in ["", "u@", ":p@", "u:p%zz@", "u:%c3%28@"] {
                for host in ["", "h", "127.0.0.1", "[::1]", "0.0.0.0", "/tmp/s.sock"] {
                    for port in ["", ":1", ":0", ":65536", ":x"] {
                        for tail in [
                            "",
                            "/",
                            "/2",
                            "/a",
                            "?db=1",
                            "?db=z",
                            "?protocol=2",
                            "/1?protocol=4",
                        ] {
                            all.push(format!("{scheme}{auth}{host}{port}{tail}"));
                        }
                    }
                }
            }
        }
        for url in all.iter().map(String::as_str) {
            let model = Endpoint::parse(url);
            let client = model.as_ref().map(|e| match e.target() {
                Target::Single(u) => connection_info(u).map(drop),
                Target::Cluster(seeds) => {
                    seeds.iter().try_for_each(|s| connection_info(s).map(drop))
                }
            });
            if let Ok(Err(e)) = &client {
                panic!("{url}: accepted by the model, refused when connecting: {e}");
            }
            // What redis-rs alone accepts (with valkey:// as redis://), the model accepts.
            let raw = url.replacen("valkey://", "redis://", 1);
            if !url.contains("+cluster") && raw.as_str().into_connection_info().is_ok() {
                assert!(
                    model.is_ok(),
                    "{url}: redis-rs takes it, the model refuses: {model:?}"
                );
            }
        }
    }
}
