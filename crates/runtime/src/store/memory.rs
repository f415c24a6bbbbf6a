//! An in-memory store for tests (the `test-support` feature): the reference decision
//! (`model::step`) on a key space held in memory, with a server clock that follows the
//! test's [`FakeClock`] (the worker's clock too, so one `advance` moves both; a skew makes
//! the server's clock differ when a test needs it) and faults the test injects. The limiter runs
//! against it exactly as against Valkey, so its acquire path (local denials, reloading
//! live limits, the three tries, the `on_unavailable` policy) is tested in microseconds,
//! with the store's data lost, its script cache flushed or its answers broken at will.
//!
//! Keys and values are stored as the decision script stores them (a bucket is
//! `tat:interval:tolerance:change`, expiring when it would be full again), so what one
//! test writes by hand reads as Valkey would read it, and `auto_hot` counts in the same
//! window hashes.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use crate::sync::Mutex;

use checkout_guard_config::live::Stored;
use checkout_guard_model::cmd::decide::ReceivedCall;
use checkout_guard_model::cmd::release::ReleaseCall;
use checkout_guard_model::cmd::with_slices;
use checkout_guard_model::server::{decide_on, feedback_on, release_on, Keyspace};
use checkout_guard_model::{DecideCall, FeedbackCall, Keys, LeaseLevel, LeaseSet};

use super::{AdaptRead, Health, Store, StoreError};
use crate::clock::{Clock, FakeClock};

/// A fault the next call meets (one per call, in the order injected).
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// The call timed out: the connection is dropped and the store left alone for
    /// `retry_in` (as the pooled connection does after a failure).
    Timeout { retry_in: Duration },
    /// The store answered with an error (`NOSCRIPT` that could not be recovered from,
    /// `OOM`, `READONLY`, ...): nothing was done, no back-off.
    ErrorReply(String),
    /// The decision script's cache was flushed (`SCRIPT FLUSH`, a restart): the call
    /// loads the script again and succeeds, as redis-rs's EVALSHA-then-EVAL does.
    NoScript,
    /// The decision answers these integers instead of deciding (a store that replies
    /// something else than the contract).
    Reply(Vec<i64>),
}

#[derive(Debug, Clone)]
enum Val {
    Str(Vec<u8>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set of in-flight leases.
    Leases(LeaseSet),
}

#[derive(Debug, Clone)]
struct Entry {
    val: Val,
    /// The store millisecond after which the key is gone (as Valkey's: a key lives
    /// through its expiry millisecond, with PTTL 0 there); `None`: no expiry.
    expires_at_ms: Option<i64>,
}

struct State {
    /// The clock the server's time follows: its wall clock in Unix µs, plus `skew_us`.
    clock: FakeClock,
    skew_us: i64,
    keys: HashMap<Vec<u8>, Entry>,
    faults: VecDeque<Fault>,
    /// Until this store time, every call fails at once (a back-off after a timeout).
    backoff_until: Option<i64>,
    calls: u64,
    decisions: u64,
    script_loads: u64,
    /// Added to buckets' expiry (see [`MemoryStore::keep_buckets_longer`]).
    bucket_slack_ms: i64,
}

/// See the module documentation.
pub struct MemoryStore {
    state: Mutex<State>,
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("MemoryStore")
            .field("now_us", &s.now())
            .field("keys", &s.keys.len())
            .finish()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

/// What the store has counted (for tests that check how often it was asked).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStats {
    /// Calls that reached the store (faults included, back-off excluded).
    pub calls: u64,
    /// Decisions made (replies of the decision script other than "limits changed").
    pub decisions: u64,
    /// Times the decision script was loaded (the first call, and after `NoScript`).
    pub script_loads: u64,
}

impl MemoryStore {
    /// An empty store on a clock of its own (a new [`FakeClock`], see [`Self::clock`]),
    /// at an arbitrary, realistic instant.
    pub fn new() -> Self {
        Self::on(&FakeClock::new())
    }

