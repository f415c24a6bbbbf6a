//! The process's telemetry state: its configuration, the event buffer, the sinks, the
//! per-request call counts (the call budget) and the decision counters. One per process,
//! built on first use from the [`Setup`] the extension registered once at module start-up
//! ([`register`]: its INI settings, read then), and built again in a forked child, which
//! must not write its parent's events.
//!
//! No lock is held while sinks run: [`flush`] takes the buffered events and the sinks out
//! of the state ([`take_batch`]), writes, and puts the sinks back ([`put_back`]): a sink
//! may call PHP, which may record again.
//!
//! Events are buffered per thread: under ZTS (FrankenPHP, Apache's threaded MPMs) a thread
//! serves one request at a time, so a request's flush writes its own events only (the New
//! Relic sink records them in the transaction they belong to) and `Telemetry::stats()`
//! shows what this request buffered. With NTS the one thread is the process. The sinks
//! are shared: a flush in one thread waits while another thread's flush has them out.

use rustc_hash::FxHashMap;
use std::sync::Arc;
use std::thread::ThreadId;
use std::time::Duration;

use crate::sync::{Condvar, Mutex};
use checkout_guard_model::{ConfigError, Decision, Reason};
use once_cell::sync::{Lazy, OnceCell};

use super::{
    decision_event, external_call_event_owned, hot_event, limits_change_event, AttrValue, Buffer,
    Event, ExternalCall, JsonlSink, Name, NewRelicSink, RawTelemetryIni, Sink, SinkKind, SinkStats,
    Sinks, StreamSink, TelemetryConfig, EXTERNAL_API_CALL,
};
use crate::clock::{Clock, SystemClock};
use crate::notices::Notices;

/// What the state is built from.
pub struct Setup {
    pub config: Result<TelemetryConfig, ConfigError>,
    /// The sinks of `config` (none when it is an error).
    pub sinks: Vec<Box<dyn Sink>>,
    /// The clock events are stamped with (the system clock in the extension).
    pub clock: Arc<dyn Clock>,
}

impl Setup {
    /// The setup for `config`: the sinks it names, in its order (the stream sink's Valkey
    /// connection with `timeout` and `retry_interval`; the New Relic sink over the agent
    /// registered with [`super::register_new_relic_agent`]), events stamped on `clock`.
    pub fn new(
        config: Result<TelemetryConfig, ConfigError>,
        timeout: Duration,
        retry_interval: Duration,
        clock: Arc<dyn Clock>,
    ) -> Self {
        let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
        if let Ok(c) = &config {
            for kind in &c.sinks {
                sinks.push(match kind {
                    SinkKind::NewRelic => Box::new(NewRelicSink),
                    SinkKind::Jsonl => {
                        Box::new(JsonlSink::new(c.jsonl_path.clone().unwrap_or_default()))
                    }
                    SinkKind::Stream => Box::new(StreamSink::new(
                        c.stream.clone().expect("validated"),
                        c.stream_key.clone(),
                        c.stream_maxlen,
                        timeout,
                        retry_interval,
                    )),
                });
            }
        }
        Self {
            config,
            sinks,
            clock,
        }
    }

    /// Telemetry off (no setup registered: the runtime without the extension).
    fn off() -> Self {
        let config = TelemetryConfig::from_ini(&RawTelemetryIni::default(), "");
        Self::new(
            config,
            Duration::ZERO,
            Duration::ZERO,
            Arc::new(SystemClock),
        )
    }
}

/// How the extension sets the state up, registered once.
static SETUP: OnceCell<fn() -> Setup> = OnceCell::new();

/// Registers how the process's state is set up (once, at module start-up; a second
/// registration is ignored). `setup` runs when the state is built: on first use inside a
/// request, with the settings then in force, and again after fork.
pub fn register(setup: fn() -> Setup) {
    let _ = SETUP.set(setup);
}

fn registered_setup() -> Setup {
    SETUP.get().map_or_else(Setup::off, |setup| setup())
}

/// The decision counters: allowed, denied, unavailable.
const ALLOWED: usize = 0;
const DENIED: usize = 1;
const UNAVAILABLE: usize = 2;

