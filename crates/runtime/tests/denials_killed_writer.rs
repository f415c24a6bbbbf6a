//! The shared local-denial table when a worker dies, or stalls, in the middle of writing a
//! slot: a forked child stops half-way through a write (the debug-only pause hook of
//! `denials::pause_mid_write`), and the parent SIGKILLs it there, or lets it finish late.
//! The table is the one php-fpm workers share: created before the fork (`init_shared`).
//!
//! The child only touches atomics and raw file descriptors (no allocation), so forking
//! from the multi-threaded test harness is safe. The processes are real, the time is
//! given: the parent writes at instants past the child's lock ([`STUCK_WRITE_NS`]) rather
//! than sleeping until the system clock gets there.

use std::sync::Mutex;
use std::time::Duration;

use checkout_guard_runtime::clock::SystemClock;
use checkout_guard_runtime::denials::{self, Entry, STUCK_WRITE_NS};

/// The system clock's instant (the child's writes are stamped on it).
fn now_ns() -> u64 {
    SystemClock::monotonic_ns()
}

fn entry(base: u64, interval: u64, rtt: u64) -> Entry {
    Entry {
        base,
        interval,
        rtt,
    }
}

/// One test at a time: a child forked by one test must not hold another test's pipes.
static SERIAL: Mutex<()> = Mutex::new(());

/// SIGKILLs the child if the test fails before it is done with it.
struct Child(i32);

impl Drop for Child {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }
}

fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: a valid two-int array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    (fds[0], fds[1])
}

/// Reads one byte from `fd` within `timeout`.
fn read_byte(fd: i32, timeout: Duration) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; a one-byte read into a local.
    unsafe {
        if libc::poll(&mut p, 1, timeout.as_millis() as i32) != 1 {
            return false;
        }
        let mut b = 0u8;
        libc::read(fd, (&mut b as *mut u8).cast(), 1) == 1
    }
}

/// Forks a child that records `e` for `key` and stops half-way through the write. Returns
/// its pid and the descriptor that resumes it, once it is stopped there.
fn child_stopped_mid_write(key: u64, e: Entry) -> (Child, i32) {
    let (notify_r, notify_w) = pipe();
    let (resume_r, resume_w) = pipe();
    // SAFETY: the child only runs allocation-free code (atomics, clock, read/write) and
    // leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        unsafe {
            libc::close(notify_r);
            libc::close(resume_w);
        }
        denials::pause_mid_write::arm(notify_w, resume_r);
        let now = now_ns();
        denials::record(key, e, now, u64::MAX, now);
        unsafe { libc::_exit(0) };
    }
    unsafe {
        libc::close(notify_w);
        libc::close(resume_r);
    }
    let stopped = read_byte(notify_r, Duration::from_secs(10));
    unsafe { libc::close(notify_r) };
    if !stopped {
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the child never reached the middle of its write");
    }
    (Child(pid), resume_w)
}

fn wait(mut child: Child) -> i32 {
    let mut status = 0;
    let pid = std::mem::replace(&mut child.0, 0);
    // SAFETY: our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

/// Records a fresh entry for `key` written at instant `at` (what a sibling's reply
/// teaches); the entry if a lookup then finds it.
fn record_at(key: u64, at: u64, base_offset: u64) -> (Entry, Option<Entry>) {
    let e = entry(at + base_offset, 1_000_000, 300_000);
    denials::record(key, e, at, u64::MAX, at);
    let found = denials::lookup(key, at);
    if let Some(found) = found {
        assert_eq!(found, e, "a lookup found an entry nobody wrote");
    }
    (e, found)
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs the pause hook of debug builds (run without --release)"
)]
fn a_writer_killed_mid_write_leaves_a_slot_that_recovers_by_itself() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    denials::init_shared();
    // The global bucket's slot: every shop's decisions use it.
    let k = denials::key(b"127.0.0.1:6379/0 {cg:killed}:b:global", b"", 1000, 5000);
    let now = now_ns();
    denials::record(k, entry(now + 2_000_000, 1_000_000, 0), now, u64::MAX, now);
    assert!(denials::lookup(k, now).is_some());

    let (child, resume) = child_stopped_mid_write(k, entry(now + 7_000_000, 1_000_000, 0));
    // Mid-write, the slot reads as empty (Valkey is asked): never a half-written entry.
    assert_eq!(denials::lookup(k, now_ns()), None);
    // SAFETY: our own child, stopped in the write.
    unsafe { libc::kill(child.0, libc::SIGKILL) };
    let status = wait(child);
    assert!(libc::WIFSIGNALED(status), "the child was killed mid-write");
    unsafe { libc::close(resume) };
    assert_eq!(denials::lookup(k, now_ns()), None);

    // Once the dead writer's lock is STUCK_WRITE_NS old, a sibling's reply is recorded:
    // the slot recovers by itself (that a younger lock is respected is denials.rs's unit
    // test, on a fake clock: here the lock's age depends on how fast the fork ran).
    let locked_at = now_ns();
    let (e, found) = record_at(k, locked_at + STUCK_WRITE_NS, 5_000_000);
    assert_eq!(
        found,
        Some(e),
        "the slot stayed locked after its writer was killed"
    );
    // And it keeps working: the next write lands at once.
    let now = locked_at + STUCK_WRITE_NS;
    denials::record(k, entry(now + 9_000_000, 1_000_000, 0), now, u64::MAX, now);
    assert_eq!(denials::lookup(k, now).unwrap().base, now + 9_000_000);
}

#[test]
#[cfg_attr(
    not(debug_assertions),
    ignore = "needs the pause hook of debug builds (run without --release)"
)]
fn a_writer_that_resumes_after_its_slot_was_reclaimed_leaves_no_torn_entry() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    denials::init_shared();
    let k = denials::key(b"127.0.0.1:6379/0 {cg:late}:b:global", b"", 2000, 8000);
    let now = now_ns();
    // The child's entry differs from the parent's in every field.
    let (child, resume) = child_stopped_mid_write(k, entry(now + 70_000_000, 3_000_000, 1));
    // The parent reclaims the slot the stalled child holds (its lock is STUCK_WRITE_NS
    // old at the instant given), and writes its own entry.
    let at = now_ns() + STUCK_WRITE_NS;
    let (mine, found) = record_at(k, at, 5_000_000);
    assert_eq!(
        found,
        Some(mine),
        "a slot held by a stalled writer was not reclaimed"
    );
    // The child wakes up and finishes its stores into the slot it no longer holds.
    // SAFETY: a one-byte write to our pipe.
    unsafe {
        libc::write(resume, b"r".as_ptr().cast(), 1);
        libc::close(resume);
    }
    assert_eq!(wait(child), 0, "the child finished its write and exited");
    // What a reader finds is the parent's entry or nothing (asks Valkey): never a mix
    // of both writes.
    let seen = denials::lookup(k, at);
    assert!(
        seen.is_none() || seen == Some(mine),
        "a torn entry: {seen:?}, written {mine:?}"
    );
    // And the slot still takes new entries.
    let (e, found) = record_at(k, at + 1, 6_000_000);
    assert_eq!(found, Some(e), "the slot never took an entry again");
}
