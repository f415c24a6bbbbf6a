//! `set_limits`: writes new live limits atomically, only if the version is still
//! `expected` (`set_limits.lua`): the hash is replaced whole by what the writer validated
//! (so fields nobody could read are gone), and in the same step the global and hot-lane
//! buckets are carried over to the new limits as of the change, a missing one (full) at
//! the old limits' capacity. Reply: the new version ([`Reply`]), or an error when someone
//! else changed them first. Sent by the CLI's `limiter set`.

use std::borrow::Cow;

use crate::cmd::decide::LaneArgs;
use crate::cmd::{inputs, Call, Command, CARRY};

inputs! {
    /// KEYS.
    pub mod keys {
        /// The limits hash.
        LIMITS = "limits_key",
        /// Its version.
        VERSION = "version_key",
        /// The changes stream.
        CHANGES = "changes_key",
        /// The global and hot-lane buckets (`KEYS[bucket_keys + j + 1]`, j from 0).
        BUCKETS[2] = "bucket_keys",
    }
}
inputs! {
    /// ARGV.
    pub mod args {
        /// The version expected ("" = none).
        EXPECTED = "expected",
        /// Who.
        BY = "by",
        /// When (ms).
        AT = "at",
        /// The old limits, described.
        OLD = "old",
        /// The new limits, described.
        NEW = "new",
        /// A fresh epoch (used when the stored limits are created anew).
        EPOCH = "epoch",
        /// Interval and tolerance of global and hot lane under the old limits
        /// (`ARGV[old_lanes + 2 * j + 1]` and the next, j from 0).
        OLD_LANES[4] = "old_lanes",
        /// The same under the new ("0" = not configured).
        NEW_LANES[4] = "new_lanes",
        /// (field, value) pairs written to the hash: every override of the new limits
        /// (lane, "capacity/rate"), and the mode.
        OVERRIDES[0] = "overrides",
    }
}

const BODY: &str = include_str!("../scripts/set_limits.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "set_limits",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: `carry.lua`, the inputs by name, the body.
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    format!("{CARRY}{prelude}{BODY}")
}

/// The reply: the new version.
pub type Reply = Vec<u8>;

/// One write of live limits, by name: the one encoder of its KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub struct SetLimitsCall<'a> {
    pub limits_key: &'a [u8],
    pub version_key: &'a [u8],
    pub changes_key: &'a [u8],
    pub global_key: &'a [u8],
    pub hot_lane_key: &'a [u8],
    /// The version expected (empty: none).
    pub expected: &'a [u8],
    pub by: &'a str,
    pub at_ms: i64,
    /// The old and new limits, described (for the changes stream).
    pub old: &'a str,
    pub new: &'a str,
    /// A fresh epoch, used when the limits are stored anew.
    pub epoch: &'a str,
    /// The limits in force before and after (global and hot lane are sent).
    pub old_lanes: &'a LaneArgs,
    pub new_lanes: &'a LaneArgs,
    /// The hash's fields besides the version: (lane, "capacity/rate") per override, and
    /// ("mode", name) when a mode is stored.
    pub fields: &'a [(&'a str, String)],
}

fn text(s: &str) -> Cow<'_, [u8]> {
    Cow::Borrowed(s.as_bytes())
}

/// Global and hot lane of the decision's lane group: its first four values.
const TWO_LANES: usize = 4;

impl Call for SetLimitsCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        use keys::*;
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[LIMITS] = self.limits_key;
        out[VERSION] = self.version_key;
        out[CHANGES] = self.changes_key;
        out[BUCKETS] = self.global_key;
        out[BUCKETS + 1] = self.hot_lane_key;
        out.into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        use args::*;
        let mut out: [Cow<'_, [u8]>; args::LEN] = Default::default();
        out[EXPECTED] = Cow::Borrowed(self.expected);
        out[BY] = text(self.by);
        out[AT] = Cow::Owned(self.at_ms.to_string().into_bytes());
        out[OLD] = text(self.old);
        out[NEW] = text(self.new);
        out[EPOCH] = text(self.epoch);
        for i in 0..TWO_LANES {
            out[OLD_LANES + i] = text(&self.old_lanes.text()[i]);
            out[NEW_LANES + i] = text(&self.new_lanes.text()[i]);
        }
        let fields = self.fields.iter().flat_map(|(f, v)| [text(f), text(v)]);
        out.into_iter().chain(fields)
    }
}
