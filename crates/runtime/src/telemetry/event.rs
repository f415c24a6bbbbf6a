//! The event model. Names and values follow New Relic's custom event rules, so the same
//! event can go to the agent, a file or a stream: scalar values, at most 64 attributes,
//! strings (names and values) cut to 255 bytes, event types of `[A-Za-z0-9:_ ]`. The event
//! types and attribute names are the schema's (`checkout_guard_model::events`), which the
//! CLI's readers use too.

use std::borrow::Cow;

use super::url::sanitize_url;
use crate::notices::{AdaptChange, LimitsChange};
use checkout_guard_model::events::attr;
pub use checkout_guard_model::events::{
    EXTERNAL_API_CALL, EXTERNAL_CALL_OWNED, RATE_LIMIT_ADAPT, RATE_LIMIT_CHANGE,
    RATE_LIMIT_DECISION, RATE_LIMIT_HOT, RECORD_OWNED,
};
use checkout_guard_model::{AutoHot, ConfigError, Decision};

/// Most attributes an event keeps (New Relic's limit for custom events from an agent).
pub const MAX_ATTRIBUTES: usize = 64;
/// Longest string value or attribute name, in bytes.
pub const MAX_STRING_BYTES: usize = 255;

/// A scalar attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

impl AttrValue {
    /// A string value from PHP bytes: invalid UTF-8 replaced, cut to 255 bytes.
    pub fn from_bytes(b: &[u8]) -> Self {
        let s = match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        };
        AttrValue::Str(cut(s))
    }

    pub fn str(s: &str) -> Self {
        AttrValue::Str(cut(s.to_string()))
    }
}

/// Cuts a string to at most 255 bytes on a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_STRING_BYTES {
        let mut end = MAX_STRING_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// An attribute name: the well-known ones are static, so building an event allocates
/// only for values and the caller's own names.
pub type Name = Cow<'static, str>;

const KNOWN_NAMES: &[&str] = &[
    attr::TIMESTAMP,
    attr::API,
    attr::METHOD,
    attr::STATUS_CODE,
    attr::SERVER_ADDRESS,
    attr::SERVER_PORT,
    attr::URL_FULL,
    attr::URL_TEMPLATE,
    attr::ERROR_TYPE,
    attr::DURATION_MS,
    attr::SHOP_ID,
    attr::LIMITER,
    attr::REASON,
    attr::ALLOWED,
    attr::RETRY_AFTER_S,
    attr::HOT_SHOP,
    attr::STEP,
    attr::PAYMENT_CHANNEL,
];

/// The name as an attribute name: static when well known, else owned and cut to 255 bytes.
pub fn name(n: &str) -> Name {
    match KNOWN_NAMES.iter().find(|k| **k == n) {
        Some(k) => Cow::Borrowed(k),
        None => Cow::Owned(cut(n.to_string())),
    }
}

/// One custom event.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Static for the recorder's own types (no allocation per event).
    pub event_type: Name,
    pub attrs: Vec<(Name, AttrValue)>,
}

