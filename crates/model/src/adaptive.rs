//! The adaptive budget (the `adaptive` option): what share of its limits a limiter
//! decides with after the provider answered "too fast", shared by every worker through
//! one key in Valkey (`Keys::adapt`), and the provider's `Retry-After` pause.
//!
//! The stored state is one string, `"<t0>:<k>:<wmax>:<pause_until>"` (µs, µs, permille,
//! µs; digits only): the instant of the last decrease `t0`, the time `k` the budget takes
//! to climb back to `wmax` (the share in force when the provider throttled), and until
//! when the provider asked to be left alone (0: never). The share at `now` is CUBIC's
//! window (RFC 9438) over the limits, in permille:
//!
//! ```text
//! x = (max(now - t0, 0) - k) / recover_us
//! share = floor(wmax + (1000 - floor) * x³), clamped to [floor, 1000]
//! ```
//!
//! so right after a decrease it is `wmax * decrease`, it climbs fast and then flattens
//! towards `wmax` (where the provider throttled last: most of the time is spent just
//! below it), and past `wmax` it probes upwards ever faster; from the floor (`wmax` =
//! floor, `k` = 0) it is back at 1000 after exactly `recover_us`. Every engine computes
//! it with the same double operations (the script's Lua, this module in the native
//! module and the tests), so they agree to the permille.
//!
//! A decision scales each bucket to the share ([`scaled`]): capacity
//! `max(1, floor(capacity * share / 1000))`, interval `ceil(interval * 1000 / share)`
//! (never faster than the share of the rate). A bucket's level in tokens carries over
//! each change of the share as over a live change (`StoredBucket::effective_tat`): the
//! stored bucket carries the interval and tolerance it was written with.
//!
//! A throttling answer ([`feedback`]) decreases the share only when the last decrease is
//! at least [`COOLDOWN_US`] old: the answers to calls admitted before a decrease keep
//! arriving for about the provider's latency after it, from every worker at once, and
//! counting each would cut the budget to the floor in one burst of 429s. One second is
//! the longest the issue allows and covers a provider's p99 latency (tens to hundreds of
//! ms) many times over; CUBIC itself reacts once per round trip.

use std::borrow::Cow;

use crate::bucket::{BucketSet, BucketSpec, MAX_STORED_NUMBER};

/// At most one decrease per this many µs, however many workers report a throttling
/// answer.
pub const COOLDOWN_US: i64 = 1_000_000;
/// The longest pause a provider's `Retry-After` imposes: 60 s (a broken header saying a
/// day must not stop checkouts for a day).
pub const MAX_PAUSE_US: i64 = 60_000_000;
/// The largest `Retry-After` taken as given, in seconds: 2^53, the largest whole number a
/// float holds exactly (and a PHP int too). A larger one, or INF (what PHP makes of a
/// delta-seconds of 309 digits or more), reads as this: far beyond [`MAX_PAUSE_US`],
/// so the longest pause, never an error. `ProviderFeedback::retryAfterSeconds()` caps at
/// the same value.
pub const MAX_RETRY_AFTER_SECONDS: f64 = 9_007_199_254_740_992.0;
/// Full share, permille.
pub const FULL: i64 = 1000;

/// What a decision needs of the `adaptive` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptParams {
    /// The floor in permille (1..=1000; 1000: never decreased).
    pub floor_permille: i64,
    /// µs from the floor back to the limits (at least 1).
    pub recover_us: i64,
}

impl AdaptParams {
    pub fn new(min_share: f64, recover_seconds: f64) -> Self {
        Self {
            floor_permille: ((min_share * 1000.0).round() as i64).clamp(1, FULL),
            recover_us: ((recover_seconds * 1e6).round() as i64).max(1),
        }
    }
}

/// The stored state (see the module's documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AdaptState {
    pub t0: i64,
    pub k_us: i64,
    pub wmax: i64,
    pub pause_until: i64,
}

