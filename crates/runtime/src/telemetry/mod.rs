//! Custom events for every external API call (unsampled) and for the limiter's denials:
//! the event model with New Relic's limits, a process buffer, and the sinks that write it.
//!
//! Path of one event, one way: `Telemetry::measure()` (PHP) -> [`Event`] built here,
//! normalized to New Relic's custom event rules -> [`Buffer`] in the process
//! ([`recorder`]) -> written to every configured [`Sink`] at the end of the request, or at
//! once when the buffer is full. What the extension gives is registered once at module
//! start-up: how the state is set up ([`recorder::register`]: its INI settings) and the
//! New Relic agent's PHP call ([`register_new_relic_agent`]).
//! A failing sink drops the batch and counts it; nothing is thrown into the checkout.

pub mod agent_cap;
mod buffer;
mod config;
mod event;
mod json;
mod newrelic;
pub mod recorder;
mod sinks;
mod url;

pub use buffer::{Buffer, SinkStats, Sinks};
pub use config::{RawTelemetryIni, SinkKind, TelemetryConfig};
pub use event::{
    adapt_event, decision_event, drop_owned, external_call_event, external_call_event_owned,
    hot_event, limits_change_event, name, AttrValue, Event, ExternalCall, Name, EXTERNAL_API_CALL,
    EXTERNAL_CALL_OWNED, MAX_ATTRIBUTES, MAX_STRING_BYTES, RATE_LIMIT_ADAPT, RATE_LIMIT_CHANGE,
    RATE_LIMIT_DECISION, RATE_LIMIT_HOT, RECORD_OWNED,
};
pub use json::{write_event_line, write_json_string};
pub use newrelic::{
    register_new_relic_agent, NewRelicAgent, NewRelicSink, RecordEvent, NOT_LOADED,
};
pub use sinks::{JsonlSink, Sink, StreamSink};
pub use url::sanitize_url;
