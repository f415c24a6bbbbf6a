//! The contracts' own tests, and every command held to its contract and its `.lua` file.

use super::*;
use crate::bucket::Lane;
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
    assert_eq!((keys::LEN, args::LEN), (13, 28));
    assert_eq!(
        (keys::ENDPOINT, args::ENDPOINT_BUCKET, args::SHARE),
        (6, 13, 15)
    );
    assert_eq!((args::CONTRACT, args::TOKENS), (0, 1), "the mark first");
    assert_eq!(
        [
            keys::HOT_FLAG,
            keys::SETTINGS,
            keys::BUCKETS,
            keys::ENDPOINT
        ],
        [0, 2, 3, 6],
        "the buckets take three positions"
    );
    assert_eq!((args::VERSION, args::MAX_WAIT, args::LANES), (3, 6, 7));
    assert_eq!(
        (
            keys::LEASES,
            keys::LEASE_STATS,
            args::IN_FLIGHT,
            args::LEASE_ID
        ),
        (7, 10, 16, 20)
    );
    assert_eq!(decide::lease_key(Lane::HotShop), 9);
    assert_eq!(decide::in_flight_arg(Lane::HotLane), 17);
    assert_eq!((keys::AUTO_HOT_PREFIX, args::SHOP), (11, 21));
    assert_eq!(
        (keys::ADAPT, args::ADAPT_FLOOR, args::ADAPT_RECOVER),
        (12, 26, 27)
    );
    assert_eq!(decide::bucket_key(Lane::HotShop), 5);
    assert_eq!(
        Lane::ALL.map(|l| (decide::interval_arg(l), decide::tolerance_arg(l))),
        [(7, 8), (9, 10), (11, 12)]
    );
    // The forms: each ends where a group of inputs ends, the totals all differ.
    assert_eq!(
        decide::FORMS,
        [(4, 9), (6, 13), (7, 16), (11, 21), (12, 26), (13, 28)]
    );
    // None is the count of the contract before the forms (13 keys, 27 arguments, no mark).
    assert_eq!(decide::form_of_len(13 + 27), None);
    for (i, (k, a)) in decide::FORMS.iter().enumerate() {
        assert_eq!(decide::form_of_len(k + a), Some(i));
    }
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
    assert!(p.starts_with("local hot_flag_key = KEYS[1]\nlocal version_key = KEYS[2]\nlocal settings_key = KEYS[3]\nlocal bucket_keys = 3\n"));
    assert!(
        p.contains("local tokens = ARGV[2]\n"),
        "the mark (ARGV[1]) not named"
    );
    assert!(p.contains("local max_wait_us = ARGV[7]\nlocal lane_args = 7\nlocal endpoint_args = 13\nlocal share_ppm = ARGV[16]\n"));
    assert!(p.ends_with("local adapt_floor = ARGV[27]\nlocal adapt_recover_us = ARGV[28]\n"));
    assert!(p.contains("local lease_stats_key = KEYS[11]\nlocal window_prefix = KEYS[12]\n"));
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

/// `without_comment_lines` drops a line that starts with `--` and keeps the rest, which is
/// right only where no line is inside a long string or a long comment (`[[ ... ]]`,
/// `--[[ ... ]]`, `[==[`): their middle lines would lose a `--` line, or keep a comment's
/// text as code. No script, whole as sent (its preludes, carry.lua, the clock), has one.
#[test]
fn no_script_has_a_long_bracket_that_dropping_comment_lines_would_cut() {
    for c in ALL {
        let source = (c.source)();
        // Every long bracket opens with one of these (Lua lexes `[[` as one even in `a[[`).
        for open in ["[[", "[="] {
            assert!(!source.contains(open), "{}: {open:?}", c.name);
        }
    }
    let with_test_clock = decide::source_with_test_clock();
    assert!(!with_test_clock.contains("[[") && !with_test_clock.contains("[="));
    // What it keeps and drops.
    assert_eq!(
        without_comment_lines("-- a\nlocal x = 1 -- b\n  -- c\nreturn x\n"),
        "local x = 1 -- b\nreturn x\n"
    );
}

