// PHP parameter names are the Rust identifiers verbatim (named arguments): camelCase here.
#![allow(non_snake_case)]

//! `CheckoutGuard\Telemetry` and the process's telemetry state: the buffer, the sinks
//! (configured once per process from `checkout_guard.events.*`), the per-request call
//! counts and the decision counters. Flushed at the end of every request.

use std::collections::HashMap;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use checkout_guard_model::{ConfigError, Decision as CoreDecision, Reason};
use checkout_guard_runtime::telemetry::{
    decision_event, drop_owned, external_call_event, AttrValue, Buffer, Event, ExternalCall,
    JsonlSink, Name, RawTelemetryIni, Sink, SinkKind, Sinks, StreamSink, TelemetryConfig,
    EXTERNAL_API_CALL, EXTERNAL_CALL_OWNED, RECORD_OWNED,
};
use ext_php_rs::binary_slice::BinarySlice;
use ext_php_rs::boxed::ZBox;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::throw_object;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, ZendObject, Zval};
use once_cell::sync::Lazy;
use parking_lot::Mutex;

use crate::convert::{attributes, OptionalArray};
use crate::errors::configuration;
use crate::hostile::{self, Ended};
use crate::ini;

struct State {
    /// The fork generation that built this state; a forked child rebuilds its own.
    generation: u64,
    config: Result<TelemetryConfig, ConfigError>,
    buffer: Buffer,
    /// `None` while a flush has them out (see `flush`).
    sinks: Option<Sinks>,
    /// ExternalApiCall events measured in this request, per api.
    calls: HashMap<String, u64>,
    calls_total: u64,
    /// Decisions seen since process start: allowed, denied, unavailable.
    decisions: [u64; 3],
    /// Caller attributes dropped since process start: names the recorder owns.
    dropped_attributes: u64,
}

static STATE: Lazy<Mutex<Option<State>>> = Lazy::new(|| Mutex::new(None));

fn build_state() -> State {
    let url = ini::get(ini::URL).unwrap_or_default();
    let (sinks_s, path, stream_url, key, maxlen, size) = (
        ini::get(ini::EVENTS_SINKS),
        ini::get(ini::EVENTS_JSONL_PATH),
        ini::get(ini::EVENTS_STREAM_URL),
        ini::get(ini::EVENTS_STREAM_KEY),
        ini::get(ini::EVENTS_STREAM_MAXLEN),
        ini::get(ini::EVENTS_BUFFER_SIZE),
    );
    let raw = RawTelemetryIni {
        sinks: sinks_s.as_deref(),
        jsonl_path: path.as_deref(),
        stream_url: stream_url.as_deref(),
        stream_key: key.as_deref(),
        stream_maxlen: maxlen.as_deref(),
        buffer_size: size.as_deref(),
    };
    let config = TelemetryConfig::from_ini(&raw, &url);
    let defaults = ini::defaults().unwrap_or_default();
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    let mut capacity = 1000;
    match &config {
        Ok(c) => {
            capacity = c.buffer_size;
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
                        std::time::Duration::from_millis(defaults.timeout_ms as u64),
                        std::time::Duration::from_millis(defaults.retry_interval_ms as u64),
                    )),
                });
            }
        }
        // Straight to the error log: this runs under the state lock, and an error handler
        // (which may record telemetry, throw or bail out) must not run here.
        Err(e) => crate::hostile::log_error(&format!(
            "PHP Warning:  {e}; telemetry is off in this process"
        )),
    }
    State {
        generation: checkout_guard_runtime::process::generation(),
        config,
        buffer: Buffer::new(capacity),
        sinks: Some(Sinks::new(sinks)),
        calls: HashMap::new(),
        calls_total: 0,
        decisions: [0; 3],
        dropped_attributes: 0,
    }
}

/// Runs `f` on the process's state, building it on first use (and again after fork).
fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut guard = STATE.lock();
    let generation = checkout_guard_runtime::process::generation();
    if guard.as_ref().is_some_and(|s| s.generation != generation) {
        // A forked child: its copy of the parent's buffer belongs to the parent.
        if let Some(mut old) = guard.take() {
            old.buffer.discard();
            std::mem::forget(old);
        }
    }
    f(guard.get_or_insert_with(build_state))
}