impl Event {
    /// Validates the event type (`[A-Za-z0-9:_ ]`, 1 to 255 bytes).
    pub fn new(event_type: &[u8]) -> Result<Self, ConfigError> {
        let ok = !event_type.is_empty()
            && event_type.len() <= MAX_STRING_BYTES
            && event_type
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'_' | b' '));
        if !ok {
            return Err(ConfigError::new(
                "eventType",
                format!(
                    "must be 1 to 255 characters of A-Z a-z 0-9 : _ and space, got {}",
                    checkout_guard_config::value::quote_bytes(event_type)
                ),
            ));
        }
        Ok(Self {
            event_type: Cow::Owned(String::from_utf8(event_type.to_vec()).expect("ASCII")),
            attrs: Vec::with_capacity(12),
        })
    }

    fn known(event_type: &'static str) -> Self {
        Self {
            event_type: Cow::Borrowed(event_type),
            attrs: Vec::with_capacity(12),
        }
    }

    /// Sets an attribute: replaces a value of the same name, else appends while there is
    /// room for it (at most 64). Names are cut to 255 bytes.
    pub fn set(&mut self, attr: &str, value: AttrValue) {
        if let Some(slot) = self.attrs.iter_mut().find(|(k, _)| k == attr) {
            slot.1 = value;
        } else if self.attrs.len() < MAX_ATTRIBUTES {
            self.attrs.push((name(attr), value));
        }
    }

    /// Like `set` for a name already made with [`name`].
    pub fn set_named(&mut self, attr: Name, value: AttrValue) {
        if let Some(slot) = self.attrs.iter_mut().find(|(k, _)| *k == attr) {
            slot.1 = value;
        } else if self.attrs.len() < MAX_ATTRIBUTES {
            self.attrs.push((attr, value));
        }
    }

    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }

    /// Applies the URL rule to caller-given attributes: `url.full` loses its query,
    /// fragment and credentials, and gives `server.address` when that is missing.
    pub fn sanitize_urls(&mut self) {
        let Some(AttrValue::Str(full)) = self
            .attrs
            .iter_mut()
            .find(|(k, _)| k == attr::URL_FULL)
            .map(|(_, v)| v)
        else {
            return;
        };
        let (url, host) = sanitize_url(full);
        // Cut in place when only the query or fragment goes (the common case).
        let replaced = match url {
            Cow::Borrowed(kept) => Err(kept.len()),
            Cow::Owned(url) => Ok(url),
        };
        match replaced {
            Err(len) => full.truncate(len),
            Ok(url) => *full = url,
        }
        if let Some(host) = host {
            if self.get(attr::SERVER_ADDRESS).is_none() {
                self.set_named(
                    Cow::Borrowed(attr::SERVER_ADDRESS),
                    AttrValue::Str(cut(host)),
                );
            }
        }
    }
}

/// What `measure()` learned about one external call.
#[derive(Debug, Clone, PartialEq)]
pub struct ExternalCall {
    pub api: String,
    /// Unix time in milliseconds when the call started.
    pub timestamp_ms: i64,
    pub duration_ms: f64,
    /// The response's status, 0 when no response came back.
    pub status: i64,
    /// The exception class when the call threw without a response.
    pub exception: Option<String>,
}

/// Removes the caller attributes named in `owned` (they would duplicate or falsify what
/// the recorder writes, e.g. a second `"eventType"` key in the JSON line); returns the
/// names removed.
pub fn drop_owned(attrs: &mut Vec<(Name, AttrValue)>, owned: &[&str]) -> Vec<String> {
    let mut dropped = Vec::new();
    attrs.retain(|(k, _)| {
        let keep = !owned.contains(&k.as_ref());
        if !keep {
            dropped.push(k.to_string());
        }
        keep
    });
    dropped
}

/// The "ExternalApiCall" event: the measured attributes first (they win over caller
/// attributes of the same name), then the caller's, with URLs sanitized.
/// `error.type` follows OpenTelemetry: the status code for 4xx/5xx, else the exception
/// class when the call failed without a response.
pub fn external_call_event(call: &ExternalCall, caller: Vec<(Name, AttrValue)>) -> Event {
    external_call_event_owned(call.clone(), caller)
}

/// As [`external_call_event`], taking the call (its strings move into the event).
pub fn external_call_event_owned(call: ExternalCall, caller: Vec<(Name, AttrValue)>) -> Event {
    let mut e = Event::known(EXTERNAL_API_CALL);
    e.attrs.push((
        Cow::Borrowed(attr::TIMESTAMP),
        AttrValue::Int(call.timestamp_ms),
    ));
    e.attrs
        .push((Cow::Borrowed(attr::API), AttrValue::Str(cut(call.api))));
    e.attrs.push((
        Cow::Borrowed(attr::STATUS_CODE),
        AttrValue::Int(call.status),
    ));
    e.attrs.push((
        Cow::Borrowed(attr::DURATION_MS),
        AttrValue::Float(call.duration_ms),
    ));
    let error = if call.status >= 400 {
        Some(call.status.to_string())
    } else {
        call.exception
    };
    if let Some(error) = error {
        e.attrs
            .push((Cow::Borrowed(attr::ERROR_TYPE), AttrValue::Str(cut(error))));
    }
    let measured = e.attrs.len();
    for (k, v) in caller {
        if !e.attrs[..measured].iter().any(|(n, _)| *n == k)
            && !EXTERNAL_CALL_OWNED.contains(&k.as_ref())
        {
            e.set_named(k, v);
        }
    }
    e.sanitize_urls();
    e
}

