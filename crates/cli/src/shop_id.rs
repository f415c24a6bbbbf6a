//! Shop IDs on the command line. A shop ID is bytes (PHP strings need not be UTF-8), a
//! terminal and JSON want text: `limiter status` shows every shop ID in one escaped form,
//! and every command taking a shop ID (`hot`, `unhot`, `call`) reads that form back.
//!
//! The form: `\` is written `\\`; a byte that is not part of valid UTF-8, and every byte
//! of a control character (C0, DEL, C1), is written `\xHH` (two lowercase hex digits);
//! everything else is itself. Read back, `\\` and `\xHH` (either case) are the only
//! escapes; a lone `\` is refused. `escape` is injective (`unescape(escape(s)) == s`), so
//! two shops are never shown alike, and a UTF-8 shop ID that contains a backslash is
//! shown with it doubled (`a\b` is shown `a\\b`; typed `a\b` is refused, not guessed).

/// The escaped form of `shop` (see the module).
pub fn escape(shop: &[u8]) -> String {
    let mut out = String::with_capacity(shop.len());
    for chunk in shop.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                c if c.is_control() => {
                    let mut buf = [0u8; 4];
                    for b in c.encode_utf8(&mut buf).bytes() {
                        out.push_str(&format!("\\x{b:02x}"));
                    }
                }
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// The bytes `text` (the escaped form) stands for; an error naming the bad escape. Bytes
/// other than `\` stand for themselves, so an argument given as raw bytes (bash's
/// `$'shop-\xff'`) is taken as it is, as long as it has no backslash.
pub fn unescape(text: &[u8]) -> Result<Vec<u8>, String> {
    let b = text;
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let hex = |c: Option<&u8>| c.and_then(|&c| (c as char).to_digit(16));
        match b.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => match (hex(b.get(i + 2)), hex(b.get(i + 3))) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 4;
                }
                _ => return Err(bad(text, i)),
            },
            _ => return Err(bad(text, i)),
        }
    }
    Ok(out)
}

fn bad(text: &[u8], at: usize) -> String {
    format!(
        "shop ID \"{}\" (as typed): bad escape at byte {at}: a shop ID is given as `limiter status` shows it, \
         where `\\\\` is a backslash and `\\xHH` a byte (two hex digits), and no other `\\` is \
         allowed (a shop ID with that very text, backslashes and all, is \"{}\")",
        String::from_utf8_lossy(text),
        escape(text)
    )
}

/// The raw bytes in lowercase hex (JSON's `shop_hex`).
pub fn hex(shop: &[u8]) -> String {
    shop.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaped_forms_are_distinct_and_read_back() {
        let cases: &[(&[u8], &str)] = &[
            (b"shop-1", "shop-1"),
            (b"flash sale", "flash sale"),
            ("caf\u{e9}".as_bytes(), "caf\u{e9}"),
            (b"shop-\xff", "shop-\\xff"),
            (b"shop-\xfe", "shop-\\xfe"),
            (b"shop-\\xff", "shop-\\\\xff"),
            (b"a\\b", "a\\\\b"),
            (b"\\", "\\\\"),
            (b"\xc3", "\\xc3"),
            (b"\xc3\xa9\xc3", "\u{e9}\\xc3"),
            ("\u{85}".as_bytes(), "\\xc2\\x85"),
            (b"\x01\x7f", "\\x01\\x7f"),
            (b"a\"b", "a\"b"),
        ];
        for &(raw, shown) in cases {
            assert_eq!(escape(raw), shown, "{raw:?}");
            assert_eq!(unescape(shown.as_bytes()).unwrap(), raw, "{shown}");
        }
        let shown: std::collections::HashSet<_> = cases.iter().map(|c| escape(c.0)).collect();
        assert_eq!(shown.len(), cases.len());
        // Typed by hand: either hex case; the UTF-8 bytes of a character as escapes.
        assert_eq!(unescape(b"shop-\\xFF").unwrap(), b"shop-\xff");
        assert_eq!(unescape(b"caf\\xc3\\xa9").unwrap(), "caf\u{e9}".as_bytes());
        // Raw bytes (an argument that is not UTF-8) stand for themselves.
        assert_eq!(unescape(b"shop-\xff").unwrap(), b"shop-\xff");
        for bad in ["a\\b", "\\", "x\\x", "x\\xf", "x\\xfg", "\\u00ff", "\\n"] {
            let e = unescape(bad.as_bytes()).unwrap_err();
            let literal = format!("is \"{}\")", escape(bad.as_bytes()));
            assert!(
                e.contains(&format!("shop ID \"{bad}\" (as typed): bad escape")),
                "{e}"
            );
            assert!(e.contains(&literal), "{e}");
        }
        let e = unescape(b"\xff\\q").unwrap_err();
        assert!(e.contains("is \"\\xff\\\\q\")"), "{e}");
        assert_eq!(hex(b"shop\xff"), "73686f70ff");
    }

    #[test]
    fn every_byte_string_round_trips() {
        // All strings of up to 2 bytes, and 3-byte strings over the interesting bytes.
        let mut all: Vec<Vec<u8>> = vec![vec![]];
        for a in 0..=255u8 {
            all.push(vec![a]);
            for b in 0..=255u8 {
                all.push(vec![a, b]);
            }
        }
        let some = [
            b'a', b'\\', b'x', b'f', 0x7f, 0x80, 0xc2, 0xc3, 0xa9, 0xe2, 0xff,
        ];
        for &a in &some {
            for &b in &some {
                for &c in &some {
                    all.push(vec![a, b, c]);
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        for s in &all {
            let e = escape(s);
            assert_eq!(unescape(e.as_bytes()).unwrap(), *s, "{s:?} shown {e}");
            assert!(seen.insert(e), "{s:?} shown like another");
        }
    }
}