    /// An empty store whose server clock follows `clock`: give the same clock to the
    /// limiter and the worker's and the server's time move together.
    pub fn on(clock: &FakeClock) -> Self {
        Self {
            state: Mutex::new(State {
                clock: clock.clone(),
                skew_us: 0,
                keys: HashMap::new(),
                faults: VecDeque::new(),
                backoff_until: None,
                calls: 0,
                decisions: 0,
                script_loads: 0,
                bucket_slack_ms: 0,
            }),
        }
    }

    /// The clock the server's time follows.
    pub fn clock(&self) -> FakeClock {
        self.state.lock().clock.clone()
    }

    /// Sets the server's clock `us` µs ahead of (or, negative, behind) the clock it
    /// follows: a Valkey whose clock differs from the worker's.
    pub fn skew(&self, us: i64) {
        self.state.lock().skew_us = us;
    }

    /// Buckets expire `ms` later than the script sets (as the script's test-clock variant
    /// does), for tests that compare this store with a Valkey whose real clock must not
    /// expire what the simulated one still reads.
    pub fn keep_buckets_longer(&self, ms: i64) {
        self.state.lock().bucket_slack_ms = ms;
    }

    /// The store's clock (µs).
    pub fn now_us(&self) -> i64 {
        self.state.lock().now()
    }

    /// Moves the store's clock forward: the [`FakeClock`] it follows, so every limiter
    /// on that clock too.
    pub fn advance(&self, by: Duration) {
        self.clock().advance(by);
    }

    /// The next calls meet `fault`, one call each, in order.
    pub fn inject(&self, fault: Fault) {
        self.state.lock().faults.push_back(fault);
    }

    /// The store loses all its data (a restart without persistence, a failover to an
    /// empty replica, `FLUSHALL`).
    pub fn flush_all(&self) {
        self.state.lock().keys.clear();
    }

    pub fn stats(&self) -> MemoryStats {
        let s = self.state.lock();
        MemoryStats {
            calls: s.calls,
            decisions: s.decisions,
            script_loads: s.script_loads,
        }
    }