/// The "RateLimitDecision" event for a denied or unavailable decision, and in shadow mode
/// for one enforcement would have denied (`allowed: true`, `would_allow: false`,
/// `mode: "shadow"`).
pub fn decision_event(limiter: &str, shop: &[u8], d: &Decision, timestamp_ms: i64) -> Event {
    decision_event_routed(limiter, shop, d, (None, None), timestamp_ms)
}

/// [`decision_event`] of a call that named an endpoint and/or was decided in a priority
/// class (`route`: endpoint, class): the attributes `endpoint` and `priority`, each when
/// there is one.
pub fn decision_event_routed(
    limiter: &str,
    shop: &[u8],
    d: &Decision,
    route: (Option<&str>, Option<&str>),
    timestamp_ms: i64,
) -> Event {
    let mut e = Event::known(RATE_LIMIT_DECISION);
    e.attrs
        .push((Cow::Borrowed(attr::TIMESTAMP), AttrValue::Int(timestamp_ms)));
    e.attrs
        .push((Cow::Borrowed(attr::LIMITER), AttrValue::str(limiter)));
    e.attrs
        .push((Cow::Borrowed(attr::SHOP_ID), AttrValue::from_bytes(shop)));
    e.attrs.push((
        Cow::Borrowed(attr::REASON),
        AttrValue::str(d.reason.as_str()),
    ));
    e.attrs
        .push((Cow::Borrowed(attr::ALLOWED), AttrValue::Bool(d.allowed)));
    e.attrs.push((
        Cow::Borrowed(attr::WOULD_ALLOW),
        AttrValue::Bool(d.would_allow),
    ));
    let mode = if d.shadow { "shadow" } else { "enforce" };
    e.attrs
        .push((Cow::Borrowed(attr::MODE), AttrValue::str(mode)));
    e.attrs.push((
        Cow::Borrowed(attr::RETRY_AFTER_S),
        AttrValue::Float(d.retry_after),
    ));
    e.attrs
        .push((Cow::Borrowed(attr::HOT_SHOP), AttrValue::Bool(d.hot_shop)));
    for (name, value) in [(attr::ENDPOINT, route.0), (attr::PRIORITY, route.1)] {
        if let Some(v) = value {
            e.attrs.push((Cow::Borrowed(name), AttrValue::str(v)));
        }
    }
    e
}

