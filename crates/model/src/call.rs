//! The Valkey script that makes one decision atomically: the Lua twin of [`crate::step`].
//!
//! KEYS and ARGV are built by [`DecideCall`] only (the one encoder of the contract), in
//! the order of the named table [`crate::contract::decide`] (the script reads them by
//! those names, through a generated prelude): KEYS: the buckets of global, hot lane and
//! hot shop, hot flag, live-limits version, auto-hot window prefix (never read itself:
//! `<prefix><window number>` are the counters), published settings (all share one hash
//! tag, so a cluster routes the call to one slot). ARGV: tokens, static_hot (0/1), then
//! interval and tolerance (µs) of global, hot lane and hot shop (interval 0 = bucket not
//! configured), then the live-limits version the caller decided with ("" = none), the
//! shop ID, auto-hot window (µs, 0 = off), share, TTL (s) and minimum tokens, the
//! caller's settings (published when the stored ones differ), and peek (1: decide as
//! acquire() would, writing nothing; no auto-hot counting), and the longest wait of a
//! reservation in µs (0: none; see `StepInput::max_wait_us`).
//! Reply: `{reason, hot, now, tat_global, tat_lane, tat_shop, became_hot, share_permille,
//! mark_ttl_ms}` (see `StepReply`); when only the global bucket applied (the shop not hot,
//! `auto_hot` off) its short form `{reason, hot, now, tat_global}`, the rest at their
//! defaults (`StepReply::from_ints`; Valkey converts a script's reply element by element);
//! or `{-1, 0}` when the live limits changed since the caller read them: nothing was
//! decided, the caller reloads them and asks again.
//!
//! Time is Valkey's own (`TIME`), never the PHP host's. A bucket key expires when the
//! bucket would be full again, so idle buckets vanish and a missing key means "full". A
//! bucket is stored as `"<tat>:<interval>:<tolerance>:<change>"` (the limits it was
//! written under, and the instant of the live change its writer decided with, "" for
//! none): read under other limits, its level in tokens carries over
//! (`StoredBucket::effective_tat`) as of the live change's instant (carried in the version,
//! `"<n>-<epoch>-<µs>"`) when it was written before that change, else as of now (a
//! deploy). A bucket carried over is written back at once, denied or not, so its key
//! expires on the new limits' schedule.
//!
//! All or nothing: everything that can fail (reading the counters, a malformed value) is
//! done before the first write, so an error leaves the store as it was.
//!
//! Cost inside Valkey is mostly the number of `redis.call`s (each crosses from Lua into
//! the command table): TIME, one MGET for the hot flag, the version, the settings and the
//! buckets (the hot lanes' only when one is configured), a PTTL for a shop hot by a mark,
//! and one SET per applied bucket only when tokens are taken; with auto-hot, two HMGET and
//! one HSET more when tokens are taken (and a PEXPIRE once per window). Then C function
//! calls and tables: the numbers this encoder writes are read by arithmetic (`x + 0`), no
//! table is built but the reply unless a bucket carries over, and a bucket stored under
//! the call's own limits skips the carry arithmetic (docs/performance.md has the cost as a
//! multiple of an empty script). TATs are written with `string.format('%d')`: Lua's own
//! number formatting keeps 14 digits only.

use std::borrow::Cow;

use crate::adaptive::{AdaptParams, FeedbackOutcome};
use crate::auto_hot::AutoHot;
use crate::bucket::{BucketSet, Lane};
use crate::contract::{self, decide};
use crate::keys::Keys;
use crate::step::StepReply;

/// How long published settings live (refreshed whenever a worker publishes them): a
/// worker that finds them missing or different publishes its own in the same call.
pub const SETTINGS_TTL_SECONDS: i64 = 86_400;

/// The shebang makes Valkey treat the script as a write script before it runs: a replica
/// refuses it outright (READONLY), even on a path that would only have read, so a
/// decision is never made on a replica's possibly stale levels; and a Valkey over
/// `maxmemory` refuses it (OOM) rather than answering denials only.
const SHEBANG: &str = "#!lua\n";

/// A stored bucket (`s`) read under the limits `si`/`st` (interval and tolerance, as the
/// decimal strings of ARGV): its TAT, and whether it was carried over from other limits.
/// The Lua twin of `StoredBucket::effective_tat` (before `max(tat, now)`); shared by the
/// decision and by [`CARRY_STEP`].
pub const CARRY: &str = include_str!("scripts/carry.lua");

