//! One home per Valkey command (as mini-redis's `cmd/`): each script, and the native
//! module's `CG.DECIDE`, has its file here with everything that says what goes on the wire:
//!
//! - its **contract**: the named KEYS and ARGV tables ([`inputs!`]), each position written
//!   once (a position is the sum of the widths before it, so inserting an argument is one
//!   line and every position after it follows);
//! - its **encoder**: a `...Call` type implementing [`Call`], which fills every position
//!   by name; [`keys_then_argv`] is the one place KEYS and ARGV become one sequence (the
//!   worker's EVALSHA and `CG.DECIDE`, the CLI, the in-memory store and the tests all send
//!   through it; redis-rs's side is `checkout_guard_connection::scripts`);
//! - its **reply decoder** (`decode_reply`), and for the commands a server decides in Rust
//!   (the module, the in-memory store) the decoder of the call itself
//!   ([`decide::ReceivedCall::parse`], [`feedback::ReceivedFeedback::parse`]);
//! - its **Lua**: the `.lua` file under `src/scripts/` (no Lua in a `.rs` file), preceded by
//!   a [`prelude`] generated from the contract: `local <name> = ARGV[<n>]` (or `KEYS[<n>]`)
//!   per input, so the `.lua` files read their inputs by name and hold no position of their
//!   own (tests check both: no numeric `ARGV[..]` or `KEYS[..]` in a file, every name of
//!   the tables used by it). Locals cost Lua nothing per call beyond the read of ARGV the
//!   script did anyway.
//!
//! [`ALL`] lists every script command (its contract and its `.lua`), so a test holds each
//! encoder to its contract and each script to its file; [`mark_hot`] holds the plain
//! commands of a hot mark.
//!
//! A group (width > 1) is what a script indexes by lane: the prelude gives its base
//! offset instead of a value (`local lane_args = 2`: lane `i`'s interval is
//! `ARGV[lane_args + 2 * i - 1]`, its tolerance the next), so a loop over lanes costs what
//! it did with literal positions and allocates no table. Width 0 is "all that follow"
//! (pairs of `set_limits`' overrides).
//!
//! A key named with a leading `_` only routes the call (to the limiter's slot in a
//! cluster): the script never reads it, so the prelude gives it no local.
//!
//! Adding an argument to a command is one line in its table, its value in its encoder,
//! its use in its `.lua` (by name), and for `decide`/`feedback` its read in the server's
//! decoder, all in the command's file and its `.lua`.

use std::borrow::Cow;

pub mod carry_step;
pub mod decide;
pub mod feedback;
pub mod hot_scan;
pub mod mark_hot;
pub mod read_adapt;
pub mod read_limits;
pub mod release;
pub mod reset_step;
pub mod set_limits;

/// One input of a script: a value, a group read by offset, or all the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// The Lua local that holds it in the script (for a group, its base offset).
    pub lua: &'static str,
    /// 0-based position of its (first) element.
    pub at: usize,
    /// 1: one value; more: a group read by offset; 0: every input that follows.
    pub width: usize,
}

