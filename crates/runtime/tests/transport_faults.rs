//! At most once, whatever the socket does (issue 35, items 1-3): decisions through the
//! project's fault proxy (`tests/support/fault_proxy.py`) between the limiter and a real
//! Valkey over TCP, with the script and with the native module deciding.
//!
//! - A reply lost after Valkey ran the decision (FIN, RST, cut mid-reply, garbled, never
//!   sent): the call answers its policy with "outcome unknown", and the decision's tokens
//!   were taken once (before: the decision was sent again on a new connection and took
//!   them twice).
//! - A reply trickled a byte every 30 ms ends at the call's deadline (before: each read
//!   had the whole timeout, so a 50 ms call took over a second).
//! - Signals delivered while the limiter waits for Valkey are not failures (before: EINTR
//!   was taken for a broken connection, so most decisions were `unavailable`).
//! - A model-based sequence: random decisions and transport faults against a reference
//!   that takes each decision's token exactly once; seed printed, the failing prefix shown.

#[allow(dead_code)]
mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkout_guard_config::{Defaults, LimiterOptions, Value};
use checkout_guard_model::Reason;
use checkout_guard_runtime::Limiter;
use common::ports::free_port;
use common::{valkey_binary, valkey_module};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A Valkey on a TCP port of loopback (the proxy speaks TCP), with the module or without.
struct TcpValkey {
    child: Child,
    port: u16,
    /// A cluster node's bus port (`--cluster-port`), 0 for a server without cluster.
    bus: u16,
    dir: PathBuf,
}

impl TcpValkey {
    fn start(module: bool) -> Self {
        Self::start_on(free_port(), module, &[])
    }

    fn start_on(port: u16, module: bool, extra: &[String]) -> Self {
        let dir = std::env::temp_dir().join(format!("cg-faults-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cmd = Command::new(valkey_binary());
        cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if module {
            cmd.arg("--loadmodule").arg(valkey_module());
        }
        // The bus port on a free port of its own: the default, port + 10000, is past 65535
        // for an ephemeral port above 55535 (then the node does not start).
        let bus = if extra.iter().any(|a| a == "--cluster-enabled") {
            let bus = free_port();
            cmd.arg("--cluster-port").arg(bus.to_string());
            bus
        } else {
            0
        };
        let child = cmd.spawn().expect("start valkey-server");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "valkey-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        Self {
            child,
            port,
            bus,
            dir,
        }
    }

    /// A Valkey Cluster node on `port` (no slots yet), its slot map naming it at
    /// `announce` (a fault proxy's port) when given.
    fn cluster_node(module: bool, port: u16, announce: Option<u16>) -> Self {
        let mut extra: Vec<String> = ["--cluster-enabled", "yes", "--cluster-config-file"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        extra.push(format!("nodes-{port}.conf"));
        if let Some(a) = announce {
            extra.extend(["--cluster-announce-port".into(), a.to_string()]);
        }
        Self::start_on(port, module, &extra)
    }

    /// CLUSTER MEET `other`, with its bus port (MEET would take port + 10000).
    fn meet(&self, other: &TcpValkey) {
        self.cluster(&[
            "MEET",
            "127.0.0.1",
            &other.port.to_string(),
            &other.bus.to_string(),
        ]);
    }

    fn cluster(&self, args: &[&str]) -> redis::Value {
        let mut c = redis::cmd("CLUSTER");
        for a in args {
            c.arg(*a);
        }
        c.query(&mut self.direct()).unwrap()
    }

    fn node_id(&self) -> String {
        redis::from_redis_value(self.cluster(&["MYID"])).unwrap()
    }

    /// Waits until this node says the cluster is up and `slot` is `owner`'s.
    fn wait_cluster(&self, slot: u16, owner: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let info: String = redis::from_redis_value(self.cluster(&["INFO"])).unwrap();
            let nodes: String = redis::from_redis_value(self.cluster(&["NODES"])).unwrap();
            let owns = nodes.lines().any(|l| {
                l.starts_with(owner)
                    && l.split_whitespace().skip(8).any(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if a <= slot && slot <= b)
                    })
            });
            if info.contains("cluster_state:ok") && owns {
                return;
            }
            assert!(Instant::now() < deadline, "cluster not up: {info}\n{nodes}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn direct(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn calls(&self, command: &str) -> i64 {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut self.direct())
            .unwrap();
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
            .unwrap_or(0)
    }

    fn xlen(&self, key: &str) -> i64 {
        redis::cmd("XLEN")
            .arg(key)
            .query(&mut self.direct())
            .unwrap()
    }

    /// `XLEN` of a key in a slot this cluster node imports (`ASKING` first).
    fn xlen_importing(&self, key: &str) -> i64 {
        let mut c = self.direct();
        redis::cmd("ASKING").query::<()>(&mut c).unwrap();
        redis::cmd("XLEN").arg(key).query(&mut c).unwrap()
    }

    /// Decisions that reached Valkey, whichever engine made them.
    fn decisions(&self) -> i64 {
        self.calls("evalsha") + self.calls("eval") + self.calls("CG.DECIDE")
    }
}

impl Drop for TcpValkey {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The fault proxy in front of `target`, its faults written to a control file.
struct Proxy {
    child: Child,
    port: u16,
    control: PathBuf,
}

impl Proxy {
    /// The client's next bytes to the server: `n` more forwarded, then the client reset.
    fn cut_request_after(&self, n: usize) {
        let up = format!("{}.up", self.control.display());
        std::fs::write(up, format!("cut {n}\n")).unwrap();
    }

