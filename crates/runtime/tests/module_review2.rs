//! Adversarial review 2 of the key-API `CG.DECIDE`: the `auto_hot` window keys
//! (`<prefix><n>`) are keys the call never declares. The script reaches them through
//! `redis.call`, where Valkey checks them (cluster slot, ACL key permissions) and refuses;
//! the module opens them with `RM_OpenKey`, which checks nothing.

#[allow(dead_code)]
mod common;

use checkout_guard_model::call::decide_source;
use common::{valkey_module, Valkey};
use std::time::{Duration, Instant};

/// The 17 arguments: global 10 tokens at 5/s, `auto_hot` with a 1 s window.
fn argv() -> Vec<Vec<u8>> {
    [
        "1",
        "0",
        "200000",
        "2000000",
        "0",
        "0",
        "0",
        "0",
        "",
        "s",
        "1000000",
        "0.3",
        "60",
        "1",
        "global=10/5",
        "0",
        "0",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

fn call(name: &str, k: &[Vec<u8>], a: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd(name);
    if name == "EVAL" {
        cmd.arg(decide_source()).arg(7);
    }
    cmd.arg(k).arg(a);
    cmd
}

/// Cluster mode: all 7 declared keys hash to one slot (the prefix `ah` has no hash tag;
/// the other keys are tagged `{ah}`, so there is no CROSSSLOT), but the window key
/// `ah<n>` hashes to another slot. The script is refused ("Script attempted to access
/// keys that do not hash to the same slot"); `CG.DECIDE` admits and writes `ah<n>` on a
/// node that does not own its slot (stored under the call's slot: COUNTKEYSINSLOT of its
/// own slot says 0 while KEYS lists it; a replica files it under its real slot).
#[test]
fn a_window_key_in_another_slot_is_refused_like_the_script() {
    let module = valkey_module();
    // A free port for the cluster bus (port 0 would put it at 10000, maybe taken).
    let bus = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
        .to_string();
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
    let a = argv();
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

/// ACL: a user allowed the 7 declared keys (the prefix `{cg:R}:ah:` exactly) and not the
/// window keys `{cg:R}:ah:<n>`. The script's HMGET is refused (NOPERM); `CG.DECIDE`
/// reads and writes the window hash the user may not touch.
#[test]
fn a_window_key_the_user_may_not_access_is_refused_like_the_script() {
    let module = valkey_module();
    let v = Valkey::start_with(&["--loadmodule".as_ref(), module.as_os_str()]);
    let mut admin = v.connection();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "cg",
            "on",
            ">pw",
            "~{cg:R}:b:*",
            "~{cg:R}:hot:*",
            "~{cg:R}:limits:v",
            "~{cg:R}:ah:",
            "~{cg:R}:settings",
            "+@all",
        ])
        .query::<()>(&mut admin)
        .unwrap();
    let mut c = redis::Client::open(format!("{}?user=cg&pass=pw", v.url).as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    let k: Vec<Vec<u8>> = [
        "{cg:R}:b:global",
        "{cg:R}:b:lane",
        "{cg:R}:b:shop:s",
        "{cg:R}:hot:s",
        "{cg:R}:limits:v",
        "{cg:R}:ah:",
        "{cg:R}:settings",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    let a = argv();
    let script = call("EVAL", &k, &a).query::<Vec<i64>>(&mut c);
    assert!(
        script
            .as_ref()
            .is_err_and(|e| e.to_string().contains("ermission")),
        "the script is refused: {script:?}"
    );
    redis::cmd("FLUSHALL").query::<()>(&mut admin).unwrap();
    let module = call("CG.DECIDE", &k, &a).query::<Vec<i64>>(&mut c);
    let windows: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("{cg:R}:ah:?*")
        .query(&mut admin)
        .unwrap();
    assert!(
        windows.is_empty() && module.is_err(),
        "CG.DECIDE answered {module:?} and wrote {:?}, keys user cg may not access",
        windows
            .iter()
            .map(|w| String::from_utf8_lossy(w))
            .collect::<Vec<_>>()
    );
}

/// The current window key equal to the global bucket's (a prefix that collides with the
/// bucket names): the script's HSET on the bucket string fails (WRONGTYPE) and the call
/// is an error. The module skips its HSET, answers "admitted" and then sets the window's
/// expiry (2 windows + 1 s) on the bucket string: the bucket expires seconds later,
/// forgiving its debt, and the PEXPIREAT is replicated.
#[test]
fn a_window_key_aliasing_the_bucket_fails_like_the_script() {
    use checkout_guard_model::call::decide_source_with_test_clock;
    const NOW: i64 = 1_800_000_000_000_000;
    let module = valkey_module();
    let v = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
    ]);
    let mut c = v.connection();
    let bucket = format!("{{cg:R}}:w{}", NOW / 1_000_000).into_bytes();
    let mut k: Vec<Vec<u8>> = [
        "{cg:R}:b:global",
        "{cg:R}:b:lane",
        "{cg:R}:b:shop:s",
        "{cg:R}:hot:s",
        "{cg:R}:limits:v",
        "{cg:R}:w",
        "{cg:R}:settings",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    k[0] = bucket.clone();
    let a = argv();
    let script = redis::cmd("EVAL")
        .arg(decide_source_with_test_clock())
        .arg(7)
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
