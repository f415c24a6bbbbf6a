//! checkout-guard's configuration: what a limiter is set up with, turned into the
//! model's types (`checkout-guard-model`), with errors naming the option and the value.
//!
//! It runs where a limiter is built: in the PHP worker (through the extension and
//! `checkout-guard-runtime`), in the CLI and in tests. The Valkey module does not link it.
//!
//! - [`options`]: the options array given to `new RateLimiter([...])` ([`LimiterOptions`]),
//!   its INI [`Defaults`] and the checks of per-call arguments;
//! - [`value`]: the PHP-like [`Value`] the extension hands over, and the helpers every
//!   parser reads it with;
//! - [`endpoint`]: Valkey URLs (single server, Unix socket, cluster seeds, Sentinel);
//!   [`tls`]: the TLS options and INI defaults, with the crate's one file read (the PEM
//!   files, checked at construction); [`mask`]: passwords kept out of what is shown;
//! - [`settings`]: the INI settings `checkout_guard.*` and their defaults, the one table;
//! - [`live`]: the live-limits codec (the stored overrides, the published settings).

pub mod endpoint;
pub mod live;
pub mod mask;
pub mod options;
pub mod settings;
pub mod tls;
pub mod value;

pub use endpoint::Endpoint;
pub use mask::mask_password;
pub use options::{
    auto_hot_from_value, bucket_value, buckets_from_value, sentinel_from_value, validate_max_wait,
    validate_shop_id, validate_tokens, validate_ttl, Adaptive, Defaults, Engine, LimiterOptions,
    Mode, OnUnavailable, MAX_SHOP_ID_BYTES,
};
pub use tls::{Tls, TlsDefaults};
pub use value::Value;
