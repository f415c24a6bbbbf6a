//! The model's commands (`checkout_guard_model::cmd`, one home per command) as redis-rs
//! sends them: one [`redis::Script`] per script, built once per process from its home and
//! shared by the worker and the CLI, and the one way a call becomes a redis-rs invocation
//! or command: its KEYS then ARGV from [`keys_then_argv`], never put together by hand.

use std::sync::LazyLock;

use checkout_guard_model::cmd::carry_step::CarryStepCall;
use checkout_guard_model::cmd::decide::DecideCall;
use checkout_guard_model::cmd::feedback::FeedbackCall;
use checkout_guard_model::cmd::hot_scan::HotScanCall;
use checkout_guard_model::cmd::read_adapt::ReadAdaptCall;
use checkout_guard_model::cmd::read_limits::ReadLimitsCall;
use checkout_guard_model::cmd::release::ReleaseCall;
use checkout_guard_model::cmd::reset_step::ResetStepCall;
use checkout_guard_model::cmd::set_limits::SetLimitsCall;
use checkout_guard_model::cmd::{self, keys_then_argv, Call, Item, Part};
use redis::{ConnectionLike, FromRedisValue, RedisResult};

/// The decision script's source (sent with `SCRIPT LOAD` by the worker's first decision
/// on a connection).
pub static DECIDE_SOURCE: LazyLock<String> = LazyLock::new(cmd::decide::source);
/// The decision.
pub static DECIDE: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(&DECIDE_SOURCE));
/// A throttling answer of the provider.
pub static FEEDBACK: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::feedback::source()));
/// The live limits' version and hash, read together.
pub static READ_LIMITS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::read_limits::source()));
/// The adaptive budget's state and last answer, with Valkey's clock.
pub static READ_ADAPT: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::read_adapt::source()));
/// One step of a reset.
pub static RESET_STEP: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::reset_step::source()));
/// A write of live limits (the CLI's `limiter set`).
pub static SET_LIMITS: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::set_limits::source()));
/// One step of carrying the buckets over a live change.
pub static CARRY_STEP: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::carry_step::source()));
/// The end of an in-flight lease.
pub static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::release::source()));
/// One step of the hot shops' scan (`limiter status`).
pub static HOT_SCAN: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(&cmd::hot_scan::source()));

/// A call sent as its command's script.
pub trait Scripted: Call {
    /// The script (one per process).
    fn script() -> &'static redis::Script;
}

macro_rules! scripted {
    ($($call:ident => $script:ident,)*) => {
        $(impl Scripted for $call<'_> {
            fn script() -> &'static redis::Script {
                &$script
            }
        })*
    };
}

scripted! {
    DecideCall => DECIDE,
    FeedbackCall => FEEDBACK,
    ReadLimitsCall => READ_LIMITS,
    ReadAdaptCall => READ_ADAPT,
    ResetStepCall => RESET_STEP,
    SetLimitsCall => SET_LIMITS,
    CarryStepCall => CARRY_STEP,
    HotScanCall => HOT_SCAN,
    ReleaseCall => RELEASE,
}

/// `call` on `script` (its command's, or a test's variant of it): EVALSHA with KEYS and
/// ARGV exactly as the command encodes them (redis-rs sends `SCRIPT LOAD` and the EVALSHA
/// again on `NOSCRIPT`).
pub fn invocation<'s, C: Call>(call: &C, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    for part in keys_then_argv(call) {
        match part {
            Part::Key(k) => inv.key(k),
            Part::Arg(a) => inv.arg(a.as_ref()),
        };
    }
    inv
}

/// `call` on its command's script, the reply read as `T`.
pub fn invoke<C: Scripted, T: FromRedisValue>(
    call: &C,
    c: &mut dyn ConnectionLike,
) -> RedisResult<T> {
    invocation(call, C::script()).invoke(c)
}

/// `call` as the command `name` (the native module's `CG.DECIDE`) with its KEYS then ARGV
/// (a cluster connection routes it by its first key).
pub fn command<C: Call>(name: &str, call: &C) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    for part in keys_then_argv(call) {
        cmd.arg(part.bytes());
    }
    cmd
}

/// `EVALSHA <sha of script> <number of keys> <keys> <args>` of `call` (as many keys as it
/// sends: a decision's depend on its form), appended to `pipe`.
pub fn evalsha<C: Call>(pipe: &mut redis::Pipeline, script: &redis::Script, call: &C) {
    let evalsha = pipe
        .cmd("EVALSHA")
        .arg(script.get_hash())
        .arg(call.encode_keys().count());
    for part in keys_then_argv(call) {
        evalsha.arg(part.bytes());
    }
}

/// `call` as one pipelined round trip of `SCRIPT LOAD` (the decision script) and its
/// EVALSHA: whether or not the server has the script cached, the EVALSHA finds it.
/// `SCRIPT LOAD` of a script the server has is a hash lookup.
pub fn load_and_invoke(call: &DecideCall<'_>) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("SCRIPT").arg("LOAD").arg(DECIDE_SOURCE.as_str());
    evalsha(&mut pipe, &DECIDE, call);
    pipe
}

/// A plain command (e.g. `checkout_guard_model::cmd::mark_hot::mark_hot_command`'s) as
/// redis-rs sends it.
pub fn plain(parts: Vec<Vec<u8>>) -> redis::Cmd {
    let mut cmd = redis::Cmd::new();
    for p in parts {
        cmd.arg(p);
    }
    cmd
}

/// A script's reply (an array) as the model's decoders read it.
pub fn items(reply: Vec<redis::Value>) -> Vec<Item> {
    reply
        .into_iter()
        .map(|v| match v {
            redis::Value::BulkString(b) => Item::Bytes(b),
            redis::Value::SimpleString(s) => Item::Bytes(s.into_bytes()),
            redis::Value::Int(i) => Item::Int(i),
            _ => Item::Other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkout_guard_model::cmd::ALL;

    /// Each shared script is its command's whole source.
    #[test]
    fn each_script_is_its_commands_source() {
        let sources = [
            ("decide", DECIDE.get_hash()),
            ("feedback", FEEDBACK.get_hash()),
            ("read_limits", READ_LIMITS.get_hash()),
            ("read_adapt", READ_ADAPT.get_hash()),
            ("reset_step", RESET_STEP.get_hash()),
            ("set_limits", SET_LIMITS.get_hash()),
            ("carry_step", CARRY_STEP.get_hash()),
            ("hot_scan", HOT_SCAN.get_hash()),
            ("release", RELEASE.get_hash()),
        ];
        assert_eq!(sources.len(), ALL.len(), "a script for every command");
        for (name, hash) in sources {
            let c = ALL.iter().find(|c| c.name == name).unwrap();
            let source = (c.source)();
            assert_eq!(redis::Script::new(&source).get_hash(), hash, "{name}");
        }
    }
}
