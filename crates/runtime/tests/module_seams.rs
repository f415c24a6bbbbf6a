//! The native module (`CG.DECIDE`) against its contract, from an adversarial review: never
//! a crash (a NUL byte, bytes that are not UTF-8), the script's answers and side effects
//! on the same data (the script is the reference), `engine = auto` uses the script
//! wherever the module cannot decide (not loaded, or not allowed by the user's ACL).
//!
//! Needs `target/release/libcheckout_guard_valkey.so` (or `CG_VALKEY_MODULE`) and a
//! valkey-server (`VALKEY_SERVER` or the project's `.venv`).

#[allow(dead_code)]
mod common;

use checkout_guard_model::call::{decide_source, decide_source_with_test_clock};
use checkout_guard_model::{Defaults, LimiterOptions, Value};
use checkout_guard_runtime::Limiter;
use common::{valkey_module, Valkey};

const NOW: i64 = 1_800_000_000_000_000;

fn with_module(test_clock: bool) -> Valkey {
    let module = valkey_module();
    let mut args: Vec<&std::ffi::OsStr> = vec!["--loadmodule".as_ref(), module.as_os_str()];
    if test_clock {
        args.push("test-clock".as_ref());
    }
    Valkey::start_with(&args)
}

fn keys(shop: &[u8]) -> Vec<Vec<u8>> {
    let p = b"{cg:R}:".to_vec();
    let k = |s: &[u8]| [p.as_slice(), s].concat();
    vec![
        k(b"b:global"),
        k(b"b:lane"),
        k(&[b"b:shop:".as_slice(), shop].concat()),
        k(&[b"hot:".as_slice(), shop].concat()),
        k(b"limits:v"),
        k(b"ah:"),
        k(b"settings"),
    ]
}

/// The 17 arguments: global 10 tokens at 5/s, no hot buckets, `auto` = (window µs, share,
/// ttl s, min tokens).
fn argv(shop: &[u8], tokens: i64, auto: (i64, &str, i64, i64), settings: &[u8]) -> Vec<Vec<u8>> {
    let s = |x: &str| x.as_bytes().to_vec();
    vec![
        s(&tokens.to_string()),
        s("0"),
        s("200000"),
        s("2000000"),
        s("0"),
        s("0"),
        s("0"),
        s("0"),
        s(""),
        shop.to_vec(),
        s(&auto.0.to_string()),
        s(auto.1),
        s(&auto.2.to_string()),
        s(&auto.3.to_string()),
        settings.to_vec(),
        s("0"),
        s("0"),
    ]
}

fn module_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    let mut cmd = redis::cmd("CG.DECIDE");
    cmd.arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

fn script_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    match now {
        Some(_) => cmd.arg(decide_source_with_test_clock()),
        None => cmd.arg(decide_source()),
    };
    cmd.arg(7).arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// Every key of db `db`: (name, type, value as text, PEXPIRETIME != -1).
fn state(c: &mut redis::Connection, db: i64) -> Vec<(Vec<u8>, String, String, bool)> {
    redis::cmd("SELECT").arg(db).query::<()>(c).unwrap();
    let mut names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(c).unwrap();
    names.sort();
    names
        .into_iter()
        .map(|k| {
            let t: String = redis::cmd("TYPE").arg(&k).query(c).unwrap();
            let v = match t.as_str() {
                "string" => format!(
                    "{:?}",
                    redis::cmd("GET").arg(&k).query::<Vec<u8>>(c).unwrap()
                ),
                "hash" => {
                    let mut h: Vec<(Vec<u8>, Vec<u8>)> =
                        redis::cmd("HGETALL").arg(&k).query(c).unwrap();
                    h.sort();
                    format!("{h:?}")
                }
                _ => String::new(),
            };
            let e: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, t, v, e != -1)
        })
        .collect()
}

fn assert_alive(v: &Valkey) {
    let pong = redis::Client::open(v.url.as_str())
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(pong.is_ok(), "Valkey died on CG.DECIDE: {pong:?}");
}

/// A key with a NUL byte (here the shop's, in the hot shop bucket and the hot flag): the
/// script decides; `CG.DECIDE` panics in `ValkeyString::create` (CString) and aborts
/// Valkey (SIGABRT), taking every limiter and everything else on that server with it.
#[test]
fn a_nul_byte_in_a_key_is_not_a_crash() {
    let v = with_module(false);
    let mut c = v.connection();
    let shop = b"a\x00b";
    let (k, a) = (keys(shop), argv(shop, 1, (0, "0", 0, 0), b"global=10/5"));
    let script: redis::RedisResult<Vec<i64>> = script_cmd(&k, &a, None).query(&mut c);
    assert!(script.is_ok(), "the script decides: {script:?}");
    let _ = module_cmd(&k, &a, None).query::<redis::Value>(&mut c);
    assert_alive(&v);
}