impl AdaptState {
    /// The value as the scripts write it.
    pub fn encode(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.t0, self.k_us, self.wmax, self.pause_until
        )
    }

    /// A stored value as the scripts read it: four fields of ASCII digits separated by
    /// `:`, each at most 2^53 - 1, `wmax` at most 1000. Anything else reads as no state
    /// (the full budget), and the next throttling answer replaces it.
    pub fn read_like_the_script(raw: &[u8]) -> Option<Self> {
        let mut f = [0i64; 4];
        let mut parts = raw.split(|&b| b == b':');
        for slot in &mut f {
            let p = parts.next()?;
            if p.is_empty() || !p.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let mut n: i64 = 0;
            for &b in p {
                n = n * 10 + i64::from(b - b'0');
                if n > MAX_STORED_NUMBER {
                    return None;
                }
            }
            *slot = n;
        }
        if parts.next().is_some() || f[2] > FULL {
            return None;
        }
        Some(Self {
            t0: f[0],
            k_us: f[1],
            wmax: f[2],
            pause_until: f[3],
        })
    }

    /// The share in force at `now`, permille (the script's arithmetic, in doubles).
    pub fn permille_at(&self, now: i64, p: &AdaptParams) -> i64 {
        let dt = (now - self.t0).max(0) as f64;
        let x = (dt - self.k_us as f64) / p.recover_us as f64;
        let w = (self.wmax as f64 + (FULL - p.floor_permille) as f64 * (x * x * x)).floor();
        if w > FULL as f64 {
            FULL
        } else if w < p.floor_permille as f64 {
            p.floor_permille
        } else {
            w as i64
        }
    }

    /// Whether the provider's pause holds at `now`.
    pub fn paused_at(&self, now: i64) -> bool {
        self.pause_until > now
    }

    /// The instant the share is back at 1000 (µs), with no more throttling:
    /// `t0 + k + recover_us * cbrt((1000 - wmax) / (1000 - floor))`.
    pub fn recovered_at(&self, p: &AdaptParams) -> i64 {
        if p.floor_permille >= FULL {
            return self.t0;
        }
        let rest =
            ((FULL - self.wmax).max(0) as f64 / (FULL - p.floor_permille) as f64).powf(1.0 / 3.0);
        self.t0
            .saturating_add(self.k_us)
            .saturating_add((p.recover_us as f64 * rest).ceil() as i64)
    }
}

/// One bucket at `permille` of its limits (see the module's documentation), from the
/// integers the script has: interval and tolerance (µs).
pub fn scaled_args(interval_us: i64, tolerance_us: i64, permille: i64) -> (i64, i64) {
    if permille >= FULL {
        return (interval_us, tolerance_us);
    }
    let p = permille as f64;
    let cap = (tolerance_us as f64 / interval_us as f64).floor();
    let cap = ((cap * p / 1000.0).floor() as i64).max(1);
    let interval = (interval_us as f64 * 1000.0 / p).ceil() as i64;
    (interval, cap * interval)
}

/// One bucket at `permille` of its limits (an endpoint's bucket scales with the others).
pub fn scaled_spec(spec: &BucketSpec, permille: i64) -> BucketSpec {
    let (i, t) = scaled_args(spec.interval_us(), spec.tolerance_us(), permille);
    BucketSpec::from_script_args(i, t).unwrap_or(*spec)
}

/// Every bucket of `set` at `permille` of its limits: `set` itself, borrowed, at 1000 (what
/// every decision without an adaptive state decodes its reply with: no copy on that path).
pub fn scaled(set: &BucketSet, permille: i64) -> Cow<'_, BucketSet> {
    if permille >= FULL {
        return Cow::Borrowed(set);
    }
    Cow::Owned(BucketSet {
        global: scaled_spec(&set.global, permille),
        hot_lane: set.hot_lane.as_ref().map(|s| scaled_spec(s, permille)),
        hot_shop: set.hot_shop.as_ref().map(|s| scaled_spec(s, permille)),
    })
}

/// The last throttling answer reported (`Keys::adapt_last`), for `limiter status` and
/// `health()`: `"<status>:<µs>:<retry after µs>"` (Valkey's clock; 0: no `Retry-After`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastThrottle {
    pub status: i64,
    pub at_us: i64,
    pub retry_after_us: i64,
}

impl LastThrottle {
    pub fn encode(&self) -> String {
        format!("{}:{}:{}", self.status, self.at_us, self.retry_after_us)
    }

