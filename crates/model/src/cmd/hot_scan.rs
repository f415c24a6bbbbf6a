//! `hot_scan`: the hot shops of a limiter for `limiter status` (the CLI), a SCAN step at a
//! time inside Valkey (`hot_scan.lua`). Reply: next cursor, then per flag its key, value
//! and PTTL ([`HotScanCall::decode_reply`]).

use std::borrow::Cow;

use crate::cmd::{inputs, Call, Command, Item};

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
        /// MATCH pattern: the hot flags.
        PATTERN = "pattern",
    }
}

const BODY: &str = include_str!("../scripts/hot_scan.lua");

/// The script's contract and Lua.
pub const COMMAND: Command = Command {
    name: "hot_scan",
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

/// One step, by name: the one encoder of its KEYS and ARGV.
#[derive(Debug, Clone, Copy)]
pub struct HotScanCall<'a> {
    /// A key of the limiter (routes the call).
    pub route: &'a [u8],
    pub cursor: &'a [u8],
    /// The hot flags ([`crate::Keys::hot_flag_pattern`]).
    pub pattern: &'a [u8],
}

/// One hot flag found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotFlag {
    /// The flag's key.
    pub key: Vec<u8>,
    /// Its value (`auto`: set by `auto_hot`).
    pub value: Vec<u8>,
    /// Its PTTL (ms; -1 when the reply held no integer).
    pub pttl_ms: i64,
}

/// What one step answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HotScanStep {
    /// The next cursor ("0": done).
    pub cursor: Vec<u8>,
    pub flags: Vec<HotFlag>,
}

impl HotScanCall<'_> {
    /// The reply `{cursor, key, value, pttl, key, value, pttl, ...}`.
    pub fn decode_reply(reply: Vec<Item>) -> HotScanStep {
        let mut it = reply.into_iter();
        let cursor = it.next().map(Item::into_bytes).unwrap_or_default();
        let mut flags = Vec::new();
        while let (Some(k), Some(v), Some(ttl)) = (it.next(), it.next(), it.next()) {
            flags.push(HotFlag {
                key: k.into_bytes(),
                value: v.into_bytes(),
                pttl_ms: match ttl {
                    Item::Int(i) => i,
                    _ => -1,
                },
            });
        }
        HotScanStep { cursor, flags }
    }
}

impl Call for HotScanCall<'_> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_reads_as_flags() {
        let step = HotScanCall::decode_reply(vec![
            Item::Bytes(b"17".to_vec()),
            Item::Bytes(b"k1".to_vec()),
            Item::Bytes(b"auto".to_vec()),
            Item::Int(5000),
            Item::Bytes(b"k2".to_vec()),
            Item::Bytes(b"1".to_vec()),
            Item::Other,
        ]);
        assert_eq!(step.cursor, b"17");
        assert_eq!(
            step.flags,
            vec![
                HotFlag {
                    key: b"k1".to_vec(),
                    value: b"auto".to_vec(),
                    pttl_ms: 5000
                },
                HotFlag {
                    key: b"k2".to_vec(),
                    value: b"1".to_vec(),
                    pttl_ms: -1
                }
            ]
        );
    }
}
