//! The connection layer against a scripted server: a TCP listener in a thread that writes
//! what the test gives it, so a server that answers late, never, or hangs up is exact and
//! needs no Valkey. Every wait here is a timeout the layer must cut short, never a sleep.

mod dns_blackhole;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use checkout_guard_config::Endpoint;
use checkout_guard_connection::redis::{self, ErrorKind};
use checkout_guard_connection::{reconnect_once, Budget, Client, Connection, Failure};

/// The replies to the set-up of a connection without credentials or database: the two
/// `CLIENT SETINFO`.
const SETUP: &[u8] = b"+OK\r\n+OK\r\n";

/// A hang hangs for this long: far more than any bound a test asserts.
const FOREVER: Duration = Duration::from_secs(30);

/// A server on a free port; `serve` gets each accepted connection in turn.
fn server(serve: impl FnOnce(&TcpListener) + Send + 'static) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let handle = std::thread::spawn(move || serve(&listener));
    (url, handle)
}

/// Writes `bytes` at once, then holds the connection open without a word more until the
/// client goes (or [`FOREVER`]).
fn answer_then_hang(stream: &mut TcpStream, bytes: &[u8]) {
    stream.write_all(bytes).unwrap();
    stream.set_read_timeout(Some(FOREVER)).unwrap();
    let mut sink = [0u8; 4096];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
}

fn endpoint(url: &str) -> Endpoint {
    Endpoint::parse(url).unwrap()
}

fn ping(c: &mut dyn redis::ConnectionLike) -> redis::RedisResult<String> {
    redis::cmd("PING").query(c)
}