/// Every command's `.lua` read by name (no literal position of its own, every name of
/// its tables used), and what its whole source sends after its prelude. (That each
/// compiled-in body is its file in the tree, and every file a command's:
/// `tests/scripts_are_the_lua_files.rs`, so this crate's code reads no file.)
#[test]
fn every_script_is_read_by_name() {
    for c in ALL {
        let (lua, source) = (c.lua, c.source);
        let file = format!("{}.lua", c.name);
        assert_reads_by_name(&file, lua, c.keys, c.args);
        let source = source();
        let at = source
            .find(&c.prelude())
            .expect("the prelude is in the source");
        assert!(
            source[at..].ends_with(lua) || source[at..].ends_with(&without_comment_lines(lua)),
            "{}: its source ends with its file (its comment lines or not)",
            c.name
        );
        let without = source.replacen(&c.prelude(), "", 1);
        for table in ["KEYS", "ARGV"] {
            let found = literal_positions(&without, table);
            assert!(
                found.is_empty(),
                "{}: {table}{found:?} outside the prelude",
                c.name
            );
        }
    }
    // The shared pieces: functions of their parameters, and the clock.
    assert_reads_by_name("carry.lua", CARRY, &[], &[]);
    assert_reads_by_name("clock.lua", CLOCK_BLOCK, &[], &[]);
    let test_now = Input {
        lua: "test_now_us",
        at: release::TEST_NOW_ARG,
        width: 1,
    };
    assert_reads_by_name("test_clock.lua", TEST_CLOCK_BLOCK, &[], &[test_now]);
    assert!(TEST_CLOCK_BLOCK.contains(&format!("slack_ms = {}\n", decide::TEST_KEY_SLACK_MS)));
}

/// Every command's encoder fills exactly its contract: as many KEYS as its table, as many
/// ARGV (at least, for a variadic table), keys first; and the sources have no Lua of
/// their own beyond the files, the preludes, the shebangs and the clock.
#[test]
fn every_encoder_matches_its_contract() {
    use crate::bucket::{BucketSet, BucketSpec};
    use crate::keys::Keys;
    fn check<C: Call>(call: &C, extra_args: usize) -> &'static str {
        let parts: Vec<Part<'_>> = keys_then_argv(call).collect();
        let c = C::COMMAND;
        let keys = parts.iter().take_while(|p| p.is_key()).count();
        assert!(
            parts[keys..].iter().all(|p| !p.is_key()),
            "{}: keys first",
            c.name
        );
        assert_eq!(keys, c.key_count(), "{}: keys", c.name);
        assert_eq!(
            parts.len() - keys,
            c.arg_count() + extra_args,
            "{}: args",
            c.name
        );
        assert!(extra_args == 0 || c.variadic(), "{}: variadic", c.name);
        c.name
    }
    let set = BucketSet {
        global: BucketSpec::new("global", 30, 7.5).unwrap(),
        hot_lane: Some(BucketSpec::new("hot_lane", 20, 5.0).unwrap()),
        hot_shop: None,
    };
    let lanes = decide::LaneArgs::new(&set);
    let shop = decide::ShopKeys::new(&Keys::new("n"), b"s");
    let auto = decide::AutoHotArgs::new(None);
    // On: the call's longest form, every input (the shorter forms: decide.rs's tests).
    let adapt = decide::AdaptArgs::new(Some(&crate::adaptive::AdaptParams {
        floor_permille: 100,
        recover_us: 1,
    }));
    let mut seen = BTreeSet::new();
    seen.insert(check(
        &decide::DecideCall {
            endpoint: None,
            share_ppm: 0,
            in_flight: &crate::cmd::decide::InFlightArgs::off(),
            lease_id: b"",
            keys: shop.decide_keys(),
            tokens: 1,
            static_hot: false,
            lanes: &lanes,
            version: b"",
            shop: b"s",
            auto_hot: &auto,
            settings: "",
            peek: false,
            max_wait_us: 0,
            adapt: &adapt,
        },
        0,
    ));
    seen.insert(check(
        &feedback::FeedbackCall {
            adapt_key: b"a",
            last_key: b"l",
            status: 429,
            decrease: 0.5,
            params: crate::adaptive::AdaptParams {
                floor_permille: 100,
                recover_us: 1,
            },
            retry_after_us: 0,
        },
        0,
    ));
    let fields = [("global".to_string(), "30/7.5".to_string())];
    let fields: Vec<(&str, String)> = fields
        .iter()
        .map(|(f, v)| (f.as_str(), v.clone()))
        .collect();
    for (fields, extra) in [(&fields[..], 2), (&[][..], 0)] {
        seen.insert(check(
            &set_limits::SetLimitsCall {
                limits_key: b"l",
                version_key: b"v",
                changes_key: b"c",
                global_key: b"g",
                hot_lane_key: b"h",
                expected: b"",
                by: "me",
                at_ms: 1,
                old: "o",
                new: "n",
                epoch: "e",
                old_lanes: &lanes,
                new_lanes: &lanes,
                fields,
            },
            extra,
        ));
    }
    seen.insert(check(
        &carry_step::CarryStepCall {
            global_key: b"g",
            hot_lane_key: b"h",
            cursor: b"0",
            pattern: b"p*",
            version: b"1",
            lanes: &lanes,
        },
        0,
    ));
    seen.insert(check(
        &read_limits::ReadLimitsCall {
            limits_key: b"l",
            version_key: b"v",
        },
        0,
    ));
    seen.insert(check(
        &read_adapt::ReadAdaptCall {
            adapt_key: b"a",
            last_key: b"l",
        },
        0,
    ));
    seen.insert(check(
        &reset_step::ResetStepCall {
            route: b"r",
            cursor: b"0",
            pattern: b"p*",
        },
        0,
    ));
    seen.insert(check(
        &hot_scan::HotScanCall {
            route: b"r",
            cursor: b"0",
            pattern: b"p*",
        },
        0,
    ));
    seen.insert(check(
        &release::ReleaseCall {
            lease_keys: [b"g", b"l", b"s"],
            stats_key: b"st",
            lease_id: b"i",
            lease_us: 1,
            leaked: false,
        },
        0,
    ));
    let all: BTreeSet<&str> = ALL.iter().map(|c| c.name).collect();
    assert_eq!(seen, all, "every command's encoder is checked");
}

