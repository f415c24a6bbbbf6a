//! `CG.DECIDE <8 keys> <19 arguments> [<now µs>]`: the arguments read in place, the
//! decision made on [`ValkeyKeys`], its writes applied, the reply sent.
//!
//! A panic never crosses into Valkey (it would abort the server every worker decides
//! on): the command's body runs under `catch_unwind`, and a panic becomes the error reply
//! `ERR checkout-guard internal error: <message>`. The keys are as they were: the
//! decision only records its writes, which are applied after it returned (see
//! [`crate::keyspace`]), and unwinding drops what the call opened and created (key
//! handles closed, strings and the user freed). The replies are sent after the body
//! returned, so a panic never leaves a reply half-sent.

use std::ffi::{c_int, c_long, c_longlong};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use checkout_guard_model::cmd::decide::{self, ReceivedCall};
use checkout_guard_model::server::{decide_on, ServerReply};
use checkout_guard_model::DecideCall;
use valkey_module::raw;

use crate::ffi::{self, Ctx, Str};
use crate::keyspace::{Arg, ValkeyKeys, KEYS};

/// Loaded with the argument `test-clock` (tests only): `CG.DECIDE` takes one more
/// argument, the time to decide at (µs), as the script's test variant does, and keys live
/// an hour longer, so the server's own clock never expires what the test still reads.
pub static TEST_CLOCK: AtomicBool = AtomicBool::new(false);
const TEST_SLACK_MS: i64 = decide::TEST_KEY_SLACK_MS;

/// Loaded with `test-panic` next to `test-clock` (tests only): a decision for the shop
/// [`TEST_PANIC_SHOP`] panics when it asks for its settings write, after its bucket
/// writes were recorded (what a bug in the model would do halfway through a decision).
pub static TEST_PANIC: AtomicBool = AtomicBool::new(false);
pub const TEST_PANIC_SHOP: &[u8] = b"checkout-guard-test-panic";

/// The call's arguments after the command name: keys, arguments, the test clock.
const MAX_ARGS: usize = KEYS + DecideCall::ARGS + 1;
/// Position of the shop among the arguments after the keys (from the contract table).
const SHOP_ARG: usize = decide::args::SHOP;

/// What the command answers.
enum Reply {
    Ints(ServerReply),
    Error(String),
    WrongArity,
}

/// `CG.DECIDE`, registered with Valkey directly: the arguments are read where Valkey holds
/// them.
///
/// # Safety
/// Called by Valkey only: `ctx` is the command's context, `argv` holds `argc` live
/// strings for the whole call.
pub unsafe extern "C" fn cg_decide(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    // SAFETY: Valkey's contract, passed on.
    let reply = catch_unwind(AssertUnwindSafe(|| unsafe { decide(ctx, argv, argc) }))
        .unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            Reply::Error(format!("ERR checkout-guard internal error: {what}"))
        });
    // SAFETY: the command's context.
    unsafe {
        match reply {
            Reply::Ints(reply) => {
                let ints = reply.as_slice();
                ffi::reply_with_array(ctx, ints.len() as c_long);
                for &i in ints {
                    ffi::reply_with_long_long(ctx, i as c_longlong);
                }
                raw::REDISMODULE_OK as c_int
            }
            Reply::Error(message) => reply_error(ctx, &message),
            Reply::WrongArity => ffi::wrong_arity(ctx),
        }
    }
}

/// The command's body: everything that can panic.
///
/// # Safety
/// As [`cg_decide`].
unsafe fn decide(ctx: Ctx, argv: *mut Str, argc: c_int) -> Reply {
    let test_clock = TEST_CLOCK.load(Ordering::Relaxed);
    let want = 1 + KEYS + DecideCall::ARGS + usize::from(test_clock);
    if argv.is_null() || usize::try_from(argc) != Ok(want) {
        return Reply::WrongArity;
    }
    // SAFETY: Valkey passes `argc` live strings, kept for the call.
    let argv: &[Str] = unsafe { std::slice::from_raw_parts(argv, want) };
    // SAFETY: each a live argument, unchanged for the call (this function's borrow).
    let arg = |i: usize| unsafe { Arg::new(argv[i]) };
    let mut args: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
    for (i, slot) in args.iter_mut().enumerate().take(want - 1) {
        *slot = arg(1 + i).bytes();
    }
    let n = KEYS + DecideCall::ARGS;
    let call = match ReceivedCall::parse(&args[..n]) {
        Ok(call) => call,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    // SAFETY: called from a command.
    let now_us = unsafe { ffi::cached_microseconds() };
    let (now, slack_ms) = match test_clock {
        true => match std::str::from_utf8(args[KEYS + decide::TEST_NOW_ARG])
            .ok()
            .and_then(|t| t.parse().ok())
        {
            Some(t) => (t, TEST_SLACK_MS),
            None => return Reply::Error("ERR the test clock must be an integer (µs)".into()),
        },
        false => (now_us, 0),
    };
    let shop = arg(1 + KEYS + SHOP_ARG);
    let mut keys = ValkeyKeys::new(
        ctx,
        std::array::from_fn(|i| arg(1 + i)),
        shop,
        now_us,
        slack_ms,
    );
    if test_clock && TEST_PANIC.load(Ordering::Relaxed) && shop.bytes() == TEST_PANIC_SHOP {
        keys.panic_at_set_px();
    }
    match decide_on(&mut keys, &call, now) {
        Ok(reply) => {
            keys.apply();
            Reply::Ints(reply)
        }
        Err(e) => Reply::Error(e),
    }
}

/// An error reply: one line of ASCII (a RESP error is one line; a client reads it as text,
/// so bytes of an argument quoted in it, e.g. U+FFFD for bytes that are not UTF-8, are
/// escaped: `\u{fffd}`).
///
/// # Safety
/// The command's context.
unsafe fn reply_error(ctx: Ctx, message: &str) -> c_int {
    let mut text = String::with_capacity(message.len());
    for ch in message.chars() {
        match ch {
            ' '..='~' => text.push(ch),
            _ => text.push_str(&ch.escape_unicode().to_string()),
        }
    }
    let msg = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: the command's context; `msg` is NUL-terminated.
    unsafe { ffi::reply_with_error(ctx, msg.as_ptr()) }
}
