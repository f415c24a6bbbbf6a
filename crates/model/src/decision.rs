use crate::bucket::{BucketSet, Lane};
use crate::step::{lanes_in, StepReply};

/// Why a decision came out as it did. The strings are the PHP contract of
/// `Decision::reason()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Allowed,
    /// The global bucket lacked tokens.
    Global,
    /// The bucket shared by all hot shops lacked tokens.
    HotLane,
    /// The shop's own hot bucket lacked tokens.
    HotShop,
    /// Valkey could not be asked; `on_unavailable` decided.
    Unavailable,
    /// The provider asked to be left alone (`Retry-After` reported by `feedback()` with
    /// the `adaptive` option): every shop is denied until then.
    Provider,
    /// The limiter's `in_flight` limit: as many calls as it allows were in flight.
    InFlightGlobal,
    /// The hot lane's `in_flight` limit (all hot shops together).
    InFlightHotLane,
    /// The shop's own `in_flight` limit (a hot shop).
    InFlightHotShop,
    /// The bucket of the call's endpoint (`endpoints` option) lacked tokens.
    Endpoint,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Allowed => "allowed",
            Reason::Global => "global",
            Reason::HotLane => "hot_lane",
            Reason::HotShop => "hot_shop",
            Reason::Unavailable => "unavailable",
            Reason::Provider => "provider",
            Reason::InFlightGlobal => "in_flight_global",
            Reason::InFlightHotLane => "in_flight_hot_lane",
            Reason::InFlightHotShop => "in_flight_hot_shop",
            Reason::Endpoint => "endpoint",
        }
    }

    /// Every reason, in the order a decision checks them (after `allowed`): the
    /// provider's pause, the buckets, the in-flight levels; then `unavailable`.
    pub const ALL: [Reason; 10] = [
        Reason::Allowed,
        Reason::Provider,
        Reason::Global,
        Reason::Endpoint,
        Reason::HotLane,
        Reason::HotShop,
        Reason::InFlightGlobal,
        Reason::InFlightHotLane,
        Reason::InFlightHotShop,
        Reason::Unavailable,
    ];

    /// The in-flight denial at `lane`'s level.
    pub fn in_flight(lane: Lane) -> Self {
        match lane {
            Lane::Global => Reason::InFlightGlobal,
            Lane::HotLane => Reason::InFlightHotLane,
            Lane::HotShop => Reason::InFlightHotShop,
        }
    }

    /// An in-flight denial (the buckets had the tokens).
    pub fn is_in_flight(self) -> bool {
        matches!(
            self,
            Reason::InFlightGlobal | Reason::InFlightHotLane | Reason::InFlightHotShop
        )
    }

    /// The reason of a reply: allowed, or the lane that lacked tokens.
    pub fn of(denied_by: Option<Lane>) -> Self {
        match denied_by {
            None => Reason::Allowed,
            Some(Lane::Global) => Reason::Global,
            Some(Lane::HotLane) => Reason::HotLane,
            Some(Lane::HotShop) => Reason::HotShop,
        }
    }
}

/// The outcome of one `acquire()`. Being limited is a value, not an error.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub allowed: bool,
    pub reason: Reason,
    /// Seconds until this request could pass if nobody else took tokens; 0 when allowed.
    pub retry_after: f64,
    /// Whole tokens left in the tightest bucket that applied, after this decision.
    pub remaining: i64,
    pub hot_shop: bool,
    /// Seconds `acquire()` slept for a reservation before its tokens were there (0.0
    /// without waiting).
    pub waited: f64,
    /// What enforcement answers: equal to `allowed` in enforce mode; in shadow mode
    /// `allowed` is always true and this is the decision the buckets made.
    pub would_allow: bool,
    /// Made in shadow mode ([`Decision::into_shadow`]).
    pub shadow: bool,
    /// With `in_flight`: the number of the lease this decision took (the caller ends it
    /// with a release); `None` without one (denied, a peek, no `in_flight`, Valkey not
    /// asked).
    pub lease: Option<u64>,
}

