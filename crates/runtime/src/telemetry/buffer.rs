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

    /// Writes a batch to every sink. A sink that fails drops its copy and counts it.
    /// Returns how many events were written by at least one sink (all or none).
    pub fn write(&mut self, events: &[Event]) -> usize {
        if events.is_empty() {
            return 0;
        }
        let n = events.len();
        let mut any = false;
        for (sink, stats) in &mut self.sinks {
            match sink.write(events) {
                Ok(()) => {
                    stats.written += n as u64;
                    any = true;
                }
                Err(e) => {
                    stats.dropped += n as u64;
                    stats.failures += 1;
                    stats.last_error = Some(e);
                }
            }
        }
        if any {
            n
        } else {
            0
        }
    }

    /// Writes a batch to every sink but the one named `skip`, which drops it and counts a
    /// failure (`why`).
    pub fn write_without(&mut self, events: &[Event], skip: &str, why: &str) {
        if events.is_empty() {
            return;
        }
        let n = events.len() as u64;
        for (sink, stats) in &mut self.sinks {
            let result = if sink.name() == skip {
                Err(why.to_string())
            } else {
                sink.write(events)
            };
            match result {
                Ok(()) => stats.written += n,
                Err(e) => {
                    stats.dropped += n;
                    stats.failures += 1;
                    stats.last_error = Some(e);
                }
            }
        }
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
}
