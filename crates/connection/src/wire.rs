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
//!   an idle timeout); such a connection is replaced before anything is sent. Once any
//!   byte of a command (or of a pipeline) was written, [`Wire::sent`] counts it: a call that
//!   fails after that leaves its outcome unknown (a reply lost, cut, unreadable or of the
//!   wrong shape alike), and the caller must not send it again ([`crate::reconnect_once`]
//!   does not).
//!
//! Replies are read into a buffer of the connection's own and cut at the end of each
//! whole RESP value ([`frame_end`], by hand: it is what tells a reply from bytes nobody
//! asked for, which then mark the connection out of step), then parsed by redis-rs's
//! [`redis::parse_redis_value`] (RESP2 and RESP3). [`Sock`] does the waiting. TLS is
//! rustls's, driven over the same socket.
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

use checkout_guard_config::Tls;
use redis::{ConnectionLike, ErrorKind, RedisError, RedisResult, Value};

use crate::errors::timed_out;

/// The socket under a connection: TCP or a Unix socket, non-blocking, with the deadline
/// of the command in flight. Its `Read` and `Write` wait for the socket until that
/// deadline (through `EINTR`) and fail with `TimedOut` at it.
pub(crate) struct Sock {
    kind: SockKind,
    deadline: Instant,
    /// Bytes written to the socket (over TLS, records): whether a command may have reached
    /// the server.
    wrote: u64,
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
                Ok(n) => {
                    self.wrote += n as u64;
                    return Ok(n);
                }
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
pub(crate) enum Limit {
    Until(Instant),
    Each(Duration),
}

impl Limit {
    /// When a command sent now must end.
    pub(crate) fn deadline(self) -> Instant {
        match self {
            Limit::Until(d) => d,
            Limit::Each(t) => Instant::now() + t,
        }
    }
}

/// An open connection to one server (see the module's doc).
pub struct Wire {
    stream: Stream,
    /// Bytes read and not yet parsed, `buf[..filled]` (the rest is room, zeroed once when
    /// the buffer grows): nothing between calls on a connection in step.
    buf: Vec<u8>,
    filled: usize,
    /// How far the reply being read was scanned ([`frame_end`] resumes there).
    scan: Scan,
    db: i64,
    limit: Limit,
    /// Sends (a command or a pipeline) of which a byte was written: such a send may have
    /// reached the server and run.
    sent: u64,
    /// False once a write or read failed: the stream may be out of step.
    open: bool,
}

/// The longest reply read (Valkey's own default `proto-max-bulk-len`): a peer announcing
/// more is refused rather than buffered.
const MAX_REPLY: usize = 512 << 20;

/// Room kept between replies; more, grown for a long reply, is given back after it.
const BUF_KEPT: usize = 1 << 20;

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
            Target::Unix(path) => (SockKind::Unix(connect_unix(path, deadline)?), None),
        };
        let sock = Sock {
            kind,
            deadline,
            wrote: 0,
        };
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
            buf: Vec::new(),
            filled: 0,
            scan: Scan::default(),
            db: 0,
            limit: Limit::Until(deadline),
            sent: 0,
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

    /// Sends of which a byte was written, since the connection opened: a call that failed
    /// after this count grew may have run in the server.
    pub fn sent(&self) -> u64 {
        self.sent
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
        // A reply's bytes past its end, read with it: nobody asked for them.
        let dead = self.filled > 0
            || match &mut self.stream {
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
        let deadline = self.limit.deadline();
        if Instant::now() >= deadline {
            return Err(timed_out());
        }
        self.stream.sock().deadline = deadline;
        Ok(())
    }

    fn send(&mut self, bytes: &[u8]) -> RedisResult<()> {
        self.begin()?;
        let before = self.stream.sock().wrote;
        let written = match &mut self.stream {
            Stream::Plain(s) => s.write_all(bytes),
            Stream::Tls(s) => s.write_all(bytes).and_then(|_| s.flush()),
        };
        // A byte on the wire: the server may have a whole command of it (of a pipeline,
        // the ones before the break), and may run it.
        if self.stream.sock().wrote > before {
            self.sent += 1;
        }
        if let Err(e) = written {
            // The stream is out of step.
            self.open = false;
            return Err(e.into());
        }
        Ok(())
    }

    /// The next reply (RESP3 push messages skipped), by the command's deadline.
    fn recv(&mut self) -> RedisResult<Value> {
        let read = self.recv_inner();
        if read.is_err() {
            self.open = false;
        }
        read
    }

    fn recv_inner(&mut self) -> RedisResult<Value> {
        loop {
            match frame_end(&self.buf[..self.filled], &mut self.scan)? {
                Some(end) => {
                    let value = redis::parse_redis_value(&self.buf[..end]);
                    self.buf.copy_within(end..self.filled, 0);
                    self.filled -= end;
                    // A long reply's room is not kept for the small ones that follow.
                    if self.filled == 0 && self.buf.len() > BUF_KEPT {
                        self.buf = Vec::new();
                    }
                    match value? {
                        Value::Push { .. } => {}
                        v => return Ok(v),
                    }
                }
                None => {
                    if self.filled == self.buf.len() {
                        // Room doubles (zeroed only then): a long reply costs linear time.
                        if self.buf.len() >= MAX_REPLY {
                            return Err(RedisError::from((
                                ErrorKind::Parse,
                                "reply too long",
                                format!("over {} MiB", MAX_REPLY >> 20),
                            )));
                        }
                        let grown = (self.buf.len() * 2).clamp(16 << 10, MAX_REPLY);
                        self.buf.resize(grown, 0);
                    }
                    let room = &mut self.buf[self.filled..];
                    let n = match &mut self.stream {
                        Stream::Plain(s) => s.read(room),
                        Stream::Tls(s) => s.read(room),
                    }?;
                    if n == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the server closed the connection",
                        )
                        .into());
                    }
                    self.filled += n;
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
        self.send(packed)?;
        for _ in 0..count {
            into.push(self.recv()?);
        }
        Ok(())
    }

    /// Sends one command and reads its reply (an error reply is `Value::ServerError`).
    pub(crate) fn call_packed(&mut self, packed: &[u8]) -> RedisResult<Value> {
        self.send(packed)?;
        self.recv()
    }
}

