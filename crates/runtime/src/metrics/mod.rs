//! Live counters for on-call (issue 40): decisions, local denials, the adaptive share,
//! external calls' latency and telemetry's sinks, kept in memory shared by the workers of
//! one php-fpm master and rendered in Prometheus' text format ([`render`]).
//!
//! Where they live: in the mapping of the local-denial table ([`crate::denials`]), after
//! its entries, so they are shared exactly as the table is: made at module start-up in the
//! master and inherited by every worker (the extension loaded globally), or a file in
//! `/dev/shm` named after the master that each worker maps (loaded per pool); private to
//! the process elsewhere (`php -S`, the CLI without a master). Threads of one process
//! (ZTS) share it as any memory.
//!
//! What a restart does: a worker killed or recycled (`pm.max_requests`) loses nothing, its
//! increments are in the shared memory; a master restarted or reloaded (`SIGUSR2` re-runs
//! module start-up) makes a new mapping: its counters start at zero, and
//! `checkout_guard_metrics_start_time_seconds` says when (Prometheus' `rate()` and
//! `increase()` treat the drop as a counter reset). Within one master's life a counter
//! never goes backwards: increments are atomic adds, never rewritten.
//!
//! The request path takes no lock and makes no round trip: a series (one label set) is a
//! slot of a fixed table found by its key's hash, claimed once with a compare-and-swap,
//! then only atomically added to. Two workers that claim the same label set at once may
//! each get a slot; [`render`] adds duplicates up. A worker killed between claiming a slot
//! and publishing its labels leaves that slot unused for the master's life. A label set
//! that finds no free slot (more than [`SERIES`] of them) is counted in
//! `checkout_guard_metrics_series_dropped_total`, never an error.
//!
//! Bounded labels only: limiter names (at most 64 bytes each, set by the code), reasons,
//! outcomes, modes, sink names, status classes and `api` names (set by the code; a longer
//! one is cut to fit the slot). No shop id is ever a label.

mod render;

pub use render::{render, CONTENT_TYPE_OPENMETRICS, CONTENT_TYPE_PROMETHEUS};

use std::hash::Hasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Label sets the table holds (a power of two): 1024 x 320 bytes = 320 KiB.
pub const SERIES: usize = 1024;
/// Of them, the limiters' and the sinks' families; the rest are external calls'.
pub const LIMITER_SERIES: usize = 768;
/// A series' key (family and label values) fits in this many bytes.
const KEY_BYTES: usize = 112;
const KEY_WORDS: usize = KEY_BYTES / 8;
/// A series' values: a counter or gauge uses the first (a gauge's second is when it was
/// set), a histogram one per bucket, then its sum.
const VALUES: usize = 18;

/// `http.client.request.duration`'s bucket boundaries in seconds, as OpenTelemetry's HTTP
/// semantic conventions advise them (the histogram's `+Inf` bucket follows).
pub const DURATION_BOUNDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// A histogram's sum (ns) is this value index.
const SUM: usize = DURATION_BOUNDS.len() + 1;

/// A tightest bucket at or under this share of its capacity after an allowed decision
/// counts as near its limit (envoyproxy/ratelimit's `near_limit` is 80% used).
pub const NEAR_LIMIT_SHARE: f64 = 0.2;

/// A claimed slot whose key is being written.
const CLAIMING: u64 = 1;
/// Published slots' states have this bit set (so never 0 or [`CLAIMING`]).
const PUBLISHED: u64 = 1 << 63;

/// One label set: published once, then only added to.
#[repr(C, align(64))]
pub struct Series {
    /// 0: free; [`CLAIMING`]; else the key's hash with [`PUBLISHED`] set.
    state: AtomicU64,
    /// The key's length in bytes.
    len: AtomicU64,
    key: [AtomicU64; KEY_WORDS],
    values: [AtomicU64; VALUES],
}

