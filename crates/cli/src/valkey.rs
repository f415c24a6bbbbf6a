//! The CLI's connection to Valkey: one connection per command run, opened on first use,
//! every call bounded by the timeout. An operator's command has no back-off and no pool
//! (that is the worker's business, in `checkout-guard-runtime`); it reports the failure.

use std::cell::RefCell;
use std::time::Duration;

use checkout_guard_model::endpoint::Target;
use checkout_guard_model::Endpoint;
use redis::cluster::{ClusterClientBuilder, ClusterConnection};
use redis::{Connection, ConnectionLike, IntoConnectionInfo, RedisResult};

enum Conn {
    Single(Connection),
    Cluster(Box<ClusterConnection>),
}

/// A lazily opened connection to one endpoint (single server, Unix socket or cluster).
pub struct Valkey {
    endpoint: Endpoint,
    timeout: Duration,
    conn: RefCell<Option<Conn>>,
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

    fn open(&self) -> RedisResult<Conn> {
        let name = |url: &str| {
            url.into_connection_info().map(|info| {
                let settings = info
                    .redis_settings()
                    .clone()
                    .set_lib_name("checkout_guard_cli", checkout_guard_model::VERSION);
                info.set_redis_settings(settings)
            })
        };
        Ok(match self.endpoint.target() {
            Target::Single(url) => {
                let c =
                    redis::Client::open(name(url)?)?.get_connection_with_timeout(self.timeout)?;
                c.set_read_timeout(Some(self.timeout))?;
                c.set_write_timeout(Some(self.timeout))?;
                Conn::Single(c)
            }
            Target::Cluster(seeds) => {
                let seeds = seeds
                    .iter()
                    .map(|s| name(s))
                    .collect::<RedisResult<Vec<_>>>()?;
                let c = ClusterClientBuilder::new(seeds)
                    .connection_timeout(self.timeout)
                    .response_timeout(self.timeout)
                    .retries(3)
                    .build()?
                    .get_connection()?;
                Conn::Cluster(Box::new(c))
            }
        })
    }

    /// Runs `op` on the connection (opened if needed); an error names the endpoint, never
    /// its password. A failed connection is dropped, so the next call opens a new one.
    pub fn call<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, String> {
        let mut slot = self.conn.borrow_mut();
        let result = (|| {
            if slot.is_none() {
                *slot = Some(self.open()?);
            }
            match slot.as_mut().expect("opened above") {
                Conn::Single(c) => op(c),
                Conn::Cluster(c) => op(c.as_mut()),
            }
        })();
        result.map_err(|e| {
            if !matches!(
                e.kind(),
                redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
            ) {
                *slot = None;
            }
            format!("Valkey at {}: {e}", self.endpoint.display_url())
        })
    }
}
