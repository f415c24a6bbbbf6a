//! The atomic step of one decision, in Rust. The decision script
//! ([`crate::cmd::decide::source`], `src/scripts/decide.lua`) is its Lua twin, run inside
//! Valkey, and [`crate::server::decide_on`] wraps it for the native module and the
//! in-memory store; the runtime's `tests/script_model.rs` drives them with the same random
//! sequences and requires identical replies. Keep them in lock-step.

use crate::adaptive::{scaled, AdaptParams, AdaptState, FULL};
use crate::auto_hot::AutoHot;
use crate::bucket::{BucketSet, BucketSpec, Lane, StoredBucket};
use crate::endpoints::reserve_us;
use crate::in_flight::{retry_after_us, InFlight, LeaseLevel, LeaseStats};

/// What the store holds for one shop's decision: each bucket (`None` when the key is
/// missing or expired), the shop's hot mark (`None` when not marked, else its time to
/// live in ms, -1: no expiry), and with `auto_hot` the window counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoredState {
    pub buckets: [Option<StoredBucket>; 3],
    pub mark_ttl_ms: Option<i64>,
    /// `auto_hot`'s counters: the current window (number [`auto_hot_window`]) and the one
    /// before it.
    pub windows: [WindowCounts; 2],
    /// The adaptive budget's state (the limiter's `adapt` key; `None`: missing, or a value
    /// no engine reads), see [`crate::adaptive`].
    pub adapt: Option<AdaptState>,
    /// With `in_flight`: per level (global, hot lane, hot shop) the leases held now (read
    /// only for the levels that apply, and only when the buckets allowed). In the state
    /// to store, a level whose `held` grew by one takes a lease.
    pub leases: [LeaseLevel; 3],
    /// The lease stats a retry estimate reads (read only on an in-flight denial).
    pub lease_stats: LeaseStats,
    /// The bucket of the call's endpoint (`endpoints` option; `None`: missing, or the
    /// call names no endpoint).
    pub endpoint: Option<StoredBucket>,
}

/// Tokens taken in one `auto_hot` window: by this shop, and by all shops (the hash
/// `<prefix><window>`, fields `<shop>` and `""`; absent fields count 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowCounts {
    pub mine: i64,
    pub all: i64,
}

/// The number of the `auto_hot` window `now` (µs) falls in.
pub fn auto_hot_window(now: i64, window_us: i64) -> i64 {
    now.div_euclid(window_us)
}

impl StoredState {
    pub fn marked_hot(&self) -> bool {
        self.mark_ttl_ms.is_some()
    }
}

/// The script's raw reply: `{reason, hot, now, tat_global, tat_lane, tat_shop,
/// became_hot, share_permille, mark_ttl_ms}`.
///
/// `reason` is `None` when allowed, otherwise the first lane (global, hot lane, hot shop)
/// whose bucket lacked tokens (on the wire: 0, or the lane's 1-based index). Each TAT is the bucket's effective TAT after the
/// decision (`max(stored, now)` read at the current limits, moved forward when allowed), or
/// -1 when the bucket did not apply to this request. `became_hot`: `auto_hot` marked the
/// shop hot in this call; `share_permille`: its share of the global consumption over the
/// window (0 without `auto_hot` or when denied; see [`StepInput::auto_hot`]). `mark_ttl_ms`: when the shop is hot only by a mark, the mark's
/// time to live in ms (0 in its last millisecond; -1: no expiry); -2 otherwise. Whatever
/// was learnt from the hot buckets holds no longer than the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepReply {
    pub reason: Option<Lane>,
    pub hot: bool,
    pub now_us: i64,
    pub tats: [i64; 3],
    pub became_hot: bool,
    pub share_permille: i64,
    pub mark_ttl_ms: i64,
    /// The adaptive share the buckets were decided at, permille (1000: the limits).
    pub adapt_permille: i64,
    /// Until when the provider's `Retry-After` pauses the limiter (µs; 0: no pause).
    pub pause_until_us: i64,
    /// Denied because the provider's pause holds (`reason` is then the global lane: the
    /// whole limiter; no bucket applied).
    pub provider: bool,
    /// The adaptive state was read (the long reply's two more fields): with a share of
    /// 1000 and no pause, this decision found the budget recovered and removed the state.
    pub adapt_seen: bool,
    /// Denied because `reason`'s in-flight level held its limit of leases (the buckets
    /// had the tokens; nothing was taken).
    pub in_flight: bool,
    /// An in-flight denial's retry estimate, µs ([`crate::in_flight::retry_after_us`]);
    /// 0 otherwise.
    pub in_flight_retry_us: i64,
    /// The limiter has `in_flight` (the reply's in-flight form, twelve integers): when
    /// allowed (not a peek), a lease was taken on every level that applied.
    pub in_flight_seen: bool,
    /// The endpoint bucket's TAT after the decision, as `tats` (-1: the call named no
    /// endpoint).
    pub tat_endpoint: i64,
    /// Denied because the endpoint's bucket lacked tokens (checked after the global
    /// bucket, before the hot ones); `reason` is then `Some(Lane::Global)` (a denial, as
    /// `provider`'s), this flag naming the bucket.
    pub endpoint_denied: bool,
    /// The call named an endpoint: the reply's endpoint form (thirteen integers).
    pub endpoint_seen: bool,
}

