//! Administration: marking shops hot and unmarking them, reset, health.

use checkout_guard_config::{validate_shop_id, validate_ttl};
use checkout_guard_model::{Lane, LimiterError};

use super::Limiter;
use crate::denials;
use crate::store;

impl Limiter {
    /// Marks `shop` hot for every worker at once until `ttl_seconds` run out.
    pub fn mark_hot(&self, shop: &[u8], ttl_seconds: i64) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        validate_ttl(ttl_seconds)?;
        let key = self.keys.hot_flag(shop);
        self.store
            .mark_hot(&key, ttl_seconds)
            .map_err(|e| self.unavailable(e))?;
        // The shop's hot buckets apply from now on: this host no longer knows its state.
        denials::forget(self.hot_status_key(shop), self.clock.monotonic_ns());
        Ok(())
    }

    /// Ends a `markHot()` early. Shops listed in `hot_shops` stay hot.
    pub fn unmark_hot(&self, shop: &[u8]) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        let key = self.keys.hot_flag(shop);
        self.store
            .unmark_hot(&key)
            .map_err(|e| self.unavailable(e))?;
        // The shop's hot buckets no longer apply: forget what this host knew of them.
        let in_force = self.current();
        let now = self.clock.monotonic_ns();
        denials::forget(self.hot_status_key(shop), now);
        denials::forget(self.denial_key(&in_force, Lane::HotShop, shop), now);
        Ok(())
    }

    /// Whether `shop` is hot: listed in `hot_shops`, or marked and not yet expired.
    pub fn is_hot(&self, shop: &[u8]) -> Result<bool, LimiterError> {
        validate_shop_id(shop)?;
        if self.is_statically_hot(shop) {
            return Ok(true);
        }
        let key = self.keys.hot_flag(shop);
        self.store.exists(&key).map_err(|e| self.unavailable(e))
    }

    /// Forgets every bucket of this limiter (all full again). Hot marks are kept.
    /// In steps routed by the limiter's hash tag (see [`Store::reset`]).
    pub fn reset(&self) -> Result<(), LimiterError> {
        for pattern in [self.keys.bucket_pattern(), self.keys.endpoint_pattern()] {
            self.store
                .reset(&self.global_key, &pattern)
                .map_err(|e| self.unavailable(e))?;
        }
        // Every bucket is full again: nothing this host knew still holds.
        denials::forget_all(self.clock.monotonic_ns());
        Ok(())
    }

    /// The state of this limiter's pooled connection; with `ping`, after one PING over it
    /// (no new connection per check, none during the back-off).
    pub fn health(&self, ping: bool) -> store::Health {
        self.store.health(ping, &self.global_key)
    }
}
