//! The fields of one JSONL event that the scan needs, read without building a JSON tree:
//! events are flat objects, so one pass over the line finds the keys, and only those
//! values are decoded.

use std::borrow::Cow;

/// What the scan reads from one event line.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Record<'a> {
    pub event_type: Option<Cow<'a, str>>,
    pub timestamp_ms: Option<i64>,
    pub api: Option<Cow<'a, str>>,
    pub status: Option<i64>,
    pub shop: Option<Cow<'a, str>>,
    pub reason: Option<Cow<'a, str>>,
    pub allowed: Option<bool>,
    pub duration_ms: Option<f64>,
    pub step: Option<Cow<'a, str>>,
    pub channel: Option<Cow<'a, str>>,
    pub tag: Option<Cow<'a, str>>,
}

/// Why a line could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub column: usize,
    pub what: &'static str,
}

struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn err<T>(&self, what: &'static str) -> Result<T, LineError> {
        Err(LineError {
            column: self.i + 1,
            what,
        })
    }

    fn ws(&mut self) {
        while self.i < self.b.len() && matches!(self.b[self.i], b' ' | b'\t' | b'\r' | b'\n') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn expect(&mut self, c: u8, what: &'static str) -> Result<(), LineError> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            self.err(what)
        }
    }

    /// A string at the cursor (after its opening quote has been seen): its raw bytes and
    /// whether it holds escapes.
    fn raw_string(&mut self) -> Result<(&'a [u8], bool), LineError> {
        self.i += 1; // opening quote
        let start = self.i;
        let mut escaped = false;
        while self.i < self.b.len() {
            match self.b[self.i] {
                b'"' => {
                    let s = &self.b[start..self.i];
                    self.i += 1;
                    return Ok((s, escaped));
                }
                b'\\' => {
                    escaped = true;
                    self.i += 2;
                }
                _ => self.i += 1,
            }
        }
        self.err("unterminated string")
    }

    fn string(&mut self) -> Result<Cow<'a, str>, LineError> {
        let (raw, escaped) = self.raw_string()?;
        if !escaped {
            return std::str::from_utf8(raw)
                .map(Cow::Borrowed)
                .or_else(|_| self.err("invalid UTF-8"));
        }
        unescape(raw).map(Cow::Owned).ok_or(LineError {
            column: self.i,
            what: "invalid escape",
        })
    }

    /// A string value, or None (skipped) when the value is not a string.
    fn string_field(&mut self) -> Result<Option<Cow<'a, str>>, LineError> {
        if self.peek() == Some(b'"') {
            self.string().map(Some)
        } else {
            self.skip_value().map(|_| None)
        }
    }

    /// Skips any JSON value (nested ones included), returning its raw bytes.
    fn skip_value(&mut self) -> Result<&'a [u8], LineError> {
        self.ws();
        let start = self.i;
        match self.peek() {
            Some(b'"') => {
                self.raw_string()?;
            }
            Some(b'{') | Some(b'[') => {
                let mut depth = 0usize;
                while self.i < self.b.len() {
                    match self.b[self.i] {
                        b'"' => {
                            self.raw_string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Ok(&self.b[start..self.i]);
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
                return self.err("unterminated object or array");
            }
            Some(_) => {
                while self.i < self.b.len()
                    && !matches!(self.b[self.i], b',' | b'}' | b' ' | b'\t' | b'\r' | b'\n')
                {
                    self.i += 1;
                }
                if self.i == start {
                    return self.err("missing value");
                }
            }
            None => return self.err("missing value"),
        }
        Ok(&self.b[start..self.i])
    }
}

fn unescape(raw: &[u8]) -> Option<String> {
    let s = std::str::from_utf8(raw).ok()?;
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '/' => out.push('/'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'u' => {
                let hex: String = chars.by_ref().take(4).collect();
                let cp = u32::from_str_radix(&hex, 16).ok()?;
                out.push(char::from_u32(cp).unwrap_or('\u{fffd}'));
            }
            _ => return None,
        }
    }
    Some(out)
}

