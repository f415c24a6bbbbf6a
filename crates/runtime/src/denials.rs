//! The flood fast path: denials known in advance, decided in the worker without Valkey.
//!
//! A bucket's state is its theoretical arrival time `tat`: it admits `n` tokens at Valkey
//! time `V` iff `tat + n * interval - V <= tolerance`. Any script reply tells us `tat`
//! for every bucket it applied, at Valkey time `now`, and `tat` only grows while tokens
//! are taken (it falls only when the keys are deleted: `reset()`, data loss). Every reply
//! is recorded here, for every bucket it applied, as the local instant `base` at which the
//! bucket held no token (`tat - tolerance`) and the round trip it took.
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
//! The table lives in memory shared by every process forked after [`init_shared`] (called
//! at MINIT, so all php-fpm workers of a pool share it): one worker's reply spares every
//! other worker the round trip. Each slot is a seqlock of six words; a reader that sees
//! a write in progress treats the slot as empty (asks Valkey), a writer that finds the
//! slot busy skips the write. Nothing here can make a decision more permissive.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use once_cell::sync::OnceCell;

/// The longest a reply's knowledge is used (250 ms): what was changed outside this host's
/// workers (a live change, a reset, data loss, a mark) is seen within that. A flood still
/// asks Valkey only a few times a second per bucket.
pub const MAX_LOCAL_DENIAL_NS: u64 = 250_000_000;

/// Added to the monotonic clock so that every instant the table holds is positive: a
/// bucket's empty instant lies up to its whole refill time (at most 10 years) before the
/// reply, which may be long before this host booted.
const CLOCK_OFFSET_NS: u64 = 1 << 62;

/// Slots in the table (a power of two): 4096 x 48 bytes = 192 KiB.
const SLOTS: usize = 4096;

#[repr(C)]
struct Slot {
    /// Even: stable; odd: a write is in progress.
    seq: AtomicU64,
    key: AtomicU64,
    /// Local ns (earliest mapping) at which the bucket holds zero tokens.
    base: AtomicU64,
    interval_ns: AtomicU64,
    /// The round trip of the reply (latest mapping = earliest + round trip).
    rtt_ns: AtomicU64,
    /// No knowledge from this entry at or after this local instant.
    expires: AtomicU64,
}

/// What one reply taught about one bucket (local clock, see [`now_ns`]).
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

struct Table {
    slots: &'static [Slot],
}

static TABLE: OnceCell<Table> = OnceCell::new();

fn map(bytes: usize, shared: bool) -> Option<&'static [Slot]> {
    let flags = if shared {
        libc::MAP_SHARED | libc::MAP_ANONYMOUS
    } else {
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS
    };
    // SAFETY: a fresh anonymous mapping, zero-filled by the kernel; all-zero is a valid
    // `Slot` (atomics), and the mapping is never unmapped, so `'static` holds.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(std::slice::from_raw_parts(p as *const Slot, SLOTS))
    }
}

fn table() -> Option<&'static Table> {
    TABLE
        .get_or_try_init(|| {
            map(SLOTS * std::mem::size_of::<Slot>(), false)
                .map(|slots| Table { slots })
                .ok_or(())
        })
        .ok()
}

/// Creates the table in memory shared with every process forked from this one afterwards.
/// Call before forking workers (MINIT). Without it, each process has a private table.
pub fn init_shared() {
    let _ = TABLE.get_or_try_init(|| {
        map(SLOTS * std::mem::size_of::<Slot>(), true)
            .map(|slots| Table { slots })
            .ok_or(())
    });
}

/// This host's monotonic clock in ns, plus a fixed offset: the same clock in every
/// process, and far from 0 (see [`CLOCK_OFFSET_NS`]).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: CLOCK_MONOTONIC always exists on Linux; `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    CLOCK_OFFSET_NS + ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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

/// The slot index of a key.
fn slot_index(key: u64) -> usize {
    (key as usize) & (SLOTS - 1)
}

fn slot(t: &Table, key: u64) -> &Slot {
    &t.slots[slot_index(key)]
}

/// What is known of this bucket at local instant `now`, if anything still holds.
pub fn lookup(key: u64, now: u64) -> Option<Entry> {
    let s = slot(table()?, key);
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
    if s.seq.load(Ordering::Acquire) != seq || k != key || now >= expires {
        return None;
    }
    Some(entry)
}

/// Records what a reply sent at local instant `sent` proved about a bucket; it is used
/// until `sent + MAX_LOCAL_DENIAL_NS`, or `valid_until` if earlier (a hot mark's end).
///
/// Replies arrive out of order (several workers): an entry that knows of more tokens taken
/// (a later empty instant) is kept until it expires rather than replaced by one that knows
/// of fewer, and its expiry is not extended by it, so what a `reset()` or data loss made
/// elsewhere still ends within [`MAX_LOCAL_DENIAL_NS`].
pub fn record(key: u64, entry: Entry, sent: u64, valid_until: u64) {
    let expires = sent.saturating_add(MAX_LOCAL_DENIAL_NS).min(valid_until);
    if let Some(t) = table() {
        let s = slot(t, key);
        let seq = s.seq.load(Ordering::Acquire);
        let (k, base, until) = (
            s.key.load(Ordering::Relaxed),
            s.base.load(Ordering::Relaxed),
            s.expires.load(Ordering::Relaxed),
        );
        if seq & 1 == 0
            && s.seq.load(Ordering::Acquire) == seq
            && k == key
            && until > sent
            && base > entry.base
            && s.interval_ns.load(Ordering::Relaxed) == entry.interval
        {
            return;
        }
    }
    write(key, entry, expires);
}