impl Decision {
    /// Derives the decision from the script's reply: the request waits for the slowest
    /// bucket, and `remaining` is the smallest whole-token count among the buckets applied.
    /// `set` is the limits decided with: the reply's adaptive share scales them. Under the
    /// provider's pause: denied (`provider`) until it ends, nothing remaining.
    pub fn from_reply(set: &BucketSet, tokens: i64, reply: &StepReply) -> Self {
        Self::from_reply_with(set, None, 0, tokens, reply)
    }

    /// [`Self::from_reply`] for a call with an endpoint (its bucket as configured) and a
    /// priority class's share (ppm): `remaining` counts the endpoint's bucket too, and a
    /// denial's `retry_after` is the wait until the slowest bucket reaches the class's
    /// threshold (the cost above the reserve).
    pub fn from_reply_with(
        set: &BucketSet,
        endpoint: Option<&crate::bucket::BucketSpec>,
        share_ppm: i64,
        tokens: i64,
        reply: &StepReply,
    ) -> Self {
        let now = reply.now_us;
        if reply.provider {
            return Self {
                allowed: false,
                reason: Reason::Provider,
                retry_after: (reply.pause_until_us - now).max(0) as f64 / 1e6,
                remaining: 0,
                hot_shop: reply.hot,
                waited: 0.0,
                would_allow: false,
                shadow: false,
                lease: None,
            };
        }
        let mut remaining = i64::MAX;
        let mut wait_us = 0;
        for (spec, tat) in crate::step::buckets_in(set, endpoint, reply) {
            remaining = remaining.min(spec.whole_tokens(tat, now));
            let reserve = crate::endpoints::reserve_us(spec.tolerance_us(), share_ppm);
            let cost = tokens.saturating_mul(spec.interval_us());
            wait_us = wait_us.max((cost + reserve - spec.credit_us(tat, now)).max(0));
        }
        if remaining == i64::MAX {
            remaining = 0;
        }
        let reason = match reply.reason {
            Some(_) if reply.endpoint_denied => Reason::Endpoint,
            Some(lane) if reply.in_flight => Reason::in_flight(lane),
            r => Reason::of(r),
        };
        let allowed = reason == Reason::Allowed;
        if reply.in_flight {
            wait_us = reply.in_flight_retry_us;
        }
        Self {
            allowed,
            reason,
            retry_after: if allowed { 0.0 } else { wait_us as f64 / 1e6 },
            remaining,
            hot_shop: reply.hot,
            waited: 0.0,
            would_allow: allowed,
            shadow: false,
            lease: None,
        }
    }

    /// Whether an allowed reply left its tightest bucket (by share of its capacity, the
    /// reply's adaptive share applied) at or under `share` of its capacity: a sale running
    /// close to its limit (`checkout_guard_near_limit_total`). False for a denial and
    /// under the provider's pause.
    pub fn near_limit(set: &BucketSet, reply: &StepReply, share: f64) -> bool {
        if reply.provider || reply.reason.is_some() {
            return false;
        }
        let set = &crate::adaptive::scaled(set, reply.adapt_permille);
        lanes_in(reply).any(|lane| {
            set.get(lane).is_some_and(|spec| {
                let left = spec.whole_tokens(reply.tats[lane as usize], reply.now_us);
                (left as f64) <= share * spec.capacity() as f64
            })
        })
    }

    /// A denial made in the worker (the flood fast path): the bucket of `lane` is known to
    /// lack the tokens; `retry_after` is when they are certainly back, `remaining` the
    /// whole tokens of the tightest bucket that applies.
    pub fn local_denial(lane: Lane, retry_after: f64, remaining: i64, hot_shop: bool) -> Self {
        Self {
            allowed: false,
            reason: Reason::of(Some(lane)),
            retry_after,
            remaining,
            hot_shop,
            waited: 0.0,
            would_allow: false,
            shadow: false,
            lease: None,
        }
    }

