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
                // Redirects (MOVED, ASK) and CLUSTERDOWN/TRYAGAIN are retried inside a
                // call; the waits between retries stay a small part of the timeout (redis-rs
                // would wait over a second each), so a cluster that is down fails the
                // command within about its timeout.
                let wait_ms = (self.timeout.as_millis() as u64 / 10).clamp(2, 50);
                let c = ClusterClientBuilder::new(seeds)
                    .connection_timeout(self.timeout)
                    .response_timeout(self.timeout)
                    .retries(3)
                    .min_retry_wait(1)
                    .max_retry_wait(wait_ms)
                    .build()?
                    .get_connection()?;
                Conn::Cluster(Box::new(c))
            }
        })
    }

    /// Runs `op` on the connection (opened if needed); an error names the endpoint, never
    /// its password. A connection that was open and broke (Valkey restarted between two
    /// calls of one command) is replaced and `op` run once more, as the worker does; `op`
    /// must be harmless to repeat. A failed connection is dropped.
    pub fn call<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, String> {
        let mut slot = self.conn.borrow_mut();
        let failed =
            |e: &redis::RedisError| format!("Valkey at {}: {e}", self.endpoint.display_url());
        loop {
            let fresh = slot.is_none();
            if fresh {
                *slot = Some(self.open().map_err(|e| failed(&e))?);
            }
            let result = match slot.as_mut().expect("opened above") {
                Conn::Single(c) => op(c),
                Conn::Cluster(c) => op(c.as_mut()),
            };
            match result {
                Ok(v) => return Ok(v),
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                    ) =>
                {
                    // Valkey answered: the connection is still in step.
                    return Err(failed(&e));
                }
                Err(e) => {
                    *slot = None;
                    if fresh || e.is_timeout() {
                        return Err(failed(&e));
                    }
                }
            }
        }
    }
}
