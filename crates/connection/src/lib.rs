//! The one connection layer to Valkey, used by the PHP worker (`checkout-guard-runtime`'s
//! pool, its decisions and its stream sink) and by the on-call CLI alike; neither opens a
//! connection any other way.
//!
//! What it owns:
//! - a parsed [`Endpoint`](checkout_guard_config::Endpoint) as redis-rs connects to it, named
//!   for its [`Client`] in `CLIENT LIST` ([`info`]: [`connection_info`], [`addresses`]);
//! - opening a single-server or cluster [`Connection`] within a deadline (connect and the
//!   set-up, AUTH/SELECT/HELLO, under one deadline), its per-command timeout, and a call's
//!   deadline over several commands ([`Connection::within`]) or a pipeline's replies
//!   ([`Connection::pipeline_within`]);
//! - one server's socket, its own (`wire.rs`): one deadline for every write and read of a
//!   call, `EINTR` waited through, replies cut at the end of each RESP value;
//! - one call on a kept connection, at most once ([`reconnect_once`], with the call's
//!   [`Budget`] and what went wrong, [`Failure`]): a connection closed while idle replaced
//!   before anything is sent, a command of which a byte was written never sent again
//!   ([`Failure::Unknown`]);
//! - what an error means ([`errors`]: an error reply, a missing command, an ACL's NOPERM,
//!   another build's arity) and how a failure is shown ([`describe`]).
//! - the model's commands as redis-rs sends them ([`scripts`]): one `redis::Script` per
//!   script, built from its home in `checkout_guard_model::cmd` and shared by the worker
//!   and the CLI, and a call's KEYS then ARGV put on an invocation or a command.
//!
//! What it does not own: the worker's per-process pool, back-off and fork safety, and its
//! choice of engine (`checkout-guard-runtime`'s `store`); the CLI's one connection per run
//! (`checkout-guard`'s `valkey.rs`). They keep their connection in an `Option` and call
//! [`reconnect_once`].
//!
//! - **TLS** (`rediss://`, `valkeys://`, `rediss+cluster://`, `valkeys+cluster://`): the
//!   model's `Endpoint` carries the `tls` settings (files read and checked when the
//!   options were); [`info::tls_connection_info`] turns them into redis-rs's TLS address
//!   and certificates (rustls, `tls-rustls` in this crate's `Cargo.toml`);
//!   on one server the handshake is this crate's own, rustls over `wire.rs`'s socket,
//!   within the open's deadline, `peer_name` checked in it; a cluster's every node the
//!   same way (`cluster.rs`).
//!
//! - **Cluster** (`valkey+cluster://`, ...): the connection layer's own (`cluster.rs`):
//!   the slot map asked of a seed, a `wire.rs` connection per node, commands routed by
//!   their first key's slot, `MOVED`/`ASK`/`TRYAGAIN`/`CLUSTERDOWN` followed (answers of
//!   commands that did not run), and nothing written ever sent again, as on one server.
//!
//! - **Sentinel** (`valkey+sentinel://`, `redis+sentinel://`, TLS twins `valkeys+sentinel://`,
//!   `rediss+sentinel://`): the third arm of [`info::Addresses`] (the sentinels, with their
//!   own credentials from the `sentinel` option, and the service name) and of
//!   [`Connection::open`]: the sentinels asked in order for the primary
//!   (`SENTINEL GET-MASTER-ADDR-BY-NAME`, each a share of what is left), the primary opened
//!   as a single server ([`info::primary_info`]: the URL's credentials and database), its
//!   `ROLE` checked (a replica or an unreachable primary passed over for the next
//!   sentinel's answer), all within the one deadline. A failover is found by
//!   [`reconnect_once`]'s reconnect, which opens (and so asks the sentinels) again;
//!   `READONLY` from a demoted primary ([`errors::is_readonly`]) counts as a broken
//!   connection there.

mod cluster;
mod connection;
pub mod errors;
pub mod info;
mod reconnect;
pub mod scripts;
mod single;
pub mod threads;
pub mod tls;
mod wire;

pub use connection::Connection;
pub use errors::describe;
pub use info::{addresses, connection_info, primary_info, tls_connection_info, Addresses, Client};
pub use reconnect::{reconnect_once, Budget, Failure};

/// The redis-rs this layer is built on (its transport features are chosen here).
pub use redis;