    fn start(target: u16) -> Self {
        let control =
            std::env::temp_dir().join(format!("cg-fault-control-{}-{target}", std::process::id()));
        std::fs::write(&control, "").unwrap();
        let mut child = Command::new("python3")
            .arg(root().join("tests/support/fault_proxy.py"))
            .arg(target.to_string())
            .arg(&control)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tests/support/fault_proxy.py with python3");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("fault proxy said {line:?}"));
        Self {
            child,
            port,
            control,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The next reply gets `fault` (a line of the proxy's control file).
    fn arm(&self, fault: &str) {
        std::fs::write(&self.control, format!("{fault}\n")).unwrap();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.control);
        let _ = std::fs::remove_file(format!("{}.up", self.control.display()));
    }
}

/// The stream sink writing to `key` through `proxy`, its batches bounded by `timeout_ms`,
/// no back-off.
fn stream_sink(
    proxy: &Proxy,
    key: &str,
    timeout_ms: u64,
) -> checkout_guard_runtime::telemetry::StreamSink {
    stream_sink_to(&proxy.url(), key, timeout_ms)
}

fn stream_sink_to(
    url: &str,
    key: &str,
    timeout_ms: u64,
) -> checkout_guard_runtime::telemetry::StreamSink {
    checkout_guard_runtime::telemetry::StreamSink::new(
        checkout_guard_config::Endpoint::parse(url).unwrap(),
        key.into(),
        100_000,
        Duration::from_millis(timeout_ms),
        Duration::ZERO,
    )
}

/// `n` events numbered `i`, each with `pad` bytes more (0: none).
fn stream_events(n: i64, pad: usize) -> Vec<checkout_guard_runtime::telemetry::Event> {
    use checkout_guard_runtime::telemetry::{AttrValue, Event};
    (0..n)
        .map(|i| {
            let mut e = Event::new(b"ExternalCall").unwrap();
            e.set("i", AttrValue::Int(i));
            if pad > 0 {
                e.set("pad", AttrValue::Str("x".repeat(pad)));
            }
            e
        })
        .collect()
}

fn limiter(url: &str, name: &str, engine: &str, capacity: i64, timeout_ms: i64) -> Limiter {
    limiter_backing_off(url, name, engine, capacity, timeout_ms, 0)
}

fn limiter_backing_off(
    url: &str,
    name: &str,
    engine: &str,
    capacity: i64,
    timeout_ms: i64,
    retry_interval_ms: i64,
) -> Limiter {
    let options = Value::Map(vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("url".into(), Value::Str(url.as_bytes().to_vec())),
        (
            "global".into(),
            Value::Map(vec![
                ("capacity".into(), Value::Int(capacity)),
                // Less than a token in the longest test: `remaining` counts the takes.
                ("refill_per_second".into(), Value::Float(0.01)),
            ]),
        ),
        ("timeout_ms".into(), Value::Int(timeout_ms)),
        ("engine".into(), Value::Str(engine.as_bytes().to_vec())),
        ("on_unavailable".into(), Value::Str(b"throw".to_vec())),
    ]);
    let defaults = Defaults {
        local_denials: false,
        retry_interval_ms,
        ..Defaults::default()
    };
    Limiter::new(LimiterOptions::from_value(&options, &defaults).unwrap())
}

const ENGINES: [(&str, bool); 2] = [("lua", false), ("module", true)];

/// A limiter with `in_flight` (2 leases at once) at `url`: 100 tokens, a 300 ms timeout,
/// `on_unavailable` allow (a lost reply is decided, its lease carried), local denials off.
fn lease_limiter(url: &str, name: &str, engine: &str, retry_interval_ms: i64) -> Limiter {
    let options = Value::Map(vec![
        ("name".into(), Value::Str(name.as_bytes().to_vec())),
        ("url".into(), Value::Str(url.as_bytes().to_vec())),
        (
            "global".into(),
            Value::Map(vec![
                ("capacity".into(), Value::Int(100)),
                ("refill_per_second".into(), Value::Float(0.01)),
            ]),
        ),
        ("timeout_ms".into(), Value::Int(300)),
        ("engine".into(), Value::Str(engine.as_bytes().to_vec())),
        ("on_unavailable".into(), Value::Str(b"allow".to_vec())),
        (
            "in_flight".into(),
            Value::Map(vec![("global".into(), Value::Int(2))]),
        ),
    ]);
    let defaults = Defaults {
        local_denials: false,
        retry_interval_ms,
        ..Defaults::default()
    };
    Limiter::new(LimiterOptions::from_value(&options, &defaults).unwrap())
}

/// A Valkey that pauses for a moment: a decision's reply is lost (Valkey took its lease
/// when it resumed), the release right after falls in the back-off and is not sent. It is
/// tried again at a later request's end once the back-off is over, so the level is free
/// again then, not after `lease_seconds` (before: the lease stayed held 30 s, found by
/// adversarial review: 4-5 of 8 leases held by nobody after a 300 ms pause).
#[test]
fn a_release_refused_by_the_back_off_is_sent_at_a_later_request_end() {
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        let name = format!("pending-{engine}");
        let l = lease_limiter(&proxy.url(), &name, engine, 400);
        let key =
            checkout_guard_model::Keys::new(&name).leases(checkout_guard_model::Lane::Global, b"");
        let held = || -> i64 {
            redis::cmd("ZCARD")
                .arg(&key)
                .query(&mut v.direct())
                .unwrap()
        };
        let first = l.acquire(b"shop", 1).unwrap();
        l.release(b"shop", first.lease.unwrap(), false).unwrap();
        proxy.arm("hold");
        let lost = l.acquire(b"shop", 1).unwrap();
        assert_eq!(lost.reason, Reason::Unavailable, "{engine}");
        assert_eq!(held(), 1, "{engine}: Valkey took the lease");
        // In the back-off: not sent, kept for later.
        assert!(
            l.release(b"shop", lost.lease.unwrap(), false).is_err(),
            "{engine}"
        );
        assert_eq!(held(), 1, "{engine}");
        assert!(
            checkout_guard_runtime::limiter::pending_releases() >= 1,
            "{engine}"
        );
        std::thread::sleep(Duration::from_millis(450));
        checkout_guard_runtime::limiter::retry_pending_releases();
        assert_eq!(held(), 0, "{engine}: released once the back-off was over");
        let c = l.lease_counts();
        assert!(c.release_failed >= 1 && c.released >= 2, "{engine}: {c:?}");
    }
}

/// A decision with `in_flight` whose reply is lost after Valkey ran it took a lease the
/// worker never heard of: the decision (the policy's, here allow) carries that lease, and
/// its release ends it, so the level is not one lease short for `lease_seconds`. Before:
/// the lease stayed held until it expired (a saturated Valkey answering late cut the
/// level by one lease per lost reply, for 30 s each).
#[test]
fn a_lease_taken_by_a_decision_whose_reply_was_lost_is_released_with_it() {
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        let name = format!("lost-lease-{engine}");
        let l = lease_limiter(&proxy.url(), &name, engine, 0);
        let key =
            checkout_guard_model::Keys::new(&name).leases(checkout_guard_model::Lane::Global, b"");
        let held = || -> i64 {
            redis::cmd("ZCARD")
                .arg(&key)
                .query(&mut v.direct())
                .unwrap()
        };
        // A first decision opens the connection and loads the script.
        let first = l.acquire(b"shop", 1).unwrap();
        l.release(b"shop", first.lease.unwrap(), false).unwrap();
        assert_eq!(held(), 0, "{engine}");
        proxy.arm("hold");
        let lost = l.acquire(b"shop", 1).unwrap();
        assert_eq!(
            (lost.allowed, lost.reason),
            (true, Reason::Unavailable),
            "{engine}: the policy decided"
        );
        assert_eq!(held(), 1, "{engine}: Valkey took the lease");
        let n = lost
            .lease
            .expect("the decision carries the lease Valkey may hold");
        let outcome = l.release(b"shop", n, false).unwrap();
        assert_eq!(
            outcome,
            checkout_guard_model::cmd::release::ReleaseOutcome::Released,
            "{engine}"
        );
        assert_eq!(held(), 0, "{engine}: released");
        // One decision of unknown outcome, its lease released like the first.
        let c = l.lease_counts();
        assert_eq!(
            (c.unknown, c.released, c.expired),
            (1, 2, 0),
            "{engine}: {c:?}"
        );
    }
}

/// A reply lost after the decision ran takes its token once: the call says the outcome
/// is unknown, and the next decision finds exactly one token gone for it.
#[test]
fn a_reply_lost_after_the_decision_ran_takes_its_tokens_once() {
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        // `wrongtype`: a reply that arrives, well-formed, of the wrong shape: the decision
        // ran all the same (before: sent again, adversarial review).
        let faults = ["fin", "rst", "half", "garble", "hold", "wrongtype"];
        lost_replies_take_their_tokens_once(&v, &proxy, &proxy.url(), engine, &faults);
    }
}

