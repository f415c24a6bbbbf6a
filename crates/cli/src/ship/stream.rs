//! The Valkey stream source: the `stream` sink's entries (one field `event` holding the
//! event's JSON object) read through a consumer group. An entry is acknowledged (`XACK`)
//! only after the destination accepted it or it was dead-lettered, so a shipper killed
//! mid-batch leaves its batch pending in the group, and the next one takes it again:
//! at start a shipper reads its own consumer's pending entries (`XREADGROUP ... 0`), and
//! on every round it claims other consumers' entries idle for `claim_idle` (`XAUTOCLAIM`,
//! a shipper that died on another host). Several shippers in one group share the work:
//! `XREADGROUP ... >` hands each new entry to one of them.

use std::time::Duration;

use checkout_guard_model::events::STREAM_FIELD;
use redis::Value;

use super::Source;
use crate::valkey::Valkey;

/// One entry taken from the stream.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The stream entry's ID (`1733500000000-0`): the event's id for the destination.
    pub id: String,
    /// The event's JSON object, or why the entry holds none (dead-lettered).
    pub event: Result<serde_json::Map<String, serde_json::Value>, String>,
    /// Taken before (pending in the group: its consumer died or lost the reply to its
    /// acknowledgement), so the destination may have it already: a possible duplicate.
    pub again: bool,
    /// Pending in the group but deleted from the stream (trimmed by MAXLEN before anybody
    /// delivered it): nothing to deliver, counted and acknowledged.
    pub trimmed: bool,
    /// The entry's size in bytes as read (the batch is bounded by bytes too).
    pub size: usize,
    /// What the entry held when it is not an event (its fields, or its line): kept in the
    /// dead-letter file, so acknowledging it loses nothing.
    pub raw: Option<String>,
}

/// Where a shipper reads.
pub struct StreamSource {
    valkey: Valkey,
    key: String,
    group: String,
    consumer: String,
    claim_idle: Duration,
    /// Still reading our own pending entries (from the start, then `>`).
    own_pending_from: Option<String>,
    /// XAUTOCLAIM's cursor.
    claim_cursor: String,
    group_made: bool,
    /// `--once`: a missing stream is an error, not a wait.
    once: bool,
    said_waiting: bool,
    /// The highest entry ID this shipper acknowledged, and after its group was lost, the
    /// ID up to which entries taken again may be at the destination already.
    acked_up_to: Option<String>,
    again_up_to: Option<String>,
    /// The largest entry seen, in bytes (how many one read asks for).
    largest: usize,
    /// Pending entries found deleted from the stream (trimmed by MAXLEN before delivery).
    pub trimmed: u64,
}

impl StreamSource {
    pub fn new(
        valkey: Valkey,
        key: &str,
        group: &str,
        consumer: &str,
        claim_idle: Duration,
        once: bool,
    ) -> Self {
        Self {
            valkey,
            key: key.to_string(),
            group: group.to_string(),
            consumer: consumer.to_string(),
            claim_idle,
            own_pending_from: Some("0".into()),
            claim_cursor: "0-0".into(),
            group_made: false,
            once,
            said_waiting: false,
            acked_up_to: None,
            again_up_to: None,
            largest: 0,
            trimmed: 0,
        }
    }

    /// Creates the group (from the stream's first entry: every event recorded, not only
    /// the ones after the first shipper started). A stream that does not exist is not made
    /// (a mistyped `--stream-key` would wait on a stream nobody writes): `--once` says so,
    /// naming the streams there; a long-running shipper says so once and waits for it.
    /// `Ok(false)`: no stream yet.
    fn ensure_group(&mut self) -> Result<bool, String> {
        if self.group_made {
            return Ok(true);
        }
        let (key, group) = (self.key.clone(), self.group.clone());
        let kind: String = self
            .valkey
            .call(|c| redis::cmd("TYPE").arg(&key).query::<String>(c))?;
        match kind.as_str() {
            "stream" => {}
            "none" if self.once => {
                let streams: Vec<String> = self.valkey.call(|c| {
                    redis::cmd("SCAN")
                        .arg(0)
                        .arg("TYPE")
                        .arg("stream")
                        .arg("COUNT")
                        .arg(10_000)
                        .query::<(String, Vec<String>)>(c)
                        .map(|(_, keys)| keys)
                })?;
                return Err(format!(
                    "--stream-key {key}: no such stream at {} (the stream sink's checkout_guard.events.stream_key; streams there: {})",
                    self.valkey.endpoint().display_url(),
                    if streams.is_empty() { "none".to_string() } else { streams.join(", ") }
                ));
            }
            "none" => {
                if !self.said_waiting {
                    eprintln!(
                        "checkout-guard ship: no stream {key} at {} yet: waiting for the stream sink's first event (--stream-key?)",
                        self.valkey.endpoint().display_url()
                    );
                    self.said_waiting = true;
                }
                return Ok(false);
            }
            other => {
                return Err(format!(
                    "--stream-key {key}: the key holds a {other}, not a stream"
                ))
            }
        }
        let made = self.valkey.call(|c| {
            match redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(&key)
                .arg(&group)
                .arg("0")
                .query::<()>(c)
            {
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other,
            }
        });
        made?;
        self.group_made = true;
        Ok(true)
    }

