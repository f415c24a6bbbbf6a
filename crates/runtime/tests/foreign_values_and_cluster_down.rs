//! Foreign values and a cluster that is down: the in-memory store must read what a hand
//! (or a bug) wrote into Valkey as the decision script reads it, and the CLI's connection
//! (the connection layer the worker uses) must stay bounded by `--timeout-ms` on a cluster
//! that is down, as the worker's store is. Each needs a real Valkey (`VALKEY_SERVER` or the
//! project's `.venv`).

#[allow(dead_code)]
mod common;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkout_guard_config::{Endpoint, Engine};
use checkout_guard_model::{
    AutoHotArgs, BucketSet, BucketSpec, DecideCall, DecideReply, Keys, LaneArgs, ShopKeys,
};
use checkout_guard_runtime::{MemoryStore, Store, ValkeyStore};
use common::{valkey_binary, Valkey};

fn set() -> BucketSet {
    BucketSet {
        global: BucketSpec::new("global", 10, 10.0).unwrap(),
        hot_lane: Some(BucketSpec::new("hot_lane", 6, 6.0).unwrap()),
        hot_shop: Some(BucketSpec::new("hot_shop", 4, 4.0).unwrap()),
    }
}

/// One decision for `shop`, asked of `store`, decoded as the limiter decodes it.
fn decide(store: &dyn Store, keys: &Keys, shop: &[u8]) -> Result<DecideReply, String> {
    let shop_keys = ShopKeys::new(keys, shop);
    let lanes = LaneArgs::new(&set());
    let auto = AutoHotArgs::new(None);
    let call = DecideCall {
        adapt: &checkout_guard_model::AdaptArgs::off(),
        keys: shop_keys.decide_keys(),
        tokens: 1,
        static_hot: false,
        lanes: &lanes,
        version: b"",
        shop,
        auto_hot: &auto,
        settings: "global=10/10",
        peek: false,
        max_wait_us: 0,
    };
    let ints = store.decide(&call).map_err(|e| e.to_string())?;
    DecideCall::decode_reply(&ints)
}

/// Outcome of a decision, reduced to what a caller sees: error, or (reason, hot).
fn outcome(r: Result<DecideReply, String>) -> String {
    match r {
        Ok(DecideReply::Decided(s)) => format!("decided reason={:?} hot={}", s.reason, s.hot),
        Ok(DecideReply::LimitsChanged) => "limits changed".into(),
        Err(_) => "error".into(),
    }
}

fn valkey_store(v: &Valkey) -> ValkeyStore {
    ValkeyStore::new(
        Endpoint::parse(&v.url).unwrap(),
        Duration::from_secs(2),
        Duration::ZERO,
        Engine::Lua,
    )
}

/// MemoryStore claims hand-written values "read as Valkey would read them". A bucket key
/// holding something no engine reads (another library's value, a hand edit) is a missing
/// key for the script and the in-memory store alike: a full bucket, and the call is
/// allowed (it was a script error, answered by `on_unavailable`, until issue 23). The
/// readable values here are TATs long past: full too.
#[test]
fn memory_store_and_script_agree_on_an_unreadable_bucket_value() {
    let valkey = Valkey::start();
    let real = valkey_store(&valkey);
    let mem = MemoryStore::new();
    let keys = Keys::new("review-garbage");
    for raw in [
        &b"garbage"[..],
        b"-5:100000:900000:",
        b"1:2:3:4:5",
        b"",
        b"1:2",
        b"1:-2:3",
        b"1 :2:3",
        b"123",
        b" 12 ",
        b"1:2:3",
        b"1:2:3:",
        b"1:2:3:4",
        b"99999999999999:100000:900000:1",
        br#"O:55:"Symfony\Component\RateLimiter\Tests\Resources\DummyWindow":0:{}"#,
        b"1e3",
        b"5.5",
        b"-3",
        b"99999999999999999999",
        b"1800000000000000junk",
    ] {
        redis::cmd("SET")
            .arg(keys.global())
            .arg(raw)
            .query::<()>(&mut valkey.connection())
            .unwrap();
        mem.set(&keys.global(), raw);
        let (r, m) = (
            outcome(decide(&real, &keys, b"s")),
            outcome(decide(&mem, &keys, b"s")),
        );
        assert_eq!(
            m,
            r,
            "global bucket = {:?}: MemoryStore answers {m}, the script {r}",
            String::from_utf8_lossy(raw)
        );
        assert_eq!(
            r,
            "decided reason=None hot=false",
            "global bucket = {:?}: a full bucket",
            String::from_utf8_lossy(raw)
        );
    }
}

