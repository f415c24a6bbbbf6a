//! The process's event buffer, and the sinks with their counters.
//!
//! They are separate so that a caller can take the batch and the sinks out of a shared
//! state, write without holding any lock (a sink may call back into PHP, which may record
//! another event), and put the sinks back.

use super::event::Event;
use super::sinks::{Outcome, Sink};

/// Counters of one sink since the process started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkStats {
    pub written: u64,
    pub dropped: u64,
    /// Writes that failed (each dropped its batch): a sink's failure is counted, never
    /// surfaced.
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

    /// Writes a batch to every sink. A sink counts the events that reached it as written
    /// and the rest as dropped (a write cut short counts one failure). Returns the most
    /// events any sink wrote.
    pub fn write(&mut self, events: &[Event]) -> usize {
        self.write_without(events, "", "")
    }

    /// Writes a batch to every sink but the one named `skip`, which drops it and counts a
    /// failure (`why`). Returns the most events any sink wrote.
    pub fn write_without(&mut self, events: &[Event], skip: &str, why: &str) -> usize {
        if events.is_empty() {
            return 0;
        }
        let n = events.len();
        let mut most = 0;
        for (sink, stats) in &mut self.sinks {
            let outcome = if !skip.is_empty() && sink.name() == skip {
                Outcome {
                    written: 0,
                    error: Some(why.to_string()),
                }
            } else {
                sink.write_counted(events)
            };
            let written = outcome.written.min(n);
            most = most.max(written);
            stats.written += written as u64;
            stats.dropped += (n - written) as u64;
            if let Some(e) = outcome.error {
                stats.failures += 1;
                stats.last_error = Some(e);
            }
        }
        most
    }

    pub fn stats(&self) -> impl Iterator<Item = (&'static str, &SinkStats)> {
        self.sinks.iter().map(|(s, st)| (s.name(), st))
    }
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
        fn write(&mut self, events: &[Event]) -> Result<(), String> {
            if self.1 {
                return Err("down".into());
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

    /// Writes the first `.0` events of each batch, then fails.
    struct Partial(usize);

    impl Sink for Partial {
        fn name(&self) -> &'static str {
            "partial"
        }
        fn write(&mut self, _: &[Event]) -> Result<(), String> {
            unreachable!("the buffer asks write_counted")
        }
        fn write_counted(&mut self, events: &[Event]) -> Outcome {
            let written = self.0.min(events.len());
            Outcome {
                written,
                error: (written < events.len()).then(|| "refused".to_string()),
            }
        }
    }

    #[test]
    fn a_sink_cut_short_counts_what_it_wrote_as_written_and_the_rest_as_dropped() {
        let seen = Arc::new(Mutex::new(vec![]));
        let mut sinks = Sinks::new(vec![
            Box::new(Partial(2)),
            Box::new(Memory(seen.clone(), true)),
        ]);
        let batch: Vec<_> = (0..5).map(event).collect();
        assert_eq!(sinks.write(&batch), 2, "the most any sink wrote");
        assert_eq!(sinks.write(&batch[..1]), 1, "a batch written whole");
        sinks.write_without(&batch, "partial", "skipped");
        let stats: Vec<_> = sinks.stats().collect();
        let p = stats[0].1;
        assert_eq!((p.written, p.dropped, p.failures), (3, 8, 2));
        assert_eq!(p.last_error.as_deref(), Some("skipped"));
        let failing = stats[1].1;
        assert_eq!(
            (failing.written, failing.dropped, failing.failures),
            (0, 11, 3)
        );
    }
}
