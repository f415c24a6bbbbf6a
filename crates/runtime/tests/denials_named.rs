//! The table shared by a php-fpm master's workers when the extension is loaded per pool
//! (module start-up in each worker, after the fork): `init_for_siblings` maps a file named
//! after the master. This test process plays the master and forks the workers; it never
//! makes a table itself (one test in this file, so nothing else does).

use std::path::{Path, PathBuf};
use std::time::Duration;

use checkout_guard_runtime::denials::{self, Entry, Sharing};

/// Runs `f` in a forked child; its exit code (0 = the child's checks held).
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
        -1
    }
}

fn tables(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[test]
fn workers_that_load_the_extension_after_the_fork_share_a_table_named_after_their_master() {
    let dir = std::env::temp_dir().join(format!("cg-denials-named-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    let master = std::process::id();
    let k = denials::key(b"127.0.0.1:6379/0 {cg:named}:b:global", b"", 1000, 5000);

    // A leftover of a master that is gone (our pid, reused: another start time, another
    // boot), and of one that runs (ourselves, under another layout).
    // SAFETY: geteuid never fails.
    let uid = unsafe { libc::geteuid() };
    let stale = dir.join(format!(
        "checkout-guard-denials.L3.B00000000.P{master}.S1.U{uid}"
    ));
    std::fs::write(&stale, b"").unwrap();
    let (_, start) = checkout_guard_runtime::process::identity(master).unwrap();
    let boot = checkout_guard_runtime::process::boot_id().unwrap();
    let live_other_layout = dir.join(format!(
        "checkout-guard-denials.L1.B{boot}.P{master}.S{start}.U{uid}"
    ));
    std::fs::write(&live_other_layout, b"").unwrap();
    let unrelated = dir.join("something-else");
    std::fs::write(&unrelated, b"").unwrap();

    // Worker 1 learns; worker 2, forked later, finds what worker 1 learnt.
    let d = dir.clone();
    let now = checkout_guard_runtime::clock::SystemClock::monotonic_ns();
    assert_eq!(
        in_child(move || {
            let path = denials::init_for_siblings(&d, master).expect("a named table");
            if denials::sharing() != Some(Sharing::Named(path)) {
                return 2;
            }
            denials::record(
                k,
                Entry {
                    base: now + 5_000_000,
                    interval: 1_000_000,
                    rtt: 0,
                },
                now,
                u64::MAX,
                now,
            );
            if denials::lookup(k, now).is_some() {
                0
            } else {
                3
            }
        }),
        0,
        "worker 1"
    );
    let d = dir.clone();
    assert_eq!(
        in_child(move || {
            denials::init_for_siblings(&d, master).expect("a named table");
            match denials::lookup(k, now) {
                Some(e) if e.base == now + 5_000_000 => 0,
                _ => 4,
            }
        }),
        0,
        "worker 2 did not see what worker 1 learnt"
    );
    let files = tables(&dir);
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(
        !files.contains(&stale),
        "the gone master's table was removed: {files:?}"
    );
    assert!(files.contains(&live_other_layout) && files.contains(&unrelated));
    let table = files
        .iter()
        .find(|f| f.to_string_lossy().contains(".L4."))
        .unwrap()
        .clone();
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&table).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    // The entries, then one line of shared words (`SharedWords`), then the live counters
    // (`metrics::Region`: a line, then 1024 series of 320 bytes).
    assert_eq!(meta.len(), 4096 * 64 + 64 + 64 + 1024 * 320);

    // A table another user could write (or a file of the wrong size) is not used: the
    // worker gets a table of its own and says why.
    std::fs::set_permissions(&table, std::fs::Permissions::from_mode(0o666)).unwrap();
    let d = dir.clone();
    assert_eq!(
        in_child(move || {
            let why = denials::init_for_siblings(&d, master).unwrap_err();
            let ok = why.contains("mode 666")
                && matches!(denials::sharing(), Some(Sharing::Private(w)) if w == why);
            // A private table still works.
            denials::record(
                k,
                Entry {
                    base: now + 1,
                    interval: 1,
                    rtt: 0,
                },
                now,
                u64::MAX,
                now,
            );
            if ok && denials::lookup(k, now).is_some() {
                0
            } else {
                5
            }
        }),
        0
    );
    // Workers racing to make the table all end up with the one file.
    std::fs::remove_file(&table).unwrap();
    let mut pids = vec![];
    for _ in 0..4 {
        let d = dir.clone();
        // SAFETY: as in in_child.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let code = match denials::init_for_siblings(&d, master) {
                Ok(_) => 0,
                Err(_) => 6,
            };
            std::thread::sleep(Duration::from_millis(10));
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    for pid in pids {
        let mut status = 0;
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a racing worker failed"
        );
    }
    assert_eq!(
        tables(&dir).len(),
        3,
        "one table, no half-made file left: {:?}",
        tables(&dir)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
