//! checkout-guard's Valkey module: `CG.DECIDE`, the limiter's decision as a native command.
//!
//! `CG.DECIDE <7 keys> <17 arguments>` takes exactly the decision script's KEYS then ARGV
//! (built by the model's `DecideCall`, the one encoder) and answers the script's reply.
//! The decision is `model::server::decide_on`, the Rust twin the Lua script is held to
//! call for call, on Valkey's clock (the command's cached time, as `TIME` in a script).
//!
//! In a deployment: the keys are declared (positions 1 to 7: cluster routing and ACL key
//! permissions); the command is flagged `write deny-oom`, so a replica refuses it
//! (`READONLY`) and a Valkey over `maxmemory` refuses it, as the `#!lua` script is
//! refused; it is never replicated as itself (a replica, or an AOF replay, would decide
//! again on another clock): each write is replicated as its effect, with absolute expiry
//! times. Everything that can fail (an unreadable bucket, bad arguments) fails before the
//! first write, so an error leaves the keys as they were.
//!
//! Load with `valkey-server --loadmodule target/release/libcheckout_guard_valkey.so` or
//! `loadmodule` in valkey.conf.

use std::sync::atomic::{AtomicBool, Ordering};

use checkout_guard_model::server::{decide_on, Keyspace, ReceivedCall};
use checkout_guard_model::DecideCall;
use valkey_module::alloc::ValkeyAlloc;
use valkey_module::key::ValkeyKeyWritable;
use valkey_module::{
    raw, valkey_module, CallOptionsBuilder, CallReply, CallResult, Context, KeyType, ValkeyError,
    ValkeyResult, ValkeyString, ValkeyValue,
};

/// Loaded with the argument `test-clock` (tests only): `CG.DECIDE` takes one more
/// argument, the time to decide at (µs), as the script's test variant does, and keys live
/// an hour longer, so the server's own clock never expires what the test still reads.
static TEST_CLOCK: AtomicBool = AtomicBool::new(false);
const TEST_SLACK_MS: i64 = 3_600_000;

/// The decision's reads and writes on Valkey's keys, each write replicated as its effect.
struct ValkeyKeys<'c> {
    ctx: &'c Context,
    /// Valkey's time of this command, in ms (absolute expiry times for replication).
    now_ms: i64,
    /// Added to every bucket's expiry (test clock only).
    slack_ms: i64,
}

impl ValkeyKeys<'_> {
    /// A key name as Valkey holds it: any bytes, NUL included (`create_string` would
    /// panic on a NUL and abort the server).
    fn name(&self, key: &[u8]) -> ValkeyString {
        ValkeyString::create_from_slice(self.ctx.get_raw(), key)
    }

    /// A command through the command table, its reply unconverted (binary-safe).
    fn call(&self, command: &str, args: &[&[u8]]) -> CallResult<'static> {
        self.ctx
            .call_ext::<_, CallResult>(command, &CallOptionsBuilder::new().build(), args)
    }

    fn replicate(&self, command: &str, args: &[&[u8]]) {
        self.ctx.replicate(command, args);
    }

    fn writable(&self, key: &[u8]) -> ValkeyKeyWritable {
        self.ctx.open_key_writable(&self.name(key))
    }
}

