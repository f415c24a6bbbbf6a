//! The time the worker runs on, injected (as governor's `Clock` and its fake clock): the
//! limiter, the local-denial table's writers, the telemetry recorder and the store (the
//! pooled connection's back-off after a failure, `engine = auto`'s module recheck) read it
//! here and nowhere else, so tests give them a `FakeClock` (the `test-support` feature) and
//! never sleep.
//!
//! A clock gives three things:
//! - [`Clock::monotonic_ns`]: the instant local denials are computed and stored in. The
//!   denial table is shared by every worker of a php-fpm master, so every process must
//!   read the same clock: [`SystemClock`] reads `CLOCK_MONOTONIC` (plus a fixed offset,
//!   [`CLOCK_OFFSET_NS`]), which is one clock per host.
//! - [`Clock::wall`]: the wall-clock time events and decisions are stamped with.
//! - [`Clock::sleep`]: a reservation's wait (`acquire(maxWaitSeconds: ...)`).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Added to the monotonic clock so that every instant the denial table holds is positive:
/// a bucket's empty instant lies up to its whole refill time (at most 10 years) before the
/// reply, which may be long before this host booted.
pub const CLOCK_OFFSET_NS: u64 = 1 << 62;

/// Where the worker's time comes from. See the module documentation.
pub trait Clock: Send + Sync + fmt::Debug {
    /// This host's monotonic clock in ns, far from 0 (at least [`CLOCK_OFFSET_NS`]): the
    /// same clock in every process that shares a denial table.
    fn monotonic_ns(&self) -> u64;
    /// The wall-clock time.
    fn wall(&self) -> SystemTime;
    /// Waits `d` (a reservation's wait); returns the time waited.
    fn sleep(&self, d: Duration) -> Duration;

    /// [`Self::wall`] in Unix milliseconds, as events carry it (0 before 1970).
    fn unix_ms(&self) -> i64 {
        unix_ms(self.wall())
    }
}

/// `t` in Unix milliseconds (0 before 1970).
pub fn unix_ms(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The machine's clocks: `CLOCK_MONOTONIC` (+ [`CLOCK_OFFSET_NS`]), `SystemTime`, and a
/// real sleep. What the extension runs on.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    /// `CLOCK_MONOTONIC` in ns plus [`CLOCK_OFFSET_NS`] (what [`Clock::monotonic_ns`]
    /// answers), for code that has no limiter's clock at hand.
    pub fn monotonic_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: CLOCK_MONOTONIC always exists on Linux; `ts` is a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        CLOCK_OFFSET_NS + ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
}

impl Clock for SystemClock {
    fn monotonic_ns(&self) -> u64 {
        SystemClock::monotonic_ns()
    }

    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, d: Duration) -> Duration {
        let start = SystemClock::monotonic_ns();
        std::thread::sleep(d);
        Duration::from_nanos(SystemClock::monotonic_ns().saturating_sub(start))
    }
}

#[cfg(any(test, feature = "test-support"))]
pub use fake::FakeClock;

#[cfg(any(test, feature = "test-support"))]
mod fake {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use super::{Clock, CLOCK_OFFSET_NS};

    /// Where a fake clock's monotonic time starts: 1000 s after the offset (a host up for
    /// a while).
    const START_MONOTONIC_NS: u64 = CLOCK_OFFSET_NS + 1_000_000_000_000;
    /// Where its wall clock starts (Unix s): a realistic instant, 2025-06-15.
    const START_UNIX_S: u64 = 1_750_000_000;

    /// A clock that moves only when told to ([`Self::advance`]), shared by its clones: a
    /// test gives one to the limiter and to the `MemoryStore` and both run on it. Its
    /// [`Clock::sleep`] moves it on instead of sleeping. Test support only (the
    /// `test-support` feature).
    #[derive(Debug, Clone, Default)]
    pub struct FakeClock {
        elapsed_ns: Arc<AtomicU64>,
    }

    impl FakeClock {
        /// A clock at an arbitrary, realistic instant (the same for every new clock).
        pub fn new() -> Self {
            Self::default()
        }

        /// Moves the clock (every clone of it) forward by `d`.
        pub fn advance(&self, d: Duration) {
            self.elapsed_ns
                .fetch_add(d.as_nanos() as u64, Ordering::SeqCst);
        }

        /// The time moved since the clock was made.
        pub fn elapsed(&self) -> Duration {
            Duration::from_nanos(self.elapsed_ns.load(Ordering::SeqCst))
        }
    }

    impl Clock for FakeClock {
        fn monotonic_ns(&self) -> u64 {
            START_MONOTONIC_NS + self.elapsed_ns.load(Ordering::SeqCst)
        }

        fn wall(&self) -> SystemTime {
            UNIX_EPOCH + Duration::from_secs(START_UNIX_S) + self.elapsed()
        }

        fn sleep(&self, d: Duration) -> Duration {
            self.advance(d);
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_clock_is_monotonic_and_offset() {
        let c = SystemClock;
        let a = c.monotonic_ns();
        let b = c.monotonic_ns();
        assert!(a >= CLOCK_OFFSET_NS && b >= a);
        assert!(c.unix_ms() > 1_600_000_000_000);
    }

    /// The system clock is the host's `CLOCK_MONOTONIC` plus the fixed offset, read now
    /// (not an epoch of this process, as `Instant` since a first use would be): php-fpm
    /// workers, and siblings of one master that map the named table, compare each other's
    /// instants in the shared denial table.
    #[test]
    fn the_system_clock_is_the_hosts_monotonic_clock_plus_the_offset() {
        let raw = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: a valid out-pointer; CLOCK_MONOTONIC exists on Linux.
            assert_eq!(
                unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) },
                0
            );
            ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
        };
        for _ in 0..3 {
            let before = raw();
            let read = [SystemClock::monotonic_ns(), SystemClock.monotonic_ns()];
            let after = raw();
            for r in read {
                let r = r - CLOCK_OFFSET_NS;
                assert!(
                    before <= r && r <= after,
                    "{before} <= {r} <= {after}: not CLOCK_MONOTONIC + offset"
                );
            }
        }
    }

    #[test]
    fn a_fake_clock_moves_only_when_told_and_its_clones_share_it() {
        let c = FakeClock::new();
        let other = c.clone();
        let (m, w) = (c.monotonic_ns(), c.wall());
        assert_eq!(
            (c.monotonic_ns(), c.wall()),
            (m, w),
            "it does not run by itself"
        );
        other.advance(Duration::from_millis(5));
        assert_eq!(c.monotonic_ns(), m + 5_000_000);
        assert_eq!(c.wall(), w + Duration::from_millis(5));
        // A sleep moves it instead of sleeping.
        assert_eq!(c.sleep(Duration::from_secs(3)), Duration::from_secs(3));
        assert_eq!(other.elapsed(), Duration::from_millis(3005));
        assert_eq!(c.unix_ms(), 1_750_000_003_005);
    }
}
