//! `CG.DECIDE` on bad input and on its own failures: an error reply or an answer, never a
//! crash of Valkey (a NUL byte, bytes that are not UTF-8, junk at every position, keys that
//! alias each other, a panic inside the command), the script's answer where the script
//! answers, and nothing written by a call that fails.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod module_support;

use module_support::*;

/// A key with a NUL byte (here the shop's, in the hot shop bucket and the hot flag): the
/// script decides, and `CG.DECIDE` does not crash Valkey (an earlier build panicked in
/// `ValkeyString::create`, a CString, and aborted the server).
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

/// A NUL byte in the settings argument (valid UTF-8; an earlier build wrote it with
/// `ValkeyKeyWritable::write`, which panicked and aborted Valkey after the bucket was
/// written): no crash.
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
/// HMGET fails with WRONGTYPE before any write, and so does `CG.DECIDE`, leaving the same
/// keys (an earlier build read it as 0, admitted, wrote the buckets and put an expiry on
/// the foreign key).
#[test]
fn a_window_key_of_another_type_fails_like_the_script_with_nothing_written() {
    let v = with_module(true);
    let mut c = v.connection();
    let w = 10_000_000;
    let shop = b"s";
    let (k, a) = (keys(shop), argv(shop, 1, (w, "0.3", 60, 1), b"global=10/5"));
    for (which, window) in [("current", NOW / w), ("previous", NOW / w - 1)] {
        let wkey = [
            k[checkout_guard_model::cmd::decide::keys::AUTO_HOT_PREFIX].as_slice(),
            window.to_string().as_bytes(),
        ]
        .concat();
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
    let wkey = [
        k[checkout_guard_model::cmd::decide::keys::AUTO_HOT_PREFIX].as_slice(),
        (NOW / w).to_string().as_bytes(),
    ]
    .concat();
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
/// script (doubles) denies, and so does the module (whose wrapping arithmetic once found a
/// cost of 0 and admitted).
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
    let cur = [
        k[checkout_guard_model::cmd::decide::keys::AUTO_HOT_PREFIX].as_slice(),
        (NOW / w).to_string().as_bytes(),
    ]
    .concat();
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

/// A panic inside `CG.DECIDE` (forced: loaded with `test-panic`, the decision for the shop
/// `checkout-guard-test-panic` panics when it asks for its settings write, after its
/// bucket write was recorded) is an error reply: Valkey stays up, the keys are as they
/// were (the bucket write is not performed), and the next call decides as the script does.
/// Without the command's `catch_unwind` the panic aborts Valkey.
#[test]
fn a_panic_in_the_command_is_an_error_reply_with_nothing_written() {
    let v = with_module_args(&["test-clock", "test-panic"]);
    let mut c = v.connection();
    let shop = b"checkout-guard-test-panic";
    let (k, a) = (keys(shop), argv(shop, 1, (0, "0", 0, 0), b"global=10/5"));
    let panicked = module_cmd(&k, &a, Some(NOW)).query::<Vec<i64>>(&mut c);
    assert_alive(&v);
    let e = panicked.expect_err("the forced panic is an error reply");
    assert!(
        e.to_string()
            .contains("checkout-guard internal error: test-panic"),
        "{e}"
    );
    assert_eq!(
        state(&mut c, 0),
        vec![],
        "nothing written by the call that panicked"
    );
    // The same connection, the next call (another shop): decided, as the script decides.
    let (k, a) = (keys(b"s"), argv(b"s", 1, (0, "0", 0, 0), b"global=10/5"));
    let module: Vec<i64> = module_cmd(&k, &a, Some(NOW)).query(&mut c).unwrap();
    let after_module = state(&mut c, 0);
    redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
    let script: Vec<i64> = script_cmd(&k, &a, Some(NOW)).query(&mut c).unwrap();
    assert_eq!(module, script);
    assert_eq!(after_module, state(&mut c, 1));
    assert!(!after_module.is_empty());
}

/// `test-panic` is a test's argument: the module refuses to load with it unless the test
/// clock is on too.
#[test]
fn test_panic_loads_only_with_the_test_clock() {
    let v = common::Valkey::start_with(&["--enable-module-command".as_ref(), "yes".as_ref()]);
    let mut c = v.connection();
    let module = common::valkey_module();
    let load = |args: &[&str]| {
        let mut cmd = redis::cmd("MODULE");
        cmd.arg("LOAD").arg(module.as_os_str().as_encoded_bytes());
        for a in args {
            cmd.arg(*a);
        }
        cmd.query::<()>(&mut v.connection())
    };
    let refused = load(&["test-panic"]);
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("Error loading the extension")),
        "{refused:?}"
    );
    let loaded = |c: &mut redis::Connection| {
        let list: redis::Value = redis::cmd("MODULE").arg("LIST").query(c).unwrap();
        format!("{list:?}").contains("checkout_guard")
    };
    assert!(!loaded(&mut c));
    load(&["test-clock", "test-panic"]).unwrap();
    assert!(loaded(&mut c));
}

