//! One server opened: the socket connected ([`Wire::connect`]) and its set-up (AUTH or
//! HELLO, SELECT, CLIENT SETINFO) pipelined in one round trip, all within one timeout.
//! A single-server endpoint, a sentinel, the primary it names and each cluster node are
//! opened by it.

use std::time::{Duration, Instant};

use checkout_guard_config::Tls;
use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};

use crate::wire::{Target, Wire};

/// A connection to one server, its whole set-up within `timeout` (see
/// [`Connection::open`]); named as `info`'s lib name says. Over TLS (`info`'s address
/// `TcpTls`), with `tls`'s certificates and checks ([`crate::tls::wire_config`]).
pub(crate) fn open_single(
    info: ConnectionInfo,
    tls: Option<&Tls>,
    timeout: Duration,
) -> RedisResult<Wire> {
    let deadline = Instant::now() + timeout;
    let target = match info.addr() {
        ConnectionAddr::Tcp(host, port) => Target::Tcp {
            host,
            port: *port,
            tls: None,
        },
        ConnectionAddr::TcpTls { host, port, .. } => Target::Tcp {
            host,
            port: *port,
            tls: Some(tls.ok_or_else(|| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "a TLS address without TLS settings",
                ))
            })?),
        },
        ConnectionAddr::Unix(path) => Target::Unix(path),
        other => {
            return Err(RedisError::from((
                ErrorKind::InvalidClientConfig,
                "unsupported address",
                other.to_string(),
            )))
        }
    };
    let mut con = Wire::connect(target, deadline)?;
    con.set_deadline(deadline);
    let wanted = info.redis_settings();
    let mut setup = redis::pipe();
    let mut checked = Vec::new();
    if wanted.protocol().supports_resp3() {
        // HELLO 3, with the credentials: the connection speaks RESP3 from its answer on.
        let hello = setup.cmd("HELLO").arg(3);
        if let Some(pass) = wanted.password() {
            hello
                .arg("AUTH")
                .arg(wanted.username().unwrap_or("default"))
                .arg(pass);
        }
        checked.push("HELLO");
    } else if let Some(pass) = wanted.password() {
        let auth = setup.cmd("AUTH");
        if let Some(user) = wanted.username() {
            auth.arg(user);
        }
        auth.arg(pass);
        checked.push("AUTH");
    }
    if wanted.db() != 0 {
        setup.cmd("SELECT").arg(wanted.db());
        checked.push("SELECT");
    }
    if let Some(name) = wanted.lib_name() {
        setup.cmd("CLIENT").arg("SETINFO").arg("LIB-NAME").arg(name);
        setup
            .cmd("CLIENT")
            .arg("SETINFO")
            .arg("LIB-VER")
            .arg(wanted.lib_ver().unwrap_or(checkout_guard_model::VERSION));
    }
    let mut replies = Vec::new();
    if !setup.is_empty() {
        con.pipeline_into(&setup.get_packed_pipeline(), setup.len(), &mut replies)?;
    }
    for (what, reply) in checked.iter().zip(replies) {
        // CLIENT SETINFO's answer is ignored (an old server does not know it).
        if let Value::ServerError(e) = reply {
            let why = RedisError::from(e).to_string();
            return Err(match *what {
                "HELLO" if why.to_ascii_lowercase().contains("noproto") => RedisError::from((
                    ErrorKind::Client,
                    "the server does not speak RESP3 (protocol=resp3 in the URL)",
                    why,
                )),
                "AUTH" | "HELLO" => RedisError::from((
                    ErrorKind::AuthenticationFailed,
                    "Password authentication failed",
                    why,
                )),
                _ => {
                    RedisError::from((ErrorKind::Client, "Valkey refused to switch database", why))
                }
            });
        }
    }
    con.set_db(wanted.db());
    Ok(con)
}
