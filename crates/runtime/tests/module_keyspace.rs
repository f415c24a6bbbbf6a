//! What `CG.DECIDE` does to keys, seen from outside, against the script's: its keyspace
//! events, the window hash's expiry, and the `auto_hot` window keys (`<prefix><n>`), keys
//! the call never declares: where one hashes to another cluster slot or aliases a bucket,
//! the command fails as the script does.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod module_support;

use common::{valkey_module, Valkey};
use module_support::*;
use std::time::{Duration, Instant};

/// The keyspace events of a decision are those of the script's writes (`set`, `expire`,
/// `hset`), key for key and in order: what a subscriber (or a module listening to them)
/// sees does not depend on the engine.
#[test]
fn the_keyspace_events_are_the_scripts() {
    // On the test clock (each call 1 ms after the last): on Valkey's own clock the two
    // runs could fall in different `auto_hot` windows, and so write other window keys.
    let v = with_module(true);
    let mut c = v.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("EA")
        .query::<()>(&mut c)
        .unwrap();
    let mut events_of = |db: i64, script: bool| {
        let mut sub = v.connection();
        sub.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut ps = sub.as_pubsub();
        ps.psubscribe(format!("__keyevent@{db}__:*")).unwrap();
        redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        for (i, (k, a)) in a_sequence_that_writes_everything().into_iter().enumerate() {
            let now = Some(NOW + 1_000 * i as i64);
            let cmd = match script {
                true => script_cmd(&k, &a, now),
                false => module_cmd(&k, &a, now),
            };
            cmd.query::<Vec<i64>>(&mut c).unwrap();
        }
        let mut seen = Vec::new();
        while let Ok(m) = ps.get_message() {
            let event = m.get_channel_name().rsplit(':').next().unwrap().to_string();
            seen.push((event, m.get_payload_bytes().to_vec()));
        }
        seen
    };
    let script = events_of(0, true);
    let module = events_of(1, false);
    assert!(script.len() > 20, "{script:?}");
    assert_eq!(module, script);
}

/// The in-flight leases' keyspace events through the module are the scripts' too, event
/// for event (`zadd`, `expire`, `zremrangebyscore`, `zrem`, `del` of an emptied set,
/// `hincrby`), with the same replies and the same keys after (members, scores, stats).
#[test]
fn the_lease_keyspace_events_are_the_scripts() {
    let v = with_module(true);
    let mut c = v.connection();
    redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("EA")
        .query::<()>(&mut c)
        .unwrap();
    let mut run = |db: i64, script: bool| {
        let mut sub = v.connection();
        sub.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut ps = sub.as_pubsub();
        ps.psubscribe(format!("__keyevent@{db}__:*")).unwrap();
        redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        let mut replies = Vec::new();
        for step in a_lease_sequence() {
            let cmd = match script {
                true => step.script_cmd(),
                false => step.module_cmd(),
            };
            replies.push(cmd.query::<Vec<i64>>(&mut c).unwrap());
        }
        let mut seen = Vec::new();
        while let Ok(m) = ps.get_message() {
            let event = m.get_channel_name().rsplit(':').next().unwrap().to_string();
            seen.push((event, m.get_payload_bytes().to_vec()));
        }
        (replies, seen)
    };
    let (script_replies, script) = run(0, true);
    let (module_replies, module) = run(1, false);
    assert_eq!(module_replies, script_replies);
    // The sequence does what it says: both in-flight denials, every release outcome.
    let firsts: Vec<i64> = script_replies.iter().map(|r| r[0]).collect();
    for want in [5, 7] {
        assert!(
            firsts.contains(&want),
            "no reason {want}: {script_replies:?}"
        );
    }
    let outcomes: Vec<i64> = script_replies
        .iter()
        .filter(|r| r.len() == 2)
        .map(|r| r[0])
        .collect();
    assert_eq!(outcomes, [1, 1, 0, 0, 0, 2, 2], "{script_replies:?}");
    let stats: Vec<(String, i64)> = redis::cmd("HGETALL")
        .arg("{cg:R}:f:stats")
        .query(&mut c)
        .unwrap();
    // p1 held 10 ms, f1 28 ms (leaked); p2 and n1 pruned, f5 and p4 released expired.
    assert_eq!(
        stats,
        [
            ("released".to_string(), 2),
            ("hold_us".to_string(), 38_000),
            ("leaked".to_string(), 1),
            ("expired".to_string(), 4)
        ]
    );
    let events: Vec<&str> = script.iter().map(|(e, _)| e.as_str()).collect();
    for want in [
        "zadd",
        "expire",
        "zremrangebyscore",
        "zrem",
        "del",
        "hincrby",
    ] {
        assert!(events.contains(&want), "no {want} event: {events:?}");
    }
    assert_eq!(module, script);
    assert_eq!(state(&mut c, 1), state(&mut c, 0));
}

