//! `checkout-guard ship`: delivers what the workers recorded to where the team looks.
//!
//! A source ([`stream::StreamSource`], the `stream` sink's Valkey stream read through a
//! consumer group, or [`files::FileSource`], JSONL files with a checkpoint) hands out
//! batches; a destination ([`newrelic::NewRelic`], New
//! Relic's Event API, or [`otlp::Otlp`], OTLP/HTTP) takes them; an entry is
//! acknowledged in the source only once the destination accepted it or it was set aside
//! in the dead-letter file. Delivery is at least once: a batch whose acceptance was not
//! learnt (the shipper killed between the POST and the acknowledgement, a lost answer, the
//! acknowledgement itself lost) is sent again, with the same `event_id` on each event (the
//! stream entry's ID), so the destination can tell a duplicate; duplicates are bounded by
//! one batch per such failure and counted in [`Counts::again`].

pub mod files;
pub mod http;
pub mod newrelic;
pub mod otlp;
pub mod stream;

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use http::{Failed, Poster};
use stream::Entry;

/// Where the shipper takes its entries: the Valkey stream ([`stream::StreamSource`]) or
/// JSONL files ([`files::FileSource`]).
pub trait Source {
    fn describe(&self) -> String;
    /// Up to `count` entries; none when there is nothing now (after waiting up to `block`).
    fn take(&mut self, count: usize, block: Option<Duration>) -> Result<Vec<Entry>, String>;
    /// The last batch taken was delivered or dead-lettered (`ids`: its entries).
    fn ack(&mut self, ids: &[String]) -> Result<(), String>;
    /// The age of the oldest entry not yet delivered, in ms (0: none).
    fn lag_ms(&mut self) -> Result<u64, String>;
    /// Entries the source lost before delivery (a stream trimmed by MAXLEN).
    fn trimmed(&self) -> u64;
    /// What the source could not read this round, if anything (`--once` then fails).
    fn unfinished(&self) -> Option<String> {
        None
    }
}

/// The attribute that carries an event's id to the destination.
pub const ID_ATTRIBUTE: &str = "event_id";

/// One event to deliver: its id and its attributes (the recorded JSON object).
#[derive(Debug, Clone)]
pub struct Event {
    pub id: String,
    pub attributes: Map<String, Value>,
}

/// What a destination made of a batch: how many it accepted, and the ones it refused for
/// good (index in the batch, why).
#[derive(Default, Debug)]
pub struct Delivered {
    pub accepted: usize,
    pub rejected: Vec<(usize, String)>,
    /// Refused within an accepted POST without being named (OTLP's partial success): the
    /// POST's range of the batch, how many of it were refused, why.
    pub partly: Vec<(std::ops::Range<usize>, u64, String)>,
    /// Events answered 413 alone, one after another with nothing accepted between.
    pub alone_413_in_a_row: u32,
}

/// The one rule for a batch a destination will not take whole: `send` POSTs the events in
/// a range; a batch too large (413, or over the destination's size limit) or refused
/// (another 4xx) is split in halves, each sent on its own, until an event refused alone
/// is set aside in `done.rejected` with why (`too_large`: what "too large" means there).
pub fn send_split(
    range: std::ops::Range<usize>,
    done: &mut Delivered,
    too_large: &str,
    send: &mut dyn FnMut(std::ops::Range<usize>) -> Result<http::Answer, Failed>,
) -> Result<(), Failed> {
    let n = range.len();
    match send(range.clone())? {
        http::Answer::Accepted(_) => {
            done.accepted += n;
            done.alone_413_in_a_row = 0;
            Ok(())
        }
        http::Answer::TooLarge | http::Answer::Rejected { .. } if n > 1 => {
            let mid = range.start + n / 2;
            send_split(range.start..mid, done, too_large, send)?;
            send_split(mid..range.end, done, too_large, send)
        }
        // One event alone answered 413: set aside (a large event). But three in a row with
        // nothing accepted between is the destination (or a proxy in front of it) taking
        // less than it should: every event would be set aside one POST at a time, so the
        // shipper stops instead, nothing of the batch acknowledged.
        http::Answer::TooLarge => {
            done.alone_413_in_a_row += 1;
            if done.alone_413_in_a_row >= 3 {
                return Err(Failed(format!(
                    "three events in a row answered 413 alone ({too_large}): a proxy with a lower body limit in front of the destination? check --endpoint; nothing of this batch acknowledged"
                )));
            }
            done.rejected
                .push((range.start, format!("too large alone: {too_large}")));
            Ok(())
        }
        http::Answer::Rejected { status, body } => {
            done.rejected
                .push((range.start, format!("{status} {body}")));
            Ok(())
        }
    }
}

