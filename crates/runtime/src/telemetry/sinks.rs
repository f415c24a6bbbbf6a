//! Where events go. A sink writes a whole batch or fails; the buffer counts the outcome.

use std::fs::OpenOptions;
use std::io::Write;
use std::time::Duration;

use super::event::Event;
use super::json::write_event_line;
use crate::store;
use checkout_guard_model::Endpoint;

pub trait Sink: Send {
    fn name(&self) -> &'static str;
    /// Writes every event of the batch, or returns why not.
    fn write(&mut self, events: &[Event]) -> Result<(), String>;
}

/// Appends JSON lines to a file. Each batch is one `write` under an exclusive `flock`
/// on a file opened with `O_APPEND`, so many php-fpm workers appending at once never
/// interleave or tear a line.
pub struct JsonlSink {
    path: String,
    lines: String,
}

impl JsonlSink {
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            lines: String::new(),
        }
    }
}

impl Sink for JsonlSink {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), String> {
        self.lines.clear();
        for e in events {
            write_event_line(&mut self.lines, e);
        }
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(|e| format!("open {}: {e}", self.path))?;
        file.lock()
            .map_err(|e| format!("lock {}: {e}", self.path))?;
        let written = file.write_all(self.lines.as_bytes());
        let _ = file.unlock();
        written.map_err(|e| format!("write {}: {e}", self.path))
    }
}

/// XADDs each event to a Valkey stream as one field `event` holding the JSON object, with
/// an approximate MAXLEN; a batch is one pipelined round trip on the process's pooled
/// connection, bounded by the timeout.
pub struct StreamSink {
    endpoint: Endpoint,
    key: String,
    maxlen: i64,
    timeout: Duration,
    retry_interval: Duration,
    line: String,
}

impl StreamSink {
    pub fn new(
        endpoint: Endpoint,
        key: String,
        maxlen: i64,
        timeout: Duration,
        retry_interval: Duration,
    ) -> Self {
        Self {
            endpoint,
            key,
            maxlen,
            timeout,
            retry_interval,
            line: String::new(),
        }
    }
}

impl Sink for StreamSink {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), String> {
        let mut pipe = redis::pipe();
        for e in events {
            self.line.clear();
            write_event_line(&mut self.line, e);
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.maxlen)
                .arg("*")
                .arg("event")
                .arg(self.line.trim_end())
                .ignore();
        }
        store::with_connection(&self.endpoint, self.timeout, self.retry_interval, |c| {
            pipe.query::<()>(c)
        })
        .map_err(|e| format!("{} at {}", e, self.endpoint.display_url()))
    }
}
