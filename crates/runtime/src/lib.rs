//! What runs inside the PHP worker, without PHP: the limiter over a [`store::Store`] (the
//! process's pooled Valkey connection, or an in-memory store in tests), the live-limit
//! cache, the local denial table, and telemetry (events, buffer, sinks), all on an
//! injected [`clock::Clock`].
//!
//! The test doubles (`store::MemoryStore`, `store::Fault`, `clock::FakeClock`) exist only
//! with the `test-support` feature: the extension is built without them.
//!
//! The decision itself (bucket math, options, the script and its encoder) is
//! `checkout-guard-model`'s; this crate adds the I/O and the process-wide state.

pub mod clock;
pub mod denials;
pub mod fpm_pool;
pub mod limiter;
pub mod live_cache;
pub mod metrics;
pub mod notices;
pub mod process;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod warn_log;

pub use checkout_guard_model as model;
pub use clock::{Clock, SystemClock};
pub use limiter::Limiter;
pub use notices::{AdaptChange, AdaptWhy, LimitsChange, Notices};
#[cfg(feature = "test-support")]
pub use store::MemoryStore;
pub use store::{Health, Store, StoreError, ValkeyStore};