    /// Entries trimmed by the stream's MAXLEN before this group read them: the group's
    /// `entries-read` against the stream's `entries-added` and length, when the stream's
    /// first entry is past the group's last delivered one (XINFO; Valkey 7+).
    fn count_trimmed_unread(&mut self) -> Result<(), String> {
        let (groups, stream): (Value, Value) = self.valkey.call(|c| {
            Ok((
                redis::cmd("XINFO")
                    .arg("GROUPS")
                    .arg(&self.key)
                    .query::<Value>(c)?,
                redis::cmd("XINFO")
                    .arg("STREAM")
                    .arg(&self.key)
                    .query::<Value>(c)?,
            ))
        })?;
        let last = group_field(&groups, &self.group, "last-delivered-id");
        let read = group_field(&groups, &self.group, "entries-read")
            .and_then(|v| v.parse::<u64>().ok())
            // Nil for a group made at `0` that never read (Valkey cannot tell): nothing read.
            .or_else(|| (last.as_deref() == Some("0-0")).then_some(0));
        let fields = pairs(&stream);
        let field = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| *v);
        let added = field("entries-added").and_then(as_int);
        let length = field("length").and_then(as_int);
        let first = match field("first-entry") {
            Some(Value::Array(e)) => e.first().and_then(as_string),
            _ => None,
        };
        if let (Some(last), Some(read), Some(added), Some(length), Some(first)) =
            (last, read, added, length, first)
        {
            if id_key(&first) > id_key(&last) {
                let lost = added.saturating_sub(read).saturating_sub(length);
                if lost > 0 {
                    eprintln!(
                        "checkout-guard ship: {lost} entries of {} were trimmed (the stream sink's MAXLEN, checkout_guard.events.stream_maxlen) before group {} read them: lost, counted in `trimmed`",
                        self.key, self.group
                    );
                    self.trimmed += lost;
                }
            }
        }
        Ok(())
    }

    /// Takes up to `count` entries: this consumer's own pending ones first (after a
    /// restart), then others' idle ones, then new ones (waiting up to `block` for them;
    /// `None`: not at all).
    fn take_entries(
        &mut self,
        count: usize,
        block: Option<Duration>,
    ) -> Result<Vec<Entry>, String> {
        if !self.ensure_group()? {
            if let Some(b) = block {
                std::thread::sleep(b);
            }
            return Ok(Vec::new());
        }
        // Read in pieces until the batch holds `count` entries or about MAX_BATCH_BYTES:
        // a batch of large entries stays bounded in memory whatever the last ones were.
        let mut taken: Result<Vec<Entry>, String> = Ok(Vec::new());
        let mut bytes = 0usize;
        loop {
            let have = taken.as_ref().map_or(0, Vec::len);
            let piece = (count - have).min(self.piece());
            let wait = if have == 0 { block } else { None };
            match self.take_inner(piece, wait, have == 0) {
                Err(e) if have == 0 => {
                    taken = Err(e);
                    break;
                }
                // What was read so far is a batch; the error comes back next time.
                Err(_) => break,
                Ok(more) => {
                    let n = more.len();
                    for e in &more {
                        bytes += e.size;
                        self.largest = self.largest.max(e.size);
                    }
                    if let Ok(all) = &mut taken {
                        all.extend(more);
                    }
                    let have = have + n;
                    if n < piece || have >= count || bytes >= super::MAX_BATCH_BYTES {
                        break;
                    }
                }
            }
        }
        match &taken {
            // Valkey restarted without its data, or the group was deleted: made again
            // from the stream's start next time; what this shipper acknowledged before
            // is then taken again, counted as such.
            Err(e) if e.contains("NOGROUP") => {
                eprintln!(
                    "checkout-guard ship: group {} of {} is gone (Valkey restarted without it, or it was deleted): made again from the stream's start",
                    self.group, self.key
                );
                self.group_made = false;
                self.own_pending_from = Some("0".into());
                self.again_up_to = self.acked_up_to.clone();
            }
            Ok(entries) => {
                if let Some(up_to) = &self.again_up_to {
                    let up_to = id_key(up_to);
                    return Ok(entries
                        .iter()
                        .cloned()
                        .map(|mut e| {
                            e.again |= id_key(&e.id) <= up_to;
                            e
                        })
                        .collect());
                }
            }
            _ => {}
        }
        taken
    }

    /// How many entries one read asks for: few while entries may be large (none seen yet,
    /// or the largest seen), so one read holds at most about a quarter of a batch's bytes.
    fn piece(&self) -> usize {
        match self.largest {
            0 => 100,
            l => (super::MAX_BATCH_BYTES / 4 / l).clamp(10, 1000),
        }
    }

    /// One read: own pending entries, else (on a batch's first read) others' idle ones and
    /// the trimmed-unread check, else new ones.
    fn take_inner(
        &mut self,
        count: usize,
        block: Option<Duration>,
        first: bool,
    ) -> Result<Vec<Entry>, String> {
        if let Some(from) = self.own_pending_from.clone() {
            let v = self.read_group(&from, count, None)?;
            let entries = parse_read(&v, true)?;
            if entries.is_empty() {
                self.own_pending_from = None;
            } else {
                // Entries whose body was trimmed come back as IDs without fields.
                self.own_pending_from = entries.last().map(|e| e.id.clone());
                return Ok(entries);
            }
        }
        if first {
            let claimed = self.claim(count)?;
            if !claimed.is_empty() {
                return Ok(claimed);
            }
            self.count_trimmed_unread()?;
        }
        // A blocked read ends up to ~100 ms after its BLOCK time (Valkey checks blocked
        // clients' timeouts on its event loop's ticks): it blocks only with that much of
        // the call's timeout to spare; else it polls and sleeps.
        let spare = Duration::from_millis(300);
        let blocking = block.filter(|b| *b + spare <= self.valkey.timeout());
        let v = self.read_group(">", count, blocking)?;
        let entries = parse_read(&v, false)?;
        if let (true, None, Some(b)) = (entries.is_empty(), blocking, block) {
            std::thread::sleep(b);
        }
        Ok(entries)
    }

    fn read_group(
        &self,
        from: &str,
        count: usize,
        block: Option<Duration>,
    ) -> Result<Value, String> {
        self.valkey.call(|c| {
            let mut cmd = redis::cmd("XREADGROUP");
            cmd.arg("GROUP")
                .arg(&self.group)
                .arg(&self.consumer)
                .arg("COUNT")
                .arg(count);
            if let Some(b) = block {
                cmd.arg("BLOCK").arg(b.as_millis().max(1) as u64);
            }
            cmd.arg("STREAMS")
                .arg(&self.key)
                .arg(from)
                .query::<Value>(c)
        })
    }

    /// Others' entries idle for `claim_idle` (their shipper died): claimed for this one.
    fn claim(&mut self, count: usize) -> Result<Vec<Entry>, String> {
        let v: Value = self.valkey.call(|c| {
            redis::cmd("XAUTOCLAIM")
                .arg(&self.key)
                .arg(&self.group)
                .arg(&self.consumer)
                .arg(self.claim_idle.as_millis() as u64)
                .arg(&self.claim_cursor)
                .arg("COUNT")
                .arg(count)
                .query::<Value>(c)
        })?;
        let Value::Array(parts) = v else {
            return Err(format!("XAUTOCLAIM answered {v:?}"));
        };
        let cursor = parts
            .first()
            .and_then(as_string)
            .unwrap_or_else(|| "0-0".into());
        let entries = match parts.get(1) {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(|i| parse_entry(i, true))
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        };
        // Deleted IDs (trimmed before anybody delivered them): acknowledged, counted.
        if let Some(Value::Array(deleted)) = parts.get(2) {
            let ids: Vec<String> = deleted.iter().filter_map(as_string).collect();
            if !ids.is_empty() {
                self.trimmed += ids.len() as u64;
                self.ack_ids(&ids)?;
            }
        }
        self.claim_cursor = cursor;
        Ok(entries)
    }

    /// Acknowledges delivered (or dead-lettered) entries.
    fn ack_ids(&mut self, ids: &[String]) -> Result<(), String> {
        if let Some(top) = ids.iter().max_by_key(|id| id_key(id)) {
            if self
                .acked_up_to
                .as_deref()
                .is_none_or(|a| id_key(a) < id_key(top))
            {
                self.acked_up_to = Some(top.clone());
            }
        }
        for chunk in ids.chunks(1000) {
            self.valkey.call(|c| {
                redis::cmd("XACK")
                    .arg(&self.key)
                    .arg(&self.group)
                    .arg(chunk)
                    .query::<i64>(c)
            })?;
        }
        Ok(())
    }

    /// The age in milliseconds of the oldest entry not yet delivered (pending in the group,
    /// or not yet read by it), on Valkey's clock; 0 when there is none.
    fn lag(&self) -> Result<u64, String> {
        let (pending, now): (Value, Vec<String>) = self.valkey.call(|c| {
            let p = redis::cmd("XPENDING")
                .arg(&self.key)
                .arg(&self.group)
                .query::<Value>(c)?;
            let t = redis::cmd("TIME").query::<Vec<String>>(c)?;
            Ok((p, t))
        })?;
        let now_ms = match now.as_slice() {
            [s, us] => s.parse::<u64>().unwrap_or(0) * 1000 + us.parse::<u64>().unwrap_or(0) / 1000,
            _ => return Err("TIME answered an unexpected shape".into()),
        };
        let oldest_pending = match &pending {
            Value::Array(p) => p.get(1).and_then(as_string),
            _ => None,
        };
        let oldest = match oldest_pending {
            Some(id) => Some(id),
            None => {
                // The first entry after the group's last delivered one.
                let groups: Value = self.valkey.call(|c| {
                    redis::cmd("XINFO")
                        .arg("GROUPS")
                        .arg(&self.key)
                        .query::<Value>(c)
                })?;
                let last = group_field(&groups, &self.group, "last-delivered-id")
                    .unwrap_or_else(|| "0-0".into());
                let next: Value = self.valkey.call(|c| {
                    redis::cmd("XRANGE")
                        .arg(&self.key)
                        .arg(format!("({last}"))
                        .arg("+")
                        .arg("COUNT")
                        .arg(1)
                        .query::<Value>(c)
                })?;
                match next {
                    Value::Array(items) => items
                        .first()
                        .and_then(|i| parse_entry(i, false))
                        .map(|e| e.id),
                    _ => None,
                }
            }
        };
        Ok(oldest
            .and_then(|id| id.split('-').next().and_then(|ms| ms.parse::<u64>().ok()))
            .map_or(0, |ms| now_ms.saturating_sub(ms)))
    }
}

