//! Model-based (proptest): random sequences of operations (acquires, reservations, the
//! clock moving, marks, live changes and modes, data loss, reset, faults) against the
//! limiter on the in-memory store, each decision compared with a pure reference built on
//! `model::step`; the seed is printed (`CG_MODEL_SEED` repeats it, see `seeded/mod.rs`)
//! and proptest shrinks a failing sequence.
//!
//! Every test runs on a [`FakeClock`](checkout_guard_runtime::clock::FakeClock) that the
//! limiter and the store share (`memory_limiter`): nothing here sleeps, and times are exact.

use checkout_guard_config::live::LiveLimits;
use checkout_guard_model::{step, BucketSet, Decision, Keys, StepInput, StoredBucket, StoredState};
use checkout_guard_runtime::store::Fault;
use proptest::prelude::*;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[allow(dead_code)]
mod memory_limiter;
mod seeded;

use memory_limiter::{limiter, set_live_in, store};

#[derive(Debug, Clone)]
enum Op {
    /// `wait_ms` > 0: a reservation (`maxWaitSeconds`).
    Acquire {
        shop: u8,
        tokens: i64,
        wait_ms: i64,
    },
    Advance {
        ms: i64,
    },
    Mark {
        shop: u8,
        ttl_s: i64,
    },
    Unmark {
        shop: u8,
    },
    Live {
        capacity: i64,
        rate: f64,
        /// The live mode set with it (`limiter set mode=...`): None is the option's.
        shadow: Option<bool>,
    },
    FlushAll,
    Reset,
    Timeout {
        retry_ms: u64,
    },
    ErrorReply,
}

/// What the reference expects of the limiter: the store's state as the script would hold
/// it, decided with `model::step`.
struct Reference {
    base: BucketSet,
    set: BucketSet,
    now: i64,
    /// Per key: the bucket and the store millisecond after which it is gone (when it
    /// would be full again; a key lives through its expiry millisecond, as in Valkey).
    buckets: HashMap<Vec<u8>, (StoredBucket, i64)>,
    /// Per shop: the millisecond after which its mark is gone.
    marks: HashMap<u8, i64>,
    version: String,
    backoff_until: i64,
    /// Faults injected and not met yet, in order.
    pending: VecDeque<Op>,
    changes: u32,
    /// The live mode stored (true: shadow), and the one the limiter decides in: what it
    /// read at its last call that reached the store (a failed call reads nothing).
    stored_shadow: bool,
    shadow: bool,
}

/// One random operation, in about the proportions of a checkout's traffic (mostly
/// acquires, the clock moving, now and then a mark, a live change, a fault).
fn op() -> impl Strategy<Value = Op> {
    let shop = 0..3u8;
    prop_oneof![
        55 => (shop.clone(), 1..=3i64, prop::sample::select(vec![0, 0, 0, 1, 99, 250, 1000]))
            .prop_map(|(shop, tokens, wait_ms)| Op::Acquire { shop, tokens, wait_ms }),
        20 => prop::sample::select(vec![1, 50, 99, 100, 250, 1000]).prop_map(|ms| Op::Advance { ms }),
        5 => (shop.clone(), 1..=2i64).prop_map(|(shop, ttl_s)| Op::Mark { shop, ttl_s }),
        3 => shop.prop_map(|shop| Op::Unmark { shop }),
        5 => (
            prop::sample::select(vec![6, 10, 20]),
            prop::sample::select(vec![1.0, 10.0, 50.0]),
            prop::sample::select(vec![None, None, Some(true), Some(false)]),
        )
            .prop_map(|(capacity, rate, shadow)| Op::Live { capacity, rate, shadow }),
        3 => Just(Op::FlushAll),
        2 => Just(Op::Reset),
        4 => prop::sample::select(vec![1, 100, 1000]).prop_map(|retry_ms| Op::Timeout { retry_ms }),
        3 => Just(Op::ErrorReply),
    ]
}

fn shop_id(shop: u8) -> Vec<u8> {
    format!("shop-{shop}").into_bytes()
}

