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

/// Registers fork handlers (`pthread_atfork`): `prepare` in the forking thread before the
/// fork, `parent` and `child` after it in each. Returns false if they could not be
/// registered (ENOMEM).
#[cfg_attr(feature = "std-locks", allow(dead_code))]
pub(crate) fn at_fork(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> bool {
    // SAFETY: registers plain functions; pthread_atfork copies the pointers.
    unsafe { pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

/// A process's command name and start time (clock ticks after boot), from
/// `/proc/PID/stat`: together with its pid, the start time names one process for as long
/// as the host runs (a pid is reused, a start time with it is not).
pub fn identity(pid: u32) -> Option<(String, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) STATE PPID ..." where COMM may hold spaces and parentheses.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    // After COMM: field 3 (state) onwards; the start time is field 22.
    let start = stat
        .get(close + 1..)?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    Some((comm, start))
}

/// The parent of this process when it runs the same program (the same command name):
/// for a php-fpm worker, its master. `None` for a process started by something else
/// (a shell, systemd, a container runtime), or whose parent is gone.
pub fn same_program_parent() -> Option<u32> {
    // SAFETY: getppid never fails.
    let parent = unsafe { libc::getppid() };
    if parent <= 0 {
        return None;
    }
    let parent = parent as u32;
    let (ours, _) = identity(std::process::id())?;
    let (theirs, _) = identity(parent)?;
    (ours == theirs).then_some(parent)
}

/// This boot of the host (the first 8 hex digits of the kernel's boot id), or `None`.
pub fn boot_id() -> Option<String> {
    let id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let hex: String = id
        .chars()
        .filter(|c| c.is_ascii_hexdigit())
        .take(8)
        .collect();
    (hex.len() == 8).then_some(hex)
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

    #[test]
    fn a_process_is_named_by_its_start_time_and_a_forked_child_has_its_parents_program() {
        let (comm, start) = identity(std::process::id()).unwrap();
        assert!(!comm.is_empty() && start > 0);
        assert_eq!(identity(std::process::id()), Some((comm, start)));
        assert_eq!(identity(u32::MAX), None);
        // The test binary was started by cargo (or a shell): another program.
        assert_eq!(same_program_parent(), None);
        let parent = std::process::id() as i32;
        let name = std::ffi::CString::new(identity(parent as u32).unwrap().0).unwrap();
        // SAFETY: the child reads /proc and exits (glibc's malloc is safe after fork).
        let pid = unsafe { libc_fork() };
        if pid == 0 {
            // Forked from a test thread, which the harness named after the test: take
            // the process's name back, as a single-threaded php-fpm worker has it.
            unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
            let code = if same_program_parent() == Some(parent as u32) {
                0
            } else {
                1
            };
            unsafe { libc_exit(code) };
        }
        let mut status = 0;
        unsafe { libc_waitpid(pid, &mut status, 0) };
        assert_eq!(
            status, 0,
            "the child did not find its parent running the same program"
        );
        assert_eq!(boot_id().map(|b| b.len()), Some(8));
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
