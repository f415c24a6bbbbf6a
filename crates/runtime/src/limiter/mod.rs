//! A limiter: one decision per call over a [`Store`] (acquire, a reservation, peek), with
//! `on_unavailable` when Valkey cannot be asked. Its other concerns, each in its file:
//! - [`live`]: the buckets in force and reloading live limits when the script says they
//!   changed;
//! - [`local_denials`]: the flood fast path's keys, the local denial and what a reply
//!   teaches the table (`crate::denials`);
//! - [`adaptive`]: the adaptive budget as this process sees it, `feedback()` and its
//!   health;
//! - [`admin`]: marking shops hot, reset, health.
//!
//! What a decision notices for telemetry is `crate::notices`'s.

mod adaptive;
mod admin;
mod leases;
mod live;
mod local_denials;

pub use crate::notices::{AdaptChange, AdaptWhy, LimitsChange, Notices};
pub use adaptive::{AdaptHealth, AdaptSeen};
pub use leases::{pending_releases, retry_pending_releases, LeaseCounts, LeaseCountsSeen};
use live::BucketsInForce;

use std::sync::Arc;
use std::time::Duration;

use crate::sync::{Mutex, RwLock};

use checkout_guard_config::live::PublishedSettings;
use checkout_guard_config::value::quote_bytes;
use checkout_guard_config::{
    validate_max_wait, validate_shop_id, validate_tokens, LimiterOptions, Mode, OnUnavailable,
};
use checkout_guard_model::cmd::decide::EndpointArgs;
use checkout_guard_model::{
    reservation_wait_with, AdaptArgs, AutoHotArgs, ConfigError, DecideCall, DecideKeys,
    DecideReply, Decision, Keys, Lane, LimiterError, Reason,
};

/// What a call names beside its shop (issue 42, docs/endpoints.md): the endpoint whose
/// bucket it also draws from, and its priority class (`None`: the limiter's
/// `default_priority`, or none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Route<'a> {
    pub endpoint: Option<&'a [u8]>,
    pub priority: Option<&'a [u8]>,
}