/// The "RateLimitHot" event: `auto_hot` made `shop` hot (when, why: its share of the global
/// bucket's consumption over the window, above the threshold; until when).
pub fn hot_event(limiter: &str, shop: &[u8], share: f64, a: &AutoHot, timestamp_ms: i64) -> Event {
    let mut e = Event::known(RATE_LIMIT_HOT);
    let attrs: [(&'static str, AttrValue); 9] = [
        (attr::TIMESTAMP, AttrValue::Int(timestamp_ms)),
        (attr::LIMITER, AttrValue::str(limiter)),
        (attr::SHOP_ID, AttrValue::from_bytes(shop)),
        (attr::REASON, AttrValue::str("auto_hot")),
        (attr::SHARE, AttrValue::Float(share)),
        (attr::THRESHOLD, AttrValue::Float(a.share)),
        (attr::WINDOW_S, AttrValue::Float(a.window.as_secs_f64())),
        (attr::TTL_S, AttrValue::Int(a.ttl_seconds)),
        (
            attr::HOT_UNTIL,
            AttrValue::Int(timestamp_ms + a.ttl_seconds * 1000),
        ),
    ];
    for (k, v) in attrs {
        e.attrs.push((Cow::Borrowed(k), v));
    }
    e
}

/// The "RateLimitChange" event: this worker now decides with new live limits (who set
/// them and when, the buckets before and after; `error` when they were invalid for this
/// limiter and its constructor values stay).
pub fn limits_change_event(limiter: &str, c: &LimitsChange, timestamp_ms: i64) -> Event {
    let mut e = Event::known(RATE_LIMIT_CHANGE);
    let attrs: [(&'static str, AttrValue); 10] = [
        (attr::TIMESTAMP, AttrValue::Int(timestamp_ms)),
        (attr::LIMITER, AttrValue::str(limiter)),
        (attr::VERSION, AttrValue::Int(c.version)),
        (attr::OLD_MODE, AttrValue::str(c.old_mode.as_str())),
        (attr::MODE, AttrValue::str(c.mode.as_str())),
        (attr::CHANGED_BY, AttrValue::str(&c.by)),
        (attr::CHANGED_AT, AttrValue::Int(c.at_ms)),
        (attr::OLD, AttrValue::str(&c.old)),
        (attr::NEW, AttrValue::str(&c.new)),
        (
            attr::ERROR,
            c.error.as_deref().map_or(AttrValue::Null, AttrValue::str),
        ),
    ];
    for (k, v) in attrs {
        e.attrs.push((Cow::Borrowed(k), v));
    }
    e
}

/// The "RateLimitAdapt" event: the adaptive budget changed, as this process saw it
/// (`why`: "throttled" (a throttling answer decreased the share), "retry_after" (the
/// provider's pause), "recovered" (back at the limits)); shares 0..1 of the limits.
pub fn adapt_event(limiter: &str, c: &AdaptChange, timestamp_ms: i64) -> Event {
    let mut e = Event::known(RATE_LIMIT_ADAPT);
    let attrs: [(&'static str, AttrValue); 8] = [
        (attr::TIMESTAMP, AttrValue::Int(timestamp_ms)),
        (attr::LIMITER, AttrValue::str(limiter)),
        (attr::WHY, AttrValue::str(c.why.as_str())),
        (attr::FROM, AttrValue::Float(c.from)),
        (attr::TO, AttrValue::Float(c.to)),
        (
            attr::STATUS,
            c.status.map_or(AttrValue::Null, AttrValue::Int),
        ),
        (
            attr::RETRY_AFTER,
            c.retry_after.map_or(AttrValue::Null, AttrValue::Float),
        ),
        (
            attr::PAUSED_UNTIL,
            c.paused_until_ms.map_or(AttrValue::Null, AttrValue::Int),
        ),
    ];
    for (k, v) in attrs {
        e.attrs.push((Cow::Borrowed(k), v));
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkout_guard_model::Reason;

    #[test]
    fn adapt_events_carry_why_shares_and_the_pause() {
        let c = AdaptChange {
            why: crate::notices::AdaptWhy::RetryAfter,
            from: 0.7,
            to: 0.7,
            status: Some(429),
            retry_after: Some(2.5),
            paused_until_ms: Some(1_700_000_002_500),
        };
        let e = adapt_event("payments", &c, 1_700_000_000_000);
        assert_eq!(e.event_type, RATE_LIMIT_ADAPT);
        assert_eq!(e.get("why"), Some(&AttrValue::str("retry_after")));
        assert_eq!(e.get("from"), Some(&AttrValue::Float(0.7)));
        assert_eq!(e.get("status"), Some(&AttrValue::Int(429)));
        assert_eq!(
            e.get("paused_until"),
            Some(&AttrValue::Int(1_700_000_002_500))
        );
        let r = AdaptChange {
            why: crate::notices::AdaptWhy::Recovered,
            from: 0.4,
            to: 1.0,
            status: None,
            retry_after: None,
            paused_until_ms: None,
        };
        let e = adapt_event("payments", &r, 5);
        assert_eq!(e.get("why"), Some(&AttrValue::str("recovered")));
        assert_eq!(e.get("status"), Some(&AttrValue::Null));
        assert_eq!(e.get("to"), Some(&AttrValue::Float(1.0)));
    }

    #[test]
    fn callers_cannot_set_what_the_recorder_owns() {
        let mut attrs = vec![
            (name("eventType"), AttrValue::str("ExternalApiCall")),
            (name("order"), AttrValue::Int(1)),
            (name("timestamp"), AttrValue::Int(0)),
            (name("error.type"), AttrValue::str("none")),
        ];
        let dropped = drop_owned(&mut attrs, EXTERNAL_CALL_OWNED);
        assert_eq!(dropped, ["eventType", "timestamp", "error.type"]);
        assert_eq!(attrs.len(), 1);
        let mut e = Event::new(b"CheckoutStep").unwrap();
        for (k, v) in attrs {
            e.set_named(k, v);
        }
        let mut line = String::new();
        crate::telemetry::write_event_line(&mut line, &e);
        assert_eq!(line.matches("eventType").count(), 1, "{line}");
    }

    fn call(status: i64, exception: Option<&str>) -> ExternalCall {
        ExternalCall {
            api: "zoneA".into(),
            timestamp_ms: 1_700_000_000_123,
            duration_ms: 12.5,
            status,
            exception: exception.map(str::to_string),
        }
    }

    #[test]
    fn error_type_follows_opentelemetry() {
        let ok = external_call_event(&call(200, None), vec![]);
        assert_eq!(ok.get("error.type"), None);
        let e429 = external_call_event(&call(429, None), vec![]);
        assert_eq!(e429.get("error.type"), Some(&AttrValue::str("429")));
        let thrown = external_call_event(
            &call(503, Some("GuzzleHttp\\Exception\\ServerException")),
            vec![],
        );
        assert_eq!(thrown.get("error.type"), Some(&AttrValue::str("503")));
        let none = external_call_event(
            &call(0, Some("GuzzleHttp\\Exception\\ConnectException")),
            vec![],
        );
        assert_eq!(
            none.get("error.type"),
            Some(&AttrValue::str("GuzzleHttp\\Exception\\ConnectException"))
        );
        assert_eq!(
            none.get("http.response.status_code"),
            Some(&AttrValue::Int(0))
        );
    }

    #[test]
    fn caller_attributes_follow_measured_ones_and_urls_are_sanitized() {
        let e = external_call_event(
            &call(200, None),
            vec![
                (name("shop.id"), AttrValue::str("s-1")),
                (name("api"), AttrValue::str("spoofed")),
                (name("http.request.method"), AttrValue::str("POST")),
                (
                    name("url.full"),
                    AttrValue::str("https://u:p@pay.example/v1/charge?card=4111"),
                ),
            ],
        );
        assert_eq!(e.get("api"), Some(&AttrValue::str("zoneA")));
        assert_eq!(e.get("shop.id"), Some(&AttrValue::str("s-1")));
        assert_eq!(
            e.get("url.full"),
            Some(&AttrValue::str("https://pay.example/v1/charge"))
        );
        assert_eq!(
            e.get("server.address"),
            Some(&AttrValue::str("pay.example"))
        );
    }

    #[test]
    fn new_relic_limits() {
        let caller = (0..100)
            .map(|i| (name(&format!("a{i}")), AttrValue::Int(i)))
            .collect();
        let e = external_call_event(&call(200, None), caller);
        assert_eq!(e.attrs.len(), MAX_ATTRIBUTES);
        let long = "é".repeat(200); // 400 bytes
        let v = AttrValue::str(&long);
        let AttrValue::Str(s) = v else { panic!() };
        assert_eq!(
            s.len(),
            254,
            "cut on a character boundary at or below 255 bytes"
        );
        assert!(Event::new(b"Checkout Step:2").is_ok());
        for bad in [&b""[..], b"bad-type", b"a.b", &[b'a'; 256]] {
            assert_eq!(Event::new(bad).unwrap_err().option, "eventType");
        }
        assert_eq!(
            AttrValue::from_bytes(b"\xffok"),
            AttrValue::str("\u{fffd}ok")
        );
    }

    #[test]
    fn decision_events_carry_limiter_shop_reason_and_retry() {
        let d = Decision {
            allowed: false,
            reason: Reason::HotShop,
            retry_after: 0.25,
            remaining: 0,
            hot_shop: true,
            waited: 0.0,
            would_allow: false,
            shadow: false,
            lease: None,
        };
        let e = decision_event("payments", b"shop-9", &d, 5);
        assert_eq!(e.event_type, RATE_LIMIT_DECISION);
        assert_eq!(e.get("reason"), Some(&AttrValue::str("hot_shop")));
        assert_eq!(e.get("retry_after.s"), Some(&AttrValue::Float(0.25)));
        assert_eq!(e.get("shop.id"), Some(&AttrValue::str("shop-9")));
        assert_eq!(e.get("would_allow"), Some(&AttrValue::Bool(false)));
        assert_eq!(e.get("mode"), Some(&AttrValue::str("enforce")));
        let e = decision_event("payments", b"shop-9", &d.into_shadow(0.0), 5);
        assert_eq!(e.get("allowed"), Some(&AttrValue::Bool(true)));
        assert_eq!(e.get("would_allow"), Some(&AttrValue::Bool(false)));
        assert_eq!(e.get("mode"), Some(&AttrValue::str("shadow")));
        assert_eq!(e.get("reason"), Some(&AttrValue::str("hot_shop")));
    }
}