/// Marks the clock block that tests swap for a clock they control.
const CLOCK_BLOCK: &str = include_str!("scripts/clock.lua");

const BODY: &str = include_str!("scripts/decide.lua");

/// The decision's inputs by name (see [`crate::contract`]).
fn decide_prelude() -> String {
    contract::prelude(decide::keys::ALL, decide::args::ALL)
}

/// The keys of one decision, in the script's KEYS order.
#[derive(Debug, Clone, Copy)]
pub struct DecideKeys<'a> {
    pub global: &'a [u8],
    pub hot_lane: &'a [u8],
    pub hot_shop: &'a [u8],
    pub hot_flag: &'a [u8],
    pub limits_version: &'a [u8],
    pub auto_hot_prefix: &'a [u8],
    pub settings: &'a [u8],
    /// The adaptive budget's state ([`Keys::adapt`]).
    pub adapt: &'a [u8],
}

/// The `adaptive` option as the decision takes it: the floor (permille, "0" = off) and
/// the recovery time (µs), formatted once per limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptArgs {
    params: Option<AdaptParams>,
    text: [String; 2],
}

impl AdaptArgs {
    pub fn new(params: Option<&AdaptParams>) -> Self {
        let text = match params {
            Some(p) => [p.floor_permille.to_string(), p.recover_us.to_string()],
            None => ["0".into(), "0".into()],
        };
        Self {
            params: params.copied(),
            text,
        }
    }

    /// Off: the state is not read.
    pub fn off() -> Self {
        Self::new(None)
    }

    pub fn params(&self) -> Option<&AdaptParams> {
        self.params.as_ref()
    }

    pub fn text(&self) -> &[String; 2] {
        &self.text
    }
}

/// The buckets of a call, as the script takes them: the typed set, and its ARGV
/// (interval and tolerance in µs per lane, "0" when not configured) formatted once when
/// the limits change, not per call. Built only from a set, so the two always agree.
#[derive(Debug, Clone, PartialEq)]
pub struct LaneArgs {
    buckets: BucketSet,
    text: [String; 6],
}

impl LaneArgs {
    pub fn new(buckets: &BucketSet) -> Self {
        let mut text: [String; 6] = Default::default();
        for lane in Lane::ALL {
            let (interval, tolerance) = buckets
                .get(lane)
                .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
            text[decide::interval_arg(lane) - decide::args::LANES] = interval.to_string();
            text[decide::tolerance_arg(lane) - decide::args::LANES] = tolerance.to_string();
        }
        Self {
            buckets: buckets.clone(),
            text,
        }
    }

    pub fn buckets(&self) -> &BucketSet {
        &self.buckets
    }

    /// The group `LANES` of ARGV: interval and tolerance of global, hot lane, hot shop.
    pub fn text(&self) -> &[String; 6] {
        &self.text
    }
}

/// `auto_hot` as the script takes it: window (µs, "0" = off), share, TTL (s), minimum
/// tokens, formatted once per limiter.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoHotArgs {
    auto_hot: Option<AutoHot>,
    text: [String; 4],
}

impl AutoHotArgs {
    pub fn new(auto_hot: Option<&AutoHot>) -> Self {
        let text = match auto_hot {
            Some(a) => [
                (a.window.as_micros() as i64).to_string(),
                a.share.to_string(),
                a.ttl_seconds.to_string(),
                a.min_tokens.to_string(),
            ],
            None => ["0".into(), "0".into(), "0".into(), "0".into()],
        };
        Self {
            auto_hot: auto_hot.copied(),
            text,
        }
    }

    pub fn auto_hot(&self) -> Option<&AutoHot> {
        self.auto_hot.as_ref()
    }

    pub fn text(&self) -> &[String; 4] {
        &self.text
    }
}

/// The keys of one shop's decision, owned: what a caller that does not keep the
/// limiter-wide keys between calls (the CLI, tests) builds a [`DecideCall`] from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShopKeys {
    global: Vec<u8>,
    hot_lane: Vec<u8>,
    hot_shop: Vec<u8>,
    hot_flag: Vec<u8>,
    limits_version: Vec<u8>,
    auto_hot_prefix: Vec<u8>,
    settings: Vec<u8>,
    adapt: Vec<u8>,
}

