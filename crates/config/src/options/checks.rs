//! The checks of per-call arguments: shop IDs, token counts, TTLs.

use super::MAX_SHOP_ID_BYTES;
use crate::value::quote_bytes;
use checkout_guard_model::bounds::{MAX_TTL_SECONDS, MAX_WAIT_US};
use checkout_guard_model::bucket::BucketSet;
use checkout_guard_model::error::ConfigError;

/// A shop ID is 1 to 128 bytes without control characters (bytes below 0x20, and 0x7f).
/// Any other byte, including non-UTF-8, is allowed: keys are binary-safe.
pub fn validate_shop_id(shop: &[u8]) -> Result<(), ConfigError> {
    if shop.is_empty() || shop.len() > MAX_SHOP_ID_BYTES {
        return Err(ConfigError::new(
            "shopId",
            format!(
                "must be 1 to {MAX_SHOP_ID_BYTES} bytes, got {} bytes: {}",
                shop.len(),
                quote_bytes(shop)
            ),
        ));
    }
    if let Some(pos) = shop.iter().position(|&b| b < 0x20 || b == 0x7f) {
        return Err(ConfigError::new(
            "shopId",
            format!(
                "must not contain control characters (byte 0x{:02x} at offset {pos}), got {}",
                shop[pos],
                quote_bytes(shop)
            ),
        ));
    }
    Ok(())
}

/// `tokens` is between 1 and the smallest configured capacity.
pub fn validate_tokens(tokens: i64, buckets: &BucketSet) -> Result<(), ConfigError> {
    let max = buckets.min_capacity();
    if !(1..=max).contains(&tokens) {
        return Err(ConfigError::new(
            "tokens",
            format!("must be from 1 to {max} (the smallest configured capacity), got {tokens}"),
        ));
    }
    Ok(())
}

/// `markHot()`'s TTL is 1 second to one year.
pub fn validate_ttl(ttl_seconds: i64) -> Result<(), ConfigError> {
    if !(1..=MAX_TTL_SECONDS).contains(&ttl_seconds) {
        return Err(ConfigError::new(
            "ttlSeconds",
            format!("must be from 1 to {MAX_TTL_SECONDS}, got {ttl_seconds}"),
        ));
    }
    Ok(())
}

/// `acquire()`'s `maxWaitSeconds`: a number from 0 to 10 (seconds), turned into whole
/// microseconds rounded down (a reservation never waits longer than it was allowed to).
pub fn validate_max_wait(seconds: f64) -> Result<i64, ConfigError> {
    let max = MAX_WAIT_US as f64 / 1e6;
    if !(0.0..=max).contains(&seconds) {
        return Err(ConfigError::new(
            "maxWaitSeconds",
            format!("must be a number from 0 to {max} (seconds), got {seconds:?}"),
        ));
    }
    // The most whole µs not above `seconds` as doubles compare (floor of the product
    // would cut 4.1 s to 4099999 µs: 4.1 * 1e6 is 4099999.9999999995).
    let us = (seconds * 1e6).round() as i64;
    Ok(us - i64::from(us as f64 / 1e6 > seconds))
}
