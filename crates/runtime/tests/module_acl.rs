//! `CG.DECIDE` under ACL users: a window key the user may not access is refused as the
//! script's `redis.call` is; `engine = auto` decides with the script where the user may
//! not run the module's command.

#[allow(dead_code)]
mod common;
#[allow(dead_code)]
mod module_support;

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_runtime::Limiter;
use module_support::*;

/// ACL: a user allowed the declared keys (the prefix `{cg:R}:ah:` exactly) and not the
/// window keys `{cg:R}:ah:<n>`. The script's HMGET is refused (NOPERM), and so is
/// `CG.DECIDE`, writing no window hash (`RM_OpenKey` checks no ACL: the module checks
/// the undeclared key's permissions itself).
#[test]
fn a_window_key_the_user_may_not_access_is_refused_like_the_script() {
    let v = with_module(false);
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
            "~{cg:R}:f:*",
            "~{cg:R}:adapt",
            "+@all",
        ])
        .query::<()>(&mut admin)
        .unwrap();
    let mut c = redis::Client::open(format!("{}?user=cg&pass=pw", v.url).as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    // The longest form: every key declared.
    let k = keys(b"s");
    let a = auto_hot_argv();
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

/// A Valkey user whose ACL was written for the script (`+@read +@write +@scripting
/// +time`, no module commands: `CG.DECIDE` is in no category but @all): the script decides
/// for it, and so does `engine = auto` once the module is loaded: it finds `CG.DECIDE` in
/// `COMMAND INFO`, gets NOPERM and falls back to the script (rather than applying
/// `on_unavailable` to every decision).
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

/// ACL: a user allowed every key of the limiter but its lease sets and stats
/// (`{cg:R}:f:*`). The lease keys are declared (`CG.DECIDE`'s positions 9 to 12,
/// `CG.RELEASE`'s 1 to 4), so Valkey refuses both commands (NOPERM) as it refuses the
/// scripts, and nothing is written; with every key allowed, the same calls decide and
/// release.
#[test]
fn lease_keys_the_user_may_not_access_are_refused_like_the_script() {
    let v = with_module(true);
    let mut admin = v.connection();
    let user = |name: &str, keys: &[&str]| {
        let mut args = vec!["SETUSER", name, "on", ">pw", "+@all"];
        args.extend_from_slice(keys);
        redis::cmd("ACL")
            .arg(&args)
            .query::<()>(&mut v.connection())
            .unwrap();
        redis::Client::open(format!("{}?user={name}&pass=pw", v.url).as_str())
            .unwrap()
            .get_connection()
            .unwrap()
    };
    let mut denied = user(
        "noleases",
        &[
            "~{cg:R}:b:*",
            "~{cg:R}:hot:*",
            "~{cg:R}:limits:v",
            "~{cg:R}:ah:*",
            "~{cg:R}:settings",
            "~{cg:R}:adapt",
        ],
    );
    let mut allowed = user("all", &["~{cg:R}:*"]);
    let shop = b"s";
    let a = with_in_flight(
        argv_full(
            shop,
            1,
            true,
            true,
            (0, "0", 0, 0),
            b"global=100/100",
            false,
        ),
        [3, 2, 1],
        500_000,
        b"l1",
    );
    let k = keys(shop);
    let (rk, ra) = release_call(shop, b"l1", 500_000, false);
    let calls = [
        ("script", script_cmd(&k, &a, Some(NOW))),
        ("CG.DECIDE", module_cmd(&k, &a, Some(NOW))),
        ("release script", release_script_cmd(&rk, &ra, Some(NOW))),
        ("CG.RELEASE", release_module_cmd(&rk, &ra, Some(NOW))),
    ];
    for (what, cmd) in &calls {
        let r = cmd.query::<Vec<i64>>(&mut denied);
        assert!(
            r.as_ref()
                .is_err_and(|e| e.to_string().to_lowercase().contains("noperm")),
            "{what}: {r:?}"
        );
        let written: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut admin).unwrap();
        assert!(written.is_empty(), "{what} wrote {written:?}");
    }
    for (what, cmd) in &calls {
        let r = cmd.query::<Vec<i64>>(&mut allowed);
        assert!(r.is_ok(), "{what}: {r:?}");
    }
}