pub struct State {
    /// The fork generation that built this state; a forked child rebuilds its own.
    generation: u64,
    config: Result<TelemetryConfig, ConfigError>,
    /// Each thread's buffered events (a thread serves one request at a time); a thread's
    /// entry goes when its events are taken.
    buffers: FxHashMap<ThreadId, Buffer>,
    capacity: usize,
    /// Events buffered since process start, by every thread.
    recorded: u64,
    /// `None` while a flush has them out (see [`take_batch`]), by the thread `flushing`.
    sinks: Option<Sinks>,
    flushing: Option<ThreadId>,
    decisions: [u64; 3],
    /// Caller attributes dropped since process start: names the recorder owns.
    dropped_attributes: u64,
    clock: Arc<dyn Clock>,
}

/// Counters since process start, as `Telemetry::stats()` shows them.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    pub enabled: bool,
    pub recorded: u64,
    /// Buffered by this thread (this request, under ZTS).
    pub buffered: usize,
    /// Allowed, denied, unavailable.
    pub decisions: [u64; 3],
    pub dropped_attributes: u64,
    /// Per sink (empty while a flush has the sinks out).
    pub sinks: Vec<(&'static str, SinkStats)>,
    pub config_error: Option<String>,
}

static STATE: Lazy<Mutex<Option<State>>> = Lazy::new(|| Mutex::new(None));
/// Signalled when a flush puts the sinks back.
static SINKS_BACK: Condvar = Condvar::new();

/// ExternalApiCall events measured in the current request, per api and in all (the call
/// budget). Per thread: a thread serves one request at a time, so under ZTS (FrankenPHP,
/// Apache's worker MPM) concurrent requests keep their own counts; with NTS the one thread
/// is the process.
#[derive(Default)]
struct RequestCalls {
    /// Fx hashing: one short key per measured call, chosen by the application's code.
    per_api: FxHashMap<String, u64>,
    total: u64,
}

thread_local! {
    static REQUEST_CALLS: std::cell::RefCell<RequestCalls> = std::cell::RefCell::new(RequestCalls::default());
}

impl State {
    fn new(setup: Setup) -> Self {
        let capacity = setup.config.as_ref().map_or(1, |c| c.buffer_size);
        State {
            generation: crate::process::generation(),
            config: setup.config,
            buffers: FxHashMap::default(),
            capacity,
            recorded: 0,
            sinks: Some(Sinks::new(setup.sinks)),
            flushing: None,
            decisions: [0; 3],
            dropped_attributes: 0,
            clock: setup.clock,
        }
    }

    /// Now in Unix ms on the state's clock, as events carry it.
    pub fn now_ms(&self) -> i64 {
        self.clock.unix_ms()
    }

    /// The event of a recorded decision, stamped now.
    pub fn decision_event(&self, limiter: &str, shop: &[u8], d: &Decision) -> Event {
        decision_event(limiter, shop, d, self.now_ms())
    }

    /// [`Self::decision_event`] with the call's endpoint and class (`route`).
    pub fn decision_event_routed(
        &self,
        limiter: &str,
        shop: &[u8],
        d: &Decision,
        route: (Option<&str>, Option<&str>),
    ) -> Event {
        super::event::decision_event_routed(limiter, shop, d, route, self.now_ms())
    }

    /// Telemetry is on: the settings are valid and name at least one sink.
    pub fn enabled(&self) -> bool {
        self.config.as_ref().is_ok_and(TelemetryConfig::enabled)
    }

    /// Counts one ExternalApiCall of this request for the call budget.
    fn count_call(&mut self, api: &str) {
        REQUEST_CALLS.with_borrow_mut(|r| {
            match r.per_api.get_mut(api) {
                Some(n) => *n += 1,
                None => {
                    r.per_api.insert(api.to_string(), 1);
                }
            }
            r.total += 1;
        });
    }

    /// Buffers an event when telemetry is on (an ExternalApiCall counts either way);
    /// true when the buffer is full and should be flushed.
    pub fn push(&mut self, e: Event) -> bool {
        if e.event_type == EXTERNAL_API_CALL {
            if let Some(AttrValue::Str(api)) = e.get("api") {
                let api = api.clone();
                self.count_call(&api);
            }
        }
        self.enabled() && self.buffer_push(e)
    }

    /// Buffers an event in this thread's buffer; true when that buffer is full.
    fn buffer_push(&mut self, e: Event) -> bool {
        self.recorded += 1;
        let capacity = self.capacity;
        self.buffers
            .entry(std::thread::current().id())
            .or_insert_with(|| Buffer::new(capacity))
            .push(e)
    }

