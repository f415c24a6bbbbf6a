//! Knowing when we are in a forked child, without a `getpid()` system call per request:
//! a `pthread_atfork` child handler bumps a generation counter. State that must not cross
//! a fork (sockets, buffered events) remembers the generation it was built in.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;

static GENERATION: AtomicU64 = AtomicU64::new(0);
static REGISTER: Once = Once::new();

extern "C" {
    fn pthread_atfork(
        prepare: Option<extern "C" fn()>,
        parent: Option<extern "C" fn()>,
        child: Option<extern "C" fn()>,
    ) -> c_int;
}

extern "C" fn in_child() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// The current fork generation: changes in a child after every `fork()` that follows the
/// first call. State built before a fork sees a different generation in the child.
pub fn generation() -> u64 {
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic; never fails in practice
        // (ENOMEM); if it did, forks would go unnoticed, as before the first call.
        unsafe {
            pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forked_child_sees_a_new_generation() {
        let parent = generation();
        // SAFETY: the child only reads an atomic and exits.
        let pid = unsafe { libc_fork() };
        if pid == 0 {
            let code = if generation() != parent { 0 } else { 1 };
            unsafe { libc_exit(code) };
        }
        let mut status = 0;
        unsafe { libc_waitpid(pid, &mut status, 0) };
        assert_eq!(status, 0, "the child saw the same generation");
        assert_eq!(generation(), parent, "the parent's generation is unchanged");
    }

    extern "C" {
        #[link_name = "fork"]
        fn libc_fork() -> c_int;
        #[link_name = "_exit"]
        fn libc_exit(code: c_int) -> !;
        #[link_name = "waitpid"]
        fn libc_waitpid(pid: c_int, status: *mut c_int, options: c_int) -> c_int;
    }
}