/// Connect and set-up share one deadline: a server that accepts and never answers the
/// set-up fails the open within its timeout, as a timeout.
#[test]
fn opening_against_a_server_that_never_answers_ends_within_the_timeout() {
    let (url, _server) = server(|l| answer_then_hang(&mut l.accept().unwrap().0, b""));
    let started = Instant::now();
    let e = Connection::open(&endpoint(&url), Client::WORKER, Duration::from_millis(200))
        .err()
        .expect("nothing answered");
    assert!(e.is_timeout(), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// The set-up is one round trip: AUTH, SELECT and the client's name pipelined, in that
/// order; a refused AUTH is an authentication failure that says why.
#[test]
fn the_set_up_is_one_pipeline_and_a_refused_auth_says_so() {
    let (seen_tx, seen_rx) = mpsc::channel();
    let (url, serving) = server(move |l| {
        let (mut s, _) = l.accept().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let end = format!("{}\r\n", checkout_guard_model::VERSION);
        while !got.ends_with(end.as_bytes()) {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client went before its set-up: {got:?}");
            got.extend_from_slice(&buf[..n]);
        }
        seen_tx
            .send(String::from_utf8_lossy(&got).into_owned())
            .unwrap();
        s.write_all(b"-WRONGPASS invalid username-password pair\r\n+OK\r\n+OK\r\n+OK\r\n")
            .unwrap();
    });
    let url = url.replace("redis://", "redis://app:s3cret@") + "/2";
    let e = Connection::open(&endpoint(&url), Client::CLI, Duration::from_secs(5))
        .err()
        .expect("AUTH refused");
    assert_eq!(e.kind(), ErrorKind::AuthenticationFailed, "{e}");
    assert!(e.to_string().contains("WRONGPASS"), "{e}");
    let sent = seen_rx.recv().unwrap();
    let at = |what: &str| {
        sent.find(what)
            .unwrap_or_else(|| panic!("no {what} in {sent:?}"))
    };
    assert!(
        at("AUTH") < at("SELECT") && at("SELECT") < at("LIB-NAME"),
        "{sent:?}"
    );
    assert!(
        sent.contains("app\r\n") && sent.contains("s3cret\r\n"),
        "{sent:?}"
    );
    assert!(sent.contains("checkout_guard_cli\r\n"), "{sent:?}");
    serving.join().unwrap();
}

/// Within a call's deadline, a command after the first gets only what is left of it,
/// however long the per-command timeout: the second PING, never answered, ends by the
/// deadline, not after the 20 s timeout.
#[test]
fn within_a_deadline_later_commands_get_only_what_is_left() {
    let (url, _server) =
        server(|l| answer_then_hang(&mut l.accept().unwrap().0, b"+OK\r\n+OK\r\n+PONG\r\n"));
    let mut conn =
        Connection::open(&endpoint(&url), Client::WORKER, Duration::from_secs(5)).unwrap();
    conn.set_timeout(Duration::from_secs(20)).unwrap();
    let started = Instant::now();
    let (first, second) = conn.within(started + Duration::from_millis(300), |c| (ping(c), ping(c)));
    assert_eq!(first.unwrap(), "PONG");
    let e = second.expect_err("never answered");
    assert!(e.is_timeout(), "{e}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A pipeline's replies are read until the first not in by the deadline; those read stay.
#[test]
fn a_pipeline_keeps_the_replies_read_before_its_deadline() {
    let (url, _server) = server(|l| {
        answer_then_hang(
            &mut l.accept().unwrap().0,
            b"+OK\r\n+OK\r\n:1\r\n-ERR no\r\n",
        )
    });
    let mut conn =
        Connection::open(&endpoint(&url), Client::WORKER, Duration::from_secs(5)).unwrap();
    conn.set_timeout(Duration::from_secs(20)).unwrap();
    let mut pipe = redis::pipe();
    pipe.cmd("INCR")
        .arg("a")
        .cmd("INCR")
        .arg("b")
        .cmd("INCR")
        .arg("c");
    let mut values = Vec::new();
    let started = Instant::now();
    let e = conn
        .pipeline_within(
            &pipe.get_packed_pipeline(),
            3,
            started + Duration::from_millis(300),
            &mut values,
        )
        .expect_err("the third reply never comes");
    assert!(e.is_timeout(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(values.len(), 2, "{values:?}");
    assert_eq!(values[0], redis::Value::Int(1));
    assert!(
        matches!(values[1], redis::Value::ServerError(_)),
        "{values:?}"
    );
}

/// Counts the connections a call opened.
fn opening<'a>(
    url: &'a str,
    opened: &'a mut u32,
) -> impl FnMut(Duration) -> redis::RedisResult<Connection> + 'a {
    move |left| {
        *opened += 1;
        Connection::open(&endpoint(url), Client::WORKER, left)
    }
}

/// A kept connection that broke while idle is replaced once, transparently; one this call
/// opened and that broke is not (the endpoint is down: the caller reports it).
#[test]
fn a_broken_kept_connection_is_replaced_once_a_fresh_one_is_not() {
    let (hang_up, hung_up) = mpsc::channel::<()>();
    let (done, closed) = mpsc::channel::<()>();
    let (url, serving) = server(move |l| {
        let (mut first, _) = l.accept().unwrap();
        first.write_all(b"+OK\r\n+OK\r\n+PONG\r\n").unwrap();
        hung_up.recv().unwrap();
        drop(first);
        done.send(()).unwrap();
        answer_then_hang(&mut l.accept().unwrap().0, b"+OK\r\n+OK\r\n+PONG\r\n");
    });
    let budget = || Budget::starting_now(Duration::from_secs(5));
    let mut kept = None;
    let mut opened = 0;
    let r = reconnect_once(&mut kept, budget(), opening(&url, &mut opened), |c| {
        c.each_command(ping)
    });
    assert_eq!((r.unwrap(), opened), ("PONG".to_string(), 1));
    // The server hangs up the idle connection.
    hang_up.send(()).unwrap();
    closed.recv().unwrap();
    let r = reconnect_once(&mut kept, budget(), opening(&url, &mut opened), |c| {
        c.each_command(ping)
    });
    assert_eq!((r.unwrap(), opened), ("PONG".to_string(), 2));
    assert!(kept.is_some());
    drop(kept);
    serving.join().unwrap();

    // A server that hangs up right after the set-up: the fresh connection's failure is the
    // call's (a second connection would be accepted by the listen backlog and then time
    // out in its set-up: a failure to open, not this one).
    let (url, _server) = server(|l| {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(SETUP).unwrap();
        s.shutdown(std::net::Shutdown::Both).unwrap();
        // Held (shut) until the test is over: no second accept.
        std::thread::park();
    });
    let mut kept = None;
    let mut opened = 0;
    let short = Budget::starting_now(Duration::from_millis(500));
    let r = reconnect_once(&mut kept, short, opening(&url, &mut opened), |c| {
        c.each_command(ping)
    });
    // Either the PING was written before the hang-up was seen (its outcome unknown), or
    // its write already failed (EPIPE: never sent); never sent again on a new connection.
    assert!(
        matches!(r, Err(Failure::Unknown(_)) | Err(Failure::Broken(_))),
        "{r:?}"
    );
    assert_eq!(opened, 1);
    assert!(kept.is_none(), "a broken connection is dropped");
}

/// Valkey's error reply leaves the connection in step: kept, and the call not repeated.
#[test]
fn an_error_reply_keeps_the_connection_and_is_not_repeated() {
    let (url, _server) = server(|l| {
        answer_then_hang(
            &mut l.accept().unwrap().0,
            b"+OK\r\n+OK\r\n-OOM no memory\r\n",
        )
    });
    let mut kept = None;
    let mut opened = 0;
    let mut calls = 0;
    let r = reconnect_once(
        &mut kept,
        Budget::starting_now(Duration::from_secs(5)),
        opening(&url, &mut opened),
        |c| {
            calls += 1;
            c.each_command(ping)
        },
    );
    assert!(
        matches!(&r, Err(Failure::Reply(e)) if e.to_string().contains("OOM")),
        "{r:?}"
    );
    assert_eq!((opened, calls), (1, 1));
    assert!(kept.is_some());
}

/// A call whose budget is spent before it could open a connection opens none.
#[test]
fn no_connection_is_opened_once_the_budget_is_spent() {
    let mut kept: Option<Connection> = None;
    let r = reconnect_once(
        &mut kept,
        Budget::starting_now(Duration::ZERO),
        |_| panic!("opened with no time left"),
        |c| c.each_command(ping),
    );
    assert!(matches!(r, Err(Failure::NoTimeLeft)), "{r:?}");
}

/// A connection opened by the call gets what is left of its budget as the command
/// timeout: a server that answers the set-up and then nothing fails the command by the
/// budget, not later.
#[test]
fn a_fresh_connections_commands_get_what_is_left_of_the_budget() {
    let (url, _server) = server(|l| answer_then_hang(&mut l.accept().unwrap().0, SETUP));
    let mut kept = None;
    let mut opened = 0;
    let started = Instant::now();
    let r = reconnect_once(
        &mut kept,
        Budget::starting_now(Duration::from_millis(300)),
        opening(&url, &mut opened),
        |c| c.each_command(ping),
    );
    // The PING was sent and its reply never came: a timeout, its outcome unknown.
    assert!(
        matches!(&r, Err(Failure::Unknown(e)) if e.is_timeout()),
        "{r:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A host name is looked up and opened like an address (the open runs beside the caller,
/// [`Connection::open`]'s bound on the resolver): the connection it gives works.
#[test]
fn a_host_name_is_opened_like_an_address() {
    let (url, _server) = server(|l| {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(SETUP).unwrap();
        let mut buf = [0u8; 4096];
        // The PING, then its answer.
        let _ = s.read(&mut buf).unwrap();
        answer_then_hang(&mut s, b"+PONG\r\n");
    });
    let url = url.replace("127.0.0.1", "localhost");
    let mut c = Connection::open(&endpoint(&url), Client::WORKER, Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    c.set_timeout(Duration::from_secs(5)).unwrap();
    assert_eq!(c.each_command(ping).unwrap(), "PONG");
}

/// The environment variable that makes [`dns_lookup_that_never_ends`] run: set by
/// [`a_name_the_resolver_never_answers_ends_within_the_timeout`] in the child it starts.
const DNS_CHILD: &str = "CG_TEST_DNS_CHILD";

/// A host name whose DNS server never answers (a UDP socket that reads and says nothing):
/// the open ends within its timeout, as a timeout that names the lookup, long before the
/// resolver gives up (resolv.conf's `timeout:30`). The resolver is the system's, so the
/// test runs itself again in a mount namespace of its own (`unshare -m`, root only) with
/// /etc/resolv.conf bind-mounted to name that socket; not root: skipped, said on stderr.
#[test]
fn a_name_the_resolver_never_answers_ends_within_the_timeout() {
    dns_blackhole::run_child_without_dns("dns_lookup_that_never_ends", DNS_CHILD, "127.0.0.153");
}

/// The child of [`a_name_the_resolver_never_answers_ends_within_the_timeout`] (ignored when
/// run otherwise: the host's own resolver would answer).
#[test]
#[ignore = "run by a_name_the_resolver_never_answers_ends_within_the_timeout"]
fn dns_lookup_that_never_ends() {
    if std::env::var_os(DNS_CHILD).is_none() {
        return;
    }
    for url in [
        "redis://valkey.cg-test.example:6379",
        "rediss://valkey.cg-test.example:6380",
    ] {
        let started = Instant::now();
        let e = Connection::open(&endpoint(url), Client::WORKER, Duration::from_millis(200))
            .err()
            .expect("the name was never looked up");
        let took = started.elapsed();
        eprintln!("{url}: {e} after {took:?}");
        assert!(e.is_timeout(), "{e}");
        assert!(e.to_string().contains("DNS"), "{e}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }
}

/// A Unix socket whose server accepts nothing and whose backlog is full (a Valkey stopped
/// with SIGSTOP): the open ends at its deadline (before: the blocking connect waited 6 s
/// and more, adversarial review).
#[test]
fn a_unix_socket_whose_backlog_is_full_fails_the_open_within_the_timeout() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::UnixListener;
    let dir = std::env::temp_dir().join(format!("cg-backlog-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("full.sock");
    let _listener = UnixListener::bind(&path).unwrap();
    // Fill the backlog with non-blocking connections nobody accepts, until the kernel
    // answers EAGAIN (the backlog is full).
    let mut held: Vec<OwnedFd> = Vec::new();
    // SAFETY: a zeroed sockaddr_un, the path copied within it (short: a temp dir).
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, b) in addr.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *d = *b as libc::c_char;
    }
    loop {
        assert!(held.len() < 100_000, "the backlog never filled");
        // SAFETY: a new socket, owned by `held` below.
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0) };
        assert!(fd >= 0);
        // SAFETY: fd was just opened here.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: addr is a sockaddr_un of its full size.
        let r = unsafe {
            libc::connect(
                fd,
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if r != 0 {
            break;
        }
        held.push(owned);
    }
    let started = Instant::now();
    let e = Connection::open(
        &endpoint(&format!("unix://{}", path.display())),
        Client::WORKER,
        Duration::from_millis(100),
    )
    .err()
    .expect("nobody accepts");
    assert!(e.is_timeout(), "{e}");
    // 0.1 s; a blocking connect waits until room comes (never, here).
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    drop(held);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A long reply (40 MiB, as `limiter status` reads 100,000 events), arriving in pieces, is
/// read whole, in linear time: the scan of a reply goes on from where the last piece
/// ended, and the buffer's room is zeroed only as it doubles (a first cut rescanned and
/// re-zeroed the whole reply at every piece).
#[test]
fn a_long_reply_in_many_pieces_is_read_whole() {
    const LEN: usize = 40 << 20;
    let (url, _server) = server(|l| {
        let (mut s, _) = l.accept().unwrap();
        s.write_all(SETUP).unwrap();
        let mut ask = [0u8; 64];
        let _ = s.read(&mut ask).unwrap();
        s.write_all(format!("${LEN}\r\n").as_bytes()).unwrap();
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..LEN / chunk.len() {
            s.write_all(&chunk).unwrap();
        }
        s.write_all(b"\r\n").unwrap();
        answer_then_hang(&mut s, b"");
    });
    let mut c = Connection::open(&endpoint(&url), Client::CLI, Duration::from_secs(5)).unwrap();
    c.set_timeout(Duration::from_secs(60)).unwrap();
    let started = Instant::now();
    let v: Vec<u8> = c
        .each_command(|c| redis::cmd("GET").arg("k").query(c))
        .unwrap();
    assert_eq!(v.len(), LEN);
    // About 0.1 s here; the quadratic first cut took tens of seconds.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
}
