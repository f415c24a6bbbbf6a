//! The scripts' contracts: the KEYS and ARGV of every Valkey script, by name, each
//! position written once (here).
//!
//! Each table below is an ordered list of named inputs; a position is the sum of the
//! widths before it, so inserting an argument is one line and every position after it
//! follows. From the tables:
//! - the Rust encoders ([`crate::DecideCall::keys`]/[`crate::DecideCall::args`]) fill
//!   their output by these positions, and the decoder
//!   ([`crate::server::ReceivedCall::parse`]) reads by them; the native module takes the
//!   shop's position and the argument count from [`decide`];
//! - a script's Lua source starts with a generated [`prelude`]: `local <name> =
//!   ARGV[<n>]` (or `KEYS[<n>]`) per input, so the `.lua` files read their inputs by name
//!   and hold no position of their own (tests below check both: no numeric `ARGV[..]` or
//!   `KEYS[..]` in the file, every name of the table used by it). Locals cost Lua nothing
//!   per call beyond the read of ARGV the script did anyway.
//!
//! A group (width > 1) is what a script indexes by lane: the prelude gives its base
//! offset instead of a value (`local lane_args = 2`: lane `i`'s interval is
//! `ARGV[lane_args + 2 * i - 1]`, its tolerance the next), so a loop over lanes costs
//! what it did with literal positions and allocates no table. Width 0 is "all that
//! follow" (pairs of `set_limits`' overrides).
//!
//! A key named with a leading `_` only routes the call (to the limiter's slot in a
//! cluster): the script never reads it, so the prelude gives it no local.

use crate::bucket::Lane;

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
            const WIDTHS: &[usize] = &[$(inputs!(@width $($width)?),)*];
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
            pub const ALL: &[$crate::contract::Input] = &[$(
                $crate::contract::Input { lua: $lua, at: $name, width: inputs!(@width $($width)?) },
            )*];
            /// How many inputs a call passes (at least, when the last is variadic).
            pub const LEN: usize = at(WIDTHS.len());
        }
    };
    (@width) => { 1 };
    (@width $w:literal) => { $w };
}

/// The decision ([`crate::call::decide_source`], `CG.DECIDE`).
pub mod decide {
    use super::Lane;

    inputs! {
        /// KEYS (all share one hash tag, so a cluster routes the call to one slot).
        pub mod keys {
            /// The buckets of global, hot lane, hot shop (`KEYS[bucket_keys + i]`, lane i
            /// from 1): [`super::bucket_key`].
            BUCKETS[3] = "bucket_keys",
            /// The shop's hot mark.
            HOT_FLAG = "hot_flag_key",
            /// The live limits' version.
            LIMITS_VERSION = "version_key",
            /// The `auto_hot` window prefix: never read itself, `<prefix><window number>`
            /// are the counters.
            AUTO_HOT_PREFIX = "window_prefix",
            /// The published settings.
            SETTINGS = "settings_key",
            /// The adaptive budget's state ([`crate::adaptive`]; read only when
            /// `ADAPT_FLOOR` is not "0").
            ADAPT = "adapt_key",
        }
    }

    inputs! {
        /// ARGV.
        pub mod args {
            /// Tokens asked for (at least 1).
            TOKENS = "tokens",
            /// "1": the shop is listed in `hot_shops`.
            STATIC_HOT = "static_hot",
            /// Interval and tolerance (µs) of global, hot lane, hot shop (interval "0":
            /// not configured): [`super::interval_arg`], [`super::tolerance_arg`]. In Lua
            /// lane i's (from 1) are `ARGV[lane_args + 2 * i - 1]` and the next.
            LANES[6] = "lane_args",
            /// The live limits' version the caller decided with ("" = none).
            VERSION = "version",
            /// The shop ID.
            SHOP = "shop",
            /// `auto_hot` window, µs ("0" = off).
            AUTO_HOT_WINDOW = "window_us",
            /// `auto_hot` share (0 < share < 1).
            AUTO_HOT_SHARE = "hot_share",
            /// `auto_hot` TTL of a mark, seconds.
            AUTO_HOT_TTL = "hot_ttl_s",
            /// `auto_hot` minimum tokens.
            AUTO_HOT_MIN_TOKENS = "hot_min_tokens",
            /// The caller's settings (published when the stored ones differ).
            SETTINGS = "settings",
            /// "1": `peek()`, decide as acquire() would, writing nothing.
            PEEK = "peek",
            /// A reservation's longest wait, µs ("0": none).
            MAX_WAIT = "max_wait_us",
            /// The `adaptive` floor, permille ("0": the option is off, the state not
            /// read).
            ADAPT_FLOOR = "adapt_floor",
            /// The `adaptive` recovery time, µs.
            ADAPT_RECOVER = "adapt_recover_us",
        }
    }

    /// The position among KEYS of `lane`'s bucket.
    pub const fn bucket_key(lane: Lane) -> usize {
        keys::BUCKETS + lane as usize
    }

    /// The position among ARGV of `lane`'s interval (µs).
    pub const fn interval_arg(lane: Lane) -> usize {
        args::LANES + 2 * lane as usize
    }

    /// The position among ARGV of `lane`'s tolerance (µs).
    pub const fn tolerance_arg(lane: Lane) -> usize {
        interval_arg(lane) + 1
    }