/// The same on a Valkey Cluster (a node whose slot map names it at the proxy's port):
/// before, redis-rs's cluster connection sent the decision again after its reply was lost.
#[test]
fn a_reply_lost_on_a_cluster_takes_its_tokens_once() {
    for (engine, module) in ENGINES {
        let port = free_port();
        let proxy = Proxy::start(port);
        let v = TcpValkey::cluster_node(module, port, Some(proxy.port));
        v.cluster(&["ADDSLOTSRANGE", "0", "16383"]);
        v.wait_cluster(0, &v.node_id());
        let url = format!("redis+cluster://127.0.0.1:{}", proxy.port);
        let faults = ["fin", "rst", "half", "garble", "hold"];
        lost_replies_take_their_tokens_once(&v, &proxy, &url, engine, &faults);
    }
}

fn lost_replies_take_their_tokens_once(
    v: &TcpValkey,
    proxy: &Proxy,
    url: &str,
    engine: &str,
    faults: &[&str],
) {
    for (i, fault) in faults.iter().enumerate() {
        let name = format!("lost-{engine}-{i}");
        let l = limiter(url, &name, engine, 3, 300);
        let first = l.acquire(b"shop", 1).unwrap();
        assert!(first.allowed && first.remaining == 2, "{fault}: {first:?}");
        let before = v.decisions();
        proxy.arm(fault);
        let e = l
            .acquire(b"shop", 1)
            .expect_err("the reply never came: the policy (throw)");
        let text = e.to_string();
        assert!(text.contains("outcome unknown"), "{engine} {fault}: {text}");
        assert_eq!(
            v.decisions() - before,
            1,
            "{engine} {fault}: the decision reached Valkey once ({text})"
        );
        // The lost decision took its token once: one is left, then none.
        let third = l.acquire(b"shop", 1).unwrap();
        assert_eq!(
            (third.allowed, third.remaining),
            (true, 0),
            "{engine} {fault}: {third:?}"
        );
        let fourth = l.acquire(b"shop", 1).unwrap();
        assert_eq!((fourth.allowed, fourth.reason), (false, Reason::Global));
    }
}

/// A reply that trickles in a byte every 30 ms ends at the call's one deadline.
#[test]
fn a_trickled_reply_ends_at_the_calls_deadline() {
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        let l = limiter(&proxy.url(), &format!("trickle-{engine}"), engine, 100, 50);
        assert!(l.acquire(b"shop", 1).unwrap().allowed);
        proxy.arm("trickle 30");
        let started = Instant::now();
        let e = l.acquire(b"shop", 1).expect_err("not within 50 ms");
        let took = started.elapsed();
        assert!(e.to_string().contains("timed out"), "{engine}: {e}");
        // A reply of 40 bytes and more at 30 ms a byte took over a second before; the
        // bound leaves a loaded machine room and still fails that.
        assert!(took < Duration::from_millis(600), "{engine}: took {took:?}");
    }
}

