//! A Valkey Cluster connection of the connection layer's own: the slot map asked of a
//! seed (`CLUSTER SLOTS`), a [`Wire`] per node, opened when a command is first routed to
//! it, each command routed by the slot of its first key.
//!
//! Why not redis-rs's `ClusterConnection`: it sends a command again inside itself after
//! its connection broke or timed out, so a decision (or a stream batch) whose reply was
//! lost after the node ran it was run twice, and a pipeline with one refused command
//! failed whole. Here, as on one server ([`crate::reconnect_once`]), a command of which a
//! byte was written is never sent again after a failure: [`Cluster::sent`] grows, and the
//! caller says the outcome is unknown. What a node answers without running the command is
//! followed, within the call's deadline: `MOVED` (the slot's new node, learnt for the next
//! calls), `ASK` (the command once more, after `ASKING`, on the node importing the slot),
//! `TRYAGAIN` and `CLUSTERDOWN` (the command again after a short wait, a few times).
//!
//! A command without a key (`SCRIPT LOAD` after `NOSCRIPT`, `COMMAND INFO`, `INFO`) goes
//! to the node of the last command routed by a key: the node that answered `NOSCRIPT`
//! loads the script, and the module is asked of the node that decides. Before any
//! command was routed by a key, to the seed that gave the slot map (it just answered;
//! the slot map's first node may be down while the slots of others are served).
//!
//! A seed whose slot map is empty (a node reset out of the cluster, or restarted without
//! its nodes.conf) is passed over like one that is down. A key whose slot no node served
//! when the map was learnt has the map asked again (`CLUSTER SLOTS` of the nodes known)
//! before the call says so: a slot assigned since is found.
//!
//! A node the slot map names by a host name is opened on a thread beside the caller,
//! waited for until the call's deadline: the system's resolver has no timeout of its own.

use std::time::{Duration, Instant};

use checkout_guard_config::Tls;
use checkout_guard_model::slot::key_slot;
use redis::{ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, RedisResult, Value};

use crate::errors::timed_out;
use crate::single::open_single;
use crate::wire::{command_ends, Limit, Wire};

/// No node serves the slot (yet).
const NO_NODE: u16 = u16::MAX;

/// How many redirects one command follows (a slot moved while it was followed).
const MAX_REDIRECTS: usize = 5;

/// How many times a command refused with `TRYAGAIN` or `CLUSTERDOWN` is sent again.
const MAX_BUSY_RETRIES: usize = 3;

struct Node {
    host: String,
    port: u16,
    wire: Option<Wire>,
}

/// An open connection to a cluster's nodes (see the module's doc).
pub struct Cluster {
    /// The seed the slot map came from: a node's connection is the same but for its
    /// address (credentials, TLS, the client's name).
    template: ConnectionInfo,
    tls: Option<Tls>,
    /// Slot -> index in `nodes` ([`NO_NODE`]: none).
    slots: Vec<u16>,
    nodes: Vec<Node>,
    /// The node of the last command routed by a key (at first the seed's).
    sticky: Option<usize>,
    limit: Limit,
    /// Sends of which a byte was written, over every node.
    sent: u64,
}

/// What a node answered instead of running a command.
enum Refusal {
    Moved {
        slot: u16,
        host: String,
        port: u16,
    },
    Ask {
        host: String,
        port: u16,
    },
    /// `TRYAGAIN`, or `CLUSTERDOWN` (`down`).
    Busy {
        down: bool,
    },
}