/// A NUL byte in the settings argument (valid UTF-8, so `set_px` writes it with
/// `ValkeyKeyWritable::write`, which panics): same abort, after the bucket was written.
#[test]
fn a_nul_byte_in_the_settings_is_not_a_crash() {
    let v = with_module(false);
    let mut c = v.connection();
    let (k, a) = (
        keys(b"s"),
        argv(b"s", 1, (0, "0", 0, 0), b"global=10/5\x00x"),
    );
    let _ = module_cmd(&k, &a, None).query::<redis::Value>(&mut c);
    assert_alive(&v);
}

/// An `auto_hot` window key of another type (current or previous window): the script's
/// HMGET fails with WRONGTYPE before any write. The module reads it as 0, admits, writes
/// the buckets (and marks the shop hot from a share of 1000), ignores its own failed HSET
/// while replicating it, and puts an expiry on the foreign key.
#[test]
fn a_window_key_of_another_type_fails_like_the_script_with_nothing_written() {
    let v = with_module(true);
    let mut c = v.connection();
    let w = 10_000_000;
    let shop = b"s";
    let (k, a) = (keys(shop), argv(shop, 1, (w, "0.3", 60, 1), b"global=10/5"));
    for (which, window) in [("current", NOW / w), ("previous", NOW / w - 1)] {
        let wkey = [k[5].as_slice(), window.to_string().as_bytes()].concat();
        let mut replies = Vec::new();
        for (db, cmd) in [
            (0, script_cmd(&k, &a, Some(NOW))),
            (1, module_cmd(&k, &a, Some(NOW))),
        ] {
            redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
            redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
            redis::cmd("SET")
                .arg(&wkey)
                .arg("foreign")
                .query::<()>(&mut c)
                .unwrap();
            replies.push(cmd.query::<Vec<i64>>(&mut c).map_err(|e| e.to_string()));
        }
        let (script, module) = (&replies[0], &replies[1]);
        assert!(script.is_err(), "{which}: the script fails: {script:?}");
        assert!(
            module.is_err(),
            "{which} window key is a string: script {script:?}, module {module:?}"
        );
        assert_eq!(state(&mut c, 0), state(&mut c, 1), "{which}: side effects");
    }
}

/// A window counter that is not UTF-8 (written by hand): no crash, read as the script
/// reads it (`tonumber` gives nil: 0).
#[test]
fn a_window_counter_that_is_not_text_is_read_as_zero_without_a_crash() {
    let v = with_module(true);
    let mut c = v.connection();
    let w = 10_000_000;
    let shop = b"s";
    let (k, a) = (keys(shop), argv(shop, 1, (w, "0.3", 60, 1), b"global=10/5"));
    let wkey = [k[5].as_slice(), (NOW / w).to_string().as_bytes()].concat();
    let mut replies = Vec::new();
    for (db, cmd) in [
        (0, script_cmd(&k, &a, Some(NOW))),
        (1, module_cmd(&k, &a, Some(NOW))),
    ] {
        redis::cmd("SELECT").arg(db).query::<()>(&mut c).unwrap();
        redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
        redis::cmd("HSET")
            .arg(&wkey)
            .arg(shop)
            .arg(&b"\xff\xfe"[..])
            .arg("")
            .arg(&b"\x80"[..])
            .query::<()>(&mut c)
            .unwrap();
        replies.push(cmd.query::<Vec<i64>>(&mut c).map_err(|e| e.to_string()));
    }
    assert_alive(&v);
    assert_eq!(replies[1], replies[0], "module vs script");
}

/// Tokens whose cost overflows i64 (2^58 tokens at 200,000 µs each = 2^64 * 3125): the
/// script (doubles) denies; the module's wrapping arithmetic finds a cost of 0 and admits.
/// The extension never sends more than the smallest capacity, but the command is the
/// contract: a caller's bad number must not become an admission.
#[test]
fn tokens_whose_cost_overflows_are_denied_like_the_script() {
    let v = with_module(true);
    let mut c = v.connection();
    let (k, a) = (
        keys(b"s"),
        argv(b"s", 1 << 58, (0, "0", 0, 0), b"global=10/5"),
    );
    let script: Vec<i64> = script_cmd(&k, &a, Some(NOW)).query(&mut c).unwrap();
    redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    let module: Vec<i64> = module_cmd(&k, &a, Some(NOW)).query(&mut c).unwrap();
    assert_eq!(script[0], 1, "the script denies: {script:?}");
    assert_eq!(module, script);
}

