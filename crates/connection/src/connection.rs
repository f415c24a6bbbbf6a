//! An open connection to an endpoint: one server or a cluster's nodes, opened within a
//! deadline, with its per-command timeout and a call's deadline over several commands.

use std::time::{Duration, Instant};

use checkout_guard_config::{Endpoint, Tls};
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};

use crate::cluster::Cluster;
use crate::errors::timed_out;
use crate::info::{addresses, primary_info, Addresses, Client};
use crate::single::open_single;
use crate::wire::Wire;

enum Link {
    Single(Wire),
    Cluster(Box<Cluster>),
}

/// An open connection: to one server, or to the nodes of a cluster ([`Cluster`]: a
/// connection per node it needed, MOVED and ASK followed, nothing written sent again).
pub struct Connection {
    link: Link,
    /// The per-command (read and write) timeout set on the socket, to skip needless
    /// syscalls; `None` once a call changed it for itself.
    timeout: Option<Duration>,
    /// A Sentinel endpoint's primary (`host:port`) as the sentinels named it.
    primary: Option<String>,
}

impl AsMut<Connection> for Connection {
    fn as_mut(&mut self) -> &mut Connection {
        self
    }
}

impl Connection {
    /// Opens a connection to `endpoint` for `client`, its whole set-up within `timeout`.
    ///
    /// One server: TCP (or Unix socket) connect, then AUTH, SELECT and the two CLIENT
    /// SETINFO (the name in `CLIENT LIST`) pipelined in one round trip whose replies share
    /// the deadline (redis-rs's own set-up waits the whole timeout for each of its replies
    /// in turn when the server does not answer). With RESP3, redis-rs sends HELLO (with
    /// the credentials) itself: one reply, within the same deadline.
    ///
    /// A cluster ([`Cluster::open`]): the slot map asked of the first seed that answers,
    /// within the same deadline; each node is opened as one server when a command is first
    /// routed to it, within that call's deadline.
    ///
    /// The per-command timeout is not set yet: [`Connection::set_timeout`] sets it.
    ///
    /// Over TLS the handshake is part of the set-up, within the same deadline; a failed
    /// one says so with its cause ([`crate::tls::in_handshake`]). With `peer_name`, each
    /// server's certificate is checked against it in the handshake (a cluster's every
    /// node too).
    pub fn open(endpoint: &Endpoint, client: Client, timeout: Duration) -> RedisResult<Self> {
        if needs_name_lookup(endpoint, client)? {
            return open_beside(endpoint, client, timeout);
        }
        Self::open_here(endpoint, client, timeout)
    }

