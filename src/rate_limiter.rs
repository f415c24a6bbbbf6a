// PHP parameter names are the Rust identifiers verbatim, and PHP callers may use them as
// named arguments: they follow the PHP contract (camelCase), not Rust style.
#![allow(non_snake_case)]

use checkout_guard_core::{Limiter, LimiterOptions};
use ext_php_rs::binary_slice::BinarySlice;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::ZendHashTable;

use crate::convert::array_to_value;
use crate::decision::Decision;
use crate::errors::{configuration, to_php};
use crate::ini;
use crate::telemetry;

/// A token-bucket limiter in Valkey: a global bucket for every shop, and for hot shops a
/// shared hot lane and a bucket per hot shop. Decided atomically in one round trip.
#[php_class]
#[php(name = "CheckoutGuard\\RateLimiter")]
#[php(flags = ClassFlags::Final)]
pub struct RateLimiter {
    inner: Limiter,
}

#[php_impl]
impl RateLimiter {
    /// Options: name, global, hot_lane, hot_shop, hot_shops, url, timeout_ms, on_unavailable
    /// (see the README). Unknown keys and bad values throw ConfigurationException.
    pub fn __construct(options: &ZendHashTable) -> PhpResult<Self> {
        let defaults = ini::defaults().map_err(|e| configuration(e.to_string()))?;
        let value = array_to_value(options).map_err(|e| configuration(e.to_string()))?;
        let options = LimiterOptions::from_value(&value, &defaults)
            .map_err(|e| configuration(e.to_string()))?;
        Ok(Self {
            inner: Limiter::new(options),
        })
    }

    /// Takes `tokens` tokens for `shopId` if every bucket that applies holds them.
    #[php(defaults(tokens = 1))]
    pub fn acquire(&self, shopId: BinarySlice<u8>, tokens: i64) -> PhpResult<Decision> {
        let d = self.inner.acquire(&shopId, tokens).map_err(to_php)?;
        telemetry::observe_decision(&self.inner.options().name, &shopId, &d);
        Ok(Decision::from(d))
    }

    /// Marks the shop hot for every worker at once, until the TTL runs out.
    pub fn mark_hot(&self, shopId: BinarySlice<u8>, ttlSeconds: i64) -> PhpResult<()> {
        self.inner.mark_hot(&shopId, ttlSeconds).map_err(to_php)
    }

    /// Ends a markHot() early; shops listed in hot_shops stay hot.
    pub fn unmark_hot(&self, shopId: BinarySlice<u8>) -> PhpResult<()> {
        self.inner.unmark_hot(&shopId).map_err(to_php)
    }

    /// Whether the shop is hot (listed in hot_shops, or marked and not expired).
    pub fn is_hot(&self, shopId: BinarySlice<u8>) -> PhpResult<bool> {
        self.inner.is_hot(&shopId).map_err(to_php)
    }

    /// Forgets this limiter's bucket state: all buckets are full again. Hot marks stay.
    pub fn reset(&self) -> PhpResult<()> {
        self.inner.reset().map_err(to_php)
    }
}
