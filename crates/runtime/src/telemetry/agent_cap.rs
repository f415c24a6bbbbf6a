//! The New Relic PHP agent's cap on custom events, made visible: the events the `newrelic`
//! sink handed to `newrelic_record_custom_event()`, counted per wall-clock minute across
//! the workers that share the local denial table's memory (a php-fpm master's workers,
//! the processes forked after module start-up, the threads of a process: see
//! [`crate::denials`]), and how many of them went past the cap in force.
//!
//! New Relic documents that the PHP agent records at most 30,000 custom events a minute by
//! default, up to 100,000 with `newrelic.custom_events.max_samples_stored`
//! (<https://docs.newrelic.com/docs/apm/agents/php-agent/php-agent-api/newrelic_record_custom_event/>);
//! the agent's daemon keeps them per application and sends them each harvest, so the
//! events past the cap are sampled away, silently. Counting here cannot see what the
//! agent kept: it counts what was handed over, and what of it was past the cap.
//!
//! The counts live in [`SharedWords`] of the shared table: a packed (minute, count) word
//! for the current minute and one for the minute before, the total past the cap, and the
//! last minute a warning was said for. Every update is one atomic operation (a
//! compare-and-swap loop for the minute's count), so workers never block one another.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::denials::{self, SharedWords};

/// The INI setting of the agent's cap.
pub const CAP_SETTING: &str = "newrelic.custom_events.max_samples_stored";

/// The agent's cap when its setting is unset or invalid (New Relic's documented default).
pub const DEFAULT_CAP: u64 = 30_000;

/// The highest cap the agent takes; a higher setting is this.
pub const MAX_CAP: u64 = 100_000;

/// The cap the agent applies for its INI value (`None`: unset), parsed as the agent
/// parses it: empty, not a number or negative is the default; above [`MAX_CAP`] is
/// [`MAX_CAP`].
pub fn cap_from_setting(value: Option<&str>) -> u64 {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return DEFAULT_CAP;
    };
    let parsed = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16),
        None => v.parse::<i64>(),
    };
    match parsed {
        Ok(n) if n < 0 => DEFAULT_CAP,
        Ok(n) => (n as u64).min(MAX_CAP),
        Err(_) => DEFAULT_CAP,
    }
}

/// Word indexes in [`SharedWords`].
const CURRENT: usize = 0;
const PREVIOUS: usize = 1;
const OVER_TOTAL: usize = 2;
const WARNED: usize = 3;

fn pack(minute: u64, count: u64) -> u64 {
    (minute << 32) | count.min(u32::MAX as u64)
}

fn unpack(w: u64) -> (u64, u64) {
    (w >> 32, w & u32::MAX as u64)
}

/// One wall-clock minute's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Minute {
    /// Its start, Unix seconds (a multiple of 60).
    pub start: i64,
    /// Events handed to the agent in it.
    pub handed: u64,
}

impl Minute {
    /// The events of this minute past `cap` (none without a cap).
    pub fn over(&self, cap: Option<u64>) -> u64 {
        cap.map_or(0, |c| self.handed.saturating_sub(c))
    }
}

/// What the workers sharing the table handed to the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgentCounts {
    /// The minute `now` is in.
    pub this_minute: Minute,
    /// The minute before it.
    pub last_minute: Minute,
    /// Events handed past the cap in force when they were handed, every minute since the
    /// table was made (the php-fpm master's start).
    pub over_cap: u64,
}

/// What one [`handed`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Handed {
    /// The minute's count after these events.
    pub minute_count: u64,
    /// These events' share past the cap.
    pub over_cap: u64,
    /// Whether the warning for this minute was said by this call.
    pub warned: bool,
}

fn words() -> Option<&'static [AtomicU64; 8]> {
    denials::shared_words().map(|w: &'static SharedWords| &w.0)
}

/// Counts `n` events handed to the agent at `now_unix_s` (the system clock) under `cap`
/// (`None`: the agent's cap is unknown, nothing is past it). The first call of a minute
/// whose count goes past the cap says so once, through `warn_log`'s writer (once per
/// minute for every process sharing the table).
pub fn handed(n: u64, cap: Option<u64>, now_unix_s: i64) -> Handed {
    let Some(w) = words() else {
        return Handed::default();
    };
    handed_in(w, n, cap, now_unix_s)
}

fn handed_in(w: &[AtomicU64; 8], n: u64, cap: Option<u64>, now_unix_s: i64) -> Handed {
    if n == 0 {
        return Handed::default();
    }
    let now_minute = (now_unix_s.max(0) / 60) as u64;
    let mut cur = w[CURRENT].load(Ordering::Relaxed);
    let (minute, before, rolled) = loop {
        let (m, c) = unpack(cur);
        // A minute already begun by a process whose clock is ahead: counted in it.
        let (minute, before) = if now_minute > m {
            (now_minute, 0)
        } else {
            (m, c)
        };
        match w[CURRENT].compare_exchange_weak(
            cur,
            pack(minute, before + n),
            Ordering::AcqRel,
            Ordering::Relaxed,
        ) {
            Ok(_) => break (minute, before, (minute != m && cur != 0).then_some(cur)),
            Err(seen) => cur = seen,
        }
    };
    if let Some(old) = rolled {
        // The minute that ended, final: no increment lands in it any more.
        w[PREVIOUS].fetch_max(old, Ordering::AcqRel);
    }
    let after = before + n;
    let over = cap.map_or(0, |c| after.saturating_sub(c) - before.saturating_sub(c));
    if over > 0 {
        w[OVER_TOTAL].fetch_add(over, Ordering::AcqRel);
    }
    let warned = over > 0 && w[WARNED].fetch_max(minute + 1, Ordering::AcqRel) < minute + 1;
    if warned {
        let cap = cap.unwrap_or_default();
        let at = minute * 60;
        crate::warn_log::write(&format!(
            "checkout_guard: more than {cap} events handed to the New Relic agent in the \
             minute from {:02}:{:02} UTC (Unix {at}), past the agent's cap ({CAP_SETTING} = \
             {cap}): the agent samples custom events past it, so New Relic does not get every \
             call this minute. Telemetry::stats()['sinks']['newrelic'] counts them (over_cap); \
             the jsonl and stream sinks keep every event (docs/telemetry.md)",
            (minute / 60) % 24,
            minute % 60,
        ));
    }
    Handed {
        minute_count: after,
        over_cap: over,
        warned,
    }
}