/// The `count` commands packed one after another in `packed`, each its own slice (a
/// packed command is a RESP array, so [`frame_end`] finds where it ends).
pub(crate) fn command_ends(packed: &[u8], count: usize) -> RedisResult<Vec<&[u8]>> {
    let mut out = Vec::with_capacity(count);
    let mut rest = packed;
    for _ in 0..count {
        let end = frame_end(rest, &mut Scan::default())?
            .ok_or_else(|| RedisError::from((ErrorKind::Client, "a packed command cut short")))?;
        out.push(&rest[..end]);
        rest = &rest[end..];
    }
    Ok(out)
}

/// How far [`frame_end`] got in a reply not all there yet: the start of the next value to
/// read, and how many values are still to be read (0: a new reply).
#[derive(Debug, Default, Clone, Copy, PartialEq)]
struct Scan {
    pos: usize,
    pending: u64,
}

/// Where the first whole RESP value (RESP2 or RESP3) in `buf` ends; `None` while it is not
/// all there, `scan` then keeping how far it got, so the next call (with more bytes) goes
/// on from there: a long reply read in many pieces is scanned once. Bytes that are not
/// RESP are an error (the stream is out of step). A value's parts are counted, not
/// recursed into, so nesting costs no stack.
fn frame_end(buf: &[u8], scan: &mut Scan) -> RedisResult<Option<usize>> {
    let bad = |what: String| RedisError::from((ErrorKind::Parse, "not a RESP reply", what));
    if scan.pending == 0 {
        *scan = Scan { pos: 0, pending: 1 };
    }
    while scan.pending > 0 {
        let start = scan.pos;
        let Some(&kind) = buf.get(start) else {
            return Ok(None);
        };
        let Some(nl) = buf[start..].windows(2).position(|w| w == b"\r\n") else {
            return Ok(None);
        };
        let line = &buf[start + 1..start + nl];
        let mut pos = start + nl + 2;
        let count = || -> RedisResult<i64> {
            std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.parse::<i64>().ok())
                .ok_or_else(|| bad(format!("a length of {:?}", String::from_utf8_lossy(line))))
        };
        let parts = match kind {
            b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => 0,
            // Bulk string, bulk error, verbatim string: the length, the bytes, CRLF.
            b'$' | b'!' | b'=' => {
                let n = count()?;
                if n >= 0 {
                    let end = pos.saturating_add(n as usize).saturating_add(2);
                    if buf.len() < end {
                        return Ok(None);
                    }
                    if &buf[end - 2..end] != b"\r\n" {
                        return Err(bad(format!("a bulk of {n} bytes not ended by CRLF")));
                    }
                    pos = end;
                }
                0
            }
            b'*' | b'~' | b'>' => count()?.max(0) as u64,
            b'%' => 2 * count()?.max(0) as u64,
            // Attributes: a map, then the value they describe.
            b'|' => 2 * count()?.max(0) as u64 + 1,
            other => return Err(bad(format!("a reply starting with byte {other:#04x}"))),
        };
        scan.pos = pos;
        scan.pending = scan.pending - 1 + parts;
    }
    let end = scan.pos;
    *scan = Scan::default();
    Ok(Some(end))
}

