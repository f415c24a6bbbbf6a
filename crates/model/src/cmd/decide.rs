//! `decide`: the Valkey script that makes one decision atomically (`decide.lua`, the Lua
//! twin of [`crate::step`]), and the native module's [`MODULE_COMMAND`] with the same keys
//! and arguments: its contract, its encoder [`DecideCall`], its reply decoder
//! ([`DecideCall::decode_reply`]) and the server's decoder of the call ([`ReceivedCall`]).
//!
//! KEYS and ARGV are built by [`DecideCall`] only (the one encoder of the contract), in
//! the order of the named tables [`keys`] and [`args`] (the script reads them by
//! those names, through a generated prelude): KEYS: the buckets of global, hot lane and
//! hot shop, hot flag, live-limits version, auto-hot window prefix (never read itself:
//! `<prefix><window number>` are the counters), published settings (all share one hash
//! tag, so a cluster routes the call to one slot). ARGV: tokens, static_hot (0/1), then
//! interval and tolerance (µs) of global, hot lane and hot shop (interval 0 = bucket not
//! configured), then the live-limits version the caller decided with ("" = none), the
//! shop ID, auto-hot window (µs, 0 = off), share, TTL (s) and minimum tokens, the
//! caller's settings (published when the stored ones differ), and peek (1: decide as
//! acquire() would, writing nothing; no auto-hot counting), and the longest wait of a
//! reservation in µs (0: none; see `StepInput::max_wait_us`), the adaptive and in-flight
//! options, and the call's endpoint bucket (its key among KEYS, the global key when none;
//! its interval and tolerance, "0" when none) and class's share in ppm (issue 42,
//! docs/endpoints.md).
//! Reply: `{reason, hot, now, tat_global, tat_lane, tat_shop, became_hot, share_permille,
//! mark_ttl_ms}` (see `StepReply`); when only the global bucket applied (the shop not hot,
//! `auto_hot` off) its short form `{reason, hot, now, tat_global}`, the rest at their
//! defaults (`StepReply::from_ints`; Valkey converts a script's reply element by element);
//! for a call with an endpoint the thirteen of the endpoint form (reason 8: the endpoint's
//! bucket denied; the endpoint bucket's TAT last);
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

use crate::adaptive::AdaptParams;
use crate::auto_hot::AutoHot;
use crate::bounds::MAX_WAIT_US;
use crate::bucket::{BucketSet, BucketSpec, Lane};
use crate::cmd::{inputs, int, without_comment_lines, Call, Command, CARRY, CLOCK_BLOCK, SHEBANG};
use crate::in_flight::{InFlight, MAX_LEASE_SECONDS};
use crate::keys::Keys;
use crate::step::StepReply;

/// The native module's command: the same KEYS then ARGV as the script.
pub const MODULE_COMMAND: &str = "CG.DECIDE";

inputs! {
    /// KEYS (all share one hash tag, so a cluster routes the call to one slot).
    pub mod keys {
        /// The shop's hot mark.
        HOT_FLAG = "hot_flag_key",
        /// The live limits' version.
        LIMITS_VERSION = "version_key",
        /// The published settings.
        SETTINGS = "settings_key",
        /// The buckets of global, hot lane, hot shop (`KEYS[bucket_keys + i]`, lane i
        /// from 1): [`super::bucket_key`]. Global's ends the base form; the hot lanes'
        /// are the hot form's.
        BUCKETS[3] = "bucket_keys",
        /// The bucket of the call's endpoint ([`crate::keys::Keys::endpoint`]; the global
        /// bucket's key again when the call names none: never read then).
        ENDPOINT = "endpoint_key",
        /// The in-flight lease sets of global, hot lane, hot shop (`KEYS[lease_keys + i]`,
        /// level i from 1; [`crate::in_flight`]): read only with `in_flight`.
        LEASES[3] = "lease_keys",
        /// The lease stats hash (read on an in-flight denial, for the retry estimate;
        /// counts expired leases a decision removes).
        LEASE_STATS = "lease_stats_key",
        /// The `auto_hot` window prefix: never read itself, `<prefix><window number>`
        /// are the counters.
        AUTO_HOT_PREFIX = "window_prefix",
        /// The adaptive budget's state ([`crate::adaptive`]; read only when
        /// `ADAPT_FLOOR` is not "0").
        ADAPT = "adapt_key",
    }
}