/// The counters' part of the shared mapping. All-zero is a valid, empty region.
#[repr(C, align(64))]
pub struct Region {
    /// Unix time in ms when the first process used the region (0 until then).
    started_ms: AtomicU64,
    /// Label sets that found no free slot.
    dropped: AtomicU64,
    /// Which exec of the php-fpm master the counters are of, where workers share them
    /// through a file named after the master ([`Region::adopt_generation`]); 0: not set.
    generation: AtomicU64,
    _pad: [AtomicU64; 5],
    series: [Series; SERIES],
}

/// The metric families: their names, types and label names ([`render`] writes them in
/// this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Family {
    Decisions = 1,
    NearLimit,
    LocalDenials,
    ValkeyDecisions,
    ReservationsWaited,
    ReservationWaitSeconds,
    AdaptiveShare,
    ProviderThrottled,
    EventsWritten,
    EventsDropped,
    HttpDuration,
}

/// How a family is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A counter of whole things.
    Counter,
    /// A counter of nanoseconds, written in seconds.
    SecondsCounter,
    /// A value set, the latest wins.
    Gauge,
    /// [`DURATION_BOUNDS`]' buckets, the sum in nanoseconds (written in seconds).
    Histogram,
}

impl Family {
    pub const ALL: [Family; 11] = [
        Family::Decisions,
        Family::NearLimit,
        Family::LocalDenials,
        Family::ValkeyDecisions,
        Family::ReservationsWaited,
        Family::ReservationWaitSeconds,
        Family::AdaptiveShare,
        Family::ProviderThrottled,
        Family::EventsWritten,
        Family::EventsDropped,
        Family::HttpDuration,
    ];

    fn from_u8(v: u8) -> Option<Family> {
        Family::ALL.into_iter().find(|f| *f as u8 == v)
    }

    /// The family's name without a counter's `_total` (OpenMetrics names families so).
    pub fn base_name(self) -> &'static str {
        match self {
            Family::Decisions => "checkout_guard_decisions",
            Family::NearLimit => "checkout_guard_near_limit",
            Family::LocalDenials => "checkout_guard_local_denials",
            Family::ValkeyDecisions => "checkout_guard_valkey_decisions",
            Family::ReservationsWaited => "checkout_guard_reservations_waited",
            Family::ReservationWaitSeconds => "checkout_guard_reservation_wait_seconds",
            Family::AdaptiveShare => "checkout_guard_adaptive_share",
            Family::ProviderThrottled => "checkout_guard_provider_throttled",
            Family::EventsWritten => "checkout_guard_events_written",
            Family::EventsDropped => "checkout_guard_events_dropped",
            Family::HttpDuration => "http_client_request_duration_seconds",
        }
    }

    pub fn kind(self) -> Kind {
        match self {
            Family::AdaptiveShare => Kind::Gauge,
            Family::HttpDuration => Kind::Histogram,
            Family::ReservationWaitSeconds => Kind::SecondsCounter,
            _ => Kind::Counter,
        }
    }

    pub fn labels(self) -> &'static [&'static str] {
        match self {
            Family::Decisions => &["limiter", "outcome", "reason", "mode"],
            Family::ValkeyDecisions => &["limiter", "engine"],
            Family::EventsWritten | Family::EventsDropped => &["sink"],
            Family::HttpDuration => &["api", "status_class"],
            _ => &["limiter"],
        }
    }

    pub fn help(self) -> &'static str {
        match self {
            Family::Decisions => {
                "acquire() decisions, by limiter, outcome (allowed/denied: what isAllowed() answered), \
                 reason (Decision::reason(); a shadow-mode would-deny is allowed with its reason) and mode"
            }
            Family::NearLimit => {
                "Allowed decisions that left the tightest bucket at or under 20% of its capacity"
            }
            Family::LocalDenials => {
                "Denials made in the worker without asking Valkey (counted in decisions_total too)"
            }
            Family::ValkeyDecisions => "Decisions Valkey made, by the engine this worker last used",
            Family::ReservationsWaited => "Reservations (maxWaitSeconds) that slept for their tokens",
            Family::ReservationWaitSeconds => "Seconds reservations slept for their tokens",
            Family::AdaptiveShare => {
                "The adaptive budget's share of the configured rates in force (1: all), as last seen by a worker"
            }
            Family::ProviderThrottled => {
                "Throttling answers (429, Retry-After) reported with feedback() that the adaptive budget counts"
            }
            Family::EventsWritten => "Telemetry events written, by sink",
            Family::EventsDropped => "Telemetry events dropped (not written), by sink",
            Family::HttpDuration => {
                "External API calls measured by Telemetry::measure() / recordCall(): duration in seconds \
                 (OpenTelemetry http.client.request.duration), by api and status class"
            }
        }
    }
}