extern "C" fn on_signal(_: libc::c_int) {}

/// Signals delivered while decisions wait for Valkey (a profiler's SIGPROF, a
/// `pcntl_signal()` handler): no decision fails, every token is counted once.
#[test]
fn signals_during_decisions_are_not_failures() {
    // SAFETY: a handler that does nothing, installed with SA_RESTART as PHP's pcntl does
    // (Linux does not restart socket reads with a timeout even so).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &sa, std::ptr::null_mut()), 0);
    }
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let url = format!("redis://127.0.0.1:{}", v.port);
        let l = limiter(&url, &format!("signals-{engine}"), engine, 1_000_000, 1000);
        // The script loaded (a first EVALSHA answered NOSCRIPT is a call too).
        assert!(l.acquire(b"warm-up", 1).unwrap().allowed);
        let before = v.decisions();
        // SAFETY: pthread_self of this thread, signalled while it lives (joined below).
        let me = unsafe { libc::pthread_self() } as usize;
        let stop = Arc::new(AtomicBool::new(false));
        let signaller = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut sent = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // SAFETY: the thread exists until `stop` is set and this one joined.
                    unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGPROF) };
                    sent += 1;
                    std::thread::sleep(Duration::from_micros(100));
                }
                sent
            })
        };
        let n = 3000;
        let mut failed = Vec::new();
        let mut last = None;
        let started = Instant::now();
        for i in 0..n {
            match l.acquire(b"shop", 1) {
                Ok(d) => last = Some(d),
                Err(e) => failed.push(format!("{i}: {e}")),
            }
            if started.elapsed() > Duration::from_secs(60) {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        let sent = signaller.join().unwrap();
        assert!(sent > 100, "{engine}: only {sent} signals sent");
        assert!(
            failed.is_empty(),
            "{engine}: {} of {n} failed with {sent} signals: {:?}",
            failed.len(),
            &failed[..failed.len().min(3)]
        );
        assert_eq!(
            last.map(|d| d.remaining),
            Some(1_000_000 - 1 - n),
            "{engine}: every token once"
        );
        assert_eq!(
            v.decisions() - before,
            n,
            "{engine}: each decision sent once"
        );
    }
}

/// A small generator (xorshift) so a seed replays the same sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Random decisions and transport faults against a reference that takes each decision's
/// tokens at most once. A call that fails leaves two possibilities (it ran in Valkey, or
/// it did not: a fault on a connection's set-up fails it before the decision is sent);
/// every answer that arrives must match one of them, and a decision taken twice matches
/// none. A failure prints the seed and the operations up to it.
#[test]
fn model_decisions_and_transport_faults_take_each_token_once() {
    use std::collections::BTreeSet;
    let seeds: u64 = std::env::var("CG_FAULT_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(6);
    let faults = ["fin", "rst", "half", "garble", "hold", "delay 5"];
    let mut unknown = 0;
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        for seed in 1..=seeds {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d));
            let capacity = 5 + (rng.next() % 20) as i64;
            let name = format!("model-{engine}-{seed}");
            let l = limiter(&proxy.url(), &name, engine, capacity, 200);
            // What may be left in the bucket, as far as the answers so far tell.
            let mut possible = BTreeSet::from([capacity]);
            let mut ops: Vec<String> = Vec::new();
            for _ in 0..(capacity + 6) {
                let tokens = 1 + (rng.next() % 2) as i64;
                let fault = rng
                    .next()
                    .is_multiple_of(3)
                    .then(|| faults[(rng.next() % 6) as usize]);
                ops.push(format!(
                    "acquire({tokens}){}",
                    fault.map(|f| format!(" [{f}]")).unwrap_or_default()
                ));
                if let Some(f) = fault {
                    proxy.arm(f);
                }
                let got = l.acquire(b"shop", tokens);
                let after: BTreeSet<i64> = match &got {
                    Ok(d) => possible
                        .iter()
                        .filter(|&&left| {
                            if left >= tokens {
                                d.allowed && d.remaining == left - tokens
                            } else {
                                !d.allowed && d.reason == Reason::Global
                            }
                        })
                        .map(|&left| if left >= tokens { left - tokens } else { left })
                        .collect(),
                    // Only a fault fails a call (a 5 ms delay never does).
                    Err(_) if fault.is_some_and(|f| f != "delay 5") => {
                        unknown += 1;
                        possible
                            .iter()
                            .flat_map(|&left| {
                                [left, if left >= tokens { left - tokens } else { left }]
                            })
                            .collect()
                    }
                    Err(_) => BTreeSet::new(),
                };
                assert!(
                    !after.is_empty(),
                    "{engine}, seed {seed} (CG_FAULT_SEEDS), capacity {capacity}: {got:?} \
                     after {ops:?}; the reference allows {possible:?} left"
                );
                possible = after;
            }
        }
    }
    assert!(unknown > 10, "only {unknown} calls met a fault");
}