pub enum Destination {
    NewRelic(newrelic::NewRelic),
    Otlp(otlp::Otlp),
}

impl Destination {
    fn deliver(&mut self, poster: &mut Poster, events: &[Event]) -> Result<Delivered, Failed> {
        match self {
            Self::NewRelic(d) => d.deliver(poster, events),
            Self::Otlp(d) => d.deliver(poster, events),
        }
    }

    fn describe(&self) -> String {
        match self {
            Self::NewRelic(d) => format!("New Relic's Event API at {}", http::redact(&d.url)),
            Self::Otlp(d) => format!("OTLP/HTTP at {}", http::redact(&d.url())),
        }
    }
}

/// The shipper's own numbers (`--json` at exit, and the log lines).
#[derive(Default, Debug, Clone)]
pub struct Counts {
    /// Entries taken from the source.
    pub taken: u64,
    /// Events the destination accepted.
    pub delivered: u64,
    /// Events set aside in the dead-letter file (refused for good, or not an event).
    pub dead_lettered: u64,
    /// POSTs sent again after "later" (429, 5xx, no answer).
    pub retried: u64,
    /// Events that may reach the destination twice: taken again (pending after a shipper
    /// died or an acknowledgement was lost), or sent again after a POST got no answer (a
    /// reply lost, a timeout): at most this many duplicates.
    pub again: u64,
    /// Entries trimmed from the stream (MAXLEN) before delivery: lost before the shipper
    /// saw them.
    pub trimmed: u64,
    pub batches: u64,
    pub posts: u64,
    pub bytes_sent: u64,
    /// Event API: string values shortened, attributes left out, to fit its limits.
    pub cut_values: u64,
    pub cut_attributes: u64,
    /// OTLP: `http.client.request.duration` data points sent and refused.
    pub metric_points: u64,
    pub metric_points_rejected: u64,
    /// OTLP: external calls without a usable `duration.ms`, left out of the histogram
    /// (their log records are delivered).
    pub metric_calls_skipped: u64,
    /// The oldest undelivered entry's age, in ms, when last asked.
    pub lag_ms: Option<u64>,
}

impl Counts {
    pub fn json(&self, elapsed: Duration) -> Value {
        json!({
            "taken": self.taken,
            "delivered": self.delivered,
            "dead_lettered": self.dead_lettered,
            "retried": self.retried,
            "again": self.again,
            "trimmed": self.trimmed,
            "batches": self.batches,
            "posts": self.posts,
            "bytes_sent": self.bytes_sent,
            "cut": {"values": self.cut_values, "attributes": self.cut_attributes},
            "metric_points": self.metric_points,
            "metric_points_rejected": self.metric_points_rejected,
            "metric_calls_skipped": self.metric_calls_skipped,
            "lag_ms": self.lag_ms,
            "seconds": (elapsed.as_secs_f64() * 1000.0).round() / 1000.0,
        })
    }

    pub fn line(&self) -> String {
        format!(
            "delivered {}, dead-lettered {}, retried {}, taken again {}, lag {}",
            self.delivered,
            self.dead_lettered,
            self.retried,
            self.again,
            self.lag_ms.map_or(
                "unknown (the source did not answer)".to_string(),
                |l| format!("{l} ms")
            )
        )
    }
}