/// Whether counting is on in this process (`checkout_guard.metrics`, default on).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// Turns counting on or off in this process (the extension reads `checkout_guard.metrics`).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// This process's execution of its program, as 64 bits: the 16 random bytes the kernel
/// gave the exec (`AT_RANDOM`), hashed (they seed the stack protector: never shown). The
/// same in every process forked from it (php-fpm's workers), another after a re-exec.
pub fn exec_generation() -> u64 {
    // SAFETY: getauxval never fails; AT_RANDOM, when present, is the address of 16 bytes
    // the kernel placed on the initial stack, readable for the process's life.
    let bytes = unsafe {
        let p = libc::getauxval(libc::AT_RANDOM) as *const u8;
        if p.is_null() {
            return 1;
        }
        std::slice::from_raw_parts(p, 16)
    };
    let mut h = rustc_hash::FxHasher::default();
    h.write(b"checkout-guard metrics generation");
    h.write(bytes);
    h.finish().max(1)
}

/// This process's region (the local-denial table's mapping), `None` if none could be mapped.
pub fn region() -> Option<&'static Region> {
    crate::denials::metrics_region()
}

/// Unix time in ms now.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Region {
    /// Unix time in ms when the region was first used (set now if it was not).
    pub fn started_ms(&self) -> u64 {
        let t = self.started_ms.load(Ordering::Relaxed);
        if t != 0 {
            return t;
        }
        let now = now_ms().max(1);
        match self
            .started_ms
            .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(_) => now,
            Err(other) => other,
        }
    }

    /// For workers that map the counters from a file named after their master (the
    /// extension loaded per pool): a php-fpm reload (`SIGUSR2`) re-executes the master in
    /// the same process, so the same file is found again, and its counters would carry
    /// on. `generation` tells the master's executions apart; the first worker of a new
    /// one starts the counters from zero (and a new start time), as a reload does where
    /// the extension is loaded globally. A worker of the new master that counted while
    /// another was clearing (the first requests, microseconds) may lose those counts.
    pub fn adopt_generation(&self, generation: u64) {
        let seen = self.generation.load(Ordering::Acquire);
        if seen == generation {
            return;
        }
        if self
            .generation
            .compare_exchange(seen, generation, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
            || seen == 0
        {
            // Another worker adopted it first, or these are the first counters: nothing
            // to clear.
            return;
        }
        for s in &self.series {
            s.state.store(0, Ordering::Relaxed);
            s.len.store(0, Ordering::Relaxed);
            for v in &s.values {
                v.store(0, Ordering::Relaxed);
            }
        }
        self.dropped.store(0, Ordering::Relaxed);
        self.started_ms.store(now_ms().max(1), Ordering::Release);
    }

    pub fn series_dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The slot of `key`, claimed if it has none: `None` when its part of the table is
    /// full (the caller counts the increment lost: [`Region::lost`]).
    fn series(&self, key: &Key) -> Option<&Series> {
        self.started_ms();
        let bytes = key.bytes();
        let mut h = rustc_hash::FxHasher::default();
        h.write(bytes);
        let hash = h.finish();
        let tag = hash | PUBLISHED;
        // External calls (their `api` names are the caller's) have a part of the table of
        // their own: however many names a checkout measures, the limiters' and the sinks'
        // series keep their room.
        let (base, len) = match bytes.first().and_then(|f| Family::from_u8(*f)) {
            Some(Family::HttpDuration) => (LIMITER_SERIES, SERIES - LIMITER_SERIES),
            _ => (0, LIMITER_SERIES),
        };
        let start = (hash as usize) % len;
        for i in 0..len {
            let s = &self.series[base + (start + i) % len];
            let mut st = s.state.load(Ordering::Acquire);
            if st == 0 {
                match s
                    .state
                    .compare_exchange(0, CLAIMING, Ordering::Acquire, Ordering::Acquire)
                {
                    Ok(_) => {
                        s.write_key(bytes);
                        s.state.store(tag, Ordering::Release);
                        return Some(s);
                    }
                    Err(now) => st = now,
                }
            }
            if st == tag && s.key_is(bytes) {
                return Some(s);
            }
        }
        None
    }

    /// An increment (or a gauge's value) that found no slot: counted, and said in PHP's
    /// log at most once a minute.
    fn lost(&self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        let now = crate::clock::SystemClock::monotonic_ns();
        crate::warn_log::warn(&["metrics"], "table full", now, || {
            format!(
                "PHP Warning:  checkout_guard: the live counters' table is full ({LIMITER_SERIES} label sets \
                 for the limiters and sinks, {} for external calls by api and status class): counts of \
                 label sets not yet in it are lost (checkout_guard_metrics_series_dropped_total counts \
                 them); too many distinct `api` names? (said at most once a minute)",
                SERIES - LIMITER_SERIES
            )
        });
    }

    /// Every published series' key and values (`render`'s input).
    fn published(&self) -> impl Iterator<Item = (Vec<u8>, [u64; VALUES])> + '_ {
        self.series.iter().filter_map(|s| {
            let st = s.state.load(Ordering::Acquire);
            if st & PUBLISHED == 0 {
                return None;
            }
            let key = s.read_key();
            let values = std::array::from_fn(|i| s.values[i].load(Ordering::Relaxed));
            Some((key, values))
        })
    }
}

