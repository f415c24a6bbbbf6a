//! The flood fast path: denials known in advance, decided in the worker without Valkey.
//!
//! A bucket's state is its theoretical arrival time `tat`: it admits `n` tokens at Valkey
//! time `V` iff `tat + n * interval - V <= tolerance`. Any script reply tells us `tat`
//! for every bucket it applied, at Valkey time `now`, and `tat` only grows while tokens
//! are taken (it falls only when the keys are deleted: `reset()`, data loss). Every reply
//! is recorded here, for every bucket it applied, as the local instant `base` at which the
//! bucket held no token (`tat - tolerance`) and the round trip it took.
//!
//! The table reads no clock: every instant is given by its caller, from the limiter's
//! injected [`Clock::monotonic_ns`] (CLOCK_MONOTONIC in the extension, the same clock in
//! every process sharing the table; a fake clock in tests).
//!
//! Mapped to this host's monotonic clock: Valkey read `now` after we sent the request and
//! before we got the reply, so at local instant `L` Valkey's clock reads between
//! `now + (L - received)` and `now + (L - sent)`.
//! - A request for `n` tokens is certain to be denied while `L < sent + (tat - tolerance -
//!   now) + n * interval` (the earliest mapping): only then is it denied here, so a local
//!   denial never denies what Valkey would admit, except after a `reset()`, `unmarkHot()`
//!   or data loss made elsewhere; to bound that, no entry is used more than
//!   [`MAX_LOCAL_DENIAL_NS`] after the reply that taught it, nor after the hot mark it
//!   depended on runs out.
//! - Its `retryAfter` uses the latest mapping (`+ round trip`), so it is never early.
//! - Its `reason` is the first bucket in order that is certain to lack the tokens, and
//!   `remaining` the whole tokens of the tightest bucket at the earliest mapping: what
//!   Valkey answers unless other hosts took tokens since (then Valkey may name an earlier
//!   bucket or fewer tokens: it is still a denial Valkey makes).
//!
//! The table lives in memory shared by the workers of a php-fpm master: made at module
//! start-up ([`init_shared`]) in the master when the extension is loaded globally, so
//! every worker forked afterwards inherits it; or, loaded per pool (module start-up in
//! each worker, after the fork), a file in `/dev/shm` named after the master that each
//! worker maps ([`init_for_siblings`]). One worker's reply spares every other worker the
//! round trip.
//!
//! Each slot is a seqlock: a reader that sees a write in progress treats the slot as empty
//! (asks Valkey), a writer that finds the slot busy skips the write. A locked slot holds
//! the instant its write began; a writer that finds it locked for longer than any write
//! takes ([`STUCK_WRITE_NS`]: its writer was killed or stopped mid-write) takes it over.
//! Every entry carries a checksum of its words and of the sequence number it was
//! published under, so a writer that was taken over and finishes its stores late leaves a
//! slot that reads as empty, never a mix of two entries. Nothing here can make a decision
//! more permissive.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, AtomicU64, Ordering};

use once_cell::sync::OnceCell;

#[cfg(doc)]
use crate::clock::Clock;

/// The longest a reply's knowledge is used (250 ms): what was changed outside this host's
/// workers (a live change, a reset, data loss, a mark) is seen within that. A flood still
/// asks Valkey only a few times a second per bucket.
pub const MAX_LOCAL_DENIAL_NS: u64 = 250_000_000;

/// Entries in the table (a power of two): 4096 x 64 bytes = 256 KiB.
const ENTRIES: usize = 4096;

/// The table's size in bytes: its entries, then one line of [`SharedWords`], then the
/// live counters ([`crate::metrics::Region`]), shared the same way.
const TABLE_BYTES: usize = ENTRIES * std::mem::size_of::<SharedEntry>()
    + std::mem::size_of::<SharedWords>()
    + std::mem::size_of::<crate::metrics::Region>();

/// The layout of a slot, in the names of shared tables: a table of another layout (an
/// older or newer extension on the same master) is another file.
const LAYOUT: u32 = 4;

/// A write is a handful of stores; a slot locked for longer (20 ms) was abandoned by a
/// writer killed (SIGKILL, the OOM killer, `request_terminate_timeout`) or stopped
/// mid-write, and the next writer takes it over. Until then, its bucket is asked of Valkey.
pub const STUCK_WRITE_NS: u64 = 20_000_000;