impl Cluster {
    /// The slot map of the first of `seeds` that answers, each seed asked within a share
    /// of what is left of `deadline` (one that is down or hangs is passed over); that
    /// seed's connection is kept for the node it is. TLS: each node is verified as one
    /// server is ([`crate::tls::wire_config`]: `peer_name` when given, else the name or
    /// address the slot map gives).
    pub(crate) fn open(
        seeds: Vec<ConnectionInfo>,
        tls: Option<&Tls>,
        deadline: Instant,
    ) -> RedisResult<Self> {
        let count = seeds.len();
        let mut last = None;
        for (i, seed) in seeds.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let share = (left / (count - i) as u32).max(Duration::from_millis(1));
            let until = Instant::now() + share;
            let asked = open_single(seed.clone(), tls, share).and_then(|mut wire| {
                wire.set_deadline(until);
                let map = redis::cmd("CLUSTER").arg("SLOTS").query(&mut wire)?;
                Ok((wire, map))
            });
            let (host, port) = host_port(&seed);
            match asked {
                Ok((_, map)) if !has_ranges(&map) => {
                    last = Some(RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                        "the seed knows no slot map (CLUSTER SLOTS empty: a node in no cluster)",
                        format!("{host}:{port}"),
                    )));
                }
                Ok((wire, map)) => {
                    let mut cluster = Self {
                        template: seed,
                        tls: tls.cloned(),
                        slots: vec![NO_NODE; usize::from(checkout_guard_model::slot::SLOTS)],
                        nodes: Vec::new(),
                        sticky: None,
                        limit: Limit::Until(deadline),
                        sent: 0,
                    };
                    cluster.learn(&map, &host);
                    let at = cluster.node_at(&host, port);
                    cluster.nodes[at].wire = Some(wire);
                    // A command without a key before any with one (`COMMAND INFO` before
                    // the first decision) goes to the seed: its connection is open.
                    cluster.sticky = Some(at);
                    return Ok(cluster);
                }
                Err(e) => last = Some(crate::tls::in_handshake(e, &host, port)),
            }
        }
        Err(last.unwrap_or_else(timed_out))
    }

    /// Takes the slot ranges of a `CLUSTER SLOTS` reply (`[start, end, [host, port, ...],
    /// replicas...]`); a primary with no address given (`""`) is the seed's host.
    fn learn(&mut self, map: &Value, seed_host: &str) {
        let Value::Array(ranges) = map else { return };
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let (Some(start), Some(end), Some(Value::Array(primary))) =
                (int(parts.first()), int(parts.get(1)), parts.get(2))
            else {
                continue;
            };
            let (Some(host), Some(port)) = (text(primary.first()), int(primary.get(1))) else {
                continue;
            };
            let host = if host.is_empty() {
                seed_host.to_string()
            } else {
                host
            };
            if host == "?" || !(0..=i64::from(u16::MAX)).contains(&port) {
                continue;
            }
            let node = self.node_at(&host, port as u16) as u16;
            let last = usize::from(checkout_guard_model::slot::SLOTS) - 1;
            for slot in start.max(0) as usize..=(end.max(0) as usize).min(last) {
                self.slots[slot] = node;
            }
        }
    }

    /// The index of the node at `host:port`, added (not connected) when new.
    fn node_at(&mut self, host: &str, port: u16) -> usize {
        if let Some(i) = self
            .nodes
            .iter()
            .position(|n| n.port == port && n.host == host)
        {
            return i;
        }
        self.nodes.push(Node {
            host: host.to_string(),
            port,
            wire: None,
        });
        self.nodes.len() - 1
    }

    pub fn set_deadline(&mut self, deadline: Instant) {
        self.limit = Limit::Until(deadline);
    }

    pub fn set_each(&mut self, timeout: Duration) {
        self.limit = Limit::Each(timeout);
    }

    /// Sends of which a byte was written, on any node, since the connection opened.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Whether a node's connection failed before or was closed while idle (see
    /// [`Wire::closed_while_idle`]): the whole connection is then opened again, the slot
    /// map asked again with it.
    pub fn closed_while_idle(&mut self) -> bool {
        self.nodes
            .iter_mut()
            .filter_map(|n| n.wire.as_mut())
            .any(|w| w.closed_while_idle())
    }

    /// The node a command with `key` goes to.
    fn route(&self, key: Option<&[u8]>) -> RedisResult<usize> {
        let node = match key {
            Some(k) => self.slots[usize::from(key_slot(k))],
            None => self.sticky.map_or(0, |n| n as u16),
        };
        if usize::from(node) >= self.nodes.len() {
            return Err(RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ClusterDown),
                "no node serves the slot",
                key.map(|k| format!("slot {}", key_slot(k)))
                    .unwrap_or_default(),
            )));
        }
        Ok(usize::from(node))
    }

    /// [`Cluster::route`]; a key whose slot no node serves has the slot map asked again
    /// first ([`Cluster::refresh`]).
    fn route_or_ask(&mut self, key: Option<&[u8]>, until: Instant) -> RedisResult<usize> {
        match self.route(key) {
            Err(e) if key.is_some() => {
                if self.refresh(until, None) {
                    self.route(key)
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }

    /// The slot map asked again (`CLUSTER SLOTS`) of the nodes known but `skip`, the
    /// connected ones first, by `until`: taken whole from the first that answers one with
    /// a slot in it. Not counted in [`Cluster::sent`]: it runs nothing that changes
    /// anything.
    fn refresh(&mut self, until: Instant, skip: Option<usize>) -> bool {
        let mut order: Vec<usize> = (0..self.nodes.len()).filter(|i| Some(*i) != skip).collect();
        order.sort_by_key(|&i| self.nodes[i].wire.is_none());
        let sent = self.sent;
        let mut learnt = false;
        for i in order {
            if Instant::now() >= until {
                break;
            }
            let asked = self.on_node(i, until, |w| {
                redis::cmd("CLUSTER").arg("SLOTS").query::<Value>(w)
            });
            if let Some(map) = asked.ok().filter(has_ranges) {
                self.slots.fill(NO_NODE);
                let host = self.nodes[i].host.clone();
                self.learn(&map, &host);
                learnt = true;
                break;
            }
        }
        self.sent = sent;
        learnt
    }

    /// Runs `op` on node `i`'s connection, opened first when there is none, by `until`;
    /// its sends counted in [`Cluster::sent`]. A connection that failed is dropped.
    fn on_node<T>(
        &mut self,
        i: usize,
        until: Instant,
        op: impl FnOnce(&mut Wire) -> RedisResult<T>,
    ) -> RedisResult<T> {
        if self.nodes[i].wire.is_none() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            let (host, port) = (self.nodes[i].host.clone(), self.nodes[i].port);
            let info = node_info(&self.template, &host, port);
            let wire = open_node(info, self.tls.as_ref(), &host, left)
                .map_err(|e| crate::tls::in_handshake(e, &host, port))?;
            self.nodes[i].wire = Some(wire);
        }
        let wire = self.nodes[i].wire.as_mut().expect("opened above");
        wire.set_deadline(until);
        let before = wire.sent();
        let result = op(wire);
        self.sent += wire.sent() - before;
        if !wire.is_open() {
            self.nodes[i].wire = None;
        }
        result
    }

    /// When what follows must end: the deadline, or the command's timeout from now.
    fn until(&self) -> Instant {
        self.limit.deadline()
    }

    /// One command, its redirects and refusals followed (see the module's doc); the last
    /// refusal's reply when they do not end by the deadline.
    fn call(&mut self, cmd: &[u8], until: Instant) -> RedisResult<Value> {
        let key = route_key(cmd);
        let mut node = self.route_or_ask(key, until)?;
        let mut asking = false;
        let mut redirects = 0;
        let mut busy = 0;
        let mut refreshed = false;
        let mut wait = Duration::from_millis(2);
        loop {
            if key.is_some() {
                self.sticky = Some(node);
            }
            let asked = std::mem::take(&mut asking);
            let reply = if asked {
                let mut both = Vec::with_capacity(2);
                let mut packed = b"*1\r\n$6\r\nASKING\r\n".to_vec();
                packed.extend_from_slice(cmd);
                self.on_node(node, until, |w| w.pipeline_into(&packed, 2, &mut both))?;
                both.pop().expect("two replies read")
            } else {
                self.on_node(node, until, |w| w.call_packed(cmd))?
            };
            match refusal(&reply) {
                None => return Ok(reply),
                Some(Refusal::Moved { slot, host, port }) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    node = self.node_at(&host, port);
                    self.slots[usize::from(slot)] = node as u16;
                }
                Some(Refusal::Ask { host, port }) if redirects < MAX_REDIRECTS => {
                    redirects += 1;
                    node = self.node_at(&host, port);
                    asking = true;
                }
                Some(Refusal::Busy { down }) if busy < MAX_BUSY_RETRIES => {
                    // CLUSTERDOWN: the node may be in no cluster now (restarted empty) or
                    // cut off from its majority, while another serves the slot: the slot
                    // map asked again of the others, once a call (the map is otherwise
                    // asked again only when a connection fails).
                    if down && key.is_some() && !std::mem::replace(&mut refreshed, true) {
                        let was = node;
                        if self.refresh(until, Some(was)) {
                            node = self.route(key)?;
                            if node != was {
                                continue;
                            }
                        }
                    }
                    let left = until.saturating_duration_since(Instant::now());
                    if left <= wait {
                        return Ok(reply);
                    }
                    busy += 1;
                    // Asked of the importing node: asked again (without ASKING it would
                    // answer MOVED, back to the node that answered ASK).
                    asking = asked;
                    std::thread::sleep(wait);
                    wait = (wait * 4).min(Duration::from_millis(50));
                }
                Some(_) => return Ok(reply),
            }
        }
    }

    /// Sends `packed` (`count` commands) to the node of its first command with a key and
    /// reads the replies into `into`, all by the deadline; the commands a node refused
    /// without running them (`MOVED`, `ASK`, `TRYAGAIN`, `CLUSTERDOWN`) are then sent
    /// again one by one where the cluster says, their replies put in their places. What
    /// was read before a failure stays in `into`; a command refused whose second sending
    /// failed keeps its refusal as its reply (the failure's outcome unknown is still in
    /// [`Cluster::sent`]).
    pub fn pipeline_into(
        &mut self,
        packed: &[u8],
        count: usize,
        into: &mut Vec<Value>,
    ) -> RedisResult<()> {
        let until = self.until();
        let commands = command_ends(packed, count)?;
        let key = commands.iter().find_map(|c| route_key(c));
        let node = self.route_or_ask(key, until)?;
        if key.is_some() {
            self.sticky = Some(node);
        }
        let start = into.len();
        self.on_node(node, until, |w| w.pipeline_into(packed, count, into))?;
        for (i, cmd) in commands.iter().enumerate() {
            if refusal(&into[start + i]).is_some() {
                match self.call(cmd, until) {
                    Ok(v) => into[start + i] = v,
                    Err(_) => break,
                }
            }
        }
        Ok(())
    }

    /// One command (see [`Cluster::call`]), within the current limit.
    pub fn call_packed(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        let until = self.until();
        self.call(cmd, until)
    }
}

