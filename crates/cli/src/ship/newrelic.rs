//! New Relic's Event API: the events as gzip-compressed JSON arrays, each POST within
//! the limits New Relic documents ("Data requirements and limits for custom event data"):
//! a payload of at most 1 MB (10^6 bytes) per POST, attribute names of at most 255
//! characters, values of at most 4,096 characters through the Event API, at most 254
//! attributes per event, values strings or numbers (a boolean is sent as "true" or
//! "false": the documented types only, so NRQL compares `allowed = 'true'`). An event is cut to fit (a value shortened, an attribute left
//! out, each counted) rather than have the whole batch rejected; a batch larger than a
//! POST or answered 413 is split; a batch answered 400 is split until the event it
//! refuses is alone, and that one is dead-lettered.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use serde_json::{Map, Value};

use super::http::{Answer, Failed, Poster};
use super::{send_split, Delivered, Event, ID_ATTRIBUTE};

pub const MAX_PAYLOAD: usize = 1_000_000;
pub const MAX_ATTRIBUTES: usize = 254;
pub const MAX_NAME_CHARS: usize = 255;
pub const MAX_VALUE_CHARS: usize = 4096;
/// Events per POST before the payload limit (10,000 of the extension's events are ~300 KB
/// gzipped; fewer, larger POSTs: a receiver's cost per request is what bounds the rate).
const MAX_EVENTS_PER_POST: usize = 20_000;

/// The key New Relic takes, and its header: an insert key goes in `X-Insert-Key`, a
/// license key in `Api-Key`.
#[derive(Clone)]
pub struct Key {
    pub header: &'static str,
    pub value: String,
}

impl Key {
    /// From `--key-file` (its first line: an insert key), else `NEW_RELIC_INSERT_KEY`,
    /// else `NEW_RELIC_LICENSE_KEY`. Never from a flag (`ps` shows flags), never printed.
    pub fn find(file: Option<&str>) -> Result<Self, String> {
        let key = Self::find_unchecked(file)?;
        // What an HTTP header can carry (never the key itself in the message).
        if !key.value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "the New Relic key ({}) holds a character a header cannot carry (a space, a control character, non-ASCII): {} characters",
                match (file, key.header) {
                    (Some(f), _) => format!("--key-file {f}"),
                    (None, "X-Insert-Key") => "NEW_RELIC_INSERT_KEY".to_string(),
                    _ => "NEW_RELIC_LICENSE_KEY".to_string(),
                },
                key.value.chars().count()
            ));
        }
        Ok(key)
    }

    fn find_unchecked(file: Option<&str>) -> Result<Self, String> {
        if let Some(path) = file {
            let text =
                std::fs::read_to_string(path).map_err(|e| format!("--key-file {path}: {e}"))?;
            let value = text.lines().next().unwrap_or("").trim().to_string();
            if value.is_empty() {
                return Err(format!("--key-file {path}: the file holds no key"));
            }
            return Ok(Self {
                header: "X-Insert-Key",
                value,
            });
        }
        for (var, header) in [
            ("NEW_RELIC_INSERT_KEY", "X-Insert-Key"),
            ("NEW_RELIC_LICENSE_KEY", "Api-Key"),
        ] {
            if let Ok(v) = std::env::var(var) {
                if !v.trim().is_empty() {
                    return Ok(Self {
                        header,
                        value: v.trim().to_string(),
                    });
                }
            }
        }
        Err("--to newrelic needs a key: NEW_RELIC_INSERT_KEY, else NEW_RELIC_LICENSE_KEY, in the environment, or --key-file FILE (never a flag: ps shows flags)".into())
    }
}

/// Why the Event API would not take this `eventType` (New Relic: alphanumerics, `:` and
/// `_`, at most 255 characters), or `None`.
pub fn event_type_problem(t: Option<&Value>) -> Option<String> {
    let Some(Value::String(t)) = t else {
        return Some("no eventType (a string) in the event".into());
    };
    if t.is_empty()
        || t.chars().count() > MAX_NAME_CHARS
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b':' || b == b'_')
    {
        return Some(format!(
            "eventType {t:?} is not one the Event API takes (letters, digits, ':' and '_', 1 to 255 characters)"
        ));
    }
    None
}

/// What was cut to fit the Event API's limits.
#[derive(Default, Debug, Clone, Copy)]
pub struct Cuts {
    /// String values shortened to 4,096 characters.
    pub values: u64,
    /// Attributes left out (past 254, or a name longer than 255 characters, or a
    /// nested or null value the API does not take).
    pub attributes: u64,
}

/// The event as the Event API takes it: its attributes, its id, cut to fit.
pub fn prepare(e: &Event, cuts: &mut Cuts) -> Map<String, Value> {
    let mut out = Map::new();
    // The ones that must survive a cut first.
    for k in ["eventType", "timestamp"] {
        if let Some(v) = e.attributes.get(k) {
            out.insert(k.to_string(), v.clone());
        }
    }
    out.insert(ID_ATTRIBUTE.to_string(), Value::String(e.id.clone()));
    for (k, v) in &e.attributes {
        if out.contains_key(k) {
            continue;
        }
        if k.chars().count() > MAX_NAME_CHARS || out.len() >= MAX_ATTRIBUTES {
            cuts.attributes += 1;
            continue;
        }
        let v = match v {
            Value::String(s) if s.chars().count() > MAX_VALUE_CHARS => {
                cuts.values += 1;
                Value::String(s.chars().take(MAX_VALUE_CHARS).collect())
            }
            Value::String(_) | Value::Number(_) => v.clone(),
            Value::Bool(b) => Value::String(b.to_string()),
            Value::Null | Value::Array(_) | Value::Object(_) => {
                cuts.attributes += 1;
                continue;
            }
        };
        out.insert(k.clone(), v);
    }
    out
}