inputs! {
    /// ARGV.
    pub mod args {
        /// The contract's mark, [`super::CONTRACT_MARK`]: a call of another build's contract (a
        /// rolling upgrade) is refused by the module as of the wrong arity, never read
        /// in another order (the script, bound to its own source by its SHA1, reads no
        /// mark).
        CONTRACT = "_contract",
        /// Tokens asked for (at least 1).
        TOKENS = "tokens",
        /// "1": the shop is listed in `hot_shops`.
        STATIC_HOT = "static_hot",
        /// The live limits' version the caller decided with ("" = none).
        VERSION = "version",
        /// The caller's settings (published when the stored ones differ).
        SETTINGS = "settings",
        /// "1": `peek()`, decide as acquire() would, writing nothing.
        PEEK = "peek",
        /// A reservation's longest wait, µs ("0": none).
        MAX_WAIT = "max_wait_us",
        /// Interval and tolerance (µs) of global, hot lane, hot shop (interval "0":
        /// not configured): [`super::interval_arg`], [`super::tolerance_arg`]. In Lua
        /// lane i's (from 1) are `ARGV[lane_args + 2 * i - 1]` and the next. Global's
        /// end the base form; the hot lanes' are the hot form's.
        LANES[6] = "lane_args",
        /// Interval and tolerance (µs) of the call's endpoint bucket (interval "0": the
        /// call names no endpoint): `ARGV[endpoint_args + 1]` and the next.
        ENDPOINT_BUCKET[2] = "endpoint_args",
        /// The call's priority class's share, ppm of every bucket's capacity it leaves
        /// untouched ("0": none; [`crate::endpoints::reserve_us`]).
        SHARE = "share_ppm",
        /// The `in_flight` limits of global, hot lane, hot shop ("0": no limit; global
        /// "0": the option is off, no lease read or taken): `ARGV[in_flight_args + i]`.
        IN_FLIGHT[3] = "in_flight_args",
        /// How long a lease is held at most, µs.
        LEASE_US = "lease_us",
        /// The id of the lease this call takes when allowed (unique per call).
        LEASE_ID = "lease_id",
        /// The shop ID (the `auto_hot` counters' field).
        SHOP = "shop",
        /// `auto_hot` window, µs ("0" = off).
        AUTO_HOT_WINDOW = "window_us",
        /// `auto_hot` share (0 < share < 1).
        AUTO_HOT_SHARE = "hot_share",
        /// `auto_hot` TTL of a mark, seconds.
        AUTO_HOT_TTL = "hot_ttl_s",
        /// `auto_hot` minimum tokens.
        AUTO_HOT_MIN_TOKENS = "hot_min_tokens",
        /// The `adaptive` floor, permille ("0": the option is off, the state not
        /// read).
        ADAPT_FLOOR = "adapt_floor",
        /// The `adaptive` recovery time, µs.
        ADAPT_RECOVER = "adapt_recover_us",
    }
}

/// The forms of a call, shortest first: a call sends KEYS and ARGV up to the end of the
/// last group it needs, and no further (each input costs the server and the wire on every
/// decision: docs/performance.md). Each form is (KEYS, ARGV) sent:
/// base (global bucket: the mark, the version, the settings, tokens, peek, wait), hot
/// (the hot lanes' buckets), route (the endpoint, the class's share), in_flight (the
/// leases), auto_hot (the counters), adaptive (its state). An input a call does not
/// send reads as off ("0", ""; the endpoint's key as global's). The totals differ form
/// to form, so the module tells a call's form from its argument count alone.
pub const FORMS: [(usize, usize); 6] = [
    (keys::BUCKETS + 1, args::LANES + 2),
    (keys::BUCKETS + 3, args::LANES + 6),
    (keys::ENDPOINT + 1, args::SHARE + 1),
    (keys::LEASE_STATS + 1, args::LEASE_ID + 1),
    (keys::AUTO_HOT_PREFIX + 1, args::AUTO_HOT_MIN_TOKENS + 1),
    (keys::ADAPT + 1, args::ADAPT_RECOVER + 1),
];

/// What a call sends first among its ARGV ([`args::CONTRACT`]): this contract's mark. The
/// module answers a call without it "wrong number of arguments", as it does a call of no
/// form's count, so `engine = auto` decides with the script meanwhile (the contract before
/// this one had 13 keys and 27 arguments in another order, no mark).
pub const CONTRACT_MARK: &[u8] = b"f1";

/// The form (its index in [`FORMS`]) of a call of `n` KEYS and ARGV in all.
pub fn form_of_len(n: usize) -> Option<usize> {
    FORMS.iter().position(|(k, a)| k + a == n)
}

/// The position among KEYS of `lane`'s bucket.
pub const fn bucket_key(lane: Lane) -> usize {
    keys::BUCKETS + lane as usize
}

/// The position among KEYS of `lane`'s lease set.
pub const fn lease_key(lane: Lane) -> usize {
    keys::LEASES + lane as usize
}