/// The reply's integers: at most 13, `len` of them in use.
pub type ReplyInts = ([i64; 13], usize);

/// The reason on the wire of a denial by the endpoint's bucket.
const ENDPOINT_REASON: i64 = 8;

/// The reason on the wire of an in-flight denial at `lane`'s level: 5, 6, 7.
const IN_FLIGHT_REASON: i64 = 5;

impl StepReply {
    /// The integers the script returns for this reply: the nine of the long form, and the
    /// adaptive share and pause when the adaptive state was read (`adapt_seen`); with
    /// `in_flight` (`in_flight_seen`) always twelve: the share (0 when the adaptive state
    /// was not read), the pause, and an in-flight denial's retry estimate; for a call with
    /// an endpoint (`endpoint_seen`) always thirteen: the twelve (the retry -1 without
    /// `in_flight`) and the endpoint bucket's TAT.
    pub fn to_ints(&self) -> ReplyInts {
        let reason = if self.provider {
            4
        } else if self.endpoint_denied {
            ENDPOINT_REASON
        } else if self.in_flight {
            self.reason.map_or(0, |lane| lane as i64 + IN_FLIGHT_REASON)
        } else {
            self.reason.map_or(0, |lane| lane as i64 + 1)
        };
        let ints = [
            reason,
            self.hot as i64,
            self.now_us,
            self.tats[0],
            self.tats[1],
            self.tats[2],
            self.became_hot as i64,
            self.share_permille,
            self.mark_ttl_ms,
            if self.adapt_seen || !(self.in_flight_seen || self.endpoint_seen) {
                self.adapt_permille
            } else {
                0
            },
            self.pause_until_us,
            if self.in_flight_seen || !self.endpoint_seen {
                self.in_flight_retry_us
            } else {
                -1
            },
            self.tat_endpoint,
        ];
        let len = match (self.endpoint_seen, self.in_flight_seen, self.adapt_seen) {
            (true, _, _) => 13,
            (false, true, _) => 12,
            (false, false, true) => 11,
            (false, false, false) => 9,
        };
        (ints, len)
    }

    /// Whether this decision found the adaptive budget recovered (and removed its state):
    /// the limiter is back at its limits.
    pub fn recovered(&self) -> bool {
        self.adapt_seen && self.adapt_permille >= FULL && !self.provider
    }