impl ShopKeys {
    pub fn new(keys: &Keys, shop: &[u8]) -> Self {
        Self {
            global: keys.global(),
            hot_lane: keys.hot_lane(),
            hot_shop: keys.hot_shop(shop),
            hot_flag: keys.hot_flag(shop),
            limits_version: keys.limits_version(),
            auto_hot_prefix: keys.auto_hot_prefix(),
            settings: keys.settings(),
            adapt: keys.adapt(),
        }
    }

    pub fn decide_keys(&self) -> DecideKeys<'_> {
        DecideKeys {
            global: &self.global,
            hot_lane: &self.hot_lane,
            hot_shop: &self.hot_shop,
            hot_flag: &self.hot_flag,
            limits_version: &self.limits_version,
            auto_hot_prefix: &self.auto_hot_prefix,
            settings: &self.settings,
            adapt: &self.adapt,
        }
    }
}

/// One call of the decision script, by name: the single encoder of its KEYS and ARGV
/// and decoder of its reply (the extension, the tests, the in-memory store and the
/// benchmark all go through it).
#[derive(Debug, Clone, Copy)]
pub struct DecideCall<'a> {
    pub keys: DecideKeys<'a>,
    pub tokens: i64,
    pub static_hot: bool,
    pub lanes: &'a LaneArgs,
    /// The live limits' version decided with (empty = none).
    pub version: &'a [u8],
    pub shop: &'a [u8],
    pub auto_hot: &'a AutoHotArgs,
    /// The settings this worker runs with (published when the stored ones differ).
    pub settings: &'a str,
    /// `peek()`: decide as `acquire()` would, writing nothing (no tokens taken, no
    /// `auto_hot` counting or mark, no settings published).
    pub peek: bool,
    /// A reservation (`acquire(..., maxWaitSeconds)`), in µs: tokens that every bucket
    /// holds within this time are taken now; 0: only tokens held now.
    pub max_wait_us: i64,
    /// The `adaptive` option ([`AdaptArgs::off`]: off).
    pub adapt: &'a AdaptArgs,
}

/// What the decision script answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecideReply {
    /// A decision (see [`StepReply`]).
    Decided(StepReply),
    /// `{-1, 0}`: the live limits changed since the caller read them; nothing was
    /// decided: the caller reloads them and asks again.
    LimitsChanged,
}

impl DecideCall<'_> {
    /// Number of KEYS.
    pub const KEYS: usize = decide::keys::LEN;
    /// Number of ARGV.
    pub const ARGS: usize = decide::args::LEN;

    /// KEYS at their positions in [`decide::keys`].
    pub fn keys(&self) -> [&[u8]; decide::keys::LEN] {
        use decide::keys::*;
        let k = &self.keys;
        let mut out: [&[u8]; decide::keys::LEN] = [&[]; decide::keys::LEN];
        out[decide::bucket_key(Lane::Global)] = k.global;
        out[decide::bucket_key(Lane::HotLane)] = k.hot_lane;
        out[decide::bucket_key(Lane::HotShop)] = k.hot_shop;
        out[HOT_FLAG] = k.hot_flag;
        out[LIMITS_VERSION] = k.limits_version;
        out[AUTO_HOT_PREFIX] = k.auto_hot_prefix;
        out[SETTINGS] = k.settings;
        out[ADAPT] = k.adapt;
        out
    }

    /// ARGV at their positions in [`decide::args`]: tokens, static_hot, the lanes,
    /// version, shop, auto_hot, settings, peek, max wait. An array on the stack, so the
    /// call on every acquire() is sent without a vector of its own (see [`Self::argv`]
    /// for one).
    pub fn args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        use decide::args::*;
        let flag = |on: bool| Cow::Borrowed(if on { &b"1"[..] } else { &b"0"[..] });
        let mut out: [Cow<'_, [u8]>; decide::args::LEN] = Default::default();
        out[TOKENS] = match self.tokens {
            1 => Cow::Borrowed(&b"1"[..]),
            n => Cow::Owned(n.to_string().into_bytes()),
        };
        out[STATIC_HOT] = flag(self.static_hot);
        for (i, t) in self.lanes.text().iter().enumerate() {
            out[LANES + i] = Cow::Borrowed(t.as_bytes());
        }
        out[VERSION] = Cow::Borrowed(self.version);
        out[SHOP] = Cow::Borrowed(self.shop);
        let [window, share, ttl, min_tokens] = self.auto_hot.text();
        out[AUTO_HOT_WINDOW] = Cow::Borrowed(window.as_bytes());
        out[AUTO_HOT_SHARE] = Cow::Borrowed(share.as_bytes());
        out[AUTO_HOT_TTL] = Cow::Borrowed(ttl.as_bytes());
        out[AUTO_HOT_MIN_TOKENS] = Cow::Borrowed(min_tokens.as_bytes());
        out[SETTINGS] = Cow::Borrowed(self.settings.as_bytes());
        out[PEEK] = flag(self.peek);
        out[MAX_WAIT] = match self.max_wait_us {
            0 => Cow::Borrowed(&b"0"[..]),
            us => Cow::Owned(us.to_string().into_bytes()),
        };
        let [floor, recover] = self.adapt.text();
        out[ADAPT_FLOOR] = Cow::Borrowed(floor.as_bytes());
        out[ADAPT_RECOVER] = Cow::Borrowed(recover.as_bytes());
        out.into_iter()
    }

    /// [`Self::args`], collected.
    pub fn argv(&self) -> Vec<Cow<'_, [u8]>> {
        let mut out = Vec::with_capacity(Self::ARGS);
        out.extend(self.args());
        out
    }

    /// The script's reply, or why it is not one.
    pub fn decode_reply(ints: &[i64]) -> Result<DecideReply, String> {
        if ints.len() == 2 && ints[0] == -1 {
            return Ok(DecideReply::LimitsChanged);
        }
        StepReply::from_ints(ints)
            .map(DecideReply::Decided)
            .ok_or_else(|| format!("unexpected script reply {ints:?}"))
    }
}