fn enabled(s: &State) -> bool {
    s.config.as_ref().is_ok_and(TelemetryConfig::enabled)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl State {
    /// Counts one ExternalApiCall of this request for the call budget.
    fn count_call(&mut self, api: &str) {
        match self.calls.get_mut(api) {
            Some(n) => *n += 1,
            None => {
                self.calls.insert(api.to_string(), 1);
            }
        }
        self.calls_total += 1;
    }
}

/// Buffers an event when telemetry is on; flushes when the buffer is full.
fn push(e: Event) {
    let full = with_state(|s| {
        if e.event_type == EXTERNAL_API_CALL {
            if let Some(AttrValue::Str(api)) = e.get("api") {
                s.count_call(api);
            }
        }
        enabled(s) && s.buffer.push(e)
    });
    if full {
        flush_now();
    }
}

/// Counts a measured call and, when telemetry is on, buffers its event (built only then).
fn push_call(call: ExternalCall, caller: Vec<(Name, AttrValue)>) {
    let full = with_state(|s| {
        s.count_call(&call.api);
        enabled(s) && s.buffer.push(external_call_event(&call, caller))
    });
    if full {
        flush_now();
    }
}

/// The buffered events and the sinks, taken out of the state so that no lock is held
/// while sinks run; `None` when nothing is buffered (or a flush already has them out).
fn take_batch() -> Option<(Vec<Event>, Sinks)> {
    with_state(|s| {
        if s.buffer.buffered() == 0 {
            return None;
        }
        let sinks = s.sinks.take()?;
        Some((s.buffer.take(), sinks))
    })
}

/// Writes the buffer to every sink without holding the state lock while sinks run (the
/// New Relic sink calls PHP, which may record again). Returns the events written.
pub fn flush_now() -> usize {
    let taken = take_batch();
    let Some((batch, mut sinks)) = taken else {
        return 0;
    };
    let written = sinks.write(&batch);
    with_state(|s| s.sinks = Some(sinks));
    drop(batch);
    if BAILED_OUT.with(|b| b.replace(false)) {
        // SAFETY: the sinks are back in the state and the batch is dropped: nothing on
        // this frame needs dropping.
        unsafe { hostile::resume_bailout() }
    }
    written
}

/// Counts caller attributes dropped because the recorder owns their names, and says so
/// once per process in the PHP error log (never through PHP's error handlers, which an
/// application may turn into exceptions: telemetry never throws into a checkout).
fn note_dropped(event_type: &str, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    with_state(|s| s.dropped_attributes += dropped.len() as u64);
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::hostile::log_error(&format!(
            "checkout_guard: attribute(s) {} of a {event_type} event dropped: the recorder sets them \
             (counted in Telemetry::stats()['dropped_attributes']; said once per process)",
            dropped.join(", ")
        ));
    }
}

/// A measured call's caller attributes, without the names the recorder owns.
fn call_attributes(attributes: OptionalArray) -> PhpResult<Vec<(Name, AttrValue)>> {
    let mut caller = match attributes.0 {
        Some(ht) => self::attributes(ht).map_err(|e| configuration(e.to_string()))?,
        None => Vec::new(),
    };
    note_dropped(
        EXTERNAL_API_CALL,
        &drop_owned(&mut caller, EXTERNAL_CALL_OWNED),
    );
    Ok(caller)
}

/// Request end (RSHUTDOWN): writes what is buffered, again while the sinks themselves
/// (the New Relic agent) recorded more, a few passes at most.
pub fn flush_at_request_end() {
    for _ in 0..3 {
        if flush_now() == 0 {
            break;
        }
    }
}

/// After every module's request end (post-deactivate: a session save handler measured
/// after our RSHUTDOWN): what is still buffered goes to the sinks that need no PHP; the New
/// Relic sink cannot be called any more, and counts it as dropped.
pub fn flush_after_request() {
    let taken = take_batch();
    let Some((batch, mut sinks)) = taken else {
        return;
    };
    sinks.write_without(
        &batch,
        "newrelic",
        "the request had ended: PHP cannot be called",
    );
    with_state(|s| s.sinks = Some(sinks));
}

/// Request start: call counts are per request.
pub fn request_startup() {
    with_state(|s| {
        s.calls.clear();
        s.calls_total = 0;
    });
}