    /// Parses the integers the script returns: the nine of [`Self::to_ints`], the eleven
    /// when the adaptive state was read (reason 4: the provider's pause), or the short
    /// form the script answers when only the global bucket applied (not hot, no
    /// `auto_hot`, no adaptive state): `{reason, hot, now, tat_global}`, the rest at their
    /// defaults (no hot lane's TAT, not made hot, share 0, no mark: -1, -1, 0, 0, -2).
    /// Valkey converts each element of a script's reply, so the global bucket's answer
    /// carries four.
    pub fn from_ints(v: &[i64]) -> Option<Self> {
        if let [reason, hot, now_us, g] = *v {
            return Self::from_ints(&[reason, hot, now_us, g, -1, -1, 0, 0, -2])
                .filter(|r| r.reason.is_none_or(|l| l == Lane::Global));
        }
        let (base, adapt, in_flight, endpoint) = match v.len() {
            9 => (v, None, None, None),
            11 => (&v[..9], Some((v[9], v[10])), None, None),
            // The in-flight form: a share of 0 says the adaptive state was not read.
            12 if v[9] == 0 && v[10] == 0 => (&v[..9], None, Some(v[11]), None),
            12 => (&v[..9], Some((v[9], v[10])), Some(v[11]), None),
            // The endpoint form: the twelve (a retry of -1: no `in_flight`) and the
            // endpoint bucket's TAT.
            13 => (
                &v[..9],
                Some((v[9], v[10])).filter(|&(p, u)| p != 0 || u != 0),
                Some(v[11]).filter(|&r| r != -1),
                Some(v[12]),
            ),
            _ => return None,
        };
        let known = |reason: i64| match reason {
            0..=3 => true,
            4 => adapt.is_some(),
            5..=7 => in_flight.is_some(),
            8 => endpoint.is_some(),
            _ => false,
        };
        match *base {
            [reason, hot, now_us, g, l, s, became, share, mark_ttl_ms] if known(reason) => {
                if let Some((p, _)) = adapt {
                    if !(1..=FULL).contains(&p) {
                        return None;
                    }
                }
                let in_flight_denial = (5..=7).contains(&reason);
                Some(Self {
                    reason: match reason {
                        0 => None,
                        4 | 8 => Some(Lane::Global),
                        5..=7 => Some(Lane::ALL[(reason - IN_FLIGHT_REASON) as usize]),
                        r => Some(Lane::ALL[r as usize - 1]),
                    },
                    hot: hot == 1,
                    now_us,
                    tats: [g, l, s],
                    became_hot: became == 1,
                    share_permille: share,
                    mark_ttl_ms,
                    adapt_permille: adapt.map_or(FULL, |a| a.0),
                    pause_until_us: adapt.map_or(0, |a| a.1),
                    provider: reason == 4,
                    adapt_seen: adapt.is_some(),
                    in_flight: in_flight_denial,
                    in_flight_retry_us: if in_flight_denial {
                        in_flight.unwrap_or(0)
                    } else {
                        0
                    },
                    in_flight_seen: in_flight.is_some(),
                    tat_endpoint: endpoint.unwrap_or(-1),
                    endpoint_denied: reason == ENDPOINT_REASON,
                    endpoint_seen: endpoint.is_some(),
                })
            }
            _ => None,
        }
    }
}

