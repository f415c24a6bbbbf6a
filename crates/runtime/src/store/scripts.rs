//! The scripts the worker runs, as Valkey runs them: each hashed once per process and sent
//! by EVALSHA; on `NOSCRIPT` (a restarted or flushed Valkey) redis-rs loads it with
//! `SCRIPT LOAD` and sends the EVALSHA again, within the same call.

use once_cell::sync::Lazy;

use checkout_guard_model::call;
use checkout_guard_model::DecideCall;

/// The decision script's source.
pub(super) static DECIDE_SOURCE: Lazy<String> = Lazy::new(call::decide_source);
/// The decision script.
pub(super) static DECIDE: Lazy<redis::Script> = Lazy::new(|| redis::Script::new(&DECIDE_SOURCE));
/// The live limits' version and hash, read together.
pub(super) static READ: Lazy<redis::Script> =
    Lazy::new(|| redis::Script::new(&call::read_limits_source()));
/// A throttling answer of the provider (a write script: the adaptive budget's state and
/// the last throttling answer).
pub(super) static FEEDBACK: Lazy<redis::Script> =
    Lazy::new(|| redis::Script::new(&call::feedback_source()));
/// The adaptive budget's state and last throttling answer, with Valkey's clock (µs), for
/// `health()`: read only, so it runs on a replica too.
pub(super) static READ_ADAPT: Lazy<redis::Script> = Lazy::new(|| {
    redis::Script::new(
        "#!lua flags=no-writes\n\
         local t = redis.call('TIME')\n\
         return {redis.call('GET', KEYS[1]) or '', redis.call('GET', KEYS[2]) or '', \
         tonumber(t[1]) * 1000000 + tonumber(t[2])}",
    )
});
/// One step of a reset (SCAN + UNLINK inside Valkey).
pub(super) static RESET: Lazy<redis::Script> =
    Lazy::new(|| redis::Script::new(&call::reset_step_source()));

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

/// `call` as one pipelined round trip of `SCRIPT LOAD` (the decision script) and its
/// EVALSHA: whether or not the server has the script cached, the EVALSHA finds it.
/// `SCRIPT LOAD` of a script the server has is a hash lookup.
pub(super) fn load_and_invoke(call: &DecideCall<'_>) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("SCRIPT").arg("LOAD").arg(DECIDE_SOURCE.as_str());
    let keys = call.keys();
    let evalsha = pipe.cmd("EVALSHA").arg(DECIDE.get_hash()).arg(keys.len());
    for k in keys {
        evalsha.arg(k);
    }
    for a in call.args() {
        evalsha.arg(a.as_ref());
    }
    pipe
}