/// Declares a table of inputs: one `pub const NAME: usize` (0-based position) per input,
/// `ALL` (the [`Input`]s in order) and `LEN` (how many a call passes, or at least passes
/// when the last input is variadic).
macro_rules! inputs {
    ($(#[$m:meta])* $vis:vis mod $module:ident {
        $( $(#[$d:meta])* $name:ident $([$width:literal])? = $lua:literal, )*
    }) => {
        $(#[$m])*
        $vis mod $module {
            #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
            enum Index { $($name,)* }
            const WIDTHS: &[usize] = &[$($crate::cmd::inputs!(@width $($width)?),)*];
            const fn at(i: usize) -> usize {
                let (mut sum, mut j) = (0, 0);
                while j < i {
                    sum += WIDTHS[j];
                    j += 1;
                }
                sum
            }
            $( $(#[$d])* pub const $name: usize = at(Index::$name as usize); )*
            /// The inputs, in order.
            pub const ALL: &[$crate::cmd::Input] = &[$(
                $crate::cmd::Input { lua: $lua, at: $name, width: $crate::cmd::inputs!(@width $($width)?) },
            )*];
            /// How many inputs a call passes (at least, when the last is variadic).
            pub const LEN: usize = at(WIDTHS.len());
        }
    };
    (@width) => { 1 };
    (@width $w:literal) => { $w };
}
pub(crate) use inputs;

/// A script command: its contract and its Lua, as [`ALL`] lists them.
#[derive(Debug, Clone, Copy)]
pub struct Command {
    /// Its name: its file under `src/cmd/` (and, for a script, its `.lua` file's stem).
    pub name: &'static str,
    /// The KEYS table.
    pub keys: &'static [Input],
    /// The ARGV table.
    pub args: &'static [Input],
    /// The body of its `.lua` file under `src/scripts/<name>.lua`, as compiled in (what
    /// follows the prelude).
    pub lua: &'static str,
    /// The whole script as sent (shebang, shared functions, prelude, clock, body).
    pub source: fn() -> String,
}

impl Command {
    /// How many KEYS a call passes.
    pub fn key_count(&self) -> usize {
        self.keys.iter().map(|i| i.width).sum()
    }

    /// How many ARGV a call passes at least (all, unless the last input is variadic).
    pub fn arg_count(&self) -> usize {
        self.args.iter().map(|i| i.width).sum()
    }

    /// Whether the last argument takes every value that follows.
    pub fn variadic(&self) -> bool {
        self.args.last().is_some_and(|i| i.width == 0)
    }

    /// The Lua lines that name its inputs ([`prelude`]).
    pub fn prelude(&self) -> String {
        prelude(self.keys, self.args)
    }
}

/// Every script command, each from its home (`mark_hot` sends plain commands).
pub const ALL: &[&Command] = &[
    &decide::COMMAND,
    &feedback::COMMAND,
    &set_limits::COMMAND,
    &carry_step::COMMAND,
    &read_limits::COMMAND,
    &read_adapt::COMMAND,
    &reset_step::COMMAND,
    &hot_scan::COMMAND,
    &release::COMMAND,
];

/// One call of a command, encoded by name: its KEYS and ARGV in the order of its contract.
/// Sent only through [`keys_then_argv`].
pub trait Call {
    /// The command this is a call of.
    const COMMAND: &'static Command;
    /// KEYS, in the contract's order.
    fn encode_keys(&self) -> impl Iterator<Item = &[u8]>;
    /// ARGV, in the contract's order.
    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>>;
}

/// One element of a call as it is sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part<'a> {
    Key(&'a [u8]),
    Arg(Cow<'a, [u8]>),
}

impl Part<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Part::Key(k) => k,
            Part::Arg(a) => a,
        }
    }

    pub fn is_key(&self) -> bool {
        matches!(self, Part::Key(_))
    }
}

/// The call's KEYS then its ARGV, one sequence: what `EVALSHA <sha> <numkeys>` and
/// `CG.DECIDE` take after their first words, and what a server's decoder
/// ([`decide::ReceivedCall::parse`]) reads. The one place that order is written.
pub fn keys_then_argv<C: Call>(call: &C) -> impl Iterator<Item = Part<'_>> {
    call.encode_keys()
        .map(Part::Key)
        .chain(call.encode_args().map(Part::Arg))
}

/// [`keys_then_argv`] as owned byte strings (a server's test double, tests).
pub fn to_vecs<C: Call>(call: &C) -> Vec<Vec<u8>> {
    keys_then_argv(call).map(|p| p.bytes().to_vec()).collect()
}

/// [`keys_then_argv`] as one slice of byte strings, given to `f`: what a server's decoder
/// ([`decide::ReceivedCall::parse`]) reads.
pub fn with_slices<C: Call, R>(call: &C, f: impl FnOnce(&[&[u8]]) -> R) -> R {
    let parts: Vec<Part<'_>> = keys_then_argv(call).collect();
    let slices: Vec<&[u8]> = parts.iter().map(Part::bytes).collect();
    f(&slices)
}

/// One element of a script's reply, as a decoder reads it (the client converts its own
/// values to these).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Bytes(Vec<u8>),
    Int(i64),
    /// Nil, or anything else.
    Other,
}

impl Item {
    /// Its bytes (an integer's decimal digits; empty for anything else).
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Item::Bytes(b) => b,
            Item::Int(i) => i.to_string().into_bytes(),
            Item::Other => Vec::new(),
        }
    }
}

/// The reply of one step of a script that walks the key space with SCAN: the next cursor
/// ("0": done) and how many keys the step handled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanStep {
    pub cursor: Vec<u8>,
    pub count: i64,
}