/// The window hash's expiry: the script's `PEXPIRE cur, math.floor(2 * w / 1000) + 1000`
/// (w in µs); the module's `2 * (w / 1000) + 1000` is 1 ms shorter when w % 1000 >= 500
/// (`auto_hot.window_seconds = 1.0006`: w = 1,000,600 µs, 3,001 ms against 3,000).
#[test]
fn the_window_hash_expires_when_the_scripts_does() {
    let v = with_module(false);
    let mut c = v.connection();
    let w = 1_000_600;
    let (k, a) = (keys(b"s"), argv(b"s", 1, (w, "0.3", 60, 1), b"global=10/5"));
    let reply: Vec<i64> = module_cmd(&k, &a, None).query(&mut c).unwrap();
    let now_us = reply[2];
    let wkey = [k[5].as_slice(), (now_us / w).to_string().as_bytes()].concat();
    let at: i64 = redis::cmd("PEXPIRETIME").arg(&wkey).query(&mut c).unwrap();
    assert_eq!(at - now_us / 1000, 2 * w / 1000 + 1000);
}

/// A Valkey user whose ACL was written for the script (`+@read +@write +@scripting
/// +time`, no module commands: `CG.DECIDE` is in no category but @all): the script decides
/// for it. Once the module is loaded, `engine = auto` finds `CG.DECIDE` in `COMMAND INFO`,
/// gets NOPERM and does not fall back: every decision becomes `on_unavailable`.
#[test]
fn auto_decides_with_the_script_when_acl_denies_the_module() {
    let v = with_module(false);
    let mut admin = v.connection();
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "cg",
            "on",
            ">pw",
            "~*",
            "+@read",
            "+@write",
            "+@scripting",
            "+@connection",
            "+command",
            "+time",
        ])
        .query::<()>(&mut admin)
        .unwrap();
    let url = format!("{}?user=cg&pass=pw", v.url);
    let bucket = Value::Map(vec![
        ("capacity".into(), Value::Int(3)),
        ("refill_per_second".into(), Value::Float(0.01)),
    ]);
    let options = Value::Map(vec![
        ("name".into(), Value::Str(b"acl".to_vec())),
        ("url".into(), Value::Str(url.into_bytes())),
        ("global".into(), bucket),
        ("timeout_ms".into(), Value::Int(2000)),
        ("engine".into(), Value::Str(b"lua".to_vec())),
        ("on_unavailable".into(), Value::Str(b"throw".to_vec())),
    ]);
    let defaults = Defaults {
        local_denials: false,
        ..Defaults::default()
    };
    let lua = Limiter::new(LimiterOptions::from_value(&options, &defaults).unwrap());
    let d = lua.acquire(b"shop", 1);
    assert!(d.as_ref().is_ok_and(|d| d.allowed), "lua: {d:?}");
    let Value::Map(mut entries) = options else {
        unreachable!()
    };
    entries.retain(|(k, _)| k != "engine" && k != "name");
    entries.push(("engine".into(), Value::Str(b"auto".to_vec())));
    entries.push(("name".into(), Value::Str(b"acl-auto".to_vec())));
    let auto = Limiter::new(LimiterOptions::from_value(&Value::Map(entries), &defaults).unwrap());
    let d = auto.acquire(b"shop", 1);
    assert!(
        d.as_ref().is_ok_and(|d| d.allowed),
        "auto with the module loaded and the same user: {:?}",
        d.map_err(|e| e.to_string())
    );
}