/// One entry as the shared table holds it (a slot of the table): seqlocked, one cache
/// line.
#[repr(C, align(64))]
struct SharedEntry {
    /// Even: stable; odd: a write is in progress, begun at this local instant (the
    /// writer's [`Clock::monotonic_ns`]).
    /// Every write raises it, so a reader sees any write that overlapped its read.
    seq: AtomicU64,
    key: AtomicU64,
    /// Local ns (earliest mapping) at which the bucket holds zero tokens.
    base: AtomicU64,
    interval_ns: AtomicU64,
    /// The round trip of the reply (latest mapping = earliest + round trip).
    rtt_ns: AtomicU64,
    /// No knowledge from this entry at or after this local instant.
    expires: AtomicU64,
    /// [`checksum`] of the words above and of the (even) `seq` they were published with.
    check: AtomicU64,
}

/// A checksum of one entry as published under `seq`: a slot whose words came from two
/// writes (a writer taken over that finished late) fails it, and so reads as empty.
fn checksum(seq: u64, key: u64, entry: &Entry, expires: u64) -> u64 {
    let mut h = 0x9e37_79b9_7f4a_7c15u64;
    for w in [seq, key, entry.base, entry.interval, entry.rtt, expires] {
        h = (h ^ w).wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 32;
    }
    h
}

/// One cache line of words after the table's entries, shared exactly as the table is (by
/// the workers of a php-fpm master, the processes forked after module start-up, the
/// threads of a process): counters other parts of the runtime keep across the workers
/// (`telemetry::agent_cap`: the events handed to the New Relic agent per minute). Zero
/// when the table is made.
#[repr(C, align(64))]
pub struct SharedWords(pub [AtomicU64; 8]);

/// What one reply taught about one bucket (local clock: [`Clock::monotonic_ns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The earliest local instant at which the bucket may have held zero tokens.
    pub base: u64,
    /// Local ns to refill one token.
    pub interval: u64,
    /// The round trip of the reply: the latest such instant is `base + rtt`.
    pub rtt: u64,
}

impl Entry {
    /// Credit (ns of refill) held at local instant `at` if the bucket was empty at `base`:
    /// negative before `base`, at most the whole bucket.
    fn credit(&self, base: u64, at: u64, capacity: i64) -> i128 {
        let tolerance = self.interval as i128 * capacity.max(0) as i128;
        (at as i128 - base as i128).min(tolerance)
    }

    /// Whether a request for `tokens` tokens is certain to be denied at local instant `now`
    /// (earliest mapping: Valkey's clock can be no further on). Always, for more tokens
    /// than the bucket holds.
    pub fn lacks(&self, tokens: u64, now: u64, capacity: i64) -> bool {
        self.lacks_within(tokens, now, capacity, 0)
    }

    /// Whether a reservation for `tokens` tokens at local instant `now` is certain to wait
    /// longer than `max_wait` ns (the shortest wait Valkey could find: earliest mapping),
    /// so Valkey is certain to deny it. Always, for more tokens than the bucket holds.
    pub fn lacks_within(&self, tokens: u64, now: u64, capacity: i64, max_wait: u64) -> bool {
        tokens > capacity.max(0) as u64
            || self.interval as i128 * tokens as i128 - self.credit(self.base, now, capacity)
                > max_wait as i128
    }

    /// Local ns from `now` until `tokens` tokens are certainly there (latest mapping), if
    /// nobody takes any: Valkey's `retryAfter`, never shorter. For more tokens than the
    /// bucket holds, the same finite figure Valkey gives (the full bucket's shortfall).
    pub fn certain_wait(&self, tokens: u64, now: u64, capacity: i64) -> u64 {
        let late = self.base.saturating_add(self.rtt);
        let wait = self.interval as i128 * tokens as i128 - self.credit(late, now, capacity);
        wait.clamp(0, u64::MAX as i128) as u64
    }

    /// Whole tokens held at local instant `now` (earliest mapping), at most `capacity`.
    pub fn whole_tokens(&self, now: u64, capacity: i64) -> i64 {
        (self.credit(self.base, now, capacity).max(0) / self.interval.max(1) as i128) as i64
    }
}