    fn open_here(endpoint: &Endpoint, client: Client, timeout: Duration) -> RedisResult<Self> {
        let deadline = Instant::now() + timeout;
        let tls = endpoint.tls();
        let tcp_tls = |info: &ConnectionInfo| match info.addr() {
            ConnectionAddr::TcpTls { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        };
        let mut primary = None;
        let link = match addresses(endpoint, client)? {
            Addresses::Single(info) => {
                // `peer_name` is checked by the connection's own handshake.
                let at = tcp_tls(&info);
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(timed_out());
                }
                let conn = open_single(info, tls, left).map_err(|e| match &at {
                    Some((host, port)) => crate::tls::in_handshake(e, host, *port),
                    None => e,
                })?;
                Link::Single(conn)
            }
            Addresses::Cluster(seeds) => {
                Link::Cluster(Box::new(Cluster::open(seeds, tls, deadline)?))
            }
            Addresses::Sentinel { sentinels, service } => {
                // Each sentinel's `peer_name` check is part of asking it, within its share:
                // one that is down or never answers the handshake is skipped like one that
                // does not answer the question (review: checked up front, one down sentinel
                // made every open fail).
                let asked = sentinels.iter().map(|s| (s.clone(), tcp_tls(s))).collect();
                let open_primary = |host: &str, port: u16, until: Instant| {
                    let info = primary_info(endpoint, client, host, port)?;
                    let at = tcp_tls(&info);
                    let left = until.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(timed_out());
                    }
                    let mut conn = open_single(info, tls, left).map_err(|e| match &at {
                        Some((host, port)) => crate::tls::in_handshake(e, host, *port),
                        None => e,
                    })?;
                    check_primary(&mut conn, &service, host, port, until)?;
                    Ok(conn)
                };
                let (conn, at) = via_sentinels(asked, &service, deadline, tls, &open_primary)?;
                primary = Some(at);
                Link::Single(conn)
            }
        };
        Ok(Self {
            link,
            timeout: None,
            primary,
        })
    }

    /// For a Sentinel endpoint, the primary (`host:port`) this connection is to.
    pub fn primary(&self) -> Option<&str> {
        self.primary.as_deref()
    }

    /// For a Sentinel endpoint, that the primary this connection was opened to still is
    /// one (`ROLE` answers `master`), by `deadline`; other endpoints: `Ok` without I/O.
    ///
    /// A primary demoted while the connection was kept (`REPLICAOF` or `FAILOVER` on it,
    /// which leave its clients connected; Sentinel's own demotion kills them) still answers
    /// `PING`. Demoted, it is an error that is not a reply error, so [`crate::reconnect_once`]
    /// drops the connection as a broken one (`ROLE` was answered: nothing is unknown) and
    /// opens again, asking the sentinels: `the primary HOST:PORT is now a replica (ROLE
    /// slave)` when that open cannot be made either.
    pub fn check_still_primary(&mut self, deadline: Instant) -> RedisResult<()> {
        let (Some(at), Link::Single(conn)) = (self.primary.as_deref(), &mut self.link) else {
            return Ok(());
        };
        conn.set_deadline(deadline);
        match role_of(conn)?.as_str() {
            "master" => Ok(()),
            name => Err(crate::errors::demoted(at, name)),
        }
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// Sets every command's read and write timeout (no syscall when it is set already).
    pub fn set_timeout(&mut self, t: Duration) -> RedisResult<()> {
        if self.timeout == Some(t) {
            return Ok(());
        }
        match &mut self.link {
            Link::Single(c) => c.set_each(t),
            Link::Cluster(c) => c.set_each(t),
        }
        self.timeout = Some(t);
        Ok(())
    }

    /// Runs `op` with each command on the per-command timeout.
    pub fn each_command<T>(&mut self, op: impl FnOnce(&mut dyn ConnectionLike) -> T) -> T {
        match &mut self.link {
            Link::Single(c) => {
                if let Some(t) = self.timeout {
                    c.set_each(t);
                }
                op(c)
            }
            Link::Cluster(c) => {
                if let Some(t) = self.timeout {
                    c.set_each(t);
                }
                op(c.as_mut())
            }
        }
    }

    /// Whether the connection must be replaced before a command is sent on it: on one
    /// server, it failed before or was closed by the server while idle (restart, idle
    /// timeout), found without blocking and without sending anything
    /// ([`Wire::closed_while_idle`]); on a cluster, any node's ([`Cluster::closed_while_idle`]).
    pub fn closed_while_idle(&mut self) -> bool {
        match &mut self.link {
            Link::Single(c) => c.closed_while_idle(),
            Link::Cluster(c) => c.closed_while_idle(),
        }
    }

    /// Sends of which a byte was written since the connection opened ([`Wire::sent`]): a
    /// call that failed after this count grew may have run in the server, and must not be
    /// sent again (on a cluster, over every node: [`Cluster::sent`]).
    pub fn sent(&self) -> u64 {
        match &self.link {
            Link::Single(c) => c.sent(),
            Link::Cluster(c) => c.sent(),
        }
    }

    /// Runs `op`, a call of one or more commands, within `deadline`: on one server every
    /// write and every read of every command (`COMMAND INFO` before a decision, `SCRIPT
    /// LOAD` after `NOSCRIPT`, the steps of a reset) ends by it, so a call of several round
    /// trips, or a reply that trickles in, still ends within its timeout; on a cluster,
    /// the redirects and refusals followed too.
    pub fn within<T>(
        &mut self,
        deadline: Instant,
        op: impl FnOnce(&mut dyn ConnectionLike) -> T,
    ) -> T {
        match &mut self.link {
            Link::Single(conn) => {
                conn.set_deadline(deadline);
                op(conn)
            }
            Link::Cluster(c) => {
                c.set_deadline(deadline);
                op(c.as_mut())
            }
        }
    }

    /// Sends `count` commands packed in `packed` and reads their replies into `into`, all
    /// by `deadline`: on one server the first reply not in by then ends the call (redis-rs's
    /// own pipeline reading waits a whole timeout for every reply after a first one timed
    /// out), error replies are read as `Value::ServerError`. What was read before a failure
    /// stays in `into`.
    pub fn pipeline_within(
        &mut self,
        packed: &[u8],
        count: usize,
        deadline: Instant,
        into: &mut Vec<Value>,
    ) -> RedisResult<()> {
        match &mut self.link {
            Link::Single(c) => {
                c.set_deadline(deadline);
                c.pipeline_into(packed, count, into)
            }
            Link::Cluster(c) => {
                c.set_deadline(deadline);
                c.pipeline_into(packed, count, into)
            }
        }
    }
}

/// A sentinel's failure as the open reports it (`sentinel: ...`).
/// Whether opening `endpoint` may ask the system's resolver for a name: a host that is not
/// an IP address, or a cluster or Sentinel, whose slot map or sentinels may name a node by
/// its host name.
fn needs_name_lookup(endpoint: &Endpoint, client: Client) -> RedisResult<bool> {
    let is_name = |info: &ConnectionInfo| match info.addr() {
        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => {
            host.parse::<std::net::IpAddr>().is_err()
        }
        _ => false,
    };
    Ok(match addresses(endpoint, client)? {
        Addresses::Single(info) => is_name(&info),
        Addresses::Cluster(_) | Addresses::Sentinel { .. } => true,
    })
}

