//! The buckets in force (the constructor's, or live limits over them) and reloading
//! live limits when the script says they changed.

use std::sync::Arc;

use checkout_guard_config::live::{self, LiveLimits};
use checkout_guard_config::Mode;
use checkout_guard_model::{
    BucketSet, Decision, EndpointArgs, Endpoints, InFlight, InFlightArgs, Keys, Lane, LaneArgs,
    Priorities,
};

use super::Limiter;
use crate::live_cache;
use crate::notices::LimitsChange;
use crate::store::StoreError;

/// The buckets in force and what each call derives from them.
#[derive(Debug)]
pub(super) struct BucketsInForce {
    /// The live limits' version these buckets come from (empty: none stored).
    pub(super) version: Vec<u8>,
    /// The buckets, and their ARGV formatted once.
    pub(super) lane_args: LaneArgs,
    /// The local-denial key of the global bucket (the same for every shop).
    pub(super) global_denial_key: u64,
    /// The local-denial key of the hot lane (shared by every hot shop, like global's).
    pub(super) hot_lane_denial_key: u64,
    /// The mode set live (`limiter set mode=...`), over the `mode` option; None: the option's.
    pub(super) mode: Option<Mode>,
    /// The hot-shop bucket's local-denial tag: the limiter's, with this version.
    pub(super) hot_shop_tag: Vec<u8>,
    /// `in_flight` in force (the constructor's, or live limits over it), as the decision
    /// takes it.
    pub(super) in_flight_args: InFlightArgs,
    /// Each endpoint's bucket in force as the decision takes it, by name (sorted).
    pub(super) endpoints: Vec<(String, EndpointArgs)>,
    /// The priority classes in force (`None`: no `priorities` option).
    pub(super) priorities: Option<Priorities>,
}

/// What a limiter's constructor configured, that live limits change: the base of
/// [`BucketsInForce::new`].
pub(super) struct Base<'a> {
    pub(super) buckets: &'a BucketSet,
    pub(super) in_flight: Option<&'a InFlight>,
    pub(super) endpoints: &'a Endpoints,
    pub(super) priorities: Option<&'a Priorities>,
    pub(super) keys: &'a Keys,
}

impl BucketsInForce {
    pub(super) fn buckets(&self) -> &BucketSet {
        self.lane_args.buckets()
    }

    /// The limits in force as events and the CLI show them: the buckets, then the
    /// endpoints and classes ([`live::describe_routes`]).
    pub(super) fn describe(&self) -> String {
        let endpoints = Endpoints::new(
            self.endpoints
                .iter()
                .map(|(n, e)| (n.clone(), *e.spec()))
                .collect(),
        );
        live::describe(self.buckets())
            + &live::describe_routes(&endpoints, self.priorities.as_ref())
    }

    /// The buckets for `live` over `base`, the constructor's (`base` alone when there are
    /// no live limits, or when they are invalid for this limiter: then the error too).
    pub(super) fn new(
        b: &Base<'_>,
        denial_tags: &[Vec<u8>; 3],
        live: Option<&LiveLimits>,
    ) -> (Self, Option<String>) {
        let (base, base_in_flight) = (b.buckets, b.in_flight);
        let (version, applied) = match live {
            None => (Vec::new(), Ok(base.clone())),
            Some(l) => (l.id.clone(), l.apply(base)),
        };
        let (buckets, mut error) = match applied {
            Ok(b) => (b, None),
            Err(e) => (base.clone(), Some(e.to_string())),
        };
        // The in-flight limits the same way: invalid ones leave the constructor's.
        let in_flight = match live.map(|l| l.apply_in_flight(base_in_flight, &buckets)) {
            None => base_in_flight.copied(),
            Some(Ok(f)) => f,
            Some(Err(e)) => {
                error.get_or_insert(e.to_string());
                base_in_flight.copied()
            }
        };
        // Endpoints and classes the same way (the endpoints checked against global in
        // force): invalid ones leave the constructor's.
        let endpoints = match live.map(|l| l.apply_endpoints(b.endpoints, &buckets.global)) {
            None => b.endpoints.clone(),
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                error.get_or_insert(e.to_string());
                b.endpoints.clone()
            }
        };
        let priorities = match live.map(|l| l.apply_priorities(b.priorities)) {
            None => b.priorities.cloned(),
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                error.get_or_insert(e.to_string());
                b.priorities.cloned()
            }
        };
        // Every class must still be able to take a token from every bucket: live limits
        // that leave one none are invalid for this limiter (the constructor's classes and
        // endpoints then).
        let (endpoints, priorities) = match checkout_guard_config::options::check_classes(
            &buckets,
            &endpoints,
            priorities.as_ref(),
        ) {
            Ok(()) => (endpoints, priorities),
            Err(e) => {
                error.get_or_insert(e.to_string());
                (b.endpoints.clone(), b.priorities.cloned())
            }
        };
        let endpoints = endpoints
            .iter()
            .map(|(name, spec)| (name.to_string(), EndpointArgs::new(b.keys, name, spec)))
            .collect();
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
            in_flight_args: InFlightArgs::new(in_flight.as_ref()),
            endpoints,
            priorities,
        };
        in_force.global_denial_key = in_force.hashed_denial_key(&tags, Lane::Global, b"");
        in_force.hot_lane_denial_key = in_force.hashed_denial_key(&tags, Lane::HotLane, b"");
        let [_, _, hot_shop_tag] = tags;
        in_force.hot_shop_tag = hot_shop_tag;
        (in_force, error)
    }
}

impl Limiter {
    /// What the constructor configured.
    pub(super) fn base(&self) -> Base<'_> {
        Base {
            buckets: &self.options.buckets,
            in_flight: self.options.in_flight.as_ref(),
            endpoints: &self.options.endpoints,
            priorities: self.options.priorities.as_ref(),
            keys: &self.keys,
        }
    }

    /// The buckets for `live` over the constructor's (see [`BucketsInForce::new`]).
    pub(super) fn in_force_with(
        &self,
        live: Option<&LiveLimits>,
    ) -> (BucketsInForce, Option<String>) {
        BucketsInForce::new(&self.base(), &self.denial_tags, live)
    }

    /// The buckets in force: the newest live limits this process knows of.
    pub(super) fn current(&self) -> Arc<BucketsInForce> {
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
    pub(super) fn reload(
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
            old: old.describe(),
            new: in_force.describe(),
            error: parse_error.or(apply_error),
        };
        live_cache::remember(self.live_id, Arc::new(live));
        let in_force = Arc::new(in_force);
        *self.in_force.write() = in_force.clone();
        Ok((in_force, change))
    }

    /// The mode in force: the live one this process knows of (`limiter set mode=...`),
    /// else the `mode` option's.
    pub fn mode(&self) -> Mode {
        self.mode_in(&self.current())
    }

    pub(super) fn mode_in(&self, in_force: &BucketsInForce) -> Mode {
        in_force.mode.unwrap_or(self.options.mode)
    }

    /// `d` as the mode in force answers it: as it is when enforcing; in shadow mode let
    /// through, saying what enforcement answered (a reservation's wait, not slept, as its
    /// retry_after).
    pub(super) fn in_mode(
        &self,
        in_force: &BucketsInForce,
        d: Decision,
        reservation_wait_s: f64,
    ) -> Decision {
        match self.mode_in(in_force) {
            Mode::Enforce => d,
            Mode::Shadow => d.into_shadow(reservation_wait_s),
        }
    }
}
