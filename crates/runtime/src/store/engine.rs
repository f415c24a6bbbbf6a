//! Which engine decides: the native module's `CG.DECIDE` or the decision script, per
//! connection (`engine = auto` asks the server once, and again after
//! [`MODULE_RECHECK`] while it answers no, on the caller's [`Clock`]) and per process
//! (`phpinfo()`'s last engine).

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use crate::clock::Clock;

use checkout_guard_connection::errors::is_reply_error;
use checkout_guard_connection::errors::{is_denied_by_acl, is_missing_command, is_wrong_arity};
use redis::{ConnectionLike, RedisError, RedisResult};

use checkout_guard_config::Engine;
use checkout_guard_model::DecideCall;

use super::native::{native, pack_evalsha, pack_native};
use super::StoreError;
use checkout_guard_connection::scripts::{command, invocation, invoke, load_and_invoke, DECIDE};
use checkout_guard_model::cmd::release::{self, ReleaseCall};

/// See [`checkout_guard_config::options::MODULE_RECHECK_SECONDS`].
pub const MODULE_RECHECK: Duration =
    Duration::from_secs(checkout_guard_config::options::MODULE_RECHECK_SECONDS);

/// What `engine = auto` knows of the connection's server: whether it has the module, and
/// when that was last asked (`COMMAND INFO`, only when [`MODULE_RECHECK`] has passed
/// since it answered no; never while it answers yes).
#[derive(Default)]
pub struct ModuleProbe {
    has: Option<bool>,
    /// When the server was last asked, or found without the module ([`Clock::monotonic_ns`]).
    asked_at: Option<u64>,
    /// A script decision was answered on this connection: its server had the decision
    /// script then (see [`decide`]).
    script_seen: bool,
}

impl ModuleProbe {
    /// Whether to send `CG.DECIDE`; asks the server when not known or known to be no for
    /// [`MODULE_RECHECK`]. An error reply to the question counts as no (the script works
    /// everywhere); a broken connection is the call's failure.
    /// `clock` is the caller's.
    fn has(&mut self, c: &mut dyn ConnectionLike, clock: &dyn Clock) -> RedisResult<bool> {
        match self.has {
            Some(true) => return Ok(true),
            Some(false) => {
                let recheck_ns = MODULE_RECHECK.as_nanos() as u64;
                let now = clock.monotonic_ns();
                if self
                    .asked_at
                    .is_some_and(|t| now.saturating_sub(t) < recheck_ns)
                {
                    return Ok(false);
                }
            }
            None => {}
        }
        let has = has_module(c)?;
        self.has = Some(has);
        self.asked_at = Some(clock.monotonic_ns());
        Ok(has)
    }

    /// The server answered that `CG.DECIDE` cannot be used: the script until the next
    /// recheck.
    fn lost(&mut self, clock: &dyn Clock) {
        self.has = Some(false);
        self.asked_at = Some(clock.monotonic_ns());
    }
}

/// What a call knows of its connection's engine: whether the server has the module (see
/// [`ModuleProbe`]) and which engine decided last on the endpoint; and the caller's clock,
/// which the module's recheck runs on.
pub struct EngineState<'a> {
    pub module: &'a mut ModuleProbe,
    pub decided_by: &'a mut Option<&'static str>,
    pub clock: &'a dyn Clock,
}

/// The index of `engine`'s decisions in a pooled connection's record.
pub(super) fn engine_index(engine: Engine) -> usize {
    match engine {
        Engine::Auto => 0,
        Engine::Lua => 1,
        Engine::Module => 2,
    }
}