/// Where this process's table is, and so which processes share what it learns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sharing {
    /// Made at module start-up in this process: shared with the processes it forks
    /// afterwards (a php-fpm master's workers, a CLI script's `pcntl_fork` children).
    Own,
    /// Made at module start-up in the process this one was forked from: shared with its
    /// siblings (the workers of a php-fpm master that loaded the extension globally).
    Inherited,
    /// A file named after this process's php-fpm master, mapped by each of its workers
    /// (the extension loaded per pool: module start-up in each worker, after the fork).
    Named(PathBuf),
    /// This process's alone: the shared table could not be made or opened (why).
    Private(String),
}

impl Sharing {
    /// `"own"`, `"inherited"`, `"named"` or `"private"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Sharing::Own => "own",
            Sharing::Inherited => "inherited",
            Sharing::Named(_) => "named",
            Sharing::Private(_) => "private",
        }
    }

    /// Whether this process shares the table with sibling workers.
    pub fn with_siblings(&self) -> bool {
        matches!(self, Sharing::Inherited | Sharing::Named(_))
    }
}

impl std::fmt::Display for Sharing {
    /// For phpinfo(): what the table is shared with, and how the loading decided it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sharing::Own => write!(
                f,
                "own: made at module start-up in this process, shared with the processes it \
                 forks afterwards (all php-fpm workers when loaded globally)"
            ),
            Sharing::Inherited => write!(
                f,
                "inherited: made at module start-up before this process was forked, shared \
                 with its sibling workers (loaded globally, extension=)"
            ),
            Sharing::Named(p) => write!(
                f,
                "named: {}, shared by the workers of this php-fpm master (loaded per pool, \
                 php_admin_value[extension])",
                p.display()
            ),
            Sharing::Private(why) => write!(f, "private: this process's alone ({why})"),
        }
    }
}

struct Table {
    slots: &'static [SharedEntry],
    words: &'static SharedWords,
    metrics: &'static crate::metrics::Region,
    /// How it was made, and by which process.
    sharing: Sharing,
    creator: u32,
}

static TABLE: OnceCell<Table> = OnceCell::new();

/// Maps the table: anonymous (zero-filled) when `fd` is `None`, else the first
/// [`TABLE_BYTES`] of that file, shared.
fn map(shared: bool, fd: Option<i32>) -> Option<Mapped> {
    let flags = match (shared, fd) {
        (_, Some(_)) => libc::MAP_SHARED,
        (true, None) => libc::MAP_SHARED | libc::MAP_ANONYMOUS,
        (false, None) => libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
    };
    // SAFETY: a fresh mapping of TABLE_BYTES, page-aligned (so 64-byte aligned); all-zero
    // is a valid `SharedEntry` (atomics) and any other bytes are too (a failed checksum reads as
    // empty); the file is exactly TABLE_BYTES long (checked before), and the mapping is
    // never unmapped, so `'static` holds.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            TABLE_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            fd.unwrap_or(-1),
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        let slots = std::slice::from_raw_parts(p as *const SharedEntry, ENTRIES);
        // SAFETY: the line after the entries, inside the mapping (TABLE_BYTES), 64-byte
        // aligned (ENTRIES lines of 64 bytes from a page boundary); all-zero or any bytes
        // are valid atomics.
        let words = &*(p
            .cast::<u8>()
            .add(ENTRIES * std::mem::size_of::<SharedEntry>())
            as *const SharedWords);
        // SAFETY: the bytes after the shared words, inside the mapping (TABLE_BYTES),
        // 64-byte aligned (the words are one line); all-zero or any bytes are valid
        // atomics (a key that does not decode is skipped by `metrics::render`).
        let metrics = &*(p
            .cast::<u8>()
            .add(ENTRIES * std::mem::size_of::<SharedEntry>() + std::mem::size_of::<SharedWords>())
            as *const crate::metrics::Region);
        Some((slots, words, metrics))
    }
}

/// A mapped table: its entries, its shared words and the live counters.
type Mapped = (
    &'static [SharedEntry],
    &'static SharedWords,
    &'static crate::metrics::Region,
);

/// The shared words of this process's table (made private if none was made at module
/// start-up, like the table itself).
pub fn shared_words() -> Option<&'static SharedWords> {
    table().map(|t| t.words)
}

/// The live counters in this process's table's mapping (private, like the table, if none
/// was made at module start-up).
pub fn metrics_region() -> Option<&'static crate::metrics::Region> {
    table().map(|t| t.metrics)
}