    pub fn parse(raw: &[u8]) -> Option<Self> {
        let text = std::str::from_utf8(raw).ok()?;
        let mut it = text.split(':').map(|p| p.parse::<i64>().ok());
        let (status, at_us, retry_after_us) = (it.next()??, it.next()??, it.next()??);
        if it.next().is_some() {
            return None;
        }
        Some(Self {
            status,
            at_us,
            retry_after_us,
        })
    }
}

/// What a throttling answer did ([`feedback`]): the share before and after (permille),
/// whether this answer decreased it (else the cooldown held), and the pause in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeedbackOutcome {
    pub decreased: bool,
    pub from: i64,
    pub to: i64,
    /// The provider's pause extended by this answer.
    pub paused: bool,
    /// Until when the limiter is paused (µs; 0: never).
    pub pause_until: i64,
    pub now: i64,
    /// What to store, and for how long (ms): until recovered and unpaused, and a minute.
    pub next: AdaptState,
    pub px_ms: i64,
}

impl FeedbackOutcome {
    /// The script's reply: `{decreased, from, to, paused, pause_until, now}`.
    pub fn to_ints(&self) -> [i64; 6] {
        [
            self.decreased as i64,
            self.from,
            self.to,
            self.paused as i64,
            self.pause_until,
            self.now,
        ]
    }

    /// Reads [`Self::to_ints`] back (the stored state is not in the reply).
    pub fn from_ints(v: &[i64]) -> Option<Self> {
        match *v {
            [d, from, to, paused, pause_until, now] if (0..=1).contains(&d) => Some(Self {
                decreased: d == 1,
                from,
                to,
                paused: paused == 1,
                pause_until,
                now,
                next: AdaptState::default(),
                px_ms: 0,
            }),
            _ => None,
        }
    }
}