/// Runs `ops` on a fresh limiter and store and on the reference; the first disagreement,
/// or the number of reservations that waited.
fn run(name: &str, ops: &[Op]) -> Result<usize, String> {
    // Live limits are cached per process by limiter name: every run has its own.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let name = &format!("{name}-{}", RUNS.fetch_add(1, Ordering::Relaxed));
    let s = store();
    let l = limiter(name, &s, "deny", false, vec![]);
    let keys = Keys::new(name);
    let base = l.options().buckets.clone();
    let mut r = Reference {
        set: base.clone(),
        base,
        now: s.now_us(),
        buckets: HashMap::new(),
        marks: HashMap::new(),
        version: String::new(),
        backoff_until: i64::MIN,
        pending: VecDeque::new(),
        changes: 0,
        stored_shadow: false,
        shadow: false,
    };
    let mut waited = 0;
    for (i, op) in ops.iter().enumerate() {
        let fail = |what: String| Err(format!("op {i} {op:?}: {what}"));
        match op {
            Op::Acquire {
                shop,
                tokens,
                wait_ms,
            } => {
                let got = match wait_ms {
                    0 => l.acquire(&shop_id(*shop), *tokens).unwrap(),
                    ms => {
                        let wait = *ms as f64 / 1000.0;
                        l.acquire_within(&shop_id(*shop), *tokens, wait).unwrap().0
                    }
                };
                let want = r.acquire(&keys, *shop, *tokens, wait_ms * 1000);
                if got != want {
                    return fail(format!("got {got:?}, want {want:?}"));
                }
                waited += usize::from(got.waited > 0.0);
            }
            Op::Advance { ms } => {
                s.advance(Duration::from_millis(*ms as u64));
                r.now += ms * 1000;
            }
            Op::Mark { shop, ttl_s } => {
                let got = l.mark_hot(&shop_id(*shop), *ttl_s).is_ok();
                let want = r.admin_call();
                if want {
                    r.marks.insert(*shop, r.now.div_euclid(1000) + ttl_s * 1000);
                }
                if got != want {
                    return fail(format!("markHot ok={got}, want {want}"));
                }
            }
            Op::Unmark { shop } => {
                let got = l.unmark_hot(&shop_id(*shop)).is_ok();
                let want = r.admin_call();
                if want {
                    r.marks.remove(shop);
                }
                if got != want {
                    return fail(format!("unmarkHot ok={got}, want {want}"));
                }
            }
            Op::Live {
                capacity,
                rate,
                shadow,
            } => {
                r.changes += 1;
                let mode = shadow.map(|s| if s { "shadow" } else { "enforce" });
                set_live_in(&s, name, r.changes, (*capacity, *rate), mode);
                // The limiter's option is enforce: no live mode is enforce.
                r.stored_shadow = shadow.unwrap_or(false);
                r.version = format!("{}-e{}-{}", r.changes, r.changes, r.now);
                // Invalid for this limiter (a hot bucket above global): the constructor's.
                let live = LiveLimits {
                    overrides: [Some((*capacity, *rate)), None, None],
                    ..LiveLimits::default()
                };
                r.set = live.apply(&r.base).unwrap_or_else(|_| r.base.clone());
            }
            Op::FlushAll => {
                s.flush_all();
                r.buckets.clear();
                r.marks.clear();
                r.version.clear();
                r.stored_shadow = false;
                r.set = r.base.clone();
            }
            Op::Reset => {
                let got = l.reset().is_ok();
                let want = r.admin_call();
                if want {
                    r.buckets.clear();
                }
                if got != want {
                    return fail(format!("reset ok={got}, want {want}"));
                }
            }
            Op::Timeout { retry_ms } => {
                s.inject(Fault::Timeout {
                    retry_in: Duration::from_millis(*retry_ms),
                });
                r.pending.push_back(op.clone());
            }
            Op::ErrorReply => {
                s.inject(Fault::ErrorReply("ERR injected".into()));
                r.pending.push_back(op.clone());
            }
        }
    }
    Ok(waited)
}

impl Reference {
    /// Whether a call reaches the store and succeeds; consumes a pending fault.
    fn admin_call(&mut self) -> bool {
        if self.now < self.backoff_until {
            return false;
        }
        match self.pending.pop_front() {
            Some(Op::Timeout { retry_ms }) => {
                self.backoff_until = self.now + retry_ms as i64 * 1000;
                false
            }
            Some(_) => false,
            None => true,
        }
    }

