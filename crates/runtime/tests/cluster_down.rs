//! A cluster that is down: the CLI's connection (the connection layer the worker uses)
//! stays bounded by `--timeout-ms` on a cluster whose every command answers CLUSTERDOWN,
//! as the worker's store is. Needs a real Valkey (`VALKEY_SERVER` or the project's
//! `.venv`).

#[allow(dead_code)]
mod common;

use checkout_guard_config::{Endpoint, Engine};
use checkout_guard_model::Keys;
use checkout_guard_runtime::{Store, ValkeyStore};
use common::ports::free_port;
use common::valkey_binary;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    let (port, bus) = (free_port(), free_port());
    let dir = std::env::temp_dir().join(format!("cg-review-cluster-{}-{port}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let child = Command::new(valkey_binary())
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--cluster-port", &bus.to_string()])
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
