//! The bounds a decision holds its arguments to, whoever sends them (the worker's checks
//! in `checkout-guard-config`, a decoded call in `server.rs`).

/// Longest `markHot()` TTL, and longest `auto_hot.ttl_seconds`: one year.
pub const MAX_TTL_SECONDS: i64 = 365 * 86_400;
/// Longest wait of a reservation (`acquire(..., maxWaitSeconds)`): 10 s, in µs.
pub const MAX_WAIT_US: i64 = 10_000_000;