/// The reply [`DecideCall::decode_reply`] reads as [`DecideReply::LimitsChanged`].
pub const LIMITS_CHANGED_REPLY: [i64; 2] = [-1, 0];

/// The production script source: the shebang, `carry.lua`, the inputs by name (the
/// [`decide_prelude`]), the clock (`clock.lua`: Valkey's `TIME`) and `decide.lua`.
pub fn decide_source() -> String {
    let prelude = decide_prelude();
    format!("{SHEBANG}{CARRY}{prelude}{CLOCK_BLOCK}{BODY}")
}

/// The clock block of the test variant: the time from the argument after the call's
/// ([`decide::TEST_NOW_ARG`], µs), keys kept [`decide::TEST_KEY_SLACK_MS`] longer.
fn test_clock_block() -> String {
    format!(
        "local now = tonumber(ARGV[{}])\nlocal slack_ms = {}\n",
        decide::TEST_NOW_ARG + 1,
        decide::TEST_KEY_SLACK_MS
    )
}

/// The same decision logic on the test clock (see [`decide::TEST_NOW_ARG`]), for tests
/// that compare the script with the Rust model at times they choose: the clock block of
/// [`decide_source`] replaced, nothing else.
pub fn decide_source_with_test_clock() -> String {
    let prelude = decide_prelude();
    let clock = test_clock_block();
    format!("{SHEBANG}{CARRY}{prelude}{clock}{BODY}")
}

const CARRY_STEP: &str = include_str!("scripts/carry_step.lua");

/// One step of carrying every bucket of a limiter over a live change at once (the CLI
/// runs it after `set` until the cursor is 0), so that no key written under the old limits
/// expires on their schedule before a decision reads it. KEYS and ARGV:
/// [`contract::carry_step`] (global and hot lane; SCAN cursor, MATCH pattern of the bucket
/// keys, the new version, the lanes as the decision takes them).
/// Reply: next cursor, buckets carried over. A bucket full under the new limits is deleted
/// (a missing key means full).
pub fn carry_step_source() -> String {
    let prelude = contract::prelude(
        contract::carry_step::keys::ALL,
        contract::carry_step::args::ALL,
    );
    format!("{SHEBANG}{CARRY}{prelude}{CARRY_STEP}")
}

/// One step of `reset()`: KEYS and ARGV [`contract::reset_step`] (any key of the
/// limiter, that routes it; SCAN cursor, MATCH pattern of the limiter's bucket keys, all in
/// that key's slot). Reply: next cursor, keys removed.
pub fn reset_step_source() -> String {
    let prelude = contract::prelude(
        contract::reset_step::keys::ALL,
        contract::reset_step::args::ALL,
    );
    format!("{prelude}{RESET_STEP}")
}