impl ConnectionLike for Cluster {
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
        if all.len() < offset + count {
            return Err(timed_out());
        }
        if let Some(Value::ServerError(e)) = all[..offset]
            .iter()
            .find(|v| matches!(v, Value::ServerError(_)))
        {
            return Err(e.clone().into());
        }
        Ok(all.split_off(offset))
    }

    fn get_db(&self) -> i64 {
        0
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        true
    }
}

/// A node's connection ([`open_single`]) by `timeout`. A node named by a host name is
/// opened on a thread beside the caller, waited for until `timeout`: the system's resolver
/// (`getaddrinfo`) has no timeout of its own, and with its DNS server down a lookup blocks
/// for resolv.conf's timeout times its attempts (as `Connection::open` does for a seed's
/// name). The thread ends when the resolver gives up (its connection, if any, closed).
fn open_node(
    info: ConnectionInfo,
    tls: Option<&Tls>,
    host: &str,
    timeout: Duration,
) -> RedisResult<Wire> {
    if host.parse::<std::net::IpAddr>().is_ok() {
        return open_single(info, tls, timeout);
    }
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let tls = tls.cloned();
    crate::threads::spawn("cg-open-node", move || {
        let _ = tx.send(open_single(info, tls.as_ref(), timeout));
    })
    .map_err(RedisError::from)?;
    match rx.recv_timeout(timeout) {
        Ok(opened) => opened,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "timed out: no answer within {} ms, the node's host name {host} not looked up yet (DNS)",
                timeout.as_millis()
            ),
        ))),
    }
}