/// The 17 arguments with everything chosen: global 100 tokens at 100/s, hot buckets (hot
/// lane 6 tokens at 2/s, hot shop 3 tokens at 1/s) when `lanes`, the shop static hot when
/// `hot`, peek.
#[allow(clippy::too_many_arguments)]
fn argv_full(
    shop: &[u8],
    tokens: i64,
    hot: bool,
    lanes: bool,
    auto: (i64, &str, i64, i64),
    settings: &[u8],
    peek: bool,
) -> Vec<Vec<u8>> {
    let mut a = argv(shop, tokens, auto, settings);
    // Global: 100 tokens at 100/s, so the hot buckets decide.
    a[2] = b"10000".to_vec();
    a[3] = b"1000000".to_vec();
    a[1] = if hot { b"1".to_vec() } else { b"0".to_vec() };
    if lanes {
        a[4] = b"500000".to_vec();
        a[5] = b"3000000".to_vec();
        a[6] = b"1000000".to_vec();
        a[7] = b"3000000".to_vec();
    }
    a[15] = if peek { b"1".to_vec() } else { b"0".to_vec() };
    a
}

/// A call's keys and arguments.
type Call = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// A sequence of calls that writes everything `CG.DECIDE` writes: buckets taken from and
/// denied, a shop made hot by `auto_hot` (its mark), then decided with the hot buckets by
/// that mark, window counters and their expiry, settings published and changed (one not
/// UTF-8), a shop with a NUL byte, peeks (nothing written).
fn a_sequence_that_writes_everything() -> Vec<Call> {
    let auto = (10_000_000, "0.3", 60, 1);
    let mut calls = Vec::new();
    for i in 0..40 {
        let shop: &[u8] = match i % 4 {
            0 => b"flash",
            1 => b"a\x00b",
            2 => b"plain",
            _ => b"\xff\xfe",
        };
        let settings: &[u8] = match i {
            0..=9 => b"global=100/100",
            10..=19 => b"global=100/100 \xff",
            _ => b"global=100/100 hot_lane=6/2 hot_shop=3/1",
        };
        let tokens = 1 + (i % 3) as i64;
        let peek = i % 7 == 6;
        calls.push((
            keys(shop),
            argv_full(shop, tokens, i % 5 == 4, i >= 20, auto, settings, peek),
        ));
    }
    calls
}

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

/// The keyspace events of a decision are those of the script's writes (`set`, `expire`,
/// `hset`), key for key and in order: what a subscriber (or a module listening to them)
/// sees does not depend on the engine.
#[test]
fn the_keyspace_events_are_the_scripts() {
    let v = with_module(false);
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
        for (k, a) in a_sequence_that_writes_everything() {
            let cmd = match script {
                true => script_cmd(&k, &a, None),
                false => module_cmd(&k, &a, None),
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

/// Junk at every argument position, and calls whose keys alias each other (all seven the
/// same key; the current `auto_hot` window being the global bucket, the hot mark or the
/// settings, so that one call writes one key as a hash and as a string): an answer or an
/// error each time, never a crash, and Valkey keeps answering.
#[test]
fn junk_and_aliased_keys_never_crash_valkey() {
    let v = with_module(true);
    let mut c = v.connection();
    let w = 10_000_000;
    let auto = (w, "0.3", 60, 1);
    let junk: [&[u8]; 10] = [
        b"",
        b"x",
        b"-1",
        b"0",
        b"99999999999999999999999",
        b"\xff\xfe",
        b"a\x00b",
        b"1.5",
        b"9223372036854775807",
        b"-9223372036854775808",
    ];
    let (k, a) = (keys(b"s"), argv(b"s", 1, auto, b"global=10/5"));
    for pos in 0..k.len() + a.len() {
        for j in junk {
            let (mut k, mut a) = (k.clone(), a.clone());
            match pos < k.len() {
                true => k[pos] = j.to_vec(),
                false => a[pos - k.len()] = j.to_vec(),
            }
            let _ = module_cmd(&k, &a, Some(NOW)).query::<redis::Value>(&mut c);
        }
    }
    assert_alive(&v);
    let cur = [k[5].as_slice(), (NOW / w).to_string().as_bytes()].concat();
    for alias in [0, 3, 6] {
        let mut k = keys(b"s");
        k[alias] = cur.clone();
        redis::cmd("FLUSHALL").query::<()>(&mut c).unwrap();
        for i in 0..3 {
            let r = module_cmd(&k, &a, Some(NOW + i)).query::<redis::Value>(&mut c);
            assert!(
                r.is_ok() || r.as_ref().is_err_and(|e| e.kind() != redis::ErrorKind::Io),
                "{r:?}"
            );
        }
        assert_alive(&v);
    }
    let same = vec![b"{cg:R}:k".to_vec(); 7];
    for i in 0..5 {
        let _ = module_cmd(&same, &a, Some(NOW + i)).query::<redis::Value>(&mut c);
    }
    assert_alive(&v);
}
