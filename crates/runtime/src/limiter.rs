use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::sync::{Mutex, RwLock};

use checkout_guard_model::adaptive::{LastThrottle, FULL, MAX_RETRY_AFTER_SECONDS};
use checkout_guard_model::live::{self, LiveLimits};
use checkout_guard_model::{
    lanes_in, reservation_wait_us, validate_max_wait, validate_shop_id, validate_tokens,
    validate_ttl, AdaptArgs, AutoHotArgs, BucketSet, ConfigError, DecideCall, DecideKeys,
    DecideReply, Decision, FeedbackCall, Keys, Lane, LaneArgs, LimiterError, LimiterOptions, Mode,
    OnUnavailable, StepReply,
};

use crate::clock::{Clock, SystemClock};
use crate::denials;
use crate::live_cache;
pub use crate::notices::{AdaptChange, AdaptWhy, LimitsChange, Notices};
use crate::store::{self, Store, StoreError, ValkeyStore};

/// A configured limiter: validated options plus everything per-call work can reuse.
/// Cheap to build; all limiters of a process share the pooled connections.
#[derive(Debug)]
pub struct Limiter {
    options: LimiterOptions,
    /// Where it decides: the pooled Valkey connection, or a test's store.
    store: Arc<dyn Store>,
    /// Where its time comes from (local denials' instants, a reservation's sleep): the
    /// system clock, or a test's fake clock.
    clock: Arc<dyn Clock>,
    keys: Keys,
    /// Per lane, the prefix of its local-denial keys (`<endpoint> {cg:<name>}:<lane>`),
    /// built once: the endpoint (URL with database, or cluster seeds) keeps limiters of
    /// the same name on other Valkeys apart.
    denial_tags: [Vec<u8>; 3],
    /// The prefix of the local entries that say whether a shop was hot (`<endpoint>
    /// {cg:<name>}:hot?`): a local denial must know which buckets apply.
    hot_status_tag: Vec<u8>,
    /// The buckets decided with: the constructor's, or live limits over them.
    in_force: RwLock<Arc<BucketsInForce>>,
    /// Keys and arguments of the script that do not change per call.
    global_key: Vec<u8>,
    hot_lane_key: Vec<u8>,
    limits_version_key: Vec<u8>,
    auto_hot_prefix: Vec<u8>,
    settings_key: Vec<u8>,
    auto_hot_args: AutoHotArgs,
    /// The adaptive budget's state key and the option as the decision takes it.
    adapt_key: Vec<u8>,
    adapt_args: AdaptArgs,
    /// What this limiter runs with, sent with every decision: the script publishes it for
    /// the CLI when the stored settings are missing (data loss, expiry) or differ.
    settings: String,
    /// [`live_cache::limiter_id`] of this limiter.
    live_id: u64,
    adapt_last_key: Vec<u8>,
    /// The adaptive budget as this process last saw it (replies, feedback), and the
    /// feedback calls that failed.
    adapt_seen: Mutex<AdaptSeen>,
}

/// The adaptive budget as this process last saw it: the share and pause of the last
/// reply that read the state (or the last feedback's), the last throttling answer it
/// reported, and its feedback calls that Valkey did not answer (never thrown: feedback
/// is reported after the provider answered, and must not fail a checkout).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdaptSeen {
    /// Permille (1000: the limits; 0: nothing seen yet, read as 1000).
    pub permille: i64,
    /// Until when the provider's pause holds (Valkey's clock, µs; 0: none).
    pub pause_until_us: i64,
    /// Valkey's `now` of the reply this was seen in (µs; 0: none).
    pub seen_at_us: i64,
    /// The last throttling answer this process reported.
    pub last: Option<LastThrottle>,
    /// Feedback calls that failed (connection, timeout, error reply), and the last error.
    pub feedback_errors: u64,
    pub last_feedback_error: Option<(String, SystemTime)>,
}

impl AdaptSeen {
    /// The share in force as last seen (0..=1).
    pub fn share(&self) -> f64 {
        if self.permille <= 0 {
            1.0
        } else {
            self.permille as f64 / FULL as f64
        }
    }
}

/// The adaptive budget for a readiness check ([`Limiter::adaptive_health`]).
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptHealth {
    /// The share in force (0..=1 of the limits).
    pub share: f64,
    /// Until when the provider's pause holds (Valkey's clock, Unix µs), if it does.
    pub paused_until_us: Option<i64>,
    /// The last throttling answer (any worker's when read from Valkey).
    pub last: Option<LastThrottle>,
    /// Read from Valkey now (else: what this process last saw).
    pub from_valkey: bool,
    /// Why it could not be read from Valkey.
    pub read_error: Option<String>,
    pub feedback_errors: u64,
    pub last_feedback_error: Option<(String, SystemTime)>,
}

