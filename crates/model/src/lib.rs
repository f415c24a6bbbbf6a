//! checkout-guard's model: what a decision is, without any I/O.
//!
//! Pure Rust: no Valkey client, no sockets, no statics, no PHP. It runs wherever a
//! decision is reasoned about: in the PHP worker (through `checkout-guard-runtime`), in the
//! CLI, and in tests that check random operation sequences against the reference [`step`].
//!
//! - [`bucket`]: the token-bucket arithmetic (GCRA on microseconds) and stored buckets;
//! - [`step`]: the reference decision, the Lua script's twin;
//! - [`decision`]: the [`Decision`] a caller gets, derived from a reply;
//! - [`options`]: typed options, valid by construction; [`settings`]: the INI settings
//!   and their defaults, the one table;
//! - [`cmd`]: one home per Valkey command (`cmd/decide.rs`, `cmd/feedback.rs`, ...): its
//!   named KEYS/ARGV table, its encoder (e.g. [`DecideCall`]), its reply decoder, its
//!   `.lua` file under `src/scripts/`; [`cmd::keys_then_argv`] is the one sequence sent;
//! - [`server`]: the decision and the feedback as a server makes them in Rust (the
//!   native module, the in-memory store);
//! - [`keys`], [`live`], [`endpoint`], [`value`]: key names, the live-limits codec,
//!   Valkey URLs, PHP-like values; [`slot`]: a key's cluster slot (CRC16).

pub mod adaptive;
pub mod bucket;
pub mod cmd;
pub mod decision;
pub mod endpoint;
pub mod error;
pub mod keys;
pub mod live;
pub mod options;
pub mod server;
pub mod settings;
pub mod slot;
pub mod step;
pub mod tls;
pub mod value;

pub use bucket::{BucketSet, BucketSpec, Lane, StoredBucket};
pub use cmd::decide::{
    AdaptArgs, AutoHotArgs, DecideCall, DecideKeys, DecideReply, LaneArgs, ShopKeys,
};
pub use cmd::feedback::FeedbackCall;
pub use decision::{Decision, Reason};
pub use endpoint::{mask_password, Endpoint};
pub use error::{ConfigError, LimiterError};
pub use keys::Keys;
pub use options::{
    bucket_value, buckets_from_value, sentinel_from_value, validate_max_wait, validate_shop_id,
    validate_tokens, validate_ttl, Adaptive, AutoHot, Defaults, Engine, LimiterOptions, Mode,
    OnUnavailable, MAX_SHOP_ID_BYTES, MAX_TTL_SECONDS, MAX_WAIT_US,
};
pub use step::{
    auto_hot_window, lanes_in, reservation_wait_us, step, step_auto_hot, StepReply, StoredState,
    WindowCounts,
};
pub use tls::{Tls, TlsDefaults};
pub use value::Value;

/// The version of checkout-guard, shown in `phpinfo()` and sent as the client's library
/// version to Valkey.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
