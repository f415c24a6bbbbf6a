//! The store of the extension: [`ValkeyStore`], the [`Store`] over the process's pooled
//! connection ([`super::pool`]), deciding with the engine [`super::engine`] chooses.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SystemClock};
use crate::sync::Mutex;
use redis::{ConnectionLike, RedisResult};

use checkout_guard_config::live::Stored;
use checkout_guard_config::{Endpoint, Engine};
use checkout_guard_connection::scripts::{invoke, plain};
use checkout_guard_model::cmd::mark_hot::{mark_hot_command, unmark_hot_command};
use checkout_guard_model::cmd::read_adapt::ReadAdaptCall;
use checkout_guard_model::cmd::read_limits::{self, ReadLimitsCall};
use checkout_guard_model::cmd::release::ReleaseCall;
use checkout_guard_model::cmd::reset_step::{self, ResetStepCall};
use checkout_guard_model::{DecideCall, FeedbackCall, Keys};

use super::pool::{self, Pool, PooledConnection};
use super::{engine, AdaptRead, Health, Store, StoreError};

/// The store of the extension: the process's pooled connection to one endpoint, every
/// call bounded by `timeout`, and left alone for `retry_interval` after a failure.
#[derive(Clone)]
pub struct ValkeyStore {
    endpoint: Endpoint,
    timeout: Duration,
    retry_interval: Duration,
    engine: Engine,
    /// The endpoint's pooled connection, looked up once (not per decision).
    pooled: Arc<Mutex<PooledConnection>>,
    /// What the back-off after a failure, the module's recheck (`engine = auto`) and the
    /// decisions' record run on: the system clock, or a test's.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for ValkeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValkeyStore")
            .field("endpoint", &self.endpoint)
            .field("timeout", &self.timeout)
            .field("retry_interval", &self.retry_interval)
            .field("engine", &self.engine)
            .finish_non_exhaustive()
    }
}

impl ValkeyStore {
    pub fn new(
        endpoint: Endpoint,
        timeout: Duration,
        retry_interval: Duration,
        engine: Engine,
    ) -> Self {
        let pooled = pool::pooled(&endpoint, Pool::Decisions);
        Self {
            endpoint,
            timeout,
            retry_interval,
            engine,
            pooled,
            clock: Arc::new(SystemClock),
        }
    }

    /// This store with the back-off after a failure and the module's recheck on `clock`
    /// (a test's `FakeClock`: no test waits them out). The back-off is the endpoint's, in
    /// the process's pool: stores of one endpoint must share a clock.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self { clock, ..self }
    }

    fn call<T>(
        &self,
        mut op: impl FnMut(&mut dyn ConnectionLike) -> RedisResult<T>,
    ) -> Result<T, StoreError> {
        pool::with_pooled(
            &self.pooled,
            &self.endpoint,
            self.timeout,
            self.retry_interval,
            &*self.clock,
            |c, _| op(c),
        )
    }
}

impl Store for ValkeyStore {
    /// With `engine = auto`, the module where the connection's server has it (asked once
    /// per connection), the script elsewhere, and the script at once when a node answers
    /// that `CG.DECIDE` cannot be used (a cluster half upgraded, a node restarted without
    /// the module). With `module`, a server without it cannot decide (`store/engine.rs`).
    fn decide(&self, call: &DecideCall<'_>) -> Result<Vec<i64>, StoreError> {
        let engine = self.engine;
        // On one server the command is packed by hand, in one buffer, for the engine that
        // decides (a cluster connection routes a `Cmd` by its keys, so it gets one).
        let one_server = !self.endpoint.is_cluster();
        let result = pool::with_pooled(
            &self.pooled,
            &self.endpoint,
            self.timeout,
            self.retry_interval,
            &*self.clock,
            |c, state| engine::decide(engine, call, one_server, c, state),
        )
        .map_err(engine::explain);
        self.pooled
            .lock()
            .record_decision(engine, &result, &*self.clock);
        result
    }

    /// EVALSHA of the feedback script (redis-rs sends `SCRIPT LOAD` and the EVALSHA again
    /// on `NOSCRIPT`), within the limiter's timeout like every call; on a cluster routed
    /// by its keys, which share the limiter's hash tag.
    fn feedback(&self, call: &FeedbackCall<'_>) -> Result<Vec<i64>, StoreError> {
        self.call(|c| invoke(call, c))
    }

    /// The release on the engine that decides (`CG.RELEASE` or the release script, see
    /// `engine::release`), within the limiter's timeout, routed by its keys (the limiter's
    /// hash tag).
    fn release(&self, call: &ReleaseCall<'_>) -> Result<Vec<i64>, StoreError> {
        let engine = self.engine;
        pool::with_pooled(
            &self.pooled,
            &self.endpoint,
            self.timeout,
            self.retry_interval,
            &*self.clock,
            |c, state| engine::release(engine, call, c, state),
        )
    }

    fn read_adapt(&self, adapt_key: &[u8], last_key: &[u8]) -> Result<AdaptRead, StoreError> {
        let call = ReadAdaptCall {
            adapt_key,
            last_key,
        };
        self.call(|c| invoke(&call, c))
    }

    fn read_limits(&self, keys: &Keys) -> Result<Stored, StoreError> {
        let (limits_key, version_key) = (keys.limits(), keys.limits_version());
        let call = ReadLimitsCall {
            limits_key: &limits_key,
            version_key: &version_key,
        };
        let raw: read_limits::Raw = self.call(|c| invoke(&call, c))?;
        let read = ReadLimitsCall::decode_reply(raw);
        Ok(Stored {
            version: read.version,
            fields: read.fields,
            error: read.error,
        })
    }

    fn mark_hot(&self, key: &[u8], ttl_seconds: i64) -> Result<(), StoreError> {
        let cmd = plain(mark_hot_command(key, ttl_seconds));
        self.call(|c| cmd.query::<()>(c))
    }

    fn unmark_hot(&self, key: &[u8]) -> Result<(), StoreError> {
        let cmd = plain(unmark_hot_command(key));
        self.call(|c| cmd.query::<()>(c))
    }

    fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        self.call(|c| redis::cmd("EXISTS").arg(key).query::<bool>(c))
    }

    /// A script step at a time (SCAN + UNLINK inside Valkey, 1000 keys per step) routed by
    /// `routing_key`, so on a cluster it runs on the node holding the limiter's slot, and
    /// no step blocks Valkey for long.
    fn reset(&self, routing_key: &[u8], pattern: &[u8]) -> Result<(), StoreError> {
        self.call(|c| {
            let mut cursor = b"0".to_vec();
            loop {
                let call = ResetStepCall {
                    route: routing_key,
                    cursor: &cursor,
                    pattern,
                };
                let step = reset_step::Reply::decode_reply(invoke(&call, c)?);
                if step.done() {
                    return Ok(());
                }
                cursor = step.cursor;
            }
        })
    }

    fn health(&self, ping_now: bool, cluster_key: &[u8]) -> Health {
        let engine = Some(self.engine);
        if ping_now {
            pool::ping_of(
                &self.endpoint,
                self.timeout,
                self.retry_interval,
                cluster_key,
                engine,
                &*self.clock,
            )
        } else {
            pool::status_of(&self.endpoint, self.timeout, engine, &*self.clock)
        }
    }
}
