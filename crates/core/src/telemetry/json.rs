//! JSON lines, written by hand: events are flat objects of scalars, so a small writer is
//! all it takes, and it never allocates per value.

use std::fmt::Write;

use super::event::{AttrValue, Event};

/// Appends `s` as a JSON string. Invalid UTF-8 has already been replaced when the event
/// was built, so `s` is valid UTF-8 here.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f | 0x7f => "",
            _ => continue,
        };
        out.push_str(&s[start..i]);
        if esc.is_empty() {
            let _ = write!(out, "\\u{:04x}", b);
        } else {
            out.push_str(esc);
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

fn write_value(out: &mut String, v: &AttrValue) {
    match v {
        AttrValue::Null => out.push_str("null"),
        AttrValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        AttrValue::Int(i) => {
            let _ = write!(out, "{i}");
        }
        AttrValue::Float(f) if f.is_finite() => {
            // `{:?}` keeps a decimal point or exponent, so the value reads back as a float.
            let _ = write!(out, "{f:?}");
        }
        AttrValue::Float(_) => out.push_str("null"),
        AttrValue::Str(s) => write_json_string(out, s),
    }
}

/// Appends one event as a JSON object on its own line: `{"eventType":...,attrs...}\n`.
pub fn write_event_line(out: &mut String, e: &Event) {
    out.push_str("{\"eventType\":");
    write_json_string(out, &e.event_type);
    for (k, v) in &e.attrs {
        out.push(',');
        write_json_string(out, k);
        out.push(':');
        write_value(out, v);
    }
    out.push_str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_formats() {
        let e = Event {
            event_type: "ExternalApiCall".into(),
            attrs: vec![
                ("api".into(), AttrValue::Str("zone \"A\"\n\u{1}ü\\".into())),
                ("n".into(), AttrValue::Int(-3)),
                ("ms".into(), AttrValue::Float(12.0)),
                ("nan".into(), AttrValue::Float(f64::NAN)),
                ("ok".into(), AttrValue::Bool(true)),
                ("none".into(), AttrValue::Null),
            ],
        };
        let mut s = String::new();
        write_event_line(&mut s, &e);
        assert_eq!(
            s,
            "{\"eventType\":\"ExternalApiCall\",\"api\":\"zone \\\"A\\\"\\n\\u0001ü\\\\\",\"n\":-3,\"ms\":12.0,\"nan\":null,\"ok\":true,\"none\":null}\n"
        );
    }
}