fn write(key: u64, entry: Entry, expires: u64) {
    let Some(t) = table() else { return };
    let s = slot(t, key);
    let seq = s.seq.load(Ordering::Relaxed);
    if seq & 1 == 1
        || s.seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        return;
    }
    s.key.store(key, Ordering::Relaxed);
    s.base.store(entry.base, Ordering::Relaxed);
    #[cfg(debug_assertions)]
    pause_mid_write::here();
    s.interval_ns.store(entry.interval, Ordering::Relaxed);
    s.rtt_ns.store(entry.rtt, Ordering::Relaxed);
    s.expires.store(expires, Ordering::Relaxed);
    s.seq.store(seq + 2, Ordering::Release);
}

const EMPTY: Entry = Entry {
    base: 0,
    interval: 0,
    rtt: 0,
};

/// Forgets the entry for `key` (a `reset()` or `unmarkHot()` made here).
pub fn forget(key: u64) {
    let Some(t) = table() else { return };
    if slot(t, key).key.load(Ordering::Relaxed) == key {
        write(key, EMPTY, 0);
    }
}

/// Forgets every entry (a `reset()` made here: the limiter's keys are gone).
pub fn forget_all() {
    let Some(t) = table() else { return };
    for s in t.slots {
        let k = s.key.load(Ordering::Relaxed);
        if k != 0 {
            write(k, EMPTY, 0);
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
        let now = now_ns();
        // No token until now + 2 ms, then one every 1 ms; the reply took 0.3 ms.
        record(k, entry(now + 2_000_000, 1_000_000, 300_000), now, u64::MAX);
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
        forget(k);
        assert_eq!(lookup(k, now), None);
    }

    #[test]
    fn no_entry_outlives_its_time_after_the_reply_or_its_hot_mark() {
        let k = key(b"{cg:slow}:b:global", b"", 60_000_000, 60_000_000);
        let now = now_ns();
        record(k, entry(now, 60_000_000_000, 0), now, u64::MAX);
        assert!(lookup(k, now + MAX_LOCAL_DENIAL_NS - 1).is_some());
        assert_eq!(lookup(k, now + MAX_LOCAL_DENIAL_NS), None);
        // Learnt from a shop hot by a mark that runs out in 100 ms.
        record(k, entry(now, 60_000_000_000, 0), now, now + 100_000_000);
        assert!(lookup(k, now + 99_999_999).is_some());
        assert_eq!(lookup(k, now + 100_000_000), None);
    }

    #[test]
    fn instants_long_before_boot_are_representable() {
        // A bucket that refills in 10 years: its empty instant lies far before this
        // host booted, and must not be clamped to 0 (which would read as "empty").
        let now = now_ns();
        let ten_years = 10 * 365 * 86_400 * 1_000_000_000u64;
        let e = entry(now - ten_years, ten_years / 10, 0);
        assert_eq!(e.whole_tokens(now, 10), 10);
        assert!(!e.lacks(10, now, 10));
    }

    #[test]
    fn an_older_reply_does_not_replace_what_a_newer_one_taught() {
        let k = key(b"{cg:merge}:b:global", b"", 1000, 5000);
        let now = now_ns();
        record(k, entry(now + 2_000_000, 1_000_000, 0), now, u64::MAX);
        // Knows of fewer tokens taken: ignored, and the first entry keeps its expiry.
        record(
            k,
            entry(now + 1_000_000, 1_000_000, 0),
            now + MAX_LOCAL_DENIAL_NS / 2,
            u64::MAX,
        );
        assert_eq!(lookup(k, now).unwrap().base, now + 2_000_000);
        assert_eq!(lookup(k, now + MAX_LOCAL_DENIAL_NS), None);
        // Once it expired, the lower one is taken (a reset elsewhere ends within 250 ms).
        record(
            k,
            entry(now + 1_000_000, 1_000_000, 0),
            now + MAX_LOCAL_DENIAL_NS,
            u64::MAX,
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
        );
        assert_eq!(
            lookup(k, now + MAX_LOCAL_DENIAL_NS).unwrap().base,
            now + 3_000_000
        );
    }

    #[test]
    fn a_write_in_progress_reads_as_empty() {
        let k = key(b"{cg:seq}:b:global", b"", 1, 1);
        let now = now_ns();
        record(k, entry(now + 1_000_000, 1, 0), now, u64::MAX);
        let s = slot(table().unwrap(), k);
        s.seq.fetch_add(1, Ordering::AcqRel);
        assert_eq!(lookup(k, now), None);
        // A writer skips a busy slot rather than wait.
        record(k, entry(now + 9_000_000, 1, 0), now, u64::MAX);
        s.seq.fetch_add(1, Ordering::AcqRel);
        assert_eq!(lookup(k, now).unwrap().base, now + 1_000_000);
    }

    #[test]
    fn keys_spread_over_every_slot() {
        let mut used = vec![false; SLOTS];
        for i in 0..100_000u32 {
            used[slot_index(key(b"{cg:spread}:b:hot_shop", &i.to_le_bytes(), 1000, 5000))] = true;
        }
        let n = used.iter().filter(|u| **u).count();
        assert_eq!(n, SLOTS, "100,000 keys used {n} of the {SLOTS} slots");
    }

    #[test]
    fn keys_are_the_same_in_every_process_and_never_zero() {
        assert_eq!(key(b"a", b"s", 1, 2), key(b"a", b"s", 1, 2));
        assert_ne!(key(b"a", b"s", 1, 2), key(b"a", b"t", 1, 2));
        assert_eq!(key(b"", b"", 0, 0) & 1, 1);
    }
}