/// The counts at `now_unix_s` (the system clock), across the processes sharing the table.
pub fn counts(now_unix_s: i64) -> AgentCounts {
    match words() {
        Some(w) => counts_in(w, now_unix_s),
        None => AgentCounts::default(),
    }
}

fn counts_in(w: &[AtomicU64; 8], now_unix_s: i64) -> AgentCounts {
    let now_minute = (now_unix_s.max(0) / 60) as u64;
    let (cm, cc) = unpack(w[CURRENT].load(Ordering::Acquire));
    let (pm, pc) = unpack(w[PREVIOUS].load(Ordering::Acquire));
    // A count of a clock ahead of ours is this minute's.
    let this_minute = now_minute.max(cm);
    let count_of = |minute: u64| {
        if cm == minute && cc > 0 {
            cc
        } else if pm == minute {
            pc
        } else {
            0
        }
    };
    let minute = |m: u64| Minute {
        start: (m * 60) as i64,
        handed: count_of(m),
    };
    AgentCounts {
        this_minute: minute(this_minute),
        last_minute: minute(this_minute.saturating_sub(1)),
        over_cap: w[OVER_TOTAL].load(Ordering::Acquire),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> [AtomicU64; 8] {
        Default::default()
    }

    #[test]
    fn the_setting_is_read_as_the_agent_reads_it() {
        assert_eq!(cap_from_setting(None), 30_000);
        assert_eq!(cap_from_setting(Some("")), 30_000);
        assert_eq!(cap_from_setting(Some(" 50 ")), 50);
        assert_eq!(cap_from_setting(Some("0")), 0);
        assert_eq!(cap_from_setting(Some("-1")), 30_000);
        assert_eq!(cap_from_setting(Some("lots")), 30_000);
        assert_eq!(cap_from_setting(Some("250000")), 100_000);
        assert_eq!(cap_from_setting(Some("0x10")), 16);
    }

    #[test]
    fn a_minute_counts_what_was_handed_and_what_went_past_the_cap() {
        let w = fresh();
        let t = 1_700_000_040; // a minute's start
        assert_eq!(handed_in(&w, 30, Some(50), t).over_cap, 0);
        let h = handed_in(&w, 30, Some(50), t + 10);
        assert_eq!((h.minute_count, h.over_cap), (60, 10));
        assert_eq!(handed_in(&w, 5, Some(50), t + 59).over_cap, 5);
        let c = counts_in(&w, t + 59);
        assert_eq!(
            c.this_minute,
            Minute {
                start: t,
                handed: 65
            }
        );
        assert_eq!(c.this_minute.over(Some(50)), 15);
        assert_eq!(c.last_minute.handed, 0);
        assert_eq!(c.over_cap, 15);
        // The next minute starts afresh; the one before is the last minute.
        let h = handed_in(&w, 7, Some(50), t + 60);
        assert_eq!((h.minute_count, h.over_cap), (7, 0));
        let c = counts_in(&w, t + 61);
        assert_eq!(
            c.this_minute,
            Minute {
                start: t + 60,
                handed: 7
            }
        );
        assert_eq!(
            c.last_minute,
            Minute {
                start: t,
                handed: 65
            }
        );
        // Read a minute on, with nothing handed since: 7 is the last minute's.
        let c = counts_in(&w, t + 125);
        assert_eq!(c.this_minute.handed, 0);
        assert_eq!(
            c.last_minute,
            Minute {
                start: t + 60,
                handed: 7
            }
        );
        // Two minutes on: nothing in either.
        let c = counts_in(&w, t + 185);
        assert_eq!((c.this_minute.handed, c.last_minute.handed), (0, 0));
        assert_eq!(c.over_cap, 15);
    }

    #[test]
    fn without_a_cap_nothing_is_past_it() {
        let w = fresh();
        let h = handed_in(&w, 100, None, 600);
        assert_eq!((h.minute_count, h.over_cap, h.warned), (100, 0, false));
        assert_eq!(counts_in(&w, 600).this_minute.over(None), 0);
    }

    #[test]
    fn the_warning_is_said_once_a_minute() {
        let w = fresh();
        let t = 1_700_000_040;
        assert!(!handed_in(&w, 2, Some(3), t).warned);
        assert!(handed_in(&w, 2, Some(3), t + 1).warned);
        assert!(!handed_in(&w, 2, Some(3), t + 2).warned);
        assert!(!handed_in(&w, 9, Some(3), t + 59).warned);
        assert!(handed_in(&w, 4, Some(3), t + 60).warned);
        assert!(!handed_in(&w, 4, Some(3), t + 61).warned);
    }

    #[test]
    fn a_clock_behind_counts_into_the_minute_already_begun() {
        let w = fresh();
        let t = 1_700_000_040;
        handed_in(&w, 3, Some(10), t + 60);
        let h = handed_in(&w, 2, Some(10), t + 59);
        assert_eq!(h.minute_count, 5);
        assert_eq!(
            counts_in(&w, t + 59).this_minute,
            Minute {
                start: t + 60,
                handed: 5
            }
        );
    }
}