impl Series {
    fn write_key(&self, bytes: &[u8]) {
        self.len.store(bytes.len() as u64, Ordering::Relaxed);
        for (i, w) in self.key.iter().enumerate() {
            let mut word = [0u8; 8];
            let from = (i * 8).min(bytes.len());
            let to = (from + 8).min(bytes.len());
            word[..to - from].copy_from_slice(&bytes[from..to]);
            w.store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
    }

    fn read_key(&self) -> Vec<u8> {
        let len = (self.len.load(Ordering::Relaxed) as usize).min(KEY_BYTES);
        let mut out = Vec::with_capacity(KEY_BYTES);
        for w in &self.key {
            out.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        out.truncate(len);
        out
    }

    fn key_is(&self, bytes: &[u8]) -> bool {
        if self.len.load(Ordering::Relaxed) as usize != bytes.len() {
            return false;
        }
        self.key.iter().enumerate().all(|(i, w)| {
            let mut word = [0u8; 8];
            let from = (i * 8).min(bytes.len());
            let to = (from + 8).min(bytes.len());
            word[..to - from].copy_from_slice(&bytes[from..to]);
            w.load(Ordering::Relaxed) == u64::from_le_bytes(word)
        })
    }
}

/// A series' key on the stack: the family, then each label value as its length (one byte)
/// and bytes. A value that does not fit is cut (on a character boundary) to what does.
struct Key {
    buf: [u8; KEY_BYTES],
    len: usize,
}

impl Key {
    fn new(family: Family, values: &[&str]) -> Key {
        let mut k = Key {
            buf: [0; KEY_BYTES],
            len: 1,
        };
        k.buf[0] = family as u8;
        for (i, v) in values.iter().enumerate() {
            // Room for this value, keeping each later value's length byte and up to 32 of
            // its bytes (a status class, a reason: the long one is a name before them).
            let later: usize = values[i + 1..].iter().map(|v| 1 + v.len().min(32)).sum();
            let room = KEY_BYTES.saturating_sub(k.len + 1 + later).min(255);
            let mut cut = v.len().min(room);
            while !v.is_char_boundary(cut) {
                cut -= 1;
            }
            k.buf[k.len] = cut as u8;
            k.buf[k.len + 1..k.len + 1 + cut].copy_from_slice(&v.as_bytes()[..cut]);
            k.len += 1 + cut;
        }
        k
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A key's family and label values, read back (`None` for bytes no key was written as).
fn decode(key: &[u8]) -> Option<(Family, Vec<String>)> {
    let (&f, mut rest) = key.split_first()?;
    let family = Family::from_u8(f)?;
    let mut values = Vec::new();
    while let Some((&n, tail)) = rest.split_first() {
        let v = tail.get(..n as usize)?;
        values.push(String::from_utf8_lossy(v).into_owned());
        rest = &tail[n as usize..];
    }
    (values.len() == family.labels().len()).then_some((family, values))
}

fn with_series(family: Family, values: &[&str], f: impl FnOnce(&Series)) {
    if !enabled() {
        return;
    }
    let Some(r) = region() else { return };
    match r.series(&Key::new(family, values)) {
        Some(s) => f(s),
        None => r.lost(),
    }
}

impl Series {
    fn add(&self, n: u64) {
        self.values[0].fetch_add(n, Ordering::Relaxed);
    }

    fn set(&self, v: f64) {
        self.values[0].store(v.to_bits(), Ordering::Relaxed);
        self.values[1].store(now_ms(), Ordering::Relaxed);
    }

    fn observe(&self, seconds: f64) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        let bucket = DURATION_BOUNDS
            .iter()
            .position(|b| seconds <= *b)
            .unwrap_or(DURATION_BOUNDS.len());
        let ns = (seconds * 1e9).min(u64::MAX as f64 / 4.0) as u64;
        self.values[bucket].fetch_add(1, Ordering::Relaxed);
        // Saturating: absurd durations (recordCall() takes any finite number) never wrap
        // the sum back past zero.
        let _ = self.values[SUM].fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
            Some(v.saturating_add(ns))
        });
    }
}

/// Adds `n` to a counter (0 makes the series, so it is shown at 0).
pub fn add(family: Family, values: &[&str], n: u64) {
    with_series(family, values, |s| s.add(n));
}

/// A series found once and kept: on the request path a counter is then one atomic add
/// (finding it costs a hash of its labels and a probe; a local denial, the flood's fast
/// path, takes about 0.3 µs, and the lookups would have added half of that).
#[derive(Default)]
pub struct Slot(std::sync::OnceLock<Option<&'static Series>>);

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0.get() {
            None => "Slot(not yet)",
            Some(None) => "Slot(no room)",
            Some(Some(_)) => "Slot(found)",
        })
    }
}