fn table() -> Option<&'static Table> {
    TABLE
        .get_or_try_init(|| {
            map(false, None)
                .map(|(slots, words, metrics)| Table {
                    slots,
                    words,
                    metrics,
                    sharing: Sharing::Private("no table was made at module start-up".into()),
                    creator: std::process::id(),
                })
                .ok_or(())
        })
        .ok()
}

/// Creates the table in memory shared with every process forked from this one afterwards.
/// Call before forking workers (MINIT). Without it, each process has a private table.
pub fn init_shared() {
    let _ = TABLE.get_or_try_init(|| {
        map(true, None)
            .map(|(slots, words, metrics)| Table {
                slots,
                words,
                metrics,
                sharing: Sharing::Own,
                creator: std::process::id(),
            })
            .ok_or(())
    });
}

/// Where this process's table is (`None` before any was made).
pub fn sharing() -> Option<Sharing> {
    let t = TABLE.get()?;
    Some(match &t.sharing {
        Sharing::Own if t.creator != std::process::id() => Sharing::Inherited,
        s => s.clone(),
    })
}

/// The prefix of every shared table's file name.
const FILE_PREFIX: &str = "checkout-guard-denials.";

/// The file name of the table shared by the workers (of user `uid`) of the process `pid`
/// started at `start` (clock ticks after boot) in boot `boot`.
fn file_name(boot: &str, pid: u32, start: u64, uid: u32) -> String {
    format!("{FILE_PREFIX}L{LAYOUT}.B{boot}.P{pid}.S{start}.U{uid}")
}

/// For a process forked from `master` that made no table before the fork (a php-fpm
/// worker that loaded the extension itself, per pool): maps the table all of `master`'s
/// workers share, a file in `dir` (`/dev/shm`) named after the master's pid and start
/// time (so a later master with a reused pid never joins it), this boot, and this user.
/// The first worker makes it (zero-filled, mode 0600, put in place whole with `link`),
/// and removes the tables of this user's masters that are gone. On any failure this
/// process gets a private table and the reason is returned (and kept for [`sharing`]).
pub fn init_for_siblings(dir: &Path, master: u32) -> Result<PathBuf, String> {
    let mut result = Err(String::from("a table was already made in this process"));
    let _ = TABLE.get_or_try_init(|| {
        let ((slots, words, metrics), sharing) = match open_named(dir, master) {
            Ok((mapped, path)) => {
                result = Ok(path.clone());
                // A reload re-executed the master in the same process (same pid and start
                // time, so the same file): its counters start again.
                mapped.2.adopt_generation(crate::metrics::exec_generation());
                (mapped, Sharing::Named(path))
            }
            Err(why) => {
                result = Err(why.clone());
                (map(false, None).ok_or(())?, Sharing::Private(why))
            }
        };
        Ok::<_, ()>(Table {
            slots,
            words,
            metrics,
            sharing,
            creator: std::process::id(),
        })
    });
    result
}

fn open_named(dir: &Path, master: u32) -> Result<(Mapped, PathBuf), String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;

    let (_, start) = crate::process::identity(master)
        .ok_or_else(|| format!("process {master} (the php-fpm master) is gone"))?;
    let boot = crate::process::boot_id().unwrap_or_else(|| "0".into());
    // SAFETY: geteuid never fails.
    let uid = unsafe { libc::geteuid() };
    let path = dir.join(file_name(&boot, master, start, uid));
    let open = |p: &Path| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)
    };
    let shown = |e: std::io::Error| format!("{}: {e}", path.display());
    let file = match open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Made whole under a name of this process's, then linked into place: a
            // sibling never maps a file shorter than the table.
            let tmp = dir.join(format!(
                "{}.T{}",
                path.file_name().unwrap_or_default().to_string_lossy(),
                std::process::id()
            ));
            let _ = std::fs::remove_file(&tmp);
            let made = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&tmp)
                .and_then(|f| {
                    // Its pages reserved now: a file merely extended (set_len) on a /dev/shm
                    // that cannot back it maps fine, and the first touch of a page past the
                    // free space kills the worker (SIGBUS). ENOSPC here: a private table.
                    // SAFETY: a file descriptor of ours, open for writing.
                    let rc = unsafe {
                        libc::posix_fallocate(f.as_raw_fd(), 0, TABLE_BYTES as libc::off_t)
                    };
                    if rc == 0 {
                        Ok(f)
                    } else {
                        Err(std::io::Error::from_raw_os_error(rc))
                    }
                });
            let f = match made {
                Ok(f) => f,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(format!("{}: {e}", tmp.display()));
                }
            };
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {
                    remove_stale(dir, uid, &boot);
                    f
                }
                // A sibling was first: use its table.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    open(&path).map_err(shown)?
                }
                Err(e) => return Err(shown(e)),
            }
        }
        Err(e) => return Err(shown(e)),
    };
    let meta = file.metadata().map_err(shown)?;
    if !meta.is_file()
        || meta.uid() != uid
        || meta.permissions().mode() & 0o077 != 0
        || meta.len() != TABLE_BYTES as u64
    {
        return Err(format!(
            "{}: not a table of this user's (owner {}, mode {:o}, {} bytes)",
            path.display(),
            meta.uid(),
            meta.permissions().mode() & 0o7777,
            meta.len()
        ));
    }
    let mapped = map(true, Some(file.as_raw_fd()))
        .ok_or_else(|| format!("{}: mmap failed", path.display()))?;
    Ok((mapped, path))
}

