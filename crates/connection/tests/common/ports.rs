//! TCP ports on loopback for the servers a test binary starts.
//!
//! A test binary runs its tests in parallel, and the kernel hands a released port out again
//! (2,000 `bind(0)`s here gave 134 repeats), so two tests could start their servers on one
//! port: the server that loses the race exits and its test talks to the other's. Every port
//! this binary handed out is kept and never handed out again.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;

static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A port free on 127.0.0.1 now that this binary never handed out before.
pub fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("local_addr")
            .port();
        if HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port)
        {
            return port;
        }
    }
}
