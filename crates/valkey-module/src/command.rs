//! `CG.DECIDE <keys> <arguments> [<now µs>]` (4 to 13 keys and 9 to 28 arguments, as the
//! call's form says: `decide::FORMS`) and `CG.RELEASE <four KEYS> <three ARGV>
//! [<now µs>]`: the arguments read in place, the decision (the release) made on
//! [`ValkeyKeys`], its writes applied, the reply sent.
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
use checkout_guard_model::cmd::release;
use checkout_guard_model::server::{decide_on, release_on, ServerReply};
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
/// [`TEST_PANIC_SHOP`] (its mark's key ends with the name) panics when it asks for its settings write, after its bucket
/// writes were recorded (what a bug in the model would do halfway through a decision).
pub static TEST_PANIC: AtomicBool = AtomicBool::new(false);
pub const TEST_PANIC_SHOP: &[u8] = b"checkout-guard-test-panic";

/// The call's arguments after the command name: keys, arguments, the test clock.
const MAX_ARGS: usize = KEYS + DecideCall::ARGS + 1;
/// Position of the shop among the arguments after the keys (from the contract table).
const SHOP_ARG: usize = decide::args::SHOP;

/// `CG.RELEASE`'s keys, arguments, and its arguments after the command name with the test
/// clock's.
const RELEASE_KEYS: usize = release::keys::LEN;
const RELEASE_ARGS: usize = release::keys::LEN + release::args::LEN;
const MAX_RELEASE_ARGS: usize = RELEASE_ARGS + 1;

/// What the command answers.
enum Reply {
    Ints(ServerReply),
    Pair([i64; 2]),
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
    // SAFETY: the command's context.
    if unsafe { ffi::is_keys_position_request(ctx) } != 0 {
        // The keys of the call's form (none for a count of no form: the call itself then
        // answers "wrong number of arguments").
        if let Some((keys, _)) = call_form(argc) {
            for pos in 1..=keys {
                // SAFETY: a keys position request.
                unsafe { ffi::key_at_pos(ctx, pos as c_int) };
            }
        }
        return raw::REDISMODULE_OK as c_int;
    }
    // SAFETY: Valkey's contract, passed on.
    unsafe { guarded(ctx, || decide(ctx, argv, argc)) }
}

/// The KEYS and ARGV of a `CG.DECIDE` of `argc` arguments (the command's name and, with
/// the test clock, the time included): its form's ([`decide::FORMS`]).
fn call_form(argc: c_int) -> Option<(usize, usize)> {
    let test_clock = usize::from(TEST_CLOCK.load(Ordering::Relaxed));
    let n = usize::try_from(argc).ok()?.checked_sub(1 + test_clock)?;
    decide::form_of_len(n).map(|f| decide::FORMS[f])
}

/// `CG.RELEASE`, as [`cg_decide`]: `model::server::release_on` with the release script's
/// KEYS then ARGV.
///
/// # Safety
/// As [`cg_decide`].
pub unsafe extern "C" fn cg_release(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    // SAFETY: Valkey's contract, passed on.
    unsafe { guarded(ctx, || release(ctx, argv, argc)) }
}

/// Runs a command's body under the panic guard and sends its reply.
///
/// # Safety
/// `ctx` is the running command's context; `body` keeps the contract of the command it
/// runs.
unsafe fn guarded(ctx: Ctx, body: impl FnOnce() -> Reply) -> c_int {
    let reply = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
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
            Reply::Ints(reply) => reply_ints(ctx, reply.as_slice()),
            Reply::Pair(pair) => reply_ints(ctx, &pair),
            Reply::Error(message) => reply_error(ctx, &message),
            Reply::WrongArity => ffi::wrong_arity(ctx),
        }
    }
}