/// A hot flag of another type (a hash written by hand): the script's MGET reads nil (not
/// hot), the in-memory store's PTTL finds the key (hot).
#[test]
fn memory_store_and_script_agree_on_a_hot_flag_of_another_type() {
    let valkey = Valkey::start();
    let real = valkey_store(&valkey);
    let mem = MemoryStore::new();
    let keys = Keys::new("review-flag");
    let flag = keys.hot_flag(b"s");
    redis::cmd("HSET")
        .arg(&flag)
        .arg("f")
        .arg("1")
        .query::<()>(&mut valkey.connection())
        .unwrap();
    mem.set_hash(&flag, &[(b"f", b"1")]);
    let (r, m) = (
        outcome(decide(&real, &keys, b"s")),
        outcome(decide(&mem, &keys, b"s")),
    );
    assert_eq!(m, r, "MemoryStore answers {m}, the script {r}");
}

struct ClusterNode {
    child: Child,
    dir: std::path::PathBuf,
    port: u16,
}

impl Drop for ClusterNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A one-node Valkey Cluster owning every slot but one that is not `key`'s: the cluster
/// is down (`cluster-require-full-coverage yes`), every command answers CLUSTERDOWN.
fn cluster_down_for(key: &[u8]) -> ClusterNode {
    let port = loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p < 55000 {
            break p;
        }
    };
    let dir = std::env::temp_dir().join(format!("cg-review-cluster-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(valkey_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--cluster-enabled",
            "yes",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .arg("--cluster-config-file")
        .arg(dir.join("nodes.conf"))
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let node = ClusterNode { child, dir, port };
    let url = format!("redis://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut c = loop {
        match redis::Client::open(url.as_str()).unwrap().get_connection() {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "cluster node: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let slot: i64 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut c)
        .unwrap();
    let skip = if slot == 0 { 1 } else { 0 };
    for (a, b) in [(0, skip - 1), (skip + 1, 16383)] {
        if a <= b {
            redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(a)
                .arg(b)
                .query::<()>(&mut c)
                .unwrap();
        }
    }
    node
}

/// `checkout-guard limiter hot|set|status` against a cluster that answers CLUSTERDOWN:
/// before the refactor (the worker's pooled connection: retry waits of at most
/// timeout/10, <= 50 ms) it failed within the timeout; the CLI's own connection keeps
/// redis-rs's default retry waits (>= 1.28 s each, 3 retries), ~3.9 s whatever
/// `--timeout-ms` says.
#[test]
fn cli_against_a_cluster_that_is_down_fails_within_its_timeout() {
    let keys = Keys::new("default");
    let node = cluster_down_for(&keys.hot_flag(b"s"));
    let url = format!("valkey+cluster://127.0.0.1:{}", node.port);
    let timeout = Duration::from_millis(100);
    let admin = checkout_guard_cli::admin::Admin::new(&url, "default", timeout).unwrap();
    let started = Instant::now();
    let r = admin.hot(b"s", 60);
    let took = started.elapsed();
    let e = r.expect_err("a cluster that is down");
    assert!(e.contains("down"), "{e}");
    // A bound on a hang (20x the timeout; unbounded it is ~4 s), not a performance goal.
    assert!(
        took < Duration::from_secs(2),
        "`limiter hot` with --timeout-ms 100 took {took:?} to fail ({e})"
    );
    // The worker's store, on the same cluster, is bounded as before.
    let store = ValkeyStore::new(
        Endpoint::parse(&url).unwrap(),
        timeout,
        Duration::from_millis(1),
        Engine::Auto,
    );
    let started = Instant::now();
    assert!(Arc::new(store).mark_hot(&keys.hot_flag(b"s"), 60).is_err());
    assert!(started.elapsed() < Duration::from_secs(2));
}
