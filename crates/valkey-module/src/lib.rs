//! checkout-guard's Valkey module: `CG.DECIDE`, the limiter's decision as a native command,
//! and `CG.RELEASE`, the end of an in-flight lease.
//!
//! `CG.DECIDE <keys> <arguments>` (up to 13 keys and 28 arguments, in one of the forms
//! `decide::FORMS`) takes exactly the decision script's KEYS then ARGV (built by the
//! model's `DecideCall`, the one encoder) and answers the script's reply.
//! The decision is `model::server::decide_on`, the Rust twin the Lua script is held to
//! call for call, on Valkey's clock (the command's cached time, as `TIME` in a script).
//! `CG.RELEASE <four KEYS> <three ARGV>` is `release.lua`'s twin the same way
//! (`model::server::release_on`, the keys and arguments of `ReleaseCall`).
//!
//! In a deployment: the keys are declared (positions 1 to 13, and the release's first four: cluster routing and
//! ACL key permissions); the commands are flagged `write deny-oom`, so a replica refuses it
//! (`READONLY`) and a Valkey over `maxmemory` refuses it, as the `#!lua` script is
//! refused; it is never replicated as itself (a replica, or an AOF replay, would decide
//! again on another clock): each write is replicated as its effect, with absolute expiry
//! times. Nothing is written until the decision is made (its writes are recorded, then
//! applied), so an error or a panic leaves the keys as they were; a panic is an error
//! reply, never a crash of Valkey. A bucket value no engine reads is a missing key (see
//! `StoredBucket::read_like_the_script`).
//!
//! What one call costs is most of what the decision is worth here (a `SET` costs Valkey
//! about 0.3 µs), so the command works on Valkey's key API directly, as a command of
//! Valkey's own would, and allocates next to nothing:
//! - the arguments are read in place (no copy, no `RedisModuleString` retained per
//!   argument), and the 8 keys are opened by the argument strings themselves;
//! - a value is read in place (`StringDMA`) and compared or parsed there;
//! - a string is written in place where the key holds one (resized when its length
//!   changes), created otherwise, with an absolute expiry (`SetAbsExpire`), and
//!   replicated as `SET key value PXAT <ms>`: the replica's key expires at the very
//!   millisecond the primary's does. Keyspace events are those of that `SET` (`set`,
//!   `expire`), and the key counts as modified (WATCH, client tracking) as after a `SET`;
//! - the `auto_hot` window is read and written with the hash API (`HashGet`,
//!   `HashSet`), replicated as `HSET` and `PEXPIREAT` (events `hset`, `expire`);
//! - the in-flight lease sets with the sorted set API (`ZsetAdd`, `ZsetRem`,
//!   `ZsetScore`, a score range iterator), replicated as `ZREMRANGEBYSCORE`, `ZADD`,
//!   `PEXPIREAT`, `ZREM`, and the lease stats' counters as `HINCRBY` (see [`keyspace`]);
//! - a mark's time to live is the key's own (`GetExpire`, what `PTTL` answers).
//!
//! No command goes through the command table (`RM_Call`).
//!
//! - [`ffi`]: the module API functions it calls, written once, checked at load;
//! - [`keyspace`]: the model's `Keyspace` over Valkey's keys (journal, ACL and slot
//!   checks of undeclared keys);
//! - [`command`]: the commands' arguments, the panic guard, the reply.
//!
//! Load with `valkey-server --loadmodule target/release/libcheckout_guard_valkey.so` or
//! `loadmodule` in valkey.conf. Tests load it with `test-clock` (the time is the last
//! argument) and `test-panic` (only with `test-clock`: see [`command::TEST_PANIC`]).

mod command;
mod ffi;
mod keyspace;

use std::ffi::c_int;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use checkout_guard_model::cmd::release;
use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{raw, valkey_module, Context};

fn init(ctx: &Context, args: &[valkey_module::ValkeyString]) -> valkey_module::Status {
    if !ffi::load() {
        ctx.log_warning("checkout_guard: this server lacks a module API function CG.DECIDE needs (Valkey 7.2 or later is required)");
        return valkey_module::Status::Err;
    }
    let has = |name: &[u8]| args.iter().any(|a| a.as_slice() == name);
    let test_clock = has(b"test-clock");
    if has(b"test-panic") && !test_clock {
        ctx.log_warning(
            "checkout_guard: test-panic is a test's argument, accepted only with test-clock",
        );
        return valkey_module::Status::Err;
    }
    command::TEST_CLOCK.store(test_clock, Ordering::Relaxed);
    command::TEST_PANIC.store(has(b"test-panic"), Ordering::Relaxed);
    // SAFETY: strings kept for the module's life (NULL context: not freed with any call's).
    unsafe {
        let empty = ffi::create_string(null_mut(), c"".as_ptr(), 0);
        keyspace::EMPTY.store(empty, Ordering::Relaxed);
        let pxat = ffi::create_string(null_mut(), c"PXAT".as_ptr(), 4);
        keyspace::PXAT.store(pxat, Ordering::Relaxed);
        for (slot, name) in keyspace::STATS_FIELDS
            .iter()
            .zip(keyspace::STATS_FIELD_NAMES)
        {
            let s = ffi::create_string(null_mut(), name.as_ptr().cast(), name.len());
            slot.store(s, Ordering::Relaxed);
        }
    }
    // Keys: the first 4, 6, 7, 11, 12 or 13 arguments, as the call's form says (its
    // argument count: decide::FORMS), told by `getkeys-api` (cluster routing, ACL key
    // permissions); no fixed range (0, 0, 0), which Valkey would prefer to the API.
    // SAFETY: the load context; the name and flags are NUL-terminated.
    let created = unsafe {
        ffi::create_command(
            ctx.get_raw(),
            c"CG.DECIDE".as_ptr(),
            Some(command::cg_decide),
            c"write deny-oom fast getkeys-api".as_ptr(),
            0,
            0,
            0,
        )
    };
    if created != raw::REDISMODULE_OK as c_int {
        return valkey_module::Status::Err;
    }
    // Keys: the first four arguments, the three lease sets and the stats hash. The name is the
    // model's (the runtime sends it by that name).
    let Ok(name) = std::ffi::CString::new(release::MODULE_COMMAND) else {
        return valkey_module::Status::Err;
    };
    // SAFETY: as above.
    let created = unsafe {
        ffi::create_command(
            ctx.get_raw(),
            name.as_ptr(),
            Some(command::cg_release),
            c"write deny-oom fast".as_ptr(),
            1,
            release::keys::LEN as c_int,
            1,
        )
    };
    if created != raw::REDISMODULE_OK as c_int {
        return valkey_module::Status::Err;
    }
    valkey_module::Status::Ok
}

valkey_module! {
    name: "checkout_guard",
    version: 1,
    allocator: (ValkeyAlloc, ValkeyAlloc),
    data_types: [],
    init: init,
    commands: [],
}
