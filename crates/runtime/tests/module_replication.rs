//! `CG.DECIDE` is never replicated as itself: a replica and an AOF replay, neither with
//! the module, hold exactly the primary's keys after it decided.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod module_support;

use common::ports::free_port;
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
    let port = free_port().to_string();
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

/// The adaptive budget through the module: `CG.DECIDE` answers the script's 11-integer
/// form (a scaled decision, the provider's pause, the recovery), and the DEL of the state
/// on recovery reaches a replica without the module (it loses the key too).
#[test]
fn the_adaptive_state_and_its_recovery_del_reach_a_replica() {
    use checkout_guard_connection::scripts::{command, invocation};
    use checkout_guard_model::adaptive::AdaptParams;
    use checkout_guard_model::cmd::decide::{
        source_with_test_clock as decide_source_with_test_clock, MODULE_COMMAND,
    };
    use checkout_guard_model::cmd::feedback::source_with_test_clock as feedback_source_with_test_clock;
    use checkout_guard_model::{
        AdaptArgs, AutoHotArgs, DecideCall, FeedbackCall, LaneArgs, ShopKeys,
    };
    use checkout_guard_model::{BucketSet, BucketSpec, Keys, StepReply};

    let module = valkey_module();
    let port = free_port().to_string();
    let primary = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
        "--port".as_ref(),
        port.as_ref(),
        "--bind".as_ref(),
        "127.0.0.1".as_ref(),
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
    let decide = redis::Script::new(&decide_source_with_test_clock());
    let feedback = redis::Script::new(&feedback_source_with_test_clock());
    let params = AdaptParams {
        floor_permille: 100,
        recover_us: 10_000_000,
    };
    let adapt = AdaptArgs::new(Some(&params));
    let set = BucketSet {
        global: BucketSpec::new("global", 20, 10.0).unwrap(),
        hot_lane: None,
        hot_shop: None,
    };
    let lanes = LaneArgs::new(&set);
    let auto = AutoHotArgs::new(None);
    let (lua, native) = (Keys::new("lua"), Keys::new("mod"));
    let t = 1_800_000_000_000_000i64;
    let throttled = |c: &mut redis::Connection, keys: &Keys, now: i64, retry_after_us: i64| {
        let (a, l) = (keys.adapt(), keys.adapt_last());
        let call = FeedbackCall {
            adapt_key: &a,
            last_key: &l,
            status: 429,
            decrease: 0.5,
            params,
            retry_after_us,
        };
        let mut inv = invocation(&call, &feedback);
        inv.arg(now);
        inv.invoke::<Vec<i64>>(c).unwrap()
    };
    // The same decision by the script (namespace lua) and the module (namespace mod).
    let both = |c: &mut redis::Connection, now: i64| {
        let mut out = Vec::new();
        for keys in [&lua, &native] {
            let shop_keys = ShopKeys::new(keys, b"s");
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &checkout_guard_model::InFlightArgs::off(),
                lease_id: b"",
                adapt: &adapt,
                keys: shop_keys.decide_keys(),
                tokens: 1,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop: b"s",
                auto_hot: &auto,
                settings: "s",
                peek: false,
                max_wait_us: 0,
            };
            let reply: Vec<i64> = if std::ptr::eq(keys, &lua) {
                let mut inv = invocation(&call, &decide);
                inv.arg(now);
                inv.invoke(c).unwrap()
            } else {
                command(MODULE_COMMAND, &call).arg(now).query(c).unwrap()
            };
            out.push(reply);
        }
        assert_eq!(out[1], out[0], "module vs script at {now}");
        assert_eq!(out[0].len(), 11, "{out:?}");
        StepReply::from_ints(&out[0]).unwrap()
    };
    let exists = |c: &mut redis::Connection| -> Vec<bool> {
        [lua.adapt(), native.adapt()]
            .iter()
            .map(|k| redis::cmd("EXISTS").arg(k).query(c).unwrap())
            .collect()
    };
    let synced = |c: &mut redis::Connection| {
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(c).unwrap();
        assert_eq!(acked, 1);
    };
    for k in [&lua, &native] {
        assert_eq!(throttled(&mut p, k, t, 0)[..3], [1, 1000, 500]);
    }
    // Scaled: half the limits.
    let a = both(&mut p, t + 1000);
    assert!(
        a.reason.is_none() && (500..510).contains(&a.adapt_permille),
        "{a:?}"
    );
    // The provider's pause: every shop denied, reason 4.
    for k in [&lua, &native] {
        throttled(&mut p, k, t + 2_000_000, 1_000_000);
    }
    let b = both(&mut p, t + 2_500_000);
    assert!(b.provider && b.pause_until_us == t + 3_000_000, "{b:?}");
    synced(&mut p);
    assert_eq!(exists(&mut r), [true, true], "the state on the replica");
    // Long after: back at the limits, the state DELeted, on the replica too.
    let c = both(&mut p, t + 60_000_000);
    assert!(c.recovered() && c.reason.is_none(), "{c:?}");
    assert_eq!(exists(&mut p), [false, false]);
    synced(&mut p);
    assert_eq!(exists(&mut r), [false, false], "the replica kept the state");
    let calls = info_field(&mut r, "commandstats", "cmdstat_CG.DECIDE");
    assert!(calls.is_empty(), "the replica ran CG.DECIDE: {calls}");
}

/// The in-flight leases through the module (`CG.DECIDE` taking them, `CG.RELEASE` ending
/// them, expired ones pruned, the stats counted) reach a replica without the module as
/// `ZREMRANGEBYSCORE`, `ZADD`, `PEXPIREAT`, `ZREM` and `HINCRBY`: the same sets (members
/// and scores), stats and expiry instants; the replica never runs either command.
#[test]
fn the_lease_writes_reach_a_replica_as_they_are() {
    let module = valkey_module();
    let port = free_port().to_string();
    let primary = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
        "--port".as_ref(),
        port.as_ref(),
        "--bind".as_ref(),
        "127.0.0.1".as_ref(),
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
    let mut states = Vec::new();
    for step in a_lease_sequence() {
        step.module_cmd().query::<Vec<i64>>(&mut p).unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(5000).query(&mut p).unwrap();
        assert_eq!(acked, 1);
        let on_primary = exact_state(&mut p);
        assert_eq!(exact_state(&mut r), on_primary, "the replica");
        states.push(on_primary);
    }
    // The sets were there (and emptied at the end), the stats counted.
    assert!(
        states
            .iter()
            .any(|s| s.iter().filter(|(_, t, _, _)| t == "zset").count() == 3),
        "{states:?}"
    );
    assert!(states
        .last()
        .unwrap()
        .iter()
        .any(|(_, t, _, _)| t == "hash"));
    for cmd in ["CG.DECIDE", "CG.RELEASE"] {
        let calls = info_field(&mut r, "commandstats", &format!("cmdstat_{cmd}"));
        assert!(calls.is_empty(), "the replica ran {cmd}: {calls}");
    }
}