/// A throttling answer at `now`: the share decreased by `decrease` (not below the floor)
/// unless the last decrease is younger than [`COOLDOWN_US`]; with `retry_after_us` > 0
/// the limiter paused until `now + min(retry_after_us, MAX_PAUSE_US)` (never shortened).
/// The Lua twin is `feedback.lua`.
pub fn feedback(
    stored: Option<AdaptState>,
    now: i64,
    p: &AdaptParams,
    decrease: f64,
    retry_after_us: i64,
) -> FeedbackOutcome {
    let fresh = AdaptState {
        t0: 0,
        k_us: 0,
        wmax: FULL,
        pause_until: 0,
    };
    let mut s = stored.unwrap_or(fresh);
    let from = s.permille_at(now, p);
    let mut decreased = false;
    if p.floor_permille < FULL && (stored.is_none() || now - s.t0 >= COOLDOWN_US) {
        let s0 = ((from as f64 * decrease).floor() as i64).max(p.floor_permille);
        let k = (p.recover_us as f64
            * ((from - s0) as f64 / (FULL - p.floor_permille) as f64).powf(1.0 / 3.0))
        .floor() as i64;
        s.t0 = now;
        s.k_us = k;
        s.wmax = from;
        decreased = true;
    }
    let mut paused = false;
    if retry_after_us > 0 {
        let until = now.saturating_add(retry_after_us.min(MAX_PAUSE_US));
        if until > s.pause_until {
            s.pause_until = until;
            paused = true;
        }
    }
    let to = s.permille_at(now, p);
    let end = s.recovered_at(p).max(s.pause_until);
    // As the script: a minute more (`59999 + slack_ms`, slack 1 ms on Valkey's clock).
    let px_ms = (end - now).max(0) / 1000 + 60_000;
    FeedbackOutcome {
        decreased,
        from,
        to,
        paused,
        pause_until: if s.paused_at(now) { s.pause_until } else { 0 },
        now,
        next: s,
        px_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> AdaptParams {
        AdaptParams::new(0.1, 60.0)
    }

    #[test]
    fn the_stored_state_reads_only_what_the_scripts_write() {
        let s = AdaptState {
            t0: 1_800_000_000_000_000,
            k_us: 12,
            wmax: 700,
            pause_until: 0,
        };
        assert_eq!(
            AdaptState::read_like_the_script(s.encode().as_bytes()),
            Some(s)
        );
        for bad in [
            "",
            "1:2:3",
            "1:2:3:4:5",
            "1:2:1001:4",
            "-1:2:3:4",
            "1:2:3:",
            "a:2:3:4",
            "1:2:3:9007199254740992",
            " 1:2:3:4",
            "1.0:2:3:4",
        ] {
            assert_eq!(
                AdaptState::read_like_the_script(bad.as_bytes()),
                None,
                "{bad}"
            );
        }
    }

    #[test]
    fn decreases_once_per_cooldown_and_climbs_back_to_the_limits() {
        let p = params();
        let t = 1_800_000_000_000_000;
        let a = feedback(None, t, &p, 0.7, 0);
        assert!(a.decreased);
        assert_eq!((a.from, a.to), (1000, 700));
        // Within the cooldown: counted as the same overload.
        let b = feedback(Some(a.next), t + COOLDOWN_US - 1, &p, 0.7, 0);
        assert!(!b.decreased);
        assert_eq!(b.next, a.next);
        let c = feedback(Some(a.next), t + COOLDOWN_US, &p, 0.7, 0);
        assert!(c.decreased);
        // In that second the budget climbed (towards 1000, where the provider throttled
        // first); the decrease applies to what was in force.
        assert!(c.from > 700 && c.from < 750, "{c:?}");
        assert_eq!(c.to, (c.from as f64 * 0.7).floor() as i64, "{c:?}");
        // Concave back to where the provider throttled, then convex to 1000.
        let s = c.next;
        let at = |dt: i64| s.permille_at(t + COOLDOWN_US + dt, &p);
        assert!(
            at(s.k_us / 2) > c.to + (c.from - c.to) * 3 / 4,
            "{}",
            at(s.k_us / 2)
        );
        assert!((c.from - 1..=c.from).contains(&at(s.k_us)));
        let full = s.recovered_at(&p);
        assert_eq!(s.permille_at(full, &p), 1000);
        assert!(s.permille_at(full - 1_000_000, &p) < 1000);
        // Never below the floor.
        let mut st = None;
        let mut now = t;
        for _ in 0..20 {
            let o = feedback(st, now, &p, 0.7, 0);
            assert!(o.to >= 100);
            st = Some(o.next);
            now += COOLDOWN_US;
        }
        let floor = st.unwrap();
        assert_eq!(floor.permille_at(now, &p), 100);
        // From the floor: back to the limits in recover_seconds exactly.
        let o = feedback(st, now, &p, 0.7, 0);
        assert_eq!(o.to, 100);
        assert_eq!(o.next.permille_at(now + 60_000_000, &p), 1000);
        assert!(o.next.permille_at(now + 59_000_000, &p) < 1000);
    }

    #[test]
    fn retry_after_pauses_bounded_and_never_shortened() {
        let p = params();
        let t = 1_000_000_000;
        let a = feedback(None, t, &p, 0.7, 5_000_000);
        assert!(a.paused && a.next.paused_at(t + 4_999_999) && !a.next.paused_at(t + 5_000_000));
        let b = feedback(Some(a.next), t + 1, &p, 0.7, 1_000_000);
        assert!(!b.paused);
        assert_eq!(b.pause_until, t + 5_000_000);
        let c = feedback(None, t, &p, 0.7, 86_400_000_000);
        assert_eq!(c.pause_until, t + MAX_PAUSE_US);
        // min_share 1: never decreased, still paused.
        let off = AdaptParams::new(1.0, 60.0);
        let d = feedback(None, t, &off, 0.7, 2_000_000);
        assert!(!d.decreased && d.paused && d.to == 1000);
    }

    #[test]
    fn scaling_never_exceeds_the_share_of_the_limits() {
        let set = BucketSet {
            global: BucketSpec::new("global", 30, 45.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 8, 30.0).unwrap()),
            hot_shop: None,
        };
        assert_eq!(*scaled(&set, 1000), set);
        assert!(matches!(scaled(&set, 1000), Cow::Borrowed(_)));
        for permille in [1, 100, 333, 600, 700, 999] {
            let s = scaled(&set, permille);
            let share = permille as f64 / 1000.0;
            assert!(s.global.refill_per_second() <= 45.0 * share + 1e-9);
            assert!(s.global.capacity() as f64 <= (30.0 * share).max(1.0));
            assert!(s.global.capacity() >= 1);
            let lane = s.hot_lane.unwrap();
            assert!(lane.refill_per_second() <= s.global.refill_per_second());
        }
        assert_eq!(scaled_args(22_223, 222_230, 600), (37_039, 222_234));
    }
}
