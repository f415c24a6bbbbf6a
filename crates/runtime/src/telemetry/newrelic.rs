//! The `newrelic` sink: one custom event per event through the New Relic PHP agent's
//! `newrelic_record_custom_event()`. Calling PHP is the extension's: it implements
//! [`NewRelicAgent`] and registers it once at module start-up; the sink is the runtime's,
//! like the others, so an event goes one way (extension -> buffer -> sinks).

use once_cell::sync::OnceCell;

use super::agent_cap;
use super::event::Event;
use super::sinks::Sink;

/// Records one event with the agent; `Err` says why it was not (the call threw, failed,
/// exited or hit a fatal error).
pub type RecordEvent<'a> = Box<dyn FnMut(&Event) -> Result<(), String> + 'a>;

/// The New Relic PHP agent, as the extension calls it.
pub trait NewRelicAgent: Send + Sync {
    /// The agent's `newrelic_record_custom_event()` for one batch, looked up once; `Err`
    /// says why it cannot be called (the agent is not loaded). The sink calls it once per
    /// event and stops at the first error: the events after it are dropped, and no further
    /// call into PHP is made in this batch.
    fn recorder(&self) -> Result<RecordEvent<'_>, String>;

    /// The agent's cap on custom events a minute in force (`agent_cap`), asked after the
    /// events of a batch were handed over; `None`: unknown.
    fn cap(&self) -> Option<u64> {
        None
    }
}

static AGENT: OnceCell<&'static dyn NewRelicAgent> = OnceCell::new();

/// Registers the agent the `newrelic` sink calls (once, at module start-up; a second
/// registration is ignored).
pub fn register_new_relic_agent(agent: &'static dyn NewRelicAgent) {
    let _ = AGENT.set(agent);
}

/// The `newrelic` sink, over the registered [`NewRelicAgent`].
pub struct NewRelicSink;

impl Sink for NewRelicSink {
    fn name(&self) -> &'static str {
        "newrelic"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
        let agent = *AGENT.get().ok_or_else(|| (0, NOT_LOADED.to_string()))?;
        let mut record = agent.recorder().map_err(|why| (0, why))?;
        // The events before a failing call reached the agent.
        let mut result = Ok(());
        let mut handed = 0;
        for e in events {
            if let Err(why) = record(e) {
                result = Err((handed, why));
                break;
            }
            handed += 1;
        }
        drop(record);
        if handed > 0 {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            agent_cap::handed(handed as u64, agent.cap(), now);
        }
        result
    }
}

/// Why the sink cannot write when no agent is there to call.
pub const NOT_LOADED: &str =
    "newrelic_record_custom_event() is not defined: the New Relic agent is not loaded";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::AttrValue;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An agent that takes two events, then fails.
    struct TwoThenFail(AtomicUsize);

    impl NewRelicAgent for TwoThenFail {
        fn recorder(&self) -> Result<RecordEvent<'_>, String> {
            Ok(Box::new(|e: &Event| {
                assert!(matches!(e.get("n"), Some(AttrValue::Int(_))));
                match self.0.fetch_add(1, Ordering::Relaxed) {
                    0 | 1 => Ok(()),
                    _ => Err("newrelic_record_custom_event() threw X".into()),
                }
            }))
        }
    }

    #[test]
    fn the_sink_stops_at_the_agents_first_failure() {
        static AGENT_UNDER_TEST: TwoThenFail = TwoThenFail(AtomicUsize::new(0));
        let mut sink = NewRelicSink;
        let events: Vec<Event> = (0..4)
            .map(|i| {
                let mut e = Event::new(b"T").unwrap();
                e.set("n", AttrValue::Int(i));
                e
            })
            .collect();
        if AGENT.get().is_none() {
            let err = sink.write(&events).unwrap_err();
            assert_eq!(err.0, 0);
            assert!(err.1.contains("not loaded"), "{}", err.1);
        }
        register_new_relic_agent(&AGENT_UNDER_TEST);
        assert_eq!(
            sink.write(&events),
            Err((2, "newrelic_record_custom_event() threw X".into()))
        );
    }
}