    /// Events this thread buffered.
    fn buffered_here(&self) -> usize {
        self.buffers
            .get(&std::thread::current().id())
            .map_or(0, Buffer::buffered)
    }

    /// Takes the events this thread buffered (its request's), leaving other threads'.
    pub fn take_buffered_here(&mut self) -> Vec<Event> {
        self.buffers
            .remove(&std::thread::current().id())
            .map_or_else(Vec::new, |mut b| b.take())
    }

    /// Counts a measured call and, when telemetry is on, buffers its event (built only
    /// then); true when the buffer is full.
    pub fn push_call(&mut self, call: ExternalCall, caller: Vec<(Name, AttrValue)>) -> bool {
        self.count_call(&call.api);
        crate::metrics::external_call(
            &call.api,
            call.status,
            call.exception.is_some(),
            call.duration_ms,
        );
        self.enabled() && self.buffer_push(external_call_event_owned(call, caller))
    }

    /// Counts a decision; true when it is to be recorded (denied or unavailable, with
    /// telemetry on).
    pub fn count_decision(&mut self, d: &Decision) -> bool {
        // By what enforcement decided: in shadow mode a decision it would have denied is
        // counted (and recorded) as denied, though it was let through.
        let i = match (d.reason, d.would_allow) {
            (Reason::Unavailable, _) => UNAVAILABLE,
            (_, true) => ALLOWED,
            _ => DENIED,
        };
        self.decisions[i] += 1;
        self.enabled() && i != ALLOWED
    }

    pub fn add_dropped_attributes(&mut self, n: usize) {
        self.dropped_attributes += n as u64;
    }

    /// Request start: call counts are per request.
    pub fn start_request(&mut self) {
        start_request();
    }

    /// ExternalApiCall events measured so far in this request, for one api or for all.
    pub fn call_count(&self, api: Option<&str>) -> u64 {
        REQUEST_CALLS.with_borrow(|r| match api {
            None => r.total,
            Some(api) => r.per_api.get(api).copied().unwrap_or(0),
        })
    }

    pub fn stats(&self) -> Stats {
        Stats {
            enabled: self.enabled(),
            recorded: self.recorded,
            buffered: self.buffered_here(),
            decisions: self.decisions,
            dropped_attributes: self.dropped_attributes,
            sinks: self.sinks.as_ref().map_or_else(Vec::new, |s| {
                s.stats().map(|(n, st)| (n, st.clone())).collect()
            }),
            config_error: self.config.as_ref().err().map(|e| e.to_string()),
        }
    }
}

/// Request start: this thread's call counts start again. Needs no state, and builds none:
/// a module start-up may run a request start-up before the SAPI has applied its settings
/// (php-fpm's `php_admin_value[extension]` loads the extension and runs its RINIT inside
/// the pool's settings, before the `checkout_guard.*` ones that follow it); the state is
/// built on first use, inside a request, from the settings then in force.
pub fn start_request() {
    REQUEST_CALLS.with_borrow_mut(|r| {
        r.per_api.clear();
        r.total = 0;
    });
}

/// Runs `f` on the process's state, building it with the registered setup on first use
/// (and again after fork: a child's copy of the parent's buffer belongs to the parent).
pub fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = STATE.lock();
    f(current(&mut guard))
}

/// The state in `guard`, built on first use and again after fork.
fn current(guard: &mut Option<State>) -> &mut State {
    let generation = crate::process::generation();
    if guard.as_ref().is_some_and(|s| s.generation != generation) {
        if let Some(mut old) = guard.take() {
            old.buffers.values_mut().for_each(Buffer::discard);
            // The parent's sinks (files, sockets) are the parent's: not closed here.
            std::mem::forget(old);
        }
    }
    guard.get_or_insert_with(|| State::new(registered_setup()))
}

