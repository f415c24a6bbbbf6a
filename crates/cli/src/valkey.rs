//! The CLI's connection to Valkey: one connection per command run, opened on first use,
//! through the connection layer the worker uses (`checkout_guard_connection`: URL, set-up
//! within the timeout, cluster, the one reconnect). An operator's command has no back-off
//! and no pool (that is the worker's business, in `checkout-guard-runtime`); it reports
//! the failure.

use std::cell::RefCell;
use std::time::Duration;

use checkout_guard_config::Endpoint;
use checkout_guard_connection::{describe, reconnect_once, Budget, Client, Connection, Failure};
use redis::{ConnectionLike, RedisResult};

/// A lazily opened connection to one endpoint (single server, Unix socket or cluster).
pub struct Valkey {
    endpoint: Endpoint,
    timeout: Duration,
    conn: RefCell<Option<Connection>>,
}

impl Valkey {
    pub fn new(endpoint: Endpoint, timeout: Duration) -> Self {
        Self {
            endpoint,
            timeout,
            conn: RefCell::new(None),
        }
    }

    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Each call's timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `op` on the connection (opened if needed), each command bounded by the
    /// timeout; an error names the endpoint, never its password, and a timeout says so
    /// (`describe`, as the worker's `health()`). A connection that was
    /// open and was closed while idle (Valkey restarted between two calls of one command)
    /// is replaced before anything is sent, as the worker does; a command written in full
    /// is never sent again (its reply lost: the error says the outcome is unknown). A
    /// failed connection is dropped.
    pub fn call<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, String> {
        reconnect_once(
            &mut self.conn.borrow_mut(),
            Budget::starting_now(self.timeout),
            |left| Connection::open(&self.endpoint, Client::CLI, left),
            |c| c.each_command(&mut op),
        )
        .map_err(|f| {
            // A command written in full whose reply was lost may have run (a live change,
            // a reset): said, so the operator looks before running it again.
            let unknown = matches!(f, Failure::Unknown(_));
            format!(
                "Valkey at {}: {}{}",
                self.endpoint.display_url(),
                if unknown { "outcome unknown: " } else { "" },
                describe(&f.into_error(), self.timeout)
            ) + if unknown {
                " after the command was sent (it may have run: check before running it again)"
            } else {
                ""
            }
        })
    }
}
