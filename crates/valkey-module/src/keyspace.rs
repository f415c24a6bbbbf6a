//! The model's [`Keyspace`] over Valkey's keys: reads in place, writes recorded in a
//! journal and applied only once the decision is made, each replicated as its effect.
//!
//! All or nothing: [`ValkeyKeys`] writes nothing while `decide_on` runs. Each write the
//! decision asks for (`SET ... PXAT`, `HSET`, `PEXPIREAT`) is recorded, with its key name
//! resolved, its value copied and its absolute expiry computed; reads later in the same
//! decision would see the recorded writes (the model reads every key before its first
//! write, as the script's `MGET` does, so none does today). [`ValkeyKeys::apply`] then performs the journal
//! in order. So an error, or a panic anywhere in the model's code (parsing, the step,
//! encoding, arithmetic), leaves the keys as they were: nothing is half-written. What runs
//! while the journal is applied is this file's FFI calls only (no indexing, no arithmetic,
//! no allocation beyond Valkey's own).
//!
//! Keys the call does not declare (the `auto_hot` window keys) are checked as Valkey
//! checks a script's `redis.call`: their cluster slot (`model::slot`) and the user's ACL
//! permissions, before any write. The in-flight lease sets and the lease stats hash are
//! declared keys (`CG.DECIDE`'s positions 9 to 12, `CG.RELEASE`'s 1 to 4): Valkey checked
//! them.
//!
//! The lease sets (sorted sets) are read and written with the sorted set API: the leases
//! held are the set's length less its expired members (counted from the low end: few,
//! as every lease taken prunes them), the oldest one's expiry the first score after now;
//! a lease taken is `ZREMRANGEBYSCORE key -inf now` (only when one expired), `ZADD` and
//! `PEXPIREAT`, a lease released `ZREM`, each replicated as that command and notified as
//! it (`zremrangebyscore`, `zadd`, `expire`, `zrem`, and `del` when a set empties). The
//! stats counters are `HINCRBY`s, their values computed when recorded (Valkey's strict
//! integer rule, the overflow check), replicated as `HINCRBY`. A write the script's
//! command would refuse (a lease set or the stats hash of another type, a counter that is
//! not an integer, an overflow) fails the call with that command's error, before any
//! write: where the script has written part of its keys by then, the module none.

use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use checkout_guard_model::in_flight::{stats, LeaseLevel};
use checkout_guard_model::server::Keyspace;
use checkout_guard_model::slot::key_slot;
use checkout_guard_model::DecideCall;
use valkey_module::raw;

use crate::ffi::{self, Ctx, Key, Str, User};

/// The most keys a call declares (`CG.DECIDE`'s; `CG.RELEASE` has fewer).
pub const KEYS: usize = DecideCall::KEYS;

/// `WRONGTYPE`, as Valkey words it.
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The empty string, the window hash's field of all shops' count, and `PXAT` (created at
/// load, kept for the module's life).
pub static EMPTY: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());
pub static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());
/// The lease stats hash's fields (created at load, kept for the module's life), in the
/// order of [`STATS_FIELD_NAMES`].
pub static STATS_FIELDS: [AtomicPtr<raw::RedisModuleString>; 4] =
    [const { AtomicPtr::new(null_mut()) }; 4];
pub const STATS_FIELD_NAMES: [&str; 4] = [
    stats::RELEASED,
    stats::HOLD_US,
    stats::LEAKED,
    stats::EXPIRED,
];

/// A Valkey string borrowed for `'a` (a command's argument: the whole call).
#[derive(Clone, Copy)]
pub struct Arg<'a> {
    s: Str,
    _live: PhantomData<&'a raw::RedisModuleString>,
}

impl<'a> Arg<'a> {
    /// # Safety
    /// `s` is a live string, unchanged for all of `'a` (Valkey keeps a command's arguments
    /// for the call).
    pub unsafe fn new(s: Str) -> Self {
        Self {
            s,
            _live: PhantomData,
        }
    }

    pub fn raw(self) -> Str {
        self.s
    }

    /// The string's bytes, for as long as the string is borrowed.
    pub fn bytes(self) -> &'a [u8] {
        // SAFETY: `new`'s contract: live and unchanged for `'a`.
        unsafe { bytes_of(self.s) }
    }
}

/// # Safety
/// `s` is live and unchanged for `'a`.
unsafe fn bytes_of<'a>(s: Str) -> &'a [u8] {
    let mut len = 0usize;
    // SAFETY: the caller's contract.
    unsafe {
        let p = ffi::string_ptr_len(s, &mut len);
        std::slice::from_raw_parts(p.cast::<u8>(), len)
    }
}

/// A key name or field as a Valkey string: borrowed (one of the call's arguments, a string
/// kept by [`ValkeyKeys`] for the call, or one of the module's), or created for this use
/// and freed on drop. Any bytes, NUL included. A `Name` never outlives the `ValkeyKeys`
/// that made it (each is a local of its methods or in its journal).
struct Name {
    s: Str,
    owned: bool,
}

impl Name {
    fn borrowed(s: Str) -> Self {
        Self { s, owned: false }
    }

    /// A new string with `bytes` (copied), freed on drop.
    fn created(bytes: &[u8]) -> Self {
        // SAFETY: `bytes.len()` readable bytes; NULL context: freed by `drop`.
        let s = unsafe { ffi::create_string(null_mut(), bytes.as_ptr().cast(), bytes.len()) };
        Self { s, owned: true }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: a name lives at least as long as this borrow (see the type's doc).
        unsafe { bytes_of(self.s) }
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: created with a NULL context by `created`, freed once.
            unsafe { ffi::free_string(null_mut(), self.s) };
        }
    }
}