/// The position among ARGV of `lane`'s in-flight limit.
pub const fn in_flight_arg(lane: Lane) -> usize {
    args::IN_FLIGHT + lane as usize
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
/// ([`source_with_test_clock`]) and the module loaded with
/// `test-clock` take one argument more, the last, after the call's (whatever its form),
/// the time to decide at (µs), and keep keys [`TEST_KEY_SLACK_MS`] longer, so the
/// server's own clock never expires a key the test still reads. The script's variant
/// takes it off ARGV before the prelude names the call's inputs
/// ([`TEST_CLOCK_LAST_ARG`]).
pub const TEST_CLOCK_LAST_ARG: &str = "local test_now_us = ARGV[#ARGV]\nARGV[#ARGV] = nil\n";
/// How much longer keys live under the test clock, ms.
pub const TEST_KEY_SLACK_MS: i64 = 3_600_000;

/// The decision's contract and Lua.
pub const COMMAND: Command = Command {
    name: "decide",
    keys: keys::ALL,
    args: args::ALL,
    lua: BODY,
    source,
};

/// How long published settings live (refreshed whenever a worker publishes them): a
/// worker that finds them missing or different publishes its own in the same call.
pub const SETTINGS_TTL_SECONDS: i64 = 86_400;

const BODY: &str = include_str!("../scripts/decide.lua");

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
    /// The lease sets of global, hot lane, hot shop ([`Keys::leases`]): sent whether or
    /// not the limiter has `in_flight` (a cluster routes a script by all its keys).
    pub leases: [&'a [u8]; 3],
    /// [`Keys::lease_stats`].
    pub lease_stats: &'a [u8],
}

/// The call's endpoint as the decision takes it: its key, and its bucket's interval and
/// tolerance (µs) formatted once per limiter (and live change), not per call.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointArgs {
    key: Vec<u8>,
    spec: BucketSpec,
    text: [String; 2],
}

impl EndpointArgs {
    /// Endpoint `name`'s bucket `spec`, keyed under `keys`.
    pub fn new(keys: &Keys, name: &str, spec: &BucketSpec) -> Self {
        Self {
            key: keys.endpoint(name),
            spec: *spec,
            text: [
                spec.interval_us().to_string(),
                spec.tolerance_us().to_string(),
            ],
        }
    }

    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn spec(&self) -> &BucketSpec {
        &self.spec
    }

    /// Interval and tolerance, µs.
    pub fn text(&self) -> &[String; 2] {
        &self.text
    }
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

/// `in_flight` as the script takes it: the limits per level ("0": none) and the lease
/// length (µs), formatted once when they change.
#[derive(Debug, Clone, PartialEq)]
pub struct InFlightArgs {
    in_flight: Option<InFlight>,
    text: [String; 4],
}

impl InFlightArgs {
    pub fn new(in_flight: Option<&InFlight>) -> Self {
        let text = match in_flight {
            Some(f) => [
                f.limits[0].to_string(),
                f.limits[1].to_string(),
                f.limits[2].to_string(),
                f.lease_us.to_string(),
            ],
            None => ["0".into(), "0".into(), "0".into(), "0".into()],
        };
        Self {
            in_flight: in_flight.copied(),
            text,
        }
    }

    /// Off: no lease read or taken.
    pub fn off() -> Self {
        Self::new(None)
    }

    pub fn in_flight(&self) -> Option<&InFlight> {
        self.in_flight.as_ref()
    }

    /// The limits of global, hot lane, hot shop, then the lease length.
    pub fn text(&self) -> &[String; 4] {
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
            text[interval_arg(lane) - args::LANES] = interval.to_string();
            text[tolerance_arg(lane) - args::LANES] = tolerance.to_string();
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
    leases: [Vec<u8>; 3],
    lease_stats: Vec<u8>,
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
            leases: Lane::ALL.map(|lane| keys.leases(lane, shop)),
            lease_stats: keys.lease_stats(),
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
            leases: [&self.leases[0], &self.leases[1], &self.leases[2]],
            lease_stats: &self.lease_stats,
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
    /// The `in_flight` option ([`InFlightArgs::off`]: off).
    pub in_flight: &'a InFlightArgs,
    /// The id of the lease taken when allowed (with `in_flight`; unique per call: the
    /// sender's, see the runtime's lease ids).
    pub lease_id: &'a [u8],
    /// The call's endpoint (`None`: it names none).
    pub endpoint: Option<&'a EndpointArgs>,
    /// The call's priority class's share, ppm (0: none).
    pub share_ppm: i64,
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
    pub const KEYS: usize = keys::LEN;
    /// Number of ARGV.
    pub const ARGS: usize = args::LEN;

    /// The call's form: the index in [`FORMS`] of the last group it needs.
    pub fn form(&self) -> usize {
        if self.adapt.params().is_some() {
            5
        } else if self.auto_hot.auto_hot().is_some() {
            4
        } else if self.in_flight.in_flight().is_some() {
            3
        } else if self.endpoint.is_some() || self.share_ppm != 0 {
            2
        } else if self.lanes.buckets().hot_lane.is_some() || self.lanes.buckets().hot_shop.is_some()
        {
            1
        } else {
            0
        }
    }

    /// KEYS at every position in [`decide::keys`] (a call sends those of its
    /// [`Self::form`]: [`Self::sent_keys`]).
    pub fn keys(&self) -> [&[u8]; keys::LEN] {
        use keys::*;
        let k = &self.keys;
        let mut out: [&[u8]; keys::LEN] = [&[]; keys::LEN];
        out[bucket_key(Lane::Global)] = k.global;
        out[bucket_key(Lane::HotLane)] = k.hot_lane;
        out[bucket_key(Lane::HotShop)] = k.hot_shop;
        out[HOT_FLAG] = k.hot_flag;
        out[LIMITS_VERSION] = k.limits_version;
        out[AUTO_HOT_PREFIX] = k.auto_hot_prefix;
        out[SETTINGS] = k.settings;
        out[ADAPT] = k.adapt;
        for lane in Lane::ALL {
            out[lease_key(lane)] = k.leases[lane as usize];
        }
        out[LEASE_STATS] = k.lease_stats;
        out[ENDPOINT] = self.endpoint.map_or(k.global, |e| e.key());
        out
    }

    /// How many KEYS the call sends: its form's.
    pub fn sent_key_count(&self) -> usize {
        FORMS[self.form()].0
    }

    /// The KEYS the call sends: those of its form.
    pub fn sent_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.keys().into_iter().take(self.sent_key_count())
    }

