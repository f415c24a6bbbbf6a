//! One server's connection, written here rather than taken from redis-rs: the socket is
//! this crate's, so every call keeps three promises redis-rs's blocking connection cannot.
//!
//! - **One deadline per call.** Every write and every read of a call waits at most until
//!   the call's deadline (`poll()` on a non-blocking socket), so a peer that trickles its
//!   reply a byte at a time, or announces a long reply and never ends it, holds the caller
//!   no longer than its timeout. (redis-rs sets `SO_RCVTIMEO`, which bounds each `recv()`
//!   alone: a byte every 30 ms kept a 50 ms call waiting 1.5 s.)
//! - **Signals are not failures.** A handled signal during a wait (`pcntl_signal()`, a
//!   sampling profiler's `SIGPROF`) interrupts `poll()` or `recv()` with `EINTR`; the wait
//!   goes on until the same deadline. (Linux never restarts `recv()` on a socket with
//!   `SO_RCVTIMEO`, even with `SA_RESTART`: redis-rs took `EINTR` for a broken connection.)
//! - **At most once.** A command is sent only on a connection known to be in step: before
//!   a call's first write, [`Wire::closed_while_idle`] looks (without blocking) whether the
//!   server closed the connection or sent something unasked while it was idle (a restart,
//!   an idle timeout); such a connection is replaced before anything is sent. Once a
//!   command was written in full, [`Wire::unanswered`] counts it until its reply is read:
//!   a failure with a command unanswered leaves its outcome unknown, and the caller must not
//!   send it again ([`crate::reconnect_once`] does not).
//!
//! Replies are parsed by redis-rs's own [`redis::Parser`] (RESP2 and RESP3), reading
//! through [`Sock`], which does the waiting. TLS is rustls's, driven over the same socket.
//!
//! Why by hand: this is the hot path of every decision (one write, one `poll()`, one read;
//! one more non-blocking `recv(MSG_PEEK)` for the idle check), and the three promises
//! above are about the socket calls themselves.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkout_guard_model::Tls;
use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use crate::errors::timed_out;

/// The socket under a connection: TCP or a Unix socket, non-blocking, with the deadline
/// of the command in flight. Its `Read` and `Write` wait for the socket until that
/// deadline (through `EINTR`) and fail with `TimedOut` at it.
pub(crate) struct Sock {
    kind: SockKind,
    deadline: Instant,
}

enum SockKind {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn fd(&self) -> RawFd {
        match &self.kind {
            SockKind::Tcp(s) => s.as_raw_fd(),
            SockKind::Unix(s) => s.as_raw_fd(),
        }
    }