impl ScanStep {
    /// The reply `{cursor, count}`.
    pub fn decode_reply((cursor, count): (Vec<u8>, i64)) -> Self {
        Self { cursor, count }
    }

    /// The walk is over.
    pub fn done(&self) -> bool {
        self.cursor == b"0"
    }
}

/// The shebang makes Valkey treat the script as a write script before it runs: a replica
/// refuses it outright (READONLY), even on a path that would only have read, so a
/// decision is never made on a replica's possibly stale levels; and a Valkey over
/// `maxmemory` refuses it (OOM) rather than answering denials only.
pub(crate) const SHEBANG: &str = "#!lua\n";

/// `source` without its comment lines (a line whose first non-blank characters are
/// `--`): what a script sends, shorter by its comments (they stay in its `.lua` file). A
/// script a client sends before it has authenticated must stay under 16 KiB, or Redis 7.0
/// closes the connection instead of answering NOAUTH (its limit on an unauthenticated
/// client's bulk strings): `SCRIPT LOAD` is a new connection's first call.
pub fn without_comment_lines(source: &str) -> String {
    source
        .split_inclusive('\n')
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect()
}

/// The shebang of a script that only reads: it runs on a replica too.
pub(crate) const SHEBANG_NO_WRITES: &str = "#!lua flags=no-writes\n";

/// A stored bucket (`s`) read under the limits `si`/`st` (interval and tolerance, as the
/// decimal strings of ARGV): its TAT, and whether it was carried over from other limits.
/// The Lua twin of `StoredBucket::effective_tat` (before `max(tat, now)`); shared by the
/// decision, [`carry_step`] and [`set_limits`].
pub const CARRY: &str = include_str!("../scripts/carry.lua");

/// The clock block (Valkey's `TIME`) that tests swap for a clock they control.
pub const CLOCK_BLOCK: &str = include_str!("../scripts/clock.lua");

/// The clock block of a test variant (`test_clock.lua`): the time from the argument
/// `test_now_us` (µs), keys kept [`decide::TEST_KEY_SLACK_MS`] longer.
pub const TEST_CLOCK_BLOCK: &str = include_str!("../scripts/test_clock.lua");

/// The clock block of a test variant: `test_now_us` named at `now_arg` (0-based ARGV
/// position, after the call's), then [`TEST_CLOCK_BLOCK`].
pub(crate) fn test_clock_block(now_arg: usize) -> String {
    let now = Input {
        lua: "test_now_us",
        at: now_arg,
        width: 1,
    };
    format!("{}{TEST_CLOCK_BLOCK}", prelude(&[], &[now]))
}

/// The Lua lines that name a script's inputs: `local <name> = KEYS[<n>]` /
/// `ARGV[<n>]` per value, `local <name> = <offset>` per group (its first element is
/// `KEYS[<name> + 1]`).
pub fn prelude(keys: &[Input], args: &[Input]) -> String {
    let mut out = String::new();
    for (table, inputs) in [("KEYS", keys), ("ARGV", args)] {
        for i in inputs.iter().filter(|i| !i.lua.starts_with('_')) {
            match i.width {
                1 => out.push_str(&format!("local {} = {table}[{}]\n", i.lua, i.at + 1)),
                _ => out.push_str(&format!("local {} = {}\n", i.lua, i.at)),
            }
        }
    }
    out
}

/// `raw` as an integer, exactly as `str::parse::<i64>` reads it (an optional sign, then
/// at least one ASCII digit, no overflow), without the UTF-8 check first: every decision
/// reads a dozen of them.
pub fn parse_i64(raw: &[u8]) -> Option<i64> {
    let (negative, digits) = match raw {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, raw),
    };
    if digits.is_empty() {
        return None;
    }
    let mut n: i64 = 0;
    for &b in digits {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        // Accumulated negative when negative, so i64::MIN reads too.
        n = n.checked_mul(10)?;
        n = if negative {
            n.checked_sub(i64::from(d))?
        } else {
            n.checked_add(i64::from(d))?
        };
    }
    Some(n)
}

/// An integer argument of a received call, or the error naming it.
pub(crate) fn int(name: &str, raw: &[u8]) -> Result<i64, String> {
    parse_i64(raw).ok_or_else(|| {
        format!(
            "{name} must be an integer, got {:?}",
            String::from_utf8_lossy(raw)
        )
    })
}

#[cfg(test)]
pub(crate) mod tests;
