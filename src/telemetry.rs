// PHP parameter names are the Rust identifiers verbatim (named arguments): camelCase here.
#![allow(non_snake_case)]

//! `CheckoutGuard\\Telemetry`: measure and record external calls and custom events. The
//! process's telemetry state is the runtime's (`recorder`), wired in `recording.rs`.

use std::time::Instant;

use checkout_guard_runtime::telemetry::{
    agent_cap, drop_owned, AttrValue, Event, ExternalCall, EXTERNAL_API_CALL, EXTERNAL_CALL_OWNED,
    RECORD_OWNED,
};
use ext_php_rs::boxed::ZBox;
use ext_php_rs::convert::IntoZval;
use ext_php_rs::exception::throw_object;
use ext_php_rs::flags::ClassFlags;
use ext_php_rs::prelude::*;
use ext_php_rs::types::{ZendCallable, ZendHashTable, Zval};

use crate::args::{FloatArg, IntArg, OptStringArg, Param, StrArg};
use crate::convert::{attributes, OptionalArray};
use crate::errors::configuration;
use crate::php_call::{self, Ended};
use crate::probe::{call_status_method, status_of};
use crate::recording::{call_attributes, flush_now, note_dropped, push, push_call, with_state};

/// Now in Unix ms on the telemetry state's clock (the system clock).
fn now_ms() -> i64 {
    with_state(|s| s.now_ms())
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
    pub fn measure(api: StrArg, call: ZendCallable, attributes: OptionalArray) -> PhpResult<Zval> {
        let api = api.get(Param::new("CheckoutGuard\\Telemetry::measure", 1, "api"))?;
        let caller = call_attributes(attributes)?;
        let api = String::from_utf8_lossy(&api).into_owned();
        let timestamp_ms = now_ms();
        let started = Instant::now();
        // A call into PHP: see `php_call.rs` for what it may do and how each is handled.
        let ended = php_call::call(|| call.try_call(vec![]));
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
                unsafe { php_call::resume_bailout() }
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
        api: StrArg,
        timestampMs: IntArg,
        durationMs: FloatArg,
        outcome: &Zval,
        attributes: OptionalArray,
    ) -> PhpResult<()> {
        const F: &str = "CheckoutGuard\\Telemetry::recordCall";
        let api = api.get(Param::new(F, 1, "api"))?;
        let timestampMs = timestampMs.get(Param::new(F, 2, "timestampMs"))?;
        let durationMs = durationMs.get(Param::new(F, 3, "durationMs"))?;
        if !durationMs.is_finite() || durationMs < 0.0 {
            return Err(configuration(format!(
                "recordCall(): durationMs must be a finite number >= 0, got {durationMs}"
            )));
        }
        let caller = call_attributes(attributes)?;
        let failure = outcome
            .object()
            .filter(|o| o.instance_of(ext_php_rs::zend::ce::throwable()));
        // The probes call into PHP (see `php_call.rs`) and may end the script's flow.
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
            unsafe { php_call::resume_bailout() }
        }
        // exit() or a destroyed fiber in a probe: its object stays pending.
        Ok(())
    }

    /// Records one custom event; attribute values must be scalars or null.
    pub fn record(eventType: StrArg, attributes: &ZendHashTable) -> PhpResult<()> {
        let eventType = eventType.get(Param::new(
            "CheckoutGuard\\Telemetry::record",
            1,
            "eventType",
        ))?;
        let mut e = Event::new(&eventType).map_err(|e| configuration(e.to_string()))?;
        let mut attrs = self::attributes(attributes).map_err(|e| configuration(e.to_string()))?;
        // An "ExternalApiCall" is measured, never told: its measured names are dropped too.
        let owned = if e.event_type == EXTERNAL_API_CALL {
            EXTERNAL_CALL_OWNED
        } else {
            RECORD_OWNED
        };
        note_dropped(&e.event_type, &drop_owned(&mut attrs, owned));
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
    pub fn call_count(api: OptStringArg) -> PhpResult<i64> {
        let api = api.get(Param::new("CheckoutGuard\\Telemetry::callCount", 1, "api"))?;
        let api = api.map(|a| String::from_utf8_lossy(&a).into_owned());
        Ok(with_state(|s| s.call_count(api.as_deref()) as i64))
    }

    /// Counters since process start: recorded, written and dropped, per sink.
    // The `newrelic` sink also has the agent's cap and the events handed to it per minute,
    // across the workers sharing the local denial table (`agent_cap_stats`,
    // docs/telemetry.md).
    pub fn stats() -> PhpResult<ZBox<ZendHashTable>> {
        let st = with_state(|s| s.stats());
        (|| -> ext_php_rs::error::Result<ZBox<ZendHashTable>> {
            let mut out = ZendHashTable::new();
            out.insert("enabled", st.enabled)?;
            out.insert("recorded", st.recorded as i64)?;
            out.insert("buffered", st.buffered as i64)?;
            let mut decisions = ZendHashTable::new();
            for (i, name) in ["allowed", "denied", "unavailable"].iter().enumerate() {
                decisions.insert(*name, st.decisions[i] as i64)?;
            }
            out.insert("decisions", decisions)?;
            out.insert("dropped_attributes", st.dropped_attributes as i64)?;
            let mut sinks = ZendHashTable::new();
            for (name, one_st) in &st.sinks {
                let mut one = ZendHashTable::new();
                one.insert("written", one_st.written as i64)?;
                one.insert("dropped", one_st.dropped as i64)?;
                one.insert("failures", one_st.failures as i64)?;
                one.insert("last_error", one_st.last_error.clone())?;
                if *name == "newrelic" {
                    agent_cap_stats(&mut one)?;
                }
                sinks.insert(*name, one)?;
            }
            out.insert("sinks", sinks)?;
            out.insert("config_error", st.config_error.clone())?;
            Ok(out)
        })()
        .map_err(|e| PhpException::from(e.to_string()))
    }
}

/// The `newrelic` sink's view of the agent's cap (`runtime::telemetry::agent_cap`): `cap`
/// (null: the agent is not loaded), `over_cap` (events handed past it, in total since the
/// table was made), and `this_minute` / `last_minute` (`start`, `handed`, `over_cap`),
/// counted across the workers sharing the table.
pub(crate) fn agent_cap_stats(one: &mut ZendHashTable) -> ext_php_rs::error::Result<()> {
    let cap = crate::newrelic::cap_in_force();
    let counts = agent_cap::counts(now_ms().div_euclid(1000));
    one.insert("cap", cap.map(|c| c as i64))?;
    one.insert("over_cap", counts.over_cap as i64)?;
    for (key, minute) in [
        ("this_minute", counts.this_minute),
        ("last_minute", counts.last_minute),
    ] {
        let mut m = ZendHashTable::new();
        m.insert("start", minute.start)?;
        m.insert("handed", minute.handed as i64)?;
        m.insert("over_cap", minute.over(cap) as i64)?;
        one.insert(key, m)?;
    }
    Ok(())
}