impl Keyspace for ValkeyKeys<'_> {
    fn get_string(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        let k = self.ctx.open_key(&self.name(key));
        if k.key_type() != KeyType::String {
            return None;
        }
        k.read().ok().flatten().map(<[u8]>::to_vec)
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        match self.call("PTTL", &[key]) {
            Ok(CallReply::I64(ms)) => ms.to_i64(),
            _ => -2,
        }
    }

    fn hash_ints(&mut self, key: &[u8], fields: [&[u8]; 2]) -> Result<[i64; 2], String> {
        // HMGET through the command table: binary-safe fields, and WRONGTYPE on a key of
        // another type, as the script meets it. Values are read as bytes (`ctx.call`'s
        // conversion would panic on a value that is not UTF-8).
        let reply = self
            .call("HMGET", &[key, fields[0], fields[1]])
            .map_err(|e| e.to_string())?;
        let CallReply::Array(values) = reply else {
            return Err("unexpected HMGET reply".into());
        };
        let mut out = [0i64; 2];
        for (slot, v) in out.iter_mut().zip(values.iter()) {
            if let Ok(CallReply::String(s)) = v {
                *slot = std::str::from_utf8(s.as_bytes())
                    .ok()
                    .and_then(|t| t.trim().parse().ok())
                    .unwrap_or(0);
            }
        }
        Ok(out)
    }

    fn set_bucket(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.set_px(key, value, px_ms + self.slack_ms);
    }

    fn set_px(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        let at = (self.now_ms + px_ms).to_string();
        match std::str::from_utf8(value)
            .ok()
            .filter(|t| !t.contains('\0'))
        {
            Some(text) => {
                let k = self.writable(key);
                let _ = k.write(text);
                let _ = k.set_expire(std::time::Duration::from_millis(px_ms.max(1) as u64));
            }
            // Not text, or with a NUL, which the key API's `write` cannot take: through the
            // command table, binary-safe.
            None => {
                let _ = self.call("SET", &[key, value, b"PXAT", at.as_bytes()]);
            }
        }
        self.replicate("SET", &[key, value, b"PXAT", at.as_bytes()]);
    }

    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], &[u8])]) {
        let mut args: Vec<&[u8]> = vec![key];
        for (f, v) in pairs {
            args.push(f);
            args.push(v);
        }
        let _ = self.call("HSET", &args);
        self.replicate("HSET", &args);
    }

    fn pexpire(&mut self, key: &[u8], ms: i64) {
        let at = (self.now_ms + ms).to_string();
        let _ = self.call("PEXPIREAT", &[key, at.as_bytes()]);
        self.replicate("PEXPIREAT", &[key, at.as_bytes()]);
    }
}

/// Valkey's time of the command, in µs.
fn now_us() -> i64 {
    // SAFETY: the API is filled in when the module loads (its OnLoad ran before any command).
    unsafe { raw::RedisModule_CachedMicroseconds.expect("CachedMicroseconds")() }
}

fn cg_decide(ctx: &Context, args: Vec<ValkeyString>) -> ValkeyResult {
    let test_clock = TEST_CLOCK.load(Ordering::Relaxed);
    if args.len() != 1 + 7 + DecideCall::ARGS + usize::from(test_clock) {
        return Err(ValkeyError::WrongArity);
    }
    let raw: Vec<&[u8]> = args[1..].iter().map(|a| a.as_slice()).collect();
    let call = ReceivedCall::parse(&raw[..7 + DecideCall::ARGS])
        .map_err(|e| ValkeyError::String(format!("ERR {e}")))?;
    let (now, slack_ms) = match test_clock {
        true => (
            args[1 + 7 + DecideCall::ARGS].parse_integer()?,
            TEST_SLACK_MS,
        ),
        false => (now_us(), 0),
    };
    let mut keys = ValkeyKeys {
        ctx,
        now_ms: now_us().div_euclid(1000),
        slack_ms,
    };
    let reply = decide_on(&mut keys, &call, now).map_err(ValkeyError::String)?;
    Ok(ValkeyValue::Array(
        reply.into_iter().map(ValkeyValue::Integer).collect(),
    ))
}

fn init(_ctx: &Context, args: &[ValkeyString]) -> valkey_module::Status {
    if args.iter().any(|a| a.as_slice() == b"test-clock") {
        TEST_CLOCK.store(true, Ordering::Relaxed);
    }
    valkey_module::Status::Ok
}

valkey_module! {
    name: "checkout_guard",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [
        ["CG.DECIDE", cg_decide, "write deny-oom fast", 1, 7, 1],
    ],
}
