//! What the module's tests share: a Valkey with the module loaded, a decision's keys and
//! arguments, the command and the script for them, and the state of a database.
//!
//! Needs `target/release/libcheckout_guard_valkey.so` (or `CG_VALKEY_MODULE`) and a
//! valkey-server (`VALKEY_SERVER` or the project's `.venv`).

use crate::common::{valkey_module, Valkey};
use checkout_guard_model::cmd::decide::{
    source as decide_source, source_with_test_clock as decide_source_with_test_clock,
};

/// The test clock's time (µs).
pub const NOW: i64 = 1_800_000_000_000_000;

/// A Valkey with the module loaded, with `test-clock` when `test_clock`.
pub fn with_module(test_clock: bool) -> Valkey {
    match test_clock {
        true => with_module_args(&["test-clock"]),
        false => with_module_args(&[]),
    }
}

/// A Valkey with the module loaded with the module arguments `args`.
pub fn with_module_args(args: &[&str]) -> Valkey {
    let module = valkey_module();
    let mut all: Vec<&std::ffi::OsStr> = vec!["--loadmodule".as_ref(), module.as_os_str()];
    all.extend(args.iter().map(|a| std::ffi::OsStr::new(*a)));
    Valkey::start_with(&all)
}

/// The keys of a call for `shop` (prefix `{cg:R}:`), at their contract positions.
pub fn keys(shop: &[u8]) -> Vec<Vec<u8>> {
    use checkout_guard_model::cmd::decide::keys as at;
    let k = |s: &[u8]| [b"{cg:R}:".as_slice(), s].concat();
    let mut out = vec![Vec::new(); at::LEN];
    out[at::BUCKETS] = k(b"b:global");
    out[at::BUCKETS + 1] = k(b"b:lane");
    out[at::BUCKETS + 2] = k(&[b"b:shop:".as_slice(), shop].concat());
    out[at::HOT_FLAG] = k(&[b"hot:".as_slice(), shop].concat());
    out[at::LIMITS_VERSION] = k(b"limits:v");
    out[at::AUTO_HOT_PREFIX] = k(b"ah:");
    out[at::SETTINGS] = k(b"settings");
    out[at::ADAPT] = k(b"adapt");
    for (i, level) in lease_levels(shop).into_iter().enumerate() {
        out[at::LEASES + i] = level;
    }
    out[at::LEASE_STATS] = k(b"f:stats");
    // No endpoint: the global bucket's key again (every key of a call in its slot).
    out[at::ENDPOINT] = k(b"b:global");
    out
}

/// The lease sets of global, the hot lane and `shop` (prefix `{cg:R}:`).
pub fn lease_levels(shop: &[u8]) -> [Vec<u8>; 3] {
    let k = |s: &[u8]| [b"{cg:R}:".as_slice(), s].concat();
    [
        k(b"f:global"),
        k(b"f:lane"),
        k(&[b"f:shop:".as_slice(), shop].concat()),
    ]
}

/// `argv` with `in_flight`: the limits of global, hot lane, hot shop, the lease length
/// (µs) and the lease id.
pub fn with_in_flight(
    mut a: Vec<Vec<u8>>,
    limits: [i64; 3],
    lease_us: i64,
    id: &[u8],
) -> Vec<Vec<u8>> {
    use checkout_guard_model::bucket::Lane;
    use checkout_guard_model::cmd::decide::{self, args as at};
    for (lane, n) in Lane::ALL.into_iter().zip(limits) {
        a[decide::in_flight_arg(lane)] = n.to_string().into_bytes();
    }
    a[at::LEASE_US] = lease_us.to_string().into_bytes();
    a[at::LEASE_ID] = id.to_vec();
    a
}

/// A release's keys (`shop`'s lease sets, the stats hash) and arguments.
pub fn release_call(shop: &[u8], id: &[u8], lease_us: i64, leaked: bool) -> Call {
    use checkout_guard_model::cmd::release::{args as at, keys as kt};
    let mut k = vec![Vec::new(); kt::LEN];
    for (i, level) in lease_levels(shop).into_iter().enumerate() {
        k[kt::LEASES + i] = level;
    }
    k[kt::STATS] = b"{cg:R}:f:stats".to_vec();
    let mut a = vec![Vec::new(); at::LEN];
    a[at::LEASE_ID] = id.to_vec();
    a[at::LEASE_US] = lease_us.to_string().into_bytes();
    a[at::LEAKED] = if leaked { b"1".to_vec() } else { b"0".to_vec() };
    (k, a)
}

/// `CG.RELEASE` with these keys and arguments (and the test clock's time).
pub fn release_module_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    let mut cmd = redis::cmd(checkout_guard_model::cmd::release::MODULE_COMMAND);
    cmd.arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// The release script with these keys and arguments (its test variant with `now`).
