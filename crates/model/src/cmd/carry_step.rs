//! `carry_step`: one step of carrying every bucket of a limiter over a live change at once
//! (`carry_step.lua`; the CLI runs it after `set` until the cursor is 0), so that no key
//! written under the old limits expires on their schedule before a decision reads it.
//! Reply: next cursor, buckets carried over ([`ScanStep`]). A bucket full under the new
//! limits is deleted (a missing key means full).

use std::borrow::Cow;

use crate::cmd::decide::LaneArgs;
use crate::cmd::{inputs, Call, Command, ScanStep, CARRY, SHEBANG};

inputs! {
    /// KEYS: global and hot lane (KEYS[1] routes the call).
    pub mod keys {
        GLOBAL = "global_key",
        HOT_LANE = "hot_lane_key",
    }
}
inputs! {
    /// ARGV.
    pub mod args {
        /// SCAN cursor.
        CURSOR = "cursor",
        /// MATCH pattern: the bucket keys.
        PATTERN = "pattern",
        /// The new version.
        VERSION = "version",
        /// As the decision's `LANES`: lane i's (from 1) interval is
        /// `ARGV[lane_args + 2 * i - 1]`, its tolerance the next.
        LANES[6] = "lane_args",
    }
}

const BODY: &str = include_str!("../scripts/carry_step.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "carry_step",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: a write script (the shebang), `carry.lua`, the inputs by name, the body.
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    format!("{SHEBANG}{CARRY}{prelude}{BODY}")
}

/// The reply.
pub type Reply = ScanStep;

/// One step, by name: the one encoder of its KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub struct CarryStepCall<'a> {
    pub global_key: &'a [u8],
    pub hot_lane_key: &'a [u8],
    pub cursor: &'a [u8],
    /// The limiter's bucket keys ([`crate::Keys::bucket_pattern`]).
    pub pattern: &'a [u8],
    /// The new version.
    pub version: &'a [u8],
    /// The new limits.
    pub lanes: &'a LaneArgs,
}

impl Call for CarryStepCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[keys::GLOBAL] = self.global_key;
        out[keys::HOT_LANE] = self.hot_lane_key;
        out.into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        use args::*;
        let mut out: [Cow<'_, [u8]>; args::LEN] = Default::default();
        out[CURSOR] = Cow::Borrowed(self.cursor);
        out[PATTERN] = Cow::Borrowed(self.pattern);
        out[VERSION] = Cow::Borrowed(self.version);
        for (i, t) in self.lanes.text().iter().enumerate() {
            out[LANES + i] = Cow::Borrowed(t.as_bytes());
        }
        out.into_iter()
    }
}