    /// The string at `key`, if any (expired keys are gone).
    pub fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        let mut s = self.state.lock();
        match s.get(key) {
            Some(Val::Str(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// Sets `key` to a string, without expiry (what an operator or another writer does).
    pub fn set(&self, key: &[u8], value: &[u8]) {
        self.state.lock().put(key, Val::Str(value.to_vec()), None);
    }

    /// Replaces the hash at `key`.
    pub fn set_hash(&self, key: &[u8], fields: &[(&[u8], &[u8])]) {
        let fields = fields
            .iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect();
        self.state.lock().put(key, Val::Hash(fields), None);
    }

    pub fn delete(&self, key: &[u8]) {
        self.state.lock().keys.remove(key);
    }

    /// The leases held now in the lease set at `key` (0 when missing).
    pub fn leases_held(&self, key: &[u8]) -> i64 {
        let mut s = self.state.lock();
        let now = s.now();
        match s.get(key) {
            Some(Val::Leases(set)) => set.held(now).held,
            _ => 0,
        }
    }

    /// The integer `field` of the hash at `key` (0 when absent).
    pub fn hash_field(&self, key: &[u8], field: &str) -> i64 {
        let mut s = self.state.lock();
        State::hash_int(&mut s, key, field.as_bytes())
    }

    /// Keys present now, sorted.
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut s = self.state.lock();
        let now_ms = s.now_ms();
        s.keys
            .retain(|_, e| e.expires_at_ms.is_none_or(|t| now_ms <= t));
        let mut k: Vec<_> = s.keys.keys().cloned().collect();
        k.sort();
        k
    }

    /// Runs the preamble every call goes through: the back-off, then an injected fault
    /// (faults of the decision script, `NoScript` and `Reply`, wait for a decision).
    fn enter(
        &self,
        decide: bool,
    ) -> Result<(Option<Fault>, crate::sync::MutexGuard<'_, State>), StoreError> {
        let mut s = self.state.lock();
        if let Some(until) = s.backoff_until {
            let now = s.now();
            if now < until {
                return Err(StoreError::Backoff {
                    retry_in: Duration::from_micros((until - now) as u64),
                    cause: "timed out".into(),
                });
            }
            s.backoff_until = None;
        }
        s.calls += 1;
        let for_decisions = matches!(s.faults.front(), Some(Fault::NoScript | Fault::Reply(_)));
        if for_decisions && !decide {
            return Ok((None, s));
        }
        match s.faults.pop_front() {
            Some(Fault::Timeout { retry_in }) => {
                s.backoff_until = Some(s.now() + retry_in.as_micros() as i64);
                Err(StoreError::Failed {
                    cause: "timed out".into(),
                    retry_in,
                })
            }
            Some(Fault::ErrorReply(msg)) => Err(StoreError::Failed {
                cause: msg,
                retry_in: Duration::ZERO,
            }),
            other => Ok((other, s)),
        }
    }
}

impl State {
    fn now(&self) -> i64 {
        let since_epoch = self
            .clock
            .wall()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        since_epoch.as_micros() as i64 + self.skew_us
    }

    fn now_ms(&self) -> i64 {
        self.now().div_euclid(1000)
    }

    fn get(&mut self, key: &[u8]) -> Option<&Val> {
        let now_ms = self.now_ms();
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_at_ms.is_some_and(|t| now_ms > t))
        {
            self.keys.remove(key);
        }
        self.keys.get(key).map(|e| &e.val)
    }

    fn get_str(&mut self, key: &[u8]) -> Option<Vec<u8>> {
        match self.get(key) {
            Some(Val::Str(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// An integer field of the hash at `key` (0 when absent or not a number).
    fn hash_int(&mut self, key: &[u8], field: &[u8]) -> i64 {
        match self.get(key) {
            Some(Val::Hash(fields)) => fields
                .iter()
                .find(|(f, _)| f == field)
                .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse().ok())
                .unwrap_or(0),
            _ => 0,
        }
    }

    /// `HSET key field value ...`: an existing hash keeps its expiry.
    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], &[u8])]) {
        if !matches!(self.get(key), Some(Val::Hash(_))) {
            self.put(key, Val::Hash(Vec::new()), None);
        }
        let Some(Entry {
            val: Val::Hash(fields),
            ..
        }) = self.keys.get_mut(key)
        else {
            unreachable!("a hash was put above")
        };
        for (f, v) in pairs {
            match fields.iter_mut().find(|(k, _)| k == f) {
                Some(slot) => slot.1 = v.to_vec(),
                None => fields.push((f.to_vec(), v.to_vec())),
            }
        }
    }

    /// `PEXPIRE key ms`.
    fn pexpire(&mut self, key: &[u8], ms: i64) {
        let at = self.now_ms() + ms;
        if let Some(e) = self.keys.get_mut(key) {
            e.expires_at_ms = Some(at);
        }
    }

    /// Sets `key`, expiring `ttl_ms` from now (`SET ... PX`), or never.
    fn put(&mut self, key: &[u8], val: Val, ttl_ms: Option<i64>) {
        let expires_at_ms = ttl_ms.map(|t| self.now_ms() + t);
        self.keys.insert(key.to_vec(), Entry { val, expires_at_ms });
    }

    /// The remaining time to live in ms (-1: no expiry) of the string at `key`, if any:
    /// the script reads the hot flag with `MGET`, which sees other types as nil.
    fn string_pttl(&mut self, key: &[u8]) -> Option<i64> {
        if !matches!(self.get(key)?, Val::Str(_)) {
            return None;
        }
        let now_ms = self.now_ms();
        Some(self.keys[key].expires_at_ms.map_or(-1, |t| t - now_ms))
    }
}

/// The decision's reads and writes on this store's key space (`model::server`).
impl Keyspace for State {
    fn read_string<R>(&mut self, key: &[u8], read: impl FnOnce(Option<&[u8]>) -> R) -> R {
        read(self.get_str(key).as_deref())
    }