/// [`Connection::open`] on a thread of its own, waited for until `timeout`.
///
/// redis-rs looks a host name up with the system's resolver (`getaddrinfo`), which no
/// timeout bounds: with its DNS server down, a lookup blocks for resolv.conf's timeout times
/// its attempts (10 s and more), and the checkout with it. The open runs beside the caller
/// instead: the caller gets a timeout naming the lookup when it is not done in time, and the
/// thread ends when the resolver gives up (its connection, if any, is then closed). An open
/// that needs no name (an IP address, a Unix socket) runs on the caller's thread.
fn open_beside(endpoint: &Endpoint, client: Client, timeout: Duration) -> RedisResult<Connection> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let ep = endpoint.clone();
    crate::threads::spawn("cg-open", move || {
        let _ = tx.send(Connection::open_here(&ep, client, timeout));
    })
    .map_err(RedisError::from)?;
    // A little past the open's own deadline, which it keeps when the name is looked up in
    // time: its own error (refused, a failed handshake) is the better message.
    match rx.recv_timeout(timeout + Duration::from_millis(20)) {
        Ok(opened) => opened,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "timed out: no answer within {} ms, the host's name not looked up yet (DNS)",
                timeout.as_millis()
            ),
        ))),
    }
}

fn sentinel_error(what: String) -> RedisError {
    std::io::Error::other(format!("sentinel: {what}")).into()
}

/// Asks the sentinels in order for `service`'s primary (`SENTINEL
/// GET-MASTER-ADDR-BY-NAME`) and opens the first primary named that answers `ROLE master`,
/// all by `deadline`. Each sentinel's question gets a share of what is left (the sentinels
/// not yet asked and the primary's open the other shares), so one that hangs does not take
/// the whole deadline; the primary it names gets a share of what is left then (the
/// sentinels after it the others; the last sentinel's primary all of it). A primary that
/// is a replica, unreachable or fails its open is passed over for the next sentinel's
/// answer (a sentinel that lags after a failover names the old primary); when every answer
/// fails, the last primary's error is the open's (`... is a replica (ROLE slave)`), else
/// the sentinels' (`no primary for service`, `no sentinel answered`).
fn via_sentinels(
    sentinels: Vec<(ConnectionInfo, Option<(String, u16)>)>,
    service: &str,
    deadline: Instant,
    tls: Option<&Tls>,
    open_primary: &dyn Fn(&str, u16, Instant) -> RedisResult<Wire>,
) -> RedisResult<(Wire, String)> {
    let count = sentinels.len();
    let mut unknown = 0;
    let mut last: Option<String> = None;
    let mut refused: Option<RedisError> = None;
    for (i, (info, at)) in sentinels.into_iter().enumerate() {
        let after = (count - i - 1) as u32;
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let share = (left / (after + 2)).max(Duration::from_millis(1));
        let until = Instant::now() + share;
        let addr = info.addr().to_string();
        match ask_sentinel(info, at, service, until, tls) {
            Ok(Some((host, port))) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    refused = Some(timed_out());
                    break;
                }
                let until = Instant::now() + (left / (after + 1)).max(Duration::from_millis(1));
                match open_primary(&host, port, until) {
                    Ok(conn) => return Ok((conn, format!("{host}:{port}"))),
                    Err(e) => refused = Some(e),
                }
            }
            Ok(None) => unknown += 1,
            Err(e) => last = Some(format!("{addr}: {}", crate::errors::describe(&e, share))),
        }
    }
    if let Some(e) = refused {
        return Err(e);
    }
    Err(sentinel_error(match (unknown, last) {
        (0, Some(e)) => format!("no sentinel answered for service {service} (last: {e})"),
        (0, None) => format!("no time left to ask for service {service}"),
        (_, _) => format!("no primary for service {service}"),
    }))
}

/// One sentinel's answer for `service`'s primary, by `until` (its `peer_name` check, by
/// the connection's handshake, included): `None` when it knows no such service.
fn ask_sentinel(
    info: ConnectionInfo,
    at: Option<(String, u16)>,
    service: &str,
    until: Instant,
    tls: Option<&Tls>,
) -> RedisResult<Option<(String, u16)>> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(timed_out());
    }
    let mut c = open_single(info, tls, left).map_err(|e| match &at {
        Some((host, port)) => crate::tls::in_handshake(e, host, *port),
        None => e,
    })?;
    c.set_deadline(until);
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(service)
        .query::<Option<(String, u16)>>(&mut c)
}

/// The primary the sentinels named is one (`ROLE` answers `master`), by `deadline`: a
/// replica (a demoted primary the sentinels have not yet seen as such) is refused.
fn check_primary(
    conn: &mut Wire,
    service: &str,
    host: &str,
    port: u16,
    deadline: Instant,
) -> RedisResult<()> {
    conn.set_deadline(deadline);
    let name = role_of(conn)?;
    if name == "master" {
        Ok(())
    } else {
        Err(sentinel_error(format!(
            "the primary named for service {service}, {host}:{port}, is a replica (ROLE {name})"
        )))
    }
}

/// The server's role, the first word of its `ROLE` reply (`master`, `slave`, `sentinel`).
fn role_of(conn: &mut Wire) -> RedisResult<String> {
    let role: Vec<Value> = redis::cmd("ROLE").query(conn)?;
    Ok(match role.first() {
        Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    })
}