/// The stream sink's batch whose replies are lost after Valkey added its entries is not
/// sent again (item 4: 7 entries for 4 events before): every entry is there once, and
/// the sink says the batch's outcome is unknown.
#[test]
fn a_stream_batch_whose_replies_are_lost_is_not_written_twice() {
    use checkout_guard_runtime::telemetry::Sink;
    let v = TcpValkey::start(false);
    let proxy = Proxy::start(v.port);
    let mut sink = stream_sink(&proxy, "cg-faults:events", 300);
    let events = |n| stream_events(n, 0);
    let len = || v.xlen("cg-faults:events");
    sink.write(&events(1)).unwrap();
    let mut expected = 1;
    for fault in ["fin", "rst", "half", "garble", "hold"] {
        proxy.arm(fault);
        let (written, why) = sink.write(&events(4)).expect_err(fault);
        assert!(why.contains("outcome unknown"), "{fault}: {why}");
        assert!(written < 4, "{fault}: {written}");
        expected += 4;
        assert_eq!(len(), expected, "{fault}: each entry once ({why})");
        // The next batch goes on a new connection, whole.
        sink.write(&events(2)).unwrap();
        expected += 2;
        assert_eq!(len(), expected, "{fault}");
    }
}

/// Bytes nobody asked for, read with a reply (`dup`) or arriving after it (`extra`), mark
/// the connection out of step: the next call goes on a new one and gets its own answer
/// (before: every later call read the previous call's reply, adversarial review).
#[test]
fn bytes_nobody_asked_for_put_the_connection_out_of_step() {
    for (engine, module) in ENGINES {
        let v = TcpValkey::start(module);
        let proxy = Proxy::start(v.port);
        for fault in ["dup", "extra 20"] {
            let l = limiter(
                &proxy.url(),
                &format!("unasked-{engine}-{}", fault.replace(' ', "-")),
                engine,
                10,
                500,
            );
            assert_eq!(l.acquire(b"shop", 1).unwrap().remaining, 9);
            proxy.arm(fault);
            // The reply itself arrives first: right.
            assert_eq!(
                l.acquire(b"shop", 1).unwrap().remaining,
                8,
                "{engine} {fault}"
            );
            // Past the `extra` bytes (20 ms after the reply), with room for a busy machine.
            std::thread::sleep(Duration::from_millis(300));
            for want in [6, 3] {
                let tokens = if want == 6 { 2 } else { 3 };
                let d = l.acquire(b"shop", tokens).unwrap();
                assert_eq!(d.remaining, want, "{engine} {fault}: {d:?}");
            }
        }
    }
}

/// A stream batch whose write breaks partway (the XADDs before the break were read by
/// Valkey and ran) is not sent again (before: sent again whole, 2064 entries for 2000
/// events, adversarial review).
#[test]
fn a_stream_batch_cut_while_written_is_not_written_twice() {
    use checkout_guard_runtime::telemetry::Sink;
    let v = TcpValkey::start(false);
    let proxy = Proxy::start(v.port);
    let mut sink = stream_sink(&proxy, "cg-faults:cut", 2000);
    let events = |n| stream_events(n, 16_000);
    let len = || v.xlen("cg-faults:cut");
    sink.write(&events(1)).unwrap();
    // 6.4 MB: more than the socket buffers hold, so the write itself breaks partway.
    proxy.cut_request_after(1_000_000);
    let (written, why) = sink.write(&events(400)).expect_err("cut");
    let after_cut = len();
    assert!(
        (2..=401).contains(&after_cut),
        "{after_cut} entries: some XADDs of the cut batch ran, none twice ({written} written: {why})"
    );
    sink.write(&events(3)).unwrap();
    assert_eq!(len(), after_cut + 3, "nothing of the cut batch sent again");
}

/// The back-off after a short timeout keeps its cause when a limiter with a longer timeout
/// on the same URL succeeds meanwhile (before: "not retrying for 994 ms after: " with
/// nothing after it, adversarial review).
#[test]
fn a_back_off_says_its_cause_after_another_limiter_succeeded() {
    let v = TcpValkey::start(false);
    let proxy = Proxy::start(v.port);
    let short = limiter_backing_off(&proxy.url(), "cause-short", "lua", 10, 30, 5000);
    let long = limiter_backing_off(&proxy.url(), "cause-long", "lua", 10, 2000, 5000);
    assert!(long.acquire(b"shop", 1).unwrap().allowed);
    proxy.arm("delay 200");
    let e = short.acquire(b"shop", 1).expect_err("30 ms: timed out");
    assert!(e.to_string().contains("timed out"), "{e}");
    // The long one is not held back, and succeeds on a new connection.
    assert!(long.acquire(b"shop", 1).unwrap().allowed);
    let e = short
        .acquire(b"shop", 1)
        .expect_err("backing off")
        .to_string();
    assert!(e.contains("not retrying"), "{e}");
    assert!(
        e.contains("timed out after 30 ms"),
        "the back-off's cause: {e}"
    );
}

/// A stream batch on a Valkey Cluster whose replies are lost is not written twice either
/// (redis-rs's cluster connection sent the pipeline again).
#[test]
fn a_stream_batch_on_a_cluster_whose_replies_are_lost_is_not_written_twice() {
    use checkout_guard_runtime::telemetry::Sink;
    let port = free_port();
    let proxy = Proxy::start(port);
    let v = TcpValkey::cluster_node(false, port, Some(proxy.port));
    v.cluster(&["ADDSLOTSRANGE", "0", "16383"]);
    v.wait_cluster(0, &v.node_id());
    let url = format!("redis+cluster://127.0.0.1:{}", proxy.port);
    let mut sink = stream_sink_to(&url, "cg-faults:events", 300);
    let len = || v.xlen("cg-faults:events");
    sink.write(&stream_events(1, 0)).unwrap();
    let mut expected = 1;
    for fault in ["fin", "rst", "garble", "hold"] {
        proxy.arm(fault);
        let (written, why) = sink.write(&stream_events(4, 0)).expect_err(fault);
        assert!(why.contains("outcome unknown"), "{fault}: {why}");
        assert!(written < 4, "{fault}: {written}");
        expected += 4;
        assert_eq!(len(), expected, "{fault}: each entry once ({why})");
        sink.write(&stream_events(2, 0)).unwrap();
        expected += 2;
        assert_eq!(len(), expected, "{fault}");
    }
}