    /// With `max_wait_us` > 0 a reservation: allowed when every bucket that applies
    /// holds the tokens within the wait (never more than a full bucket), and the clock
    /// moves on by the wait (the limiter sleeps on the store's clock).
    fn acquire(&mut self, keys: &Keys, shop: u8, tokens: i64, max_wait_us: i64) -> Decision {
        let d = self.enforce(keys, shop, tokens, max_wait_us);
        if !self.shadow {
            return d;
        }
        // Shadow mode: the same decision and the same buckets, let through; a
        // reservation's wait is told, not slept.
        let wait = d.waited;
        if wait > 0.0 {
            self.now -= (wait * 1e6).round() as i64;
        }
        let mut d = d;
        d.waited = 0.0;
        d.into_shadow(wait)
    }

    /// What enforcement decides (and the clock after its reservation's sleep).
    fn enforce(&mut self, keys: &Keys, shop: u8, tokens: i64, max_wait_us: i64) -> Decision {
        if self.now < self.backoff_until {
            let left = (self.backoff_until - self.now) as f64 / 1e6;
            return Decision::unavailable(false, left, false);
        }
        match self.pending.pop_front() {
            Some(Op::Timeout { retry_ms }) => {
                self.backoff_until = self.now + retry_ms as i64 * 1000;
                return Decision::unavailable(false, retry_ms as f64 / 1000.0, false);
            }
            Some(_) => return Decision::unavailable(false, 0.0, false),
            None => {}
        }
        // The call reached the store: it read the live limits, mode included.
        self.shadow = self.stored_shadow;
        let id = shop_id(shop);
        let bucket_keys = [keys.global(), keys.hot_lane(), keys.hot_shop(&id)];
        let now = self.now;
        let now_ms = now.div_euclid(1000);
        self.buckets.retain(|_, (_, until)| now_ms <= *until);
        self.marks.retain(|_, until| now_ms <= *until);
        let mark_ttl_ms = self.marks.get(&shop).map(|until| until - now_ms);
        let stored = StoredState {
            buckets: bucket_keys
                .clone()
                .map(|k| self.buckets.get(&k).map(|(b, _)| *b)),
            mark_ttl_ms,
            ..Default::default()
        };
        let (reply, next) = step(
            &self.set,
            &stored,
            &StepInput {
                version: &self.version,
                max_wait_us,
                ..StepInput::new(now, tokens)
            },
        );
        for (i, key) in bucket_keys.into_iter().enumerate() {
            if let (Some(b), true) = (next.buckets[i], next.buckets[i] != stored.buckets[i]) {
                let until = now_ms + (b.tat - now).div_euclid(1000) + 1;
                self.buckets.insert(key, (b, until));
            }
        }
        let mut d = Decision::from_reply(&self.set, tokens, &reply);
        // The wait, from the reply itself: the slowest bucket's tat - tolerance - now.
        let mut wait_us = 0;
        for (i, spec) in [Some(self.set.global), self.set.hot_lane, self.set.hot_shop]
            .into_iter()
            .enumerate()
        {
            if let (Some(spec), true) = (spec, reply.tats[i] >= 0) {
                wait_us = wait_us.max(reply.tats[i] - spec.tolerance_us() - now);
            }
        }
        if d.allowed && wait_us > 0 {
            assert!(max_wait_us > 0 && wait_us <= max_wait_us, "{reply:?}");
            let wait = Duration::from_micros(wait_us as u64);
            d.waited = wait.as_secs_f64();
            self.now += wait_us;
        }
        d
    }
}

/// Sequences of up to 60 operations (`PROPTEST_CASES`, default 200); a failing one is
/// shrunk by proptest (operations removed, values made simpler) and printed with the seed.
#[test]
fn random_sequences_match_the_reference() {
    static RUN: AtomicU64 = AtomicU64::new(0);
    let waited = AtomicU64::new(0);
    seeded::run(
        "random_sequences_match_the_reference",
        200,
        prop::collection::vec(op(), 0..=60),
        |ops| {
            let name = format!("model-{}", RUN.fetch_add(1, Ordering::Relaxed));
            let w = run(&name, &ops)?;
            waited.fetch_add(w as u64, Ordering::Relaxed);
            Ok(())
        },
    );
    assert!(
        waited.load(Ordering::Relaxed) > 0,
        "no reservation ever waited"
    );
}