/// The window hash's expiry: the script's `PEXPIRE cur, math.floor(2 * w / 1000) + 1000`
/// (w in µs), to the millisecond where `2 * (w / 1000) + 1000` would be 1 ms shorter
/// (`auto_hot.window_seconds = 1.0006`: w = 1,000,600 µs, 3,001 ms, not 3,000).
#[test]
fn the_window_hash_expires_when_the_scripts_does() {
    let v = with_module(false);
    let mut c = v.connection();
    let w = 1_000_600;
    let (k, a) = (keys(b"s"), argv(b"s", 1, (w, "0.3", 60, 1), b"global=10/5"));
    let reply: Vec<i64> = module_cmd(&k, &a, None).query(&mut c).unwrap();
    let now_us = reply[2];
    let wkey = [
        k[checkout_guard_model::cmd::decide::keys::AUTO_HOT_PREFIX].as_slice(),
        (now_us / w).to_string().as_bytes(),
    ]
    .concat();
    let at: i64 = redis::cmd("PEXPIRETIME").arg(&wkey).query(&mut c).unwrap();
    assert_eq!(at - now_us / 1000, 2 * w / 1000 + 1000);
}

/// Cluster mode: all 7 declared keys hash to one slot (the prefix `ah` has no hash tag;
/// the other keys are tagged `{ah}`, so there is no CROSSSLOT), but the window key
/// `ah<n>` hashes to another slot. The script is refused ("Script attempted to access
/// keys that do not hash to the same slot"), and so is `CG.DECIDE` (CROSSSLOT), writing
/// nothing in a slot the node does not own (`RM_OpenKey` checks no slot: the module
/// checks the undeclared key itself, with `model::slot`).
#[test]
fn a_window_key_in_another_slot_is_refused_like_the_script() {
    let module = valkey_module();
    // A free port for the cluster bus (port 0 would put it at 10000, maybe taken).
    let bus = common::ports::free_port().to_string();
    let v = Valkey::start_with(&[
        "--cluster-port".as_ref(),
        bus.as_ref(),
        "--cluster-enabled".as_ref(),
        "yes".as_ref(),
        "--cluster-require-full-coverage".as_ref(),
        "no".as_ref(),
        "--loadmodule".as_ref(),
        module.as_os_str(),
    ]);
    let mut c = v.connection();
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg("ah")
        .query(&mut c)
        .unwrap();
    redis::cmd("CLUSTER")
        .arg("ADDSLOTS")
        .arg(slot)
        .query::<()>(&mut c)
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the one-node cluster never came up"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let k: Vec<Vec<u8>> = [
        "{ah}:b:global",
        "{ah}:b:lane",
        "{ah}:b:shop:s",
        "{ah}:hot:s",
        "{ah}:limits:v",
        "ah",
        "{ah}:settings",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let a = auto_hot_argv();
    let script = call("EVAL", &k, &a).query::<Vec<i64>>(&mut c);
    assert!(script.is_err(), "the script is refused: {script:?}");
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    let module = call("CG.DECIDE", &k, &a).query::<Vec<i64>>(&mut c);
    let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    let foreign: Vec<String> = names
        .iter()
        .filter(|n| {
            redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(n.as_slice())
                .query::<i64>(&mut c)
                .unwrap()
                != slot
        })
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    assert!(
        foreign.is_empty() && module.is_err(),
        "CG.DECIDE answered {module:?} and wrote {foreign:?}, keys of slots this node does not own (it owns {slot} only)"
    );
}

/// The current window key equal to the global bucket's (a prefix that collides with the
/// bucket names): the script's HSET on the bucket string fails (WRONGTYPE) and the call
/// is an error, and so is `CG.DECIDE`'s (an earlier build skipped its HSET, admitted,
/// and set the window's expiry on the bucket string, forgiving its debt).
#[test]
fn a_window_key_aliasing_the_bucket_fails_like_the_script() {
    use checkout_guard_model::cmd::decide::source_with_test_clock as decide_source_with_test_clock;
    const NOW: i64 = 1_800_000_000_000_000;
    let module = valkey_module();
    let v = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
    ]);
    let mut c = v.connection();
    let bucket = format!("{{cg:R}}:w{}", NOW / 1_000_000).into_bytes();
    use checkout_guard_model::cmd::decide::keys as at;
    let mut k = keys(b"s");
    k[at::AUTO_HOT_PREFIX] = b"{cg:R}:w".to_vec();
    k[at::BUCKETS] = bucket.clone();
    let a = auto_hot_argv();
    let script = redis::cmd("EVAL")
        .arg(decide_source_with_test_clock())
        .arg(k.len())
        .arg(&k)
        .arg(&a)
        .arg(NOW)
        .query::<Vec<i64>>(&mut c);
    assert!(script.is_err(), "the script fails: {script:?}");
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    let module = redis::cmd("CG.DECIDE")
        .arg(&k)
        .arg(&a)
        .arg(NOW)
        .query::<Vec<i64>>(&mut c);
    let pttl: i64 = redis::cmd("PTTL").arg(&bucket).query(&mut c).unwrap();
    assert!(
        module.is_err(),
        "CG.DECIDE answered {module:?}; the bucket now expires in {pttl} ms (written with an hour's slack)"
    );
}

