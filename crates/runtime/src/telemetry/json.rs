//! JSON lines, written by hand: events are flat objects of scalars, so a small writer is
//! all it takes, and it never allocates per value.

use std::borrow::Cow;
use std::fmt::Write;

use super::event::{AttrValue, Event};

/// The first byte that needs escaping in a JSON string: controls, `"` and `\\` (and DEL,
/// kept readable). Eight bytes at a time (SWAR), the tail too: most attribute values have
/// none, and this runs for every string of every event.
fn find_escape(bytes: &[u8]) -> Option<usize> {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let has_zero = |x: u64| x.wrapping_sub(LO) & !x & HI;
    // Bytes < 0x20 (x - 0x20.. borrows), '"', '\\' and 0x7f (equal after xor); the lowest
    // flagged byte is a true hit (borrows only run upwards).
    let first_hit = |x: u64| {
        let hit = (x.wrapping_sub(0x20 * LO) & !x & HI)
            | has_zero(x ^ (b'"' as u64 * LO))
            | has_zero(x ^ (b'\\' as u64 * LO))
            | has_zero(x ^ (0x7f * LO));
        (hit != 0).then(|| (hit.trailing_zeros() / 8) as usize)
    };
    let mut i = 0;
    while i + 8 <= bytes.len() {
        let x = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes"));
        if let Some(p) = first_hit(x) {
            return Some(i + p);
        }
        i += 8;
    }
    // The last 0 to 7 bytes, padded with a byte that needs no escape: one more step.
    let mut tail = [b'a'; 8];
    tail[..bytes.len() - i].copy_from_slice(&bytes[i..]);
    first_hit(u64::from_le_bytes(tail)).map(|p| i + p)
}

/// Appends `s` as a JSON string. Invalid UTF-8 has already been replaced when the event
/// was built, so `s` is valid UTF-8 here.
pub fn write_json_string(out: &mut String, s: &str) {
    out.push('"');
    let bytes = s.as_bytes();
    let mut start = 0;
    while let Some(off) = find_escape(&bytes[start..]) {
        let i = start + off;
        out.push_str(&s[start..i]);
        match bytes[i] {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            b => {
                let _ = write!(out, "\\u{:04x}", b);
            }
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
        AttrValue::Int(i) => out.push_str(itoa::Buffer::new().format(*i)),
        AttrValue::Float(f) if f.is_finite() => {
            // The shortest form that reads back as the same float, always with a decimal
            // point or an exponent (ryu: `12.0`, `0.25`, `1e-7`), so it reads back as a float.
            out.push_str(ryu::Buffer::new().format_finite(*f));
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
        match k {
            // A static name is one of the code's own (`KNOWN_NAMES` and the recorder's):
            // nothing in it to escape.
            Cow::Borrowed(k) => {
                debug_assert!(find_escape(k.as_bytes()).is_none(), "{k}");
                out.push_str(",\"");
                out.push_str(k);
                out.push_str("\":");
            }
            Cow::Owned(k) => {
                out.push(',');
                write_json_string(out, k);
                out.push(':');
            }
        }
        write_value(out, v);
    }
    out.push_str("}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_every_byte_that_needs_escaping_at_any_position() {
        for len in 0..40 {
            for pos in 0..len {
                for special in [0u8, 0x1f, b'"', b'\\', 0x7f] {
                    let mut v = vec![b'a'; len];
                    v[pos] = special;
                    assert_eq!(
                        find_escape(&v),
                        Some(pos),
                        "len {len} pos {pos} byte {special}"
                    );
                }
            }
            let clean: Vec<u8> = (0..len).map(|i| b" !#[]~\xc3\xa9"[i % 8]).collect();
            assert_eq!(find_escape(&clean), None, "{clean:?}");
        }
    }

    #[test]
    fn every_byte_value_is_judged_as_a_table_would_at_every_position() {
        let needs = |b: u8| b < 0x20 || b == b'"' || b == b'\\' || b == 0x7f;
        for b in 0..=255u8 {
            for len in 1..20 {
                for pos in 0..len {
                    let mut v = vec![b' '; len];
                    v[pos] = b;
                    assert_eq!(find_escape(&v), needs(b).then_some(pos), "{b} {len} {pos}");
                }
            }
        }
    }

    #[test]
    fn numbers_read_back_as_the_same_number_and_floats_as_floats() {
        for x in [
            0.0,
            -0.0,
            12.0,
            0.25,
            1e-5,
            1.5e-7,
            0.0001,
            1e16,
            1e21,
            71.854126,
            5e-324,
            f64::MAX,
        ] {
            let mut s = String::new();
            write_value(&mut s, &AttrValue::Float(x));
            assert_eq!(s.parse::<f64>().unwrap().to_bits(), x.to_bits(), "{s}");
            assert!(
                s.contains('.') || s.contains('e'),
                "{s} reads back as a float"
            );
        }
        for i in [0, -1, i64::MIN, i64::MAX, 1_796_167_646_038] {
            let mut s = String::new();
            write_value(&mut s, &AttrValue::Int(i));
            assert_eq!(s, i.to_string());
        }
    }

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
