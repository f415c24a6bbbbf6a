//! `CG.DECIDE` is never replicated as itself: a replica and an AOF replay, neither with
//! the module, hold exactly the primary's keys after it decided.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod module_support;

use common::{valkey_module, Valkey};
use module_support::*;

/// Every key of db 0: (name, type, value as text, PEXPIRETIME).
fn exact_state(c: &mut redis::Connection) -> Vec<(Vec<u8>, String, String, i64)> {
    let with_bool = state(c, 0);
    with_bool
        .into_iter()
        .map(|(k, t, v, _)| {
            let at: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, t, v, at)
        })
        .collect()
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn info_field(c: &mut redis::Connection, section: &str, field: &str) -> String {
    let info: String = redis::cmd("INFO").arg(section).query(c).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// `CG.DECIDE` is never replicated as itself: its writes reach a replica that has no
/// module, and an AOF replayed by a Valkey without it, as `SET ... PXAT`, `HSET` and
/// `PEXPIREAT`: the same keys, types, values (binary ones too) and expiry instants, to
/// the millisecond.
#[test]
fn the_writes_reach_a_replica_and_an_aof_without_the_module_as_they_are() {
    let module = valkey_module();
    let port = free_tcp_port().to_string();
    let aof_dir = std::env::temp_dir().join(format!("cg-aof-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&aof_dir).unwrap();
    let primary = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "--port".as_ref(),
        port.as_ref(),
        "--bind".as_ref(),
        "127.0.0.1".as_ref(),
        "--appendonly".as_ref(),
        "yes".as_ref(),
        "--appendfsync".as_ref(),
        "always".as_ref(),
        "--dir".as_ref(),
        aof_dir.as_os_str(),
    ]);
    let replica =
        Valkey::start_with(&["--replicaof".as_ref(), "127.0.0.1".as_ref(), port.as_ref()]);
    let (mut p, mut r) = (primary.connection(), replica.connection());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while info_field(&mut r, "replication", "master_link_status") != "up" {
        assert!(
            std::time::Instant::now() < deadline,
            "the replica never synced"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut replies = Vec::new();
    for (k, a) in a_sequence_that_writes_everything() {
        replies.push(module_cmd(&k, &a, None).query::<Vec<i64>>(&mut p).unwrap());
    }
    assert!(
        replies.iter().any(|r| r[0] != 0) && replies.iter().any(|r| r[6] == 1),
        "the sequence denies and makes a shop hot: {replies:?}"
    );
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
    assert_eq!(acked, 1);
    let on_primary = exact_state(&mut p);
    assert!(on_primary.len() >= 8, "{on_primary:?}");
    assert_eq!(exact_state(&mut r), on_primary, "the replica");
    // Nothing on the replication link but the effects.
    let calls = info_field(&mut r, "commandstats", "cmdstat_CG.DECIDE");
    assert!(calls.is_empty(), "the replica ran CG.DECIDE: {calls}");
    drop(replica);
    drop(p);
    drop(primary);
    // The AOF, replayed by a Valkey without the module.
    let replayed = Valkey::start_with(&[
        "--appendonly".as_ref(),
        "yes".as_ref(),
        "--dir".as_ref(),
        aof_dir.as_os_str(),
    ]);
    let mut c = replayed.connection();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while redis::cmd("PING").query::<String>(&mut c).is_err()
        || info_field(&mut c, "persistence", "loading") != "0"
    {
        assert!(std::time::Instant::now() < deadline, "the AOF never loaded");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(exact_state(&mut c), on_primary, "the AOF replayed");
    drop(c);
    drop(replayed);
    let _ = std::fs::remove_dir_all(&aof_dir);
}