/// Records what an acquire() learnt beside its decision: a shop made hot by `auto_hot`
/// ("RateLimitHot") and new live limits picked up by this worker ("RateLimitChange").
pub fn observe_notices(
    limiter: &str,
    shop: &[u8],
    n: &checkout_guard_runtime::Notices,
    auto_hot: Option<&checkout_guard_model::AutoHot>,
) {
    if n.became_hot.is_none() && n.limits_change.is_none() {
        return;
    }
    if !with_state(|s| enabled(s)) {
        return;
    }
    let now = now_ms();
    if let (Some(share), Some(a)) = (n.became_hot, auto_hot) {
        push(checkout_guard_runtime::telemetry::hot_event(
            limiter, shop, share, a, now,
        ));
    }
    if let Some(c) = &n.limits_change {
        push(checkout_guard_runtime::telemetry::limits_change_event(
            limiter, c, now,
        ));
    }
}

/// Counts a decision and records denied and unavailable ones as "RateLimitDecision".
pub fn observe_decision(limiter: &str, shop: &[u8], d: &CoreDecision) {
    let record = with_state(|s| {
        let i = match (d.reason, d.allowed) {
            (Reason::Unavailable, _) => 2,
            (_, true) => 0,
            _ => 1,
        };
        s.decisions[i] += 1;
        enabled(s) && i != 0
    });
    if record {
        push(decision_event(limiter, shop, d, now_ms()));
    }
}

/// The New Relic PHP agent's `newrelic_record_custom_event()`, called once per event.
struct NewRelicSink;

impl Sink for NewRelicSink {
    fn name(&self) -> &'static str {
        "newrelic"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), String> {
        let f = ZendCallable::try_from_name("newrelic_record_custom_event").map_err(|_| {
            "newrelic_record_custom_event() is not defined: the New Relic agent is not loaded"
                .to_string()
        })?;
        for e in events {
            let mut attrs = ZendHashTable::new();
            for (k, v) in &e.attrs {
                let r = match v {
                    AttrValue::Null => attrs.insert(k.as_ref(), ()),
                    AttrValue::Bool(b) => attrs.insert(k.as_ref(), *b),
                    AttrValue::Int(i) => attrs.insert(k.as_ref(), *i),
                    AttrValue::Float(x) => attrs.insert(k.as_ref(), *x),
                    AttrValue::Str(s) => attrs.insert(k.as_ref(), s.as_str()),
                };
                r.map_err(|e| e.to_string())?;
            }
            // A call into PHP: see `hostile.rs` for what it may do.
            match hostile::call_contained(|| f.try_call(vec![&e.event_type.as_str(), &attrs])) {
                Ended::Returned(_) => {}
                Ended::Threw(ex) => {
                    let class = ex.get_class_name().unwrap_or_else(|_| "?".into());
                    return Err(format!("newrelic_record_custom_event() threw {class}"));
                }
                Ended::Failed(why) => {
                    return Err(format!("newrelic_record_custom_event() failed: {why}"))
                }
                Ended::Exit | Ended::FatalExit | Ended::FiberDestroyed => {
                    return Err("newrelic_record_custom_event() exited".into())
                }
                Ended::Bailout => {
                    // A fatal error: no further call into PHP; `flush_now` puts the sinks
                    // back and lets the engine bail out on.
                    BAILED_OUT.with(|b| b.set(true));
                    return Err("newrelic_record_custom_event() hit a fatal error".into());
                }
            }
        }
        Ok(())
    }
}