pub fn release_script_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    use checkout_guard_model::cmd::release;
    let mut cmd = redis::cmd("EVAL");
    match now {
        Some(_) => cmd.arg(release::source_with_test_clock()),
        None => cmd.arg(release::source()),
    };
    cmd.arg(release::keys::LEN).arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// The arguments, as raw bytes at their contract positions (tests send values the
/// encoder would never produce): global 10 tokens at 5/s, no hot buckets, `auto` =
/// (window µs, share, ttl s, min tokens).
pub fn argv(
    shop: &[u8],
    tokens: i64,
    auto: (i64, &str, i64, i64),
    settings: &[u8],
) -> Vec<Vec<u8>> {
    use checkout_guard_model::cmd::decide::args as at;
    let s = |x: &str| x.as_bytes().to_vec();
    let mut a = vec![s("0"); at::LEN];
    a[at::CONTRACT] = checkout_guard_model::cmd::decide::CONTRACT_MARK.to_vec();
    a[at::TOKENS] = s(&tokens.to_string());
    a[at::STATIC_HOT] = s("0");
    a[at::LANES] = s("200000");
    a[at::LANES + 1] = s("2000000");
    a[at::VERSION] = s("");
    a[at::SHOP] = shop.to_vec();
    a[at::AUTO_HOT_WINDOW] = s(&auto.0.to_string());
    a[at::AUTO_HOT_SHARE] = s(auto.1);
    a[at::AUTO_HOT_TTL] = s(&auto.2.to_string());
    a[at::AUTO_HOT_MIN_TOKENS] = s(&auto.3.to_string());
    a[at::SETTINGS] = settings.to_vec();
    a[at::PEEK] = s("0");
    a[at::MAX_WAIT] = s("0");
    a
}

/// The arguments of a call with `auto_hot` on a 1 s window for shop `s`.
pub fn auto_hot_argv() -> Vec<Vec<u8>> {
    argv(b"s", 1, (1_000_000, "0.3", 60, 1), b"global=10/5")
}

/// `EVAL` of the decision script or `CG.DECIDE`, by command name, on the production clock.
pub fn call(name: &str, k: &[Vec<u8>], a: &[Vec<u8>]) -> redis::Cmd {
    match name {
        "EVAL" => script_cmd(k, a, None),
        _ => module_cmd(k, a, None),
    }
}

/// `CG.DECIDE` with these keys and arguments (and the test clock's time).
pub fn module_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    let mut cmd = redis::cmd("CG.DECIDE");
    cmd.arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// The decision script with these keys and arguments (its test variant with `now`).
pub fn script_cmd(k: &[Vec<u8>], a: &[Vec<u8>], now: Option<i64>) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    match now {
        Some(_) => cmd.arg(decide_source_with_test_clock()),
        None => cmd.arg(decide_source()),
    };
    // As many keys as the call sends (its form's).
    cmd.arg(k.len()).arg(k).arg(a);
    if let Some(now) = now {
        cmd.arg(now);
    }
    cmd
}

/// Every key of db `db`: (name, type, value as text, PEXPIRETIME != -1); a sorted set's
/// value is its members and scores.
pub fn state(c: &mut redis::Connection, db: i64) -> Vec<(Vec<u8>, String, String, bool)> {
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
                "zset" => format!(
                    "{:?}",
                    redis::cmd("ZRANGE")
                        .arg(&k)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query::<Vec<(Vec<u8>, String)>>(c)
                        .unwrap()
                ),
                _ => String::new(),
            };
            let e: i64 = redis::cmd("PEXPIRETIME").arg(&k).query(c).unwrap();
            (k, t, v, e != -1)
        })
        .collect()
}

/// Valkey still answers a new connection's PING.
pub fn assert_alive(v: &Valkey) {
    let pong = redis::Client::open(v.url.as_str())
        .and_then(|c| c.get_connection())
        .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
    assert!(pong.is_ok(), "Valkey died on CG.DECIDE: {pong:?}");
}

