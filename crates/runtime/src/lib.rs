//! What runs inside the PHP worker, without PHP: the limiter over a [`store::Store`] (the
//! process's pooled Valkey connection, or an in-memory store in tests), the live-limit
//! cache, the local denial table, and telemetry (events, buffer, sinks).
//!
//! The decision itself (bucket math, options, the script and its encoder) is
//! `checkout-guard-model`'s; this crate adds the I/O and the process-wide state.

pub mod denials;
pub mod limiter;
pub mod live_cache;
pub mod process;
pub mod store;
pub mod telemetry;

pub use checkout_guard_model as model;
pub use limiter::{Limiter, LimitsChange, Notices};
pub use store::{Health, MemoryStore, Store, StoreError, ValkeyStore};
