//! Which engine decides: the native module's `CG.DECIDE` where the server has it
//! (`engine = auto`), the script elsewhere, falling back at once when the server stops
//! knowing the command; `engine = module` refuses to decide without it. Real Valkeys, with
//! and without the module loaded.

#[allow(dead_code)]
mod common;

use std::sync::Arc;
use std::time::Duration;

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::Reason;
use checkout_guard_runtime::clock::FakeClock;
use checkout_guard_runtime::store::MODULE_RECHECK;
use checkout_guard_runtime::{Limiter, ValkeyStore};
use common::{valkey_module, Valkey};

fn limiter(url: &str, name: &str, engine: &str, policy: &str) -> Limiter {
    Limiter::new(options(url, name, engine, policy, 3))
}

/// A limiter's options: `global` of `capacity` tokens at 0.01/s, local denials off.
fn options(url: &str, name: &str, engine: &str, policy: &str, capacity: i64) -> LimiterOptions {
    let bucket = |c: i64, r: f64| {
        Value::Map(vec![
            ("capacity".into(), Value::Int(c)),
            ("refill_per_second".into(), Value::Float(r)),
        ])
    };
    let options = Value::Map(vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("url".into(), Value::Str(url.as_bytes().to_vec())),
        ("global".into(), bucket(capacity, 0.01)),
        ("timeout_ms".into(), Value::Int(2000)),
        ("engine".into(), Value::Str(engine.as_bytes().to_vec())),
        (
            "on_unavailable".into(),
            Value::Str(policy.as_bytes().to_vec()),
        ),
    ]);
    let defaults = Defaults {
        local_denials: false,
        ..Defaults::default()
    };
    LimiterOptions::from_value(&options, &defaults).unwrap()
}

fn with_module() -> Valkey {
    let module = valkey_module();
    Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        // So a test can unload it, as a restart without it would.
        "--enable-module-command".as_ref(),
        "yes".as_ref(),
    ])
}

fn calls(v: &Valkey, command: &str) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut v.connection())
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// Three allowed, then denied by global: the same four answers whoever decides.
fn four_decisions(l: &Limiter) {
    for i in 0..3 {
        let d = l.acquire(b"shop", 1).unwrap();
        assert!(d.allowed, "call {i}: {d:?}");
        assert_eq!(d.remaining, 2 - i);
    }
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
}

#[test]
fn auto_uses_the_module_where_the_server_has_it() {
    let v = with_module();
    let l = limiter(&v.url, "auto-mod", "auto", "throw");
    four_decisions(&l);
    assert_eq!(l.health(false).engine, Some("module"));
    assert_eq!(calls(&v, "CG.DECIDE"), 4);
    assert_eq!(calls(&v, "evalsha") + calls(&v, "eval"), 0);
}

#[test]
fn limiter_status_says_whether_the_module_is_loaded() {
    use checkout_guard_cli::admin::Admin;
    use std::time::Duration;
    for (v, loaded) in [(with_module(), true), (Valkey::start(), false)] {
        let admin = Admin::new(&v.url, "status", Duration::from_secs(2)).unwrap();
        let st = admin.status("none", 60).unwrap();
        assert_eq!((st.module_loaded, st.module_decisions), (loaded, None));
        // Which engine decided: the module's decisions, counted by Valkey.
        four_decisions(&limiter(&v.url, "status-engine", "auto", "throw"));
        let st = admin.status("none", 60).unwrap();
        assert_eq!(st.module_decisions, loaded.then_some(4));
    }
}

#[test]
fn auto_uses_the_script_where_the_server_has_no_module() {
    let v = Valkey::start();
    let l = limiter(&v.url, "auto-lua", "auto", "throw");
    four_decisions(&l);
    assert_eq!(l.health(false).engine, Some("lua"));
    assert!(calls(&v, "evalsha") >= 4);
}

