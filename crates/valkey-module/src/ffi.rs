//! The part of Valkey's module API this module calls, written once.
//!
//! Valkey hands a module its API as a table of function pointers, filled in by
//! `RedisModule_Init` when the module loads (the `valkey-module` crate's `raw` statics,
//! each an `Option`: a server too old for a function leaves it empty). [`load`] copies
//! every function listed in the one `valkey_api!` invocation below out of that table into
//! [`Api`], or refuses to load the module when one is missing; each is then called
//! through a documented `unsafe fn` of the same list. A function not in the list cannot
//! be called; one in the list is checked at load: the list the module uses and the list
//! checked are the same text.
//!
//! # Safety contracts
//!
//! Every function here is `unsafe`: Valkey's API takes raw pointers and trusts them.
//! What each needs is written on it; what they all need:
//! - a context (`Ctx`) is the one Valkey passed to the running command (or to the module's
//!   init), used only while that call runs; NULL only where a function says so (a string
//!   created with a NULL context is not freed with any call's and must be freed once by
//!   hand);
//! - a string (`Str`) is live: a command's argument (for the whole call), or one created
//!   and not yet freed;
//! - a key handle (`Key`) was returned by [`open_key`] and not yet closed (NULL counts as
//!   an empty key where a function says so);
//! - the calling thread is the one Valkey runs the command on (the module API is not
//!   thread-safe and the module runs no thread of its own).
//!
//! When [`load`] did not run or failed, the module registered no command, so no function
//! here is ever called; should one be, it aborts instead of jumping to NULL.

use std::ffi::{c_char, c_int, c_long, c_longlong};
use std::sync::OnceLock;

use valkey_module::raw;

pub type Ctx = *mut raw::RedisModuleCtx;
pub type Str = *mut raw::RedisModuleString;
pub type Key = *mut raw::RedisModuleKey;
pub type User = *mut raw::RedisModuleUser;

