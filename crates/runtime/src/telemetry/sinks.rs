//! Where events go. A sink writes a batch, or part of it, or fails; the buffer counts the
//! outcome.

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
    /// Writes the batch and says how many of its events reached the sink: a sink that can
    /// be cut short midway implements this; one that writes all or nothing need not.
    fn write_counted(&mut self, events: &[Event]) -> Outcome {
        match self.write(events) {
            Ok(()) => Outcome {
                written: events.len(),
                error: None,
            },
            Err(e) => Outcome {
                written: 0,
                error: Some(e),
            },
        }
    }
}

/// What became of a batch in one sink: `written` of its events reached the sink, the
/// others did not (`error` says why; `None` when all were written).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub written: usize,
    pub error: Option<String>,
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
/// an approximate MAXLEN; a batch is one pipelined round trip, bounded by the timeout, on
/// a pooled connection of its own (never the limiter's: a slow or refusing stream cannot
/// put the decisions' connection into back-off). Each XADD's reply is read: the entries
/// Valkey added are written, the ones it refused (maxmemory) or never answered dropped.
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
        match self.write_counted(events).error {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    fn write_counted(&mut self, events: &[Event]) -> Outcome {
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
                .arg(self.line.trim_end());
        }
        let replies = store::pipeline(
            &self.endpoint,
            store::Pool::Events,
            self.timeout,
            self.retry_interval,
            &pipe,
        );
        // An entry ID for each entry added (a trim by MAXLEN does not change the reply);
        // an error reply for each refused.
        let mut written = 0;
        let mut refused = None;
        for v in &replies.values {
            match v {
                redis::Value::ServerError(e) => {
                    refused.get_or_insert_with(|| {
                        format!("XADD refused: {}", redis::RedisError::from(e.clone()))
                    });
                }
                _ => written += 1,
            }
        }
        let error = match (replies.error, refused) {
            (Some(e), _) => Some(e.to_string()),
            (None, Some(r)) => Some(r),
            (None, None) => None,
        };
        Outcome {
            written,
            error: error.map(|e| format!("{e} at {}", self.endpoint.display_url())),
        }
    }
}
