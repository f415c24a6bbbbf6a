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
//! times. Everything that can fail (bad arguments, a window key of another type) fails
//! before the first write, so an error leaves the keys as they were; a bucket value no
//! engine reads is a missing key (see `StoredBucket::read_like_the_script`).
//!
//! What one call costs is most of what the decision is worth here (a `SET` costs Valkey
//! about 0.3 µs), so the command works on Valkey's key API directly, as a command of
//! Valkey's own would, and allocates next to nothing:
//! - the arguments are read in place (no copy, no `RedisModuleString` retained per
//!   argument), and the 7 keys are opened by the argument strings themselves;
//! - a value is read in place (`StringDMA`) and compared or parsed there;
//! - a string is written in place where the key holds one (resized when its length
//!   changes), created otherwise, with an absolute expiry (`SetAbsExpire`), and
//!   replicated as `SET key value PXAT <ms>`: the replica's key expires at the very
//!   millisecond the primary's does. Keyspace events are those of that `SET` (`set`,
//!   `expire`), and the key counts as modified (WATCH, client tracking) as after a `SET`;
//! - the `auto_hot` window is read and written with the hash API (`HashGet`,
//!   `HashSet`), replicated as `HSET` and `PEXPIREAT` (events `hset`, `expire`);
//! - a mark's time to live is the key's own (`GetExpire`, what `PTTL` answers).
//!
//! No command goes through the command table (`RM_Call`).
//!
//! Load with `valkey-server --loadmodule target/release/libcheckout_guard_valkey.so` or
//! `loadmodule` in valkey.conf.

use std::ffi::{c_char, c_int, c_longlong, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use checkout_guard_model::contract::decide;
use checkout_guard_model::server::{decide_on, Keyspace, ReceivedCall};
use checkout_guard_model::DecideCall;
use valkey_module::alloc::ValkeyAlloc;
use valkey_module::{raw, valkey_module, Context};

type Ctx = *mut raw::RedisModuleCtx;
type Str = *mut raw::RedisModuleString;
type Key = *mut raw::RedisModuleKey;

/// Loaded with the argument `test-clock` (tests only): `CG.DECIDE` takes one more
/// argument, the time to decide at (µs), as the script's test variant does, and keys live
/// an hour longer, so the server's own clock never expires what the test still reads.
static TEST_CLOCK: AtomicBool = AtomicBool::new(false);
const TEST_SLACK_MS: i64 = decide::TEST_KEY_SLACK_MS;

/// The empty string, the window hash's field of all shops' count, and `PXAT` (created at
/// load, kept for the module's life).
static EMPTY: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());
static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());

const KEYS: usize = DecideCall::KEYS;
/// The call's arguments after the command name: keys, arguments, the test clock.
const MAX_ARGS: usize = KEYS + DecideCall::ARGS + 1;
/// Position of the shop among the arguments after the keys.
const SHOP_ARG: usize = decide::args::SHOP;

/// A Valkey module API function, filled in when the module loaded (`init` checked that
/// every one this module calls is there, or refused to load).
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: checked in `init` (`api_complete`); the table is not changed after.
        #[allow(unused_unsafe)]
        let f = unsafe { raw::$name.unwrap_unchecked() };
        f
    }};
}

/// The bytes of a Valkey string, valid while the string lives (the command's arguments:
/// the whole call).
fn bytes<'a>(s: Str) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: `s` is a live string of this call.
    unsafe {
        let p = api!(RedisModule_StringPtrLen)(s, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// A key name as a Valkey string: one of the call's own arguments (borrowed), or created
/// for this use (a window key) and freed on drop. Any bytes, NUL included.
struct Name {
    s: Str,
    owned: bool,
}

impl Drop for Name {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created with a NULL context by `ValkeyKeys::name`, freed once.
            unsafe { api!(RedisModule_FreeString)(null_mut(), self.s) };
        }
    }
}

/// An open key, closed on drop.
struct Open(Key);

impl Drop for Open {
    fn drop(&mut self) {
        // SAFETY: opened by `ValkeyKeys::open` (CloseKey takes NULL too).
        unsafe { api!(RedisModule_CloseKey)(self.0) };
    }
}