use crate::clock::{Clock, SystemClock};
use crate::live_cache;
use crate::store::{Store, StoreError, ValkeyStore};

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
    /// The lease sets of the global level and the hot lane, and the lease stats hash.
    lease_keys: [Vec<u8>; 2],
    lease_stats_key: Vec<u8>,
    /// What became of the leases this process took.
    lease_counts: Arc<LeaseCounts>,
    /// Leases of decisions whose outcome is unknown, not yet released.
    unknown_leases: Mutex<std::collections::HashSet<u64>>,
    /// This limiter's live counters, found once (`metrics`).
    series: crate::metrics::LimiterSeries,
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
        let settings = PublishedSettings::encode_with_in_flight(
            &options.buckets,
            options.auto_hot.as_ref(),
            options.adaptive.as_ref(),
            options.mode,
            options.in_flight.as_ref(),
        ) + &checkout_guard_config::live::describe_routes(
            &options.endpoints,
            options.priorities.as_ref(),
        );
        let live_id = live_cache::limiter_id(options.endpoint.display_url(), &options.name);
        let known = live_cache::known(live_id);
        let base = live::Base {
            buckets: &options.buckets,
            in_flight: options.in_flight.as_ref(),
            endpoints: &options.endpoints,
            priorities: options.priorities.as_ref(),
            keys: &keys,
        };
        let in_force = BucketsInForce::new(&base, &denial_tags, known.as_deref()).0;
        Self {
            lease_keys: [
                keys.leases(Lane::Global, b""),
                keys.leases(Lane::HotLane, b""),
            ],
            lease_stats_key: keys.lease_stats(),
            lease_counts: leases::counts_for(live_id),
            unknown_leases: Mutex::new(Default::default()),
            series: Default::default(),
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

    pub fn options(&self) -> &LimiterOptions {
        &self.options
    }

    /// The endpoint `name`'s bucket in force, or the error naming it (and the endpoints
    /// there are).
    fn endpoint<'a>(
        &self,
        in_force: &'a BucketsInForce,
        name: &[u8],
    ) -> Result<(&'a str, &'a EndpointArgs), ConfigError> {
        let all = &in_force.endpoints;
        match all.binary_search_by(|(n, _)| n.as_bytes().cmp(name)) {
            Ok(i) => Ok((&all[i].0, &all[i].1)),
            Err(_) => Err(ConfigError::new(
                "endpoint",
                match all.is_empty() {
                    true => format!(
                        "{} is not configured (the limiter has no endpoints option)",
                        quote_bytes(name)
                    ),
                    false => format!(
                        "{} is not configured (endpoints: {})",
                        quote_bytes(name),
                        all.iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                },
            )),
        }
    }

    /// The class a call with `priority` was decided in (`None`: none): the class it named,
    /// else `default_priority`. Read from the constructor's options, no live state: live
    /// limits change a class's share, never which classes there are (and a decision
    /// already refused a class not configured).
    pub fn class_name(&self, priority: Option<&[u8]>) -> Option<String> {
        let p = self.options.priorities.as_ref()?;
        match priority {
            Some(name) => p
                .iter()
                .find(|(n, _)| n.as_bytes() == name)
                .map(|(n, _)| n.to_owned()),
            None => p.default_class().map(str::to_owned),
        }
    }

    /// The class a call with `priority` is decided in (`None`: none) and its share (ppm)
    /// in force (`in_force`), or the error naming a class not configured.
    fn class_in<'a>(
        &self,
        in_force: &'a BucketsInForce,
        priority: Option<&[u8]>,
    ) -> Result<(Option<&'a str>, i64), ConfigError> {
        let p = in_force.priorities.as_ref();
        let Some(class) = priority else {
            return Ok(match p.and_then(|p| p.default_class().map(|d| (d, p))) {
                Some((d, p)) => (Some(d), p.share_ppm(d).unwrap_or(0)),
                None => (None, 0),
            });
        };
        match p.and_then(|p| p.iter().find(|(n, _)| n.as_bytes() == class)) {
            Some((name, ppm)) => Ok((Some(name), ppm)),
            None => Err(ConfigError::new(
                "priority",
                match p {
                    None => format!(
                        "{} is not configured (the limiter has no priorities option)",
                        quote_bytes(class)
                    ),
                    Some(p) => format!(
                        "{} is not configured (priorities: {})",
                        quote_bytes(class),
                        p.iter().map(|(n, _)| n).collect::<Vec<_>>().join(", ")
                    ),
                },
            )),
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
        self.acquire_or_peek(shop, tokens, false, 0, Route::default())
    }

    /// [`Self::acquire_within`] for a call that names an endpoint and/or a priority class
    /// (`route`); an endpoint or class not configured is a configuration error naming it.
    pub fn acquire_routed(
        &self,
        shop: &[u8],
        tokens: i64,
        max_wait_seconds: f64,
        route: Route<'_>,
    ) -> Result<(Decision, Notices), LimiterError> {
        let max_wait_us = validate_max_wait(max_wait_seconds)?;
        self.acquire_or_peek(shop, tokens, false, max_wait_us, route)
    }

    /// [`Self::peek_noticed`] for a call that names an endpoint and/or a class.
    pub fn peek_routed(
        &self,
        shop: &[u8],
        tokens: i64,
        route: Route<'_>,
    ) -> Result<(Decision, Notices), LimiterError> {
        self.acquire_or_peek(shop, tokens, true, 0, route)
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
        self.acquire_routed(shop, tokens, max_wait_seconds, Route::default())
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
        self.acquire_or_peek(shop, tokens, true, 0, Route::default())
    }

    /// The one path of [`Self::acquire_noticed`], [`Self::acquire_within`] and
    /// [`Self::peek_noticed`], and the live counters of every decision it made (a peek
    /// decides nothing; bad arguments neither): [`crate::metrics`].
    fn acquire_or_peek(
        &self,
        shop: &[u8],
        tokens: i64,
        peek: bool,
        max_wait_us: i64,
        route: Route<'_>,
    ) -> Result<(Decision, Notices), LimiterError> {
        let mut how = How::default();
        let result = self.decide(shop, tokens, peek, max_wait_us, route, &mut how);
        if !peek && crate::metrics::enabled() {
            let (allowed, reason, shadow, waited) = match &result {
                Ok((d, _)) => (d.allowed, d.reason, d.shadow, d.waited),
                // on_unavailable=throw: the call threw, the checkout got no decision (in
                // shadow mode too: the mode never changes the control flow).
                Err(LimiterError::Unavailable { .. }) => (
                    false,
                    Reason::Unavailable,
                    self.mode_in(&self.current()) == Mode::Shadow,
                    0.0,
                ),
                Err(LimiterError::Config(_)) => return result,
            };
            let seen = crate::metrics::DecisionSeen {
                limiter: &self.options.name,
                allowed,
                reason,
                shadow,
                local: how.local,
                engine: how
                    .by_valkey
                    .then(|| crate::store::thread_last_engine().unwrap_or("unknown")),
                near_limit: how.near_limit,
                waited,
            };
            self.series.count(&seen);
        }
        result
    }

    /// Local denials, the decision (taking nothing when `peek`), reloading live limits,
    /// the reservation's sleep, `on_unavailable`; `how` says where it was made.
    fn decide(
        &self,
        shop: &[u8],
        tokens: i64,
        peek: bool,
        max_wait_us: i64,
        route: Route<'_>,
        how: &mut How,
    ) -> Result<(Decision, Notices), LimiterError> {
        validate_shop_id(shop)?;
        // Checked against the constructor's buckets: misuse is the caller's, and no live
        // change may turn into an exception in checkout code. A request more than a live
        // limit can hold is denied by that bucket (with a finite retryAfter).
        validate_tokens(tokens, &self.options.buckets)?;
        let mut in_force = self.current();
        // The endpoint and the class, resolved before anything is decided: a name not
        // configured is the caller's error, named (live limits change buckets and shares,
        // never which names there are). Tokens as above: against the constructor's.
        if let Some(name) = route.endpoint {
            let (name, e) = self.endpoint(&in_force, name)?;
            let cap = self
                .options
                .endpoints
                .get(name)
                .unwrap_or(e.spec())
                .capacity();
            if tokens > cap {
                return Err(ConfigError::new(
                    "tokens",
                    format!(
                        "must be from 1 to {cap} (endpoint \"{name}\"'s capacity), got {tokens}"
                    ),
                )
                .into());
            }
        }
        let (class, first_share) = self.class_in(&in_force, route.priority)?;
        if first_share > 0 {
            // The class leaves a share of every bucket: more tokens than the rest of the
            // smallest one could never pass (against the constructor's, as above).
            let endpoint_spec = route
                .endpoint
                .and_then(|e| std::str::from_utf8(e).ok())
                .and_then(|e| self.options.endpoints.get(e));
            let max = Lane::ALL
                .into_iter()
                .filter_map(|l| self.options.buckets.get(l))
                .chain(endpoint_spec)
                .map(|b| {
                    (b.tolerance_us()
                        - checkout_guard_model::endpoints::reserve_us(
                            b.tolerance_us(),
                            first_share,
                        ))
                        / b.interval_us()
                })
                .min()
                .unwrap_or(i64::MAX);
            if tokens > max {
                return Err(ConfigError::new(
                    "tokens",
                    format!(
                        "must be from 1 to {max} for priority class \"{}\" (it leaves {}% of every bucket), got {tokens}",
                        class.unwrap_or_default(),
                        first_share as f64 / 1e4
                    ),
                )
                .into());
            }
        }
        // What a worker learns from a reply is how long a bucket stays empty; a call that
        // keeps a reserve, or draws an endpoint's bucket too, is denied earlier than that
        // (its reply says nothing about when a plain call passes): only plain calls teach
        // the table. Any call may be denied by it (it needs at least what a plain call
        // does).
        let plain = route.endpoint.is_none() && first_share == 0;
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
                how.local = true;
                return Ok((self.in_mode(&in_force, d, 0.0), notices));
            }
        }
        let hot_shop_key = self.keys.hot_shop(shop);
        let hot_flag_key = self.keys.hot_flag(shop);
        // With in_flight, the shop's lease set and one lease id per call (a peek takes
        // none). Without it the lease keys are never read: the global bucket's key stands
        // for them (declared keys must share the slot; no allocation per call).
        let with_leases = self.options.in_flight.is_some();
        let shop_lease_key = with_leases.then(|| self.keys.leases(Lane::HotShop, shop));
        let lease_keys: [&[u8]; 3] = match &shop_lease_key {
            Some(k) => [&self.lease_keys[0], &self.lease_keys[1], k],
            None => [&self.global_key, &self.global_key, &self.global_key],
        };
        let mut failure = None;
        // The lease of a call whose outcome is unknown (sent, no reply: Valkey may have
        // taken it).
        let mut maybe_taken = None;
        for _attempt in 0..3 {
            let sent_ns = self.clock.monotonic_ns();
            let lease = (with_leases && !peek).then(leases::next_lease_id);
            // The endpoint's bucket and the class's share in force (after a reload, the
            // new ones).
            let endpoint = route
                .endpoint
                .map(|e| self.endpoint(&in_force, e).map(|(_, args)| args))
                .transpose()?;
            let (_, share_ppm) = self.class_in(&in_force, route.priority)?;
            let call = DecideCall {
                endpoint,
                share_ppm,
                in_flight: &in_force.in_flight_args,
                lease_id: lease.as_ref().map_or(&b""[..], |(_, id)| id),
                keys: DecideKeys {
                    global: &self.global_key,
                    hot_lane: &self.hot_lane_key,
                    hot_shop: &hot_shop_key,
                    hot_flag: &hot_flag_key,
                    limits_version: &self.limits_version_key,
                    auto_hot_prefix: &self.auto_hot_prefix,
                    settings: &self.settings_key,
                    adapt: &self.adapt_key,
                    leases: lease_keys,
                    lease_stats: if with_leases {
                        &self.lease_stats_key
                    } else {
                        &self.global_key
                    },
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
                    if let (Some(keys), false, true) = (&denial_keys, peek, plain) {
                        self.learn(&in_force, keys, shop, &reply, sent_ns);
                    }
                    if reply.became_hot {
                        notices.became_hot = Some(reply.share_permille as f64 / 1000.0);
                    }
                    if !peek {
                        notices.adapt = self.saw_reply(&reply);
                    }
                    let espec = endpoint.map(|e| e.spec());
                    let mut d = Decision::from_reply_with(
                        in_force.buckets(),
                        espec,
                        share_ppm,
                        tokens,
                        &reply,
                    );
                    how.by_valkey = true;
                    // Only what is counted: a peek decides nothing, and with the counters
                    // off nobody reads it.
                    how.near_limit = !peek
                        && crate::metrics::enabled()
                        && Decision::near_limit(
                            in_force.buckets(),
                            &reply,
                            crate::metrics::NEAR_LIMIT_SHARE,
                        );
                    if !peek && self.options.adaptive.is_some() {
                        self.series
                            .set_share(&self.options.name, reply.adapt_permille as f64 / 1000.0);
                    }
                    if let (true, true, Some((n, _))) = (d.allowed, reply.in_flight_seen, &lease) {
                        d.lease = Some(*n);
                        self.lease_counts
                            .taken
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    // A reservation: the tokens are the caller's once every bucket holds
                    // them. Waited from the reply's arrival, no earlier than Valkey's
                    // `now` (read before it), so never early. In shadow mode taken the
                    // same, but never slept: the decision says what it would have waited.
                    let mut unslept = 0.0;
                    if d.allowed && max_wait_us > 0 {
                        let wait_us =
                            reservation_wait_with(in_force.buckets(), espec, share_ppm, &reply);
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
                    // Sent, and no reply: Valkey may have taken the lease.
                    if e.outcome_unknown() {
                        maybe_taken = lease.as_ref().map(|(n, _)| *n);
                    }
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
        let mut d = match self.options.on_unavailable {
            OnUnavailable::Allow => Decision::unavailable(true, 0.0, static_hot),
            OnUnavailable::Deny => Decision::unavailable(false, retry.as_secs_f64(), static_hot),
            OnUnavailable::Throw => return Err(self.unavailable(failure)),
        };
        // A lease Valkey may have taken (the reply was lost after the script ran) is the
        // decision's to release like any other, so it does not stay held for
        // `lease_seconds`: releasing one that was never taken finds nothing and counts
        // nothing.
        if let Some(n) = maybe_taken {
            d.lease = Some(n);
            self.note_unknown_lease(n);
        }
        Ok((self.in_mode(&in_force, d, 0.0), notices))
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

/// Where a decision was made, for the live counters.
#[derive(Debug, Default)]
struct How {
    /// In the worker: a local denial.
    local: bool,
    /// By Valkey (its reply decided).
    by_valkey: bool,
    /// Allowed, leaving the tightest bucket near empty ([`crate::metrics::NEAR_LIMIT_SHARE`]).
    near_limit: bool,
}
