//! The event schema: the one list of event types, attribute names and their types that the
//! writer (`checkout-guard-runtime`'s telemetry) and every reader (the CLI's scan, report
//! and replay) use. Names and values follow New Relic's custom event rules: flat objects of
//! scalar values, so one event can go to the agent, a file or a stream.
//!
//! A JSONL line is `{"eventType":<type>, <attributes>...}`. The recorder's own events
//! ([`EVENTS`]) carry exactly their [`EventSpec::attrs`]; an `ExternalApiCall` and the
//! caller's own `record()` events may carry caller attributes too, of which the readers
//! understand the [`CALLER`] ones.

/// The JSON key of an event's type (New Relic's name for it).
pub const EVENT_TYPE: &str = "eventType";

/// The field of a stream entry (the `stream` sink's `XADD`) that holds the event's JSON line.
pub const STREAM_FIELD: &str = "event";

/// One measured external API call (`Telemetry::measure()`, `recordCall()`).
pub const EXTERNAL_API_CALL: &str = "ExternalApiCall";
/// A decision denied, unavailable, or denied in shadow mode.
pub const RATE_LIMIT_DECISION: &str = "RateLimitDecision";
/// `auto_hot` made a shop hot.
pub const RATE_LIMIT_HOT: &str = "RateLimitHot";
/// A worker picked up new live limits.
pub const RATE_LIMIT_CHANGE: &str = "RateLimitChange";
/// The adaptive budget changed.
pub const RATE_LIMIT_ADAPT: &str = "RateLimitAdapt";

/// Attribute names, each written once.
pub mod attr {
    // Every recorder event.
    pub const TIMESTAMP: &str = "timestamp";
    pub const LIMITER: &str = "limiter";
    // ExternalApiCall (measured).
    pub const API: &str = "api";
    pub const STATUS_CODE: &str = "http.response.status_code";
    pub const DURATION_MS: &str = "duration.ms";
    pub const ERROR_TYPE: &str = "error.type";
    // Caller attributes the readers understand (OpenTelemetry's names where there is one).
    pub const METHOD: &str = "http.request.method";
    pub const SERVER_ADDRESS: &str = "server.address";
    pub const SERVER_PORT: &str = "server.port";
    pub const URL_FULL: &str = "url.full";
    pub const URL_TEMPLATE: &str = "url.template";
    pub const SHOP_ID: &str = "shop.id";
    pub const STEP: &str = "step";
    pub const PAYMENT_CHANNEL: &str = "payment.channel";
    pub const TAG: &str = "tag";
    // RateLimitDecision.
    pub const REASON: &str = "reason";
    pub const ALLOWED: &str = "allowed";
    pub const WOULD_ALLOW: &str = "would_allow";
    pub const MODE: &str = "mode";
    pub const RETRY_AFTER_S: &str = "retry_after.s";
    pub const HOT_SHOP: &str = "hot_shop";
    /// The endpoint the call named (issue 42), when it named one.
    pub const ENDPOINT: &str = "endpoint";
    /// The priority class the call was decided in, when it had one.
    pub const PRIORITY: &str = "priority";
    // RateLimitHot.
    pub const SHARE: &str = "share";
    pub const THRESHOLD: &str = "threshold";
    pub const WINDOW_S: &str = "window.s";
    pub const TTL_S: &str = "ttl.s";
    pub const HOT_UNTIL: &str = "hot_until";
    // RateLimitChange.
    pub const VERSION: &str = "version";
    pub const OLD_MODE: &str = "old_mode";
    pub const CHANGED_BY: &str = "changed_by";
    pub const CHANGED_AT: &str = "changed_at";
    pub const OLD: &str = "old";
    pub const NEW: &str = "new";
    pub const ERROR: &str = "error";
    // RateLimitAdapt.
    pub const WHY: &str = "why";
    pub const FROM: &str = "from";
    pub const TO: &str = "to";
    pub const STATUS: &str = "status";
    pub const RETRY_AFTER: &str = "retry_after";
    pub const PAUSED_UNTIL: &str = "paused_until";
}

/// The JSON type of an attribute's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrType {
    /// A JSON integer.
    Int,
    /// A JSON number (written with a decimal point or an exponent; a non-finite one as null).
    Float,
    Bool,
    Str,
}

/// Whether an attribute is in every event of its type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Presence {
    /// Always there, never null.
    Always,
    /// Always there, null when there is nothing to say.
    Nullable,
    /// There only when there is something to say.
    Optional,
}

/// One attribute of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttrSpec {
    pub name: &'static str,
    pub ty: AttrType,
    pub presence: Presence,
}

const fn a(name: &'static str, ty: AttrType) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        presence: Presence::Always,
    }
}

const fn nullable(name: &'static str, ty: AttrType) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        presence: Presence::Nullable,
    }
}

const fn optional(name: &'static str, ty: AttrType) -> AttrSpec {
    AttrSpec {
        name,
        ty,
        presence: Presence::Optional,
    }
}

use AttrType::{Bool, Float, Int, Str};

/// One event type of the recorder's and its attributes, in the order they are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventSpec {
    pub event_type: &'static str,
    pub attrs: &'static [AttrSpec],
    /// Caller attributes may follow (an `ExternalApiCall`'s from `measure()`).
    pub caller_attrs: bool,
}

impl EventSpec {
    /// The attribute of this event named `name`.
    pub fn attr(&self, name: &str) -> Option<&'static AttrSpec> {
        self.attrs.iter().find(|a| a.name == name)
    }
}