impl Open {
    fn key_type(&self) -> c_int {
        // SAFETY: a key of this call (NULL: empty).
        unsafe { api!(RedisModule_KeyType)(self.0) }
    }

    /// The string held, in place (`None`: missing or another type). Valid until the key
    /// is written or closed.
    fn string(&self) -> Option<&[u8]> {
        if self.key_type() != raw::REDISMODULE_KEYTYPE_STRING as c_int {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: a string key; read access.
        let p = unsafe {
            api!(RedisModule_StringDMA)(self.0, &mut len, raw::REDISMODULE_READ as c_int)
        };
        if p.is_null() {
            return None;
        }
        // SAFETY: `len` bytes at `p`, unchanged until the key is written or closed.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

/// The decision's reads and writes on Valkey's keys, each write replicated as its effect.
struct ValkeyKeys<'a> {
    ctx: Ctx,
    /// The call's 7 keys (arguments 1 to 7) and their bytes.
    keys: &'a [Str],
    key_bytes: [&'a [u8]; KEYS],
    /// The shop (a window hash's field) and its bytes.
    shop: Str,
    shop_bytes: &'a [u8],
    /// Valkey's time of this command, in ms (absolute expiry times).
    now_ms: i64,
    /// Added to every bucket's expiry (test clock only).
    slack_ms: i64,
    /// Key names created in this call (the window keys, each used up to three times),
    /// freed with it.
    created: [Str; 2],
    /// The current window's hash, opened for writing when read and kept open until it is
    /// written (by its name).
    held: Option<(Str, Open)>,
    /// The calling user, looked up for the first undeclared key's ACL check (null: not
    /// yet, or no user to check: a call from the server itself).
    user: Option<*mut raw::RedisModuleUser>,
}

impl Drop for ValkeyKeys<'_> {
    fn drop(&mut self) {
        self.held = None;
        if let Some(u) = self.user.take().filter(|u| !u.is_null()) {
            // SAFETY: from GetModuleUserFromUserName, freed once.
            unsafe { api!(RedisModule_FreeModuleUser)(u) };
        }
        for s in self.created {
            if !s.is_null() {
                // SAFETY: created by `name` with a NULL context, freed once.
                unsafe { api!(RedisModule_FreeString)(null_mut(), s) };
            }
        }
    }
}

impl ValkeyKeys<'_> {
    /// `key` as a Valkey string: the call's own argument when it is one (the model passes
    /// the very slices it was given: same address, which no other live buffer can have),
    /// else one created in this call with the same bytes, else created now.
    fn name(&mut self, key: &[u8]) -> Name {
        let own = self
            .key_bytes
            .iter()
            .position(|k| std::ptr::eq(k.as_ptr(), key.as_ptr()) && k.len() == key.len());
        if let Some(i) = own {
            return Name {
                s: self.keys[i],
                owned: false,
            };
        }
        if let Some(&s) = self
            .created
            .iter()
            .find(|s| !s.is_null() && bytes(**s) == key)
        {
            return Name { s, owned: false };
        }
        // SAFETY: a string of `key.len()` bytes, freed by `drop` (kept) or by `Name`'s.
        let s =
            unsafe { api!(RedisModule_CreateString)(null_mut(), key.as_ptr().cast(), key.len()) };
        match self.created.iter_mut().find(|s| s.is_null()) {
            Some(slot) => {
                *slot = s;
                Name { s, owned: false }
            }
            None => Name { s, owned: true },
        }
    }

    /// A hash field as a Valkey string: the shop's argument, the empty string, or created.
    fn field(&self, f: &[u8]) -> Name {
        if std::ptr::eq(f.as_ptr(), self.shop_bytes.as_ptr()) && f.len() == self.shop_bytes.len() {
            return Name {
                s: self.shop,
                owned: false,
            };
        }
        if f.is_empty() {
            return Name {
                s: EMPTY.load(Ordering::Relaxed),
                owned: false,
            };
        }
        // SAFETY: as in `name`.
        Name {
            s: unsafe { api!(RedisModule_CreateString)(null_mut(), f.as_ptr().cast(), f.len()) },
            owned: true,
        }
    }

    /// `name` open for writing: the handle kept open for it, or opened now.
    fn writable(&mut self, name: &Name) -> Open {
        match self.held.take() {
            Some((s, k)) if s == name.s => k,
            other => {
                self.held = other;
                self.open(name, raw::REDISMODULE_WRITE)
            }
        }
    }

    /// A window key (`<prefix><n>`) is not among the keys the call declares, so Valkey
    /// checked neither its cluster slot nor the user's ACL permissions on it, as it checks
    /// every key a script's `redis.call` touches: checked here, before any write. `write`:
    /// the key is written too.
    fn check_undeclared(&mut self, name: &Name, write: bool) -> Result<(), String> {
        let key = bytes(name.s);
        let quoted = || String::from_utf8_lossy(key).escape_default().to_string();
        // SAFETY: a live context.
        let flags = unsafe { api!(RedisModule_GetContextFlags)(self.ctx) };
        if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
            && key_slot(key) != key_slot(self.key_bytes[0])
        {
            return Err(format!(
                "CROSSSLOT the auto_hot window key \"{}\" does not hash to the slot of the call's keys",
                quoted()
            ));
        }
        let user = *self.user.get_or_insert_with(|| {
            // SAFETY: a live context; the name is freed here, the user by `drop`.
            unsafe {
                let user_name = api!(RedisModule_GetCurrentUserName)(self.ctx);
                if user_name.is_null() {
                    return null_mut();
                }
                let user = api!(RedisModule_GetModuleUserFromUserName)(user_name);
                api!(RedisModule_FreeString)(null_mut(), user_name);
                user
            }
        });
        if user.is_null() {
            return Ok(());
        }
        let mut perm = raw::REDISMODULE_CMD_KEY_ACCESS;
        if write {
            perm |= raw::REDISMODULE_CMD_KEY_INSERT | raw::REDISMODULE_CMD_KEY_UPDATE;
        }
        // SAFETY: a live user and key name; only the flags the API allows.
        let allowed =
            unsafe { api!(RedisModule_ACLCheckKeyPermissions)(user, name.s, perm as c_int) };
        if allowed != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "NOPERM this user has no permissions to access the auto_hot window key \"{}\"",
                quoted()
            ));
        }
        Ok(())
    }

    fn open(&self, name: &Name, mode: u32) -> Open {
        // SAFETY: a live key name; the handle is closed by `Open`'s drop.
        Open(unsafe { api!(RedisModule_OpenKey)(self.ctx, name.s, mode as c_int) })
    }

    fn notify(&self, kind: c_int, event: &CStr, name: &Name) {
        // SAFETY: a live context and key name; `event` is NUL-terminated.
        unsafe { api!(RedisModule_NotifyKeyspaceEvent)(self.ctx, kind, event.as_ptr(), name.s) };
    }

    /// `SET key value PXAT at`, done with the key API and replicated as that command.
    fn set_pxat(&mut self, key: &[u8], value: &[u8], at_ms: i64) {
        // A handle kept open on the same key (a call whose keys alias) would not see this
        // write: closed first, so the next write opens the key as it is.
        if self.held.as_ref().is_some_and(|(s, _)| bytes(*s) == key) {
            self.held = None;
        }
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_WRITE);
        // SAFETY: `k` is open for writing; the DMA pointer is written at once, before any
        // other call on the key.
        unsafe {
            match k.key_type() {
                t if t == raw::REDISMODULE_KEYTYPE_STRING as c_int => {}
                t if t == raw::REDISMODULE_KEYTYPE_EMPTY as c_int => {}
                // Another type: replaced, as `SET` replaces it.
                _ => {
                    api!(RedisModule_DeleteKey)(k.0);
                }
            }
            if value.is_empty() {
                // Truncating an empty key to 0 creates nothing: an empty string is set.
                let empty = api!(RedisModule_CreateString)(null_mut(), c"".as_ptr(), 0);
                api!(RedisModule_StringSet)(k.0, empty);
                api!(RedisModule_FreeString)(null_mut(), empty);
            } else {
                // Resized in place (created when empty), then written in place.
                if api!(RedisModule_ValueLength)(k.0) != value.len() {
                    api!(RedisModule_StringTruncate)(k.0, value.len());
                }
                let mut len = 0usize;
                let p = api!(RedisModule_StringDMA)(k.0, &mut len, raw::REDISMODULE_WRITE as c_int);
                if !p.is_null() && len == value.len() {
                    std::ptr::copy_nonoverlapping(value.as_ptr(), p.cast::<u8>(), len);
                }
            }
            api!(RedisModule_SetAbsExpire)(k.0, at_ms);
        }
        drop(k);
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set", &name);
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", &name);
        // SAFETY: format "sbsl": a string, a buffer and its length, a string, a long long.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx,
                c"SET".as_ptr(),
                c"sbsl".as_ptr(),
                name.s,
                value.as_ptr().cast::<c_char>(),
                value.len(),
                PXAT.load(Ordering::Relaxed),
                at_ms as c_longlong,
            );
        }
    }
}