/// Whether a `CLUSTER SLOTS` reply has a slot range in it.
fn has_ranges(map: &Value) -> bool {
    matches!(map, Value::Array(ranges) if !ranges.is_empty())
}

/// `template` (a seed's connection) for the node at `host:port`.
fn node_info(template: &ConnectionInfo, host: &str, port: u16) -> ConnectionInfo {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_string(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    template.clone().set_addr(addr)
}

fn host_port(info: &ConnectionInfo) -> (String, u16) {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.clone(), *port)
        }
        other => (other.to_string(), 0),
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// A node's answer that it did not run the command, from the error's text
/// (`MOVED 3999 127.0.0.1:6381`, `ASK 3999 127.0.0.1:6381`, `TRYAGAIN ...`,
/// `CLUSTERDOWN ...`).
fn refusal(reply: &Value) -> Option<Refusal> {
    let Value::ServerError(e) = reply else {
        return None;
    };
    let code = e.code();
    let detail = e.details().unwrap_or("");
    let target = || {
        let mut words = detail.split_whitespace();
        let slot: u16 = words
            .next()?
            .parse()
            .ok()
            .filter(|s| *s < checkout_guard_model::slot::SLOTS)?;
        let (host, port) = words.next()?.rsplit_once(':')?;
        Some((slot, host.to_string(), port.parse().ok()?))
    };
    match code {
        "MOVED" => target().map(|(slot, host, port)| Refusal::Moved { slot, host, port }),
        "ASK" => target().map(|(_, host, port)| Refusal::Ask { host, port }),
        "TRYAGAIN" => Some(Refusal::Busy { down: false }),
        "CLUSTERDOWN" => Some(Refusal::Busy { down: true }),
        _ => None,
    }
}