/// One decision on `c` with `engine`: with `auto`, the module where the connection's
/// server has it (asked once per connection), the script elsewhere, and the script at once
/// when a node answers that `CG.DECIDE` cannot be used (a cluster half upgraded, a node
/// restarted without the module). With `module`, a server without it cannot decide.
/// `one_server`: the call is packed by hand for the engine that decides
/// ([`pack_native`], [`pack_evalsha`]); none for a cluster connection, which routes a
/// `Cmd` by its keys.
pub(super) fn decide(
    engine: Engine,
    call: &DecideCall<'_>,
    one_server: bool,
    c: &mut dyn ConnectionLike,
    state: EngineState<'_>,
) -> RedisResult<Vec<i64>> {
    let module = match engine {
        Engine::Lua => false,
        Engine::Module => true,
        Engine::Auto => state.module.has(c, state.clock)?,
    };
    if module {
        let reply = match one_server {
            true => c
                .req_packed_command(&pack_native(call))
                .and_then(|v| v.extract_error())
                .and_then(|v| Ok(redis::from_redis_value::<Vec<i64>>(v)?)),
            false => native(call).query::<Vec<i64>>(c),
        };
        match reply {
            Err(e) if engine == Engine::Auto && module_unusable(&e) => {
                state.module.lost(state.clock)
            }
            other => return decided(state.decided_by, MODULE, other),
        }
    }
    // The first script decision on a connection to one server loads the script in the
    // same round trip (SCRIPT LOAD + EVALSHA pipelined): a new connection to a Valkey that
    // has not got it (restarted, flushed, new) then costs what it costs on one that has,
    // instead of two round trips more (EVALSHA answered NOSCRIPT, SCRIPT LOAD, EVALSHA
    // again). On a slow link those two round trips made the first process to reach a
    // fresh Valkey time out where the next did not (issue 35 item 5, blamed on the stream
    // sink that process had on). A cluster connection routes a pipeline by its first
    // command (SCRIPT LOAD has no key): there, redis-rs's EVALSHA-then-load.
    let reply = match one_server {
        true if !state.module.script_seen => load_and_decide(call, c),
        // One server: the EVALSHA packed by hand (`NOSCRIPT`: loaded and asked again in
        // one round trip, as on a new connection).
        true => match c
            .req_packed_command(&pack_evalsha(DECIDE.get_hash(), call))
            .and_then(|v| v.extract_error())
        {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                load_and_decide(call, c)
            }
            other => other.and_then(|v| Ok(redis::from_redis_value::<Vec<i64>>(v)?)),
        },
        false => invocation(call, &DECIDE).invoke::<Vec<i64>>(c),
    };
    if reply.is_ok() {
        state.module.script_seen = true;
    }
    decided(state.decided_by, LUA, reply)
}

/// [`load_and_invoke`]'s round trip: the EVALSHA's reply is the decision. A refused
/// `SCRIPT LOAD` (an ACL without it) is left alone: the EVALSHA's own reply says whether
/// the script was there.
/// A lease's release on the engine that decides: `CG.RELEASE` where the module decides
/// (`module`, or `auto` on a server that has it: known from the decisions, no round trip
/// more), the release script elsewhere, and the script when the module cannot release (a
/// module older than the leases, an ACL without `+cg.release`): the command was refused
/// unrun, so the script runs it once.
pub(super) fn release(
    engine: Engine,
    call: &ReleaseCall<'_>,
    c: &mut dyn ConnectionLike,
    state: EngineState<'_>,
) -> RedisResult<Vec<i64>> {
    let module = match engine {
        Engine::Lua => false,
        Engine::Module => true,
        Engine::Auto => state.module.has(c, state.clock)?,
    };
    if module {
        match command(release::MODULE_COMMAND, call).query::<Vec<i64>>(c) {
            Err(e) if module_unusable(&e) => {}
            other => return other,
        }
    }
    invoke(call, c)
}

fn load_and_decide(call: &DecideCall<'_>, c: &mut dyn ConnectionLike) -> RedisResult<Vec<i64>> {
    let pipe = load_and_invoke(call);
    let mut replies = c.req_packed_commands(&pipe.get_packed_pipeline(), 0, 2)?;
    let reply = replies
        .pop()
        .filter(|_| replies.len() == 1)
        .ok_or_else(|| {
            RedisError::from((
                redis::ErrorKind::Parse,
                "SCRIPT LOAD + EVALSHA: not two replies",
            ))
        })?;
    Ok(redis::from_redis_value(reply.extract_error()?)?)
}

/// A decision's failure with `engine = module` on a server that does not know the
/// command says what to do about it.
pub(super) fn explain(e: StoreError) -> StoreError {
    match e {
        StoreError::Failed { cause, retry_in } if cause.contains("unknown command") => {
            StoreError::Failed {
                cause: format!(
                    "engine = module, but the checkout_guard module is not loaded in Valkey ({cause})"
                ),
                retry_in,
            }
        }
        other => other,
    }
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
fn module_unusable(e: &RedisError) -> bool {
    is_missing_command(e) || is_denied_by_acl(e) || is_wrong_arity(e)
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
        THREAD_ENGINE.with(|e| e.set(engine));
    }
    reply
}

std::thread_local! {
    /// The engine of this thread's last decision: under threads (ZTS) another thread's
    /// decision may have set [`LAST_ENGINE`] since.
    static THREAD_ENGINE: std::cell::Cell<u8> = const { std::cell::Cell::new(0) };
}

/// Which engine made this thread's last decision ("module", "lua", or none yet): right
/// after a decision, the engine that made it (the live counters' `engine` label).
pub fn thread_last_engine() -> Option<&'static str> {
    engine_name(THREAD_ENGINE.with(std::cell::Cell::get))
}
