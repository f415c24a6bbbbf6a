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
//! permissions, before any write.

use std::ffi::{c_int, CStr};
use std::marker::PhantomData;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, Ordering};

use checkout_guard_model::server::Keyspace;
use checkout_guard_model::slot::key_slot;
use checkout_guard_model::DecideCall;
use valkey_module::raw;

use crate::ffi::{self, Ctx, Key, Str, User};

pub const KEYS: usize = DecideCall::KEYS;

/// The empty string, the window hash's field of all shops' count, and `PXAT` (created at
/// load, kept for the module's life).
pub static EMPTY: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());
pub static PXAT: AtomicPtr<raw::RedisModuleString> = AtomicPtr::new(null_mut());

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
}

impl Write {
    fn key(&self) -> &Name {
        match self {
            Write::Set { key, .. }
            | Write::HSet { key, .. }
            | Write::PExpireAt { key, .. }
            | Write::Del { key } => key,
        }
    }
}

/// The writes of one decision, in order (a decision makes at most 8: three buckets, the
/// window's `HSET` and `PEXPIREAT`, the mark, the settings and the adaptive state's `DEL`;
/// more go on the heap).
#[derive(Default)]
struct Journal {
    fixed: [Option<Write>; 8],
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
    /// The call's [`KEYS`] keys (arguments 1 to [`KEYS`]) and their bytes.
    keys: [Arg<'a>; KEYS],
    key_bytes: [&'a [u8]; KEYS],
    /// The shop (a window hash's field) and its bytes.
    shop: Arg<'a>,
    shop_bytes: &'a [u8],
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
    /// The key space of one call: its context, its [`KEYS`] keys and its shop argument, Valkey's
    /// time (µs) and the slack added to a bucket's expiry (test clock).
    pub fn new(ctx: Ctx, keys: [Arg<'a>; KEYS], shop: Arg<'a>, now_us: i64, slack_ms: i64) -> Self {
        Self {
            ctx,
            keys,
            key_bytes: keys.map(Arg::bytes),
            shop,
            shop_bytes: shop.bytes(),
            now_ms: now_us.div_euclid(1000),
            slack_ms,
            journal: Journal::default(),
            created: [null_mut(); 2],
            held: None,
            user: None,
            panic_at_set_px: false,
        }
    }

    /// Tests only: the decision panics when it asks for its first `set_px` (the settings,
    /// or a mark), after its bucket writes were recorded.
    pub fn panic_at_set_px(&mut self) {
        self.panic_at_set_px = true;
    }

    /// Performs the recorded writes, in the order the decision asked for them.
    pub fn apply(&mut self) {
        let mut journal = std::mem::take(&mut self.journal);
        for w in journal.take() {
            match w {
                Write::Set { key, value, at_ms } => self.apply_set(&key, value.as_slice(), at_ms),
                Write::HSet { key, fields } => self.apply_hset(&key, &fields),
                Write::PExpireAt { key, at_ms } => self.apply_pexpireat(&key, at_ms),
                Write::Del { key } => self.apply_del(&key),
            }
        }
    }

    /// `key` as a Valkey string: the call's own argument when it is one (the model passes
    /// the very slices it was given: same address, which no other live buffer can have),
    /// else one created in this call with the same bytes, else created now.
    fn name(&mut self, key: &[u8]) -> Name {
        let own = self
            .key_bytes
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

    /// A hash field as a Valkey string: the shop's argument, the empty string, or created.
    fn field(&self, f: &[u8]) -> Name {
        let shop = self.shop_bytes;
        if std::ptr::eq(f.as_ptr(), shop.as_ptr()) && f.len() == shop.len() {
            return Name::borrowed(self.shop.raw());
        }
        if f.is_empty() {
            return Name::borrowed(EMPTY.load(Ordering::Relaxed));
        }
        Name::created(f)
    }

    fn open(&self, name: &Name, mode: u32) -> Open {
        // SAFETY: a live context and key name; the handle is closed by `Open`'s drop.
        Open(unsafe { ffi::open_key(self.ctx, name.s, mode as c_int) })
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
        self.held = Some((name.s, k));
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
        self.held = Some((name.s, k));
        if set == raw::REDISMODULE_OK as c_int {
            self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire", name);
            // SAFETY: the command's context and a live name.
            unsafe { ffi::replicate_pexpireat(self.ctx, name.s, at_ms) };
        }
    }
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
        self.check_undeclared(&name, written_next)?;
        // A hash written next is opened for writing now, and kept open for it.
        let mode = match written_next {
            true => raw::REDISMODULE_WRITE,
            false => raw::REDISMODULE_READ,
        };
        let k = self.open(&name, mode);
        if k.is(raw::REDISMODULE_KEYTYPE_EMPTY) {
            if written_next {
                self.held = Some((name.s, k));
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
            self.held = Some((name.s, k));
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
}