pub struct Config {
    pub batch: usize,
    pub once: bool,
    pub dead_letter: PathBuf,
    /// How often a long-running shipper logs its numbers.
    pub log_every: Duration,
    /// How long a long-running shipper waits for new entries in one call (below the
    /// source's timeout, so an idle wait is never taken for a lost reply).
    pub block: Duration,
}

/// Appends what was set aside, one JSON line each (`at_ms`, `id`, `why`, and `event` or,
/// for an entry that was no event, `raw`), flushed and synced before the entries are
/// acknowledged: set aside, never lost silently.
fn dead_letter(path: &std::path::Path, lines: &[Value]) -> Result<(), String> {
    if lines.is_empty() {
        return Ok(());
    }
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut text = String::new();
    for line in lines {
        let mut line = line.clone();
        line["at_ms"] = json!(at);
        text.push_str(&line.to_string());
        text.push('\n');
    }
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("dead-letter file {}: {e}", path.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_data())
        .map_err(|e| {
            format!(
                "dead-letter file {}: {e} (nothing acknowledged)",
                path.display()
            )
        })
}

/// Bytes kept in the dead-letter file as they were: the text when it is UTF-8, else
/// `base64:` and the bytes in base64 (nothing altered, so acknowledging loses nothing).
pub fn raw_text(bytes: &[u8]) -> String {
    use base64::Engine;
    match std::str::from_utf8(bytes) {
        Ok(s) => s.to_string(),
        Err(_) => format!(
            "base64:{}",
            base64::engine::general_purpose::STANDARD.encode(bytes)
        ),
    }
}

/// What one batch holds at most in bytes as read (a batch's events are held a few times
/// over while encoded): with 100 KB events, about 160 a batch.
pub const MAX_BATCH_BYTES: usize = 16 << 20;

/// The next batch's count: `configured`, or fewer when the last batch's entries were large
/// (`bytes` over `n` entries), so a batch holds about [`MAX_BATCH_BYTES`] at most.
fn next_batch(configured: usize, bytes: usize, n: usize) -> usize {
    if n == 0 || bytes == 0 {
        return configured;
    }
    let per_entry = bytes.div_ceil(n).max(1);
    configured.min((MAX_BATCH_BYTES / per_entry).max(1))
}