impl Keyspace for ValkeyKeys<'_> {
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        read(k.string())
    }

    fn has_string(&mut self, key: &[u8]) -> bool {
        // The type only: a mark's value is never read (nor converted for reading).
        let name = self.name(key);
        self.open(&name, raw::REDISMODULE_READ).key_type()
            == raw::REDISMODULE_KEYTYPE_STRING as c_int
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        if k.key_type() == raw::REDISMODULE_KEYTYPE_EMPTY as c_int {
            return -2;
        }
        // SAFETY: an open, non-empty key. -1 without expiry, as PTTL.
        unsafe { api!(RedisModule_GetExpire)(k.0) }
    }

    fn hash_ints(
        &mut self,
        key: &[u8],
        fields: [&[u8]; 2],
        written_next: bool,
    ) -> Result<[i64; 2], String> {
        let name = self.name(key);
        self.check_undeclared(&name, written_next)?;
        // A hash written next is opened for writing now, and kept open for it.
        let mode = match written_next {
            true => raw::REDISMODULE_WRITE,
            false => raw::REDISMODULE_READ,
        };
        let k = self.open(&name, mode);
        match k.key_type() {
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as c_int && written_next => {
                self.held = Some((name.s, k));
                return Ok([0, 0]);
            }
            t if t == raw::REDISMODULE_KEYTYPE_EMPTY as c_int => return Ok([0, 0]),
            t if t == raw::REDISMODULE_KEYTYPE_HASH as c_int => {}
            // As HMGET (and the script's HMGET) answers.
            _ => {
                return Err(
                    "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
                )
            }
        }
        let (f0, f1) = (self.field(fields[0]), self.field(fields[1]));
        let mut values: [Str; 2] = [null_mut(); 2];
        // SAFETY: a hash key; NULL-terminated list of (field, value pointer).
        unsafe {
            api!(RedisModule_HashGet)(
                k.0,
                raw::REDISMODULE_HASH_NONE as c_int,
                f0.s,
                &mut values[0] as *mut Str,
                f1.s,
                &mut values[1] as *mut Str,
                null_mut::<raw::RedisModuleString>(),
            );
        }
        let mut out = [0i64; 2];
        for (slot, v) in out.iter_mut().zip(values) {
            if v.is_null() {
                continue;
            }
            // Read as the script's `tonumber` reads a counter the extension wrote; anything
            // else (bytes that are not a number) counts 0.
            *slot = std::str::from_utf8(bytes(v))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            // SAFETY: a copy HashGet made for this module (the context has no automatic
            // memory), freed once.
            unsafe { api!(RedisModule_FreeString)(self.ctx, v) };
        }
        if written_next {
            self.held = Some((name.s, k));
        }
        Ok(out)
    }

    fn set_bucket(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.set_pxat(key, value, self.now_ms + px_ms + self.slack_ms);
    }

    fn set_px(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.set_pxat(key, value, self.now_ms + px_ms);
    }

    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], i64)]) {
        let &[(f0, v0), (f1, v1)] = pairs else {
            // The model writes the shop's and all shops' counts, always both.
            return;
        };
        let name = self.name(key);
        let (f0, f1) = (self.field(f0), self.field(f1));
        let k = self.writable(&name);
        let t = k.key_type();
        if t != raw::REDISMODULE_KEYTYPE_HASH as c_int
            && t != raw::REDISMODULE_KEYTYPE_EMPTY as c_int
        {
            // Read as a hash before any write; another type now only where the call's keys
            // alias (the window key is one the decision set as a string): no write, as
            // HSET's WRONGTYPE writes nothing.
            return;
        }
        // SAFETY: open for writing, a hash or empty; NULL-terminated (field, value) list.
        // The values are replicated as they were set, then freed once.
        unsafe {
            let a = api!(RedisModule_CreateStringFromLongLong)(null_mut(), v0 as c_longlong);
            let b = api!(RedisModule_CreateStringFromLongLong)(null_mut(), v1 as c_longlong);
            api!(RedisModule_HashSet)(
                k.0,
                raw::REDISMODULE_HASH_NONE as c_int,
                f0.s,
                a,
                f1.s,
                b,
                null_mut::<raw::RedisModuleString>(),
            );
            self.notify(raw::REDISMODULE_NOTIFY_HASH, c"hset", &name);
            // Format "sssss": the key, then field and value twice.
            api!(RedisModule_Replicate)(
                self.ctx,
                c"HSET".as_ptr(),
                c"sssss".as_ptr(),
                name.s,
                f0.s,
                a,
                f1.s,
                b,
            );
            api!(RedisModule_FreeString)(null_mut(), a);
            api!(RedisModule_FreeString)(null_mut(), b);
        }
        self.held = Some((name.s, k));
    }

    fn pexpire(&mut self, key: &[u8], ms: i64) {
        let at = self.now_ms + ms;
        let name = self.name(key);
        let k = self.writable(&name);
        // SAFETY: open for writing (an empty key is refused by the API, as PEXPIREAT
        // answers 0 there).
        let set = unsafe { api!(RedisModule_SetAbsExpire)(k.0, at) };
        self.held = Some((name.s, k));
        if set == raw::REDISMODULE_OK as c_int {
            self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", &name);
            // SAFETY: format "sl": the key, a long long.
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx,
                    c"PEXPIREAT".as_ptr(),
                    c"sl".as_ptr(),
                    name.s,
                    at as c_longlong,
                );
            }
        }
    }
}