/// The arguments with everything chosen: global 100 tokens at 100/s, hot buckets (hot
/// lane 6 tokens at 2/s, hot shop 3 tokens at 1/s) when `lanes`, the shop static hot when
/// `hot`, peek.
pub fn argv_full(
    shop: &[u8],
    tokens: i64,
    hot: bool,
    lanes: bool,
    auto: (i64, &str, i64, i64),
    settings: &[u8],
    peek: bool,
) -> Vec<Vec<u8>> {
    use checkout_guard_model::bucket::Lane;
    use checkout_guard_model::cmd::decide::{self, args as at};
    let mut a = argv(shop, tokens, auto, settings);
    let mut lane = |l: Lane, interval: &[u8], tolerance: &[u8]| {
        a[decide::interval_arg(l)] = interval.to_vec();
        a[decide::tolerance_arg(l)] = tolerance.to_vec();
    };
    // Global: 100 tokens at 100/s, so the hot buckets decide.
    lane(Lane::Global, b"10000", b"1000000");
    if lanes {
        lane(Lane::HotLane, b"500000", b"3000000");
        lane(Lane::HotShop, b"1000000", b"3000000");
    }
    a[at::STATIC_HOT] = if hot { b"1".to_vec() } else { b"0".to_vec() };
    a[at::PEEK] = if peek { b"1".to_vec() } else { b"0".to_vec() };
    a
}

/// A call's keys and arguments.
pub type Call = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// A sequence of calls that writes everything `CG.DECIDE` writes: buckets taken from and
/// denied, a shop made hot by `auto_hot` (its mark), then decided with the hot buckets by
/// that mark, window counters and their expiry, settings published and changed (one not
/// UTF-8), a shop with a NUL byte, peeks (nothing written).
pub fn a_sequence_that_writes_everything() -> Vec<Call> {
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

/// One call of [`a_lease_sequence`]: a decision (`release` false) or a release, its keys
/// and arguments, and when (µs after [`NOW`], the test clock's).
pub struct LeaseStep {
    pub release: bool,
    pub call: Call,
    pub at_us: i64,
}

impl LeaseStep {
    /// The script's command for this step (its test variant at `NOW + at_us`).
    pub fn script_cmd(&self) -> redis::Cmd {
        let (k, a) = &self.call;
        match self.release {
            true => release_script_cmd(k, a, Some(NOW + self.at_us)),
            false => script_cmd(k, a, Some(NOW + self.at_us)),
        }
    }

    /// The module's command for this step.
    pub fn module_cmd(&self) -> redis::Cmd {
        let (k, a) = &self.call;
        match self.release {
            true => release_module_cmd(k, a, Some(NOW + self.at_us)),
            false => module_cmd(k, a, Some(NOW + self.at_us)),
        }
    }
}

/// A sequence that writes everything the in-flight leases write, on the test clock:
/// `in_flight` global 3, hot lane 2, hot shop 1, leases of 500 ms, the hot buckets on;
/// `flash` and `a\0b` static hot, `plain` not. Leases taken on one level and on three, a
/// global denial and a hot shop's (their retry estimate reads the stats), a peek (takes
/// nothing), releases in time, at the end of the request (leaked), twice, of a lease never
/// taken, of one a decision pruned, of one expired; a set emptied by a release (deleted)
/// and expired leases pruned by a lease taken.
pub fn a_lease_sequence() -> Vec<LeaseStep> {
    let decide = |shop: &[u8], id: &[u8], at_us: i64, peek: bool| {
        let hot = shop != b"plain";
        let a = argv_full(
            shop,
            1,
            hot,
            true,
            (0, "0", 0, 0),
            b"global=100/100 hot_lane=6/2 hot_shop=3/1 in_flight=3/2/1",
            peek,
        );
        LeaseStep {
            release: false,
            call: (keys(shop), with_in_flight(a, [3, 2, 1], 500_000, id)),
            at_us,
        }
    };
    let release = |shop: &[u8], id: &[u8], at_us: i64, leaked: bool| LeaseStep {
        release: true,
        call: release_call(shop, id, 500_000, leaked),
        at_us,
    };
    vec![
        decide(b"plain", b"p1", 0, false),
        decide(b"plain", b"p2", 1_000, false),
        decide(b"flash", b"f1", 2_000, false),
        // Global full: denied (5), nothing taken.
        decide(b"flash", b"f2", 3_000, false),
        decide(b"flash", b"peek", 3_500, true),
        release(b"plain", b"p1", 10_000, false),
        // Global has room, the shop's one lease is held: denied (7).
        decide(b"flash", b"f3", 20_000, false),
        release(b"flash", b"f1", 30_000, true),
        release(b"flash", b"f1", 31_000, false),
        release(b"plain", b"never", 32_000, false),
        decide(b"a\x00b", b"n1", 40_000, false),
        // p2 and n1 expired: pruned by this lease (counted expired).
        decide(b"plain", b"p4", 1_000_000, false),
        release(b"plain", b"p2", 1_100_000, false),
        decide(b"flash", b"f5", 1_200_000, false),
        // Expired when released (counted expired); the hot sets empty.
        release(b"flash", b"f5", 2_000_000, false),
        release(b"plain", b"p4", 2_000_000, false),
    ]
}