/// Unix µs of a wall-clock instant.
fn wall_us(t: SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The buckets in force and what each call derives from them.
#[derive(Debug)]
struct BucketsInForce {
    /// The live limits' version these buckets come from (empty: none stored).
    version: Vec<u8>,
    /// The buckets, and their ARGV formatted once.
    lane_args: LaneArgs,
    /// The local-denial key of the global bucket (the same for every shop).
    global_denial_key: u64,
    /// The local-denial key of the hot lane (shared by every hot shop, like global's).
    hot_lane_denial_key: u64,
    /// The mode set live (`limiter set mode=...`), over the `mode` option; None: the option's.
    mode: Option<Mode>,
    /// The hot-shop bucket's local-denial tag: the limiter's, with this version.
    hot_shop_tag: Vec<u8>,
}

impl BucketsInForce {
    fn buckets(&self) -> &BucketSet {
        self.lane_args.buckets()
    }

    /// The buckets for `live` over `base`, the constructor's (`base` alone when there are
    /// no live limits, or when they are invalid for this limiter: then the error too).
    fn new(
        base: &BucketSet,
        denial_tags: &[Vec<u8>; 3],
        live: Option<&LiveLimits>,
    ) -> (Self, Option<String>) {
        let (version, applied) = match live {
            None => (Vec::new(), Ok(base.clone())),
            Some(l) => (l.id.clone(), l.apply(base)),
        };
        let (buckets, error) = match applied {
            Ok(b) => (b, None),
            Err(e) => (base.clone(), Some(e.to_string())),
        };
        let lane_args = LaneArgs::new(&buckets);
        // A valid live mode holds even over buckets invalid for this limiter: the kill
        // switch works whatever else is stored.
        let mode = live.and_then(|l| l.mode);
        // Local denials are kept per live version: a sibling worker (the table is shared)
        // that has not decided since a change must not deny from entries learnt under it
        // (in the mode it no longer is in: it would keep refusing after `set mode=shadow`
        // for as long as the workers that know refreshed them). Its own entries from
        // before the change end within 250 ms, then it asks Valkey and learns the change.
        let tags = denial_tags.clone().map(|mut t| {
            t.extend_from_slice(b" v");
            t.extend_from_slice(&version);
            t
        });
        let mut in_force = Self {
            version,
            lane_args,
            global_denial_key: 0,
            hot_lane_denial_key: 0,
            mode,
            hot_shop_tag: Vec::new(),
        };
        in_force.global_denial_key = in_force.hashed_denial_key(&tags, Lane::Global, b"");
        in_force.hot_lane_denial_key = in_force.hashed_denial_key(&tags, Lane::HotLane, b"");
        let [_, _, hot_shop_tag] = tags;
        in_force.hot_shop_tag = hot_shop_tag;
        (in_force, error)
    }

    /// The local-denial key of `shop`'s own hot-shop bucket.
    fn hot_shop_denial_key(&self, shop: &[u8]) -> u64 {
        let (interval, tolerance) = self
            .buckets()
            .get(Lane::HotShop)
            .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
        denials::key(&self.hot_shop_tag, shop, interval, tolerance)
    }

    /// The local-denial key of one bucket as `shop` sees it: the global bucket and the hot
    /// lane are shared (every reply that applied them teaches every shop, so one hot shop
    /// sees what another took from the lane); the hot-shop bucket is the shop's own.
    /// Whether the hot buckets apply to a shop is its hot-status entry's to say.
    fn hashed_denial_key(&self, denial_tags: &[Vec<u8>; 3], lane: Lane, shop: &[u8]) -> u64 {
        let (interval, tolerance) = self
            .buckets()
            .get(lane)
            .map_or((0, 0), |b| (b.interval_us(), b.tolerance_us()));
        let shop = if lane == Lane::HotShop {
            shop
        } else {
            &b""[..]
        };
        denials::key(&denial_tags[lane as usize], shop, interval, tolerance)
    }
}

impl Limiter {
    /// A limiter deciding on the process's pooled connection to `options.endpoint`, on
    /// the system clock.
    pub fn new(options: LimiterOptions) -> Self {
        let store = ValkeyStore::new(
            options.endpoint.clone(),
            options.timeout,
            options.retry_interval,
            options.engine,
        );
        Self::with_store(options, Arc::new(store), Arc::new(SystemClock))
    }

    /// A limiter deciding against `store` on `clock` (tests use a `store::MemoryStore` and
    /// a `clock::FakeClock` that the store follows too).
    pub fn with_store(
        options: LimiterOptions,
        store: Arc<dyn Store>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let keys = Keys::new(&options.name);
        let endpoint = options.endpoint.display_url().as_bytes();
        let denial_tags = Lane::ALL.map(|lane| {
            [
                endpoint,
                b" ",
                keys.hash_tag(),
                b":",
                lane.as_str().as_bytes(),
            ]
            .concat()
        });
        let hot_status_tag = [endpoint, b" ", keys.hash_tag(), b":hot?"].concat();
        let auto_hot_args = AutoHotArgs::new(options.auto_hot.as_ref());
        let adapt_args = AdaptArgs::new(options.adaptive.as_ref().map(|a| a.params()).as_ref());
        let settings = live::PublishedSettings::encode_all(
            &options.buckets,
            options.auto_hot.as_ref(),
            options.adaptive.as_ref(),
            options.mode,
        );
        let live_id = live_cache::limiter_id(options.endpoint.display_url(), &options.name);
        let known = live_cache::known(live_id);
        let in_force = BucketsInForce::new(&options.buckets, &denial_tags, known.as_deref()).0;
        Self {
            global_key: keys.global(),
            hot_lane_key: keys.hot_lane(),
            limits_version_key: keys.limits_version(),
            auto_hot_prefix: keys.auto_hot_prefix(),
            settings_key: keys.settings(),
            adapt_key: keys.adapt(),
            adapt_last_key: keys.adapt_last(),
            adapt_seen: Mutex::new(AdaptSeen::default()),
            adapt_args,
            keys,
            store,
            clock,
            denial_tags,
            hot_status_tag,
            in_force: RwLock::new(Arc::new(in_force)),
            auto_hot_args,
            live_id,
            settings,
            options,
        }
    }

    /// The buckets for `live` over the constructor's (see [`BucketsInForce::new`]).
    fn in_force_with(&self, live: Option<&LiveLimits>) -> (BucketsInForce, Option<String>) {
        BucketsInForce::new(&self.options.buckets, &self.denial_tags, live)
    }

    /// The buckets in force: the newest live limits this process knows of.
    fn current(&self) -> Arc<BucketsInForce> {
        let in_force = self.in_force.read().clone();
        let known = live_cache::known(self.live_id);
        match known {
            Some(l) if l.id != in_force.version => {
                let fresh = Arc::new(self.in_force_with(Some(&l)).0);
                *self.in_force.write() = fresh.clone();
                fresh
            }
            _ => in_force,
        }
    }

    /// Reads the stored live limits after the script said they changed: one round trip,
    /// only then (version and hash read together, so they cannot disagree). Returns the buckets now in force and the change to report.
    fn reload(
        &self,
        old: &BucketsInForce,
    ) -> Result<(Arc<BucketsInForce>, LimitsChange), StoreError> {
        let stored = self.store.read_limits(&self.keys)?;
        let (live, parse_error) = match stored.parse() {
            (l, errors) if errors.is_empty() => (l, None),
            // Unreadable: the constructor's values at this version, so that the next call
            // is not sent back again.
            (l, errors) => (
                LiveLimits {
                    version: live::version_number(&stored.version),
                    id: stored.version.clone(),
                    mode: l.mode,
                    ..Default::default()
                },
                Some(format!(
                    "stored live limits unreadable: {}",
                    errors.join("; ")
                )),
            ),
        };
        let (in_force, apply_error) = self.in_force_with(Some(&live));
        let change = LimitsChange {
            old_mode: old.mode.unwrap_or(self.options.mode),
            mode: in_force.mode.unwrap_or(self.options.mode),
            version: live.version,
            by: live.by.clone(),
            at_ms: live.at_ms,
            old: live::describe(old.buckets()),
            new: live::describe(in_force.buckets()),
            error: parse_error.or(apply_error),
        };
        live_cache::remember(self.live_id, Arc::new(live));
        let in_force = Arc::new(in_force);
        *self.in_force.write() = in_force.clone();
        Ok((in_force, change))
    }

    fn denial_key(&self, in_force: &BucketsInForce, lane: Lane, shop: &[u8]) -> u64 {
        match lane {
            Lane::Global => in_force.global_denial_key,
            Lane::HotLane => in_force.hot_lane_denial_key,
            Lane::HotShop => in_force.hot_shop_denial_key(shop),
        }
    }

    /// The local-denial keys of the configured buckets for `shop`, computed once per
    /// acquire and used both to check and to learn.
    fn denial_keys(&self, in_force: &BucketsInForce, shop: &[u8]) -> [Option<u64>; 3] {
        Lane::ALL.map(|lane| {
            in_force
                .buckets()
                .get(lane)
                .map(|_| self.denial_key(in_force, lane, shop))
        })
    }

    /// The local entry saying whether `shop` was hot at the last reply about it.
    fn hot_status_key(&self, shop: &[u8]) -> u64 {
        denials::key(&self.hot_status_tag, shop, 0, 0)
    }

    /// The flood fast path: a denial Valkey is certain to make, made here (`denials.rs`),
    /// with the reason, remaining tokens and a retry time Valkey would give. Only when
    /// every bucket that applies is known: the global one, and for a hot shop its hot
    /// buckets; a shop not listed in `hot_shops` is taken as hot or not as the last reply
    /// about it found it, for no longer than `MAX_LOCAL_DENIAL_NS` or than its mark.
    fn deny_locally(
        &self,
        in_force: &BucketsInForce,
        keys: &[Option<u64>; 3],
        tokens: i64,
        static_hot: bool,
        shop: &[u8],
        max_wait_us: i64,
    ) -> Option<Decision> {
        let now = self.clock.monotonic_ns();
        let entries = keys.map(|k| k.and_then(|k| denials::lookup(k, now)));
        entries[Lane::Global as usize]?;
        let hot = static_hot || denials::lookup(self.hot_status_key(shop), now)?.base == 1;
        let lanes = Lane::ALL
            .into_iter()
            .filter(|&l| l == Lane::Global || (hot && keys[l as usize].is_some()));
        let n = tokens as u64;
        let mut reason = None;
        let mut remaining = i64::MAX;
        let mut wait = 0;
        let max_wait_ns = max_wait_us as u64 * 1000;
        for lane in lanes {
            let (Some(e), Some(spec)) = (entries[lane as usize], in_force.buckets().get(lane))
            else {
                return None;
            };
            if reason.is_none() && e.lacks_within(n, now, spec.capacity(), max_wait_ns) {
                reason = Some(lane);
            }
            remaining = remaining.min(e.whole_tokens(now, spec.capacity()));
            wait = wait.max(e.certain_wait(n, now, spec.capacity()));
        }
        let lane = reason?;
        // Whole microseconds, rounded up: never early.
        let retry_us = wait.div_ceil(1000);
        Some(Decision::local_denial(
            lane,
            retry_us as f64 / 1e6,
            remaining,
            hot,
        ))
    }

    /// Remembers what a reply proved, for every bucket it applied: the local instant at
    /// which it held no token, and the round trip (see `denials.rs` for the mapping).
    /// What was learnt from the hot buckets of a shop hot by a mark ends with the mark.
    fn learn(
        &self,
        in_force: &BucketsInForce,
        keys: &[Option<u64>; 3],
        shop: &[u8],
        reply: &StepReply,
        sent_ns: u64,
    ) {
        let received = self.clock.monotonic_ns();
        let rtt = received.saturating_sub(sent_ns);
        // The mark's TTL was read at the script's start, no later than Valkey's `now`
        // (itself read after `sent`); a 2 ms margin covers the rounding to milliseconds.
        let mark_end = match reply.mark_ttl_ms {
            ms if ms < 0 => u64::MAX,
            ms => sent_ns.saturating_add((ms.max(2) as u64 - 2) * 1_000_000),
        };
        if !self.is_statically_hot(shop) {
            // Whether the shop was hot: a local denial needs it to know which buckets
            // apply. A shop made hot by auto_hot in this very call is hot from now on.
            let status = self.hot_status_key(shop);
            if reply.became_hot {
                denials::forget(status, received);
            } else {
                let hot = denials::Entry {
                    base: reply.hot as u64,
                    interval: 0,
                    rtt: 0,
                };
                denials::record(status, hot, sent_ns, mark_end, received);
            }
        }
        // Decided below the limits (the adaptive share) or denied by the provider's pause:
        // the reply's TATs are those of the scaled buckets, and an entry read with the
        // unscaled interval and capacity would count tokens Valkey does not have (and be
        // keyed as the full buckets). We skip learning rather than scale: scaling would
        // key the table by a share that changes at every decision while the budget
        // climbs back. What this host learnt at the full share is forgotten too (a local
        // denial needs the global entry): its retry time would be the full rate's,
        // earlier than Valkey's. So while the budget is adapted every call asks Valkey
        // (the flood fast path is off), and the workers' answers are Valkey's exactly.
        if reply.adapt_permille < FULL || reply.provider {
            for key in keys.iter().flatten() {
                denials::forget(*key, received);
            }
            return;
        }
        for lane in lanes_in(reply) {
            let (Some(spec), Some(key)) = (in_force.buckets().get(lane), keys[lane as usize])
            else {
                continue;
            };
            let tat = reply.tats[lane as usize];
            // Local ns at which the bucket was empty: sent + (tat - tolerance - now_valkey).
            let offset_ns = (tat - spec.tolerance_us() - reply.now_us).saturating_mul(1000);
            let base = (sent_ns as i64).saturating_add(offset_ns).max(0) as u64;
            let entry = denials::Entry {
                base,
                interval: spec.interval_us() as u64 * 1000,
                rtt,
            };
            let valid_until = if lane == Lane::Global {
                u64::MAX
            } else {
                mark_end
            };
            denials::record(key, entry, sent_ns, valid_until, received);
        }
    }

    pub fn options(&self) -> &LimiterOptions {
        &self.options
    }

    /// The mode in force: the live one this process knows of (`limiter set mode=...`),
    /// else the `mode` option's.
    pub fn mode(&self) -> Mode {
        self.mode_in(&self.current())
    }

    fn mode_in(&self, in_force: &BucketsInForce) -> Mode {
        in_force.mode.unwrap_or(self.options.mode)
    }

    /// `d` as the mode in force answers it: as it is when enforcing; in shadow mode let
    /// through, saying what enforcement answered (a reservation's wait, not slept, as its
    /// retry_after).
    fn in_mode(&self, in_force: &BucketsInForce, d: Decision, reservation_wait_s: f64) -> Decision {
        match self.mode_in(in_force) {
            Mode::Enforce => d,
            Mode::Shadow => d.into_shadow(reservation_wait_s),
        }
    }

    /// Whether `shop` is listed in the `hot_shops` option (no Valkey needed).
    pub fn is_statically_hot(&self, shop: &[u8]) -> bool {
        self.options.hot_shops.contains(shop)
    }

    /// One decision for `tokens` tokens of `shop`: one script call, one round trip.
    /// When Valkey cannot be asked, `on_unavailable` decides (or the error is returned
    /// for "throw").
    pub fn acquire(&self, shop: &[u8], tokens: i64) -> Result<Decision, LimiterError> {
        self.acquire_noticed(shop, tokens).map(|(d, _)| d)
    }

    /// [`Self::acquire`], and what it learnt on the way (a shop made hot by `auto_hot`,
    /// new live limits), for telemetry. A change of live limits costs one round trip
    /// more, in the one call that finds it.
    pub fn acquire_noticed(
        &self,
        shop: &[u8],
        tokens: i64,
    ) -> Result<(Decision, Notices), LimiterError> {
        self.acquire_or_peek(shop, tokens, false, 0)
    }

    /// A reservation: [`Self::acquire`] where tokens that every bucket holds within
    /// `max_wait_seconds` (0 to 10) are taken now, and the call sleeps until they are
    /// there (`Decision::waited`). When they would come later, a denial that takes
    /// nothing, as [`Self::acquire`]'s. 0 is exactly [`Self::acquire`].
    pub fn acquire_within(
        &self,
        shop: &[u8],
        tokens: i64,
        max_wait_seconds: f64,
    ) -> Result<(Decision, Notices), LimiterError> {
        let max_wait_us = validate_max_wait(max_wait_seconds)?;
        self.acquire_or_peek(shop, tokens, false, max_wait_us)
    }

    /// What [`Self::acquire`] would answer now, taking nothing: the same decision (the same
    /// script or command, the same local denials, `on_unavailable` when Valkey cannot be
    /// asked), with nothing written in Valkey and nothing learnt by this worker (a peek's
    /// reply describes tokens it did not take).
    pub fn peek(&self, shop: &[u8], tokens: i64) -> Result<Decision, LimiterError> {
        self.peek_noticed(shop, tokens).map(|(d, _)| d)
    }

    /// [`Self::peek`], and the new live limits it found on the way: this worker decides
    /// with them from now on, so the change is the worker's to report (no acquire() after
    /// it will find it new). A peek never makes a shop hot.
    pub fn peek_noticed(
        &self,
        shop: &[u8],
        tokens: i64,
    ) -> Result<(Decision, Notices), LimiterError> {
        self.acquire_or_peek(shop, tokens, true, 0)
    }

    /// The one path of [`Self::acquire_noticed`], [`Self::acquire_within`] and
    /// [`Self::peek_noticed`]: local denials, the decision (taking nothing when `peek`),
    /// reloading live limits, the reservation's sleep, `on_unavailable`.
    fn acquire_or_peek(
        &self,
        shop: &[u8],
        tokens: i64,
        peek: bool,
        max_wait_us: i64,
    ) -> Result<(Decision, Notices), LimiterError> {
        validate_shop_id(shop)?;
        // Checked against the constructor's buckets: misuse is the caller's, and no live
        // change may turn into an exception in checkout code. A request more than a live
        // limit can hold is denied by that bucket (with a finite retryAfter).
        validate_tokens(tokens, &self.options.buckets)?;
        let mut in_force = self.current();
        let static_hot = self.is_statically_hot(shop);
        let mut notices = Notices::default();
        // With the fast path off, no key is hashed and nothing is learnt.
        let mut denial_keys = self
            .options
            .local_denials
            .then(|| self.denial_keys(&in_force, shop));
        if let Some(keys) = &denial_keys {
            if let Some(d) =
                self.deny_locally(&in_force, keys, tokens, static_hot, shop, max_wait_us)
            {
                return Ok((self.in_mode(&in_force, d, 0.0), notices));
            }
        }
        let hot_shop_key = self.keys.hot_shop(shop);
        let hot_flag_key = self.keys.hot_flag(shop);
        let mut failure = None;
        for _attempt in 0..3 {
            let sent_ns = self.clock.monotonic_ns();
            let call = DecideCall {
                keys: DecideKeys {
                    global: &self.global_key,
                    hot_lane: &self.hot_lane_key,
                    hot_shop: &hot_shop_key,
                    hot_flag: &hot_flag_key,
                    limits_version: &self.limits_version_key,
                    auto_hot_prefix: &self.auto_hot_prefix,
                    settings: &self.settings_key,
                    adapt: &self.adapt_key,
                },
                tokens,
                static_hot,
                lanes: &in_force.lane_args,
                version: &in_force.version,
                shop,
                auto_hot: &self.auto_hot_args,
                adapt: &self.adapt_args,
                settings: &self.settings,
                peek,
                max_wait_us,
            };
            let result = self
                .store
                .decide(&call)
                .and_then(|ints| DecideCall::decode_reply(&ints).map_err(Self::bad_reply));
            match result {
                Ok(DecideReply::LimitsChanged) => {
                    // The live limits changed: read them, decide again with them.
                    match self.reload(&in_force) {
                        Ok((fresh, change)) => {
                            in_force = fresh;
                            notices.limits_change = Some(change);
                            if self.options.local_denials {
                                denial_keys = Some(self.denial_keys(&in_force, shop));
                            }
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
                Ok(DecideReply::Decided(reply)) => {
                    if let (Some(keys), false) = (&denial_keys, peek) {
                        self.learn(&in_force, keys, shop, &reply, sent_ns);
                    }
                    if reply.became_hot {
                        notices.became_hot = Some(reply.share_permille as f64 / 1000.0);
                    }
                    if !peek {
                        notices.adapt = self.saw_reply(&reply);
                    }
                    let mut d = Decision::from_reply(in_force.buckets(), tokens, &reply);
                    // A reservation: the tokens are the caller's once every bucket holds
                    // them. Waited from the reply's arrival, no earlier than Valkey's
                    // `now` (read before it), so never early. In shadow mode taken the
                    // same, but never slept: the decision says what it would have waited.
                    let mut unslept = 0.0;
                    if d.allowed && max_wait_us > 0 {
                        let wait_us = reservation_wait_us(in_force.buckets(), &reply);
                        if wait_us > 0 {
                            let wait = Duration::from_micros(wait_us as u64);
                            match self.mode_in(&in_force) {
                                Mode::Enforce => d.waited = self.clock.sleep(wait).as_secs_f64(),
                                Mode::Shadow => unslept = wait.as_secs_f64(),
                            }
                        }
                    }
                    return Ok((self.in_mode(&in_force, d, unslept), notices));
                }
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let failure = failure.unwrap_or_else(|| StoreError::Failed {
            cause: "live limits kept changing during the call".into(),
            retry_in: Duration::ZERO,
        });
        // The real back-off: after a failed connection, the time until Valkey is tried
        // again; after an error reply (Valkey answered), none: the next call asks again.
        let retry = failure.retry_in();
        if self.options.on_unavailable != OnUnavailable::Throw {
            // Failing open (or closed) is said in the log, at most once a minute per cause.
            self.say_unavailable(&failure);
        }
        // In shadow mode `deny` is reported (wouldAllow false) and let through; `throw`
        // still throws: the mode changes what isAllowed() answers, never the control flow.
        let d = match self.options.on_unavailable {
            OnUnavailable::Allow => Decision::unavailable(true, 0.0, static_hot),
            OnUnavailable::Deny => Decision::unavailable(false, retry.as_secs_f64(), static_hot),
            OnUnavailable::Throw => return Err(self.unavailable(failure)),
        };
        Ok((self.in_mode(&in_force, d, 0.0), notices))
    }

    /// Records the adaptive share and pause a decision's reply carried; returns the
    /// recovery to report when this decision found the budget back at the limits.
    fn saw_reply(&self, reply: &StepReply) -> Option<AdaptChange> {
        self.options.adaptive.as_ref()?;
        let mut seen = self.adapt_seen.lock();
        let before = seen.share();
        let (permille, pause) = if reply.adapt_seen {
            (reply.adapt_permille, reply.pause_until_us)
        } else {
            (FULL, 0)
        };
        seen.permille = permille;
        seen.pause_until_us = pause;
        seen.seen_at_us = reply.now_us;
        reply.recovered().then_some(AdaptChange {
            why: AdaptWhy::Recovered,
            from: before,
            to: 1.0,
            status: None,
            retry_after: None,
            paused_until_ms: None,
        })
    }

    /// What the provider answered to a call this limiter admitted for `shop`: `status`,
    /// and its `Retry-After` in seconds (None or 0: none; INF or anything beyond
    /// [`MAX_RETRY_AFTER_SECONDS`] reads as that, the longest pause). Without the `adaptive`
    /// option, or for a status that is not one of its `statuses` (a success), nothing
    /// is sent; a throttling answer is one call of the feedback script. Returns what
    /// changed (for `RateLimitAdapt` events). Bad arguments are errors naming them; a
    /// Valkey that cannot be asked is not: counted and kept for `health()`, nothing
    /// changes.
    pub fn feedback(
        &self,
        shop: &[u8],
        status: i64,
        retry_after_seconds: Option<f64>,
    ) -> Result<Vec<AdaptChange>, LimiterError> {
        validate_shop_id(shop)?;
        if !(100..=599).contains(&status) {
            return Err(ConfigError::new(
                "statusCode",
                format!("must be an HTTP status code from 100 to 599, got {status}"),
            )
            .into());
        }
        let retry_after = retry_after_seconds.unwrap_or(0.0);
        if retry_after.is_nan() || retry_after < 0.0 {
            return Err(ConfigError::new(
                "retryAfterSeconds",
                format!(
                    "must be a number of seconds, 0 or more (INF: the longest pause), got {retry_after:?}"
                ),
            )
            .into());
        }
        // A huge Retry-After (INF: PHP's reading of 309 digits or more) asks for a long
        // pause: the longest one, as any value beyond MAX_PAUSE_US; reported finite.
        let retry_after = retry_after.min(MAX_RETRY_AFTER_SECONDS);
        let Some(adaptive) = &self.options.adaptive else {
            return Ok(Vec::new());
        };
        if !adaptive.throttles(status) {
            return Ok(Vec::new());
        }
        // Whole µs, at least 1 for any positive value; beyond the longest pause the
        // script bounds it anyway.
        let retry_after_us = if retry_after > 0.0 {
            ((retry_after * 1e6).ceil()).min(i64::MAX as f64 / 2.0) as i64
        } else {
            0
        };
        let call = FeedbackCall {
            adapt_key: &self.adapt_key,
            last_key: &self.adapt_last_key,
            status,
            decrease: adaptive.decrease,
            params: adaptive.params(),
            retry_after_us,
        };
        let result = self
            .store
            .feedback(&call)
            .and_then(|ints| FeedbackCall::decode_reply(&ints).map_err(Self::bad_reply));
        let out = match result {
            Ok(out) => out,
            Err(e) => {
                let mut seen = self.adapt_seen.lock();
                seen.feedback_errors += 1;
                seen.last_feedback_error = Some((e.to_string(), self.clock.wall()));
                return Ok(Vec::new());
            }
        };
        let mut seen = self.adapt_seen.lock();
        seen.permille = out.to;
        seen.pause_until_us = out.pause_until;
        seen.seen_at_us = out.now;
        seen.last = Some(LastThrottle {
            status,
            at_us: out.now,
            retry_after_us,
        });
        drop(seen);
        if out.decreased || out.paused {
            // Local denials learnt at the old share would answer with its retry times
            // (see `learn`): the next call of this host asks Valkey.
            let in_force = self.current();
            let now = self.clock.monotonic_ns();
            denials::forget(in_force.global_denial_key, now);
            denials::forget(in_force.hot_lane_denial_key, now);
        }
        let share = |p: i64| p as f64 / FULL as f64;
        let paused_until_ms = (out.pause_until > out.now).then(|| out.pause_until.div_euclid(1000));
        let retry_after = (retry_after > 0.0).then_some(retry_after);
        let mut changes = Vec::new();
        if out.decreased && out.to != out.from {
            changes.push(AdaptChange {
                why: AdaptWhy::Throttled,
                from: share(out.from),
                to: share(out.to),
                status: Some(status),
                retry_after,
                paused_until_ms,
            });
        }
        if out.paused {
            changes.push(AdaptChange {
                why: AdaptWhy::RetryAfter,
                from: share(out.to),
                to: share(out.to),
                status: Some(status),
                retry_after,
                paused_until_ms,
            });
        }
        Ok(changes)
    }

    /// The adaptive budget for `health()` (None: the option is off): with `ping`, read
    /// from Valkey (the state and the last throttling answer, one read-only call within
    /// the timeout; during a back-off or when it fails, what this process last saw);
    /// without, what this process last saw. Never an error.
    pub fn adaptive_health(&self, ping: bool) -> Option<AdaptHealth> {
        let adaptive = self.options.adaptive.as_ref()?;
        let seen = self.adapt_seen.lock().clone();
        let mut h = AdaptHealth {
            share: seen.share(),
            // Still ahead on this host's clock (Valkey's may differ by the hosts' skew).
            paused_until_us: (seen.pause_until_us > wall_us(self.clock.wall()))
                .then_some(seen.pause_until_us),
            last: seen.last,
            from_valkey: false,
            read_error: None,
            feedback_errors: seen.feedback_errors,
            last_feedback_error: seen.last_feedback_error.clone(),
        };
        if !ping {
            return Some(h);
        }
        match self.store.read_adapt(&self.adapt_key, &self.adapt_last_key) {
            Ok((state, last, now)) => {
                let params = adaptive.params();
                let state =
                    checkout_guard_model::adaptive::AdaptState::read_like_the_script(&state);
                h.share = state.map_or(1.0, |s| s.permille_at(now, &params) as f64 / FULL as f64);
                h.paused_until_us = state.filter(|s| s.paused_at(now)).map(|s| s.pause_until);
                h.last = LastThrottle::parse(&last).or(h.last);
                h.from_valkey = true;
            }
            Err(e) => h.read_error = Some(e.to_string()),
        }
        Some(h)
    }

    /// The adaptive budget as this process last saw it (None: the option is off).
    pub fn adapt_seen(&self) -> Option<AdaptSeen> {
        self.options.adaptive.as_ref()?;
        Some(self.adapt_seen.lock().clone())
    }

    /// Marks `shop` hot for every worker at once until `ttl_seconds` run out.
    pub fn mark_hot(&self, shop: &[u8], ttl_seconds: i64) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        validate_ttl(ttl_seconds)?;
        let key = self.keys.hot_flag(shop);
        self.store
            .mark_hot(&key, ttl_seconds)
            .map_err(|e| self.unavailable(e))?;
        // The shop's hot buckets apply from now on: this host no longer knows its state.
        denials::forget(self.hot_status_key(shop), self.clock.monotonic_ns());
        Ok(())
    }

    /// Ends a `markHot()` early. Shops listed in `hot_shops` stay hot.
    pub fn unmark_hot(&self, shop: &[u8]) -> Result<(), LimiterError> {
        validate_shop_id(shop)?;
        let key = self.keys.hot_flag(shop);
        self.store
            .unmark_hot(&key)
            .map_err(|e| self.unavailable(e))?;
        // The shop's hot buckets no longer apply: forget what this host knew of them.
        let in_force = self.current();
        let now = self.clock.monotonic_ns();
        denials::forget(self.hot_status_key(shop), now);
        denials::forget(self.denial_key(&in_force, Lane::HotShop, shop), now);
        Ok(())
    }

    /// Whether `shop` is hot: listed in `hot_shops`, or marked and not yet expired.
    pub fn is_hot(&self, shop: &[u8]) -> Result<bool, LimiterError> {
        validate_shop_id(shop)?;
        if self.is_statically_hot(shop) {
            return Ok(true);
        }
        let key = self.keys.hot_flag(shop);
        self.store.exists(&key).map_err(|e| self.unavailable(e))
    }

    /// Forgets every bucket of this limiter (all full again). Hot marks are kept.
    /// In steps routed by the limiter's hash tag (see [`Store::reset`]).
    pub fn reset(&self) -> Result<(), LimiterError> {
        self.store
            .reset(&self.global_key, &self.keys.bucket_pattern())
            .map_err(|e| self.unavailable(e))?;
        // Every bucket is full again: nothing this host knew still holds.
        denials::forget_all(self.clock.monotonic_ns());
        Ok(())
    }

    /// The state of this limiter's pooled connection; with `ping`, after one PING over it
    /// (no new connection per check, none during the back-off).
    pub fn health(&self, ping: bool) -> store::Health {
        self.store.health(ping, &self.global_key)
    }

    /// A reply outside the script's contract: Valkey answered, so no back-off.
    fn bad_reply(cause: String) -> StoreError {
        StoreError::Failed {
            cause,
            retry_in: Duration::ZERO,
        }
    }

    /// Says in PHP's error log (through `warn_log`: at most once a minute per limiter,
    /// Valkey and cause) that decisions follow the `on_unavailable` policy, why, and which
    /// setting to check.
    fn say_unavailable(&self, failure: &StoreError) {
        let (StoreError::Backoff { cause, .. } | StoreError::Failed { cause, .. }) = failure;
        let url = self.options.endpoint.display_url();
        let now_ns = self.clock.monotonic_ns();
        crate::warn_log::warn(&["valkey", &self.options.name, url], cause, now_ns, || {
            // No back-off after a failure: Valkey answered, but not with a decision.
            let what = match failure {
                StoreError::Failed { retry_in, .. } if retry_in.is_zero() => "got no decision from",
                _ => "cannot reach",
            };
            let policy = match self.options.on_unavailable {
                OnUnavailable::Allow => "allow (checkouts pass, unlimited)",
                OnUnavailable::Deny => "deny (checkouts are refused)",
                OnUnavailable::Throw => "throw",
            };
            format!(
                "PHP Warning:  checkout_guard: limiter '{}' {what} Valkey at {url} ({cause}); \
                 decisions follow on_unavailable={policy} meanwhile; check checkout_guard.url / \
                 the limiter's url option (said at most once a minute per cause; health() and \
                 Telemetry::stats() count them)",
                self.options.name
            )
        });
    }

    fn unavailable(&self, e: StoreError) -> LimiterError {
        LimiterError::Unavailable {
            url: self.options.endpoint.display_url().to_string(),
            cause: e.to_string(),
        }
    }
}