/// The cluster slot of a key, as Valkey computes it: CRC16 (XMODEM) of the hash tag (the
/// bytes between the first `{` and the next `}`, when not empty) or of the whole key, mod
/// 16384.
fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|&b| b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        rest.iter()
            .position(|&b| b == b'}')
            .filter(|&close| close > 0)
            .map(|close| &rest[..close])
    });
    let mut crc: u16 = 0;
    for &b in tagged.unwrap_or(key) {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc & 0x3fff
}

/// An error reply: one line of ASCII (a RESP error is one line; a client reads it as text,
/// so bytes of an argument quoted in it, e.g. U+FFFD for bytes that are not UTF-8, are
/// escaped: `\u{fffd}`).
fn reply_error(ctx: Ctx, message: &str) -> c_int {
    let mut text = String::with_capacity(message.len());
    for ch in message.chars() {
        match ch {
            ' '..='~' => text.push(ch),
            _ => text.push_str(&ch.escape_unicode().to_string()),
        }
    }
    let msg = std::ffi::CString::new(text).unwrap_or_default();
    // SAFETY: a live context; `msg` is NUL-terminated.
    unsafe { api!(RedisModule_ReplyWithError)(ctx, msg.as_ptr()) }
}

/// `CG.DECIDE`, registered with Valkey directly: the arguments are read where Valkey holds
/// them.
unsafe extern "C" fn cg_decide(ctx: Ctx, argv: *mut Str, argc: c_int) -> c_int {
    let test_clock = TEST_CLOCK.load(Ordering::Relaxed);
    let want = 1 + KEYS + DecideCall::ARGS + usize::from(test_clock);
    if argv.is_null() || usize::try_from(argc) != Ok(want) {
        return api!(RedisModule_WrongArity)(ctx);
    }
    // SAFETY: Valkey passes `argc` live strings.
    let argv = unsafe { std::slice::from_raw_parts(argv, want) };
    let mut args: [&[u8]; MAX_ARGS] = [&[]; MAX_ARGS];
    for (slot, &s) in args.iter_mut().zip(&argv[1..]) {
        *slot = bytes(s);
    }
    let n = KEYS + DecideCall::ARGS;
    let call = match ReceivedCall::parse(&args[..n]) {
        Ok(call) => call,
        Err(e) => return reply_error(ctx, &format!("ERR {e}")),
    };
    let now_us = api!(RedisModule_CachedMicroseconds)();
    let (now, slack_ms) = match test_clock {
        true => match std::str::from_utf8(args[KEYS + decide::TEST_NOW_ARG])
            .ok()
            .and_then(|t| t.parse().ok())
        {
            Some(t) => (t, TEST_SLACK_MS),
            None => return reply_error(ctx, "ERR the test clock must be an integer (µs)"),
        },
        false => (now_us, 0),
    };
    let mut key_bytes: [&[u8]; KEYS] = [&[]; KEYS];
    key_bytes.copy_from_slice(&args[..KEYS]);
    let mut keys = ValkeyKeys {
        ctx,
        keys: &argv[1..1 + KEYS],
        key_bytes,
        shop: argv[1 + KEYS + SHOP_ARG],
        shop_bytes: args[KEYS + SHOP_ARG],
        now_ms: now_us.div_euclid(1000),
        slack_ms,
        created: [null_mut(); 2],
        held: None,
        user: None,
    };
    match decide_on(&mut keys, &call, now) {
        Ok(reply) => {
            let ints = reply.as_slice();
            api!(RedisModule_ReplyWithArray)(ctx, ints.len() as _);
            for &i in ints {
                api!(RedisModule_ReplyWithLongLong)(ctx, i as c_longlong);
            }
            raw::REDISMODULE_OK as c_int
        }
        Err(e) => reply_error(ctx, &e),
    }
}