/// The caller attributes the readers understand, in any event that may carry caller
/// attributes (an `ExternalApiCall`, a `record()` event).
pub const CALLER: &[AttrSpec] = &[
    optional(attr::METHOD, Str),
    optional(attr::SERVER_ADDRESS, Str),
    optional(attr::SERVER_PORT, Int),
    optional(attr::URL_FULL, Str),
    optional(attr::URL_TEMPLATE, Str),
    optional(attr::SHOP_ID, Str),
    optional(attr::STEP, Str),
    optional(attr::PAYMENT_CHANNEL, Str),
    optional(attr::TAG, Str),
];

/// The recorder's events.
pub const EVENTS: &[EventSpec] = &[
    EventSpec {
        event_type: EXTERNAL_API_CALL,
        attrs: &[
            a(attr::TIMESTAMP, Int),
            a(attr::API, Str),
            a(attr::STATUS_CODE, Int),
            a(attr::DURATION_MS, Float),
            // OpenTelemetry's: the status for 4xx/5xx, else the exception class when the
            // call threw without a response.
            optional(attr::ERROR_TYPE, Str),
        ],
        caller_attrs: true,
    },
    EventSpec {
        event_type: RATE_LIMIT_DECISION,
        attrs: &[
            a(attr::TIMESTAMP, Int),
            a(attr::LIMITER, Str),
            a(attr::SHOP_ID, Str),
            a(attr::REASON, Str),
            a(attr::ALLOWED, Bool),
            a(attr::WOULD_ALLOW, Bool),
            a(attr::MODE, Str),
            a(attr::RETRY_AFTER_S, Float),
            a(attr::HOT_SHOP, Bool),
            optional(attr::ENDPOINT, Str),
            optional(attr::PRIORITY, Str),
        ],
        caller_attrs: false,
    },
    EventSpec {
        event_type: RATE_LIMIT_HOT,
        attrs: &[
            a(attr::TIMESTAMP, Int),
            a(attr::LIMITER, Str),
            a(attr::SHOP_ID, Str),
            a(attr::REASON, Str),
            a(attr::SHARE, Float),
            a(attr::THRESHOLD, Float),
            a(attr::WINDOW_S, Float),
            a(attr::TTL_S, Int),
            a(attr::HOT_UNTIL, Int),
        ],
        caller_attrs: false,
    },
    EventSpec {
        event_type: RATE_LIMIT_CHANGE,
        attrs: &[
            a(attr::TIMESTAMP, Int),
            a(attr::LIMITER, Str),
            a(attr::VERSION, Int),
            a(attr::OLD_MODE, Str),
            a(attr::MODE, Str),
            a(attr::CHANGED_BY, Str),
            a(attr::CHANGED_AT, Int),
            a(attr::OLD, Str),
            a(attr::NEW, Str),
            nullable(attr::ERROR, Str),
        ],
        caller_attrs: false,
    },
    EventSpec {
        event_type: RATE_LIMIT_ADAPT,
        attrs: &[
            a(attr::TIMESTAMP, Int),
            a(attr::LIMITER, Str),
            a(attr::WHY, Str),
            a(attr::FROM, Float),
            a(attr::TO, Float),
            nullable(attr::STATUS, Int),
            nullable(attr::RETRY_AFTER, Float),
            nullable(attr::PAUSED_UNTIL, Int),
        ],
        caller_attrs: false,
    },
];

/// The recorder's event of type `event_type`.
pub fn spec(event_type: &str) -> Option<&'static EventSpec> {
    EVENTS.iter().find(|e| e.event_type == event_type)
}

/// The type of the attribute `name` wherever the schema names it (one name has one type
/// in every event: see the test below).
pub fn attr_type(name: &str) -> Option<AttrType> {
    EVENTS
        .iter()
        .flat_map(|e| e.attrs.iter())
        .chain(CALLER)
        .find(|a| a.name == name)
        .map(|a| a.ty)
}

/// Attribute names a `record()` caller may not set: the recorder writes them.
pub const RECORD_OWNED: &[&str] = &[EVENT_TYPE, attr::TIMESTAMP];

/// Attribute names a `measure()` caller may not set: the recorder measures them.
pub const EXTERNAL_CALL_OWNED: &[&str] = &[
    EVENT_TYPE,
    attr::TIMESTAMP,
    attr::API,
    attr::STATUS_CODE,
    attr::DURATION_MS,
    attr::ERROR_TYPE,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_has_one_type_and_an_event_names_each_attribute_once() {
        let all: Vec<&AttrSpec> = EVENTS.iter().flat_map(|e| e.attrs).chain(CALLER).collect();
        for x in &all {
            assert_eq!(attr_type(x.name), Some(x.ty), "{}", x.name);
            assert!(x.name.len() <= 255 && !x.name.is_empty());
        }
        for e in EVENTS {
            for (i, x) in e.attrs.iter().enumerate() {
                assert!(
                    !e.attrs[i + 1..].iter().any(|y| y.name == x.name),
                    "{} names {} twice",
                    e.event_type,
                    x.name
                );
            }
            assert_eq!(spec(e.event_type), Some(e));
            assert_eq!(e.attrs[0].name, attr::TIMESTAMP, "{}", e.event_type);
        }
        let owned = spec(EXTERNAL_API_CALL).unwrap();
        for n in &EXTERNAL_CALL_OWNED[1..] {
            assert!(owned.attr(n).is_some(), "{n} is measured");
        }
    }
}