/// An open key, closed on drop.
struct Open(Key);

impl Open {
    fn key_type(&self) -> c_int {
        // SAFETY: an open handle.
        unsafe { ffi::key_type(self.0) }
    }

    fn is(&self, t: isize) -> bool {
        self.key_type() as isize == t
    }

    /// The string held, in place (`None`: missing or another type), borrowed from the
    /// handle: valid until the key is written or closed, and nothing writes while a
    /// decision reads.
    fn string(&self) -> Option<&[u8]> {
        if !self.is(raw::REDISMODULE_KEYTYPE_STRING) {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: a string key; read access.
        let p = unsafe { ffi::string_dma(self.0, &mut len, raw::REDISMODULE_READ as c_int) };
        if p.is_null() {
            return None;
        }
        // SAFETY: `len` bytes at `p`, unchanged while the handle is borrowed.
        Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        // SAFETY: opened by `ValkeyKeys::open`, closed once.
        unsafe { ffi::close_key(self.0) };
    }
}

/// A value copied for the journal: in place up to a bucket's encoding, else on the heap.
enum Bytes {
    Inline { buf: [u8; 96], len: usize },
    Heap(Vec<u8>),
}

impl Bytes {
    fn copy(v: &[u8]) -> Self {
        if v.len() <= 96 {
            let mut buf = [0u8; 96];
            buf[..v.len()].copy_from_slice(v);
            Bytes::Inline { buf, len: v.len() }
        } else {
            Bytes::Heap(v.to_vec())
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Bytes::Inline { buf, len } => &buf[..*len],
            Bytes::Heap(v) => v,
        }
    }
}

/// One write the decision asked for, not yet performed.
enum Write {
    /// `SET key value PXAT at_ms`.
    Set { key: Name, value: Bytes, at_ms: i64 },
    /// `HSET key f0 v0 f1 v1`.
    HSet { key: Name, fields: [(Name, i64); 2] },
    /// `PEXPIREAT key at_ms`.
    PExpireAt { key: Name, at_ms: i64 },
    /// `DEL key` (the adaptive state, when the budget recovered).
    Del { key: Name },
    /// `ZREMRANGEBYSCORE key -inf max`: the expired leases (recorded only when some are).
    ZRemExpired { key: Name, max: i64 },
    /// `ZADD key score member`: a lease taken.
    ZAdd { key: Name, member: Name, score: i64 },
    /// `ZREM key member`: a lease released.
    ZRem { key: Name, member: Name },
    /// `HINCRBY key field by`, `value` the field's value after it (computed when recorded).
    HIncrBy {
        key: Name,
        field: Name,
        by: i64,
        value: i64,
    },
}

impl Write {
    fn key(&self) -> &Name {
        match self {
            Write::Set { key, .. }
            | Write::HSet { key, .. }
            | Write::PExpireAt { key, .. }
            | Write::Del { key }
            | Write::ZRemExpired { key, .. }
            | Write::ZAdd { key, .. }
            | Write::ZRem { key, .. }
            | Write::HIncrBy { key, .. } => key,
        }
    }
}

/// The type a key holds, as far as the writes of a call go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Empty,
    String,
    Hash,
    Zset,
    Other,
}

impl Kind {
    fn of(t: c_int) -> Self {
        match t as isize {
            raw::REDISMODULE_KEYTYPE_EMPTY => Kind::Empty,
            raw::REDISMODULE_KEYTYPE_STRING => Kind::String,
            raw::REDISMODULE_KEYTYPE_HASH => Kind::Hash,
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::Zset,
            _ => Kind::Other,
        }
    }
}

/// The writes of one decision, in order (a decision makes at most 18: three buckets, the
/// window's `HSET` and `PEXPIREAT`, the mark, per in-flight level the expired leases'
/// removal, the lease's `ZADD` and `PEXPIREAT`, the expired count, the settings and the
/// adaptive state's `DEL`; a release at most 6; more go on the heap).
#[derive(Default)]
struct Journal {
    fixed: [Option<Write>; 18],
    len: usize,
    more: Vec<Write>,
}

impl Journal {
    fn push(&mut self, w: Write) {
        match self.fixed.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(w);
                self.len += 1;
            }
            None => self.more.push(w),
        }
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = &Write> {
        self.fixed[..self.len]
            .iter()
            .flatten()
            .chain(self.more.iter())
    }

    fn take(&mut self) -> impl Iterator<Item = Write> + '_ {
        let n = std::mem::take(&mut self.len);
        self.fixed[..n]
            .iter_mut()
            .filter_map(Option::take)
            .chain(self.more.drain(..))
    }
}

/// What the journal holds for one key, for reads that follow recorded writes.
#[derive(Default)]
struct Recorded<'j> {
    /// The value of the key's last recorded `SET` and its expiry (as later `PEXPIREAT`s
    /// left it).
    string: Option<(&'j [u8], i64)>,
    /// An `HSET` is recorded on the key (it is a hash after, unless it holds a string:
    /// `HSET` is then not performed).
    hset: bool,
    /// The last `PEXPIREAT` recorded (where no `SET` was).
    expire_at: Option<i64>,
}