    /// Waits until the socket is ready for `events` (`POLLIN`, `POLLOUT`) or has an error
    /// or hang-up to report, at most until the deadline; a signal does not end the wait.
    fn wait(&self, events: libc::c_short) -> io::Result<()> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
            }
            // Rounded up: a wait never ends before the deadline (the loop checks it).
            let ms = left
                .as_micros()
                .div_ceil(1000)
                .min(libc::c_int::MAX as u128) as libc::c_int;
            let mut pfd = libc::pollfd {
                fd: self.fd(),
                events,
                revents: 0,
            };
            // SAFETY: one valid pollfd, its count 1.
            let n = unsafe { libc::poll(&mut pfd, 1, ms) };
            if n > 0 {
                return Ok(());
            }
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }

    fn raw_read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match &mut self.kind {
            SockKind::Tcp(s) => s.read(buf),
            SockKind::Unix(s) => s.read(buf),
        }
    }

    fn raw_write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match &mut self.kind {
            SockKind::Tcp(s) => s.write(buf),
            SockKind::Unix(s) => s.write(buf),
        }
    }

    /// What a non-blocking look at the socket finds: `Ok(true)` when it is readable now
    /// (data, or the server's close), `Ok(false)` when nothing is there.
    fn readable_now(&self) -> io::Result<bool> {
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        loop {
            // SAFETY: one valid pollfd, its count 1; timeout 0 does not block.
            let n = unsafe { libc::poll(&mut pfd, 1, 0) };
            if n >= 0 {
                return Ok(n > 0);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            self.wait(libc::POLLIN)?;
            match self.raw_read(buf) {
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                    ) => {}
                other => return other,
            }
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            if Instant::now() >= self.deadline {
                return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
            }
            match self.raw_write(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(libc::POLLOUT)?,
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The byte stream of a connection: the socket itself, or rustls over it.
enum Stream {
    Plain(Sock),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, Sock>>),
}

impl Stream {
    fn sock(&mut self) -> &mut Sock {
        match self {
            Stream::Plain(s) => s,
            Stream::Tls(t) => &mut t.sock,
        }
    }
}

/// How long a command may take: until the deadline of the call it is part of, or its own
/// timeout from when it is sent.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Until(Instant),
    Each(Duration),
}

/// An open connection to one server (see the module's doc).
pub struct Wire {
    stream: Stream,
    parser: redis::Parser,
    db: i64,
    limit: Limit,
    /// Commands written in full whose replies were not read yet.
    unanswered: usize,
    /// False once a write or read failed: the stream may be out of step.
    open: bool,
}

/// Where to connect: a TCP address (with TLS or without) or a Unix socket.
pub(crate) enum Target<'a> {
    Tcp {
        host: &'a str,
        port: u16,
        tls: Option<&'a Tls>,
    },
    Unix(&'a std::path::Path),
}

impl Wire {
    /// Connects to `target` by `deadline` (TCP connect and, over TLS, the handshake); the
    /// set-up (AUTH, SELECT, ...) is the caller's, by the same deadline.
    pub(crate) fn connect(target: Target<'_>, deadline: Instant) -> RedisResult<Self> {
        let (kind, tls) = match target {
            Target::Tcp { host, port, tls } => {
                let tcp = connect_tcp(host, port, deadline)?;
                tcp.set_nodelay(true)?;
                (SockKind::Tcp(tcp), tls.map(|t| (t, host)))
            }
            Target::Unix(path) => (SockKind::Unix(UnixStream::connect(path)?), None),
        };
        let sock = Sock { kind, deadline };
        match &sock.kind {
            SockKind::Tcp(s) => s.set_nonblocking(true)?,
            SockKind::Unix(s) => s.set_nonblocking(true)?,
        }
        let stream = match tls {
            None => Stream::Plain(sock),
            Some((tls, host)) => {
                let (config, name) = crate::tls::wire_config(tls, host)?;
                let conn = rustls::ClientConnection::new(Arc::new(config), name)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                let mut s = rustls::StreamOwned::new(conn, sock);
                while s.conn.is_handshaking() {
                    s.conn.complete_io(&mut s.sock)?;
                }
                Stream::Tls(Box::new(s))
            }
        };
        Ok(Self {
            stream,
            parser: redis::Parser::new(),
            db: 0,
            limit: Limit::Until(deadline),
            unanswered: 0,
            open: true,
        })
    }

    /// The database the set-up selected (for `get_db`).
    pub(crate) fn set_db(&mut self, db: i64) {
        self.db = db;
    }

    /// Every command of what follows ends by `deadline`.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.limit = Limit::Until(deadline);
    }

    /// Every command of what follows gets `timeout` from when it is sent.
    pub fn set_each(&mut self, timeout: Duration) {
        self.limit = Limit::Each(timeout);
    }

    /// Commands written in full whose replies were not read: after a failure, their
    /// outcome is unknown (the server may have run them).
    pub fn unanswered(&self) -> usize {
        self.unanswered
    }

    /// Whether the connection cannot be used for a command now, found without blocking and
    /// without sending anything: it failed before, or, idle, it was closed by the server
    /// (restart, idle timeout, a reset) or holds bytes nobody asked for (out of step). Over
    /// TLS, records that arrived while idle (a session ticket) are read and only a close
    /// or application data counts.
    pub fn closed_while_idle(&mut self) -> bool {
        if !self.open {
            return true;
        }
        let dead = match &mut self.stream {
            Stream::Plain(sock) => match sock.readable_now() {
                Ok(false) => false,
                // Readable while idle: EOF, an error, or unasked bytes: all out of step.
                _ => true,
            },
            Stream::Tls(s) => tls_closed_while_idle(s),
        };
        if dead {
            self.open = false;
        }
        dead
    }

    fn begin(&mut self) -> RedisResult<()> {
        if !self.open {
            return Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the connection failed before",
            )
            .into());
        }
        let deadline = match self.limit {
            Limit::Until(d) => d,
            Limit::Each(t) => Instant::now() + t,
        };
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        self.stream.sock().deadline = deadline;
        Ok(())
    }

    fn send(&mut self, bytes: &[u8], replies: usize) -> RedisResult<()> {
        self.begin()?;
        let written = match &mut self.stream {
            Stream::Plain(s) => s.write_all(bytes),
            Stream::Tls(s) => s.write_all(bytes).and_then(|_| s.flush()),
        };
        if let Err(e) = written {
            // Not written in full: the server never saw the whole command, so never ran
            // it. The stream is out of step all the same.
            self.open = false;
            return Err(e.into());
        }
        self.unanswered += replies;
        Ok(())
    }

    /// The next reply (RESP3 push messages skipped), by the command's deadline.
    fn recv(&mut self) -> RedisResult<Value> {
        loop {
            let read = match &mut self.stream {
                Stream::Plain(s) => self.parser.parse_value(s),
                Stream::Tls(s) => self.parser.parse_value(&mut **s),
            };
            match read {
                Ok(Value::Push { .. }) => {}
                Ok(v) => {
                    self.unanswered = self.unanswered.saturating_sub(1);
                    return Ok(v);
                }
                Err(e) => {
                    self.open = false;
                    return Err(e);
                }
            }
        }
    }

    /// Sends `packed` (`count` commands) and reads their replies into `into`, the first
    /// reply not in by the deadline ending the call. What was read stays in `into`.
    pub(crate) fn pipeline_into(
        &mut self,
        packed: &[u8],
        count: usize,
        into: &mut Vec<Value>,
    ) -> RedisResult<()> {
        self.send(packed, count)?;
        for _ in 0..count {
            into.push(self.recv()?);
        }
        Ok(())
    }

    /// Sends one command and reads its reply (an error reply is `Value::ServerError`).
    pub(crate) fn call_packed(&mut self, packed: &[u8]) -> RedisResult<Value> {
        self.send(packed, 1)?;
        self.recv()
    }
}

