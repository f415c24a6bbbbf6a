//! The New Relic PHP agent's `newrelic_record_custom_event()`, the one PHP call of the
//! runtime's `newrelic` sink: implemented here (it calls PHP) behind the runtime's
//! [`NewRelicAgent`], registered once at module start-up (`recording::register`).

use checkout_guard_runtime::telemetry::agent_cap::{cap_from_setting, CAP_SETTING};
use checkout_guard_runtime::telemetry::{AttrValue, Event, NewRelicAgent, RecordEvent, NOT_LOADED};
use ext_php_rs::types::{ZendCallable, ZendHashTable};

use crate::ini;
use crate::php_call::{self, Ended};

const RECORD: &str = "newrelic_record_custom_event";

/// The agent, called through PHP.
pub struct PhpAgent;

/// The one agent the runtime's sink calls.
pub static AGENT: PhpAgent = PhpAgent;

impl NewRelicAgent for PhpAgent {
    fn recorder(&self) -> Result<RecordEvent<'_>, String> {
        let f = ZendCallable::try_from_name(RECORD).map_err(|_| NOT_LOADED.to_string())?;
        Ok(Box::new(move |e: &Event| record(&f, e)))
    }

    fn cap(&self) -> Option<u64> {
        Some(setting_cap())
    }
}

/// The agent's cap on custom events a minute, read as the agent reads its setting: its
/// registered INI entry (the agent loaded), else the value php.ini or `-d` gave (a
/// `newrelic_record_custom_event()` defined without the agent's extension: a stand-in),
/// else New Relic's default.
fn setting_cap() -> u64 {
    let value = ini::registered(CAP_SETTING).or_else(|| ini::configured(CAP_SETTING));
    cap_from_setting(value.as_deref())
}

/// The cap in force for the `newrelic` sink: `None` when `newrelic_record_custom_event()`
/// is not defined (the agent is not loaded: no event is handed over, no cap applies).
pub fn cap_in_force() -> Option<u64> {
    ZendCallable::try_from_name(RECORD).ok()?;
    Some(setting_cap())
}

/// One call of `newrelic_record_custom_event()`.
fn record(f: &ZendCallable<'_>, e: &Event) -> Result<(), String> {
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
    // A call into PHP: see `php_call.rs` for what it may do.
    let event_type: &str = &e.event_type;
    match php_call::call_contained(|| f.try_call(vec![&event_type, &attrs])) {
        Ended::Returned(_) => Ok(()),
        Ended::Threw(ex) => {
            let class = ex.get_class_name().unwrap_or_else(|_| "?".into());
            Err(format!("{RECORD}() threw {class}"))
        }
        Ended::Failed(why) => Err(format!("{RECORD}() failed: {why}")),
        Ended::Exit | Ended::FatalExit | Ended::FiberDestroyed => Err(format!("{RECORD}() exited")),
        Ended::Bailout => {
            // A fatal error: no further call into PHP (the sink stops at this error);
            // `recording::flush_now` lets the engine bail out on once the sinks are back.
            BAILED_OUT.with(|b| b.set(true));
            Err(format!("{RECORD}() hit a fatal error"))
        }
    }
}

thread_local! {
    /// Set by the agent when its call into PHP bailed out (a fatal error) during a flush.
    pub static BAILED_OUT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}