/// Whether every API function this module calls is there (checked once, at load).
fn api_complete() -> bool {
    macro_rules! present {
        ($($name:ident),*) => {
            // SAFETY: copies of the table's entries, filled in by RedisModule_Init.
            $(unsafe { raw::$name }.is_some())&&*
        };
    }
    present!(
        RedisModule_StringPtrLen,
        RedisModule_FreeString,
        RedisModule_CreateString,
        RedisModule_CreateStringFromLongLong,
        RedisModule_OpenKey,
        RedisModule_CloseKey,
        RedisModule_KeyType,
        RedisModule_ValueLength,
        RedisModule_StringDMA,
        RedisModule_StringTruncate,
        RedisModule_StringSet,
        RedisModule_DeleteKey,
        RedisModule_GetExpire,
        RedisModule_SetAbsExpire,
        RedisModule_HashGet,
        RedisModule_HashSet,
        RedisModule_NotifyKeyspaceEvent,
        RedisModule_Replicate,
        RedisModule_ReplyWithError,
        RedisModule_ReplyWithArray,
        RedisModule_ReplyWithLongLong,
        RedisModule_WrongArity,
        RedisModule_CachedMicroseconds,
        RedisModule_GetContextFlags,
        RedisModule_GetCurrentUserName,
        RedisModule_GetModuleUserFromUserName,
        RedisModule_ACLCheckKeyPermissions,
        RedisModule_FreeModuleUser,
        RedisModule_CreateCommand
    )
}

