//! A `/dev/shm` too small for the shared table (and its live counters): loaded per pool,
//! a worker must get a table of its own and say why, never die of SIGBUS at the first
//! touch of a page the tmpfs cannot back (which `Metrics::render()` makes certain: it
//! reads every slot). A real tmpfs of 300 KiB, mounted as root (skipped otherwise); this
//! test process plays the master, a forked child the worker.

use std::path::Path;
use std::process::Command;

use checkout_guard_runtime::{denials, metrics};

/// Runs `f` in a forked child: its exit code, or -(signal) when a signal ended it.
fn in_child(f: impl FnOnce() -> i32) -> i32 {
    // SAFETY: one test in this binary; the child runs `f` and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or(99);
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -libc::WTERMSIG(status)
    }
}

struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn small_tmpfs(size: &str) -> Option<Mounted> {
    // SAFETY: geteuid never fails.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return None;
    }
    let dir = std::env::temp_dir().join(format!("cg-small-shm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(&dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: cannot mount a tmpfs here");
        let _ = std::fs::remove_dir(&dir);
        return None;
    }
    Some(Mounted(dir))
}

#[test]
fn a_dev_shm_too_small_for_the_table_gives_the_worker_a_table_of_its_own_not_sigbus() {
    let Some(disk) = small_tmpfs("300k") else {
        return;
    };
    let dir: &Path = &disk.0;
    let master = std::process::id();
    let code = in_child(|| {
        let made = denials::init_for_siblings(dir, master);
        let why = match made {
            Ok(p) => {
                eprintln!(
                    "a table was made on a tmpfs too small for it: {}",
                    p.display()
                );
                return 2;
            }
            Err(why) => why,
        };
        if !why.contains("No space") {
            eprintln!("the reason does not say the space ran out: {why}");
            return 3;
        }
        // Every page of the counters read and one of them written: no signal.
        metrics::add(metrics::Family::EventsWritten, &["jsonl"], 1);
        let text = metrics::render(false);
        if !text.contains("\ncheckout_guard_metrics_shared 0\n")
            || !text.contains("checkout_guard_events_written_total{sink=\"jsonl\"} 1\n")
        {
            eprintln!("{text}");
            return 4;
        }
        match denials::sharing() {
            Some(denials::Sharing::Private(_)) => 0,
            other => {
                eprintln!("sharing: {other:?}");
                5
            }
        }
    });
    assert_eq!(
        code, 0,
        "the worker ended with {code} (negative: killed by that signal; -7 is SIGBUS)"
    );
    // Nothing half-made left behind.
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