/// The script's EVALSHA, packed by hand, on a connection whose server lost its script
/// cache between two decisions (`SCRIPT FLUSH`: a restart, a failover to a replica that
/// never ran it): answered NOSCRIPT, so the call was not run, then loaded and asked again
/// (SCRIPT LOAD and EVALSHA pipelined); every decision taken once.
#[test]
fn a_flushed_script_cache_is_loaded_again_and_each_call_decides_once() {
    let v = Valkey::start();
    let l = limiter(&v.url, "flushed", "lua", "throw");
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    for (i, remaining) in [(0, 1), (1, 0)] {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query::<()>(&mut v.connection())
            .unwrap();
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query::<()>(&mut v.connection())
            .unwrap();
        let d = l.acquire(b"shop", 1).unwrap();
        assert_eq!((d.allowed, d.remaining), (true, remaining), "flush {i}");
        // The EVALSHA answered NOSCRIPT, then SCRIPT LOAD and the EVALSHA that decided.
        assert_eq!(calls(&v, "evalsha"), 2, "flush {i}");
        assert_eq!(calls(&v, "script|load"), 1, "flush {i}");
    }
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
}

#[test]
fn lua_never_uses_the_module() {
    let v = with_module();
    let l = limiter(&v.url, "lua-only", "lua", "throw");
    four_decisions(&l);
    assert_eq!(l.health(false).engine, Some("lua"));
    assert_eq!(calls(&v, "CG.DECIDE"), 0);
}

#[test]
fn module_without_the_module_applies_the_policy_and_says_why() {
    let v = Valkey::start();
    let e = limiter(&v.url, "mod-missing", "module", "throw")
        .acquire(b"shop", 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("checkout_guard module is not loaded"), "{e}");
    let deny = limiter(&v.url, "mod-missing-deny", "module", "deny");
    let d = deny.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Unavailable));
    // No engine decided anything: health() names none (not the module that failed).
    assert_eq!(deny.health(false).engine, None);
}

/// A server that stops knowing `CG.DECIDE` (a restart without the module, a node of a
/// cluster not upgraded yet): the call that finds out decides with the script, and the
/// buckets the module wrote go on as they were (same keys, same format).
#[test]
fn auto_falls_back_to_the_script_when_the_module_goes() {
    let v = with_module();
    let l = limiter(&v.url, "fallback", "auto", "throw");
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    assert_eq!(l.health(false).engine, Some("module"));
    redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("checkout_guard")
        .query::<()>(&mut v.connection())
        .unwrap();
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!(
        (d.allowed, d.remaining),
        (true, 0),
        "the third token, by the script"
    );
    assert_eq!(l.health(false).engine, Some("lua"));
    let d = l.acquire(b"shop", 1).unwrap();
    assert_eq!((d.allowed, d.reason), (false, Reason::Global));
}

/// A Valkey still running another build of the module (a rolling upgrade), whose
/// `CG.DECIDE` takes another number of arguments: `auto` decides with the script (here the
/// module is loaded with `test-clock`, so it wants one argument more than this build
/// sends, as a module of the next contract would).
#[test]
fn auto_decides_with_the_script_where_the_module_is_another_builds() {
    let module = valkey_module();
    let v = Valkey::start_with(&[
        "--loadmodule".as_ref(),
        module.as_os_str(),
        "test-clock".as_ref(),
    ]);
    let l = limiter(&v.url, "other-build", "auto", "throw");
    four_decisions(&l);
    assert_eq!(l.health(false).engine, Some("lua"));
}

