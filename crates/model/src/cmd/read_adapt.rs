//! `read_adapt`: the adaptive budget's state and last throttling answer, with Valkey's
//! clock (µs), for `health()` and `limiter status` (`read_adapt.lua`): read only (the
//! shebang's `no-writes`), so it runs on a replica too. Reply: the two values (empty:
//! missing) and the server's now ([`Reply`]).

use std::borrow::Cow;

use crate::cmd::{inputs, Call, Command, SHEBANG_NO_WRITES};

inputs! {
    /// KEYS.
    pub mod keys {
        /// The adaptive budget's state ([`crate::Keys::adapt`]).
        ADAPT = "adapt_key",
        /// The last throttling answer ([`crate::Keys::adapt_last`]).
        LAST = "last_key",
    }
}
inputs! {
    /// ARGV: none.
    pub mod args {}
}

const BODY: &str = include_str!("../scripts/read_adapt.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "read_adapt",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// The script: a read-only script (the shebang), the inputs by name, the body.
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    format!("{SHEBANG_NO_WRITES}{prelude}{BODY}")
}

/// The reply: the state and the last answer (empty: missing), the server's now (µs).
pub type Reply = (Vec<u8>, Vec<u8>, i64);

/// One read, by name: the one encoder of its KEYS.
#[derive(Debug, Clone, Copy)]
pub struct ReadAdaptCall<'a> {
    pub adapt_key: &'a [u8],
    pub last_key: &'a [u8],
}

impl Call for ReadAdaptCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[keys::ADAPT] = self.adapt_key;
        out[keys::LAST] = self.last_key;
        out.into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        std::iter::empty()
    }
}