/// A Unix socket connection to `path` by `deadline`: a non-blocking connect, so a server
/// whose backlog is full (stopped, overloaded) fails it at the deadline rather than
/// holding the caller (a blocking connect waits for room as long as it takes).
fn connect_unix(path: &std::path::Path, deadline: Instant) -> io::Result<UnixStream> {
    use std::os::fd::FromRawFd;
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: zeroed is a valid sockaddr_un; the path is copied within sun_path below.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the socket's path is too long",
        ));
    }
    for (dst, src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: a new socket; owned by the UnixStream from here on (closed on every return).
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a valid socket this function just opened and owns alone.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            "timed out: the server did not accept the connection",
        )
    };
    loop {
        // SAFETY: addr is a sockaddr_un of its full size.
        let r = unsafe {
            libc::connect(
                fd,
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(stream);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            // The backlog is full: room may come; asked again each millisecond.
            Some(libc::EAGAIN) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                std::thread::sleep(left.min(Duration::from_millis(1)));
            }
            Some(libc::EINPROGRESS) => {
                let sock = Sock {
                    kind: SockKind::Unix(stream),
                    deadline,
                    wrote: 0,
                };
                sock.wait(libc::POLLOUT).map_err(|_| timed_out())?;
                let SockKind::Unix(stream) = sock.kind else {
                    unreachable!("made above")
                };
                return match stream.take_error()? {
                    None => Ok(stream),
                    Some(e) => Err(e),
                };
            }
            _ => return Err(e),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value, fed a byte more at a time and all at once, ends where it ends; the
    /// scan goes on from where it stopped, never from the start.
    #[test]
    fn a_value_ends_where_it_ends_however_it_arrives() {
        let values: [&[u8]; 8] = [
            b"+OK\r\n",
            b"$-1\r\n",
            b"*-1\r\n",
            b"$5\r\nab\r\nc\r\n",
            b"*3\r\n:1\r\n*2\r\n$1\r\nx\r\n_\r\n%1\r\n+k\r\n,1.5\r\n",
            b">2\r\n+invalidate\r\n*0\r\n",
            b"|1\r\n+ttl\r\n:3\r\n$2\r\nhi\r\n",
            b"*0\r\n",
        ];
        for v in values {
            let mut with_more = v.to_vec();
            with_more.extend_from_slice(b":9\r\n");
            let mut scan = Scan::default();
            for cut in 0..v.len() {
                assert_eq!(
                    frame_end(&with_more[..cut], &mut scan).unwrap(),
                    None,
                    "{cut} of {v:?}"
                );
                assert!(scan.pos <= cut, "{v:?}");
            }
            assert_eq!(
                frame_end(&with_more, &mut scan).unwrap(),
                Some(v.len()),
                "{v:?}"
            );
            assert_eq!(scan, Scan::default());
            assert_eq!(
                frame_end(&with_more, &mut Scan::default()).unwrap(),
                Some(v.len())
            );
            redis::parse_redis_value(v).unwrap();
        }
    }

    #[test]
    fn bytes_that_are_not_resp_are_an_error() {
        for v in [&b"?garbled\r\n"[..], b"$x\r\n", b"$2\r\nabcd\r\n"] {
            assert!(frame_end(v, &mut Scan::default()).is_err(), "{v:?}");
        }
    }
}
