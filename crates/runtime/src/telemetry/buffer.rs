//! The process's event buffer, and the sinks with their counters.
//!
//! They are separate so that a caller can take the batch and the sinks out of a shared
//! state, write without holding any lock (a sink may call back into PHP, which may record
//! another event), and put the sinks back.

use super::event::Event;
use super::sinks::Sink;

/// Counters of one sink since the process started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub written: u64,
    pub dropped: u64,
    /// Writes that failed (each dropped its batch, or what of it did not reach the sink):
    /// a sink's failure is counted, never surfaced.
    pub failures: u64,
    pub last_error: Option<String>,
}

/// Buffered events. Reaching `capacity` tells the caller to flush.
pub struct Buffer {
    events: Vec<Event>,
    capacity: usize,
    recorded: u64,
}

impl Buffer {
    pub fn new(capacity: usize) -> Self {
        Self {
            events: Vec::with_capacity(capacity.min(10_000)),
            capacity: capacity.max(1),
            recorded: 0,
        }
    }

    /// Buffers an event; returns true when the buffer is full and should be flushed.
    pub fn push(&mut self, e: Event) -> bool {
        self.events.push(e);
        self.recorded += 1;
        self.events.len() >= self.capacity
    }

    /// Takes the buffered events, leaving the buffer empty.
    pub fn take(&mut self) -> Vec<Event> {
        std::mem::replace(
            &mut self.events,
            Vec::with_capacity(self.capacity.min(10_000)),
        )
    }

    /// Forgets buffered events without writing them (a forked child's copy of its
    /// parent's buffer).
    pub fn discard(&mut self) {
        self.events.clear();
    }

    pub fn buffered(&self) -> usize {
        self.events.len()
    }

    pub fn recorded(&self) -> u64 {
        self.recorded
    }
}

/// The configured sinks, each with its counters.
#[derive(Default)]
pub struct Sinks {
    sinks: Vec<(Box<dyn Sink>, SinkStats)>,
}

impl Sinks {
    pub fn new(sinks: Vec<Box<dyn Sink>>) -> Self {
        Self {
            sinks: sinks
                .into_iter()
                .map(|s| (s, SinkStats::default()))
                .collect(),
        }
    }

    /// Writes a batch to every sink. What a sink could not write it drops and counts: its
    /// `written` grows by exactly the events that reached it, `dropped` by the rest.
    /// Returns how many events reached at least one sink.
    pub fn write(&mut self, events: &[Event]) -> usize {
        self.write_inner(events, None)
    }

    /// Writes a batch to every sink but the one named `skip`, which drops it and counts a
    /// failure (`why`).
    pub fn write_without(&mut self, events: &[Event], skip: &str, why: &str) {
        self.write_inner(events, Some((skip, why)));
    }

    fn write_inner(&mut self, events: &[Event], skip: Option<(&str, &str)>) -> usize {
        if events.is_empty() {
            return 0;
        }
        let n = events.len();
        let mut most = 0;
        for (sink, stats) in &mut self.sinks {
            let result = match skip {
                Some((name, why)) if sink.name() == name => Err((0, why.to_string())),
                _ => sink.write(events),
            };
            let written = match result {
                Ok(()) => n,
                Err((written, e)) => {
                    if skip.is_none_or(|(name, _)| sink.name() != name) {
                        say_sink_failed(sink.name(), &e, n - written.min(n));
                    }
                    stats.failures += 1;
                    stats.last_error = Some(e);
                    written.min(n)
                }
            };
            stats.written += written as u64;
            stats.dropped += (n - written) as u64;
            crate::metrics::events(sink.name(), written as u64, (n - written) as u64);
            most = most.max(written);
        }
        most
    }

    pub fn stats(&self) -> impl Iterator<Item = (&'static str, &SinkStats)> {
        self.sinks.iter().map(|(s, st)| (s.name(), st))
    }
}

/// Says in PHP's error log (through `warn_log`: at most once a minute per sink and
/// cause) that a sink cannot write, and which setting to check.
fn say_sink_failed(sink: &str, cause: &str, dropped: usize) {
    use crate::clock::{Clock, SystemClock};
    let now_ns = SystemClock.monotonic_ns();
    crate::warn_log::warn(&["sink", sink], cause, now_ns, || {
        let check = match sink {
            "jsonl" => "checkout_guard.events.jsonl_path (the file, its directory, the disk)",
            "stream" => "checkout_guard.events.stream_url (or checkout_guard.url) and its Valkey",
            "newrelic" => "the New Relic PHP agent (the newrelic extension)",
            _ => "checkout_guard.events.sinks",
        };
        format!(
            "PHP Warning:  checkout_guard: telemetry sink '{sink}' cannot write ({cause}); \
             {dropped} event(s) dropped, counted in Telemetry::stats(); checkouts are not \
             affected; check {check} (said at most once a minute per cause)"
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::event::{AttrValue, Event};
    use std::sync::{Arc, Mutex};

    struct Memory(Arc<Mutex<Vec<Event>>>, bool);

    impl Sink for Memory {
        fn name(&self) -> &'static str {
            if self.1 {
                "failing"
            } else {
                "memory"
            }
        }
        fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
            if self.1 {
                return Err((0, "down".into()));
            }
            self.0.lock().unwrap().extend_from_slice(events);
            Ok(())
        }
    }

    fn event(i: i64) -> Event {
        let mut e = Event::new(b"T").unwrap();
        e.set("i", AttrValue::Int(i));
        e
    }

    #[test]
    fn full_buffer_asks_for_a_flush_and_failing_sinks_drop_and_count() {
        let seen = Arc::new(Mutex::new(vec![]));
        let mut sinks = Sinks::new(vec![
            Box::new(Memory(seen.clone(), false)),
            Box::new(Memory(seen.clone(), true)),
        ]);
        let mut b = Buffer::new(3);
        assert!(!b.push(event(1)));
        assert!(!b.push(event(2)));
        assert!(b.push(event(3)));
        assert_eq!(sinks.write(&b.take()), 3);
        assert_eq!(b.buffered(), 0);
        assert_eq!(sinks.write(&b.take()), 0, "nothing left");
        assert_eq!(seen.lock().unwrap().len(), 3);
        let stats: Vec<_> = sinks.stats().collect();
        assert_eq!(
            stats[0],
            (
                "memory",
                &SinkStats {
                    written: 3,
                    dropped: 0,
                    failures: 0,
                    last_error: None
                }
            )
        );
        assert_eq!((stats[1].1.dropped, stats[1].1.failures), (3, 1));
        assert_eq!(stats[1].1.last_error.as_deref(), Some("down"));
        assert_eq!(b.recorded(), 3);
    }

    /// Takes the first `self.0` events of each batch, then fails.
    struct Partial(usize);

    impl Sink for Partial {
        fn name(&self) -> &'static str {
            "partial"
        }
        fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
            if events.len() <= self.0 {
                return Ok(());
            }
            Err((self.0, "disk full".into()))
        }
    }

    #[test]
    fn a_partly_written_batch_counts_what_reached_the_sink_as_written_and_the_rest_dropped() {
        let mut sinks = Sinks::new(vec![Box::new(Partial(59))]);
        let batch: Vec<_> = (0..100).map(event).collect();
        assert_eq!(sinks.write(&batch), 59);
        assert_eq!(sinks.write(&batch[..10]), 10);
        sinks.write_without(&batch, "partial", "request ended");
        let (_, st) = sinks.stats().next().unwrap();
        assert_eq!((st.written, st.dropped, st.failures), (69, 41 + 100, 2));
        assert_eq!(st.last_error.as_deref(), Some("request ended"));
    }
}