    /// The ARGV the call sends, at their positions in [`decide::args`], up to the end of
    /// its form ([`Self::form`]). An array on the stack, so the call on every acquire()
    /// is sent without a vector of its own (see [`Self::argv`] for one).
    pub fn args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        let sent = FORMS[self.form()].1;
        use args::*;
        let flag = |on: bool| Cow::Borrowed(if on { &b"1"[..] } else { &b"0"[..] });
        let mut out: [Cow<'_, [u8]>; args::LEN] = Default::default();
        out[CONTRACT] = Cow::Borrowed(CONTRACT_MARK);
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
        let [g, l, sh, lease] = self.in_flight.text();
        out[in_flight_arg(Lane::Global)] = Cow::Borrowed(g.as_bytes());
        out[in_flight_arg(Lane::HotLane)] = Cow::Borrowed(l.as_bytes());
        out[in_flight_arg(Lane::HotShop)] = Cow::Borrowed(sh.as_bytes());
        out[LEASE_US] = Cow::Borrowed(lease.as_bytes());
        out[LEASE_ID] = Cow::Borrowed(self.lease_id);
        match self.endpoint {
            Some(e) => {
                let [i, t] = e.text();
                out[ENDPOINT_BUCKET] = Cow::Borrowed(i.as_bytes());
                out[ENDPOINT_BUCKET + 1] = Cow::Borrowed(t.as_bytes());
            }
            None => {
                out[ENDPOINT_BUCKET] = Cow::Borrowed(&b"0"[..]);
                out[ENDPOINT_BUCKET + 1] = Cow::Borrowed(&b"0"[..]);
            }
        }
        out[SHARE] = match self.share_ppm {
            0 => Cow::Borrowed(&b"0"[..]),
            ppm => Cow::Owned(ppm.to_string().into_bytes()),
        };
        out.into_iter().take(sent)
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

/// The production script source: the shebang, `carry.lua`, the clock (`clock.lua`:
/// Valkey's `TIME`), the inputs by name (the contract's prelude) and `decide.lua`, without
/// their comment lines ([`without_comment_lines`]).
pub fn source() -> String {
    let prelude = COMMAND.prelude();
    without_comment_lines(&format!("{SHEBANG}{CARRY}{CLOCK_BLOCK}{prelude}{BODY}"))
}

/// The clock block of the test variant: the time from the last argument (µs, taken off
/// ARGV: [`TEST_CLOCK_LAST_ARG`]), keys kept [`TEST_KEY_SLACK_MS`] longer.
fn test_clock_block() -> String {
    format!("{TEST_CLOCK_LAST_ARG}{}", crate::cmd::TEST_CLOCK_BLOCK)
}

/// The same decision logic on the test clock (see [`TEST_CLOCK_LAST_ARG`]), for tests
/// that compare the script with the Rust model at times they choose: the clock block of
/// [`source`] replaced, nothing else.
pub fn source_with_test_clock() -> String {
    let prelude = COMMAND.prelude();
    let clock = test_clock_block();
    without_comment_lines(&format!("{SHEBANG}{CARRY}{clock}{prelude}{BODY}"))
}

impl Call for DecideCall<'_> {
    const COMMAND: &'static Command = &COMMAND;

    fn encode_keys(&self) -> impl Iterator<Item = &[u8]> {
        self.sent_keys()
    }

    fn encode_args(&self) -> impl Iterator<Item = Cow<'_, [u8]>> {
        self.args()
    }
}

/// A decision call as the server receives it (`CG.DECIDE`'s arguments, or the script's
/// KEYS then ARGV), decoded: the inverse of [`crate::DecideCall`]'s encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedCall<'a> {
    /// The keys, at their positions in [`keys`].
    pub keys: [&'a [u8]; keys::LEN],
    pub tokens: i64,
    pub static_hot: bool,
    pub buckets: BucketSet,
    pub version: &'a [u8],
    pub shop: &'a [u8],
    pub auto_hot: Option<AutoHot>,
    pub settings: &'a [u8],
    /// `peek()`: decide, write nothing.
    pub peek: bool,
    /// A reservation's longest wait, µs (0: none).
    pub max_wait_us: i64,
    /// The `adaptive` option (None: off, its state not read).
    pub adapt: Option<AdaptParams>,
    /// The `in_flight` option (None: off, no lease read or taken).
    pub in_flight: Option<InFlight>,
    /// The lease taken when allowed.
    pub lease_id: &'a [u8],
    /// The call's endpoint bucket (`None`: it names none).
    pub endpoint: Option<BucketSpec>,
    /// The call's class's share, ppm (0: none).
    pub share_ppm: i64,
}

impl<'a> ReceivedCall<'a> {
    /// Decodes the call's KEYS then ARGV, each by its name in [`keys`] and [`args`]. What it holds
    /// is valid as the options are: the buckets are buckets, `auto_hot` passed
    /// [`AutoHot::new`].
    pub fn parse(args: &[&'a [u8]]) -> Result<Self, String> {
        const KEYS: usize = keys::LEN;
        const ARGS: usize = args::LEN;
        let Some(form) = form_of_len(args.len()) else {
            let forms: Vec<String> = FORMS.iter().map(|(k, a)| format!("{k}+{a}")).collect();
            return Err(format!(
                "expected keys and arguments of one of the forms {}, got {}",
                forms.join(", "),
                args.len()
            ));
        };
        let (nkeys, nargs) = FORMS[form];
        let (sent_keys, sent_args) = args.split_at(nkeys);
        if sent_args[args::CONTRACT] != CONTRACT_MARK {
            return Err(format!(
                "wrong number of arguments: a call of another contract (mark {:?}, this build's {:?})",
                String::from_utf8_lossy(sent_args[args::CONTRACT]),
                String::from_utf8_lossy(CONTRACT_MARK)
            ));
        }
        // What a form does not send reads as off: "0", the empty string, the endpoint's
        // key as global's.
        let mut keys: [&'a [u8]; KEYS] = [&[]; KEYS];
        keys[..nkeys].copy_from_slice(sent_keys);
        if nkeys <= keys::ENDPOINT {
            keys[keys::ENDPOINT] = keys[bucket_key(Lane::Global)];
        }
        let mut argv: [&'a [u8]; ARGS] = [b"0"; ARGS];
        argv[..nargs].copy_from_slice(sent_args);
        for at in [args::LEASE_ID, args::SHOP] {
            if at >= nargs {
                argv[at] = b"";
            }
        }
        use args::*;
        let arg = |i: usize| argv[i];
        let tokens = int("tokens", arg(TOKENS))?;
        if tokens < 1 {
            return Err(format!("tokens must be at least 1, got {tokens}"));
        }
        let bucket = |lane: Lane| -> Result<Option<BucketSpec>, String> {
            let name = lane.as_str();
            let i = int(name, arg(interval_arg(lane)))?;
            let t = int(name, arg(tolerance_arg(lane)))?;
            match i {
                0 => Ok(None),
                _ => BucketSpec::from_script_args(i, t).map(Some).ok_or_else(|| {
                    format!("{name}: interval {i} and tolerance {t} are not a bucket")
                }),
            }
        };
        let global = bucket(Lane::Global)?.ok_or("the global bucket is required")?;
        let buckets = BucketSet {
            global,
            hot_lane: bucket(Lane::HotLane)?,
            hot_shop: bucket(Lane::HotShop)?,
        };
        let max_wait_us = int("max wait", arg(MAX_WAIT))?;
        if !(0..=MAX_WAIT_US).contains(&max_wait_us) {
            return Err(format!(
                "max wait must be from 0 to {MAX_WAIT_US} µs, got {max_wait_us}"
            ));
        }
        let window_us = int("auto_hot window", arg(AUTO_HOT_WINDOW))?;
        let auto_hot = match window_us {
            0 => None,
            w if w > 0 => Some(
                AutoHot::new(
                    std::time::Duration::from_micros(w as u64),
                    std::str::from_utf8(arg(AUTO_HOT_SHARE))
                        .ok()
                        .and_then(|s| s.parse::<f64>().ok())
                        .filter(|x| x.is_finite())
                        .ok_or("auto_hot share must be a number")?,
                    int("auto_hot ttl", arg(AUTO_HOT_TTL))?,
                    int("auto_hot min_tokens", arg(AUTO_HOT_MIN_TOKENS))?,
                )
                .map_err(|e| format!("{} {}", e.option, e.message))?,
            ),
            w => return Err(format!("auto_hot window must be >= 0, got {w}")),
        };
        let floor = int("adaptive floor", arg(ADAPT_FLOOR))?;
        let adapt = match floor {
            0 => None,
            f if (1..=crate::adaptive::FULL).contains(&f) => {
                let recover_us = int("adaptive recovery", arg(ADAPT_RECOVER))?;
                if recover_us < 1 {
                    return Err(format!(
                        "adaptive recovery must be at least 1 µs, got {recover_us}"
                    ));
                }
                Some(AdaptParams {
                    floor_permille: f,
                    recover_us,
                })
            }
            f => return Err(format!("adaptive floor must be from 0 to 1000, got {f}")),
        };
        let limit = |lane: Lane| -> Result<i64, String> {
            let n = int("in_flight limit", arg(in_flight_arg(lane)))?;
            if n < 0 {
                return Err(format!("in_flight {} must be >= 0, got {n}", lane.as_str()));
            }
            Ok(n)
        };
        let limits = [
            limit(Lane::Global)?,
            limit(Lane::HotLane)?,
            limit(Lane::HotShop)?,
        ];
        let in_flight = match limits[0] {
            0 => None,
            _ => {
                let lease_us = int("lease", arg(LEASE_US))?;
                if !(1..=MAX_LEASE_SECONDS * 1_000_000).contains(&lease_us) {
                    return Err(format!(
                        "lease must be from 1 to {} µs, got {lease_us}",
                        MAX_LEASE_SECONDS * 1_000_000
                    ));
                }
                Some(InFlight { limits, lease_us })
            }
        };
        let endpoint = {
            let i = int("endpoint", arg(ENDPOINT_BUCKET))?;
            let t = int("endpoint", arg(ENDPOINT_BUCKET + 1))?;
            match i {
                0 => None,
                _ => Some(BucketSpec::from_script_args(i, t).ok_or_else(|| {
                    format!("endpoint: interval {i} and tolerance {t} are not a bucket")
                })?),
            }
        };
        let share_ppm = int("priority share", arg(SHARE))?;
        if !(0..crate::endpoints::SHARE_UNIT).contains(&share_ppm) {
            return Err(format!(
                "priority share must be from 0 to {} ppm, got {share_ppm}",
                crate::endpoints::SHARE_UNIT - 1
            ));
        }
        Ok(Self {
            endpoint,
            share_ppm,
            in_flight,
            lease_id: arg(LEASE_ID),
            adapt,
            keys,
            tokens,
            static_hot: arg(STATIC_HOT) == b"1",
            buckets,
            version: arg(VERSION),
            shop: arg(SHOP),
            auto_hot,
            settings: arg(SETTINGS),
            peek: arg(PEEK) == b"1",
            max_wait_us,
        })
    }

    /// The key at `at` (a position in [`keys`]).
    pub fn key(&self, at: usize) -> &'a [u8] {
        self.keys[at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::{to_vecs, with_slices};

    #[test]
    fn test_clock_variant_differs_only_in_the_clock_block() {
        let prod = source();
        let test = source_with_test_clock();
        assert!(prod.contains("redis.call('TIME')"));
        assert!(!test.contains("TIME"));
        assert_eq!(
            prod.replacen(
                &without_comment_lines(CLOCK_BLOCK),
                &without_comment_lines(&test_clock_block()),
                1
            ),
            test,
            "only the clock block differs"
        );
        // The time is the last argument, after the call's whatever its form, taken off
        // ARGV before the prelude names the call's (test_clock.lua: keys live an hour
        // longer, checked in cmd/tests.rs).
        let last_then_the_prelude = without_comment_lines(&format!(
            "local test_now_us = ARGV[#ARGV]\nARGV[#ARGV] = nil\n{}{}",
            crate::cmd::TEST_CLOCK_BLOCK,
            COMMAND.prelude()
        ));
        assert!(test.contains(&last_then_the_prelude), "{test}");
    }

    #[test]
    fn the_script_is_the_lua_files_in_order() {
        // "#!lua\n" + carry.lua + clock.lua + the prelude + decide.lua, as `checkout-guard
        // limiter call` prints it for the benchmark.
        // (The files themselves, each compiled-in body against its file on disk:
        // `tests/scripts_are_the_lua_files.rs`, outside this crate's code.)
        let [carry, clock, body] = [
            include_str!("../scripts/carry.lua"),
            include_str!("../scripts/clock.lua"),
            include_str!("../scripts/decide.lua"),
        ];
        assert_eq!(
            source(),
            without_comment_lines(&format!("#!lua\n{carry}{clock}{}{body}", COMMAND.prelude()))
        );
        // Under Redis 7.0's limit on an unauthenticated client's bulk string (see
        // without_comment_lines), with room to grow.
        assert!(source().len() < 12 * 1024, "{} bytes", source().len());
        assert!(source_with_test_clock().len() < 12 * 1024);
    }

    #[test]
    fn peek_is_named_as_in_rust() {
        assert!(!crate::cmd::tests::uses(BODY, "dry"));
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
            endpoint: None,
            share_ppm: 0,
            in_flight: &crate::cmd::decide::InFlightArgs::off(),
            lease_id: b"",
            adapt: &AdaptArgs::off(),
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
        assert_eq!(k[keys::HOT_FLAG], keys.decide_keys().hot_flag);
        assert_eq!(k[bucket_key(Lane::HotShop)], keys.decide_keys().hot_shop);
        // A hot shop's bucket configured: the hot form, no further.
        assert_eq!(call.form(), 1);
        assert_eq!(call.sent_keys().count(), FORMS[1].0);
        assert_eq!(call.sent_key_count(), FORMS[1].0);
        let a = call.argv();
        assert_eq!(a.len(), FORMS[1].1);
        let at = |i: usize| String::from_utf8_lossy(&a[i]).into_owned();
        use args::*;
        assert_eq!(
            [TOKENS, STATIC_HOT, VERSION, SETTINGS, PEEK, MAX_WAIT].map(at),
            ["3", "1", "v", "set", "1", "9"]
        );
        assert_eq!(at(interval_arg(Lane::HotShop)), "1000000");
        assert_eq!(at(tolerance_arg(Lane::HotShop)), "5000000");
        assert_eq!(at(interval_arg(Lane::HotLane)), "0");
    }

    #[test]
    fn settings_ttl_in_the_script_is_the_constant() {
        assert!(BODY.contains(&format!("'EX', {SETTINGS_TTL_SECONDS})")));
    }

    #[test]
    fn a_received_call_is_what_the_encoder_sent() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 5, 1.0).unwrap()),
        };
        let auto = AutoHot {
            window: std::time::Duration::from_millis(1500),
            share: 0.34,
            ttl_seconds: 60,
            min_tokens: 3,
        };
        let keys = ShopKeys::new(&Keys::new("n"), b"s\x00p");
        let (lanes, auto_args) = (LaneArgs::new(&set), AutoHotArgs::new(Some(&auto)));
        let call = DecideCall {
            endpoint: None,
            share_ppm: 0,
            in_flight: &crate::cmd::decide::InFlightArgs::off(),
            lease_id: b"",
            adapt: &AdaptArgs::off(),
            keys: keys.decide_keys(),
            tokens: 2,
            static_hot: true,
            lanes: &lanes,
            version: b"3-ab-17",
            shop: b"s\x00p",
            auto_hot: &auto_args,
            settings: "global=30/7.5",
            peek: true,
            max_wait_us: 250_000,
        };
        let sent = to_vecs(&call);
        let args: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
        let got = ReceivedCall::parse(&args).unwrap();
        // auto_hot: every key but the adaptive state's (its form is the fifth).
        assert_eq!(call.form(), 4);
        assert_eq!(got.keys[..keys::ADAPT], call.keys()[..keys::ADAPT]);
        assert_eq!(got.keys[keys::ADAPT], b"");
        assert_eq!(got.adapt, None);
        assert_eq!((got.tokens, got.static_hot), (2, true));
        assert_eq!(got.version, b"3-ab-17");
        assert_eq!(got.shop, b"s\x00p");
        assert_eq!(got.auto_hot, Some(auto));
        assert_eq!(got.settings, b"global=30/7.5");
        assert!(got.peek);
        assert_eq!(got.max_wait_us, 250_000);
        for lane in Lane::ALL {
            let (a, b) = (got.buckets.get(lane), set.get(lane));
            assert_eq!(
                a.map(|x| (x.interval_us(), x.tolerance_us())),
                b.map(|x| (x.interval_us(), x.tolerance_us()))
            );
        }
        assert!(ReceivedCall::parse(&args[..24]).is_err());
        // A call of another contract's mark, in a form's count: refused as of the wrong arity.
        let mut other = args.clone();
        other[FORMS[call.form()].0 + args::CONTRACT] = b"f0";
        let e = ReceivedCall::parse(&other).unwrap_err();
        assert!(e.starts_with("wrong number of arguments"), "{e}");
        // A bucket whose µs would overflow the decision's arithmetic (a hand-built call; the
        // options allow 10 years to refill): refused, naming the lane and the values, never
        // decided (`room + max_wait` and `tokens * interval` wrapped: a full bucket denied,
        // 3 tokens taken from a bucket of 1).
        let g = FORMS[call.form()].0 + interval_arg(Lane::Global);
        for (i, t) in [
            (&b"1000"[..], &b"9223372036854775807"[..]),
            (b"4611686018427387904", b"9223372036854775807"),
            (b"1000", b"1152921504606846977"),
        ] {
            let mut huge = args.clone();
            (huge[g], huge[g + 1]) = (i, t);
            let e = ReceivedCall::parse(&huge).unwrap_err();
            assert!(
                e.starts_with("global: interval") && e.contains("not a bucket"),
                "{e}"
            );
        }
        // The largest tolerance a decision takes.
        let mut edge = args.clone();
        (edge[g], edge[g + 1]) = (b"1000", b"1152921504606846976");
        assert!(ReceivedCall::parse(&edge).is_ok());
    }