/// A hand-built call whose settings key is one of its bucket keys (here the global
/// bucket's): the script compares the stored settings as its `MGET` read them, before
/// any write, so once they were published a call that writes the bucket leaves the bucket
/// there; `CG.DECIDE` must decide as it does, call after call (the model read the
/// settings after recording the bucket write, saw them differ and wrote them over the
/// bucket, so the next call found no bucket: full again).
#[test]
fn a_settings_key_that_is_a_bucket_key_is_compared_as_the_script_read_it() {
    let v = with_module(true);
    let mut c = v.connection();
    for alias in [0, 1, 2] {
        let shop = b"s";
        let mut k = keys(shop);
        use checkout_guard_model::cmd::decide::keys as at;
        k[at::SETTINGS] = k[at::BUCKETS + alias].clone();
        let a = argv_full(
            shop,
            1,
            true,
            true,
            (0, "0", 0, 0),
            b"global=100/100",
            false,
        );
        let mut replies = Vec::new();
        for (db, script) in [(0, true), (1, false)] {
            redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
            redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
            let mut got = Vec::new();
            for n in 0..4 {
                let now = Some(NOW + n * 1000);
                let cmd = match script {
                    true => script_cmd(&k, &a, now),
                    false => module_cmd(&k, &a, now),
                };
                got.push(cmd.query::<Vec<i64>>(&mut c).unwrap());
            }
            replies.push(got);
        }
        assert_eq!(
            replies[1], replies[0],
            "settings key = bucket key {alias}: module (left) against script (right)"
        );
        assert_eq!(state(&mut c, 1), state(&mut c, 0), "bucket key {alias}");
    }
}

/// The keys of a call are its form's (`decide::FORMS`): `COMMAND GETKEYS` (what cluster
/// routing and ACL key checks ask, through `getkeys-api`) names the first 4, 6, 7, 11, 12
/// or 13 arguments as the argument count says, never an argument; a count of no form
/// names none and the call itself is refused as of the wrong arity, as is a call of
/// another contract. Each form decides the same as the longest one with the features it
/// leaves out off.
#[test]
fn each_form_names_its_own_keys_and_decides_as_the_longest() {
    use checkout_guard_model::cmd::decide::FORMS;
    let v = with_module(true);
    let mut c = v.connection();
    let (k, a) = (keys(b"s"), argv(b"s", 1, (0, "0", 0, 0), b"global=10/5"));
    let mut replies = Vec::new();
    for (nk, na) in FORMS {
        let got: Vec<Vec<u8>> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("CG.DECIDE")
            .arg(&k[..nk])
            .arg(&a[..na])
            .arg(NOW)
            .query(&mut c)
            .unwrap();
        assert_eq!(got, k[..nk].to_vec(), "form {nk}+{na}");
        redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
        let module: Vec<i64> = module_cmd(&k[..nk], &a[..na], Some(NOW))
            .query(&mut c)
            .unwrap();
        redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
        let script: Vec<i64> = script_cmd(&k[..nk], &a[..na], Some(NOW))
            .query(&mut c)
            .unwrap();
        assert_eq!(module, script, "form {nk}+{na}");
        replies.push(module);
    }
    // Global's TAT (all else off): the same in every form.
    assert!(
        replies.iter().all(|r| r[..4] == replies[5][..4]),
        "{replies:?}"
    );
    let (nk, na) = FORMS[1];
    let wrong = module_cmd(&k[..nk], &a[..na - 1], Some(NOW)).query::<Vec<i64>>(&mut c);
    assert!(
        wrong.is_err_and(|e| e.to_string().contains("wrong number of arguments")),
        "a count of no form"
    );
    // A rolling upgrade: an older worker's call (13 keys with 27 arguments, no mark, the
    // order before the forms) is no form's count; a call of a form's count with another
    // contract's mark is refused the same way. Either way `engine = auto` decides with the
    // script (its wrong-arity fallback) and nothing is written.
    use checkout_guard_model::cmd::decide::args as at;
    redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
    let older = module_cmd(&k, &a[at::TOKENS..], Some(NOW)).query::<Vec<i64>>(&mut c);
    let mut marked = a.clone();
    marked[at::CONTRACT] = b"f0".to_vec();
    let other = module_cmd(&k, &marked, Some(NOW)).query::<Vec<i64>>(&mut c);
    for (what, reply) in [("older", older), ("another mark", other)] {
        assert!(
            reply.is_err_and(|e| e.to_string().contains("wrong number of arguments")),
            "{what}"
        );
    }
    let written: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    assert!(written.is_empty(), "{written:?}");
}