pub struct NewRelic {
    pub url: String,
    key: Key,
    pub cuts: Cuts,
}

impl NewRelic {
    pub fn new(url: &str, key: Key) -> Self {
        Self {
            url: url.to_string(),
            key,
            cuts: Cuts::default(),
        }
    }

    /// Delivers `events`: every one accepted or set aside (with the status and answer
    /// that refused it), or an error (nothing of the batch may be acknowledged).
    pub fn deliver(&mut self, poster: &mut Poster, events: &[Event]) -> Result<Delivered, Failed> {
        let mut done = Delivered::default();
        // An event type the API would refuse (or accept and drop later: it checks
        // asynchronously) is set aside here, without a POST.
        let mut sent = Vec::with_capacity(events.len());
        let mut bodies = Vec::with_capacity(events.len());
        for (i, e) in events.iter().enumerate() {
            match event_type_problem(e.attributes.get("eventType")) {
                Some(why) => done.rejected.push((i, why)),
                None => {
                    sent.push(i);
                    bodies.push(
                        serde_json::to_vec(&Value::Object(prepare(e, &mut self.cuts)))
                            .expect("a JSON map serializes"),
                    );
                }
            }
        }
        let set_aside = done.rejected.len();
        let mut start = 0;
        while start < bodies.len() {
            let end = (start + MAX_EVENTS_PER_POST).min(bodies.len());
            send_split(
                start..end,
                &mut done,
                "413, or over the Event API's 1 MB per POST gzipped",
                &mut |r| self.post(poster, &bodies, r),
            )?;
            start = end;
        }
        // send_split named the refused by their place among the bodies sent.
        for r in &mut done.rejected[set_aside..] {
            r.0 = sent[r.0];
        }
        Ok(done)
    }

    /// POSTs the events in `range`: a payload over 1 MB gzipped is not sent (too large).
    fn post(
        &self,
        poster: &mut Poster,
        bodies: &[Vec<u8>],
        range: std::ops::Range<usize>,
    ) -> Result<Answer, Failed> {
        let range_len = range.len();
        let payload = gzip_array(&bodies[range]);
        if payload.len() > MAX_PAYLOAD {
            // Split; one event over it alone (cut as it is) is set aside, not sent.
            return Ok(if range_len > 1 {
                Answer::TooLarge
            } else {
                Answer::Rejected {
                    status: 413,
                    body: format!(
                        "over the Event API's 1,000,000 bytes per POST alone ({} bytes gzipped), not sent",
                        payload.len()
                    ),
                }
            });
        }
        poster.post(
            &self.url,
            &[
                (self.key.header, self.key.value.as_str()),
                ("Content-Type", "application/json"),
                ("Content-Encoding", "gzip"),
            ],
            &payload,
            range_len,
        )
    }
}

/// `[e1,e2,...]`, gzip-compressed (the fastest level: the shipper's CPU is what bounds
/// its rate, and 1 MB gzipped holds thousands of events either way).
pub fn gzip_array(bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::with_capacity(64 * 1024), Compression::fast());
    let mut write = || -> std::io::Result<()> {
        gz.write_all(b"[")?;
        for (i, b) in bodies.iter().enumerate() {
            if i > 0 {
                gz.write_all(b",")?;
            }
            gz.write_all(b)?;
        }
        gz.write_all(b"]")
    };
    write().expect("writing to memory");
    gz.finish().expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(attrs: Value) -> Event {
        Event {
            id: "1-0".into(),
            attributes: attrs.as_object().unwrap().clone(),
        }
    }

    #[test]
    fn a_long_value_is_cut_to_4096_characters_and_counted() {
        let mut cuts = Cuts::default();
        let long = "é".repeat(5000);
        let e = prepare(
            &event(serde_json::json!({"eventType": "ExternalApiCall", "url.full": long})),
            &mut cuts,
        );
        assert_eq!(e["url.full"].as_str().unwrap().chars().count(), 4096);
        assert_eq!(cuts.values, 1);
        assert_eq!(e[ID_ATTRIBUTE], "1-0");
    }

    #[test]
    fn a_boolean_goes_as_a_string() {
        let mut cuts = Cuts::default();
        let e = prepare(
            &event(serde_json::json!({"eventType": "RateLimitDecision", "allowed": false})),
            &mut cuts,
        );
        assert_eq!(e["allowed"], "false");
        assert_eq!((cuts.values, cuts.attributes), (0, 0));
    }

    #[test]
    fn attributes_past_254_and_long_names_are_left_out_and_counted() {
        let mut cuts = Cuts::default();
        let mut m = Map::new();
        m.insert("eventType".into(), "ExternalApiCall".into());
        m.insert("timestamp".into(), 1.into());
        for i in 0..300 {
            m.insert(format!("a{i:03}"), i.into());
        }
        m.insert("n".repeat(256), 1.into());
        m.insert("nested".into(), serde_json::json!({"a": 1}));
        let e = prepare(
            &Event {
                id: "1-0".into(),
                attributes: m,
            },
            &mut cuts,
        );
        assert_eq!(e.len(), MAX_ATTRIBUTES);
        assert!(
            e.contains_key("eventType")
                && e.contains_key("timestamp")
                && e.contains_key(ID_ATTRIBUTE)
        );
        assert_eq!(cuts.attributes as usize, 302 - (MAX_ATTRIBUTES - 3));
    }

    #[test]
    fn the_payload_is_a_gzipped_json_array() {
        let body = gzip_array(&[b"{\"a\":1}".to_vec(), b"{\"b\":2}".to_vec()]);
        let mut s = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&body[..]), &mut s)
            .unwrap();
        assert_eq!(s, r#"[{"a":1},{"b":2}]"#);
    }
}
