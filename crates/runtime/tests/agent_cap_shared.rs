//! The events handed to the New Relic agent, counted per minute across the processes that
//! share the local denial table's memory (`telemetry::agent_cap`): this test process plays
//! the php-fpm master (the table made before the fork) and forks the workers; the minute
//! is given (no wall clock). One test in this file, so nothing else forks beside it.

use std::io::Write;

use checkout_guard_runtime::denials;
use checkout_guard_runtime::telemetry::agent_cap::{self, Minute};
use once_cell::sync::OnceCell;

static LOG: OnceCell<std::path::PathBuf> = OnceCell::new();

/// warn_log's writer: one line appended to the test's file (O_APPEND: whole lines from
/// every process).
fn to_file(line: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(LOG.get().unwrap())
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

fn lines() -> Vec<String> {
    std::fs::read_to_string(LOG.get().unwrap())
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Forks `workers` processes, each handing `batches` batches of `per_batch` events at
/// `now` under `cap`, and waits for them; every one must exit 0.
fn workers_hand(workers: usize, batches: u64, per_batch: u64, cap: u64, now: i64) {
    let mut pids = Vec::new();
    for _ in 0..workers {
        // SAFETY: the child only counts and leaves with _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = std::panic::catch_unwind(|| {
                for _ in 0..batches {
                    agent_cap::handed(per_batch, Some(cap), now);
                }
            })
            .map_or(99, |()| 0);
            unsafe { libc::_exit(code) };
        }
        pids.push(pid);
    }
    for pid in pids {
        let mut status = 0;
        // SAFETY: our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "a worker failed: status {status}"
        );
    }
}

#[test]
fn workers_sharing_the_table_count_one_minute_together_and_warn_once() {
    let dir = std::env::temp_dir().join(format!("cg-agent-cap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    LOG.set(dir.join("warnings.log")).unwrap();
    checkout_guard_runtime::warn_log::set_writer(to_file);
    denials::init_shared();

    let t = 1_800_000_000 / 60 * 60; // a minute's start
    let cap = 50;
    // Eight workers, 40 batches of 1 event, then of 3: 8 x 40 x 4 = 1,280 events, racing.
    workers_hand(8, 40, 1, cap, t + 5);
    workers_hand(8, 40, 3, cap, t + 30);
    let c = agent_cap::counts(t + 59);
    assert_eq!(
        c.this_minute,
        Minute {
            start: t,
            handed: 8 * 40 * 4
        }
    );
    assert_eq!(c.over_cap, 8 * 40 * 4 - cap);
    assert_eq!(c.this_minute.over(Some(cap)), 8 * 40 * 4 - cap);
    // Said once for the minute, by whichever worker crossed the cap.
    let said = lines();
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("more than 50 events handed to the New Relic agent")
            && said[0].contains("newrelic.custom_events.max_samples_stored = 50"),
        "{}",
        said[0]
    );

    // The next minute, under the cap: the minute before is the last minute, nothing said.
    workers_hand(4, 10, 1, cap, t + 60);
    let c = agent_cap::counts(t + 61);
    assert_eq!(
        c.this_minute,
        Minute {
            start: t + 60,
            handed: 40
        }
    );
    assert_eq!(
        c.last_minute,
        Minute {
            start: t,
            handed: 1280
        }
    );
    assert_eq!(c.over_cap, 1280 - cap);
    assert_eq!(lines().len(), 1);

    // The parent process counts into the same words (the table is its own): past the cap
    // this minute too, said once more.
    agent_cap::handed(11, Some(cap), t + 62);
    let c = agent_cap::counts(t + 62);
    assert_eq!(c.this_minute.handed, 51);
    assert_eq!(c.over_cap, 1280 - cap + 1);
    assert_eq!(lines().len(), 2);

    let _ = std::fs::remove_dir_all(&dir);
}