/// The encoders put each value at the position its table names (the set_limits lanes:
/// global and hot lane, old then new; the overrides after them).
#[test]
fn set_limits_sits_at_its_named_positions() {
    use crate::bucket::{BucketSet, BucketSpec};
    let old = BucketSet {
        global: BucketSpec::new("global", 30, 7.5).unwrap(),
        hot_lane: None,
        hot_shop: Some(BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
    };
    let new = BucketSet {
        hot_lane: Some(BucketSpec::new("hot_lane", 20, 5.0).unwrap()),
        ..old.clone()
    };
    let (old, new) = (decide::LaneArgs::new(&old), decide::LaneArgs::new(&new));
    let fields = [("mode", "shadow".to_string())];
    let call = set_limits::SetLimitsCall {
        limits_key: b"l",
        version_key: b"v",
        changes_key: b"c",
        global_key: b"g",
        hot_lane_key: b"h",
        expected: b"3-e-1",
        by: "me",
        at_ms: 17,
        old: "o",
        new: "n",
        epoch: "e",
        old_lanes: &old,
        new_lanes: &new,
        fields: &fields,
    };
    let sent = to_vecs(&call);
    let text = |v: &[Vec<u8>]| {
        v.iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(text(&sent[..5]), ["l", "v", "c", "g", "h"]);
    let argv = text(&sent[5..]);
    use set_limits::args::*;
    assert_eq!(
        [&argv[EXPECTED], &argv[BY], &argv[AT], &argv[EPOCH]],
        ["3-e-1", "me", "17", "e"]
    );
    // Global and hot lane: the first four of the decision's lane group.
    assert_eq!(argv[OLD_LANES..OLD_LANES + 4], old.text()[..4]);
    assert_eq!(argv[NEW_LANES..NEW_LANES + 4], new.text()[..4]);
    assert_eq!(argv[OLD_LANES + 2], "0", "no hot lane before");
    assert_ne!(argv[NEW_LANES + 2], "0", "a hot lane after");
    assert_eq!(argv[OVERRIDES..], ["mode", "shadow"]);
}
