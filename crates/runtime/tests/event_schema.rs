//! What the runtime writes is what the readers read: one event of every type the recorder
//! writes, serialized as the JSONL sink and the stream sink write it, checked against the
//! one schema (`checkout_guard_model::events`: each attribute named there, in its order,
//! of its type) and read back by the CLI's record reader (the scan's, the report's and
//! the replay's), both its fast path and its full parser, every field it reads equal to
//! what was written.

use std::time::Duration;

use checkout_guard_cli::scan::{parse_line, parse_line_fully, Record, Text};
use checkout_guard_config::Mode;
use checkout_guard_model::events::{self, attr, AttrType, EventSpec, Presence, CALLER, EVENTS};
use checkout_guard_model::{AutoHot, Decision, Lane, Reason};
use checkout_guard_runtime::notices::{AdaptChange, AdaptWhy, LimitsChange};
use checkout_guard_runtime::telemetry::{
    adapt_event, decision_event, external_call_event, hot_event, limits_change_event, name,
    write_event_line, AttrValue, Event, ExternalCall,
};
use serde_json::{Map, Value};

const NOW: i64 = 1_700_000_000_123;

/// At least one event of each type, with every optional attribute present and absent and
/// every nullable one null and not.
fn one_of_each() -> Vec<Event> {
    let call = |status, exception: Option<&str>| ExternalCall {
        api: "psp".into(),
        timestamp_ms: NOW,
        duration_ms: 12.5,
        status,
        exception: exception.map(str::to_string),
    };
    let caller = vec![
        (name(attr::SHOP_ID), AttrValue::str("shop-1")),
        (name(attr::METHOD), AttrValue::str("POST")),
        (
            name(attr::URL_FULL),
            AttrValue::str("https://pay.example:8443/v1/charge?card=4111"),
        ),
        (name(attr::URL_TEMPLATE), AttrValue::str("/v1/charge")),
        (name(attr::SERVER_PORT), AttrValue::Int(8443)),
        (name(attr::STEP), AttrValue::str("paid")),
        (name(attr::PAYMENT_CHANNEL), AttrValue::str("card")),
        (name(attr::TAG), AttrValue::str("black-friday")),
    ];
    let denied = Decision::local_denial(Lane::HotShop, 0.25, 0, true);
    let auto_hot = AutoHot {
        window: Duration::from_secs(10),
        share: 0.3,
        ttl_seconds: 60,
        min_tokens: 20,
    };
    let change = LimitsChange {
        version: 7,
        by: "ops@host".into(),
        at_ms: NOW - 5,
        old: "global=100/s".into(),
        new: "global=50/s".into(),
        error: None,
        old_mode: Mode::Enforce,
        mode: Mode::Shadow,
    };
    let adapt = AdaptChange {
        why: AdaptWhy::RetryAfter,
        from: 0.7,
        to: 0.7,
        status: Some(429),
        retry_after: Some(2.5),
        paused_until_ms: Some(NOW + 2500),
    };
    vec![
        external_call_event(&call(200, None), caller),
        external_call_event(&call(503, Some("X\\ServerException")), vec![]),
        decision_event("payments", b"shop-9", &denied, NOW),
        decision_event("payments", b"shop-9", &denied.into_shadow(0.0), NOW),
        decision_event(
            "payments",
            b"shop-\"quoted\"",
            &Decision::unavailable(true, 0.0, false),
            NOW,
        ),
        hot_event("payments", b"shop-9", 0.42, &auto_hot, NOW),
        limits_change_event("payments", &change, NOW),
        limits_change_event(
            "payments",
            &LimitsChange {
                error: Some("hot_shop is not configured".into()),
                ..change
            },
            NOW,
        ),
        adapt_event("payments", &adapt, NOW),
        adapt_event(
            "payments",
            &AdaptChange {
                why: AdaptWhy::Recovered,
                from: 0.4,
                to: 1.0,
                status: None,
                retry_after: None,
                paused_until_ms: None,
            },
            NOW,
        ),
    ]
}

fn line_of(e: &Event) -> String {
    let mut line = String::new();
    write_event_line(&mut line, e);
    assert!(line.ends_with('\n') && line.matches('\n').count() == 1);
    line.pop();
    line
}

fn has_type(v: &Value, ty: AttrType) -> bool {
    match ty {
        AttrType::Int => v.is_i64(),
        // Written with a decimal point or an exponent: read back as a float.
        AttrType::Float => v.is_f64(),
        AttrType::Bool => v.is_boolean(),
        AttrType::Str => v.is_string(),
    }
}