impl Slot {
    /// The series, found at the first call; `None` (counted lost at every call) when it
    /// found no room then.
    fn get(&self, family: Family, values: &[&str]) -> Option<&'static Series> {
        let found = *self
            .0
            .get_or_init(|| region().and_then(|r| r.series(&Key::new(family, values))));
        if found.is_none() {
            if let Some(r) = region() {
                r.lost();
            }
        }
        found
    }
}

/// Reasons a decision can give ([`checkout_guard_model::Reason`]'s variants).
const REASONS: usize = 10;
/// Engines a Valkey decision is counted under: lua, module, unknown.
const ENGINES: [&str; 3] = ["lua", "module", "unknown"];

/// One limiter's series, found at their first use ([`Slot`]).
#[derive(Debug)]
pub struct LimiterSeries {
    /// By reason, outcome (allowed) and mode (shadow).
    decisions: [Slot; REASONS * 4],
    near_limit: Slot,
    local: Slot,
    engines: [Slot; 3],
    waited: Slot,
    wait_seconds: Slot,
    adaptive_share: Slot,
}

impl Default for LimiterSeries {
    fn default() -> Self {
        Self {
            decisions: std::array::from_fn(|_| Slot::default()),
            near_limit: Slot::default(),
            local: Slot::default(),
            engines: std::array::from_fn(|_| Slot::default()),
            waited: Slot::default(),
            wait_seconds: Slot::default(),
            adaptive_share: Slot::default(),
        }
    }
}