/// Removes the shared tables (and half-made ones) in `dir` of this user's masters that are
/// gone: another boot, or no process of that pid and start time. At most 10,000 entries
/// are looked at.
fn remove_stale(dir: &Path, uid: u32, boot: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.take(10_000).flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(fields) = name.strip_prefix(FILE_PREFIX) else {
            continue;
        };
        let field = |tag: char| {
            fields
                .split('.')
                .find_map(|f| f.strip_prefix(tag))
                .map(str::to_owned)
        };
        let pid = field('P').and_then(|p| p.parse::<u32>().ok());
        let start = field('S').and_then(|s| s.parse::<u64>().ok());
        let (Some(pid), Some(start)) = (pid, start) else {
            continue;
        };
        if field('U').and_then(|u| u.parse::<u32>().ok()) != Some(uid) {
            continue;
        }
        let maker_gone = field('T')
            .and_then(|t| t.parse::<u32>().ok())
            .is_some_and(|t| gone(t, None));
        let master_gone = field('B').as_deref() != Some(boot) || gone(pid, Some(start));
        if master_gone || maker_gone {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether no process `pid` (started at `start`, if given) runs: a process that /proc
/// does not show us (`hidepid`) but that exists is not gone.
fn gone(pid: u32, start: Option<u64>) -> bool {
    match crate::process::identity(pid) {
        Some((_, s)) => start.is_some_and(|start| s != start),
        // SAFETY: signal 0 only checks that the process exists.
        None => {
            let alive = unsafe { libc::kill(pid as i32, 0) } == 0;
            !alive && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
        }
    }
}

/// The slot key of one bucket as one shop sees it. `bucket_key` names the store too (the
/// endpoint, with database or cluster seeds), and the bucket's interval and tolerance are
/// part of it, so limiters on other Valkeys, or configured differently, never mix.
pub fn key(bucket_key: &[u8], shop: &[u8], interval_us: i64, tolerance_us: i64) -> u64 {
    // SipHash with fixed keys: the same value in every process of the host.
    #[allow(deprecated)]
    let mut h = std::hash::SipHasher::new();
    bucket_key.hash(&mut h);
    shop.hash(&mut h);
    interval_us.hash(&mut h);
    tolerance_us.hash(&mut h);
    // 0 marks an empty slot.
    h.finish() | 1
}

/// The slot index of a key: its top bits (the lowest is always 1).
fn index_of(key: u64) -> usize {
    (key >> (64 - ENTRIES.trailing_zeros())) as usize
}

fn shared_entry(t: &Table, key: u64) -> &SharedEntry {
    &t.slots[index_of(key)]
}

/// The slot's entry, key and expiry, if it is stable and whole.
fn read(s: &SharedEntry) -> Option<(u64, Entry, u64)> {
    let seq = s.seq.load(Ordering::Acquire);
    if seq & 1 == 1 {
        return None;
    }
    let k = s.key.load(Ordering::Relaxed);
    let entry = Entry {
        base: s.base.load(Ordering::Relaxed),
        interval: s.interval_ns.load(Ordering::Relaxed),
        rtt: s.rtt_ns.load(Ordering::Relaxed),
    };
    let expires = s.expires.load(Ordering::Relaxed);
    let check = s.check.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    if s.seq.load(Ordering::Relaxed) != seq || check != checksum(seq, k, &entry, expires) {
        return None;
    }
    Some((k, entry, expires))
}

/// What is known of this bucket at local instant `now`, if anything still holds.
pub fn lookup(key: u64, now: u64) -> Option<Entry> {
    let (k, entry, expires) = read(shared_entry(table()?, key))?;
    (k == key && now < expires).then_some(entry)
}

/// Records what a reply sent at local instant `sent` proved about a bucket; it is used
/// until `sent + MAX_LOCAL_DENIAL_NS`, or `valid_until` if earlier (a hot mark's end).
/// `now` is the writer's instant (when the write begins: a writer that finds the slot
/// locked since more than [`STUCK_WRITE_NS`] before it takes it over).
///
/// Replies arrive out of order (several workers): an entry that knows of more tokens taken
/// (a later empty instant) is kept until it expires rather than replaced by one that knows
/// of fewer, and its expiry is not extended by it, so what a `reset()` or data loss made
/// elsewhere still ends within [`MAX_LOCAL_DENIAL_NS`].
pub fn record(key: u64, entry: Entry, sent: u64, valid_until: u64, now: u64) {
    let expires = sent.saturating_add(MAX_LOCAL_DENIAL_NS).min(valid_until);
    if let Some(t) = table() {
        if let Some((k, held, until)) = read(shared_entry(t, key)) {
            if k == key && until > sent && held.base > entry.base && held.interval == entry.interval
            {
                return;
            }
        }
    }
    write(key, entry, expires, now);
}

fn write(key: u64, entry: Entry, expires: u64, now: u64) {
    let Some(t) = table() else { return };
    let s = shared_entry(t, key);
    let seq = s.seq.load(Ordering::Relaxed);
    // Locked by a write in progress: skip; locked for longer than any write takes: its
    // writer died or stopped mid-write, take it over.
    if seq & 1 == 1 && now.saturating_sub(seq) < STUCK_WRITE_NS {
        return;
    }
    // Odd, above `seq`, and the instant this write begins (for whoever finds it locked).
    let locked = (now | 1).max(seq + 1 + (seq & 1));
    if s.seq
        .compare_exchange(seq, locked, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    fence(Ordering::Release);
    s.key.store(key, Ordering::Relaxed);
    s.base.store(entry.base, Ordering::Relaxed);
    #[cfg(debug_assertions)]
    pause_mid_write::here();
    s.interval_ns.store(entry.interval, Ordering::Relaxed);
    s.rtt_ns.store(entry.rtt, Ordering::Relaxed);
    s.expires.store(expires, Ordering::Relaxed);
    let published = locked + 1;
    s.check
        .store(checksum(published, key, &entry, expires), Ordering::Relaxed);
    // Fails only if this write took so long that another writer took the slot over: that
    // one's entry stands (and if this one's stores landed in it, the checksum fails).
    let _ = s
        .seq
        .compare_exchange(locked, published, Ordering::Release, Ordering::Relaxed);
}

const EMPTY: Entry = Entry {
    base: 0,
    interval: 0,
    rtt: 0,
};

/// Forgets the entry for `key` (a `reset()` or `unmarkHot()` made here); `now` as for
/// [`record`].
pub fn forget(key: u64, now: u64) {
    let Some(t) = table() else { return };
    if shared_entry(t, key).key.load(Ordering::Relaxed) == key {
        write(key, EMPTY, 0, now);
    }
}

/// Forgets every entry (a `reset()` made here: the limiter's keys are gone); `now` as
/// for [`record`].
pub fn forget_all(now: u64) {
    let Some(t) = table() else { return };
    for s in t.slots {
        let k = s.key.load(Ordering::Relaxed);
        if k != 0 {
            write(k, EMPTY, 0, now);
        }
    }
}

/// Test-only (debug builds; compiled out of release builds): stops this process's next
/// write half-way, after the slot is locked and part of it written, as a worker killed or
/// descheduled at that instant leaves it.
#[cfg(debug_assertions)]
#[doc(hidden)]
pub mod pause_mid_write {
    use std::sync::atomic::{AtomicI32, Ordering};

    static NOTIFY: AtomicI32 = AtomicI32::new(-1);
    static RESUME: AtomicI32 = AtomicI32::new(-1);

    /// Arms the pause: the next write writes one byte to the file descriptor `notify`,
    /// then blocks reading one byte from `resume` (a byte or end of file resumes it).
    pub fn arm(notify: i32, resume: i32) {
        RESUME.store(resume, Ordering::SeqCst);
        NOTIFY.store(notify, Ordering::SeqCst);
    }

    pub(super) fn here() {
        let notify = NOTIFY.swap(-1, Ordering::SeqCst);
        if notify < 0 {
            return;
        }
        let mut b = 0u8;
        // SAFETY: plain reads and writes of one byte on descriptors the test owns.
        unsafe {
            libc::write(notify, b"p".as_ptr().cast(), 1);
            libc::read(RESUME.load(Ordering::SeqCst), (&mut b as *mut u8).cast(), 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, FakeClock};

    /// A test's instant: a fake clock's, so nothing here depends on the machine's time.
    fn fake_now() -> u64 {
        FakeClock::new().monotonic_ns()
    }

    fn entry(base: u64, interval: u64, rtt: u64) -> Entry {
        Entry {
            base,
            interval,
            rtt,
        }
    }

    #[test]
    fn an_entry_says_when_tokens_may_and_must_be_back() {
        let k = key(b"{cg:t}:b:global", b"", 1000, 5000);
        let now = fake_now();
        // No token until now + 2 ms, then one every 1 ms; the reply took 0.3 ms.
        record(
            k,
            entry(now + 2_000_000, 1_000_000, 300_000),
            now,
            u64::MAX,
            now,
        );
        let e = lookup(k, now).unwrap();
        assert!(e.lacks(1, now + 2_999_999, 5) && !e.lacks(1, now + 3_000_000, 5));
        assert!(e.lacks(3, now + 4_999_999, 5) && !e.lacks(3, now + 5_000_000, 5));
        // A reservation: the shortest wait (earliest mapping) for one token is 3 ms, so
        // only a caller that waits less is certain to be denied; more tokens than the
        // bucket holds, whatever the wait.
        assert!(e.lacks_within(1, now, 5, 2_999_999) && !e.lacks_within(1, now, 5, 3_000_000));
        assert!(e.lacks_within(6, now, 5, 10_000_000_000));
        assert_eq!(e.certain_wait(1, now, 5), 3_300_000);
        assert_eq!(e.certain_wait(1, now + 3_300_000, 5), 0);
        // More than the bucket holds: always lacking, and a finite wait that stops
        // shrinking once the bucket is full (5 of 6 tokens: one interval short).
        assert!(e.lacks(6, now + 60_000_000, 5));
        assert_eq!(e.certain_wait(6, now + 60_000_000, 5), 1_000_000);
        assert_eq!(e.whole_tokens(now, 5), 0);
        assert_eq!(e.whole_tokens(now + 4_500_000, 5), 2);
        assert_eq!(
            e.whole_tokens(now + 60_000_000, 5),
            5,
            "never above capacity"
        );
        // Another key is unaffected, and forgetting ends it.
        let other = key(b"{cg:t}:b:global", b"", 1000, 6000);
        assert_ne!(k, other);
        assert_eq!(lookup(other, now), None);
        forget(k, now);
        assert_eq!(lookup(k, now), None);
    }

    #[test]
    fn no_entry_outlives_its_time_after_the_reply_or_its_hot_mark() {
        let k = key(b"{cg:slow}:b:global", b"", 60_000_000, 60_000_000);
        let now = fake_now();
        record(k, entry(now, 60_000_000_000, 0), now, u64::MAX, now);
        assert!(lookup(k, now + MAX_LOCAL_DENIAL_NS - 1).is_some());
        assert_eq!(lookup(k, now + MAX_LOCAL_DENIAL_NS), None);
        // Learnt from a shop hot by a mark that runs out in 100 ms.
        record(
            k,
            entry(now, 60_000_000_000, 0),
            now,
            now + 100_000_000,
            now,
        );
        assert!(lookup(k, now + 99_999_999).is_some());
        assert_eq!(lookup(k, now + 100_000_000), None);
    }

    #[test]
    fn instants_long_before_boot_are_representable() {
        // A bucket that refills in 10 years: its empty instant lies far before this
        // host booted, and must not be clamped to 0 (which would read as "empty").
        let now = fake_now();
        let ten_years = 10 * 365 * 86_400 * 1_000_000_000u64;
        let e = entry(now - ten_years, ten_years / 10, 0);
        assert_eq!(e.whole_tokens(now, 10), 10);
        assert!(!e.lacks(10, now, 10));
    }

    #[test]
    fn an_older_reply_does_not_replace_what_a_newer_one_taught() {
        let k = key(b"{cg:merge}:b:global", b"", 1000, 5000);
        let now = fake_now();
        record(k, entry(now + 2_000_000, 1_000_000, 0), now, u64::MAX, now);
        // Knows of fewer tokens taken: ignored, and the first entry keeps its expiry.
        record(
            k,
            entry(now + 1_000_000, 1_000_000, 0),
            now + MAX_LOCAL_DENIAL_NS / 2,
            u64::MAX,
            now + MAX_LOCAL_DENIAL_NS / 2,
        );
        assert_eq!(lookup(k, now).unwrap().base, now + 2_000_000);
        assert_eq!(lookup(k, now + MAX_LOCAL_DENIAL_NS), None);
        // Once it expired, the lower one is taken (a reset elsewhere ends within 250 ms).
        record(
            k,
            entry(now + 1_000_000, 1_000_000, 0),
            now + MAX_LOCAL_DENIAL_NS,
            u64::MAX,
            now + MAX_LOCAL_DENIAL_NS,
        );
        assert_eq!(
            lookup(k, now + MAX_LOCAL_DENIAL_NS).unwrap().base,
            now + 1_000_000
        );
        // Knows of more: replaces it.
        record(
            k,
            entry(now + 3_000_000, 1_000_000, 0),
            now + MAX_LOCAL_DENIAL_NS,
            u64::MAX,
            now + MAX_LOCAL_DENIAL_NS,
        );
        assert_eq!(
            lookup(k, now + MAX_LOCAL_DENIAL_NS).unwrap().base,
            now + 3_000_000
        );
    }

    #[test]
    fn a_write_in_progress_reads_as_empty() {
        let k = key(b"{cg:seq}:b:global", b"", 1, 1);
        let now = fake_now();
        record(k, entry(now + 1_000_000, 1, 0), now, u64::MAX, now);
        let s = shared_entry(table().unwrap(), k);
        let published = s.seq.load(Ordering::Acquire);
        // A write that began now.
        let began = now | 1;
        s.seq.store(began, Ordering::Release);
        assert_eq!(lookup(k, now), None);
        // A writer skips a busy slot rather than wait, up to the last ns a write may take.
        let stuck = began + STUCK_WRITE_NS;
        record(k, entry(now + 9_000_000, 1, 0), now, u64::MAX, stuck - 1);
        assert_eq!(s.seq.load(Ordering::Acquire), began, "skipped");
        s.seq.store(published, Ordering::Release);
        assert_eq!(lookup(k, now).unwrap().base, now + 1_000_000);
        // A write that began STUCK_WRITE_NS ago or more was abandoned: taken over.
        s.seq.store(began, Ordering::Release);
        record(k, entry(now + 9_000_000, 1, 0), now, u64::MAX, stuck);
        assert_eq!(lookup(k, now).unwrap().base, now + 9_000_000);
        // A slot whose words do not match its checksum (two writes mixed) reads as empty.
        s.rtt_ns.fetch_add(1, Ordering::AcqRel);
        assert_eq!(lookup(k, now), None);
        record(k, entry(now + 9_000_000, 1, 0), now, u64::MAX, stuck);
        assert_eq!(lookup(k, now).unwrap().base, now + 9_000_000);
    }

    #[test]
    fn keys_spread_over_every_slot() {
        let mut used = vec![false; ENTRIES];
        for i in 0..100_000u32 {
            used[index_of(key(b"{cg:spread}:b:hot_shop", &i.to_le_bytes(), 1000, 5000))] = true;
        }
        let n = used.iter().filter(|u| **u).count();
        assert_eq!(n, ENTRIES, "100,000 keys used {n} of the {ENTRIES} slots");
    }

    #[test]
    fn keys_are_the_same_in_every_process_and_never_zero() {
        assert_eq!(key(b"a", b"s", 1, 2), key(b"a", b"s", 1, 2));
        assert_ne!(key(b"a", b"s", 1, 2), key(b"a", b"t", 1, 2));
        assert_eq!(key(b"", b"", 0, 0) & 1, 1);
    }
}