/// The line holds the spec's attributes, in its order and of its types, then (where the
/// spec allows them) caller attributes, the ones the readers know of their types.
/// `written`: the attribute names in the order the line has them (the event's order).
fn check_against_schema(
    spec: &EventSpec,
    written: &[&str],
    object: &Map<String, Value>,
    line: &str,
) {
    assert!(line.starts_with("{\"eventType\":"), "{line}");
    assert_eq!(object.len(), written.len() + 1, "each name once: {line}");
    let mut at = 0;
    for a in spec.attrs {
        let present = written.get(at).is_some_and(|k| *k == a.name);
        match (a.presence, present) {
            (Presence::Optional, false) => continue,
            (_, false) => panic!("{} misses {}: {line}", spec.event_type, a.name),
            (_, true) => at += 1,
        }
        let v = &object[a.name];
        let ok = has_type(v, a.ty) || (a.presence == Presence::Nullable && v.is_null());
        assert!(
            ok,
            "{}: {} is not {:?}: {line}",
            spec.event_type, a.name, a.ty
        );
    }
    let rest = &written[at..];
    assert!(
        spec.caller_attrs || rest.is_empty(),
        "{} writes {rest:?}, not in the schema: {line}",
        spec.event_type
    );
    for k in rest {
        assert!(spec.attr(k).is_none(), "{k} twice: {line}");
        if let Some(c) = CALLER.iter().find(|c| c.name == *k) {
            assert!(has_type(&object[*k], c.ty), "{k}: {line}");
        }
    }
}

/// Every field the record reader reads, as the line has it.
fn check_reader(r: &Record<'_>, object: &Map<String, Value>, line: &str) {
    let text = |t: &Option<Text<'_>>| t.as_ref().map(|t| String::from_utf8(t.to_vec()).unwrap());
    let s = |k: &str| object.get(k).and_then(Value::as_str).map(str::to_string);
    let i = |k: &str| object.get(k).and_then(Value::as_i64);
    let b = |k: &str| object.get(k).and_then(Value::as_bool);
    assert_eq!(text(&r.event_type), s(events::EVENT_TYPE), "{line}");
    assert_eq!(r.timestamp_ms, i(attr::TIMESTAMP), "{line}");
    assert_eq!(text(&r.api), s(attr::API), "{line}");
    assert_eq!(r.status, i(attr::STATUS_CODE), "{line}");
    assert_eq!(
        r.duration_ms(),
        object.get(attr::DURATION_MS).and_then(Value::as_f64),
        "{line}"
    );
    assert_eq!(text(&r.shop), s(attr::SHOP_ID), "{line}");
    assert_eq!(text(&r.reason), s(attr::REASON), "{line}");
    assert_eq!(r.allowed, b(attr::ALLOWED), "{line}");
    assert_eq!(r.would_allow, b(attr::WOULD_ALLOW), "{line}");
    assert_eq!(text(&r.step), s(attr::STEP), "{line}");
    assert_eq!(text(&r.channel), s(attr::PAYMENT_CHANNEL), "{line}");
    assert_eq!(text(&r.tag), s(attr::TAG), "{line}");
    assert_eq!(text(&r.limiter), s(attr::LIMITER), "{line}");
}

#[test]
fn what_the_runtime_writes_is_what_the_readers_read() {
    let events = one_of_each();
    for spec in EVENTS {
        assert!(
            events.iter().any(|e| e.event_type == spec.event_type),
            "no {} in the test",
            spec.event_type
        );
    }
    let mut read_fields = 0;
    for e in &events {
        let line = line_of(e);
        let spec = events::spec(&e.event_type).unwrap_or_else(|| panic!("{line}"));
        let object: Map<String, Value> = serde_json::from_str(&line).unwrap();
        let written: Vec<&str> = e.attrs.iter().map(|(k, _)| k.as_ref()).collect();
        check_against_schema(spec, &written, &object, &line);
        let fast = parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e:?}"));
        let full = parse_line_fully(line.as_bytes()).unwrap();
        assert_eq!(fast, full, "{line}");
        check_reader(&fast, &object, &line);
        read_fields += [
            fast.api.is_some(),
            fast.status.is_some(),
            fast.shop.is_some(),
            fast.reason.is_some(),
            fast.allowed.is_some(),
            fast.would_allow.is_some(),
            fast.limiter.is_some(),
            fast.step.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
    }
    assert!(read_fields > 20, "the reader read the events' fields");
    // The readers' denial: what the scan and the report count.
    let decision = |d: &Decision| line_of(&decision_event("p", b"s", d, NOW));
    let denied = Decision::local_denial(Lane::Global, 0.5, 0, false);
    assert_eq!(
        parse_line(decision(&denied).as_bytes()).unwrap().denial(),
        Some(false)
    );
    assert_eq!(
        parse_line(decision(&denied.into_shadow(0.0)).as_bytes())
            .unwrap()
            .denial(),
        Some(true),
        "a shadow denial"
    );
    assert_eq!(denied.reason, Reason::Global);
    // Every reason a decision can have reaches the readers as written (the in-flight
    // levels' too: the scan and the report count them as they count the buckets').
    for reason in Reason::ALL {
        let d = Decision {
            reason,
            allowed: reason == Reason::Allowed,
            would_allow: reason == Reason::Allowed,
            ..denied
        };
        let line = decision(&d);
        let read = parse_line(line.as_bytes()).unwrap();
        assert_eq!(
            read.reason.as_deref(),
            Some(reason.as_str().as_bytes()),
            "{reason:?}"
        );
        assert_eq!(read.denial(), (reason != Reason::Allowed).then_some(false));
    }
}