thread_local! {
    /// Set by a sink whose call into PHP bailed out (a fatal error) during `flush_now`.
    static BAILED_OUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The status code in what a call returned: an int, an array with a `status` key, or an
/// object with `getStatusCode()` (a PSR-7 response); 0 when there is none. `Err` when a
/// method probed ended the script's normal flow (exit, fiber destroyed, fatal error).
fn status_of(v: &Zval) -> Result<i64, Ended> {
    let v = v.dereference();
    if let Some(i) = v.long() {
        return Ok(i);
    }
    if let Some(ht) = v.array() {
        return Ok(ht
            .get("status")
            .and_then(|s| s.dereference().long())
            .unwrap_or(0));
    }
    if let Some(obj) = v.object() {
        return Ok(call_status_method(obj, "getStatusCode")?.unwrap_or(0));
    }
    Ok(0)
}

/// Calls a method that takes no argument and returns the status it leads to; swallows
/// whatever the method throws or returns that is not a status (the call's own outcome
/// matters, not this probe's). A call into PHP: see `hostile.rs`.
fn call_status_method(obj: &ZendObject, method: &str) -> Result<Option<i64>, Ended> {
    // What the method returned is read and dropped inside the guarded call: dropping it may
    // run a destructor (PHP code) that exits or hits a fatal error.
    let inner = std::cell::Cell::new(None);
    let ended = hostile::call(|| {
        let r = obj.try_call_method(method, vec![])?;
        let status = if method == "getStatusCode" {
            Ok(r.long())
        } else {
            status_of(&r).map(Some)
        };
        drop(r);
        match status {
            Ok(status) => inner.set(Some(status)),
            // A fatal error in a nested probe: bail on out of this call too.
            // SAFETY: `r` is dropped; nothing on this closure's frame needs dropping.
            Err(Ended::Bailout) => unsafe { hostile::resume_bailout() },
            // exit() or a destroyed fiber in a nested probe: still pending, seen below.
            Err(_) => {}
        }
        Ok(Zval::new())
    });
    match ended {
        Ended::Returned(_) => Ok(inner.take().flatten()),
        Ended::Threw(_) | Ended::Failed(_) => Ok(None),
        stop => Err(stop),
    }
}

/// Unsampled custom events for every external API call, and the call budget's counts.
#[php_class]
#[php(name = "CheckoutGuard\\Telemetry")]
#[php(flags = ClassFlags::Final)]
pub struct Telemetry;

#[allow(non_snake_case)]
#[php_impl]
impl Telemetry {
    /// Times $call on a monotonic clock, records one "ExternalApiCall" event, returns
    /// $call's result or rethrows what it threw.
    #[php(defaults(attributes = OptionalArray::default()))]
    pub fn measure(
        api: BinarySlice<u8>,
        call: ZendCallable,
        attributes: OptionalArray,
    ) -> PhpResult<Zval> {
        let caller = call_attributes(attributes)?;
        let api = String::from_utf8_lossy(&api).into_owned();
        let timestamp_ms = now_ms();
        let started = Instant::now();
        // A call into PHP: see `hostile.rs` for what it may do and how each is handled.
        let ended = hostile::call(|| call.try_call(vec![]));
        drop(call);
        let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
        // The status probes call into PHP too, and may end the script's flow themselves.
        let (status, exception, stop) = match &ended {
            Ended::Returned(v) => match status_of(v) {
                Ok(status) => (status, None, None),
                Err(stop) => (0, stop.error_type().map(String::from), Some(stop)),
            },
            Ended::Threw(ex) => match call_status_method(ex, "getResponse") {
                Ok(status) => (status.unwrap_or(0), ex.get_class_name().ok(), None),
                Err(stop) => (0, stop.error_type().map(String::from), Some(stop)),
            },
            Ended::Failed(e) => return Err(PhpException::from(e.clone())),
            unwinding => (0, unwinding.error_type().map(String::from), None),
        };
        push_call(
            ExternalCall {
                api,
                timestamp_ms,
                duration_ms,
                status,
                exception,
            },
            caller,
        );
        let stop = match stop {
            Some(stop) => Some(stop),
            None if ended.is_unwinding() => Some(ended),
            None => {
                return match ended {
                    // Rethrow the very exception object: its class, message and trace
                    // unchanged.
                    Ended::Threw(ex) => {
                        let zv = ex
                            .into_zval(false)
                            .map_err(|e| PhpException::from(e.to_string()))?;
                        throw_object(zv).map_err(|e| PhpException::from(e.to_string()))?;
                        Ok(Zval::new())
                    }
                    Ended::Returned(v) => Ok(v),
                    _ => Ok(Zval::new()),
                };
            }
        };
        match stop {
            Some(Ended::Bailout) => {
                // Everything this frame owned is dropped (`ended` is moved into `stop`,
                // the rest went above): jump on to the engine's enclosing zend_try.
                drop(stop);
                // SAFETY: nothing on this frame needs dropping any more.
                unsafe { hostile::resume_bailout() }
            }
            // exit() or a destroyed fiber: its object stays pending; returning lets the
            // engine unwind on, and the event is written at request end.
            _ => Ok(Zval::new()),
        }
    }

    /// Records one "ExternalApiCall" event for a call that ended after the code that
    /// started it returned (a Guzzle promise settled later), timed by the caller:
    /// `$timestampMs` Unix ms when it started, `$durationMs` measured on a monotonic clock
    /// (`hrtime()`). `$outcome` is what the call resolved to, or the Throwable it failed
    /// with; status and error type are found in it as measure() finds them, and the call
    /// counts in callCount() like a measured one.
    #[php(defaults(attributes = OptionalArray::default()))]
    pub fn recordCall(
        api: BinarySlice<u8>,
        timestampMs: i64,
        durationMs: f64,
        outcome: &Zval,
        attributes: OptionalArray,
    ) -> PhpResult<()> {
        if !durationMs.is_finite() || durationMs < 0.0 {
            return Err(configuration(format!(
                "recordCall(): durationMs must be a finite number >= 0, got {durationMs}"
            )));
        }
        let caller = call_attributes(attributes)?;
        let failure = outcome
            .object()
            .filter(|o| o.instance_of(ext_php_rs::zend::ce::throwable()));
        // The probes call into PHP (see `hostile.rs`) and may end the script's flow.
        let (status, exception, stop) = match failure {
            Some(ex) => match call_status_method(ex, "getResponse") {
                Ok(status) => (status.unwrap_or(0), ex.get_class_name().ok(), None),
                Err(stop) => (0, stop.error_type().map(String::from), Some(stop)),
            },
            None => match status_of(outcome) {
                Ok(status) => (status, None, None),
                Err(stop) => (0, stop.error_type().map(String::from), Some(stop)),
            },
        };
        push_call(
            ExternalCall {
                api: String::from_utf8_lossy(&api).into_owned(),
                timestamp_ms: timestampMs,
                duration_ms: durationMs,
                status,
                exception,
            },
            caller,
        );
        if let Some(Ended::Bailout) = stop {
            drop(stop);
            // SAFETY: nothing on this frame needs dropping any more.
            unsafe { hostile::resume_bailout() }
        }
        // exit() or a destroyed fiber in a probe: its object stays pending.
        Ok(())
    }

    /// Records one custom event; attribute values must be scalars or null.
    pub fn record(eventType: BinarySlice<u8>, attributes: &ZendHashTable) -> PhpResult<()> {
        let mut e = Event::new(&eventType).map_err(|e| configuration(e.to_string()))?;
        let mut attrs = self::attributes(attributes).map_err(|e| configuration(e.to_string()))?;
        // An "ExternalApiCall" is measured, never told: its measured names are dropped too.
        let owned = if e.event_type == EXTERNAL_API_CALL {
            EXTERNAL_CALL_OWNED
        } else {
            RECORD_OWNED
        };
        note_dropped(e.event_type.as_str(), &drop_owned(&mut attrs, owned));
        e.set("timestamp", AttrValue::Int(now_ms()));
        for (k, v) in attrs {
            e.set_named(k, v);
        }
        e.sanitize_urls();
        push(e);
        Ok(())
    }

    /// Writes buffered events to every configured sink now; returns how many were written.
    pub fn flush() -> i64 {
        flush_now() as i64
    }

    /// ExternalApiCall events measured so far in this request, for one api or for all.
    pub fn call_count(api: Option<BinarySlice<u8>>) -> i64 {
        with_state(|s| match api {
            None => s.calls_total as i64,
            Some(api) => s
                .calls
                .get(String::from_utf8_lossy(&api).as_ref())
                .copied()
                .unwrap_or(0) as i64,
        })
    }

    /// Counters since process start: recorded, written and dropped, per sink.
    pub fn stats() -> PhpResult<ZBox<ZendHashTable>> {
        with_state(|s| -> ext_php_rs::error::Result<ZBox<ZendHashTable>> {
            let mut out = ZendHashTable::new();
            out.insert("enabled", enabled(s))?;
            out.insert("recorded", s.buffer.recorded() as i64)?;
            out.insert("buffered", s.buffer.buffered() as i64)?;
            let mut decisions = ZendHashTable::new();
            for (i, name) in ["allowed", "denied", "unavailable"].iter().enumerate() {
                decisions.insert(*name, s.decisions[i] as i64)?;
            }
            out.insert("decisions", decisions)?;
            out.insert("dropped_attributes", s.dropped_attributes as i64)?;
            let mut sinks = ZendHashTable::new();
            if let Some(all) = &s.sinks {
                for (name, st) in all.stats() {
                    let mut one = ZendHashTable::new();
                    one.insert("written", st.written as i64)?;
                    one.insert("dropped", st.dropped as i64)?;
                    one.insert("failures", st.failures as i64)?;
                    one.insert("last_error", st.last_error.clone())?;
                    sinks.insert(name, one)?;
                }
            }
            out.insert("sinks", sinks)?;
            out.insert(
                "config_error",
                s.config.as_ref().err().map(|e| e.to_string()),
            )?;
            Ok(out)
        })
        .map_err(|e| PhpException::from(e.to_string()))
    }
}
