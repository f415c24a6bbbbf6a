//! The `newrelic` sink: the New Relic PHP agent's `newrelic_record_custom_event()`, called
//! once per event. It calls PHP, so it lives in the extension; everything else about
//! sinks is the runtime's.

use checkout_guard_runtime::telemetry::{AttrValue, Event, Sink};
use ext_php_rs::types::{ZendCallable, ZendHashTable};

use crate::php_call::{self, Ended};

/// The New Relic PHP agent's `newrelic_record_custom_event()`, called once per event.
pub struct NewRelicSink;

impl Sink for NewRelicSink {
    fn name(&self) -> &'static str {
        "newrelic"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
        let f = ZendCallable::try_from_name("newrelic_record_custom_event").map_err(|_| {
            (
                0,
                "newrelic_record_custom_event() is not defined: the New Relic agent is not loaded"
                    .to_string(),
            )
        })?;
        // The events before a failing call reached the agent.
        for (i, e) in events.iter().enumerate() {
            let mut attrs = ZendHashTable::new();
            for (k, v) in &e.attrs {
                let r = match v {
                    AttrValue::Null => attrs.insert(k.as_ref(), ()),
                    AttrValue::Bool(b) => attrs.insert(k.as_ref(), *b),
                    AttrValue::Int(i) => attrs.insert(k.as_ref(), *i),
                    AttrValue::Float(x) => attrs.insert(k.as_ref(), *x),
                    AttrValue::Str(s) => attrs.insert(k.as_ref(), s.as_str()),
                };
                r.map_err(|e| (i, e.to_string()))?;
            }
            // A call into PHP: see `php_call.rs` for what it may do.
            let event_type: &str = &e.event_type;
            match php_call::call_contained(|| f.try_call(vec![&event_type, &attrs])) {
                Ended::Returned(_) => {}
                Ended::Threw(ex) => {
                    let class = ex.get_class_name().unwrap_or_else(|_| "?".into());
                    return Err((i, format!("newrelic_record_custom_event() threw {class}")));
                }
                Ended::Failed(why) => {
                    return Err((i, format!("newrelic_record_custom_event() failed: {why}")))
                }
                Ended::Exit | Ended::FatalExit | Ended::FiberDestroyed => {
                    return Err((i, "newrelic_record_custom_event() exited".into()))
                }
                Ended::Bailout => {
                    // A fatal error: no further call into PHP; `flush_now` puts the sinks
                    // back and lets the engine bail out on.
                    BAILED_OUT.with(|b| b.set(true));
                    return Err((i, "newrelic_record_custom_event() hit a fatal error".into()));
                }
            }
        }
        Ok(())
    }
}

thread_local! {
    /// Set by the sink when its call into PHP bailed out (a fatal error) during a flush.
    pub static BAILED_OUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