impl Source for StreamSource {
    fn describe(&self) -> String {
        format!(
            "stream {} at {} (group {}, consumer {})",
            self.key,
            self.valkey.endpoint().display_url(),
            self.group,
            self.consumer
        )
    }

    fn take(&mut self, count: usize, block: Option<Duration>) -> Result<Vec<Entry>, String> {
        self.take_entries(count, block)
    }

    fn ack(&mut self, ids: &[String]) -> Result<(), String> {
        self.ack_ids(ids)
    }

    fn lag_ms(&mut self) -> Result<u64, String> {
        self.lag()
    }

    fn trimmed(&self) -> u64 {
        self.trimmed
    }
}

fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// An entry ID as a pair of numbers, for comparing (`ms-seq`; a malformed one sorts first).
fn id_key(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

fn as_int(v: &Value) -> Option<u64> {
    match v {
        Value::Int(i) => u64::try_from(*i).ok(),
        other => as_string(other)?.parse().ok(),
    }
}

/// A reply of field/value pairs (RESP2 flat array or RESP3 map).
fn pairs(v: &Value) -> Vec<(String, &Value)> {
    match v {
        Value::Array(kv) => kv
            .chunks(2)
            .filter_map(|p| Some((as_string(p.first()?)?, p.get(1)?)))
            .collect(),
        Value::Map(kv) => kv
            .iter()
            .filter_map(|(k, v)| Some((as_string(k)?, v)))
            .collect(),
        _ => Vec::new(),
    }
}

/// A field of one group in `XINFO GROUPS`'s reply (RESP2 flat arrays or RESP3 maps).
fn group_field(v: &Value, group: &str, field: &str) -> Option<String> {
    let Value::Array(groups) = v else { return None };
    groups.iter().find_map(|g| {
        let pairs = pairs(g);
        let name = pairs
            .iter()
            .find(|(k, _)| k == "name")
            .and_then(|(_, v)| as_string(v))?;
        if name != group {
            return None;
        }
        pairs
            .iter()
            .find(|(k, _)| k == field)
            .and_then(|(_, v)| match v {
                Value::Int(i) => Some(i.to_string()),
                other => as_string(other),
            })
    })
}

/// XREADGROUP's reply: nil, or `[[key, [[id, [field, value, ...]], ...]]]` (RESP2) or a
/// map key -> entries (RESP3).
fn parse_read(v: &Value, again: bool) -> Result<Vec<Entry>, String> {
    let streams: Vec<&Value> = match v {
        Value::Nil => return Ok(Vec::new()),
        Value::Array(s) => s
            .iter()
            .filter_map(|kv| match kv {
                Value::Array(kv) => kv.get(1),
                _ => None,
            })
            .collect(),
        Value::Map(m) => m.iter().map(|(_, v)| v).collect(),
        other => return Err(format!("XREADGROUP answered {other:?}")),
    };
    Ok(streams
        .into_iter()
        .filter_map(|entries| match entries {
            Value::Array(items) => Some(items.iter().filter_map(|i| parse_entry(i, again))),
            _ => None,
        })
        .flatten()
        .collect())
}

/// One `[id, [field, value, ...]]`; fields nil for a pending entry trimmed from the stream.
fn parse_entry(v: &Value, again: bool) -> Option<Entry> {
    let Value::Array(parts) = v else { return None };
    let id = as_string(parts.first()?)?;
    let fields: Vec<&Value> = match parts.get(1) {
        Some(Value::Array(f)) => f.iter().collect(),
        Some(Value::Map(m)) => m.iter().flat_map(|(k, v)| [k, v]).collect(),
        _ => Vec::new(),
    };
    let raw = fields
        .chunks(2)
        .find(|p| p.first().and_then(|k| as_string(k)).as_deref() == Some(STREAM_FIELD))
        .and_then(|p| p.get(1).copied());
    let trimmed = raw.is_none() && fields.is_empty();
    let event = match raw {
        None if trimmed => Err("the entry was trimmed from the stream before delivery".into()),
        None => Err(format!("the entry has no `{STREAM_FIELD}` field")),
        Some(raw) => match raw {
            Value::BulkString(b) => match serde_json::from_slice::<serde_json::Value>(b) {
                Ok(serde_json::Value::Object(m)) => Ok(m),
                Ok(_) => Err("the event is not a JSON object".into()),
                Err(e) => Err(format!("the event is not JSON: {e}")),
            },
            _ => Err("the event field is not a string".into()),
        },
    };
    let size = fields
        .iter()
        .map(|f| match f {
            Value::BulkString(b) => b.len(),
            _ => 8,
        })
        .sum();
    let raw = match (&event, trimmed) {
        (Err(_), false) => {
            let map: serde_json::Map<String, serde_json::Value> = fields
                .chunks(2)
                .filter_map(|p| {
                    let k = as_string(p.first()?)?;
                    let v = match p.get(1)? {
                        Value::BulkString(b) => super::raw_text(b),
                        other => format!("{other:?}"),
                    };
                    Some((k, serde_json::Value::String(v)))
                })
                .collect();
            Some(serde_json::Value::Object(map).to_string())
        }
        _ => None,
    };
    Some(Entry {
        id,
        event,
        again,
        trimmed,
        size,
        raw,
    })
}
