//! The fields of one JSONL event that the scan needs, read without building a JSON tree:
//! events are flat objects, so one pass over the line finds the keys, and only those
//! values are decoded.

use std::borrow::Cow;

use checkout_guard_model::events::{self, attr, EVENT_TYPE};

// The schema's names as the byte patterns the readers match with.
/// An `ExternalApiCall`'s event type.
pub const EXTERNAL_API_CALL: &[u8] = events::EXTERNAL_API_CALL.as_bytes();
/// A `RateLimitDecision`'s event type.
pub const RATE_LIMIT_DECISION: &[u8] = events::RATE_LIMIT_DECISION.as_bytes();
const K_EVENT_TYPE: &[u8] = EVENT_TYPE.as_bytes();
const K_TIMESTAMP: &[u8] = attr::TIMESTAMP.as_bytes();
const K_API: &[u8] = attr::API.as_bytes();
const K_STATUS_CODE: &[u8] = attr::STATUS_CODE.as_bytes();
const K_SHOP_ID: &[u8] = attr::SHOP_ID.as_bytes();
const K_REASON: &[u8] = attr::REASON.as_bytes();
const K_ALLOWED: &[u8] = attr::ALLOWED.as_bytes();
const K_WOULD_ALLOW: &[u8] = attr::WOULD_ALLOW.as_bytes();
const K_DURATION_MS: &[u8] = attr::DURATION_MS.as_bytes();
const K_STEP: &[u8] = attr::STEP.as_bytes();
const K_PAYMENT_CHANNEL: &[u8] = attr::PAYMENT_CHANNEL.as_bytes();
const K_TAG: &[u8] = attr::TAG.as_bytes();
const K_LIMITER: &[u8] = attr::LIMITER.as_bytes();
const K_ENDPOINT: &[u8] = attr::ENDPOINT.as_bytes();
const K_PRIORITY: &[u8] = attr::PRIORITY.as_bytes();

/// A string value's bytes: borrowed from the line unless it held escapes. Not checked for
/// UTF-8 here (the scan compares bytes); `text()` decodes for display.
pub type Text<'a> = Cow<'a, [u8]>;

/// Decodes a value for display (invalid UTF-8 replaced).
pub fn text(t: &Text<'_>) -> String {
    String::from_utf8_lossy(t).into_owned()
}

/// What the scan reads from one event line. Numbers the scan does not need on every event
/// (the duration) stay raw until asked for.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Record<'a> {
    pub event_type: Option<Text<'a>>,
    pub timestamp_ms: Option<i64>,
    pub api: Option<Text<'a>>,
    pub status: Option<i64>,
    pub shop: Option<Text<'a>>,
    pub reason: Option<Text<'a>>,
    pub allowed: Option<bool>,
    /// A decision's `would_allow` (events since shadow mode; older files have none).
    pub would_allow: Option<bool>,
    pub duration_raw: Option<&'a [u8]>,
    pub step: Option<Text<'a>>,
    pub channel: Option<Text<'a>>,
    pub tag: Option<Text<'a>>,
    /// A decision's limiter (its `name` option).
    pub limiter: Option<Text<'a>>,
    /// A decision's endpoint (issue 42), when the call named one.
    pub endpoint: Option<Text<'a>>,
    /// A decision's priority class, or a call's caller attribute `priority`.
    pub priority: Option<Text<'a>>,
}

impl Record<'_> {
    /// A `RateLimitDecision` that refused (`allowed: false`), or in shadow mode would have
    /// (`allowed: true`, `would_allow: false`); `Some(true)` for the shadow one.
    pub fn denial(&self) -> Option<bool> {
        match (self.allowed, self.would_allow) {
            (Some(true), Some(false)) => Some(true),
            (Some(true), _) => None,
            _ => Some(false),
        }
    }

    /// `duration.ms`, parsed on demand.
    pub fn duration_ms(&self) -> Option<f64> {
        number(self.duration_raw?)
    }
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
        // Keys and most values are short: a plain look at the first 24 bytes beats setting
        // up a vector search.
        let short_end = (self.i + 24).min(self.b.len());
        while self.i < short_end {
            match self.b[self.i] {
                b'"' => {
                    let s = &self.b[start..self.i];
                    self.i += 1;
                    return Ok((s, false));
                }
                b'\\' => break,
                _ => self.i += 1,
            }
        }
        // memchr2 looks at 16-32 bytes a step: most values have no escape at all.
        while let Some(off) = memchr::memchr2(b'"', b'\\', &self.b[self.i..]) {
            self.i += off;
            if self.b[self.i] == b'"' {
                let s = &self.b[start..self.i];
                self.i += 1;
                return Ok((s, escaped));
            }
            escaped = true;
            self.i += 2;
            if self.i > self.b.len() {
                break;
            }
        }
        self.i = self.b.len();
        self.err("unterminated string")
    }

    fn string(&mut self) -> Result<Text<'a>, LineError> {
        let (raw, escaped) = self.raw_string()?;
        if !escaped {
            return Ok(Cow::Borrowed(raw));
        }
        unescape(raw)
            .map(|s| Cow::Owned(s.into_bytes()))
            .ok_or(LineError {
                column: self.i,
                what: "invalid escape",
            })
    }

    /// A string value, or None (skipped) when the value is not a string.
    fn string_field(&mut self) -> Result<Option<Text<'a>>, LineError> {
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

