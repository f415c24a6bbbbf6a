//! A DNS server that never answers, for the tests of a name lookup that must not hold a
//! call: the test binary runs one of its own (ignored) tests again in a mount namespace of
//! its own (`unshare -m`, root only) with /etc/resolv.conf bind-mounted to name a UDP
//! socket that reads and says nothing (resolv.conf's `timeout:30`). Shared by
//! `connection.rs` (a seed's open) and `cluster.rs` (a node named in the slot map).

use std::process::Command;

/// Runs `child` (an `#[ignore]`d test of the current binary that returns at once unless
/// `env` is set) with `env` set, against a DNS server at `addr` (an address of loopback's
/// own /8 that nothing else uses) that never answers; asserts it passed and that a query
/// did reach that server (so the child was really waiting on it). Not root, or no
/// `unshare(1)`: skipped, said on stderr.
pub fn run_child_without_dns(child: &str, env: &str, addr: &str) {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n");
    if !matches!(root, Ok(true)) || Command::new("unshare").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and unshare(1) to give the test its own resolv.conf");
        return;
    }
    // Port 53: resolv.conf has no port.
    let dns =
        std::net::UdpSocket::bind((addr, 53)).unwrap_or_else(|e| panic!("bind {addr}:53: {e}"));
    dns.set_nonblocking(true).unwrap();
    let dir = std::env::temp_dir().join(format!("cg-dns-{child}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("resolv.conf");
    std::fs::write(
        &conf,
        format!("nameserver {addr}\noptions timeout:30 attempts:1\n"),
    )
    .unwrap();
    let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            r#"mount --bind "$0" /etc/resolv.conf && exec "$@""#,
        ])
        .arg(&conf)
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", child, "--include-ignored", "--nocapture"])
        .env(env, "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 passed"), "{said}");
    let mut query = [0u8; 512];
    assert!(dns.recv(&mut query).is_ok(), "no DNS query arrived: {said}");
}
