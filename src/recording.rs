//! The extension's side of the process's telemetry state (`runtime::telemetry::recorder`):
//! how it is set up from the INI settings (registered once at module start-up, with the New
//! Relic agent's call: see `newrelic.rs`), flushed at request end, and fed by the limiter
//! and `Telemetry`. An event goes one way: here -> the runtime's buffer -> the sinks.

use checkout_guard_model::Decision as CoreDecision;
use checkout_guard_runtime::telemetry::recorder::{self, Setup, State};
use checkout_guard_runtime::telemetry::{
    drop_owned, AttrValue, Event, ExternalCall, Name, RawTelemetryIni, TelemetryConfig,
    EXTERNAL_API_CALL, EXTERNAL_CALL_OWNED,
};
use ext_php_rs::prelude::*;

use crate::convert::{attributes, OptionalArray};
use crate::errors::configuration;
use crate::ini;
use crate::newrelic::BAILED_OUT;
use crate::php_call;

/// Registers, once at module start-up, how the runtime's telemetry state is set up and the
/// New Relic agent its `newrelic` sink calls.
pub fn register() {
    recorder::register(setup);
    checkout_guard_runtime::telemetry::register_new_relic_agent(&crate::newrelic::AGENT);
}

/// The state's configuration and sinks, from the `checkout_guard.events.*` settings.
fn setup() -> Setup {
    let url = ini::get(ini::URL).unwrap_or_default();
    let (sinks_s, path, stream_url, key, maxlen, size) = (
        ini::get(ini::EVENTS_SINKS),
        ini::get(ini::EVENTS_JSONL_PATH),
        ini::get(ini::EVENTS_STREAM_URL),
        ini::get(ini::EVENTS_STREAM_KEY),
        ini::get(ini::EVENTS_STREAM_MAXLEN),
        ini::get(ini::EVENTS_BUFFER_SIZE),
    );
    let (sentinel_user, sentinel_password) = (
        ini::get(ini::SENTINEL_USER),
        ini::get(ini::SENTINEL_PASSWORD),
    );
    let raw = RawTelemetryIni {
        sinks: sinks_s.as_deref(),
        jsonl_path: path.as_deref(),
        stream_url: stream_url.as_deref(),
        stream_key: key.as_deref(),
        stream_maxlen: maxlen.as_deref(),
        buffer_size: size.as_deref(),
        tls: checkout_guard_config::TlsDefaults::from_ini(
            ini::get(ini::TLS_CAFILE).as_deref(),
            ini::get(ini::TLS_LOCAL_CERT).as_deref(),
            ini::get(ini::TLS_LOCAL_PK).as_deref(),
            ini::get(ini::TLS_PEER_NAME).as_deref(),
        ),
        sentinel_user: sentinel_user.as_deref(),
        sentinel_password: sentinel_password.as_deref(),
    };
    let config = TelemetryConfig::from_ini(&raw, &url);
    let defaults = ini::defaults().unwrap_or_default();
    if let Err(e) = &config {
        // Straight to the error log: this runs under the state lock, and an error handler
        // (which may record telemetry, throw or bail out) must not run here.
        php_call::log_error(&format!(
            "PHP Warning:  {e}; telemetry is off in this process"
        ));
    }
    // Events are stamped on the system clock.
    Setup::new(
        config,
        std::time::Duration::from_millis(defaults.timeout_ms as u64),
        std::time::Duration::from_millis(defaults.retry_interval_ms as u64),
        std::sync::Arc::new(checkout_guard_runtime::SystemClock),
    )
}

/// Runs `f` on the process's state, building it on first use (and again after fork).
pub fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    recorder::with_state(f)
}

/// Buffers an event when telemetry is on; flushes when the buffer is full.
pub fn push(e: Event) {
    if with_state(|s| s.push(e)) {
        flush_now();
    }
}

/// Counts a measured call and, when telemetry is on, buffers its event.
pub fn push_call(call: ExternalCall, caller: Vec<(Name, AttrValue)>) {
    if with_state(|s| s.push_call(call, caller)) {
        flush_now();
    }
}

/// Writes the buffer to every sink without holding the state lock while sinks run (the
/// New Relic sink calls PHP, which may record again). Returns the events written.
pub fn flush_now() -> usize {
    let written = recorder::flush();
    if BAILED_OUT.with(|b| b.replace(false)) {
        // SAFETY: the sinks are back in the state and the batch is dropped: nothing on
        // this frame needs dropping.
        unsafe { php_call::resume_bailout() }
    }
    written
}

/// Counts caller attributes dropped because the recorder owns their names, and says so
/// once per process in the PHP error log (never through PHP's error handlers, which an
/// application may turn into exceptions: telemetry never throws into a checkout).
pub fn note_dropped(event_type: &str, dropped: &[String]) {
    if dropped.is_empty() {
        return;
    }
    with_state(|s| s.add_dropped_attributes(dropped.len()));
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        php_call::log_error(&format!(
            "checkout_guard: attribute(s) {} of a {event_type} event dropped: the recorder sets them \
             (counted in Telemetry::stats()['dropped_attributes']; said once per process)",
            dropped.join(", ")
        ));
    }
}

/// A measured call's caller attributes, without the names the recorder owns.
pub fn call_attributes(attributes: OptionalArray) -> PhpResult<Vec<(Name, AttrValue)>> {
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
    recorder::flush_without("newrelic", "the request had ended: PHP cannot be called");
}

/// Request start: call counts are per request. Builds no state (see
/// `recorder::start_request`: under php-fpm the first RINIT may run before the pool's
/// settings are applied).
pub fn request_startup() {
    recorder::start_request();
}

/// Records what an acquire() learnt beside its decision: a shop made hot by `auto_hot`
/// ("RateLimitHot") and new live limits picked up by this worker ("RateLimitChange").
pub fn observe_notices(
    limiter: &str,
    shop: &[u8],
    n: &checkout_guard_runtime::Notices,
    auto_hot: Option<&checkout_guard_model::AutoHot>,
) {
    if n.became_hot.is_none() && n.limits_change.is_none() && n.adapt.is_none() {
        return;
    }
    let Some(now_ms) = with_state(|s| s.enabled().then(|| s.now_ms())) else {
        return;
    };
    for e in recorder::notice_events(limiter, shop, n, auto_hot, now_ms) {
        push(e);
    }
}

/// Records the changes of the adaptive budget a `feedback()` made, one "RateLimitAdapt"
/// event each.
pub fn observe_adapt(limiter: &str, changes: &[checkout_guard_runtime::notices::AdaptChange]) {
    if changes.is_empty() {
        return;
    }
    let Some(now_ms) = with_state(|s| s.enabled().then(|| s.now_ms())) else {
        return;
    };
    for c in changes {
        push(checkout_guard_runtime::telemetry::adapt_event(
            limiter, c, now_ms,
        ));
    }
}

/// Counts a decision and records denied and unavailable ones as "RateLimitDecision".
pub fn observe_decision(
    limiter: &str,
    shop: &[u8],
    d: &CoreDecision,
    route: (Option<&str>, Option<&str>),
) {
    if let Some(e) = with_state(|s| {
        s.count_decision(d)
            .then(|| s.decision_event_routed(limiter, shop, d, route))
    }) {
        push(e);
    }
}