/// Declares [`Api`] (one function pointer per entry), [`Api::from_table`] (each copied out
/// of Valkey's table, `None` if one is missing), and one `unsafe fn` per entry that calls
/// it. A variadic entry gets no wrapper of its own (a Rust function cannot be variadic):
/// the fixed-arity wrappers below call its pointer.
macro_rules! valkey_api {
    (
        $(
            $(#[$doc:meta])*
            fn $name:ident = $raw:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;
        )*
        variadic {
            $(
                $(#[$vdoc:meta])*
                fn $vname:ident = $vraw:ident($($vty:ty),*, ...) -> $vret:ty;
            )*
        }
    ) => {
        /// The module API functions this module calls, copied out of Valkey's table at load.
        pub struct Api {
            $($name: unsafe extern "C" fn($($ty),*) -> $ret,)*
            $($(#[$vdoc])* $vname: unsafe extern "C" fn($($vty),*, ...) -> $vret,)*
        }

        impl Api {
            /// Every function of the list, or `None` if Valkey's table lacks one.
            fn from_table() -> Option<Api> {
                // SAFETY: copies of the table's entries, which `RedisModule_Init` filled in
                // before the module's init ran and nothing changes after.
                unsafe {
                    Some(Api {
                        $($name: raw::$raw?,)*
                        $($vname: raw::$vraw?,)*
                    })
                }
            }
        }

        $(
            $(#[$doc])*
            #[inline(always)]
            pub unsafe fn $name($($arg: $ty),*) -> $ret {
                // SAFETY: the caller keeps this function's contract.
                unsafe { (api().$name)($($arg),*) }
            }
        )*
    };
}

valkey_api! {
    /// The bytes of `s` (a pointer to `len` bytes, valid while `s` lives unchanged).
    /// Safety: `s` is a live string.
    fn string_ptr_len = RedisModule_StringPtrLen(s: *const raw::RedisModuleString, len: *mut usize) -> *const c_char;
    /// Frees `s`. Safety: `s` is live and was created with `ctx` (NULL: created with a
    /// NULL context, or a copy handed to the module), and is not used after.
    fn free_string = RedisModule_FreeString(ctx: Ctx, s: Str) -> ();
    /// A new string of the `len` bytes at `ptr` (copied). Safety: `ptr` points to `len`
    /// readable bytes; with a NULL `ctx` the string must be freed by hand.
    fn create_string = RedisModule_CreateString(ctx: Ctx, ptr: *const c_char, len: usize) -> Str;
    /// A new string holding `n` in decimal. Safety: as [`create_string`].
    fn create_string_from_long_long = RedisModule_CreateStringFromLongLong(ctx: Ctx, n: c_longlong) -> Str;
    /// The key named `name`, open for `mode` (`REDISMODULE_READ`, `REDISMODULE_WRITE`);
    /// never NULL for this module's modes. Safety: a live context and name; the handle is
    /// closed with [`close_key`] before the command returns.
    fn open_key = RedisModule_OpenKey(ctx: Ctx, name: Str, mode: c_int) -> Key;
    /// Closes `key` (NULL: nothing). Safety: an open handle, not used after.
    fn close_key = RedisModule_CloseKey(key: Key) -> ();
    /// The type of the key's value (`REDISMODULE_KEYTYPE_*`; NULL: empty). Safety: an open
    /// handle or NULL.
    fn key_type = RedisModule_KeyType(key: Key) -> c_int;
    /// The length of the key's value. Safety: an open handle.
    fn value_length = RedisModule_ValueLength(key: Key) -> usize;
    /// The string value in place: `len` bytes, valid until the key is written otherwise or
    /// closed; writable when `mode` has `REDISMODULE_WRITE` (and the key was opened so).
    /// NULL where the key holds no string. Safety: an open handle.
    fn string_dma = RedisModule_StringDMA(key: Key, len: *mut usize, mode: c_int) -> *mut c_char;
    /// Resizes (or creates) the string value to `len` bytes. Safety: a handle open for
    /// writing on a string or empty key.
    fn string_truncate = RedisModule_StringTruncate(key: Key, len: usize) -> c_int;
    /// Sets the value to a copy of `value`. Safety: a handle open for writing; a live string.
    fn string_set = RedisModule_StringSet(key: Key, value: Str) -> c_int;
    /// Deletes the key (the handle stays open, on an empty key). Safety: a handle open for
    /// writing.
    fn delete_key = RedisModule_DeleteKey(key: Key) -> c_int;
    /// The key's time to live in ms (-1: none; `REDISMODULE_NO_EXPIRE`). Safety: an open
    /// handle on a key that exists.
    fn get_expire = RedisModule_GetExpire(key: Key) -> c_longlong;
    /// Sets the key's absolute expiry (Unix ms); refused (not OK) on an empty key.
    /// Safety: a handle open for writing.
    fn set_abs_expire = RedisModule_SetAbsExpire(key: Key, at_ms: c_longlong) -> c_int;
    /// Publishes a keyspace event. Safety: a live context and key name; `event` is
    /// NUL-terminated.
    fn notify_keyspace_event = RedisModule_NotifyKeyspaceEvent(ctx: Ctx, kind: c_int, event: *const c_char, key: Str) -> c_int;
    /// Replies with an error. Safety: the command's context; `message` is NUL-terminated.
    fn reply_with_error = RedisModule_ReplyWithError(ctx: Ctx, message: *const c_char) -> c_int;
    /// Starts an array reply of `len` elements (each replied next). Safety: the command's
    /// context.
    fn reply_with_array = RedisModule_ReplyWithArray(ctx: Ctx, len: c_long) -> c_int;
    /// Replies with an integer. Safety: the command's context.
    fn reply_with_long_long = RedisModule_ReplyWithLongLong(ctx: Ctx, n: c_longlong) -> c_int;
    /// Replies "wrong number of arguments". Safety: the command's context.
    fn wrong_arity = RedisModule_WrongArity(ctx: Ctx) -> c_int;
    /// Whether the command is asked for its arguments' key positions (`getkeys-api`: the
    /// keys of a call depend on its form), not to run. Safety: the command's context.
    fn is_keys_position_request = RedisModule_IsKeysPositionRequest(ctx: Ctx) -> c_int;
    /// Answers such a request: argument `pos` (from 1, the command's name 0) is a key.
    /// Safety: the command's context, in a keys position request.
    fn key_at_pos = RedisModule_KeyAtPos(ctx: Ctx, pos: c_int) -> ();
    /// Valkey's time of the running command, in µs (what `TIME` gives a script). Safety:
    /// called from a command.
    fn cached_microseconds = RedisModule_CachedMicroseconds() -> c_longlong;
    /// The context's flags (`REDISMODULE_CTX_FLAGS_*`: cluster mode among them). Safety: a
    /// live context.
    fn get_context_flags = RedisModule_GetContextFlags(ctx: Ctx) -> c_int;
    /// The calling user's name (NULL: no user, a call from the server itself), to be
    /// freed with a NULL context. Safety: the command's context.
    fn get_current_user_name = RedisModule_GetCurrentUserName(ctx: Ctx) -> Str;
    /// The user named `name` (NULL: none), to be freed with [`free_module_user`]. Safety:
    /// a live string.
    fn get_module_user_from_user_name = RedisModule_GetModuleUserFromUserName(name: Str) -> User;
    /// Whether `user` may access `key` as `flags` says (`REDISMODULE_CMD_KEY_*`; OK:
    /// allowed). Safety: a live user and string; only the flags the API accepts.
    fn acl_check_key_permissions = RedisModule_ACLCheckKeyPermissions(user: User, key: Str, flags: c_int) -> c_int;
    /// Frees a user from [`get_module_user_from_user_name`]. Safety: not used after.
    fn free_module_user = RedisModule_FreeModuleUser(user: User) -> ();
    /// Adds `ele` with `score` to the sorted set (created when empty); `flags` in: the
    /// `REDISMODULE_ZADD_*` input flags (0: none), out: `ADDED`, `UPDATED` or `NOP`.
    /// Not OK on a key of another type. Safety: a handle open for writing; a live string.
    fn zset_add = RedisModule_ZsetAdd(key: Key, score: f64, ele: Str, flags: *mut c_int) -> c_int;
    /// Removes `ele` (`deleted`: 1 when it was there); the key is deleted when it empties.
    /// Safety: a handle open for writing; a live string.
    fn zset_rem = RedisModule_ZsetRem(key: Key, ele: Str, deleted: *mut c_int) -> c_int;
    /// `ele`'s score (OK), or not OK where the element, or a sorted set, is missing.
    /// Safety: an open handle; a live string.
    fn zset_score = RedisModule_ZsetScore(key: Key, ele: Str, score: *mut f64) -> c_int;
    /// Starts an iterator at the first element scored from `min` to `max` (exclusive
    /// where `minex`/`maxex`); not OK on an empty key or another type. Safety: an open
    /// handle; the iterator is stopped ([`zset_range_stop`]) before the key is written or
    /// closed.
    fn zset_first_in_score_range = RedisModule_ZsetFirstInScoreRange(key: Key, min: f64, max: f64, minex: c_int, maxex: c_int) -> c_int;
    /// Moves the iterator on: 0 when there was no next element in the range (the end is
    /// then reached). Safety: an open handle.
    fn zset_range_next = RedisModule_ZsetRangeNext(key: Key) -> c_int;
    /// The iterator's element (a new string, freed by the caller with the command's
    /// context; NULL: none) and its score. Safety: an open handle; `score` NULL or
    /// writable.
    fn zset_range_current_element = RedisModule_ZsetRangeCurrentElement(key: Key, score: *mut f64) -> Str;
    /// Stops the iterator (nothing when none runs). Safety: an open handle.
    fn zset_range_stop = RedisModule_ZsetRangeStop(key: Key) -> ();
    /// Whether the iterator is past the range's end (1) or on an element (0). Safety: an
    /// open handle.
    fn zset_range_end_reached = RedisModule_ZsetRangeEndReached(key: Key) -> c_int;
    /// Registers a command. Safety: the init's context; `name` and `flags` NUL-terminated.
    fn create_command = RedisModule_CreateCommand(
        ctx: Ctx,
        name: *const c_char,
        command: raw::RedisModuleCmdFunc,
        flags: *const c_char,
        first_key: c_int,
        last_key: c_int,
        key_step: c_int,
    ) -> c_int;
    variadic {
        /// `RedisModule_HashGet(key, flags, field, &value, ..., NULL)`: see [`hash_get2`].
        fn hash_get = RedisModule_HashGet(Key, c_int, ...) -> c_int;
        /// `RedisModule_HashSet(key, flags, field, value, ..., NULL)`: see [`hash_set2`].
        fn hash_set = RedisModule_HashSet(Key, c_int, ...) -> c_int;
        /// `RedisModule_Replicate(ctx, command, format, ...)`: see the `replicate_*`.
        fn replicate = RedisModule_Replicate(Ctx, *const c_char, *const c_char, ...) -> c_int;
    }
}

static API: OnceLock<Api> = OnceLock::new();

/// Copies the API out of Valkey's table; `false` if the server lacks a function the
/// module calls (then it must not register its command). Called once, from the module's
/// init (after `RedisModule_Init`).
pub fn load() -> bool {
    match Api::from_table() {
        Some(api) => {
            let _ = API.set(api);
            true
        }
        None => false,
    }
}

#[inline(always)]
fn api() -> &'static Api {
    match API.get() {
        Some(api) => api,
        // Unreachable: no command is registered before `load` succeeded.
        None => std::process::abort(),
    }
}

/// The two values of `f0` and `f1` in the hash `key` (NULL where a field is missing):
/// copies the module must free (with a NULL context). Safety: an open handle on a hash
/// key; live field names.
pub unsafe fn hash_get2(key: Key, f0: Str, v0: &mut Str, f1: Str, v1: &mut Str) -> c_int {
    // SAFETY: a NULL-terminated list of (field, value pointer); the caller keeps the rest.
    unsafe {
        (api().hash_get)(
            key,
            raw::REDISMODULE_HASH_NONE as c_int,
            f0,
            v0 as *mut Str,
            f1,
            v1 as *mut Str,
            std::ptr::null_mut::<raw::RedisModuleString>(),
        )
    }
}

/// Sets `f0` to `v0` and `f1` to `v1` in the hash `key` (created when empty). Safety: a
/// handle open for writing on a hash or empty key; live strings.
pub unsafe fn hash_set2(key: Key, f0: Str, v0: Str, f1: Str, v1: Str) -> c_int {
    // SAFETY: a NULL-terminated list of (field, value); the caller keeps the rest.
    unsafe {
        (api().hash_set)(
            key,
            raw::REDISMODULE_HASH_NONE as c_int,
            f0,
            v0,
            f1,
            v1,
            std::ptr::null_mut::<raw::RedisModuleString>(),
        )
    }
}

/// Replicates `SET key value PXAT at_ms` (format "sbsl"). Safety: the command's context; a
/// live key name and `pxat` (the string "PXAT").
pub unsafe fn replicate_set_pxat(ctx: Ctx, key: Str, value: &[u8], pxat: Str, at_ms: i64) {
    // SAFETY: format "sbsl": a string, a buffer and its length, a string, a long long.
    unsafe {
        (api().replicate)(
            ctx,
            c"SET".as_ptr(),
            c"sbsl".as_ptr(),
            key,
            value.as_ptr().cast::<c_char>(),
            value.len(),
            pxat,
            at_ms as c_longlong,
        );
    }
}

/// Replicates `HSET key f0 v0 f1 v1` (format "sssss"). Safety: the command's context;
/// live strings.
pub unsafe fn replicate_hset2(ctx: Ctx, key: Str, f0: Str, v0: Str, f1: Str, v1: Str) {
    // SAFETY: format "sssss": five strings.
    unsafe {
        (api().replicate)(
            ctx,
            c"HSET".as_ptr(),
            c"sssss".as_ptr(),
            key,
            f0,
            v0,
            f1,
            v1,
        );
    }
}

/// Replicates `DEL key` (format "s"). Safety: the command's context; a live key name.
pub unsafe fn replicate_del(ctx: Ctx, key: Str) {
    // SAFETY: format "s": a string.
    unsafe {
        (api().replicate)(ctx, c"DEL".as_ptr(), c"s".as_ptr(), key);
    }
}

/// Replicates `PEXPIREAT key at_ms` (format "sl"). Safety: the command's context; a live
/// key name.
pub unsafe fn replicate_pexpireat(ctx: Ctx, key: Str, at_ms: i64) {
    // SAFETY: format "sl": a string, a long long.
    unsafe {
        (api().replicate)(
            ctx,
            c"PEXPIREAT".as_ptr(),
            c"sl".as_ptr(),
            key,
            at_ms as c_longlong,
        );
    }
}

/// The value of `f0` in the hash `key` (NULL where the field is missing): a copy the
/// module must free. Safety: an open handle on a hash key; a live field name.
pub unsafe fn hash_get1(key: Key, f0: Str, v0: &mut Str) -> c_int {
    // SAFETY: a NULL-terminated list of (field, value pointer); the caller keeps the rest.
    unsafe {
        (api().hash_get)(
            key,
            raw::REDISMODULE_HASH_NONE as c_int,
            f0,
            v0 as *mut Str,
            std::ptr::null_mut::<raw::RedisModuleString>(),
        )
    }
}

/// Sets `f0` to `v0` in the hash `key` (created when empty). Safety: a handle open for
/// writing on a hash or empty key; live strings.
pub unsafe fn hash_set1(key: Key, f0: Str, v0: Str) -> c_int {
    // SAFETY: a NULL-terminated list of (field, value); the caller keeps the rest.
    unsafe {
        (api().hash_set)(
            key,
            raw::REDISMODULE_HASH_NONE as c_int,
            f0,
            v0,
            std::ptr::null_mut::<raw::RedisModuleString>(),
        )
    }
}

/// Replicates `ZADD key score member` (format "sls"). Safety: the command's context;
/// live strings.
pub unsafe fn replicate_zadd(ctx: Ctx, key: Str, score: i64, member: Str) {
    // SAFETY: format "sls": a string, a long long, a string.
    unsafe {
        (api().replicate)(
            ctx,
            c"ZADD".as_ptr(),
            c"sls".as_ptr(),
            key,
            score as c_longlong,
            member,
        );
    }
}

/// Replicates `ZREM key member` (format "ss"). Safety: the command's context; live
/// strings.
pub unsafe fn replicate_zrem(ctx: Ctx, key: Str, member: Str) {
    // SAFETY: format "ss": two strings.
    unsafe {
        (api().replicate)(ctx, c"ZREM".as_ptr(), c"ss".as_ptr(), key, member);
    }
}

/// Replicates `ZREMRANGEBYSCORE key -inf max` (format "scl"). Safety: the command's
/// context; a live key name.
pub unsafe fn replicate_zremrangebyscore(ctx: Ctx, key: Str, max: i64) {
    // SAFETY: format "scl": a string, a C string, a long long.
    unsafe {
        (api().replicate)(
            ctx,
            c"ZREMRANGEBYSCORE".as_ptr(),
            c"scl".as_ptr(),
            key,
            c"-inf".as_ptr(),
            max as c_longlong,
        );
    }
}

/// Replicates `HINCRBY key field by` (format "ssl"). Safety: the command's context; live
/// strings.
pub unsafe fn replicate_hincrby(ctx: Ctx, key: Str, field: Str, by: i64) {
    // SAFETY: format "ssl": two strings, a long long.
    unsafe {
        (api().replicate)(
            ctx,
            c"HINCRBY".as_ptr(),
            c"ssl".as_ptr(),
            key,
            field,
            by as c_longlong,
        );
    }
}
