//! Pure Rust core of checkout-guard, shared by the PHP extension and the CLI.
//!
//! Nothing here links PHP: the decision logic (options, bucket arithmetic, keys, the
//! Valkey script and its Rust model) and the connection to Valkey are plain Rust, so
//! `cargo test` covers them without a PHP runtime.

pub mod limiter;
pub mod process;
pub mod scan;
pub mod store;
pub mod telemetry;
pub mod value;

pub use limiter::{
    AutoHot, BucketSpec, ConfigError, Decision, Defaults, Limiter, LimiterError, LimiterOptions,
    LimitsChange, Notices, OnUnavailable, Reason,
};
pub use value::Value;

/// The version of checkout-guard, shown in `phpinfo()` and sent as the client's library
/// version to Valkey.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
