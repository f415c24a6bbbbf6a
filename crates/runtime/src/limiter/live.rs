//! The buckets in force (the constructor's, or live limits over them) and reloading
//! live limits when the script says they changed.

use std::sync::Arc;

use checkout_guard_config::live::{self, LiveLimits};
use checkout_guard_config::Mode;
use checkout_guard_model::{BucketSet, Decision, InFlight, InFlightArgs, Lane, LaneArgs};

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
}

impl BucketsInForce {
    pub(super) fn buckets(&self) -> &BucketSet {
        self.lane_args.buckets()
    }

    /// The buckets for `live` over `base`, the constructor's (`base` alone when there are
    /// no live limits, or when they are invalid for this limiter: then the error too).
    pub(super) fn new(
        base: &BucketSet,
        base_in_flight: Option<&InFlight>,
        denial_tags: &[Vec<u8>; 3],
        live: Option<&LiveLimits>,
    ) -> (Self, Option<String>) {
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
        };
        in_force.global_denial_key = in_force.hashed_denial_key(&tags, Lane::Global, b"");
        in_force.hot_lane_denial_key = in_force.hashed_denial_key(&tags, Lane::HotLane, b"");
        let [_, _, hot_shop_tag] = tags;
        in_force.hot_shop_tag = hot_shop_tag;
        (in_force, error)
    }
}

impl Limiter {
    /// The buckets for `live` over the constructor's (see [`BucketsInForce::new`]).
    pub(super) fn in_force_with(
        &self,
        live: Option<&LiveLimits>,
    ) -> (BucketsInForce, Option<String>) {
        BucketsInForce::new(
            &self.options.buckets,
            self.options.in_flight.as_ref(),
            &self.denial_tags,
            live,
        )
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
            old: live::describe(old.buckets()),
            new: live::describe(in_force.buckets()),
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