/// The decision's reads and writes on Valkey's keys, each write replicated as its effect.
pub struct ValkeyKeys<'a> {
    ctx: Ctx,
    /// The call's keys (the first `nkeys`) and their bytes.
    keys: [Arg<'a>; KEYS],
    key_bytes: [&'a [u8]; KEYS],
    nkeys: usize,
    /// Arguments used as a hash field or a set member (the shop, the lease id), and their
    /// bytes.
    strings: [Arg<'a>; 2],
    string_bytes: [&'a [u8]; 2],
    /// Valkey's time of this command, in ms (absolute expiry times).
    now_ms: i64,
    /// Added to every bucket's expiry (test clock only).
    slack_ms: i64,
    /// The writes asked for, performed by [`Self::apply`].
    journal: Journal,
    /// Key names created in this call (the window keys, each used up to four times),
    /// freed with it.
    created: [Str; 2],
    /// The current window's hash, opened for writing when read and kept open until it is
    /// written (by its name).
    held: Option<(Str, Open)>,
    /// The calling user, looked up for the first undeclared key's ACL check (null: no user
    /// to check, a call from the server itself).
    user: Option<User>,
    /// Tests only (`test-panic`): panic at the first `set_px` asked for.
    panic_at_set_px: bool,
    /// A recorded write the script's command would refuse: the call's error, nothing
    /// applied (see [`Self::finish`]).
    failed: Option<String>,
}

impl Drop for ValkeyKeys<'_> {
    fn drop(&mut self) {
        // The journal's names and the held handle first: they may use the created names.
        self.journal = Journal::default();
        self.held = None;
        if let Some(u) = self.user.take().filter(|u| !u.is_null()) {
            // SAFETY: from get_module_user_from_user_name, freed once.
            unsafe { ffi::free_module_user(u) };
        }
        for s in self.created {
            if !s.is_null() {
                // SAFETY: created by `name` with a NULL context, freed once.
                unsafe { ffi::free_string(null_mut(), s) };
            }
        }
    }
}

impl<'a> ValkeyKeys<'a> {
    /// The key space of one call: its context, its keys (at least one, at most [`KEYS`]),
    /// the arguments used as hash fields or set members (the shop, the lease id), Valkey's
    /// time (µs) and the slack added to a bucket's expiry (test clock).
    pub fn new(
        ctx: Ctx,
        keys: &[Arg<'a>],
        strings: [Arg<'a>; 2],
        now_us: i64,
        slack_ms: i64,
    ) -> Self {
        let nkeys = keys.len().min(KEYS);
        let all: [Arg<'a>; KEYS] = std::array::from_fn(|i| keys[i.min(nkeys - 1)]);
        Self {
            ctx,
            keys: all,
            key_bytes: all.map(Arg::bytes),
            nkeys,
            strings,
            string_bytes: strings.map(Arg::bytes),
            now_ms: now_us.div_euclid(1000),
            slack_ms,
            journal: Journal::default(),
            created: [null_mut(); 2],
            held: None,
            user: None,
            panic_at_set_px: false,
            failed: None,
        }
    }

    /// The call's outcome once the model answered: the error of a write the script's
    /// command would refuse (nothing written), or the recorded writes performed.
    pub fn finish(&mut self) -> Result<(), String> {
        match self.failed.take() {
            Some(e) => Err(e),
            None => {
                self.apply();
                Ok(())
            }
        }
    }

    /// Records the call's error (the first one).
    fn fail(&mut self, e: impl FnOnce() -> String) {
        if self.failed.is_none() {
            self.failed = Some(e());
        }
    }

    /// Tests only: the decision panics when it asks for its first `set_px` (the settings,
    /// or a mark), after its bucket writes were recorded.
    pub fn panic_at_set_px(&mut self) {
        self.panic_at_set_px = true;
    }

    /// Performs the recorded writes, in the order the decision asked for them.
    fn apply(&mut self) {
        let mut journal = std::mem::take(&mut self.journal);
        for w in journal.take() {
            match w {
                Write::Set { key, value, at_ms } => self.apply_set(&key, value.as_slice(), at_ms),
                Write::HSet { key, fields } => self.apply_hset(&key, &fields),
                Write::PExpireAt { key, at_ms } => self.apply_pexpireat(&key, at_ms),
                Write::Del { key } => self.apply_del(&key),
                Write::ZRemExpired { key, max } => self.apply_zrem_expired(&key, max),
                Write::ZAdd { key, member, score } => self.apply_zadd(&key, &member, score),
                Write::ZRem { key, member } => self.apply_zrem(&key, &member),
                Write::HIncrBy {
                    key,
                    field,
                    by,
                    value,
                } => self.apply_hincrby(&key, &field, by, value),
            }
        }
    }

    /// `key` as a Valkey string: the call's own argument when it is one (the model passes
    /// the very slices it was given: same address, which no other live buffer can have),
    /// else one created in this call with the same bytes, else created now.
    fn name(&mut self, key: &[u8]) -> Name {
        let own = self.key_bytes[..self.nkeys]
            .iter()
            .position(|k| std::ptr::eq(k.as_ptr(), key.as_ptr()) && k.len() == key.len());
        if let Some(i) = own {
            return Name::borrowed(self.keys[i].raw());
        }
        if let Some(&s) = self
            .created
            .iter()
            // SAFETY: a created name lives until `drop`.
            .find(|s| !s.is_null() && unsafe { bytes_of(**s) } == key)
        {
            return Name::borrowed(s);
        }
        let mut name = Name::created(key);
        if let Some(slot) = self.created.iter_mut().find(|s| s.is_null()) {
            // Kept for the call (freed by `drop`).
            name.owned = false;
            *slot = name.s;
        }
        name
    }

    /// Whether `key` is one of the call's keys (the very slice the call holds).
    fn declared(&self, key: &[u8]) -> bool {
        self.key_bytes[..self.nkeys]
            .iter()
            .any(|k| std::ptr::eq(k.as_ptr(), key.as_ptr()) && k.len() == key.len())
    }

    /// A hash field or a set member as a Valkey string: one of the call's arguments (the
    /// shop, the lease id: the very slice), the empty string, a stats field, or created.
    fn field(&self, f: &[u8]) -> Name {
        if let Some(i) = self
            .string_bytes
            .iter()
            .position(|s| std::ptr::eq(f.as_ptr(), s.as_ptr()) && f.len() == s.len())
        {
            return Name::borrowed(self.strings[i].raw());
        }
        if f.is_empty() {
            return Name::borrowed(EMPTY.load(Ordering::Relaxed));
        }
        if let Some(i) = STATS_FIELD_NAMES.iter().position(|n| n.as_bytes() == f) {
            return Name::borrowed(STATS_FIELDS[i].load(Ordering::Relaxed));
        }
        Name::created(f)
    }

    fn open(&self, name: &Name, mode: u32) -> Open {
        // SAFETY: a live context and key name; the handle is closed by `Open`'s drop.
        Open(unsafe { ffi::open_key(self.ctx, name.s, mode as c_int) })
    }

    /// `name` open for writing: the handle kept open for it (by its bytes: a key is
    /// never open twice), or opened now.
    fn writable(&mut self, name: &Name) -> Open {
        match self.held.take() {
            // SAFETY: a held name lives while held.
            Some((s, k)) if s == name.s || unsafe { bytes_of(s) } == name.bytes() => k,
            other => {
                self.held = other;
                self.open(name, raw::REDISMODULE_WRITE)
            }
        }
    }

    /// Keeps `k` open for the next write to `name`'s key, when `name` lives as long as
    /// the call (one of its arguments, or a name kept for it): one freed sooner (a name
    /// created for one use) is not held, its handle closed.
    fn hold(&mut self, name: &Name, k: Open) {
        if !name.owned {
            self.held = Some((name.s, k));
        }
    }

    fn notify(&self, kind: c_int, event: &CStr, name: &Name) {
        // SAFETY: a live context and key name; `event` is NUL-terminated.
        unsafe { ffi::notify_keyspace_event(self.ctx, kind, event.as_ptr(), name.s) };
    }

    /// What the journal holds for `key`.
    fn recorded(&self, key: &[u8]) -> Recorded<'_> {
        let mut r = Recorded::default();
        for w in self.journal.iter().filter(|w| w.key().bytes() == key) {
            match w {
                Write::Set { value, at_ms, .. } => {
                    r.string = Some((value.as_slice(), *at_ms));
                    r.expire_at = None;
                }
                Write::HSet { .. } => r.hset = true,
                Write::PExpireAt { at_ms, .. } => match &mut r.string {
                    Some((_, at)) => *at = *at_ms,
                    None => r.expire_at = Some(*at_ms),
                },
                // The decision's last write: no read follows it.
                Write::Del { .. } => r = Recorded::default(),
                // A sorted set or a hash now (recorded only where the key holds no
                // string): no string to read.
                Write::ZAdd { .. } | Write::HIncrBy { .. } => {
                    r.string = None;
                    r.hset = true;
                }
                Write::ZRemExpired { .. } | Write::ZRem { .. } => {}
            }
        }
        r
    }

    /// A window key (`<prefix><n>`) is not among the keys the call declares, so Valkey
    /// checked neither its cluster slot nor the user's ACL permissions on it, as it checks
    /// every key a script's `redis.call` touches: checked here, before any write. `write`:
    /// the key is written too.
    fn check_undeclared(&mut self, name: &Name, write: bool) -> Result<(), String> {
        let key = name.bytes();
        let quoted = || String::from_utf8_lossy(key).escape_default().to_string();
        // SAFETY: a live context.
        let flags = unsafe { ffi::get_context_flags(self.ctx) };
        if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0
            && key_slot(key) != key_slot(self.key_bytes[0])
        {
            return Err(format!(
                "CROSSSLOT the auto_hot window key \"{}\" does not hash to the slot of the call's keys",
                quoted()
            ));
        }
        let ctx = self.ctx;
        let user = *self.user.get_or_insert_with(|| {
            // SAFETY: the command's context; the name is freed here, the user by `drop`.
            unsafe {
                let user_name = ffi::get_current_user_name(ctx);
                if user_name.is_null() {
                    return null_mut();
                }
                let user = ffi::get_module_user_from_user_name(user_name);
                ffi::free_string(null_mut(), user_name);
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
        let allowed = unsafe { ffi::acl_check_key_permissions(user, name.s, perm as c_int) };
        if allowed != raw::REDISMODULE_OK as c_int {
            return Err(format!(
                "NOPERM this user has no permissions to access the auto_hot window key \"{}\"",
                quoted()
            ));
        }
        Ok(())
    }

    fn record_set(&mut self, key: &[u8], value: &[u8], at_ms: i64) {
        let key = self.name(key);
        self.journal.push(Write::Set {
            key,
            value: Bytes::copy(value),
            at_ms,
        });
    }

    /// `SET key value PXAT at`, done with the key API and replicated as that command.
    fn apply_set(&mut self, name: &Name, value: &[u8], at_ms: i64) {
        // A handle kept open on the same key (a call whose keys alias) would not see this
        // write: closed first, so the next write opens the key as it is.
        if self
            .held
            .as_ref()
            // SAFETY: a held name lives while held.
            .is_some_and(|(s, _)| unsafe { bytes_of(*s) } == name.bytes())
        {
            self.held = None;
        }
        let k = self.open(name, raw::REDISMODULE_WRITE);
        // SAFETY: `k` is open for writing; the DMA pointer is written at once, before any
        // other call on the key.
        unsafe {
            if !k.is(raw::REDISMODULE_KEYTYPE_STRING) && !k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
                // Another type: replaced, as `SET` replaces it.
                ffi::delete_key(k.0);
            }
            if value.is_empty() {
                // Truncating an empty key to 0 creates nothing: an empty string is set.
                let empty = ffi::create_string(null_mut(), c"".as_ptr(), 0);
                ffi::string_set(k.0, empty);
                ffi::free_string(null_mut(), empty);
            } else {
                // Resized in place (created when empty), then written in place.
                if ffi::value_length(k.0) != value.len() {
                    ffi::string_truncate(k.0, value.len());
                }
                let mut len = 0usize;
                let p = ffi::string_dma(k.0, &mut len, raw::REDISMODULE_WRITE as c_int);
                if !p.is_null() && len == value.len() {
                    std::ptr::copy_nonoverlapping(value.as_ptr(), p.cast::<u8>(), len);
                }
            }
            ffi::set_abs_expire(k.0, at_ms);
        }
        drop(k);
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set", name);
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", name);
        // SAFETY: the command's context, a live name and `PXAT`.
        unsafe {
            ffi::replicate_set_pxat(self.ctx, name.s, value, PXAT.load(Ordering::Relaxed), at_ms)
        };
    }

    fn apply_hset(&mut self, name: &Name, fields: &[(Name, i64); 2]) {
        let [(f0, v0), (f1, v1)] = fields;
        let k = self.writable(name);
        if !k.is(raw::REDISMODULE_KEYTYPE_HASH) && !k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            // Read as a hash before any write; another type now only where the call's keys
            // alias (the window key is one the decision set as a string): no write, as
            // HSET's WRONGTYPE writes nothing.
            return;
        }
        // SAFETY: open for writing, a hash or empty; live strings. The values are
        // replicated as they were set, then freed once.
        unsafe {
            let a = ffi::create_string_from_long_long(null_mut(), *v0);
            let b = ffi::create_string_from_long_long(null_mut(), *v1);
            ffi::hash_set2(k.0, f0.s, a, f1.s, b);
            self.notify(raw::REDISMODULE_NOTIFY_HASH, c"hset", name);
            ffi::replicate_hset2(self.ctx, name.s, f0.s, a, f1.s, b);
            ffi::free_string(null_mut(), a);
            ffi::free_string(null_mut(), b);
        }
        self.hold(name, k);
    }

    fn apply_del(&mut self, name: &Name) {
        if self
            .held
            .as_ref()
            // SAFETY: a held name lives while held.
            .is_some_and(|(s, _)| unsafe { bytes_of(*s) } == name.bytes())
        {
            self.held = None;
        }
        let k = self.open(name, raw::REDISMODULE_WRITE);
        if k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            return;
        }
        // SAFETY: open for writing, not empty.
        unsafe { ffi::delete_key(k.0) };
        drop(k);
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", name);
        // SAFETY: the command's context and a live name.
        unsafe { ffi::replicate_del(self.ctx, name.s) };
    }

    fn apply_pexpireat(&mut self, name: &Name, at_ms: i64) {
        let k = self.writable(name);
        // SAFETY: open for writing (an empty key is refused by the API, as PEXPIREAT
        // answers 0 there).
        let set = unsafe { ffi::set_abs_expire(k.0, at_ms) };
        self.hold(name, k);
        if set == raw::REDISMODULE_OK as c_int {
            self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", name);
            // SAFETY: the command's context and a live name.
            unsafe { ffi::replicate_pexpireat(self.ctx, name.s, at_ms) };
        }
    }
}

impl ValkeyKeys<'_> {
    /// The type `key` holds after the recorded writes (`None`: none changes it; the key
    /// holds what it holds now).
    fn kind_after(&self, key: &[u8]) -> Option<Kind> {
        let mut kind = None;
        for w in self.journal.iter().filter(|w| w.key().bytes() == key) {
            kind = match w {
                Write::Set { .. } => Some(Kind::String),
                Write::Del { .. } => Some(Kind::Empty),
                // Not performed on a string (see `apply_hset`).
                Write::HSet { .. } if kind == Some(Kind::String) => kind,
                Write::HSet { .. } | Write::HIncrBy { .. } => Some(Kind::Hash),
                Write::ZAdd { .. } => Some(Kind::Zset),
                Write::PExpireAt { .. } | Write::ZRemExpired { .. } | Write::ZRem { .. } => kind,
            };
        }
        kind
    }

    /// The type `key` holds for the next recorded write: after the recorded writes, else
    /// now.
    fn kind_for_write(&mut self, key: &[u8]) -> Kind {
        match self.kind_after(key) {
            Some(k) => k,
            None => {
                let name = self.name(key);
                Kind::of(self.open(&name, raw::REDISMODULE_READ).key_type())
            }
        }
    }

    /// The members of the sorted set at `k` scored at most `max` (the expired leases).
    fn count_expired(k: &Open, max: i64) -> i64 {
        let mut n = 0;
        // SAFETY: an open handle on a sorted set; the iterator is stopped before the
        // handle is closed or written.
        unsafe {
            let ok = ffi::zset_first_in_score_range(k.0, f64::NEG_INFINITY, max as f64, 0, 0);
            if ok == raw::REDISMODULE_OK as c_int && ffi::zset_range_end_reached(k.0) == 0 {
                n = 1;
                while ffi::zset_range_next(k.0) != 0 {
                    n += 1;
                }
            }
            ffi::zset_range_stop(k.0);
        }
        n
    }

    /// `ZREMRANGEBYSCORE key -inf max`: one element at a time (the iterator is not
    /// valid across a removal), each the first of the range again.
    fn apply_zrem_expired(&mut self, name: &Name, max: i64) {
        let k = self.writable(name);
        let mut removed = 0i64;
        if k.is(raw::REDISMODULE_KEYTYPE_ZSET) {
            // SAFETY: open for writing on a sorted set; the iterator stopped before each
            // removal; each element string freed once. Ends: every turn removes one
            // element of the range, or stops.
            unsafe {
                loop {
                    let ok =
                        ffi::zset_first_in_score_range(k.0, f64::NEG_INFINITY, max as f64, 0, 0);
                    let ele = match ok == raw::REDISMODULE_OK as c_int
                        && ffi::zset_range_end_reached(k.0) == 0
                    {
                        true => ffi::zset_range_current_element(k.0, null_mut()),
                        false => null_mut(),
                    };
                    ffi::zset_range_stop(k.0);
                    if ele.is_null() {
                        break;
                    }
                    let mut deleted: c_int = 0;
                    ffi::zset_rem(k.0, ele, &mut deleted);
                    ffi::free_string(self.ctx, ele);
                    if deleted == 0 {
                        break;
                    }
                    removed += 1;
                }
            }
        }
        let emptied = removed > 0 && k.is(raw::REDISMODULE_KEYTYPE_EMPTY);
        self.hold(name, k);
        if removed > 0 {
            self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zremrangebyscore", name);
            if emptied {
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", name);
            }
            // SAFETY: the command's context and a live name.
            unsafe { ffi::replicate_zremrangebyscore(self.ctx, name.s, max) };
        }
    }

    fn apply_zadd(&mut self, name: &Name, member: &Name, score: i64) {
        let k = self.writable(name);
        let mut flags: c_int = 0;
        if k.is(raw::REDISMODULE_KEYTYPE_ZSET) || k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            // SAFETY: open for writing on a sorted set or empty key; a live member.
            unsafe { ffi::zset_add(k.0, score as f64, member.s, &mut flags) };
        }
        self.hold(name, k);
        let changed = (raw::REDISMODULE_ZADD_ADDED | raw::REDISMODULE_ZADD_UPDATED) as c_int;
        if flags & changed != 0 {
            self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zadd", name);
            // SAFETY: the command's context, live strings.
            unsafe { ffi::replicate_zadd(self.ctx, name.s, score, member.s) };
        }
    }

    fn apply_zrem(&mut self, name: &Name, member: &Name) {
        let k = self.writable(name);
        let mut deleted: c_int = 0;
        if k.is(raw::REDISMODULE_KEYTYPE_ZSET) {
            // SAFETY: open for writing on a sorted set; a live member.
            unsafe { ffi::zset_rem(k.0, member.s, &mut deleted) };
        }
        let emptied = deleted != 0 && k.is(raw::REDISMODULE_KEYTYPE_EMPTY);
        self.hold(name, k);
        if deleted != 0 {
            self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zrem", name);
            if emptied {
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del", name);
            }
            // SAFETY: the command's context, live strings.
            unsafe { ffi::replicate_zrem(self.ctx, name.s, member.s) };
        }
    }

    fn apply_hincrby(&mut self, name: &Name, field: &Name, by: i64, value: i64) {
        let k = self.writable(name);
        if !k.is(raw::REDISMODULE_KEYTYPE_HASH) && !k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            // Checked when recorded: another type only where a recorded write made it so,
            // which `kind_after` refused.
            self.hold(name, k);
            return;
        }
        // SAFETY: open for writing, a hash or empty; live strings; the value freed once.
        unsafe {
            let v = ffi::create_string_from_long_long(null_mut(), value);
            ffi::hash_set1(k.0, field.s, v);
            ffi::free_string(null_mut(), v);
        }
        self.hold(name, k);
        self.notify(raw::REDISMODULE_NOTIFY_HASH, c"hincrby", name);
        // SAFETY: the command's context, live strings.
        unsafe { ffi::replicate_hincrby(self.ctx, name.s, field.s, by) };
    }

    /// The value `field` of the hash `key` has before the next recorded write to it, as
    /// `HINCRBY` reads it (missing: 0; not an integer by Valkey's strict rule: its error).
    fn counter(&mut self, key: &[u8], field: &[u8], kind: Kind) -> Result<i64, String> {
        let mut known = None;
        for w in self.journal.iter().filter(|w| w.key().bytes() == key) {
            match w {
                Write::HIncrBy {
                    field: f, value, ..
                } if f.bytes() == field => known = Some(*value),
                Write::HSet { fields, .. } => {
                    if let Some((_, v)) = fields.iter().find(|(f, _)| f.bytes() == field) {
                        known = Some(*v);
                    }
                }
                Write::Del { .. } => known = Some(0),
                _ => {}
            }
        }
        if let Some(v) = known {
            return Ok(v);
        }
        if kind != Kind::Hash {
            return Ok(0);
        }
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        if !k.is(raw::REDISMODULE_KEYTYPE_HASH) {
            return Ok(0);
        }
        let f = self.field(field);
        let mut v: Str = null_mut();
        // SAFETY: a hash key; a live field name.
        unsafe { ffi::hash_get1(k.0, f.s, &mut v) };
        if v.is_null() {
            return Ok(0);
        }
        // SAFETY: a copy HashGet made for this module, live until freed below.
        let parsed = string2ll(unsafe { bytes_of(v) });
        // SAFETY: that copy, freed once.
        unsafe { ffi::free_string(self.ctx, v) };
        parsed.ok_or_else(|| "ERR hash value is not an integer".to_string())
    }
}

/// Valkey's `string2ll`: an integer exactly as Valkey writes one (no sign but `-`, no
/// leading zero, no space), in range; `None` otherwise.
fn string2ll(b: &[u8]) -> Option<i64> {
    let digits = b.strip_prefix(b"-").unwrap_or(b);
    let strict = match digits {
        [b'0'] => b.len() == 1,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !strict || b.len() > 20 {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

impl Keyspace for ValkeyKeys<'_> {
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        let recorded = self.recorded(key);
        if let Some((v, _)) = recorded.string {
            return read(Some(v));
        }
        let hset = recorded.hset;
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        match (k.string(), hset) {
            // A recorded HSET makes it a hash unless it holds a string.
            (None, true) => read(None),
            (v, _) => read(v),
        }
    }

    fn has_string(&mut self, key: &[u8]) -> bool {
        if self.recorded(key).string.is_some() {
            return true;
        }
        // The type only: a mark's value is never read (nor converted for reading).
        let name = self.name(key);
        self.open(&name, raw::REDISMODULE_READ)
            .is(raw::REDISMODULE_KEYTYPE_STRING)
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        let (string_at, hset, expire_at) = {
            let r = self.recorded(key);
            (r.string.map(|(_, at)| at), r.hset, r.expire_at)
        };
        if let Some(at) = string_at {
            return at - self.now_ms;
        }
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        let exists = !k.is(raw::REDISMODULE_KEYTYPE_EMPTY);
        match expire_at {
            Some(at) if exists || hset => at - self.now_ms,
            _ if !exists => -2,
            // SAFETY: an open, non-empty key. -1 without expiry, as PTTL.
            _ => unsafe { ffi::get_expire(k.0) },
        }
    }

    fn hash_ints(
        &mut self,
        key: &[u8],
        fields: [&[u8]; 2],
        written_next: bool,
    ) -> Result<[i64; 2], String> {
        let name = self.name(key);
        // The lease stats hash is one of the call's keys, which Valkey checked; a window
        // key never is (see `check_undeclared`).
        if !self.declared(key) {
            self.check_undeclared(&name, written_next)?;
        }
        // A hash written next is opened for writing now, and kept open for it.
        let mode = match written_next {
            true => raw::REDISMODULE_WRITE,
            false => raw::REDISMODULE_READ,
        };
        let k = self.open(&name, mode);
        if k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            if written_next {
                self.hold(&name, k);
            }
            return Ok([0, 0]);
        }
        if !k.is(raw::REDISMODULE_KEYTYPE_HASH) {
            // As HMGET (and the script's HMGET) answers.
            return Err("WRONGTYPE Operation against a key holding the wrong kind of value".into());
        }
        let (f0, f1) = (self.field(fields[0]), self.field(fields[1]));
        let mut values: [Str; 2] = [null_mut(); 2];
        let [v0, v1] = &mut values;
        // SAFETY: a hash key; live field names.
        unsafe { ffi::hash_get2(k.0, f0.s, v0, f1.s, v1) };
        let mut out = [0i64; 2];
        for (slot, v) in out.iter_mut().zip(values) {
            if v.is_null() {
                continue;
            }
            // Read as the script's `tonumber` reads a counter the extension wrote; anything
            // else (bytes that are not a number) counts 0.
            // SAFETY: a copy HashGet made for this module, live until freed below.
            *slot = std::str::from_utf8(unsafe { bytes_of(v) })
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0);
            // SAFETY: that copy (the context has no automatic memory), freed once.
            unsafe { ffi::free_string(self.ctx, v) };
        }
        if written_next {
            self.hold(&name, k);
        }
        Ok(out)
    }

    fn set_bucket(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.record_set(key, value, self.now_ms + px_ms + self.slack_ms);
    }

    fn set_px(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        if self.panic_at_set_px {
            panic!("test-panic, a panic forced halfway through a decision");
        }
        self.record_set(key, value, self.now_ms + px_ms);
    }

    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], i64)]) {
        let &[(f0, v0), (f1, v1)] = pairs else {
            // The model writes the shop's and all shops' counts, always both.
            return;
        };
        let key = self.name(key);
        let fields = [(self.field(f0), v0), (self.field(f1), v1)];
        self.journal.push(Write::HSet { key, fields });
    }

    fn pexpire(&mut self, key: &[u8], ms: i64) {
        let at_ms = self.now_ms + ms;
        let key = self.name(key);
        self.journal.push(Write::PExpireAt { key, at_ms });
    }

    fn del(&mut self, key: &[u8]) {
        let key = self.name(key);
        self.journal.push(Write::Del { key });
    }

    fn leases_held(&mut self, key: &[u8], now: i64, oldest: bool) -> Result<LeaseLevel, String> {
        // The model reads every lease set before it writes one: what the journal holds
        // matters only where the call's keys alias (a set that is a string or a hash by
        // then is ZCOUNT's error).
        if matches!(
            self.kind_after(key),
            Some(Kind::String | Kind::Hash | Kind::Other)
        ) {
            return Err(WRONGTYPE.into());
        }
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        if k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            return Ok(LeaseLevel::default());
        }
        if !k.is(raw::REDISMODULE_KEYTYPE_ZSET) {
            return Err(WRONGTYPE.into());
        }
        // SAFETY: an open handle.
        let len = unsafe { ffi::value_length(k.0) } as i64;
        let held = len - Self::count_expired(&k, now);
        let mut oldest_expiry_us = 0;
        if oldest && held > 0 {
            let mut score = 0f64;
            // SAFETY: an open handle on a sorted set; the element string freed once, the
            // iterator stopped before the handle closes.
            unsafe {
                let ok = ffi::zset_first_in_score_range(k.0, now as f64, f64::INFINITY, 1, 0);
                if ok == raw::REDISMODULE_OK as c_int && ffi::zset_range_end_reached(k.0) == 0 {
                    let ele = ffi::zset_range_current_element(k.0, &mut score);
                    if !ele.is_null() {
                        ffi::free_string(self.ctx, ele);
                        oldest_expiry_us = score as i64;
                    }
                }
                ffi::zset_range_stop(k.0);
            }
        }
        Ok(LeaseLevel {
            held,
            oldest_expiry_us,
        })
    }

    fn lease_take(&mut self, key: &[u8], id: &[u8], expiry_us: i64, now: i64, px_ms: i64) -> i64 {
        // Expired leases: counted in the set as it is, unless this call wrote it already
        // (its keys alias: an earlier lease taken pruned it, or the set was deleted).
        let (kind, expired) = match self.kind_after(key) {
            Some(kind) => (kind, 0),
            None => {
                let name = self.name(key);
                let k = self.open(&name, raw::REDISMODULE_READ);
                match Kind::of(k.key_type()) {
                    Kind::Zset => (Kind::Zset, Self::count_expired(&k, now)),
                    kind => (kind, 0),
                }
            }
        };
        if !matches!(kind, Kind::Zset | Kind::Empty) {
            self.fail(|| WRONGTYPE.into());
            return 0;
        }
        if expired > 0 {
            let name = self.name(key);
            self.journal.push(Write::ZRemExpired {
                key: name,
                max: now,
            });
        }
        let (name, member) = (self.name(key), self.field(id));
        self.journal.push(Write::ZAdd {
            key: name,
            member,
            score: expiry_us,
        });
        let name = self.name(key);
        self.journal.push(Write::PExpireAt {
            key: name,
            at_ms: self.now_ms + px_ms,
        });
        expired
    }

    fn lease_score(&mut self, key: &[u8], id: &[u8]) -> Result<Option<i64>, String> {
        // As `leases_held`: read before any write.
        match self.kind_after(key) {
            Some(Kind::String | Kind::Hash | Kind::Other) => return Err(WRONGTYPE.into()),
            Some(Kind::Empty) => return Ok(None),
            _ => {}
        }
        let name = self.name(key);
        let k = self.open(&name, raw::REDISMODULE_READ);
        if k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            return Ok(None);
        }
        if !k.is(raw::REDISMODULE_KEYTYPE_ZSET) {
            return Err(WRONGTYPE.into());
        }
        let member = self.field(id);
        let mut score = 0f64;
        // SAFETY: an open handle on a sorted set; a live member.
        let found = unsafe { ffi::zset_score(k.0, member.s, &mut score) };
        // An integer below 2^53 as every engine writes it; another score as the script's
        // `tonumber` and arithmetic would come near it (truncated).
        Ok((found == raw::REDISMODULE_OK as c_int).then_some(score as i64))
    }

    fn lease_remove(&mut self, key: &[u8], id: &[u8]) {
        let kind = self.kind_for_write(key);
        if !matches!(kind, Kind::Zset | Kind::Empty) {
            self.fail(|| WRONGTYPE.into());
            return;
        }
        let (name, member) = (self.name(key), self.field(id));
        self.journal.push(Write::ZRem { key: name, member });
    }

    fn hincrby(&mut self, key: &[u8], field: &[u8], n: i64) {
        let kind = self.kind_for_write(key);
        if !matches!(kind, Kind::Hash | Kind::Empty) {
            self.fail(|| WRONGTYPE.into());
            return;
        }
        let value = match self.counter(key, field, kind) {
            Ok(old) => match old.checked_add(n) {
                Some(v) => v,
                None => {
                    self.fail(|| "ERR increment or decrement would overflow".into());
                    return;
                }
            },
            Err(e) => {
                self.fail(|| e);
                return;
            }
        };
        let (name, f) = (self.name(key), self.field(field));
        self.journal.push(Write::HIncrBy {
            key: name,
            field: f,
            by: n,
            value,
        });
    }
}