    /// The decision when Valkey cannot be asked and `on_unavailable` is allow or deny.
    /// `retry_after` (deny) is the time until the limiter will try Valkey again.
    pub fn unavailable(allowed: bool, retry_after: f64, hot_shop: bool) -> Self {
        Self {
            allowed,
            reason: Reason::Unavailable,
            retry_after: if allowed { 0.0 } else { retry_after },
            remaining: 0,
            hot_shop,
            waited: 0.0,
            would_allow: allowed,
            shadow: false,
            lease: None,
        }
    }

    /// This enforcement decision as shadow mode answers it: let through (`allowed`),
    /// with `would_allow`, `reason`, `retry_after` and `remaining` saying what
    /// enforcement answered. A reservation's wait (`reservation_wait_s`, taken but not
    /// slept) is told as its `retry_after`.
    pub fn into_shadow(mut self, reservation_wait_s: f64) -> Self {
        self.would_allow = self.allowed;
        self.allowed = true;
        self.shadow = true;
        if self.would_allow && reservation_wait_s > 0.0 {
            self.retry_after = reservation_wait_s;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::BucketSpec;
    use crate::step::{step, StepInput, StoredState};

    #[test]
    fn remaining_is_tightest_bucket_and_retry_after_waits_for_slowest() {
        let set = BucketSet {
            global: BucketSpec::new("global", 10, 10.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 2, 1.0).unwrap()),
        };
        let now = 1_000_000_000;
        let hot = |now| StepInput {
            static_hot: true,
            ..StepInput::new(now, 1)
        };
        let (r, s) = step(&set, &StoredState::default(), &hot(now));
        let d = Decision::from_reply(&set, 1, &r);
        assert!(d.allowed);
        assert_eq!((d.remaining, d.retry_after), (1, 0.0));
        assert!(d.hot_shop);
        let (r, s) = step(&set, &s, &hot(now));
        assert_eq!(Decision::from_reply(&set, 1, &r).remaining, 0);
        let (r, _) = step(&set, &s, &hot(now + 250_000));
        let d = Decision::from_reply(&set, 1, &r);
        assert_eq!(d.reason, Reason::HotShop);
        assert!(!d.allowed);
        // The shop bucket refills 1 token/s; 0.25 s have passed.
        assert!((d.retry_after - 0.75).abs() < 1e-9, "{}", d.retry_after);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn a_shadow_decision_lets_through_and_keeps_what_enforcement_said() {
        let denied = Decision::local_denial(Lane::HotShop, 0.5, 0, true);
        assert!(!denied.allowed && !denied.would_allow && !denied.shadow);
        let s = denied.into_shadow(0.0);
        assert!(s.allowed && !s.would_allow && s.shadow);
        assert_eq!(
            (s.reason, s.retry_after, s.remaining),
            (Reason::HotShop, 0.5, 0)
        );
        let ok = Decision::unavailable(true, 0.0, false);
        assert!(ok.would_allow);
        let s = ok.into_shadow(0.25);
        assert!(s.allowed && s.would_allow && s.shadow);
        assert_eq!(
            s.retry_after, 0.25,
            "a reservation says what it would have waited"
        );
        let s = Decision::unavailable(false, 0.7, false).into_shadow(0.0);
        assert!(s.allowed && !s.would_allow);
        assert_eq!((s.reason, s.retry_after), (Reason::Unavailable, 0.7));
    }

    #[test]
    fn unavailable_decisions() {
        let d = Decision::unavailable(true, 0.7, false);
        assert!(d.allowed && d.retry_after == 0.0 && d.reason == Reason::Unavailable);
        let d = Decision::unavailable(false, 0.7, true);
        assert!(!d.allowed && d.retry_after == 0.7 && d.hot_shop);
        assert_eq!(d.reason.as_str(), "unavailable");
    }
}