/// Ships until the source is empty (`once`) or until `stop` is set. `Ok` when every
/// entry taken was delivered or dead-lettered; `Err` with the reason otherwise (what
/// was not acknowledged stays in the source for the next run).
pub fn run(
    source: &mut dyn Source,
    dest: &mut Destination,
    poster: &mut Poster,
    cfg: &Config,
    stop: &Arc<AtomicBool>,
    counts: &mut Counts,
) -> Result<(), String> {
    let mut last_log = Instant::now();
    let mut again_from_source = 0;
    // The first batch at most 1,000 entries, whose size then bounds the next ones.
    let mut batch = cfg.batch.min(1000);
    let mut source_backoff = Duration::from_millis(200);
    eprintln!(
        "checkout-guard ship: from {} to {}{}",
        source.describe(),
        dest.describe(),
        if cfg.once { " (--once)" } else { "" }
    );
    let result = loop {
        if stop.load(Ordering::Relaxed) {
            // Long-running: a stop between batches is the normal end. --once: stopped
            // before the source was drained.
            break if cfg.once {
                Err("stopped (SIGTERM/SIGINT) before the source was drained".into())
            } else {
                Ok(())
            };
        }
        if !cfg.once && last_log.elapsed() >= cfg.log_every {
            counts.lag_ms = source.lag_ms().ok();
            eprintln!("checkout-guard ship: {}", counts.line());
            last_log = Instant::now();
        }
        let block = (!cfg.once).then_some(cfg.block);
        let entries = match source.take(batch, block) {
            Ok(e) => e,
            Err(e) if cfg.once => break Err(format!("reading the {}: {e}", source.describe())),
            Err(e) => {
                // Valkey restarting or unreachable: waited through, never a crash.
                eprintln!(
                    "checkout-guard ship: {e}; trying again in {:.1} s",
                    source_backoff.as_secs_f64()
                );
                if !http::sleep_unless(stop, source_backoff) {
                    break Ok(());
                }
                source_backoff = (source_backoff * 2).min(Duration::from_secs(10));
                continue;
            }
        };
        source_backoff = Duration::from_millis(200);
        if entries.is_empty() {
            if cfg.once {
                break source.unfinished().map_or(Ok(()), Err);
            }
            continue;
        }
        counts.batches += 1;
        counts.taken += entries.len() as u64;
        again_from_source += entries.iter().filter(|e| e.again && !e.trimmed).count() as u64;
        let taken_bytes: usize = entries.iter().map(|e| e.size).sum();
        let n_taken = entries.len();
        let mut ids = Vec::with_capacity(entries.len());
        let mut events = Vec::with_capacity(entries.len());
        let mut bad = Vec::new();
        for e in entries {
            ids.push(e.id.clone());
            match e.event {
                _ if e.trimmed => counts.trimmed += 1,
                Ok(attributes) => events.push(Event {
                    id: e.id,
                    attributes,
                }),
                Err(why) => bad.push(json!({"id": e.id, "why": why, "raw": e.raw})),
            }
        }
        // The next batch bounded by bytes too: events of 100 KB take fewer a batch.
        batch = next_batch(cfg.batch, taken_bytes, n_taken);
        let delivered = dest.deliver(poster, &events);
        counts.retried = poster.retried;
        counts.again = again_from_source + poster.maybe_twice;
        counts.posts = poster.posts;
        counts.bytes_sent = poster.bytes_sent;
        match dest {
            Destination::NewRelic(d) => {
                counts.cut_values = d.cuts.values;
                counts.cut_attributes = d.cuts.attributes;
            }
            Destination::Otlp(d) => {
                counts.metric_points = d.metric_points;
                counts.metric_points_rejected = d.metric_points_rejected;
                counts.metric_calls_skipped = d.metric_calls_skipped;
            }
        }
        let delivered = match delivered {
            Ok(d) => d,
            Err(Failed(why)) => {
                break Err(format!(
                    "{n_taken} entries not delivered (left in the stream for the next run): {why}"
                ))
            }
        };
        for (i, why) in &delivered.rejected {
            let e = &events[*i];
            bad.push(json!({"id": e.id, "why": why, "event": e.attributes}));
        }
        let one_each = bad.len() as u64;
        let mut partly = 0;
        for (range, refused, why) in &delivered.partly {
            // Which ones the receiver does not say: the POST's events named, the count given.
            let ids: Vec<&str> = events[range.clone()]
                .iter()
                .map(|e| e.id.as_str())
                .collect();
            eprintln!(
                "checkout-guard ship: the destination refused {refused} of {} events it took in one POST: {why}",
                range.len()
            );
            bad.push(json!({"why": format!("the destination refused {refused} of these {} events (not saying which): {why}", range.len()), "ids": ids, "refused": refused}));
            partly += *refused;
        }
        if let Err(e) = dead_letter(&cfg.dead_letter, &bad) {
            break Err(e);
        }
        counts.delivered += (delivered.accepted as u64).saturating_sub(partly);
        counts.dead_lettered += one_each + partly;
        if let Err(e) = source.ack(&ids) {
            // Delivered but not acknowledged: taken again later (counted then as `again`).
            if cfg.once {
                break Err(format!(
                    "acknowledging {} delivered entries: {e}",
                    ids.len()
                ));
            }
            eprintln!("checkout-guard ship: acknowledging {} delivered entries: {e} (they will be sent again)", ids.len());
        }
    };
    counts.trimmed += source.trimmed();
    // Unknown (null) when the source cannot say: Valkey down at exit.
    counts.lag_ms = source.lag_ms().ok();
    result
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_batch_of_large_entries_is_cut_to_about_16_mib() {
        assert_eq!(super::next_batch(10_000, 2_000 * 300, 2_000), 10_000);
        assert_eq!(super::next_batch(10_000, 100 * 100_000, 100), 167);
        assert_eq!(super::next_batch(10_000, 20 << 20, 1), 1);
        assert_eq!(super::next_batch(10_000, 0, 0), 10_000);
    }
}
