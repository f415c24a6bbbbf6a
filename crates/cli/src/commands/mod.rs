//! The subcommands with more than a few lines of their own: each file is one subcommand's
//! arguments, run and output (`limiter`, `replay`, `report`); the work itself is the
//! library's (`checkout_guard_cli::{admin, replay, scan}`). `scan`, `peaks` and `generate`
//! are short enough to stay in `main.rs`.

pub mod limiter;
pub mod replay;
pub mod report;
pub mod ship;
