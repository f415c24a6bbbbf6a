//! `reset_step`: one step of `reset()` (`reset_step.lua`: SCAN + UNLINK inside Valkey,
//! 1,000 keys a step), routed by any key of the limiter, so on a cluster it runs on the
//! node holding the limiter's slot. Reply: next cursor, keys removed ([`ScanStep`]).

use std::borrow::Cow;

use crate::cmd::{inputs, Call, Command, ScanStep};

inputs! {
    /// KEYS: one key of the limiter, that routes it.
    pub mod keys {
        ROUTE = "_route",
    }
}
inputs! {
    /// ARGV.
    pub mod args {
        /// SCAN cursor.
        CURSOR = "cursor",
        /// MATCH pattern: the limiter's bucket keys.
        PATTERN = "pattern",
    }
}

const BODY: &str = include_str!("../scripts/reset_step.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "reset_step",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: the inputs by name, the body.
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    format!("{prelude}{BODY}")
}

/// The reply.
pub type Reply = ScanStep;

/// One step, by name: the one encoder of its KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub struct ResetStepCall<'a> {
    /// A key of the limiter (routes the call).
    pub route: &'a [u8],
    pub cursor: &'a [u8],
    /// The keys to remove (a prefix followed by `*`).
    pub pattern: &'a [u8],
}

impl Call for ResetStepCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        [self.route].into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        let mut out: [Cow<'_, [u8]>; args::LEN] = Default::default();
        out[args::CURSOR] = Cow::Borrowed(self.cursor);
        out[args::PATTERN] = Cow::Borrowed(self.pattern);
        out.into_iter()
    }
}