/// `engine = auto` on a connection that is never replaced (php-fpm's `pm.max_requests =
/// 0`): a module loaded into the running Valkey decides once [`MODULE_RECHECK`] has passed
/// on the limiter's clock since the server answered no (a fake clock: not a µs before, and
/// no test waits 5 s), on the same connection. `COMMAND INFO` is asked once per recheck,
/// never per decision, and never while the answer is yes; a module that goes is left at
/// once and asked for again only after the next recheck.
#[test]
fn auto_picks_up_a_module_loaded_into_the_running_valkey_after_the_recheck() {
    let v = Valkey::start_with(&["--enable-module-command".as_ref(), "yes".as_ref()]);
    let clock = FakeClock::new();
    let options = options(&v.url, "recheck", "auto", "throw", 1_000_000);
    let store = ValkeyStore::new(
        options.endpoint.clone(),
        options.timeout,
        options.retry_interval,
        options.engine,
    )
    .with_clock(Arc::new(clock.clone()));
    let l = Limiter::with_store(options, Arc::new(store), Arc::new(clock.clone()));
    let decide = |n: usize| {
        for _ in 0..n {
            assert!(l.acquire(b"shop", 1).unwrap().allowed);
        }
        l.health(false).engine
    };
    let asked = || calls(&v, "command|info");
    let ms = Duration::from_millis(1);

    assert_eq!(decide(50), Some("lua"));
    assert_eq!(
        asked(),
        1,
        "asked once for the connection, not per decision"
    );
    let connects = l.health(false).connects;

    redis::cmd("MODULE")
        .arg("LOAD")
        .arg(valkey_module().to_str().unwrap())
        .query::<()>(&mut v.connection())
        .unwrap();
    clock.advance(MODULE_RECHECK - ms);
    assert_eq!(decide(20), Some("lua"), "1 ms before the recheck");
    assert_eq!((asked(), calls(&v, "CG.DECIDE")), (1, 0));
    clock.advance(ms);
    assert_eq!(decide(1), Some("module"), "at the recheck");
    assert_eq!((asked(), calls(&v, "CG.DECIDE")), (2, 1));
    assert_eq!(l.health(false).connects, connects, "on the same connection");
    clock.advance(MODULE_RECHECK * 3);
    assert_eq!(decide(20), Some("module"));
    assert_eq!(asked(), 2, "not asked again while the answer is yes");

    redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("checkout_guard")
        .query::<()>(&mut v.connection())
        .unwrap();
    assert_eq!(
        decide(1),
        Some("lua"),
        "an unloaded module: the script at once"
    );
    clock.advance(MODULE_RECHECK - ms);
    assert_eq!(decide(20), Some("lua"));
    assert_eq!(asked(), 2, "not asked again before the recheck");
    clock.advance(ms);
    assert_eq!(decide(1), Some("lua"));
    assert_eq!(asked(), 3, "asked again at the recheck");
    assert_eq!(l.health(false).connects, connects);
}

/// A lease is released on the engine that decides: `CG.RELEASE` where the module decides
/// (`module`, `auto` on a server with it), the release script with `lua`, and the script
/// when the module cannot release (unloaded: an older module has no `CG.RELEASE`). Each
/// way the lease is gone once.
#[test]
fn a_lease_is_released_by_the_engine_that_decides() {
    let v = with_module();
    for (i, engine) in ["module", "auto", "lua"].into_iter().enumerate() {
        let mut o = options(&v.url, &format!("release-{engine}"), engine, "throw", 10);
        o.in_flight = Some(checkout_guard_model::InFlight {
            limits: [5, 0, 0],
            lease_us: 30_000_000,
        });
        let l = Limiter::new(o);
        let (module_before, script_before) = (calls(&v, "CG.RELEASE"), calls(&v, "evalsha"));
        let d = l.acquire(b"shop", 1).unwrap();
        let outcome = l.release(b"shop", d.lease.unwrap(), false).unwrap();
        assert_eq!(
            outcome,
            checkout_guard_model::cmd::release::ReleaseOutcome::Released,
            "{engine}"
        );
        let by_module = calls(&v, "CG.RELEASE") - module_before;
        assert_eq!(by_module, i64::from(i < 2), "{engine}: CG.RELEASE calls");
        if i == 2 {
            // The decision and the release, both scripts (the release script's first
            // EVALSHA answered NOSCRIPT, then loaded: 2 or 3 calls).
            assert!(calls(&v, "evalsha") - script_before >= 2, "{engine}");
        }
    }
    // The module gone: `module` falls back to the script for the release.
    let mut o = options(&v.url, "release-fallback", "auto", "throw", 10);
    o.in_flight = Some(checkout_guard_model::InFlight {
        limits: [5, 0, 0],
        lease_us: 30_000_000,
    });
    let l = Limiter::new(o);
    let d = l.acquire(b"shop", 1).unwrap();
    let _: redis::Value = redis::cmd("MODULE")
        .arg("UNLOAD")
        .arg("checkout_guard")
        .query(&mut v.connection())
        .unwrap();
    let outcome = l.release(b"shop", d.lease.unwrap(), false).unwrap();
    assert_eq!(
        outcome,
        checkout_guard_model::cmd::release::ReleaseOutcome::Released,
        "the script released it after CG.RELEASE was refused"
    );
}