/// The fast path for the lines the extension writes (flat and compact, no escapes): one
/// walk from member to member, each key and string value found with `memchr`, only the
/// needed values decoded. Returns None when anything is unusual (an escape, whitespace, a
/// nested value, no timestamp), and the full parser decides and explains.
fn fast_fields(line: &[u8]) -> Option<Record<'_>> {
    let n = line.len();
    if n < 2 || line[0] != b'{' || line[n - 1] != b'}' || memchr::memchr(b'\\', line).is_some() {
        return None;
    }
    let mut r = Record::default();
    let mut i = 1;
    while i < n - 1 {
        if line[i] != b'"' {
            return None;
        }
        let key_end = i + 1 + memchr::memchr(b'"', &line[i + 1..])?;
        let key = &line[i + 1..key_end];
        if line.get(key_end + 1) != Some(&b':') {
            return None;
        }
        let v = key_end + 2;
        let (value, is_str, next) = match *line.get(v)? {
            b'"' => {
                let end = v + 1 + memchr::memchr(b'"', &line[v + 1..])?;
                (&line[v + 1..end], true, end + 1)
            }
            b'{' | b'[' | b' ' => return None,
            _ => {
                let end = v + memchr::memchr2(b',', b'}', &line[v..])?;
                (&line[v..end], false, end)
            }
        };
        let text = || Some(Cow::Borrowed(value));
        match (key, is_str) {
            (K_EVENT_TYPE, true) => r.event_type = text(),
            (K_TIMESTAMP, false) => r.timestamp_ms = Some(integer(value)?),
            (K_API, true) => r.api = text(),
            (K_STATUS_CODE, false) => r.status = Some(integer(value)?),
            (K_SHOP_ID, true) => r.shop = text(),
            (K_REASON, true) => r.reason = text(),
            (K_ALLOWED, false) => {
                r.allowed = match value {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    _ => return None,
                }
            }
            (K_WOULD_ALLOW, false) => {
                r.would_allow = match value {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    _ => return None,
                }
            }
            (K_DURATION_MS, false) => r.duration_raw = Some(value),
            (K_STEP, true) => r.step = text(),
            (K_PAYMENT_CHANNEL, true) => r.channel = text(),
            (K_TAG, true) => r.tag = text(),
            (K_LIMITER, true) => r.limiter = text(),
            (K_ENDPOINT, true) => r.endpoint = text(),
            (K_PRIORITY, true) => r.priority = text(),
            (
                K_EVENT_TYPE | K_API | K_SHOP_ID | K_REASON | K_STEP | K_PAYMENT_CHANNEL | K_TAG
                | K_LIMITER | K_ENDPOINT | K_PRIORITY,
                false,
            )
            | (K_TIMESTAMP | K_STATUS_CODE | K_ALLOWED | K_WOULD_ALLOW | K_DURATION_MS, true) => {
                return None
            }
            _ => {}
        }
        match line.get(next) {
            Some(b',') => i = next + 1,
            Some(b'}') if next == n - 1 => break,
            _ => return None,
        }
    }
    // A line without a timestamp is an error either way: let the full parser say why.
    r.timestamp_ms.map(|_| r)
}

/// Reads the scan's fields from one line: the fast path for ordinary lines, the full
/// parser (which checks the whole line) for anything else.
pub fn parse_line(line: &[u8]) -> Result<Record<'_>, LineError> {
    match fast_fields(line) {
        Some(r) => Ok(r),
        None => parse_line_fully(line),
    }
}