/// The in-flight limits of the lease tests: global 3, hot lane 2, hot shop 1, leases of
/// 500 ms, for a static hot shop with the hot buckets.
fn lease_decide(shop: &[u8], id: &[u8]) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let a = argv_full(
        shop,
        1,
        true,
        true,
        (0, "0", 0, 0),
        b"global=100/100",
        false,
    );
    (keys(shop), with_in_flight(a, [3, 2, 1], 500_000, id))
}

/// Runs `setup` then `call` in db 0 with the scripts and in db 1 with the module (on the
/// test clock: `call(script)` builds the command), and answers both replies; `setup`
/// takes the connection and whether the engine is the script's.
fn in_both(
    c: &mut redis::Connection,
    setup: &dyn Fn(&mut redis::Connection, bool),
    call: &dyn Fn(bool) -> redis::Cmd,
) -> [Result<Vec<i64>, String>; 2] {
    let mut out = Vec::new();
    for (db, script) in [(0, true), (1, false)] {
        redis::cmd("SELECT").arg(db).query::<()>(c).unwrap();
        redis::cmd("FLUSHDB").query::<()>(c).unwrap();
        setup(c, script);
        out.push(call(script).query::<Vec<i64>>(c).map_err(|e| e.to_string()));
    }
    [out.remove(0), out.remove(0)]
}

/// A lease set of another type (global's, the hot lane's, the hot shop's): the script's
/// `ZCOUNT` fails before any write, and `CG.DECIDE` fails the same way (WRONGTYPE) with the
/// keys as they were; a release's `ZSCORE` likewise (`CG.RELEASE`). The stats hash of
/// another type where a denial reads it (`HMGET`): the same.
#[test]
fn a_lease_set_of_another_type_fails_like_the_script_with_nothing_written() {
    let v = with_module(true);
    let mut c = v.connection();
    let shop = b"s";
    let levels = lease_levels(shop);
    for (i, foreign) in levels.iter().enumerate() {
        // A lease taken first (so that there is something not to write over).
        let setup = |c: &mut redis::Connection, script: bool| {
            let (k, a) = lease_decide(shop, b"first");
            match script {
                true => script_cmd(&k, &a, Some(NOW)),
                false => module_cmd(&k, &a, Some(NOW)),
            }
            .query::<Vec<i64>>(c)
            .unwrap();
            redis::cmd("SET")
                .arg(foreign)
                .arg("x")
                .query::<()>(c)
                .unwrap();
        };
        let (k, a) = lease_decide(shop, b"second");
        let replies = in_both(&mut c, &setup, &|script| match script {
            true => script_cmd(&k, &a, Some(NOW + 1_000)),
            false => module_cmd(&k, &a, Some(NOW + 1_000)),
        });
        for r in &replies {
            assert!(
                r.as_ref().is_err_and(|e| e.contains("WRONGTYPE")),
                "decide, level {i}: {replies:?}"
            );
        }
        assert_eq!(state(&mut c, 1), state(&mut c, 0), "decide, level {i}");
        let (k, a) = release_call(shop, b"first", 500_000, false);
        let replies = in_both(&mut c, &setup, &|script| match script {
            true => release_script_cmd(&k, &a, Some(NOW + 2_000)),
            false => release_module_cmd(&k, &a, Some(NOW + 2_000)),
        });
        for r in &replies {
            assert!(
                r.as_ref().is_err_and(|e| e.contains("WRONGTYPE")),
                "release, level {i}: {replies:?}"
            );
        }
        assert_eq!(state(&mut c, 1), state(&mut c, 0), "release, level {i}");
    }
    // The global level full (3 leases), the stats a string: the denial's HMGET fails.
    let setup = |c: &mut redis::Connection, script: bool| {
        for (n, s) in [&b"a"[..], b"b", b"c"].into_iter().enumerate() {
            let (k, a) = lease_decide(s, s);
            match script {
                true => script_cmd(&k, &a, Some(NOW + n as i64)),
                false => module_cmd(&k, &a, Some(NOW + n as i64)),
            }
            .query::<Vec<i64>>(c)
            .unwrap();
        }
        redis::cmd("SET")
            .arg("{cg:R}:f:stats")
            .arg("x")
            .query::<()>(c)
            .unwrap();
    };
    let (k, a) = lease_decide(b"d", b"d");
    let replies = in_both(&mut c, &setup, &|script| match script {
        true => script_cmd(&k, &a, Some(NOW + 1_000)),
        false => module_cmd(&k, &a, Some(NOW + 1_000)),
    });
    for r in &replies {
        assert!(
            r.as_ref().is_err_and(|e| e.contains("WRONGTYPE")),
            "{replies:?}"
        );
    }
    assert_eq!(state(&mut c, 1), state(&mut c, 0), "the denial's stats");
}

