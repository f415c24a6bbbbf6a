//! `feedback`: a throttling answer of the provider, atomically on Valkey's clock
//! (`feedback.lua`, the Lua twin of [`crate::adaptive::feedback`]): its contract, its
//! encoder [`FeedbackCall`], its reply decoder ([`FeedbackCall::decode_reply`]) and the
//! server's decoder of the call ([`ReceivedFeedback`], what
//! [`crate::server::feedback_on`] reads).

use std::borrow::Cow;

use crate::adaptive::{AdaptParams, FeedbackOutcome};
use crate::cmd::{inputs, int, test_clock_block, Call, Command, CLOCK_BLOCK, SHEBANG};

inputs! {
    /// KEYS.
    pub mod keys {
        /// The adaptive budget's state.
        ADAPT = "adapt_key",
        /// The last throttling answer (`"<status>:<µs>:<retry after µs>"`, a day).
        LAST = "last_key",
    }
}
inputs! {
    /// ARGV.
    pub mod args {
        /// The provider's status code (100 to 599).
        STATUS = "status",
        /// The factor applied on a decrease (0 < x < 1).
        DECREASE = "decrease",
        /// The floor, permille (1000: never decreased).
        FLOOR = "floor",
        /// The recovery time from the floor, µs.
        RECOVER = "recover_us",
        /// The provider's `Retry-After`, µs ("0": none).
        RETRY_AFTER = "retry_after_us",
    }
}
/// As the decision's: the test clock's argument, after the call's.
pub const TEST_NOW_ARG: usize = args::LEN;

const BODY: &str = include_str!("../scripts/feedback.lua");

/// The feedback script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "feedback",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: a write script (the shebang), the inputs by name, Valkey's clock, the body.
/// Reply: `{decreased, from, to, paused, pause_until, now}` ([`FeedbackOutcome::to_ints`]).
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

/// One call of the feedback script, by name: the one encoder of its KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub struct FeedbackCall<'a> {
    pub adapt_key: &'a [u8],
    pub last_key: &'a [u8],
    /// The provider's status code (100 to 599).
    pub status: i64,
    pub decrease: f64,
    pub params: AdaptParams,
    /// The provider's `Retry-After`, µs (0: none).
    pub retry_after_us: i64,
}

impl FeedbackCall<'_> {
    pub fn keys(&self) -> [&[u8]; keys::LEN] {
        use keys::*;
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[ADAPT] = self.adapt_key;
        out[LAST] = self.last_key;
        out
    }

    pub fn args(&self) -> [String; args::LEN] {
        use args::*;
        let mut out: [String; args::LEN] = Default::default();
        out[STATUS] = self.status.to_string();
        out[DECREASE] = self.decrease.to_string();
        out[FLOOR] = self.params.floor_permille.to_string();
        out[RECOVER] = self.params.recover_us.to_string();
        out[RETRY_AFTER] = self.retry_after_us.max(0).to_string();
        out
    }

    /// The script's reply.
    pub fn decode_reply(ints: &[i64]) -> Result<FeedbackOutcome, String> {
        FeedbackOutcome::from_ints(ints)
            .ok_or_else(|| format!("unexpected feedback reply {ints:?}"))
    }
}

impl Call for FeedbackCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys().into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        self.args().into_iter().map(|a| Cow::Owned(a.into_bytes()))
    }
}

/// A feedback call as a server receives it (its KEYS then ARGV), decoded and validated:
/// the inverse of [`FeedbackCall`]'s encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedFeedback<'a> {
    pub adapt_key: &'a [u8],
    pub last_key: &'a [u8],
    pub status: i64,
    pub decrease: f64,
    pub params: AdaptParams,
    pub retry_after_us: i64,
}

impl<'a> ReceivedFeedback<'a> {
    /// Decodes the call's KEYS then ARGV, each by its name in [`keys`] and [`args`].
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
        let status = int("status", argv[args::STATUS])?;
        if !(100..=599).contains(&status) {
            return Err(format!("status must be from 100 to 599, got {status}"));
        }
        let decrease = std::str::from_utf8(argv[args::DECREASE])
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|d| *d > 0.0 && *d < 1.0)
            .ok_or("decrease must be a number above 0 and below 1")?;
        let floor = int("floor", argv[args::FLOOR])?;
        let recover_us = int("recovery", argv[args::RECOVER])?;
        let retry_after_us = int("retry after", argv[args::RETRY_AFTER])?;
        if !(1..=crate::adaptive::FULL).contains(&floor) || recover_us < 1 || retry_after_us < 0 {
            return Err(format!(
                "floor {floor}, recovery {recover_us} µs or retry after {retry_after_us} µs out of range"
            ));
        }
        Ok(Self {
            adapt_key: k[keys::ADAPT],
            last_key: k[keys::LAST],
            status,
            decrease,
            params: AdaptParams {
                floor_permille: floor,
                recover_us,
            },
            retry_after_us,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::with_slices;

    #[test]
    fn a_received_feedback_is_what_the_encoder_sent() {
        let call = FeedbackCall {
            adapt_key: b"a",
            last_key: b"l",
            status: 429,
            decrease: 0.5,
            params: AdaptParams {
                floor_permille: 200,
                recover_us: 60_000_000,
            },
            retry_after_us: 3_000_000,
        };
        with_slices(&call, |a| {
            let got = ReceivedFeedback::parse(a).unwrap();
            assert_eq!((got.adapt_key, got.last_key), (&b"a"[..], &b"l"[..]));
            assert_eq!((got.status, got.decrease), (429, 0.5));
            assert_eq!(got.params, call.params);
            assert_eq!(got.retry_after_us, 3_000_000);
            assert!(ReceivedFeedback::parse(&a[1..]).is_err());
        });
    }

    #[test]
    fn the_test_variant_differs_only_in_the_clock_block() {
        assert_eq!(
            source().replacen(CLOCK_BLOCK, &test_clock_block(TEST_NOW_ARG), 1),
            source_with_test_clock()
        );
    }
}
