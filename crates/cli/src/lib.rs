//! checkout-guard's command line, as a library for its tests: finding high-load windows
//! and daily peaks in recorded events ([`scan`]), and operating a running limiter from
//! outside PHP ([`admin`]). It depends on the model (what a decision and its keys are)
//! and on a Valkey client, never on the worker's runtime.

pub mod admin;
pub mod in_flight;
pub mod replay;
pub mod scan;
pub mod ship;
pub mod shop_id;
pub mod valkey;
