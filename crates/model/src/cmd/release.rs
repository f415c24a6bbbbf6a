//! `release`: the end of an in-flight lease ([`crate::in_flight`]), atomically on
//! Valkey's clock (`release.lua`, the Lua twin of [`crate::server::release_on`], which
//! the native module's [`MODULE_COMMAND`] and the in-memory store run): its contract, its
//! encoder [`ReleaseCall`], its reply decoder and the server's decoder of the call
//! ([`ReceivedRelease`]).
//!
//! The lease is removed from the three levels' sets (a level it was not taken on holds
//! no such member); when it was still held it is counted `released` with its hold time
//! (from its expiry and the lease length), and `leaked` when released only at the end of
//! the request; when its expiry had passed, `expired` (unless a decision already removed
//! it from the global set and counted it: a hot level's set may still hold it); when no
//! set held it (an expired lease a decision already removed and counted), nothing. Reply: `{outcome, now}`
//! ([`ReleaseOutcome`]).

use std::borrow::Cow;

use crate::bucket::Lane;
use crate::cmd::{inputs, int, test_clock_block, Call, Command, CLOCK_BLOCK, SHEBANG};
use crate::in_flight::MAX_LEASE_SECONDS;

/// The native module's command: the same KEYS then ARGV as the script.
pub const MODULE_COMMAND: &str = "CG.RELEASE";

inputs! {
    /// KEYS (the limiter's hash tag).
    pub mod keys {
        /// The lease sets of global, hot lane, hot shop (`KEYS[lease_keys + i]`).
        LEASES[3] = "lease_keys",
        /// The lease stats hash.
        STATS = "lease_stats_key",
    }
}
inputs! {
    /// ARGV.
    pub mod args {
        /// The lease's id.
        LEASE_ID = "lease_id",
        /// The lease length it was taken with, µs.
        LEASE_US = "lease_us",
        /// "1": released at the end of the PHP request, not by `release()`.
        LEAKED = "leaked",
    }
}
/// As the decision's: the test clock's argument, after the call's.
pub const TEST_NOW_ARG: usize = args::LEN;

const BODY: &str = include_str!("../scripts/release.lua");

/// The release script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "release",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: a write script (the shebang), the inputs by name, Valkey's clock, the body.
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    format!("{SHEBANG}{prelude}{CLOCK_BLOCK}{BODY}")
}

/// [`source`] on the test clock (the argument after the call's, µs).
pub fn source_with_test_clock() -> String {
    let prelude = COMMAND.prelude();
    let clock = test_clock_block(TEST_NOW_ARG);
    format!("{SHEBANG}{prelude}{clock}{BODY}")
}

/// What became of a released lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// No set held it: it had expired and a decision removed it (counted then).
    NotHeld = 0,
    /// Released in time.
    Released = 1,
    /// Its expiry had passed: counted expired.
    Expired = 2,
}

/// One call of the release script, by name.
#[derive(Debug, Clone, Copy)]
pub struct ReleaseCall<'a> {
    /// The lease sets of global, hot lane, hot shop ([`crate::Keys::leases`]).
    pub lease_keys: [&'a [u8]; 3],
    /// [`crate::Keys::lease_stats`].
    pub stats_key: &'a [u8],
    pub lease_id: &'a [u8],
    pub lease_us: i64,
    pub leaked: bool,
}

impl ReleaseCall<'_> {
    pub fn keys(&self) -> [&[u8]; keys::LEN] {
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        for lane in Lane::ALL {
            out[keys::LEASES + lane as usize] = self.lease_keys[lane as usize];
        }
        out[keys::STATS] = self.stats_key;
        out
    }

    /// The script's reply: what became of the lease, and the store's now (µs).
    pub fn decode_reply(ints: &[i64]) -> Result<(ReleaseOutcome, i64), String> {
        match *ints {
            [0, now] => Ok((ReleaseOutcome::NotHeld, now)),
            [1, now] => Ok((ReleaseOutcome::Released, now)),
            [2, now] => Ok((ReleaseOutcome::Expired, now)),
            _ => Err(format!("unexpected release reply {ints:?}")),
        }
    }
}

impl Call for ReleaseCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys().into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        let mut out: [Cow<'_, [u8]>; args::LEN] = Default::default();
        out[args::LEASE_ID] = Cow::Borrowed(self.lease_id);
        out[args::LEASE_US] = Cow::Owned(self.lease_us.to_string().into_bytes());
        out[args::LEAKED] = Cow::Borrowed(if self.leaked { &b"1"[..] } else { &b"0"[..] });
        out.into_iter()
    }
}

/// A release as a server receives it, decoded: the inverse of [`ReleaseCall`].
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedRelease<'a> {
    pub lease_keys: [&'a [u8]; 3],
    pub stats_key: &'a [u8],
    pub lease_id: &'a [u8],
    pub lease_us: i64,
    pub leaked: bool,
}

impl<'a> ReceivedRelease<'a> {
    pub fn parse(all: &[&'a [u8]]) -> Result<Self, String> {
        if all.len() != keys::LEN + args::LEN {
            return Err(format!(
                "expected {} keys and {} arguments, got {}",
                keys::LEN,
                args::LEN,
                all.len()
            ));
        }
        let (k, argv) = all.split_at(keys::LEN);
        let lease_us = int("lease", argv[args::LEASE_US])?;
        if !(1..=MAX_LEASE_SECONDS * 1_000_000).contains(&lease_us) {
            return Err(format!(
                "lease must be from 1 to {} µs, got {lease_us}",
                MAX_LEASE_SECONDS * 1_000_000
            ));
        }
        Ok(Self {
            lease_keys: [k[keys::LEASES], k[keys::LEASES + 1], k[keys::LEASES + 2]],
            stats_key: k[keys::STATS],
            lease_id: argv[args::LEASE_ID],
            lease_us,
            leaked: argv[args::LEAKED] == b"1",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::with_slices;

    #[test]
    fn a_received_release_is_what_the_encoder_sent() {
        let call = ReleaseCall {
            lease_keys: [b"g", b"l", b"s"],
            stats_key: b"st",
            lease_id: b"id-1",
            lease_us: 30_000_000,
            leaked: true,
        };
        with_slices(&call, |a| {
            let got = ReceivedRelease::parse(a).unwrap();
            assert_eq!(got.lease_keys, call.lease_keys);
            assert_eq!((got.stats_key, got.lease_id), (&b"st"[..], &b"id-1"[..]));
            assert_eq!((got.lease_us, got.leaked), (30_000_000, true));
            assert!(ReceivedRelease::parse(&a[1..]).is_err());
        });
        assert_eq!(
            ReleaseCall::decode_reply(&[1, 5]),
            Ok((ReleaseOutcome::Released, 5))
        );
        assert!(ReleaseCall::decode_reply(&[3, 5]).is_err());
    }

    #[test]
    fn the_test_variant_differs_only_in_the_clock_block() {
        assert_eq!(
            source().replacen(CLOCK_BLOCK, &test_clock_block(TEST_NOW_ARG), 1),
            source_with_test_clock()
        );
    }
}