/// This thread's buffered events and the sinks, taken out of the state so that no lock is
/// held while sinks run; `None` when this thread buffered nothing, or when this thread's
/// own flush has the sinks out (a sink that recorded again: its events wait for the next
/// flush). While another thread's flush has them out, this waits for them.
fn take_batch() -> Option<(Vec<Event>, Sinks)> {
    let me = std::thread::current().id();
    let mut guard = STATE.lock();
    let mut first = true;
    loop {
        // The state is built at most once here: once built, it stays (but for a fork).
        let s = if std::mem::take(&mut first) {
            current(&mut guard)
        } else {
            guard.as_mut()?
        };
        if s.buffered_here() == 0 {
            return None;
        }
        if let Some(sinks) = s.sinks.take() {
            s.flushing = Some(me);
            return Some((s.take_buffered_here(), sinks));
        }
        if s.flushing == Some(me) || s.flushing.is_none() {
            return None;
        }
        SINKS_BACK.wait(&mut guard);
    }
}

/// Returns the sinks [`take_batch`] handed out.
fn put_back(sinks: Sinks) {
    with_state(|s| {
        s.sinks = Some(sinks);
        s.flushing = None;
    });
    SINKS_BACK.notify_all();
}

/// Writes this thread's buffered events to every sink without holding the state lock while
/// sinks run (the New Relic sink calls PHP, which may record again). Returns the events
/// written.
pub fn flush() -> usize {
    let Some((batch, mut sinks)) = take_batch() else {
        return 0;
    };
    let written = sinks.write(&batch);
    put_back(sinks);
    drop(batch);
    written
}

/// As [`flush`], to every sink but `skip`, which drops the batch and counts a failure
/// (`why`): after the request, PHP (the New Relic agent) cannot be called any more.
pub fn flush_without(skip: &str, why: &str) {
    let Some((batch, mut sinks)) = take_batch() else {
        return;
    };
    sinks.write_without(&batch, skip, why);
    put_back(sinks);
}