/// Two nodes; every slot `a`'s, then the stream's slot moved to `b` (its key migrated
/// with it) or being migrated to `b` (the key not on `a`: `ASK`). The stream sink's batch,
/// refused by `a` with `MOVED` or `ASK` (a refusal: nothing ran), is written on `b`, each
/// entry once, and counted written (item 15: before, a batch a node refused counted
/// wholly as dropped).
#[test]
fn a_stream_batch_a_node_refuses_is_written_where_the_cluster_says() {
    use checkout_guard_runtime::telemetry::Sink;
    let (a, b, ida, idb) = two_nodes_all_on_a();
    let (pa, pb) = (a.port, b.port);
    let url = format!("redis+cluster://127.0.0.1:{pa}");
    for (i, how) in ["moved", "ask"].iter().enumerate() {
        let key = format!("cg-refused:{{{how}}}");
        let slot = checkout_guard_model::slot::key_slot(key.as_bytes());
        let slot_arg = slot.to_string();
        let mut sink = stream_sink_to(&url, &key, 2000);
        // The slot map learnt, the slot `a`'s (for `ask`: the key not created yet).
        let warm = format!("cg-refused:warm{i}");
        let mut warm_sink = stream_sink_to(&url, &warm, 2000);
        warm_sink.write(&stream_events(1, 0)).unwrap();
        if *how == "moved" {
            sink.write(&stream_events(1, 0)).unwrap();
        }
        b.cluster(&["SETSLOT", &slot_arg, "IMPORTING", &ida]);
        a.cluster(&["SETSLOT", &slot_arg, "MIGRATING", &idb]);
        if *how == "moved" {
            redis::cmd("MIGRATE")
                .arg("127.0.0.1")
                .arg(pb)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&key)
                .query::<()>(&mut a.direct())
                .unwrap();
            for n in [&a, &b] {
                n.cluster(&["SETSLOT", &slot_arg, "NODE", &idb]);
            }
        }
        sink.write(&stream_events(5, 0))
            .unwrap_or_else(|(n, why)| panic!("{how}: {n} of 5 written: {why}"));
        let before = usize::from(*how == "moved");
        assert_eq!(
            b.xlen_importing(&key),
            (before + 5) as i64,
            "{how}: every entry on b, once"
        );
        let on_a: i64 =
            redis::from_redis_value(a.cluster(&["COUNTKEYSINSLOT", &slot_arg])).unwrap();
        assert_eq!(on_a, 0, "{how}: nothing of the stream on a");
        // The next batch goes to b at once (the slot's node learnt from MOVED), or again
        // by ASK while the slot is migrating.
        sink.write(&stream_events(2, 0)).unwrap();
        assert_eq!(b.xlen_importing(&key), (before + 7) as i64, "{how}");
    }
}

/// A cluster node with more `valkey-server` arguments (`cluster_node` has none).
fn cluster_node_with(module: bool, port: u16, more: &[&str]) -> TcpValkey {
    let mut extra: Vec<String> = ["--cluster-enabled", "yes", "--cluster-config-file"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    extra.push(format!("nodes-{port}.conf"));
    extra.extend(more.iter().map(|s| s.to_string()));
    TcpValkey::start_on(port, module, &extra)
}

/// The slot of a limiter's keys (its hash tag).
fn limiter_slot(name: &str) -> u16 {
    checkout_guard_model::slot::key_slot(&checkout_guard_model::Keys::new(name).global())
}

/// A limiter name of `prefix` whose slot `pick` accepts.
fn name_in(prefix: &str, pick: impl Fn(u16) -> bool) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}-{i}"))
        .find(|n| pick(limiter_slot(n)))
        .expect("a name in the slots wanted")
}

/// A seed that is not in the cluster (a node reset out of it, or restarted without its
/// nodes.conf, still first in the URL) answers `CLUSTER SLOTS` with an empty map: the
/// next seed gives the map (adversarial review of cluster.rs: the empty map was taken,
/// every slot "served by no node", and the connection kept, so every decision failed
/// for as long as the process lived).
#[test]
fn a_seed_that_knows_no_slot_map_is_passed_over() {
    for (engine, module) in ENGINES {
        let (pa, pe) = (free_port(), free_port());
        let a = TcpValkey::cluster_node(module, pa, None);
        a.cluster(&["ADDSLOTSRANGE", "0", "16383"]);
        a.wait_cluster(0, &a.node_id());
        let lone = TcpValkey::cluster_node(module, pe, None);
        assert_eq!(lone.cluster(&["SLOTS"]), redis::Value::Array(vec![]));
        let url = format!("redis+cluster://127.0.0.1:{pe},127.0.0.1:{pa}");
        let l = limiter(&url, &format!("lone-seed-{engine}"), engine, 3, 1000);
        for left in [2, 1] {
            let d = l
                .acquire(b"shop", 1)
                .unwrap_or_else(|e| panic!("{engine}: {e}"));
            assert_eq!((d.allowed, d.remaining), (true, left), "{engine}");
        }
    }
}