impl LimiterSeries {
    /// Sets the adaptive share in force that a reply of `limiter` said.
    pub fn set_share(&self, limiter: &str, share: f64) {
        if enabled() {
            if let Some(s) = self.adaptive_share.get(Family::AdaptiveShare, &[limiter]) {
                s.set(share);
            }
        }
    }

    /// Counts one decision of `d.limiter` in every family it belongs to.
    pub fn count(&self, d: &DecisionSeen<'_>) {
        let reason = d.reason;
        if !enabled() {
            return;
        }
        let outcome = if d.allowed { "allowed" } else { "denied" };
        let mode = if d.shadow { "shadow" } else { "enforce" };
        let i = (reason as usize).min(REASONS - 1) * 4
            + usize::from(d.allowed) * 2
            + usize::from(d.shadow);
        if let Some(s) = self.decisions[i].get(
            Family::Decisions,
            &[d.limiter, outcome, reason.as_str(), mode],
        ) {
            s.add(1);
        }
        let add = |slot: &Slot, family: Family, values: &[&str], n: u64| {
            if let Some(s) = slot.get(family, values) {
                s.add(n);
            }
        };
        if d.near_limit {
            add(&self.near_limit, Family::NearLimit, &[d.limiter], 1);
        }
        if d.local {
            add(&self.local, Family::LocalDenials, &[d.limiter], 1);
        }
        if let Some(engine) = d.engine {
            let e = ENGINES.iter().position(|x| *x == engine).unwrap_or(2);
            add(
                &self.engines[e],
                Family::ValkeyDecisions,
                &[d.limiter, ENGINES[e]],
                1,
            );
        }
        if d.waited > 0.0 {
            add(&self.waited, Family::ReservationsWaited, &[d.limiter], 1);
            add(
                &self.wait_seconds,
                Family::ReservationWaitSeconds,
                &[d.limiter],
                (d.waited * 1e9) as u64,
            );
        }
    }
}

/// One decision of `limiter`, as `acquire()` answered it.
#[derive(Debug, Clone, Copy)]
pub struct DecisionSeen<'a> {
    pub limiter: &'a str,
    pub allowed: bool,
    pub reason: checkout_guard_model::Reason,
    pub shadow: bool,
    /// Made in the worker (a local denial).
    pub local: bool,
    /// Made by Valkey, with this engine.
    pub engine: Option<&'a str>,
    /// Allowed and left the tightest bucket at or under [`NEAR_LIMIT_SHARE`].
    pub near_limit: bool,
    /// Seconds a reservation slept (0: none).
    pub waited: f64,
}

/// An HTTP status as its class: "2xx"; without a status (0), "error" when the call threw
/// (no response came back) and "none" when it returned something that carries no status.
pub fn status_class(status: i64, threw: bool) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        500..=599 => "5xx",
        _ if threw => "error",
        _ => "none",
    }
}

std::thread_local! {
    /// The last external call's series in this thread, by api and status class: a
    /// checkout measures the same api again and again, so most calls skip the lookup.
    static LAST_CALL: std::cell::RefCell<Option<(String, &'static str, &'static Series)>> =
        const { std::cell::RefCell::new(None) };
}

/// One measured external call (`threw`: it ended in an exception).
pub fn external_call(api: &str, status: i64, threw: bool, duration_ms: f64) {
    if !enabled() {
        return;
    }
    let class = status_class(status, threw);
    let seconds = duration_ms / 1e3;
    LAST_CALL.with_borrow_mut(|last| {
        if let Some((a, c, s)) = last {
            if a == api && *c == class {
                s.observe(seconds);
                return;
            }
        }
        let Some(r) = region() else { return };
        match r.series(&Key::new(Family::HttpDuration, &[api, class])) {
            Some(s) => {
                s.observe(seconds);
                *last = Some((api.to_string(), class, s));
            }
            None => r.lost(),
        }
    });
}

/// A sink's batch: `written` events reached it, `dropped` did not.
pub fn events(sink: &str, written: u64, dropped: u64) {
    add(Family::EventsWritten, &[sink], written);
    add(Family::EventsDropped, &[sink], dropped);
}

#[cfg(test)]
mod tests;