const RESET_STEP: &str = include_str!("scripts/reset_step.lua");

/// Reads the live limits' version and hash in one atomic step (KEYS
/// [`contract::read_limits`]: limits, limits:v):
/// the version is the one every decision compares with, never a copy that could differ.
/// Keys of the wrong type (written by hand) read as empty, with the error: the version as
/// the decisions' MGET sees it (nil), the hash as unreadable. Reply: version, fields, error.
pub fn read_limits_source() -> String {
    let prelude = contract::prelude(
        contract::read_limits::keys::ALL,
        contract::read_limits::args::ALL,
    );
    format!("{prelude}{READ_LIMITS}")
}

const READ_LIMITS: &str = include_str!("scripts/read_limits.lua");

/// Writes new live limits atomically, only if the version is still `expected`: the hash
/// is replaced whole by what the writer validated (so fields nobody could read are gone),
/// and in the same step the global and hot-lane buckets are carried over to the new
/// limits as of the change, a missing one (full) at the old limits' capacity.
/// KEYS and ARGV: [`contract::set_limits`] (limits, limits:v, changes, global bucket,
/// hot-lane bucket; expected version ("" = none), by, at (ms), old, new, a fresh epoch
/// (used when the stored limits are created anew), then interval and tolerance of global
/// and hot lane under the old limits, then the same under the new ("0" = not configured),
/// then (lane, "capacity/rate") pairs: every override of the new limits). Reply: the new
/// version, or an error when someone else changed them first.
pub fn set_limits_source() -> String {
    let prelude = contract::prelude(
        contract::set_limits::keys::ALL,
        contract::set_limits::args::ALL,
    );
    format!("{CARRY}{prelude}{SET_LIMITS}")
}

const SET_LIMITS: &str = include_str!("scripts/set_limits.lua");

/// The hot shops of a limiter for `limiter status` (the CLI): KEYS and ARGV
/// [`contract::hot_scan`] (a key that routes it; SCAN cursor, MATCH pattern of the hot
/// flags). Reply: next cursor, then per flag its key,
/// value and PTTL.
pub fn hot_scan_source() -> String {
    let prelude = contract::prelude(contract::hot_scan::keys::ALL, contract::hot_scan::args::ALL);
    format!("{prelude}{HOT_SCAN}")
}

const HOT_SCAN: &str = include_str!("scripts/hot_scan.lua");

const FEEDBACK: &str = include_str!("scripts/feedback.lua");

/// A throttling answer of the provider, atomically on Valkey's clock: the Lua twin of
/// [`crate::adaptive::feedback`]. KEYS and ARGV: [`contract::feedback`]. Reply:
/// `{decreased, from, to, paused, pause_until, now}` ([`FeedbackOutcome::to_ints`]).
pub fn feedback_source() -> String {
    let prelude = contract::prelude(contract::feedback::keys::ALL, contract::feedback::args::ALL);
    format!("{SHEBANG}{prelude}{CLOCK_BLOCK}{FEEDBACK}")
}