/// A slot no node served when the connection learnt the slot map (being assigned, a
/// cluster being formed, `cluster-require-full-coverage no`) and served since: the slot
/// map is asked again, and the slot's decisions are made (before: the map was never asked
/// again while the connection lived, "no node serves the slot" was a reply error that
/// kept it, so the slot's decisions failed until the process ended).
#[test]
fn a_slot_served_after_the_slot_map_was_learnt_is_found() {
    let pa = free_port();
    let a = cluster_node_with(false, pa, &["--cluster-require-full-coverage", "no"]);
    let hole_name = name_in("hole", |s| (100..16_000).contains(&s));
    let hole = limiter_slot(&hole_name);
    let warm_name = name_in("warm", |s| s.abs_diff(hole) > 10);
    a.cluster(&["ADDSLOTSRANGE", "0", &(hole - 1).to_string()]);
    a.cluster(&["ADDSLOTSRANGE", &(hole + 1).to_string(), "16383"]);
    let ida = a.node_id();
    a.wait_cluster(limiter_slot(&warm_name), &ida);
    let url = format!("redis+cluster://127.0.0.1:{pa}");
    let warm = limiter(&url, &warm_name, "lua", 10, 1000);
    let l = limiter(&url, &hole_name, "lua", 10, 1000);
    assert!(warm.acquire(b"shop", 1).unwrap().allowed);
    let e = l
        .acquire(b"shop", 1)
        .expect_err("no node serves the slot yet");
    assert!(e.to_string().contains("slot"), "{e}");
    a.cluster(&["ADDSLOTS", &hole.to_string()]);
    a.wait_cluster(hole, &ida);
    let d = l
        .acquire(b"shop", 1)
        .unwrap_or_else(|e| panic!("the slot is served now: {e}"));
    assert_eq!((d.allowed, d.remaining), (true, 9));
    assert!(warm.acquire(b"shop", 1).unwrap().allowed);
}

/// With `engine = auto`, the first call on a cluster connection asks whether the server
/// has the module (`COMMAND INFO`, no key) before any command was routed by a key. A
/// primary down that serves other slots (`cluster-require-full-coverage no`: the rest of
/// the cluster goes on) must not fail decisions whose slot is served (before: the
/// keyless question went to the first node of the slot map, the node of slot 0, down:
/// every decision of every new connection failed "Connection refused", while the same
/// limiter with `engine = lua` decided). `auto` first: the engines share the
/// pooled connection, and a keyed command makes its node the one asked.
#[test]
fn engine_auto_decides_while_the_node_of_slot_0_is_down() {
    let (a, b, _, _) = two_nodes_halved(true);
    let pb = b.port;
    drop(a);
    let url = format!("redis+cluster://127.0.0.1:{pb}");
    for engine in ["auto", "lua", "module"] {
        let name = name_in(&format!("on-b-{engine}"), |s| s >= 8192);
        let l = limiter(&url, &name, engine, 3, 1000);
        let d = l
            .acquire(b"shop", 1)
            .unwrap_or_else(|e| panic!("{engine}: the limiter's slot is served: {e}"));
        assert_eq!((d.allowed, d.remaining), (true, 2), "{engine}");
    }
}

/// One primary down whose slots are not served (`cluster-require-full-coverage no`, no
/// replica; or the seconds of a failover before the replica is promoted) must not stop the
/// decisions of the limiters whose slots other primaries serve. It does: a decision of a
/// limiter in the dead primary's slots fails (`Connection refused`), and the back-off that
/// follows is the endpoint's (`store/pool.rs`: one pooled connection and one back-off per
/// URL), so every limiter on the cluster's URL answers "not retrying" for
/// `retry_interval_ms`; with the dead slot's limiter called once per back-off, a limiter on
/// a live primary never decides again (measured with the PHP extension: 0 of 137
/// decisions in 3 s, each after one of the dead slot's). A back-off per node (the cluster
/// connection knows which node failed) is the fix; it is `pool.rs`'s and `reconnect.rs`'s
/// design (being rewritten), not a small change in `cluster.rs`.
#[test]
#[ignore = "fails: the back-off after one node's failure is the whole cluster URL's (store/pool.rs); see the doc comment"]
fn a_dead_primary_does_not_stop_decisions_on_the_live_ones() {
    let (a, b, _, _) = two_nodes_halved(false);
    let pb = b.port;
    let url = format!("redis+cluster://127.0.0.1:{pb}");
    let on_a = limiter_backing_off(&url, &name_in("on-a", |s| s < 8192), "lua", 10, 500, 1000);
    let on_b = limiter_backing_off(&url, &name_in("on-b", |s| s >= 8192), "lua", 10, 500, 1000);
    assert!(on_a.acquire(b"shop", 1).unwrap().allowed);
    assert!(on_b.acquire(b"shop", 1).unwrap().allowed);
    drop(a);
    let e = on_a.acquire(b"shop", 1).expect_err("a is down");
    eprintln!("on a: {e}");
    let d = on_b
        .acquire(b"shop", 1)
        .unwrap_or_else(|e| panic!("b's slots are served: {e}"));
    assert_eq!((d.allowed, d.remaining), (true, 8));
}

/// A decision while its slot migrates, its keys already moved (the slot still MIGRATING
/// on `a`, IMPORTING on `b`): `a` answers `ASK`, and `b`, asked, `TRYAGAIN` (the decision
/// names keys `b` has not got: the shop's bucket). The retries after `TRYAGAIN` go to `b`
/// with `ASKING` again, and the call ends saying `TRYAGAIN`, as the docs say a migration
/// does (before: the retry went to `b` without `ASKING`, `b` answered `MOVED` back to
/// `a`, which answered `ASK` again, until the redirects ran out: the policy's cause said
/// `MOVED`, a reshard already done, and every retry cost two round trips more).
#[test]
fn a_decision_during_a_migration_is_retried_where_it_was_asked() {
    let (a, b, ida, idb) = two_nodes_all_on_a();
    let (pa, pb) = (a.port, b.port);
    let url = format!("redis+cluster://127.0.0.1:{pa}");
    let name = "migrating";
    let slot = limiter_slot(name).to_string();
    let l = limiter(&url, name, "lua", 10, 1000);
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    b.cluster(&["SETSLOT", &slot, "IMPORTING", &ida]);
    a.cluster(&["SETSLOT", &slot, "MIGRATING", &idb]);
    let keys: Vec<String> =
        redis::from_redis_value(a.cluster(&["GETKEYSINSLOT", &slot, "100"])).unwrap();
    assert!(!keys.is_empty());
    let mut migrate = redis::cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(pb)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS");
    for k in &keys {
        migrate.arg(k);
    }
    migrate.query::<()>(&mut a.direct()).unwrap();
    let asked_before = b.calls("asking");
    let e = l
        .acquire(b"another-shop", 1)
        .expect_err("TRYAGAIN while the slot migrates");
    let text = e.to_string();
    assert!(
        text.contains("TryAgain") || text.contains("TRYAGAIN"),
        "{text}"
    );
    assert!(!text.contains("Moved"), "{text}");
    // One ASKING per sending to b: the first and each retry after TRYAGAIN.
    assert_eq!(b.calls("asking") - asked_before, 4, "{text}");
    // Migrated: the decision is made on b.
    for n in [&a, &b] {
        n.cluster(&["SETSLOT", &slot, "NODE", &idb]);
    }
    let d = l.acquire(b"shop", 1).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((d.allowed, d.remaining), (true, 8));
}