/// What one decision is asked, beside the limits ([`BucketSet`]) and what the store holds
/// ([`StoredState`]): [`StepInput::new`] is the plain decision (`tokens` at `now`, not
/// listed hot, the constructor's limits, no `auto_hot`, no reservation, no adaptive
/// budget); the fields say what else applies.
#[derive(Debug, Clone, Copy, Default)]
pub struct StepInput<'a> {
    /// The store's clock (µs).
    pub now: i64,
    pub tokens: i64,
    /// The shop is listed in the `hot_shops` option.
    pub static_hot: bool,
    /// The live limits' version decided with (its change instant, if any, is when a
    /// bucket written under other limits changed them).
    pub version: &'a str,
    /// `auto_hot` (`None`: off): when tokens are taken, they are counted in the current
    /// window, and a shop that is not hot whose share of the tokens over the sliding
    /// window (the previous window weighted by the part of it still inside) is above
    /// `share`, having taken at least `min_tokens`, is marked hot for `ttl_seconds`
    /// (`next.mark_ttl_ms`). The arithmetic is the script's, in doubles as Lua's.
    pub auto_hot: Option<&'a AutoHot>,
    /// A reservation (`acquire(..., maxWaitSeconds)`): the tokens are taken now from the
    /// future when every bucket that applies holds them within that time (`tat + cost -
    /// now <= tolerance + max_wait`); the caller waits until then (see
    /// [`reservation_wait_us`]). Never more tokens than a bucket holds when full. 0: the
    /// plain decision.
    pub max_wait_us: i64,
    /// The `adaptive` option (`None`: off, the stored state ignored). With a stored state
    /// ([`crate::adaptive`]): while the provider's pause holds, every shop is denied
    /// (`provider`, nothing taken, nothing written); otherwise every bucket is decided at
    /// the share in force ([`crate::adaptive::scaled`]), its level carried over from the
    /// share it was written at; a share back at 1000 with no pause removes the state
    /// (`next.adapt` = `None`: the budget recovered).
    pub adaptive: Option<&'a AdaptParams>,
    /// The `in_flight` option (`None`: off). When the buckets allow, every level that
    /// applies (global; the hot levels with a limit for a hot shop) must hold fewer
    /// leases than its limit (`stored.leases`), checked in that order; the first full one
    /// denies (`in_flight`, nothing taken); otherwise a lease is taken on each. The
    /// limits are not scaled by the adaptive share, and a reservation does not wait for
    /// a lease.
    pub in_flight: Option<&'a InFlight>,
    /// The bucket of the call's endpoint (`endpoints` option; `None`: the call names
    /// none): drawn from with the others, all or nothing, checked after the global
    /// bucket and before the hot ones (`stored.endpoint`). Scaled by the adaptive share
    /// as the others.
    pub endpoint: Option<&'a BucketSpec>,
    /// The call's priority class's share, ppm of every bucket's capacity the call must
    /// leave untouched (0: none): a bucket that applies allows only while it keeps at
    /// least [`reserve_us`] of credit after the take (for a reservation, within the
    /// wait); the reserve is of the bucket in force (scaled).
    pub share_ppm: i64,
}

impl StepInput<'_> {
    /// `tokens` at `now` (µs), nothing else applying.
    pub fn new(now: i64, tokens: i64) -> Self {
        Self {
            now,
            tokens,
            ..Self::default()
        }
    }
}

/// One decision on `set` over `stored`, as `input` asks (see [`StepInput`]). Returns the
/// reply and the state to store (buckets written only when allowed, with the limits they
/// were written under).
pub fn step(set: &BucketSet, stored: &StoredState, input: &StepInput) -> (StepReply, StoredState) {
    let now = input.now;
    let adapt = input.adaptive.zip(stored.adapt);
    let permille = adapt.map(|(params, state)| state.permille_at(now, params));
    if let (Some((_, state)), Some(permille)) = (adapt, permille) {
        if state.paused_at(now) {
            let reply = StepReply {
                reason: Some(Lane::Global),
                hot: input.static_hot || stored.marked_hot(),
                now_us: now,
                tats: [-1; 3],
                became_hot: false,
                share_permille: 0,
                mark_ttl_ms: mark_ttl_in_reply(stored, input.static_hot),
                adapt_permille: permille,
                pause_until_us: state.pause_until,
                provider: true,
                adapt_seen: true,
                in_flight: false,
                in_flight_retry_us: 0,
                in_flight_seen: input.in_flight.is_some(),
                tat_endpoint: -1,
                endpoint_denied: false,
                endpoint_seen: input.endpoint.is_some(),
            };
            return (reply, *stored);
        }
    }
    let share = permille.unwrap_or(FULL);
    let set = scaled(set, share);
    let endpoint = input
        .endpoint
        .map(|spec| crate::adaptive::scaled_spec(spec, share));
    let input = &StepInput {
        endpoint: endpoint.as_ref(),
        ..*input
    };
    let (mut reply, mut next) = step_core(&set, stored, input);
    if let Some(p) = permille {
        reply.adapt_permille = p;
        reply.adapt_seen = true;
        if p >= FULL {
            next.adapt = None;
        }
    }
    (reply, next)
}