/// [`feedback_source`] on the test clock (the argument after the call's, µs).
pub fn feedback_source_with_test_clock() -> String {
    let prelude = contract::prelude(contract::feedback::keys::ALL, contract::feedback::args::ALL);
    let clock = format!(
        "local now = tonumber(ARGV[{}])\nlocal slack_ms = {}\n",
        contract::feedback::TEST_NOW_ARG + 1,
        decide::TEST_KEY_SLACK_MS
    );
    format!("{SHEBANG}{prelude}{clock}{FEEDBACK}")
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
    pub fn keys(&self) -> [&[u8]; contract::feedback::keys::LEN] {
        use contract::feedback::keys::*;
        let mut out: [&[u8]; contract::feedback::keys::LEN] = [&[]; contract::feedback::keys::LEN];
        out[ADAPT] = self.adapt_key;
        out[LAST] = self.last_key;
        out
    }

    pub fn args(&self) -> [String; contract::feedback::args::LEN] {
        use contract::feedback::args::*;
        let mut out: [String; contract::feedback::args::LEN] = Default::default();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::tests::assert_reads_by_name;

    #[test]
    fn test_clock_variant_differs_only_in_the_clock_block() {
        let prod = decide_source();
        let test = decide_source_with_test_clock();
        assert!(prod.contains("redis.call('TIME')"));
        assert!(!test.contains("TIME"));
        assert_eq!(
            prod.replacen(CLOCK_BLOCK, &test_clock_block(), 1),
            test,
            "only the clock block differs"
        );
        // The time is the argument after the call's; keys live an hour longer.
        let after_the_call = format!(
            "local now = tonumber(ARGV[{}])\nlocal slack_ms = 3600000\n",
            DecideCall::ARGS + 1
        );
        assert!(test.contains(&after_the_call), "{test}");
    }

    #[test]
    fn the_script_is_the_lua_files_in_order() {
        // "#!lua\n" + carry.lua + the prelude + clock.lua + decide.lua, as `checkout-guard
        // limiter call` prints it for the benchmark.
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}{f}")).unwrap();
        let [carry, clock, body] = ["carry.lua", "clock.lua", "decide.lua"].map(read);
        assert_eq!(
            decide_source(),
            format!("#!lua\n{carry}{}{clock}{body}", decide_prelude())
        );
    }

    #[test]
    fn the_scripts_read_their_inputs_by_name() {
        assert_reads_by_name("decide.lua", BODY, decide::keys::ALL, decide::args::ALL);
        // The clock reads no input of the call.
        assert_reads_by_name("clock.lua", CLOCK_BLOCK, &[], &[]);
        assert_reads_by_name(
            "carry_step.lua",
            CARRY_STEP,
            contract::carry_step::keys::ALL,
            contract::carry_step::args::ALL,
        );
        assert_reads_by_name(
            "set_limits.lua",
            SET_LIMITS,
            contract::set_limits::keys::ALL,
            contract::set_limits::args::ALL,
        );
        assert_reads_by_name(
            "reset_step.lua",
            RESET_STEP,
            contract::reset_step::keys::ALL,
            contract::reset_step::args::ALL,
        );
        assert_reads_by_name(
            "read_limits.lua",
            READ_LIMITS,
            contract::read_limits::keys::ALL,
            contract::read_limits::args::ALL,
        );
        assert_reads_by_name(
            "hot_scan.lua",
            HOT_SCAN,
            contract::hot_scan::keys::ALL,
            contract::hot_scan::args::ALL,
        );
        // carry.lua is a function of its parameters.
        assert_reads_by_name("carry.lua", CARRY, &[], &[]);
        // peek(), by its name in Rust.
        assert!(!crate::contract::tests::uses(BODY, "dry"));
    }

    #[test]
    fn keys_and_args_sit_at_their_named_positions() {
        let set = BucketSet {
            global: crate::BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: Some(crate::BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
        };
        let keys = ShopKeys::new(&Keys::new("n"), b"s");
        let (lanes, auto) = (LaneArgs::new(&set), AutoHotArgs::new(None));
        let call = DecideCall {
            adapt: &crate::call::AdaptArgs::off(),
            keys: keys.decide_keys(),
            tokens: 3,
            static_hot: true,
            lanes: &lanes,
            version: b"v",
            shop: b"s",
            auto_hot: &auto,
            settings: "set",
            peek: true,
            max_wait_us: 9,
        };
        let k = call.keys();
        assert_eq!(k[decide::keys::HOT_FLAG], keys.decide_keys().hot_flag);
        assert_eq!(
            k[decide::bucket_key(Lane::HotShop)],
            keys.decide_keys().hot_shop
        );
        let a = call.argv();
        assert_eq!(a.len(), DecideCall::ARGS);
        let at = |i: usize| String::from_utf8_lossy(&a[i]).into_owned();
        use decide::args::*;
        assert_eq!(
            [TOKENS, STATIC_HOT, VERSION, SHOP, SETTINGS, PEEK, MAX_WAIT].map(at),
            ["3", "1", "v", "s", "set", "1", "9"]
        );
        assert_eq!(at(decide::interval_arg(Lane::HotShop)), "1000000");
        assert_eq!(at(decide::tolerance_arg(Lane::HotShop)), "5000000");
        assert_eq!(at(decide::interval_arg(Lane::HotLane)), "0");
        assert_eq!(at(AUTO_HOT_WINDOW), "0");
    }

    #[test]
    fn settings_ttl_in_the_script_is_the_constant() {
        assert!(BODY.contains(&format!("'EX', {SETTINGS_TTL_SECONDS})")));
    }
}