    /// The test clock: the script's test variant
    /// ([`crate::call::decide_source_with_test_clock`]) and the module loaded with
    /// `test-clock` take one argument more, after the call's, the time to decide at (µs),
    /// and keep keys [`TEST_KEY_SLACK_MS`] longer, so the server's own clock never
    /// expires a key the test still reads.
    pub const TEST_NOW_ARG: usize = args::LEN;
    /// How much longer keys live under the test clock, ms.
    pub const TEST_KEY_SLACK_MS: i64 = 3_600_000;
}

/// One step of carrying the buckets over a live change
/// ([`crate::call::carry_step_source`]).
pub mod carry_step {
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
}

/// A throttling answer of the provider ([`crate::call::feedback_source`], the Lua twin of
/// [`crate::adaptive::feedback`]).
pub mod feedback {
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
}

/// A write of new live limits ([`crate::call::set_limits_source`]).
pub mod set_limits {
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
            /// (lane, "capacity/rate") pairs: every override of the new limits.
            OVERRIDES[0] = "overrides",
        }
    }
}

/// One step of `reset()` ([`crate::call::reset_step_source`]).
pub mod reset_step {
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
}

/// The live limits' version and hash ([`crate::call::read_limits_source`]).
pub mod read_limits {
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
}

/// The hot shops of a limiter ([`crate::call::hot_scan_source`]).
pub mod hot_scan {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The literal positions `<table>[<n>]` in `src` (1-based, as Lua's).
    pub(crate) fn literal_positions(src: &str, table: &str) -> BTreeSet<usize> {
        let open = format!("{table}[");
        src.match_indices(&open)
            .filter_map(|(i, _)| {
                let rest = &src[i + open.len()..];
                let end = rest.find(']')?;
                rest[..end].trim().parse().ok()
            })
            .collect()
    }

    /// Whether `name` occurs in `src` as a whole Lua identifier.
    pub(crate) fn uses(src: &str, name: &str) -> bool {
        let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
        src.match_indices(name).any(|(i, _)| {
            let before = src[..i].chars().next_back().is_none_or(|c| !ident(c));
            let after = src[i + name.len()..]
                .chars()
                .next()
                .is_none_or(|c| !ident(c));
            before && after
        })
    }

    /// A script file that reads its inputs through a [`prelude`]: no literal position of
    /// its own, every name of the tables used.
    pub(crate) fn assert_reads_by_name(file: &str, body: &str, keys: &[Input], args: &[Input]) {
        for table in ["KEYS", "ARGV"] {
            let found = literal_positions(body, table);
            assert!(
                found.is_empty(),
                "{file} has {table}{found:?}: read it by name"
            );
        }
        for i in keys.iter().chain(args).filter(|i| !i.lua.starts_with('_')) {
            assert!(uses(body, i.lua), "{file} never uses `{}`", i.lua);
        }
    }

    #[test]
    fn positions_follow_from_the_order_and_widths() {
        use decide::{args, keys};
        assert_eq!((keys::LEN, args::LEN), (8, 19));
        assert_eq!(
            [keys::BUCKETS, keys::HOT_FLAG, keys::SETTINGS],
            [0, 3, 6],
            "the buckets take three positions"
        );
        assert_eq!((args::LANES, args::VERSION, args::SHOP), (2, 8, 9));
        assert_eq!((args::MAX_WAIT, decide::TEST_NOW_ARG), (16, 19));
        assert_eq!(
            (keys::ADAPT, args::ADAPT_FLOOR, args::ADAPT_RECOVER),
            (7, 17, 18)
        );
        assert_eq!(decide::bucket_key(Lane::HotShop), 2);
        assert_eq!(
            Lane::ALL.map(|l| (decide::interval_arg(l), decide::tolerance_arg(l))),
            [(2, 3), (4, 5), (6, 7)]
        );
        assert_eq!(set_limits::args::OVERRIDES, 14);
        assert_eq!(set_limits::args::LEN, 14, "the overrides are optional");
        // Every input's position is the one before it plus its width.
        for all in [keys::ALL, args::ALL, set_limits::args::ALL] {
            for w in all.windows(2) {
                assert_eq!(w[1].at, w[0].at + w[0].width, "{w:?}");
            }
        }
    }

    #[test]
    fn the_prelude_names_each_input_at_its_position() {
        let p = prelude(decide::keys::ALL, decide::args::ALL);
        assert!(p.starts_with("local bucket_keys = 0\nlocal hot_flag_key = KEYS[4]\n"));
        assert!(p.contains("local lane_args = 2\nlocal version = ARGV[9]\nlocal shop = ARGV[10]\n"));
        assert!(p.ends_with("local max_wait_us = ARGV[17]\nlocal adapt_floor = ARGV[18]\nlocal adapt_recover_us = ARGV[19]\n"));
    }

    #[test]
    fn the_checks_see_what_they_look_for() {
        assert_eq!(
            literal_positions("x = ARGV[3] .. KEYS[1] .. ARGV[i] .. ARGV[ 12 ]", "ARGV"),
            BTreeSet::from([3, 12])
        );
        assert!(uses("local a = peek == '1'", "peek"));
        assert!(!uses("local a = peeking", "peek"));
        assert!(!uses("local a = is_peek", "peek"));
    }
}