    proptest::proptest! {
        /// Every `auto_hot` its constructor accepts (what the option's parser ends in)
        /// reaches the server as one its decoder accepts, the same to the microsecond:
        /// the decoder validates what it reads (the script does not), so an option it
        /// refused would make every decision of that limiter an error on the module, and
        /// a decision on the script. (checkout-guard-config's `options::auto_hot` holds
        /// the option itself to the decoder.)
        #[test]
        fn every_auto_hot_the_constructor_accepts_is_decoded_as_sent(
            window_s in proptest::prop_oneof![
                proptest::strategy::Just(1.0f64),
                proptest::strategy::Just(3600.0f64),
                proptest::strategy::Just(1.000_000_000_1_f64),
                proptest::strategy::Just(3_599.999_999_9_f64),
                1.0..=3600.0f64,
            ],
            share in proptest::prop_oneof![
                proptest::strategy::Just(f64::MIN_POSITIVE),
                proptest::strategy::Just(5e-324f64),
                proptest::strategy::Just(1.0 - f64::EPSILON),
                f64::MIN_POSITIVE..1.0f64,
            ],
            ttl in 1..=crate::MAX_TTL_SECONDS,
            min_tokens in proptest::option::of(1..=1_000_000_000i64),
            interval_us in 1..=10_000_000i64,
        ) {
            // What the option's parser (checkout-guard-config) ends in: the window in
            // seconds as given, min_tokens by default 10% of what the global bucket
            // refills in one window (at least 1).
            let global = BucketSpec::new("global", 1000, 1e6 / interval_us as f64).unwrap();
            let min_tokens = min_tokens.unwrap_or_else(|| {
                ((global.refill_per_second() * window_s * 0.1).ceil() as i64).max(1)
            });
            let sent = AutoHot::new(
                std::time::Duration::from_secs_f64(window_s),
                share,
                ttl,
                min_tokens,
            )
            .unwrap();
            let buckets = BucketSet {
                global,
                hot_lane: None,
                hot_shop: None,
            };
            let keys = ShopKeys::new(&Keys::new("p"), b"s");
            let (lanes, auto_args) = (LaneArgs::new(&buckets), AutoHotArgs::new(Some(&sent)));
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &crate::cmd::decide::InFlightArgs::off(),
                lease_id: b"",
                adapt: &AdaptArgs::off(),
                keys: keys.decide_keys(),
                tokens: 1,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop: b"s",
                auto_hot: &auto_args,
                settings: "",
                peek: false,
                max_wait_us: 0,
            };
            let got = with_slices(&call, |args| ReceivedCall::parse(args).map(|c| c.auto_hot));
            proptest::prop_assert!(got.is_ok(), "{:?} refused: {:?}", sent, got);
            let got = got.unwrap().unwrap();
            proptest::prop_assert_eq!(got.window.as_micros(), sent.window.as_micros());
            proptest::prop_assert_eq!(
                (got.share, got.ttl_seconds, got.min_tokens),
                (sent.share, sent.ttl_seconds, sent.min_tokens)
            );
        }
    }

