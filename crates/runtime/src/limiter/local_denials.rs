//! The flood fast path: each bucket's local-denial key, a denial made here when Valkey
//! is certain to make it, and what a reply teaches the process's table (`crate::denials`).

use checkout_guard_model::adaptive::FULL;
use checkout_guard_model::{lanes_in, Decision, Lane, StepReply};

use super::{live::BucketsInForce, Limiter};
use crate::denials;

impl BucketsInForce {
    /// The local-denial key of `shop`'s own hot-shop bucket.
    pub(super) fn hot_shop_denial_key(&self, shop: &[u8]) -> u64 {
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
    pub(super) fn hashed_denial_key(
        &self,
        denial_tags: &[Vec<u8>; 3],
        lane: Lane,
        shop: &[u8],
    ) -> u64 {
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
    pub(super) fn denial_key(&self, in_force: &BucketsInForce, lane: Lane, shop: &[u8]) -> u64 {
        match lane {
            Lane::Global => in_force.global_denial_key,
            Lane::HotLane => in_force.hot_lane_denial_key,
            Lane::HotShop => in_force.hot_shop_denial_key(shop),
        }
    }

    /// The local-denial keys of the configured buckets for `shop`, computed once per
    /// acquire and used both to check and to learn.
    pub(super) fn denial_keys(&self, in_force: &BucketsInForce, shop: &[u8]) -> [Option<u64>; 3] {
        Lane::ALL.map(|lane| {
            in_force
                .buckets()
                .get(lane)
                .map(|_| self.denial_key(in_force, lane, shop))
        })
    }

    /// The local entry saying whether `shop` was hot at the last reply about it.
    pub(super) fn hot_status_key(&self, shop: &[u8]) -> u64 {
        denials::key(&self.hot_status_tag, shop, 0, 0)
    }

    /// The flood fast path: a denial Valkey is certain to make, made here (`denials.rs`),
    /// with the reason, remaining tokens and a retry time Valkey would give. Only when
    /// every bucket that applies is known: the global one, and for a hot shop its hot
    /// buckets; a shop not listed in `hot_shops` is taken as hot or not as the last reply
    /// about it found it, for no longer than `MAX_LOCAL_DENIAL_NS` or than its mark.
    pub(super) fn deny_locally(
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
    pub(super) fn learn(
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
}