/// Reads the scan's fields from one line, checking its whole structure. Unknown keys are
/// skipped without decoding.
pub fn parse_line_fully(line: &[u8]) -> Result<Record<'_>, LineError> {
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
            K_EVENT_TYPE => r.event_type = c.string_field()?,
            K_API => r.api = c.string_field()?,
            K_SHOP_ID => r.shop = c.string_field()?,
            K_REASON => r.reason = c.string_field()?,
            K_STEP => r.step = c.string_field()?,
            K_PAYMENT_CHANNEL => r.channel = c.string_field()?,
            K_TAG => r.tag = c.string_field()?,
            K_LIMITER => r.limiter = c.string_field()?,
            K_ENDPOINT => r.endpoint = c.string_field()?,
            K_PRIORITY => r.priority = c.string_field()?,
            K_TIMESTAMP if !is_str => r.timestamp_ms = integer(c.skip_value()?),
            K_STATUS_CODE if !is_str => r.status = integer(c.skip_value()?),
            K_DURATION_MS if !is_str => r.duration_raw = Some(c.skip_value()?),
            K_ALLOWED if !is_str => {
                r.allowed = match c.skip_value()? {
                    b"true" => Some(true),
                    b"false" => Some(false),
                    _ => None,
                }
            }
            K_WOULD_ALLOW if !is_str => {
                r.would_allow = match c.skip_value()? {
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

    /// Every name the reader matches is the schema's, read as the schema's type (a
    /// string field from a JSON string, a number or a boolean from a bare value).
    #[test]
    fn reads_the_schemas_names_as_the_schemas_types() {
        use checkout_guard_model::events::{attr_type, AttrType::*};
        for (key, ty) in [
            (K_TIMESTAMP, Int),
            (K_API, Str),
            (K_STATUS_CODE, Int),
            (K_SHOP_ID, Str),
            (K_REASON, Str),
            (K_ALLOWED, Bool),
            (K_WOULD_ALLOW, Bool),
            (K_DURATION_MS, Float),
            (K_STEP, Str),
            (K_PAYMENT_CHANNEL, Str),
            (K_TAG, Str),
            (K_LIMITER, Str),
            (K_ENDPOINT, Str),
            (K_PRIORITY, Str),
        ] {
            let name = std::str::from_utf8(key).unwrap();
            assert_eq!(attr_type(name), Some(ty), "{name}");
        }
        assert!(events::spec(std::str::from_utf8(EXTERNAL_API_CALL).unwrap()).is_some());
        assert!(events::spec(std::str::from_utf8(RATE_LIMIT_DECISION).unwrap()).is_some());
        assert_eq!(K_EVENT_TYPE, b"eventType");
    }

    #[test]
    fn reads_the_fields_it_needs() {
        let line = br#"{"eventType":"ExternalApiCall","timestamp":1700000000123,"api":"zone\"A\"","http.response.status_code":429,"duration.ms":12.5,"shop.id":"s\u00e9","nested":{"a":[1,{"b":"}"}]},"x":null}"#;
        let r = parse_line(line).unwrap();
        assert_eq!(r.event_type.as_deref(), Some(&b"ExternalApiCall"[..]));
        assert_eq!(r.timestamp_ms, Some(1_700_000_000_123));
        assert_eq!(r.api.as_deref(), Some(&b"zone\"A\""[..]));
        assert_eq!(r.status, Some(429));
        assert_eq!(r.duration_ms(), Some(12.5));
        assert_eq!(r.shop.as_deref(), Some("s\u{e9}".as_bytes()));
        let d =
            parse_line(br#"{"eventType":"RateLimitDecision","allowed":false,"reason":"hot_shop"}"#)
                .unwrap();
        assert_eq!(
            (d.allowed, d.reason.as_deref()),
            (Some(false), Some(&b"hot_shop"[..]))
        );
        assert_eq!((d.would_allow, d.denial()), (None, Some(false)));
        // Shadow mode: let through, would have been denied; both parsers read it.
        for line in [
            &br#"{"eventType":"RateLimitDecision","timestamp":5,"allowed":true,"would_allow":false,"mode":"shadow","reason":"global"}"#[..],
            br#"{"eventType":"RateLimitDecision", "timestamp":5, "allowed":true, "would_allow":false, "mode":"shadow", "reason":"global"}"#,
        ] {
            let s = parse_line(line).unwrap();
            assert_eq!((s.allowed, s.would_allow, s.denial()), (Some(true), Some(false), Some(true)));
        }
        let ok = parse_line(br#"{"eventType":"RateLimitDecision","timestamp":5,"allowed":true,"would_allow":true,"reason":"unavailable"}"#).unwrap();
        assert_eq!(ok.denial(), None);
        assert_eq!(integer(b"-12"), Some(-12));
        assert_eq!(integer(b"1.7e3"), Some(1700));
        let long = br#"{"eventType":"A","url.full":"https://a-very-long-value.example/with/a/long/path?and=query","timestamp":5}"#;
        assert_eq!(parse_line(long).unwrap().timestamp_ms, Some(5));
    }

    /// The hand-written reader (the scan streams gigabytes of events: no JSON tree per
    /// line) against serde_json, the project's reader everywhere else, on lines serde_json
    /// writes: escapes, non-ASCII, numbers in several forms, fields in any order.
    #[test]
    fn agrees_with_serde_json_on_random_event_lines() {
        use serde_json::{json, Map, Value};
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let texts = [
            "zoneA",
            "a\"b",
            "s\u{e9}\u{1F600}",
            "tab\tnl\n",
            "}{,:[]",
            "",
            "\\",
        ];
        for _ in 0..2000 {
            let mut fields: Vec<(&str, Value)> = vec![
                (
                    "eventType",
                    json!(["ExternalApiCall", "RateLimitDecision", "X"][next(3) as usize]),
                ),
                (
                    "timestamp",
                    json!(1_700_000_000_000_i64 + next(1_000_000) as i64),
                ),
                ("api", json!(texts[next(7) as usize])),
                (
                    "http.response.status_code",
                    json!([200, 429, 503][next(3) as usize]),
                ),
                ("duration.ms", json!(next(100_000) as f64 / 7.0)),
                ("shop.id", json!(texts[next(7) as usize])),
                (
                    "reason",
                    json!(["global", "hot_lane", "hot_shop"][next(3) as usize]),
                ),
                ("allowed", json!(next(2) == 1)),
                ("other", json!({"nested": [1, texts[next(7) as usize]]})),
            ];
            // Any order, some fields left out.
            for i in (1..fields.len()).rev() {
                fields.swap(i, next(i as u64 + 1) as usize);
            }
            fields.retain(|_| next(5) != 0);
            let object: Map<String, Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            let line = serde_json::to_string(&object).unwrap();
            let r = parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e:?}"));
            let text = |k: &str| {
                object
                    .get(k)
                    .and_then(Value::as_str)
                    .map(|s| s.as_bytes().to_vec())
            };
            let got = |t: &Option<Text<'_>>| t.as_ref().map(|c| c.to_vec());
            assert_eq!(got(&r.event_type), text("eventType"), "{line}");
            assert_eq!(got(&r.api), text("api"), "{line}");
            assert_eq!(got(&r.shop), text("shop.id"), "{line}");
            assert_eq!(got(&r.reason), text("reason"), "{line}");
            assert_eq!(
                r.timestamp_ms,
                object.get("timestamp").and_then(Value::as_i64),
                "{line}"
            );
            assert_eq!(
                r.status,
                object
                    .get("http.response.status_code")
                    .and_then(Value::as_i64),
                "{line}"
            );
            assert_eq!(
                r.allowed,
                object.get("allowed").and_then(Value::as_bool),
                "{line}"
            );
            assert_eq!(
                r.duration_ms(),
                object.get("duration.ms").and_then(Value::as_f64),
                "{line}"
            );
        }
    }

    #[test]
    fn the_fast_path_agrees_with_the_full_parser() {
        let lines: [&[u8]; 7] = [
            br#"{"eventType":"ExternalApiCall","timestamp":1700000000123,"api":"zoneA","http.response.status_code":429,"duration.ms":12.5,"shop.id":"s1"}"#,
            br#"{"eventType":"RateLimitDecision","timestamp":5,"limiter":"p","shop.id":"x","reason":"global","allowed":false,"retry_after.s":0.5}"#,
            br#"{"eventType":"CheckoutStep","step":"paid","shop.id":"s","payment.channel":"card","timestamp":7}"#,
            br#"{"eventType":"X","note":"mentions \"api\": inside","api":"real","timestamp":1}"#,
            br#"{"eventType":"X","note":"a,\"timestamp\":9","timestamp":1}"#,
            br#"{"eventType":"X","timestamp":"5"}"#,
            br#"{"eventType":"RateLimitDecision","timestamp":6,"limiter":"p","shop.id":"x","reason":"endpoint","allowed":false,"endpoint":"items","priority":"normal"}"#,
        ];
        for line in lines {
            assert_eq!(
                parse_line(line),
                parse_line_fully(line),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        assert!(
            fast_fields(lines[0]).is_some(),
            "ordinary lines take the fast path"
        );
        let d = fast_fields(lines[6]).expect("a decision with an endpoint: the fast path");
        assert_eq!(
            (d.endpoint.as_deref(), d.priority.as_deref()),
            (Some(&b"items"[..]), Some(&b"normal"[..]))
        );
        assert!(
            fast_fields(lines[3]).is_none(),
            "escapes go to the full parser"
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