/// The key a command is routed by: the first key of a script or function call
/// (`EVALSHA sha numkeys key ...`), none for the commands without one, else the first
/// argument. The commands this project sends are the ones that matter; another's first
/// argument is taken for its key, as most commands have it.
fn route_key(cmd: &[u8]) -> Option<&[u8]> {
    let args = first_args(cmd, 4);
    let name = args.first()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let keys: u64 = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            if keys == 0 {
                None
            } else {
                args.get(3).copied()
            }
        }
        b"PING" | b"ECHO" | b"INFO" | b"TIME" | b"COMMAND" | b"SCRIPT" | b"FUNCTION"
        | b"CLIENT" | b"AUTH" | b"HELLO" | b"SELECT" | b"ROLE" | b"CLUSTER" | b"ASKING"
        | b"READONLY" | b"READWRITE" | b"MODULE" | b"CONFIG" | b"DBSIZE" | b"SCAN" | b"KEYS"
        | b"ACL" | b"MULTI" | b"EXEC" | b"DISCARD" | b"WAIT" | b"LASTSAVE" | b"FLUSHALL"
        | b"FLUSHDB" | b"RANDOMKEY" | b"SLOWLOG" | b"LATENCY" | b"MEMORY" => None,
        _ => args.get(1).copied(),
    }
}

/// The first `n` arguments of a packed command (`*N\r\n$len\r\nbytes\r\n...`), as far as
/// they are there and well formed.
fn first_args(cmd: &[u8], n: usize) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let line = |at: usize| -> Option<(&[u8], usize)> {
        let nl = cmd.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
        Some((&cmd[at..at + nl], at + nl + 2))
    };
    let Some((head, mut at)) = line(0) else {
        return out;
    };
    let Some(count) = head
        .strip_prefix(b"*")
        .and_then(|c| std::str::from_utf8(c).ok()?.parse::<usize>().ok())
    else {
        return out;
    };
    for _ in 0..count.min(n) {
        let Some((len, next)) = line(at) else { break };
        let Some(len) = len
            .strip_prefix(b"$")
            .and_then(|c| std::str::from_utf8(c).ok()?.parse::<usize>().ok())
        else {
            break;
        };
        let Some(arg) = cmd.get(next..next + len) else {
            break;
        };
        out.push(arg);
        at = next + len + 2;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packed(args: &[&str]) -> Vec<u8> {
        let mut c = redis::cmd(args[0]);
        for a in &args[1..] {
            c.arg(*a);
        }
        c.get_packed_command()
    }

    #[test]
    fn commands_are_routed_by_their_first_key() {
        let cases: [(&[&str], Option<&str>); 7] = [
            (
                &["EVALSHA", "abc", "2", "{cg:x}:g", "{cg:x}:h", "1"],
                Some("{cg:x}:g"),
            ),
            (&["evalsha", "abc", "0", "1"], None),
            (&["CG.DECIDE", "{cg:x}:g", "1"], Some("{cg:x}:g")),
            (&["XADD", "events", "*", "a", "1"], Some("events")),
            (&["SCRIPT", "LOAD", "return 1"], None),
            (&["COMMAND", "INFO", "CG.DECIDE"], None),
            (&["PING"], None),
        ];
        for (args, key) in cases {
            let cmd = packed(args);
            assert_eq!(
                route_key(&cmd).map(|k| std::str::from_utf8(k).unwrap()),
                key,
                "{args:?}"
            );
        }
    }

    #[test]
    fn refusals_are_read_from_the_error() {
        let moved = redis::parse_redis_value(b"-MOVED 3999 127.0.0.1:6381\r\n").unwrap();
        assert!(matches!(
            refusal(&moved),
            Some(Refusal::Moved { slot: 3999, ref host, port: 6381 }) if host == "127.0.0.1"
        ));
        let ask = redis::parse_redis_value(b"-ASK 1 [::1]:7000\r\n").unwrap();
        assert!(matches!(
            refusal(&ask),
            Some(Refusal::Ask { ref host, port: 7000 }) if host == "[::1]"
        ));
        for busy in [
            &b"-TRYAGAIN x\r\n"[..],
            b"-CLUSTERDOWN The cluster is down\r\n",
        ] {
            let v = redis::parse_redis_value(busy).unwrap();
            assert!(matches!(refusal(&v), Some(Refusal::Busy { .. })));
        }
        let other = redis::parse_redis_value(b"-ERR no\r\n").unwrap();
        assert!(refusal(&other).is_none());
    }
}