/// A TCP connection to `host:port` by `deadline`: each address the name resolves to in
/// turn, within what is left; the last one's error when none answers.
pub(crate) fn connect_tcp(host: &str, port: u16, deadline: Instant) -> RedisResult<TcpStream> {
    let mut last = None;
    for addr in (host, port).to_socket_addrs()? {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out());
        }
        match TcpStream::connect_timeout(&addr, left) {
            Ok(s) => return Ok(s),
            Err(e) => last = Some(e),
        }
    }
    Err(match last {
        Some(e) => e.into(),
        None => RedisError::from((
            ErrorKind::InvalidClientConfig,
            "could not resolve to any addresses",
        )),
    })
}

/// Over TLS, whether the connection was closed or went out of step while idle: the
/// records waiting are read without blocking and processed (a TLS 1.3 session ticket is
/// not a close).
fn tls_closed_while_idle(s: &mut rustls::StreamOwned<rustls::ClientConnection, Sock>) -> bool {
    loop {
        match s.sock.readable_now() {
            Ok(false) => {}
            Ok(true) => {
                // Readable: a record, the server's close, or an error.
                let mut raw = RawRead(&mut s.sock);
                match s.conn.read_tls(&mut raw) {
                    Ok(0) => return true,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(_) => return true,
                }
                match s.conn.process_new_packets() {
                    Ok(state) => {
                        if state.peer_has_closed() || state.plaintext_bytes_to_read() > 0 {
                            return true;
                        }
                        continue;
                    }
                    Err(_) => return true,
                }
            }
            Err(_) => return true,
        }
        return false;
    }
}

/// The socket read once, without waiting (for the idle look).
struct RawRead<'a>(&'a mut Sock);

impl Read for RawRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.raw_read(buf)
    }
}

impl ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.call_packed(cmd)
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let mut all = Vec::with_capacity(offset + count);
        self.pipeline_into(cmd, offset + count, &mut all)?;
        // A transaction (MULTI ... EXEC): the answers before `offset` (QUEUED) are not
        // returned, but an error among them aborts it (as redis-rs's own connection).
        if let Some(Value::ServerError(e)) = all[..offset]
            .iter()
            .find(|v| matches!(v, Value::ServerError(_)))
        {
            return Err(e.clone().into());
        }
        Ok(all.split_off(offset))
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        self.open
    }
}