fn number(raw: &[u8]) -> Option<f64> {
    std::str::from_utf8(raw).ok()?.parse::<f64>().ok()
}

fn integer(raw: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(raw).ok()?;
    s.parse::<i64>().ok().or_else(|| {
        s.parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| f as i64)
    })
}

/// Reads the scan's fields from one line. Unknown keys are skipped without decoding.
pub fn parse_line(line: &[u8]) -> Result<Record<'_>, LineError> {
    let mut c = Cursor { b: line, i: 0 };
    let mut r = Record::default();
    c.expect(b'{', "not a JSON object")?;
    c.ws();
    if c.peek() == Some(b'}') {
        return Ok(r);
    }
    loop {
        c.ws();
        if c.peek() != Some(b'"') {
            return c.err("expected a key");
        }
        let (key, _) = c.raw_string()?;
        c.expect(b':', "expected ':'")?;
        c.ws();
        let is_str = c.peek() == Some(b'"');
        match key {
            b"eventType" => r.event_type = c.string_field()?,
            b"api" => r.api = c.string_field()?,
            b"shop.id" => r.shop = c.string_field()?,
            b"reason" => r.reason = c.string_field()?,
            b"step" => r.step = c.string_field()?,
            b"payment.channel" => r.channel = c.string_field()?,
            b"tag" => r.tag = c.string_field()?,
            b"timestamp" if !is_str => r.timestamp_ms = integer(c.skip_value()?),
            b"http.response.status_code" if !is_str => r.status = integer(c.skip_value()?),
            b"duration.ms" if !is_str => r.duration_ms = number(c.skip_value()?),
            b"allowed" if !is_str => {
                r.allowed = match c.skip_value()? {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    _ => None,
                }
            }
            _ => {
                c.skip_value()?;
            }
        }
        c.ws();
        match c.peek() {
            Some(b',') => c.i += 1,
            Some(b'}') => {
                c.i += 1;
                c.ws();
                if c.i != line.len() {
                    return c.err("text after the object");
                }
                return Ok(r);
            }
            _ => return c.err("expected ',' or '}'"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fields_it_needs() {
        let line = br#"{"eventType":"ExternalApiCall","timestamp":1700000000123,"api":"zone\"A\"","http.response.status_code":429,"duration.ms":12.5,"shop.id":"s\u00e9","nested":{"a":[1,{"b":"}"}]},"x":null}"#;
        let r = parse_line(line).unwrap();
        assert_eq!(r.event_type.as_deref(), Some("ExternalApiCall"));
        assert_eq!(r.timestamp_ms, Some(1_700_000_000_123));
        assert_eq!(r.api.as_deref(), Some("zone\"A\""));
        assert_eq!(r.status, Some(429));
        assert_eq!(r.duration_ms, Some(12.5));
        assert_eq!(r.shop.as_deref(), Some("sé"));
        let d =
            parse_line(br#"{"eventType":"RateLimitDecision","allowed":false,"reason":"hot_shop"}"#)
                .unwrap();
        assert_eq!(
            (d.allowed, d.reason.as_deref()),
            (Some(false), Some("hot_shop"))
        );
    }

    #[test]
    fn bad_lines_are_errors_with_a_column() {
        for (line, what) in [
            (&b"not json"[..], "not a JSON object"),
            (b"{\"a\":1", "expected ',' or '}'"),
            (b"{\"a\":\"x", "unterminated string"),
            (b"{\"a\" 1}", "expected ':'"),
            (b"{\"a\":1} trailing", "text after the object"),
            (b"{\"a\":}", "missing value"),
        ] {
            let e = parse_line(line).unwrap_err();
            assert_eq!(e.what, what, "{}", String::from_utf8_lossy(line));
            assert!(e.column >= 1);
        }
    }
}