/// An array of integers.
///
/// # Safety
/// The command's context.
unsafe fn reply_ints(ctx: Ctx, ints: &[i64]) -> c_int {
    // SAFETY: the command's context.
    unsafe {
        ffi::reply_with_array(ctx, ints.len() as c_long);
        for &i in ints {
            ffi::reply_with_long_long(ctx, i as c_longlong);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// The test clock's time: the argument after the call's.
fn test_now(arg: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|t| t.parse().ok())
        .ok_or_else(|| Reply::Error("ERR the test clock must be an integer (µs)".into()))
}

/// `CG.DECIDE`'s body: everything that can panic.
///
/// # Safety
/// As [`cg_decide`].
unsafe fn decide(ctx: Ctx, argv: *mut Str, argc: c_int) -> Reply {
    let test_clock = TEST_CLOCK.load(Ordering::Relaxed);
    let Some((nkeys, nargs)) = call_form(argc).filter(|_| !argv.is_null()) else {
        return Reply::WrongArity;
    };
    let n = nkeys + nargs;
    let want = 1 + n + usize::from(test_clock);
    // SAFETY: Valkey passes `argc` live strings, kept for the call.
    let argv: &[Str] = unsafe { std::slice::from_raw_parts(argv, want) };
    // SAFETY: each a live argument, unchanged for the call (this function's borrow).
    let arg = |i: usize| unsafe { Arg::new(argv[i]) };
    let mut args: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
    for (i, slot) in args.iter_mut().enumerate().take(want - 1) {
        *slot = arg(1 + i).bytes();
    }
    let call = match ReceivedCall::parse(&args[..n]) {
        Ok(call) => call,
        Err(e) => return Reply::Error(format!("ERR {e}")),
    };
    // SAFETY: called from a command.
    let now_us = unsafe { ffi::cached_microseconds() };
    let (now, slack_ms) = match test_clock {
        true => match test_now(args[n]) {
            Ok(t) => (t, TEST_SLACK_MS),
            Err(reply) => return reply,
        },
        false => (now_us, 0),
    };
    // The shop and the lease id where the form sends them (else an argument never used
    // as a field or a member: auto_hot, in_flight are off).
    let sent = |at: usize| arg(1 + nkeys + if at < nargs { at } else { 0 });
    let (shop, lease_id) = (sent(SHOP_ARG), sent(decide::args::LEASE_ID));
    let key_args: [Arg<'_>; KEYS] = std::array::from_fn(|i| arg(1 + i.min(nkeys - 1)));
    let mut keys = ValkeyKeys::new(ctx, &key_args[..nkeys], [shop, lease_id], now_us, slack_ms);
    // The shop named by its mark's key (the shop itself is sent with auto_hot only).
    let shop_is = |name: &[u8]| call.keys[decide::keys::HOT_FLAG].ends_with(name);
    if test_clock && TEST_PANIC.load(Ordering::Relaxed) && shop_is(TEST_PANIC_SHOP) {
        keys.panic_at_set_px();
    }
    match decide_on(&mut keys, &call, now).and_then(|reply| keys.finish().map(|()| reply)) {
        Ok(reply) => Reply::Ints(reply),
        Err(e) => Reply::Error(e),
    }
}

/// `CG.RELEASE`'s body: everything that can panic.
///
/// # Safety
/// As [`cg_decide`].
unsafe fn release(ctx: Ctx, argv: *mut Str, argc: c_int) -> Reply {
    let test_clock = TEST_CLOCK.load(Ordering::Relaxed);
    let want = 1 + RELEASE_ARGS + usize::from(test_clock);
    if argv.is_null() || usize::try_from(argc) != Ok(want) {
        return Reply::WrongArity;
    }
    // SAFETY: Valkey passes `argc` live strings, kept for the call.
    let argv: &[Str] = unsafe { std::slice::from_raw_parts(argv, want) };
    // SAFETY: each a live argument, unchanged for the call (this function's borrow).
    let arg = |i: usize| unsafe { Arg::new(argv[i]) };
    let mut args: [&[u8]; MAX_RELEASE_ARGS] = [&[]; MAX_RELEASE_ARGS];
    for (i, slot) in args.iter_mut().enumerate().take(want - 1) {
        *slot = arg(1 + i).bytes();
    }
    // SAFETY: called from a command.
    let now_us = unsafe { ffi::cached_microseconds() };
    let now = match test_clock {
        true => match test_now(args[RELEASE_KEYS + release::TEST_NOW_ARG]) {
            Ok(t) => t,
            Err(reply) => return reply,
        },
        false => now_us,
    };
    let lease_id = arg(1 + RELEASE_KEYS + release::args::LEASE_ID);
    let key_args: [Arg<'_>; RELEASE_KEYS] = std::array::from_fn(|i| arg(1 + i));
    // No shop: the lease id stands in both places.
    let mut keys = ValkeyKeys::new(ctx, &key_args, [lease_id, lease_id], now_us, 0);
    match release_on(&mut keys, &args[..RELEASE_ARGS], now)
        .and_then(|reply| keys.finish().map(|()| reply))
    {
        Ok(reply) => Reply::Pair(reply),
        Err(e) => Reply::Error(format_error(e)),
    }
}

/// An error of the model's parsing has no code: `ERR` added (Valkey's own errors, e.g.
/// `WRONGTYPE`, keep theirs).
fn format_error(e: String) -> String {
    match e.split(' ').next() {
        Some(code) if !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()) => e,
        _ => format!("ERR {e}"),
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