/// The events what an acquire() learnt beside its decision leads to: a shop made hot by
/// `auto_hot` ("RateLimitHot") and new live limits picked up by this worker
/// ("RateLimitChange").
pub fn notice_events(
    limiter: &str,
    shop: &[u8],
    n: &Notices,
    auto_hot: Option<&checkout_guard_model::AutoHot>,
    now_ms: i64,
) -> Vec<Event> {
    let mut out = Vec::new();
    if let (Some(share), Some(a)) = (n.became_hot, auto_hot) {
        out.push(hot_event(limiter, shop, share, a, now_ms));
    }
    if let Some(c) = &n.limits_change {
        out.push(limits_change_event(limiter, c, now_ms));
    }
    if let Some(c) = &n.adapt {
        out.push(super::adapt_event(limiter, c, now_ms));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;
    use crate::telemetry::{RawTelemetryIni, SinkKind};
    use std::time::Duration;

    fn config(sinks: &str, buffer: &str) -> Result<TelemetryConfig, ConfigError> {
        TelemetryConfig::from_ini(
            &RawTelemetryIni {
                sinks: Some(sinks),
                jsonl_path: Some("/dev/null"),
                buffer_size: Some(buffer),
                ..Default::default()
            },
            "redis://127.0.0.1:6379",
        )
    }

    fn state(sinks: &str, buffer: &str) -> State {
        state_on(sinks, buffer, FakeClock::new())
    }

    fn state_on(sinks: &str, buffer: &str, clock: FakeClock) -> State {
        let config = config(sinks, buffer);
        State::new(Setup {
            config,
            sinks: Vec::new(),
            clock: Arc::new(clock),
        })
    }

    fn call(api: &str) -> ExternalCall {
        ExternalCall {
            api: api.into(),
            timestamp_ms: 1,
            duration_ms: 2.0,
            status: 200,
            exception: None,
        }
    }

    #[test]
    fn calls_count_per_request_with_telemetry_off_too() {
        let mut s = state("", "10");
        assert!(!s.enabled());
        assert!(!s.push_call(call("psp"), Vec::new()));
        s.push_call(call("psp"), Vec::new());
        s.push_call(call("erp"), Vec::new());
        assert_eq!((s.call_count(None), s.call_count(Some("psp"))), (3, 2));
        assert_eq!(s.stats().recorded, 0, "nothing buffered while off");
        s.start_request();
        assert_eq!(s.call_count(None), 0);
    }

    /// Under ZTS each thread serves its own request: one request's start does not clear
    /// another's call count, and calls are counted where they were made.
    #[test]
    fn call_counts_belong_to_the_thread_serving_the_request() {
        // One state for the process, as STATE is, shared by two request threads.
        let shared = std::sync::Arc::new(Mutex::new(state("", "10")));
        shared.lock().start_request();
        shared.lock().push_call(call("psp"), Vec::new());
        let other = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                let mut t = shared.lock();
                t.start_request();
                t.push_call(call("erp"), Vec::new());
                t.push_call(call("erp"), Vec::new());
                (t.call_count(None), t.call_count(Some("psp")))
            })
            .join()
            .unwrap()
        };
        assert_eq!(other, (2, 0), "the other request counts only its own calls");
        let s = shared.lock();
        assert_eq!((s.call_count(None), s.call_count(Some("erp"))), (1, 0));
    }

    /// Under ZTS each thread serves its own request: a request's flush takes its own
    /// events, and stats() shows what it buffered; other threads' stay buffered.
    #[test]
    fn each_thread_takes_only_the_events_it_buffered() {
        let shared = std::sync::Arc::new(Mutex::new(state("jsonl", "100")));
        for _ in 0..2 {
            shared.lock().push_call(call("psp"), Vec::new());
        }
        let other = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for _ in 0..3 {
                    shared.lock().push_call(call("erp"), Vec::new());
                }
                let buffered = shared.lock().stats().buffered;
                let taken = shared.lock().take_buffered_here();
                (buffered, taken.len(), shared.lock().stats().buffered)
            })
            .join()
            .unwrap()
        };
        assert_eq!(other, (3, 3, 0), "the other thread's request: its 3 events");
        let mut s = shared.lock();
        assert_eq!((s.stats().buffered, s.stats().recorded), (2, 5));
        let mine = s.take_buffered_here();
        assert_eq!(mine.len(), 2);
        assert!(mine
            .iter()
            .all(|e| e.get("api") == Some(&AttrValue::Str("psp".into()))));
        assert_eq!(s.stats().buffered, 0);
    }

    /// The runtime without the extension (nothing registered): telemetry off, no error.
    #[test]
    fn without_a_registered_setup_telemetry_is_off() {
        let s = State::new(Setup::off());
        assert!(!s.enabled());
        assert_eq!(s.stats().config_error, None);
        assert!(s.stats().sinks.is_empty());
    }

    #[test]
    fn a_full_buffer_asks_for_a_flush() {
        let mut s = state("jsonl", "2");
        assert_eq!(config("jsonl", "2").unwrap().sinks, vec![SinkKind::Jsonl]);
        assert!(!s.push_call(call("a"), Vec::new()));
        assert!(s.push_call(call("a"), Vec::new()));
    }

    #[test]
    fn decisions_are_counted_and_only_denials_and_failures_recorded() {
        let mut s = state("jsonl", "10");
        let allowed = Decision::unavailable(true, 0.0, false);
        let mut denied = allowed;
        denied.reason = Reason::Global;
        denied.allowed = false;
        denied.would_allow = false;
        let mut ok = denied;
        ok.reason = Reason::Allowed;
        ok.allowed = true;
        ok.would_allow = true;
        assert!(!s.count_decision(&ok));
        assert!(s.count_decision(&denied));
        assert!(
            s.count_decision(&allowed),
            "unavailable is recorded, even when allowed"
        );
        assert_eq!(s.stats().decisions, [1, 1, 1]);
        // Shadow mode: let through, counted and recorded as enforcement decided.
        assert!(s.count_decision(&denied.into_shadow(0.0)));
        assert!(!s.count_decision(&ok.into_shadow(0.0)));
        assert_eq!(s.stats().decisions, [2, 2, 1]);
    }

    #[test]
    fn a_bad_setting_turns_telemetry_off_and_says_why() {
        let s = state("carrier-pigeon", "10");
        let st = s.stats();
        assert!(!st.enabled);
        assert!(st.config_error.unwrap().contains("carrier-pigeon"));
    }

    /// Events are stamped on the state's clock, not the machine's.
    #[test]
    fn events_are_stamped_on_the_injected_clock() {
        let clock = FakeClock::new();
        let s = state_on("jsonl", "10", clock.clone());
        assert_eq!(s.now_ms(), 1_750_000_000_000);
        clock.advance(Duration::from_millis(1234));
        let mut denied = Decision::unavailable(false, 0.5, false);
        denied.reason = Reason::Global;
        let e = s.decision_event("checkout", b"shop", &denied);
        assert_eq!(e.get("timestamp"), Some(&AttrValue::Int(1_750_000_001_234)));
    }
}