fn init(ctx: &Context, args: &[valkey_module::ValkeyString]) -> valkey_module::Status {
    if !api_complete() {
        ctx.log_warning("checkout_guard: this server lacks a module API function CG.DECIDE needs (Valkey 7.2 or later is required)");
        return valkey_module::Status::Err;
    }
    if args.iter().any(|a| a.as_slice() == b"test-clock") {
        TEST_CLOCK.store(true, Ordering::Relaxed);
    }
    // SAFETY: an empty string kept for the module's life (NULL context: not freed with
    // any call's).
    let empty = unsafe { api!(RedisModule_CreateString)(null_mut(), c"".as_ptr(), 0) };
    EMPTY.store(empty, Ordering::Relaxed);
    // SAFETY: as the empty string.
    let pxat = unsafe { api!(RedisModule_CreateString)(null_mut(), c"PXAT".as_ptr(), 4) };
    PXAT.store(pxat, Ordering::Relaxed);
    // Keys at positions 1 to 7 (step 1): cluster routing, ACL key permissions.
    // SAFETY: the load context; the name and flags are NUL-terminated.
    let created = unsafe {
        api!(RedisModule_CreateCommand)(
            ctx.get_raw(),
            c"CG.DECIDE".as_ptr(),
            Some(cg_decide),
            c"write deny-oom fast".as_ptr(),
            1,
            KEYS as c_int,
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
