//! The stream sink's pipeline (`store::pipeline` on the `Events` pool, as `StreamSink`
//! sends its XADDs) takes a `READONLY` reply, a demoted primary's, as a broken connection,
//! as a decision does: the kept connection is dropped and opened once more (a Sentinel
//! endpoint asks the sentinels again there), the commands from the refused one on count as
//! not done, and once the server takes writes again the next batch is written. A real
//! Valkey made a replica (`REPLICAOF` a port where nothing listens: it refuses writes).

#[allow(dead_code)]
mod common;

use std::net::TcpListener;
use std::time::Duration;

use checkout_guard_config::Endpoint;
use checkout_guard_runtime::store::{self, Pool};
use common::Valkey;

const TIMEOUT: Duration = Duration::from_millis(500);

fn xadds(key: &str, n: usize) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    for i in 0..n {
        pipe.cmd("XADD")
            .arg(key)
            .arg("*")
            .arg("event")
            .arg(format!("{{\"i\":{i}}}"));
    }
    pipe
}

/// The workers' connections (`lib-name=checkout_guard`) the server has now.
fn workers(v: &Valkey) -> usize {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut v.connection())
        .unwrap();
    list.lines()
        .filter(|l| l.contains("lib-name=checkout_guard "))
        .count()
}

#[test]
fn a_readonly_reply_breaks_the_stream_pipelines_connection() {
    let v = Valkey::start();
    let endpoint = Endpoint::parse(&v.url).unwrap();
    let key = "cg:events:readonly";
    // No back-off between the calls: each one below reaches the server.
    let write = |n| {
        store::pipeline(
            &endpoint,
            Pool::Events,
            TIMEOUT,
            Duration::ZERO,
            &xadds(key, n),
        )
    };

    let first = write(2);
    assert!(first.error.is_none(), "{:?}", first.error);
    assert_eq!(first.values.len(), 2);
    assert_eq!(workers(&v), 1, "the pooled connection is kept");

    // Demoted: a replica of a primary that is not there refuses every write.
    let nowhere = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(nowhere)
        .query(&mut v.connection())
        .unwrap();
    let refused = write(3);
    let error = refused.error.expect("a failure, not replies").to_string();
    assert!(error.contains("read only replica"), "{error}");
    // Not replies: nothing counts as written (an error reply would be a value each).
    assert!(refused.values.is_empty(), "{:?}", refused.values);
    // Broken: the kept connection and the one opened again were both dropped.
    assert_eq!(
        workers(&v),
        0,
        "the connection to the demoted server was dropped"
    );

    // A primary again: the next batch is written on a connection of its own.
    let _: () = redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut v.connection())
        .unwrap();
    let again = write(3);
    assert!(again.error.is_none(), "{:?}", again.error);
    assert_eq!(again.values.len(), 3);
    let len: usize = redis::cmd("XLEN")
        .arg(key)
        .query(&mut v.connection())
        .unwrap();
    assert_eq!(len, 5);
}
