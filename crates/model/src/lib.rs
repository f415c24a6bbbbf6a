//! checkout-guard's model: what a decision is, without any I/O.
//!
//! Pure Rust: no Valkey client, no sockets, no statics, no PHP. It runs wherever a
//! decision is reasoned about: in the PHP worker (through `checkout-guard-runtime`), in the
//! CLI, and in tests that check random operation sequences against the reference [`step`].
//!
//! - [`bucket`]: the token-bucket arithmetic (GCRA on microseconds) and stored buckets;
//! - [`step`]: the reference decision, the Lua script's twin;
//! - [`decision`]: the [`Decision`] a caller gets, derived from a reply;
//! - [`cmd`]: one home per Valkey command (`cmd/decide.rs`, `cmd/feedback.rs`, ...): its
//!   named KEYS/ARGV table, its encoder (e.g. [`DecideCall`]), its reply decoder, its
//!   `.lua` file under `src/scripts/`; [`cmd::keys_then_argv`] is the one sequence sent;
//! - [`server`]: the decision and the feedback as a server makes them in Rust (the
//!   native module, the in-memory store);
//! - [`keys`]: key names; [`slot`]: a key's cluster slot (CRC16); [`auto_hot`],
//!   [`bounds`], [`limits_version`]: what the decision needs of `auto_hot`, of its
//!   arguments' bounds and of a live-limits version;
//! - [`events`]: the event schema (types, attribute names and types), written by the
//!   runtime's telemetry and read by the CLI's scan, report and replay.
//!
//! Configuration (options from PHP values, URLs, TLS, the INI table, the live-limits
//! codec) is `checkout-guard-config`, which builds this crate's types: this crate never
//! depends on it.

pub mod adaptive;
pub mod auto_hot;
pub mod bounds;
pub mod bucket;
pub mod cmd;
pub mod decision;
pub mod endpoints;
pub mod error;
pub mod events;
pub mod in_flight;
pub mod keys;
pub mod limits_version;
pub mod server;
pub mod slot;
pub mod step;

pub use auto_hot::AutoHot;
pub use bounds::{MAX_TTL_SECONDS, MAX_WAIT_US};
pub use bucket::{BucketSet, BucketSpec, Lane, StoredBucket};
pub use cmd::decide::{
    AdaptArgs, AutoHotArgs, DecideCall, DecideKeys, DecideReply, EndpointArgs, InFlightArgs,
    LaneArgs, ShopKeys,
};
pub use cmd::feedback::FeedbackCall;
pub use decision::{Decision, Reason};
pub use endpoints::{Endpoints, Priorities};
pub use error::{ConfigError, LimiterError};
pub use in_flight::{InFlight, LeaseLevel, LeaseSet, LeaseStats};
pub use keys::Keys;
pub use step::{
    auto_hot_window, lanes_in, reservation_wait_us, reservation_wait_with, step, StepInput,
    StepReply, StoredState, WindowCounts,
};

/// The version of checkout-guard, shown in `phpinfo()` and sent as the client's library
/// version to Valkey.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