/// A primary restarted empty (its nodes.conf lost with its data: a container without a
/// volume) on the same address answers every key `CLUSTERDOWN` (a node in no cluster),
/// and its replica is promoted (`CLUSTER FAILOVER TAKEOVER`: the cluster does not fail
/// the address over by itself, the new node answers its pings). Decisions made while the
/// new node answered `CLUSTERDOWN` kept the connection (a reply error) and its slot map
/// naming that node: after the promotion the slot map must be asked again, and decisions
/// made on the promoted replica (before: `CLUSTERDOWN` for as long as the process lived,
/// every node's connection open and in step, so nothing asked the map again). The same
/// holds for a primary cut off from the cluster's majority but not from the client.
#[test]
fn a_primary_restarted_empty_is_left_for_its_promoted_replica() {
    let (pa, pb, pr) = (free_port(), free_port(), free_port());
    let more = [
        "--cluster-node-timeout",
        "2000",
        "--cluster-replica-validity-factor",
        "0",
    ];
    let a = cluster_node_with(false, pa, &more);
    let b = cluster_node_with(false, pb, &more);
    let r = cluster_node_with(false, pr, &more);
    a.cluster(&["ADDSLOTSRANGE", "0", "8191"]);
    b.cluster(&["ADDSLOTSRANGE", "8192", "16383"]);
    for n in [&b, &r] {
        n.meet(&a);
    }
    let (ida, idb, idr) = (a.node_id(), b.node_id(), r.node_id());
    b.wait_cluster(0, &ida);
    b.wait_cluster(8192, &idb);
    r.wait_cluster(0, &ida);
    r.cluster(&["REPLICATE", &ida]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut r.direct())
            .unwrap();
        let nodes: String = redis::from_redis_value(b.cluster(&["NODES"])).unwrap();
        if info.contains("master_link_status:up")
            && nodes
                .lines()
                .any(|l| l.starts_with(&idr) && l.contains(&ida))
        {
            break;
        }
        assert!(Instant::now() < deadline, "replica not in sync: {info}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let url = format!("redis+cluster://127.0.0.1:{pb}");
    let name = name_in("restarted", |s| s < 8192);
    let l = limiter(&url, &name, "lua", 10, 1000);
    assert!(l.acquire(b"shop", 1).unwrap().allowed);
    // Replicated before the primary goes.
    redis::cmd("WAIT")
        .arg(1)
        .arg(2000)
        .query::<i64>(&mut a.direct())
        .unwrap();
    drop(a);
    let empty = cluster_node_with(false, pa, &more);
    assert_ne!(empty.node_id(), ida);
    let e = l
        .acquire(b"shop", 1)
        .expect_err("the slot's node is in no cluster now");
    eprintln!("before the promotion: {e}");
    r.cluster(&["FAILOVER", "TAKEOVER"]);
    b.wait_cluster(0, &idr);
    let deadline = Instant::now() + Duration::from_secs(10);
    let decided = loop {
        match l.acquire(b"shop", 1) {
            Ok(d) => break d,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "10 s after the promotion, still: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    // (Its bucket is the replica's: resynced from the empty node at the old address.)
    assert!(decided.allowed, "{decided:?}");
}

/// Two cluster nodes that met, every slot `a`'s: `(a, b, a's id, b's id)`.
fn two_nodes_all_on_a() -> (TcpValkey, TcpValkey, String, String) {
    let (pa, pb) = (free_port(), free_port());
    let a = TcpValkey::cluster_node(false, pa, None);
    let b = TcpValkey::cluster_node(false, pb, None);
    a.cluster(&["ADDSLOTSRANGE", "0", "16383"]);
    a.meet(&b);
    let (ida, idb) = (a.node_id(), b.node_id());
    b.wait_cluster(0, &ida);
    (a, b, ida, idb)
}

/// Two cluster nodes that met, the slots halved between them, each serving its half while
/// the other is down (`cluster-require-full-coverage no`), with the module or without.
fn two_nodes_halved(module: bool) -> (TcpValkey, TcpValkey, String, String) {
    let (pa, pb) = (free_port(), free_port());
    let more = ["--cluster-require-full-coverage", "no"];
    let a = cluster_node_with(module, pa, &more);
    let b = cluster_node_with(module, pb, &more);
    a.cluster(&["ADDSLOTSRANGE", "0", "8191"]);
    b.cluster(&["ADDSLOTSRANGE", "8192", "16383"]);
    a.meet(&b);
    let (ida, idb) = (a.node_id(), b.node_id());
    b.wait_cluster(0, &ida);
    b.wait_cluster(8192, &idb);
    (a, b, ida, idb)
}
