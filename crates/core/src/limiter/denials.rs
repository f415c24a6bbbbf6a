//! The flood fast path: denials known in advance, decided in the worker without Valkey.
//!
//! A bucket's state is its theoretical arrival time `tat`: it admits `n` tokens at Valkey
//! time `V` iff `tat + n * interval - V <= tolerance`. Any script reply tells us `tat`
//! for every bucket it applied, at Valkey time `now`, and `tat` only grows while tokens
//! are taken (it falls only when the keys are deleted: `reset()`). So until Valkey time
//! `tat - tolerance + n * interval` a request for `n` tokens is certain to be denied.
//!
//! Mapped to this host's monotonic clock conservatively: Valkey read `now` after we sent
//! the request, so at local instant `L` Valkey's clock reads at most
//! `now + (L - sent)`. We deny locally only while `L < sent + (tat - tolerance - now) +
//! n * interval`, i.e. while Valkey would deny too. Local denials therefore never admit
//! anything (trivially) and never deny what Valkey would have admitted, except after a
//! `reset()`, `unmarkHot()` or Valkey restart made elsewhere; to bound that, no local
//! denial lasts more than [`MAX_LOCAL_DENIAL_NS`] past the reply that taught it.
//!
//! The table lives in memory shared by every process forked after [`init_shared`] (called
//! at MINIT, so all php-fpm workers of a pool share it): one worker's reply spares every
//! other worker the round trip. Each slot is a seqlock of four words; a reader that sees
//! a write in progress treats the slot as empty (asks Valkey), a writer that finds the
//! slot busy skips the write. Nothing here can make a decision more permissive.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use once_cell::sync::OnceCell;

/// The longest a reply's knowledge is used (1 s): a slowly refilling bucket reset
/// elsewhere is asked again within a second.
pub const MAX_LOCAL_DENIAL_NS: u64 = 1_000_000_000;

/// Slots in the table (a power of two): 4096 x 40 bytes = 160 KiB.
const SLOTS: usize = 4096;

#[repr(C)]
struct Slot {
    /// Even: stable; odd: a write is in progress.
    seq: AtomicU64,
    key: AtomicU64,
    /// Local monotonic ns at which the bucket holds zero tokens (`tat - tolerance`).
    base: AtomicU64,
    interval_ns: AtomicU64,
    /// No denial from this entry after this local instant.
    expires: AtomicU64,
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

/// This host's monotonic clock in ns: the same clock in every process.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: CLOCK_MONOTONIC always exists on Linux; `ts` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The slot key of one bucket as one shop sees it. The bucket's interval and tolerance
/// are part of it, so limiters of the same name configured differently never mix.
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

fn slot(t: &Table, key: u64) -> &Slot {
    &t.slots[(key as usize) & (SLOTS - 1)]
}

/// If a request for `tokens` tokens from this bucket is certain to be denied at local
/// instant `now`: until when (local monotonic ns).
pub fn denied_until(key: u64, tokens: u64, now: u64) -> Option<u64> {
    let s = slot(table()?, key);
    let seq = s.seq.load(Ordering::Acquire);
    if seq & 1 == 1 {
        return None;
    }
    let k = s.key.load(Ordering::Relaxed);
    let base = s.base.load(Ordering::Relaxed);
    let interval = s.interval_ns.load(Ordering::Relaxed);
    let expires = s.expires.load(Ordering::Relaxed);
    if s.seq.load(Ordering::Acquire) != seq || k != key {
        return None;
    }
    // The answer is the real instant (it becomes retryAfter); the knowledge is used only
    // until `expires`.
    let until = base.saturating_add(interval.saturating_mul(tokens));
    (now < until.min(expires)).then_some(until)
}

/// Records what a reply proved about a bucket: at local instant `base` it holds no
/// token, and one comes back every `interval_ns`; the reply was sent at `sent`.
pub fn record(key: u64, base: u64, interval_ns: u64, sent: u64) {
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
    s.base.store(base, Ordering::Relaxed);
    s.interval_ns.store(interval_ns, Ordering::Relaxed);
    s.expires
        .store(sent.saturating_add(MAX_LOCAL_DENIAL_NS), Ordering::Relaxed);
    s.seq.store(seq + 2, Ordering::Release);
}

/// Forgets the entry for `key` (a `reset()` or `unmarkHot()` made here).
pub fn forget(key: u64) {
    let Some(t) = table() else { return };
    if slot(t, key).key.load(Ordering::Relaxed) == key {
        record(key, 0, 0, 0);
    }
}

/// Forgets every entry (a `reset()` made here: the limiter's keys are gone).
pub fn forget_all() {
    let Some(t) = table() else { return };
    for s in t.slots {
        let k = s.key.load(Ordering::Relaxed);
        if k != 0 {
            record(k, 0, 0, 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_bucket_denies_until_its_tokens_come_back() {
        let k = key(b"{cg:t}:b:global", b"", 1000, 5000);
        let now = now_ns();
        // No token until now + 2 ms, then one every 1 ms.
        record(k, now + 2_000_000, 1_000_000, now);
        assert_eq!(denied_until(k, 1, now), Some(now + 3_000_000));
        assert_eq!(denied_until(k, 3, now), Some(now + 5_000_000));
        assert_eq!(denied_until(k, 1, now + 3_000_000), None);
        assert_eq!(denied_until(k, 3, now + 4_999_999), Some(now + 5_000_000));
        // Another key is unaffected, and forgetting ends it.
        let other = key(b"{cg:t}:b:global", b"", 1000, 6000);
        assert_ne!(k, other);
        assert_eq!(denied_until(other, 1, now), None);
        forget(k);
        assert_eq!(denied_until(k, 1, now), None);
    }

    #[test]
    fn no_denial_outlives_a_second_after_the_reply() {
        let k = key(b"{cg:slow}:b:global", b"", 60_000_000, 60_000_000);
        let now = now_ns();
        // One token a minute: the reply's knowledge is used for one second only, and
        // while it is, the instant it gives is the real one (retryAfter).
        record(k, now, 60_000_000_000, now);
        assert_eq!(denied_until(k, 1, now), Some(now + 60_000_000_000));
        assert_eq!(
            denied_until(k, 1, now + MAX_LOCAL_DENIAL_NS - 1),
            Some(now + 60_000_000_000)
        );
        assert_eq!(denied_until(k, 1, now + MAX_LOCAL_DENIAL_NS), None);
    }

    #[test]
    fn a_write_in_progress_reads_as_empty() {
        let k = key(b"{cg:seq}:b:global", b"", 1, 1);
        let now = now_ns();
        record(k, now + 1_000_000, 1, now);
        let s = slot(table().unwrap(), k);
        s.seq.fetch_add(1, Ordering::AcqRel);
        assert_eq!(denied_until(k, 1, now), None);
        // A writer skips a busy slot rather than wait.
        record(k, now + 9_000_000, 1, now);
        s.seq.fetch_add(1, Ordering::AcqRel);
        assert_eq!(denied_until(k, 1, now), Some(now + 1_000_001));
    }

    #[test]
    fn keys_are_the_same_in_every_process_and_never_zero() {
        assert_eq!(key(b"a", b"s", 1, 2), key(b"a", b"s", 1, 2));
        assert_ne!(key(b"a", b"s", 1, 2), key(b"a", b"t", 1, 2));
        assert_eq!(key(b"", b"", 0, 0) & 1, 1);
    }
}