/// A counter the script's `HINCRBY` refuses (the stats of another type, a field that is
/// not an integer, an increment that would overflow), met after the script wrote part of
/// the keys (a lease removed, or taken, before its `HINCRBY`): both fail with that
/// command's error, and `CG.DECIDE` / `CG.RELEASE` leave every key as it was (the script
/// has no way to undo what it wrote: it does not).
#[test]
fn a_counter_hincrby_refuses_fails_the_call_with_nothing_written() {
    let v = with_module(true);
    let mut c = v.connection();
    let shop = b"s";
    let stats = b"{cg:R}:f:stats".as_slice();
    let take = |c: &mut redis::Connection, script: bool, id: &[u8], at: i64| {
        let (k, a) = lease_decide(shop, id);
        match script {
            true => script_cmd(&k, &a, Some(at)),
            false => module_cmd(&k, &a, Some(at)),
        }
        .query::<Vec<i64>>(c)
        .unwrap();
    };
    // What the stats hold, how it is written, the error it gives.
    type Foreign<'a> = (&'a str, &'a dyn Fn(&mut redis::Connection), &'a str);
    let foreign: [Foreign; 3] = [
        (
            "a string",
            &|c| {
                redis::cmd("SET")
                    .arg(stats)
                    .arg("x")
                    .query::<()>(c)
                    .unwrap()
            },
            "WRONGTYPE",
        ),
        (
            "a counter not an integer",
            &|c| {
                for f in ["released", "expired"] {
                    redis::cmd("HSET")
                        .arg(stats)
                        .arg(f)
                        .arg("007")
                        .query::<()>(c)
                        .unwrap()
                }
            },
            "not an integer",
        ),
        (
            "a counter at the maximum",
            &|c| {
                for f in ["released", "expired"] {
                    redis::cmd("HSET")
                        .arg(stats)
                        .arg(f)
                        .arg(i64::MAX)
                        .query::<()>(c)
                        .unwrap()
                }
            },
            "overflow",
        ),
    ];
    for (what, write, error) in foreign {
        // A release in time: HINCRBY released after the ZREMs.
        let setup = |c: &mut redis::Connection, script: bool| {
            take(c, script, b"l1", NOW);
            write(c);
        };
        let (k, a) = release_call(shop, b"l1", 500_000, false);
        let replies = in_both(&mut c, &setup, &|script| match script {
            true => release_script_cmd(&k, &a, Some(NOW + 1_000)),
            false => release_module_cmd(&k, &a, Some(NOW + 1_000)),
        });
        for r in &replies {
            assert!(
                r.as_ref().is_err_and(|e| e.contains(error)),
                "release, stats {what}: {replies:?}"
            );
        }
        redis::cmd("SELECT").arg(1).query::<()>(&mut c).unwrap();
        let after = state(&mut c, 1);
        redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
        setup(&mut c, false);
        assert_eq!(
            after,
            state(&mut c, 1),
            "release, stats {what}: module wrote"
        );
        // A lease taken that prunes an expired one: HINCRBY expired after the ZADDs.
        let setup = |c: &mut redis::Connection, script: bool| {
            take(c, script, b"old", NOW);
            write(c);
        };
        let (k, a) = lease_decide(shop, b"new");
        let replies = in_both(&mut c, &setup, &|script| match script {
            true => script_cmd(&k, &a, Some(NOW + 1_000_000)),
            false => module_cmd(&k, &a, Some(NOW + 1_000_000)),
        });
        for r in &replies {
            assert!(
                r.as_ref().is_err_and(|e| e.contains(error)),
                "decide, stats {what}: {replies:?}"
            );
        }
        let after = state(&mut c, 1);
        redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
        setup(&mut c, false);
        assert_eq!(
            after,
            state(&mut c, 1),
            "decide, stats {what}: module wrote"
        );
    }
}

/// `CG.RELEASE` on bad input: an error reply (arity, a lease length out of bounds or not
/// a number, a test clock that is not an integer), never a crash.
#[test]
fn a_bad_release_is_an_error_not_a_crash() {
    let v = with_module(true);
    let mut c = v.connection();
    let (k, a) = release_call(b"s", b"l", 500_000, false);
    let mut bad = Vec::new();
    bad.push(release_module_cmd(&k, &a[..2], Some(NOW)));
    bad.push(release_module_cmd(&k, &a, None));
    for lease in ["0", "-5", "x", "600000001", ""] {
        let mut a = a.clone();
        a[checkout_guard_model::cmd::release::args::LEASE_US] = lease.as_bytes().to_vec();
        bad.push(release_module_cmd(&k, &a, Some(NOW)));
    }
    let mut clock = release_module_cmd(&k, &a, None);
    clock.arg("soon");
    bad.push(clock);
    for cmd in bad {
        let r = cmd.query::<Vec<i64>>(&mut c);
        assert!(r.is_err(), "{r:?}");
    }
    assert_alive(&v);
    let ok = release_module_cmd(&k, &a, Some(NOW))
        .query::<Vec<i64>>(&mut c)
        .unwrap();
    assert_eq!(ok, [0, NOW], "a lease not held");
}
