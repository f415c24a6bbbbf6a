//! The limiter: validated options, token-bucket arithmetic, key naming, the Valkey script
//! that makes one decision atomically, and the Rust model that script mirrors.
//!
//! Data path of one decision: [`Limiter::acquire`] validates the shop and token count,
//! builds the keys, runs [`script::DECIDE`] on the process's pooled connection (one round
//! trip, on Valkey's clock), and turns the raw [`StepReply`] into a [`Decision`] with
//! [`Decision::from_reply`]; `remaining` and `retry_after` are derived in Rust from the
//! bucket states the script returns.

pub mod admin;
mod bucket;
mod decision;
pub mod denials;
mod error;
mod keys;
pub mod live;
mod options;
pub mod script;
mod service;
mod step;

pub use bucket::{BucketSet, BucketSpec, Lane, StoredBucket};
pub use decision::{Decision, Reason};
pub use error::{ConfigError, LimiterError};
pub use keys::Keys;
pub use options::{
    bucket_value, buckets_from_value, validate_shop_id, validate_tokens, validate_ttl, AutoHot,
    Defaults, LimiterOptions, OnUnavailable, MAX_SHOP_ID_BYTES, MAX_TTL_SECONDS,
};
pub use service::{Limiter, LimitsChange, Notices};
pub use step::{step, StepReply, StoredState};