/// [`step`] at the share in force (`set` already scaled), the adaptive state aside.
fn step_core(set: &BucketSet, stored: &StoredState, input: &StepInput) -> (StepReply, StoredState) {
    let StepInput {
        now,
        tokens,
        static_hot,
        version,
        auto_hot,
        max_wait_us,
        adaptive: _,
        in_flight,
        endpoint,
        share_ppm,
    } = *input;
    let change_at = crate::limits_version::change_instant(version.as_bytes());
    let by_mark = !static_hot && stored.marked_hot();
    let hot = static_hot || by_mark;
    // The buckets in the order a denial is named: global, the endpoint, the hot ones.
    // Slots 0..=2 are the lanes, 3 the endpoint.
    let buckets = applicable_buckets(set, hot, endpoint);
    let stored_at = |slot: usize| match slot {
        ENDPOINT_SLOT => stored.endpoint,
        i => stored.buckets[i],
    };
    let mut tats = [-1i64; 4];
    let mut moved = [false; 4];
    let mut reason = None;
    let mut endpoint_denied = false;
    for &(slot, spec) in buckets.iter().flatten() {
        let (tat, m) = StoredBucket::effective_tat(stored_at(slot).as_ref(), spec, now, change_at);
        tats[slot] = tat;
        moved[slot] = m;
        // Saturating: a cost beyond i64 (tokens far above any capacity, from a direct
        // caller) is denied, as the script's doubles deny it. The class keeps its
        // reserve: the bucket must hold `reserve` more than the cost.
        let cost = tokens.saturating_mul(spec.interval_us());
        let room = spec.tolerance_us() - reserve_us(spec.tolerance_us(), share_ppm);
        if reason.is_none() && (cost > room || tat.saturating_add(cost) - now > room + max_wait_us)
        {
            reason = Some(slot_lane(slot));
            endpoint_denied = slot == ENDPOINT_SLOT;
        }
    }
    // The buckets allow: every in-flight level that applies must have a lease free (the
    // first full one, in order, denies).
    let (mut denied_in_flight, mut in_flight_retry_us) = (false, 0);
    if let (None, Some(f)) = (reason, in_flight) {
        if let Some((lane, _)) = f
            .applicable(hot)
            .find(|&(lane, limit)| stored.leases[lane as usize].held >= limit)
        {
            reason = Some(lane);
            denied_in_flight = true;
            in_flight_retry_us = retry_after_us(
                &stored.leases[lane as usize],
                &stored.lease_stats,
                now,
                f.lease_us,
            );
        }
    }
    // The instant the tokens are the caller's: now, or for a reservation the instant the
    // slowest bucket holds them above the class's reserve (the caller sleeps until then).
    // Every bucket takes them as of that instant, not now: a bucket that has them sooner
    // must not count the reserved calls as made before they are, or it would hand its
    // refill to others at the same moment the reserved calls go out.
    let mut take_at = now;
    if reason.is_none() {
        for &(slot, spec) in buckets.iter().flatten() {
            let room = spec.tolerance_us() - reserve_us(spec.tolerance_us(), share_ppm);
            take_at = take_at.max(tats[slot] + tokens * spec.interval_us() - room);
        }
    }
    // Taken tokens are written; a bucket carried over from other limits is written back
    // even on a denial, so its key expires on the new limits' schedule.
    let mut next = *stored;
    for &(slot, spec) in buckets.iter().flatten() {
        if reason.is_none() {
            tats[slot] = tats[slot].max(take_at) + tokens * spec.interval_us();
        } else if !moved[slot] {
            continue;
        }
        let b = Some(StoredBucket {
            tat: tats[slot],
            params: Some((spec.interval_us(), spec.tolerance_us())),
            change: change_at,
        });
        match slot {
            ENDPOINT_SLOT => next.endpoint = b,
            i => next.buckets[i] = b,
        }
    }
    if let (None, Some(f)) = (reason, in_flight) {
        for (lane, _) in f.applicable(hot) {
            next.leases[lane as usize].held += 1;
        }
    }
    let (mut became_hot, mut share_permille) = (false, 0);
    if let (None, Some(a)) = (reason, auto_hot) {
        let w = a.window.as_micros() as i64;
        let [cur, prev] = stored.windows;
        let mine = cur.mine + tokens;
        let all = cur.all + tokens;
        next.windows[0] = WindowCounts { mine, all };
        let f = 1.0 - (now % w) as f64 / w as f64;
        let mine = mine as f64 + prev.mine as f64 * f;
        let all = all as f64 + prev.all as f64 * f;
        share_permille = (1000.0 * mine / all).floor() as i64;
        if !hot && mine >= a.min_tokens as f64 && mine > a.share * all {
            became_hot = true;
            next.mark_ttl_ms = Some(a.ttl_seconds * 1000);
        }
    }
    (
        StepReply {
            reason,
            hot,
            now_us: now,
            tats: [tats[0], tats[1], tats[2]],
            became_hot,
            share_permille,
            mark_ttl_ms: mark_ttl_in_reply(stored, static_hot),
            adapt_permille: FULL,
            pause_until_us: 0,
            provider: false,
            adapt_seen: false,
            in_flight: denied_in_flight,
            in_flight_retry_us,
            in_flight_seen: in_flight.is_some(),
            tat_endpoint: tats[ENDPOINT_SLOT],
            endpoint_denied,
            endpoint_seen: endpoint.is_some(),
        },
        next,
    )
}