    fn pttl(&mut self, key: &[u8]) -> i64 {
        self.string_pttl(key).unwrap_or(-2)
    }

    fn hash_ints(
        &mut self,
        key: &[u8],
        fields: [&[u8]; 2],
        _written_next: bool,
    ) -> Result<[i64; 2], String> {
        if matches!(self.get(key), Some(Val::Str(_) | Val::Leases(_))) {
            return Err(WRONGTYPE.into());
        }
        Ok(fields.map(|f| State::hash_int(self, key, f)))
    }

    fn set_px(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        self.put(key, Val::Str(value.to_vec()), Some(px_ms));
    }

    fn set_bucket(&mut self, key: &[u8], value: &[u8], px_ms: i64) {
        let px_ms = px_ms + self.bucket_slack_ms;
        self.put(key, Val::Str(value.to_vec()), Some(px_ms));
    }

    fn hset(&mut self, key: &[u8], pairs: &[(&[u8], i64)]) {
        let text: Vec<(&[u8], String)> = pairs.iter().map(|&(f, v)| (f, v.to_string())).collect();
        let pairs: Vec<(&[u8], &[u8])> = text.iter().map(|(f, v)| (*f, v.as_bytes())).collect();
        State::hset(self, key, &pairs);
    }

    fn pexpire(&mut self, key: &[u8], ms: i64) {
        State::pexpire(self, key, ms);
    }

    fn del(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }

    fn leases_held(&mut self, key: &[u8], now: i64, _oldest: bool) -> Result<LeaseLevel, String> {
        match self.get(key) {
            None => Ok(LeaseLevel::default()),
            Some(Val::Leases(set)) => Ok(set.held(now)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn lease_take(&mut self, key: &[u8], id: &[u8], expiry_us: i64, now: i64, px_ms: i64) -> i64 {
        if !matches!(self.get(key), Some(Val::Leases(_))) {
            self.put(key, Val::Leases(LeaseSet::default()), None);
        }
        let Some(Entry {
            val: Val::Leases(set),
            ..
        }) = self.keys.get_mut(key)
        else {
            unreachable!("a lease set was put above")
        };
        let removed = set.take(id, expiry_us, now);
        State::pexpire(self, key, px_ms);
        removed
    }

    fn lease_score(&mut self, key: &[u8], id: &[u8]) -> Result<Option<i64>, String> {
        match self.get(key) {
            None => Ok(None),
            Some(Val::Leases(set)) => Ok(set.score(id)),
            Some(_) => Err(WRONGTYPE.into()),
        }
    }

    fn lease_remove(&mut self, key: &[u8], id: &[u8]) {
        if let Some(Entry {
            val: Val::Leases(set),
            ..
        }) = self.keys.get_mut(key)
        {
            set.remove(id);
            if set.is_empty() {
                self.keys.remove(key);
            }
        }
    }

    fn hincrby(&mut self, key: &[u8], field: &[u8], n: i64) {
        let v = State::hash_int(self, key, field) + n;
        State::hset(self, key, &[(field, v.to_string().as_bytes())]);
    }
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Store for MemoryStore {
    fn decide(&self, call: &DecideCall<'_>) -> Result<Vec<i64>, StoreError> {
        let (fault, mut s) = self.enter(true)?;
        if s.script_loads == 0 || fault == Some(Fault::NoScript) {
            s.script_loads += 1;
        }
        if let Some(Fault::Reply(ints)) = fault {
            return Ok(ints);
        }
        // What a server receives: the encoded call, decoded (as CG.DECIDE does).
        let failed = |cause: String| StoreError::Failed {
            cause,
            retry_in: Duration::ZERO,
        };
        let now = s.now();
        let reply = with_slices(call, |args| {
            let received = ReceivedCall::parse(args)?;
            decide_on(&mut *s, &received, now)
        })
        .map_err(failed)?
        .as_slice()
        .to_vec();
        if reply.len() > 2 {
            s.decisions += 1;
        }
        Ok(reply)
    }

    /// `model::server::feedback_on` on this key space at its clock; faults as for a
    /// decision (a script too: `NoScript` reloads it, `Reply` answers instead).
    fn feedback(&self, call: &FeedbackCall<'_>) -> Result<Vec<i64>, StoreError> {
        let (fault, mut s) = self.enter(true)?;
        if fault == Some(Fault::NoScript) {
            s.script_loads += 1;
        }
        if let Some(Fault::Reply(ints)) = fault {
            return Ok(ints);
        }
        let now = s.now();
        with_slices(call, |args| feedback_on(&mut *s, args, now))
            .map(|r| r.to_vec())
            .map_err(|cause| StoreError::Failed {
                cause,
                retry_in: Duration::ZERO,
            })
    }

    /// `model::server::release_on` on this key space at its clock; faults as for a
    /// feedback.
    fn release(&self, call: &ReleaseCall<'_>) -> Result<Vec<i64>, StoreError> {
        let (fault, mut s) = self.enter(true)?;
        if fault == Some(Fault::NoScript) {
            s.script_loads += 1;
        }
        if let Some(Fault::Reply(ints)) = fault {
            return Ok(ints);
        }
        let now = s.now();
        with_slices(call, |args| release_on(&mut *s, args, now))
            .map(|r| r.to_vec())
            .map_err(|cause| StoreError::Failed {
                cause,
                retry_in: Duration::ZERO,
            })
    }

    fn read_adapt(&self, adapt_key: &[u8], last_key: &[u8]) -> Result<AdaptRead, StoreError> {
        let (_, mut s) = self.enter(false)?;
        let a = s.get_str(adapt_key).unwrap_or_default();
        let l = s.get_str(last_key).unwrap_or_default();
        Ok((a, l, s.now()))
    }

    fn read_limits(&self, keys: &Keys) -> Result<Stored, StoreError> {
        let (_, mut s) = self.enter(false)?;
        let version = s.get_str(&keys.limits_version()).unwrap_or_default();
        let (fields, error) = match s.get(&keys.limits()) {
            None => (Vec::new(), None),
            Some(Val::Hash(f)) => (f.clone(), None),
            Some(_) => (Vec::new(), Some(WRONGTYPE.into())),
        };
        Ok(Stored {
            version,
            fields,
            error,
        })
    }

    fn mark_hot(&self, key: &[u8], ttl_seconds: i64) -> Result<(), StoreError> {
        let (_, mut s) = self.enter(false)?;
        s.put(key, Val::Str(b"1".to_vec()), Some(ttl_seconds * 1000));
        Ok(())
    }

    fn unmark_hot(&self, key: &[u8]) -> Result<(), StoreError> {
        let (_, mut s) = self.enter(false)?;
        s.keys.remove(key);
        Ok(())
    }

    fn exists(&self, key: &[u8]) -> Result<bool, StoreError> {
        let (_, mut s) = self.enter(false)?;
        Ok(s.get(key).is_some())
    }

    fn reset(&self, _routing_key: &[u8], pattern: &[u8]) -> Result<(), StoreError> {
        let (_, mut s) = self.enter(false)?;
        let prefix = pattern.strip_suffix(b"*").unwrap_or(pattern);
        s.keys.retain(|k, _| !k.starts_with(prefix));
        Ok(())
    }

    fn health(&self, ping: bool, _cluster_key: &[u8]) -> Health {
        let s = self.state.lock();
        let retry_in = s.backoff_until.map_or(0, |t| (t - s.now()).max(0) as u64);
        let circuit_open = retry_in > 0;
        Health {
            ok: !circuit_open,
            connected: true,
            circuit_open,
            retry_in: Duration::from_micros(retry_in),
            last_error: None,
            consecutive_failures: 0,
            connects: 1,
            last_ping: ping.then(|| (Duration::ZERO, s.clock.wall())),
            engine: Some("model"),
            decisions: Default::default(),
            primary: None,
        }
    }
}
