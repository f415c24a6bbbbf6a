//! TCP ports on loopback for the servers a test binary starts.
//!
//! A test binary runs its tests in parallel, and the kernel hands a released port out again
//! (2,000 `bind(0)`s here gave 134 repeats), so two tests could start their servers on one
//! port: the server that loses the race exits and its test talks to the other's. Every port
//! this binary handed out is kept and never handed out again.
//!
//! The ports come from below the kernel's ephemeral range when it leaves room (Linux's
//! default starts at 32768): a port in the range can become the local end of any outgoing
//! connection before the server binds it.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher};
use std::net::TcpListener;
use std::sync::Mutex;

static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The first port of the kernel's ephemeral range (`ip_local_port_range`), 0 if unknown.
pub fn ephemeral_low() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|w| w.parse().ok()))
        .unwrap_or(0)
}

/// A port free on 127.0.0.1 now that this binary never handed out before.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    for _ in 0..100_000 {
        let want = if low >= 11_024 {
            // A random port of the 10,000 below the range (RandomState: no rand crate for
            // the tests).
            let r = std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish();
            low - 10_000 + (r % 10_000) as u16
        } else {
            0
        };
        let Ok(listener) = TcpListener::bind(("127.0.0.1", want)) else {
            continue;
        };
        let port = listener.local_addr().expect("local_addr").port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return port;
        }
    }
    panic!("no free loopback port this test binary has not handed out already");
}