/// The endpoint bucket's slot in [`step_core`]'s arrays (after the three lanes').
const ENDPOINT_SLOT: usize = 3;

/// The lane a denial at `slot` is reported under (the endpoint's: global, with
/// [`StepReply::endpoint_denied`]).
fn slot_lane(slot: usize) -> Lane {
    match slot {
        ENDPOINT_SLOT => Lane::Global,
        i => Lane::ALL[i],
    }
}

/// The buckets a call draws from, in the order a denial is named: global, the endpoint's
/// (when the call names one), then for a hot shop the hot lane and hot shop buckets that
/// are configured. Each with its slot (0..=2 the lanes, 3 the endpoint).
fn applicable_buckets<'a>(
    set: &'a BucketSet,
    hot: bool,
    endpoint: Option<&'a BucketSpec>,
) -> [Option<(usize, &'a BucketSpec)>; 4] {
    let lane = |l: Lane| {
        if hot {
            set.get(l).map(|spec| (l as usize, spec))
        } else {
            None
        }
    };
    [
        Some((Lane::Global as usize, &set.global)),
        endpoint.map(|spec| (ENDPOINT_SLOT, spec)),
        lane(Lane::HotLane),
        lane(Lane::HotShop),
    ]
}

/// The reply's `mark_ttl_ms`: the mark's time to live when the shop is hot by a mark only
/// (not listed in `hot_shops`), else -2.
fn mark_ttl_in_reply(stored: &StoredState, static_hot: bool) -> i64 {
    match (static_hot, stored.mark_ttl_ms) {
        (false, Some(ttl)) => ttl,
        _ => -2,
    }
}

/// How long the caller of an allowed reservation waits before its tokens are there: the
/// slowest bucket's `tat - tolerance - now` (µs), 0 when every bucket held them at once.
pub fn reservation_wait_us(set: &BucketSet, reply: &StepReply) -> i64 {
    reservation_wait_with(set, None, 0, reply)
}

/// [`reservation_wait_us`] for a call with an endpoint (its bucket, unscaled) and a
/// class's share (ppm): the slowest bucket's `tat - (tolerance - reserve) - now`.
pub fn reservation_wait_with(
    set: &BucketSet,
    endpoint: Option<&BucketSpec>,
    share_ppm: i64,
    reply: &StepReply,
) -> i64 {
    buckets_in(set, endpoint, reply)
        .map(|(spec, tat)| {
            tat - (spec.tolerance_us() - reserve_us(spec.tolerance_us(), share_ppm)) - reply.now_us
        })
        .max()
        .unwrap_or(0)
        .max(0)
}

/// The buckets that applied to a reply, at the reply's adaptive share, each with its TAT:
/// the lanes with a TAT, then the endpoint's (given its unscaled bucket).
pub fn buckets_in(
    set: &BucketSet,
    endpoint: Option<&BucketSpec>,
    reply: &StepReply,
) -> impl Iterator<Item = (BucketSpec, i64)> {
    let set = scaled(set, reply.adapt_permille).into_owned();
    let endpoint = endpoint.filter(|_| reply.tat_endpoint >= 0).map(|spec| {
        (
            crate::adaptive::scaled_spec(spec, reply.adapt_permille),
            reply.tat_endpoint,
        )
    });
    let lanes: Vec<(BucketSpec, i64)> = lanes_in(reply)
        .filter_map(|l| set.get(l).map(|spec| (*spec, reply.tats[l as usize])))
        .collect();
    lanes.into_iter().chain(endpoint)
}

/// The lanes that applied to a reply (those with a TAT).
pub fn lanes_in(reply: &StepReply) -> impl Iterator<Item = Lane> + '_ {
    Lane::ALL
        .into_iter()
        .filter(move |&l| reply.tats[l as usize] >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::BucketSpec;

    /// `tokens` at `now`, the shop listed hot or not.
    fn hot_input(now: i64, tokens: i64, static_hot: bool) -> StepInput<'static> {
        StepInput {
            static_hot,
            ..StepInput::new(now, tokens)
        }
    }

    /// A reservation of `tokens` at `now` waiting at most `max_wait_us`.
    fn reserve(now: i64, tokens: i64, max_wait_us: i64) -> StepInput<'static> {
        StepInput {
            max_wait_us,
            ..StepInput::new(now, tokens)
        }
    }

    fn set() -> BucketSet {
        BucketSet {
            global: BucketSpec::new("global", 10, 10.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 6, 6.0).unwrap()),
            hot_shop: Some(BucketSpec::new("hot_shop", 4, 4.0).unwrap()),
        }
    }

    /// A table of (µs since start, tokens, hot, expected reason) against one evolving state.
    #[test]
    fn table_of_decisions_with_a_controlled_clock() {
        let set = set();
        let t0 = 1_700_000_000_000_000;
        let mut state = StoredState::default();
        let (ok, global, shop) = (None, Some(Lane::Global), Some(Lane::HotShop));
        let cases: &[(i64, i64, bool, Option<Lane>)] = &[
            (0, 4, true, ok),           // hot shop takes its whole cap (4 of 4)
            (0, 1, true, shop),         // its own bucket is empty: hot_shop
            (0, 2, true, shop),         // still hot_shop (lane has 2 left, shop has 0)
            (0, 6, false, ok),          // others take the rest of global (10 - 4)
            (0, 1, false, global),      // global empty: global
            (0, 1, true, global),       // global is checked first, even for a hot shop
            (100_000, 1, false, ok),    // 0.1 s later global has refilled one token
            (250_000, 1, true, ok),     // 0.25 s: shop refilled 1, lane had 2, global 1.5
            (250_000, 1, true, global), // global has 0.5 left
        ];
        for (k, &(dt, tokens, hot, want)) in cases.iter().enumerate() {
            let (reply, next) = step(&set, &state, &hot_input(t0 + dt, tokens, hot));
            assert_eq!(reply.reason, want, "case {k}: {reply:?}");
            if want.is_some() {
                assert_eq!(next, state, "case {k}: a denial must take nothing");
            }
            state = next;
        }
    }

    #[test]
    fn marked_hot_in_store_counts_as_hot_and_lanes_not_configured_are_skipped() {
        let set = BucketSet {
            global: BucketSpec::new("global", 10, 1.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 2, 1.0).unwrap()),
        };
        let state = StoredState {
            buckets: [None; 3],
            mark_ttl_ms: Some(1500),
            ..Default::default()
        };
        let (reply, next) = step(&set, &state, &StepInput::new(5_000_000, 2));
        assert!(reply.hot);
        assert_eq!(reply.reason, None);
        assert_eq!(reply.tats[1], -1);
        assert_eq!(reply.mark_ttl_ms, 1500);
        assert_eq!(next.buckets[1], None);
        assert_eq!(next.buckets[2].map(|b| b.tat), Some(5_000_000 + 2_000_000));
        // Listed in hot_shops as well: hot whatever the mark, so its TTL bounds nothing.
        assert_eq!(
            step(&set, &state, &hot_input(5_000_000, 2, true))
                .0
                .mark_ttl_ms,
            -2
        );
    }

    #[test]
    fn a_reservation_takes_tokens_due_within_the_wait_and_never_more_than_a_full_bucket() {
        // 10 tokens at 10/s: one every 100 ms.
        let set = BucketSet {
            global: BucketSpec::new("global", 10, 10.0).unwrap(),
            hot_lane: None,
            hot_shop: None,
        };
        let t0 = 1_700_000_000_000_000;
        let (r, s) = step(&set, &StoredState::default(), &StepInput::new(t0, 10));
        assert_eq!(r.reason, None);
        let run = |tokens, max_wait_us| step(&set, &s, &reserve(t0, tokens, max_wait_us));
        // Empty: 3 tokens are 300 ms away.
        assert_eq!(run(3, 0).0.reason, Some(Lane::Global), "no wait: denied");
        assert_eq!(
            run(3, 299_999).0.reason,
            Some(Lane::Global),
            "1 µs short: denied"
        );
        let (r, next) = run(3, 300_000);
        assert_eq!(r.reason, None, "exactly the wait: allowed");
        assert_eq!(reservation_wait_us(&set, &r), 300_000);
        assert_eq!(next.buckets[0].unwrap().tat, t0 + 1_300_000);
        let (denied, untouched) = run(3, 299_999);
        assert_eq!(reservation_wait_us(&set, &denied), 0, "{denied:?}");
        assert_eq!(untouched, s, "a denied reservation takes nothing");
        // More tokens than the bucket holds when full: no wait makes them fit.
        let small = BucketSet {
            global: BucketSpec::new("global", 2, 10.0).unwrap(),
            ..set.clone()
        };
        let full = StoredState::default();
        let r = step(&small, &full, &reserve(t0, 3, 10_000_000)).0;
        assert_eq!(r.reason, Some(Lane::Global));
        // A wait that is not needed is not taken.
        let r = step(&small, &full, &reserve(t0, 2, 10_000_000)).0;
        assert_eq!((r.reason, reservation_wait_us(&small, &r)), (None, 0));
    }

    #[test]
    fn the_short_reply_is_the_global_bucket_alone() {
        // {reason, hot, now, tat_global}: the rest at their defaults.
        let r = StepReply::from_ints(&[1, 0, 2, 3]).unwrap();
        assert_eq!(
            r.to_ints(),
            ([1, 0, 2, 3, -1, -1, 0, 0, -2, 1000, 0, 0, -1], 9)
        );
        assert_eq!(r.reason, Some(Lane::Global));
        assert_eq!(StepReply::from_ints(&[0, 0, 2, 3]).unwrap().reason, None);
        // A hot bucket's denial always carries that bucket's TAT: not a short reply.
        assert!(StepReply::from_ints(&[2, 0, 2, 3]).is_none());
        assert!(StepReply::from_ints(&[3, 0, 2, 3]).is_none());
        assert!(StepReply::from_ints(&[4, 0, 2, 3]).is_none());
    }

    #[test]
    fn reply_parsing_rejects_wrong_shapes() {
        let r = StepReply::from_ints(&[0, 1, 2, 3, 4, 5, 1, 420, 900]).unwrap();
        assert!(r.became_hot && r.hot && r.reason.is_none());
        let denied = StepReply::from_ints(&[3, 1, 2, 3, 4, 5, 0, 0, -2]).unwrap();
        assert_eq!(denied.reason, Some(Lane::HotShop));
        assert_eq!(denied.to_ints().0[..9], [3, 1, 2, 3, 4, 5, 0, 0, -2]);
        assert_eq!(
            (r.share_permille, r.tats, r.mark_ttl_ms),
            (420, [3, 4, 5], 900)
        );
        assert!(StepReply::from_ints(&[4, 1, 2, 3, 4, 5, 0, 0, 0]).is_none());
        // Older reply shapes, and the "live limits changed" reply, are not decisions.
        assert!(StepReply::from_ints(&[0, 1, 2, 3, 4, 5, 1, 420]).is_none());
        assert!(StepReply::from_ints(&[0, 1, 2, 3, 4, 5]).is_none());
        assert!(StepReply::from_ints(&[-1, 3]).is_none());
        assert!(StepReply::from_ints(&[0, 1, 2]).is_none());
    }
}
