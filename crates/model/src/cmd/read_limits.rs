//! `read_limits`: the live limits' version and hash in one atomic step
//! (`read_limits.lua`): the version is the one every decision compares with, never a copy
//! that could differ. Keys of the wrong type (written by hand) read as empty, with the
//! error: the version as the decisions' MGET sees it (nil), the hash as unreadable. Reply:
//! version, fields, error ([`ReadLimitsCall::decode_reply`]).

use std::borrow::Cow;

use crate::cmd::{inputs, Call, Command};

inputs! {
    /// KEYS.
    pub mod keys {
        /// The limits hash.
        LIMITS = "limits_key",
        /// Its version.
        VERSION = "version_key",
    }
}
inputs! {
    /// ARGV: none.
    pub mod args {}
}

const BODY: &str = include_str!("../scripts/read_limits.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "read_limits",
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

/// The reply as a client reads it: `{version, {field, value, ...}, error}`.
pub type Raw = (Vec<u8>, Vec<(Vec<u8>, Vec<u8>)>, String);

/// What was read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReadLimitsReply {
    /// The version (empty: none).
    pub version: Vec<u8>,
    /// The hash's fields.
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// Why the hash could not be read.
    pub error: Option<String>,
}

/// One read, by name: the one encoder of its KEYS.
#[derive(Debug, Clone, Copy)]
pub struct ReadLimitsCall<'a> {
    pub limits_key: &'a [u8],
    pub version_key: &'a [u8],
}

impl ReadLimitsCall<'_> {
    /// The reply; an empty error is none.
    pub fn decode_reply((version, fields, error): Raw) -> ReadLimitsReply {
        ReadLimitsReply {
            version,
            fields,
            error: (!error.is_empty()).then_some(error),
        }
    }
}

impl Call for ReadLimitsCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[keys::LIMITS] = self.limits_key;
        out[keys::VERSION] = self.version_key;
        out.into_iter()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        std::iter::empty()
    }
}
