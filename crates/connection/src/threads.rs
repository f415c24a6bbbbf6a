//! Threads of our own inside a PHP process, with every asynchronous signal blocked.
//!
//! A process-directed signal goes to any thread that does not block it. PHP's handlers
//! assume a PHP thread: without `ZEND_MAX_EXECUTION_TIMERS` (PHP 8.2's default, even with
//! ZTS) `max_execution_time` is a process-wide `setitimer(ITIMER_PROF)`, and the `SIGPROF`
//! handler reads the executor globals of the thread it runs on. Under ZTS a helper thread
//! of ours has none: the handler would crash there, and the request that overran would
//! never be stopped. A profiler's `SIGPROF` and php-fpm's `SIGTERM`/`SIGQUIT` are the same.
//! So our threads block them all, set before the thread exists (blocked in the caller
//! around the spawn, inherited by the new thread, then restored in the caller): there is
//! no instant at which the thread can take one. Synchronous faults (SIGSEGV and the like)
//! cannot be blocked this way and are not.

use std::io;
use std::thread::{Builder, JoinHandle};

/// `Builder::new().name(name).spawn(f)` with the new thread's asynchronous signals blocked.
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: sigset_t is plain data; sigfillset/pthread_sigmask only write the sets given.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        for sync in [
            libc::SIGSEGV,
            libc::SIGBUS,
            libc::SIGFPE,
            libc::SIGILL,
            libc::SIGTRAP,
        ] {
            libc::sigdelset(&mut all, sync);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
        let spawned = Builder::new().name(name.into()).spawn(f);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        spawned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_in_this_thread(sig: libc::c_int) -> bool {
        // SAFETY: reads this thread's mask into a local set.
        unsafe {
            let mut cur: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur);
            libc::sigismember(&cur, sig) == 1
        }
    }

    #[test]
    fn the_new_thread_blocks_async_signals_and_the_caller_keeps_its_mask() {
        let before = blocked_in_this_thread(libc::SIGPROF);
        let inside = spawn("cg-test", || {
            [libc::SIGPROF, libc::SIGALRM, libc::SIGTERM, libc::SIGUSR1].map(blocked_in_this_thread)
        })
        .unwrap()
        .join()
        .unwrap();
        assert_eq!(
            inside, [true; 4],
            "SIGPROF, SIGALRM, SIGTERM, SIGUSR1 blocked"
        );
        let segv = spawn("cg-test", || blocked_in_this_thread(libc::SIGSEGV))
            .unwrap()
            .join()
            .unwrap();
        assert!(!segv, "a synchronous fault is left alone");
        assert_eq!(blocked_in_this_thread(libc::SIGPROF), before);
    }
}