    /// A call whose `auto_hot` the options would refuse is refused, naming the part.
    #[test]
    fn a_received_auto_hot_is_validated_as_the_option_is() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 7.5).unwrap(),
            hot_lane: None,
            hot_shop: None,
        };
        let keys = ShopKeys::new(&Keys::new("n"), b"s");
        let lanes = LaneArgs::new(&set);
        // The longest form (adaptive on), its auto_hot inputs replaced.
        let adapt = AdaptArgs::new(Some(&AdaptParams {
            floor_permille: 100,
            recover_us: 1,
        }));
        let parse = |window_us: &str, share: &str, ttl: &str, min: &str| {
            let auto = AutoHotArgs::new(None);
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &crate::cmd::decide::InFlightArgs::off(),
                lease_id: b"",
                adapt: &adapt,
                keys: keys.decide_keys(),
                tokens: 1,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop: b"s",
                auto_hot: &auto,
                settings: "",
                peek: false,
                max_wait_us: 0,
            };
            let mut sent = to_vecs(&call);
            use args::*;
            for (at, v) in [
                (AUTO_HOT_WINDOW, window_us),
                (AUTO_HOT_SHARE, share),
                (AUTO_HOT_TTL, ttl),
                (AUTO_HOT_MIN_TOKENS, min),
            ] {
                sent[keys::LEN + at] = v.as_bytes().to_vec();
            }
            let args: Vec<&[u8]> = sent.iter().map(Vec::as_slice).collect();
            ReceivedCall::parse(&args).map(|c| c.auto_hot)
        };
        let ok = parse("1000000", "0.3", "60", "1").unwrap().unwrap();
        assert_eq!(
            ok,
            AutoHot::new(std::time::Duration::from_secs(1), 0.3, 60, 1).unwrap()
        );
        for (args, part) in [
            (("200000", "0.3", "60", "1"), "auto_hot.window_seconds"),
            (("3600000001", "0.3", "60", "1"), "auto_hot.window_seconds"),
            (("1000000", "1.5", "60", "1"), "auto_hot.share"),
            (("1000000", "0", "60", "1"), "auto_hot.share"),
            (("1000000", "0.3", "0", "1"), "auto_hot.ttl_seconds"),
            (("1000000", "0.3", "60", "0"), "auto_hot.min_tokens"),
        ] {
            let e = parse(args.0, args.1, args.2, args.3).unwrap_err();
            assert!(e.starts_with(part), "{args:?}: {e}");
        }
        // Off is off, whatever the other parts hold.
        assert_eq!(parse("0", "x", "y", "z"), Ok(None));
    }
}
