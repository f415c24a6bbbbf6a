//! What-if replay: recorded attempts at one API decided again by the limiter's own model
//! ([`checkout_guard_model::step`], the decision the script, the module and the
//! tests share), under candidate limits, in time order, with a provider's own limit as a
//! token bucket after them. No second implementation of the decision: this module only
//! keeps what the store would keep (the buckets, the hot marks, the `auto_hot` windows)
//! and counts what came out.
//!
//! In-flight leases (`in_flight=N[/M/K]`, issue 37) are decided by the same step: this
//! module passes the leases held per level ([`StoredState::leases`]) and the option
//! ([`StepInput::in_flight`]) and takes the reason from the reply, as the workers do. An
//! admitted call holds a lease on each level that applies from its recorded start
//! (`timestamp`) to its end (`duration.ms` later, at most the lease's `lease_seconds`).
//!
//! Endpoints and priority classes (issue 42, docs/endpoints.md): `--limits` takes
//! `endpoint.NAME=C/R`, `priorities.CLASS=SHARE` and `default_priority=CLASS` (what the
//! workers publish in their settings, [`live::describe_routes`]), validated by the options'
//! own rules. A recorded call is decided with the bucket of the endpoint named by its `api`
//! (a denial's: its `endpoint`), without one when that api is not a configured endpoint
//! (counted in [`Sim::unrouted`]); in the class its `priority` attribute names when that
//! class is configured, else the class `--priority API=CLASS` gives its api, else
//! `default_priority` ([`StepInput::share_ppm`]).
//!
//! Memory: per scenario, one state per shop and one counter per second of the range, and
//! one entry per call in flight (the leases held); nothing per event. The caller feeds attempts in time order ([`Merge`] puts a few
//! seconds of disorder right, as the workers' batched writes leave it).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use checkout_guard_config::live::{self, parse_bucket};
use checkout_guard_config::options::{
    endpoints_from_value, in_flight_from_value, priorities_from_value,
};
use checkout_guard_config::{auto_hot_from_value, bucket_value, Value};
use checkout_guard_model::bucket::MAX_STORED_NUMBER;
use checkout_guard_model::in_flight::DEFAULT_LEASE_SECONDS;
use checkout_guard_model::step::{auto_hot_window, StepInput, StoredState, WindowCounts};
use checkout_guard_model::{
    reservation_wait_with, step, AutoHot, BucketSet, BucketSpec, Endpoints, InFlight, Lane,
    LeaseLevel, Priorities, StoredBucket,
};

/// Whether `ts_ms` is an instant the model decides at: from the Unix epoch to 2^53 - 1 µs
/// (the year 2255, [`MAX_STORED_NUMBER`]), as Valkey's clock gives them. Anything else
/// (a negative or absurd timestamp in a file) is skipped by [`Sim::attempt`].
pub fn timestamp_in_range(ts_ms: i64) -> bool {
    (0..=MAX_STORED_NUMBER / 1000).contains(&ts_ms)
}

/// A recorded attempt: when (Unix ms), for which shop, and how long its call took (µs;
/// `None` for a recorded denial, whose call was not made, or a call without a readable
/// `duration.ms`); its api (a call's `api`, a denial's `endpoint`) and its class (the
/// event's `priority`), if any: shared (a few distinct values for millions of attempts).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Attempt {
    pub ts_ms: i64,
    pub shop: Vec<u8>,
    pub duration_us: Option<i64>,
    pub api: Option<Arc<[u8]>>,
    pub priority: Option<Arc<[u8]>>,
}

/// Shared copies of the few distinct values an attribute takes (an attempt's api or
/// class): one allocation per value, not per attempt; past `MAX_INTERNED` distinct values a
/// value gets its own.
#[derive(Debug, Default)]
pub struct Interned(Vec<Arc<[u8]>>);

const MAX_INTERNED: usize = 64;

impl Interned {
    pub fn get(&mut self, v: &[u8]) -> Arc<[u8]> {
        if let Some(a) = self.0.iter().find(|a| ***a == *v) {
            return a.clone();
        }
        let a: Arc<[u8]> = Arc::from(v);
        if self.0.len() < MAX_INTERNED {
            self.0.push(a.clone());
        }
        a
    }
}

/// A recorded `duration.ms` as µs: `None` for one no call can have taken (negative, not a
/// number); at most a day (a longer one is held for its lease's `lease_seconds` anyway).
pub fn duration_us(ms: Option<f64>) -> Option<i64> {
    let ms = ms.filter(|m| m.is_finite() && *m >= 0.0)?;
    Some((ms * 1000.0).round().min(86_400e6) as i64)
}

/// Parses `in_flight=`'s value `N[/M/K]` (global, hot lane, hot shop; `-`, `0` or nothing
/// for a hot level without a limit), each a limit as `limiter set in_flight.*` takes it
/// ([`live::parse_in_flight_limit`]), then validated by the option's own rules with
/// `lease_seconds` ([`in_flight_from_value`]: the hot levels at most the global one, each
/// only where `set` has that bucket, the bound from 1 to 600 s, default 30). Errors name
/// the value.
pub fn parse_in_flight(
    value: &str,
    lease_seconds: Option<f64>,
    set: &BucketSet,
) -> Result<InFlight, String> {
    let parts: Vec<&str> = value.split('/').map(str::trim).collect();
    if parts.len() > 3 {
        return Err(format!("in_flight={value} is not N[/M/K]"));
    }
    let mut entries = Vec::new();
    for (lane, part) in Lane::ALL.into_iter().zip(&parts) {
        // `0` too: the form `limiter set` and `limiter status` print (`in_flight=3/0/1`).
        if lane != Lane::Global && matches!(*part, "" | "-" | "0") {
            continue;
        }
        let name = format!("{}{}", live::IN_FLIGHT_PREFIX, lane.as_str());
        let n = live::parse_in_flight_limit(&name, part)
            .map_err(|e| format!("in_flight={value} is not N[/M/K] ({e})"))?;
        entries.push((lane.as_str().to_string(), Value::Int(n)));
    }
    if let Some(s) = lease_seconds {
        entries.push(("lease_seconds".to_string(), Value::Float(s)));
    }
    in_flight_from_value(&Value::Map(entries), set)
        .map_err(|e| format!("{} {} (in_flight={value})", e.option, e.message))
}

/// One candidate configuration, as `--limits` names it.
#[derive(Debug, Clone, Default)]
pub struct Scenario {
    pub name: String,
    /// What `--limits` said (for display).
    pub text: String,
    /// `None`: no limiter (every attempt admitted; only the provider decides).
    pub limits: Option<BucketSet>,
    /// `in_flight=N[/M/K]` (needs `limits`): the option as the model decides it.
    pub in_flight: Option<InFlight>,
    /// `endpoint.NAME=C/R` each: the `endpoints` option (empty: none).
    pub endpoints: Endpoints,
    /// `priorities.CLASS=SHARE` each and `default_priority=CLASS`.
    pub priorities: Option<Priorities>,
}

/// What every scenario shares: the hot shops listed, `auto_hot`, reservations, the
/// provider's limit.
#[derive(Debug, Clone, Default)]
pub struct Common {
    pub hot_shops: HashSet<Vec<u8>>,
    pub auto_hot: Option<AutoHot>,
    /// A reservation's longest wait, µs (0: none).
    pub max_wait_us: i64,
    pub provider: Option<BucketSpec>,
    /// `--priority API=CLASS`: the class of a call of that api whose event names none.
    pub priority_by_api: HashMap<Vec<u8>, String>,
}

/// Parses `--limits`: `[name:]global=C/R [hot_lane=C/R] [hot_shop=C/R] [in_flight=N[/M/K]]
/// [lease_seconds=S] [endpoint.NAME=C/R ...] [priorities.CLASS=SHARE ...]
/// [default_priority=CLASS]` (spaces or commas between them; C capacity, R refill per
/// second; N, M, K the calls in flight at once globally, in the hot lane, per hot shop; S
/// the lease's bound), validated as the limiter's options are (errors name the bucket, the
/// part or the value: `endpoint.items.capacity`, `priorities.normal`, `default_priority`).
/// The endpoints and classes as the workers publish them ([`live::describe_routes`]) are
/// taken as they are. `index` names an unnamed scenario.
pub fn parse_limits(text: &str, index: usize) -> Result<Scenario, String> {
    // `NAME:` before the parts; not the start of a part whose name holds a `:`
    // (`endpoint.v1:charges=5/5`).
    let named = |n: &str| {
        let n = n.trim();
        !n.is_empty()
            && !n.contains('=')
            && !n.starts_with(live::ENDPOINT_PREFIX)
            && !n.starts_with(live::PRIORITIES_PREFIX)
    };
    let (name, body) = match text.split_once(':') {
        Some((n, rest)) if named(n) => (n.trim().to_string(), rest),
        _ => (
            if index == 0 {
                "limits".to_string()
            } else {
                format!("limits{}", index + 1)
            },
            text,
        ),
    };
    let mut buckets: [Option<BucketSpec>; 3] = [None; 3];
    let mut in_flight: Option<&str> = None;
    let mut lease_seconds: Option<f64> = None;
    let mut endpoints: Vec<(String, Value)> = Vec::new();
    let mut classes: Vec<(String, Value)> = Vec::new();
    let mut default_priority: Option<&str> = None;
    for part in body
        .split([' ', ',', '\t', '\n'])
        .filter(|p| !p.trim().is_empty())
    {
        let (bucket, value) = part
            .split_once('=')
            .ok_or_else(|| format!("--limits {text:?}: {part:?} is not BUCKET=CAPACITY/RATE"))?;
        let key = bucket.trim();
        if key.starts_with(live::ENDPOINT_PREFIX) {
            let (n, (c, r)) = live::parse_endpoint_field(key, value)
                .map_err(|e| format!("--limits {text:?}: {e}"))?;
            if endpoints.iter().any(|(x, _)| *x == n) {
                return Err(format!("--limits {text:?}: {key} given twice"));
            }
            endpoints.push((n, bucket_value(c, r)));
            continue;
        }
        if key.starts_with(live::PRIORITIES_PREFIX) {
            let (class, share) = live::parse_priority_field(key, value)
                .map_err(|e| format!("--limits {text:?}: {e}"))?;
            if classes.iter().any(|(x, _)| *x == class) {
                return Err(format!("--limits {text:?}: {key} given twice"));
            }
            classes.push((class, Value::Float(share)));
            continue;
        }
        if key == "default_priority" {
            if default_priority.replace(value.trim()).is_some() {
                return Err(format!("--limits {text:?}: default_priority given twice"));
            }
            continue;
        }
        match key {
            "in_flight" => {
                if in_flight.replace(value).is_some() {
                    return Err(format!("--limits {text:?}: in_flight given twice"));
                }
                continue;
            }
            "lease_seconds" | "in_flight.lease_seconds" => {
                let s = value.trim().parse::<f64>().map_err(|_| {
                    format!("--limits {text:?}: lease_seconds={value} is not a number of seconds")
                })?;
                if lease_seconds.replace(s).is_some() {
                    return Err(format!("--limits {text:?}: lease_seconds given twice"));
                }
                continue;
            }
            _ => {}
        }
        let lane = Lane::from_name(key).ok_or_else(|| {
            format!(
                "--limits {text:?}: {bucket:?} is not a bucket (global, hot_lane, hot_shop, endpoint.NAME) nor priorities.CLASS, default_priority, in_flight, lease_seconds"
            )
        })?;
        let (c, r) = parse_bucket(lane, value).map_err(|e| format!("--limits {text:?}: {e}"))?;
        let spec =
            BucketSpec::new(lane.as_str(), c, r).map_err(|e| format!("--limits {text:?}: {e}"))?;
        if buckets[lane as usize].replace(spec).is_some() {
            return Err(format!("--limits {text:?}: {} given twice", lane.as_str()));
        }
    }
    let global = buckets[0].ok_or_else(|| format!("--limits {text:?}: no global=CAPACITY/RATE"))?;
    let set = BucketSet {
        global,
        hot_lane: buckets[1],
        hot_shop: buckets[2],
    };
    let in_flight = match (in_flight, lease_seconds) {
        (Some(v), secs) => {
            Some(parse_in_flight(v, secs, &set).map_err(|e| format!("--limits {text:?}: {e}"))?)
        }
        (None, Some(_)) => {
            return Err(format!(
                "--limits {text:?}: lease_seconds needs in_flight=N[/M/K]"
            ))
        }
        (None, None) => None,
    };
    // The options' own checks: names, each bucket as global's and at most global's, the
    // shares, the default one of the classes. Named as the parts are written here.
    let endpoints = if endpoints.is_empty() {
        Endpoints::default()
    } else {
        endpoints_from_value(&Value::Map(endpoints), &set.global).map_err(|e| {
            format!(
                "--limits {text:?}: {} {}",
                e.option.replacen("endpoints.", live::ENDPOINT_PREFIX, 1),
                e.message
            )
        })?
    };
    let classes = (!classes.is_empty()).then_some(Value::Map(classes));
    let default_priority = default_priority.map(|d| Value::Str(d.as_bytes().to_vec()));
    let priorities = priorities_from_value(classes.as_ref(), default_priority.as_ref())
        .map_err(|e| format!("--limits {text:?}: {} {}", e.option, e.message))?;
    Ok(Scenario {
        name,
        text: body.trim().to_string(),
        limits: Some(set),
        in_flight,
        endpoints,
        priorities,
    })
}

/// Parses `--priority API=CLASS` (repeatable): the class of a recorded call of that api
/// whose event names none (`priority`), checked against every scenario that has classes
/// (each must configure it); refused when none has.
pub fn parse_priority_map(
    items: &[String],
    scenarios: &[Scenario],
) -> Result<HashMap<Vec<u8>, String>, String> {
    let mut out = HashMap::new();
    if items.is_empty() {
        return Ok(out);
    }
    let with_classes: Vec<&Scenario> = scenarios
        .iter()
        .filter(|s| s.priorities.is_some())
        .collect();
    if with_classes.is_empty() {
        return Err("--priority needs classes: priorities.CLASS=SHARE in --limits".into());
    }
    for item in items {
        let (api, class) = item
            .split_once('=')
            .ok_or_else(|| format!("--priority {item:?} is not API=CLASS"))?;
        let class = class.trim();
        for s in &with_classes {
            let p = s.priorities.as_ref().expect("filtered");
            if p.share_ppm(class).is_none() {
                let known: Vec<&str> = p.iter().map(|(n, _)| n).collect();
                return Err(format!(
                    "--priority {item:?}: {class:?} is not a class of --limits {} ({})",
                    s.name,
                    known.join(", ")
                ));
            }
        }
        if out
            .insert(api.as_bytes().to_vec(), class.to_string())
            .is_some()
        {
            return Err(format!("--priority: api {api:?} given twice"));
        }
    }
    Ok(out)
}

/// Parses `--provider CAPACITY/RATE`: the provider's own limit as a token bucket.
pub fn parse_provider(text: &str) -> Result<BucketSpec, String> {
    let (c, r) = text
        .split_once('/')
        .ok_or_else(|| format!("--provider: {text:?} is not CAPACITY/RATE"))?;
    let c = c
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("--provider: capacity {c:?} is not an integer"))?;
    let r = r
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("--provider: rate {r:?} is not a number"))?;
    BucketSpec::new("provider", c, r).map_err(|e| format!("--provider: {e}"))
}

/// Parses `--auto-hot`: empty for the option's defaults (`auto_hot => true`), else the
/// option's fields as `window_seconds=10,share=0.3,ttl_seconds=300,min_tokens=20` (spaces
/// or commas), validated as the option is. Needs the global bucket (`min_tokens`' default
/// is 10% of what it refills in a window).
pub fn parse_auto_hot(text: &str, global: &BucketSpec) -> Result<AutoHot, String> {
    let mut entries = Vec::new();
    for part in text.split([' ', ',']).filter(|p| !p.trim().is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("--auto-hot: {part:?} is not FIELD=VALUE"))?;
        let v = v.trim();
        let value = match v.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => match v.parse::<f64>() {
                Ok(f) => Value::Float(f),
                Err(_) => Value::Str(v.as_bytes().to_vec()),
            },
        };
        entries.push((k.trim().to_string(), value));
    }
    let v = if entries.is_empty() {
        Value::Bool(true)
    } else {
        Value::Map(entries)
    };
    match auto_hot_from_value(&v, global) {
        Ok(Some(a)) => Ok(a),
        Ok(None) => Err("--auto-hot: off".into()),
        Err(e) => Err(format!("--auto-hot: {e}")),
    }
}

/// Counts per shop (and for the whole API).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    pub attempts: u64,
    pub admitted: u64,
    /// Denied, by the lane whose bucket lacked the tokens.
    pub denied: [u64; 3],
    /// Denied by the bucket of the call's endpoint (reason `endpoint`).
    pub denied_endpoint: u64,
    /// Admitted calls the provider's limit would have answered 429.
    pub provider_429: u64,
    /// Admitted reservations that would have waited (for longer than 0).
    pub waited: u64,
    /// Admitted while hot (listed, marked by `auto_hot`).
    pub admitted_hot: u64,
    /// Denied by an in-flight level whose leases were all held (global, hot lane, hot
    /// shop: `in_flight_global`, ...); the buckets had the tokens.
    pub denied_in_flight: [u64; 3],
    /// The most of its calls in flight at once (admitted calls, every level).
    pub peak_in_flight: u64,
}

impl Counts {
    /// Every denial: by the buckets and by the in-flight levels.
    pub fn denied_total(&self) -> u64 {
        self.denied.iter().sum::<u64>()
            + self.denied_endpoint
            + self.denied_in_flight.iter().sum::<u64>()
    }
}

/// Counts per endpoint (or per class): the attempts decided with it, admitted, denied (any
/// reason), and denied by the endpoint's own bucket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteCounts {
    pub attempts: u64,
    pub admitted: u64,
    pub denied: u64,
    pub denied_endpoint: u64,
}

/// The key of [`Sim::by_endpoint`] and [`Sim::by_class`] for the attempts decided without
/// an endpoint, or without a class.
pub const NO_ROUTE: &str = "(none)";

/// What one attempt came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Admitted,
    /// Denied by this lane's bucket.
    Denied(Lane),
    /// Denied by the bucket of the call's endpoint.
    DeniedEndpoint,
    /// Denied by this in-flight level (the buckets had the tokens; none taken).
    DeniedInFlight(Lane),
}

/// One level's leases: when each is released (µs), the earliest first, and the most held
/// at once.
#[derive(Debug, Default)]
pub struct Leases {
    ends: BinaryHeap<Reverse<i64>>,
    /// The most held at once, and the first instant (µs) it was.
    pub peak: u64,
    pub peak_at_us: i64,
}

impl Leases {
    /// Releases the leases that end at or before `now` (a lease ending at the instant a
    /// call starts is free for it: a lease is held over `[start, end)`).
    fn expire(&mut self, now: i64) {
        while self.ends.peek().is_some_and(|Reverse(end)| *end <= now) {
            self.ends.pop();
        }
    }

    /// Leases held (after [`Self::expire`]).
    pub fn held(&self) -> u64 {
        self.ends.len() as u64
    }

    /// When the first of the leases held ends (µs).
    pub fn earliest_end(&self) -> Option<i64> {
        self.ends.peek().map(|Reverse(end)| *end)
    }

    fn take(&mut self, now: i64, end: i64) {
        if end > now {
            self.ends.push(Reverse(end));
        }
        // A call of no duration is in flight at its start, for no time: it counts.
        let held = self.held() + u64::from(end <= now);
        if held > self.peak {
            self.peak = held;
            self.peak_at_us = now;
        }
    }
}

/// One second's counts, for the rates and the charts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Second {
    pub attempts: u64,
    pub admitted: u64,
    pub admitted_hot: u64,
    pub denied: u64,
    pub provider_429: u64,
}

#[derive(Debug, Default)]
struct ShopState {
    bucket: Option<StoredBucket>,
    /// An `auto_hot` mark's end, µs.
    mark_until_us: Option<i64>,
    /// `auto_hot`: the window the counts are of, this shop's tokens in it and in the one before.
    window: i64,
    mine: [i64; 2],
    counts: Counts,
    /// Its leases on the hot-shop level (taken while hot), and all its calls in flight.
    leases: Leases,
    calls: Leases,
}

/// One scenario's replay: the store's state as the model keeps it, and what came out.
pub struct Sim {
    pub scenario: Scenario,
    common: Common,
    global: Option<StoredBucket>,
    lane: Option<StoredBucket>,
    provider: Option<StoredBucket>,
    /// `auto_hot`: the window of `all`, every shop's tokens in it and in the one before.
    window: i64,
    all: [i64; 2],
    shops: HashMap<Vec<u8>, ShopState>,
    pub total: Counts,
    pub seconds: BTreeMap<i64, Second>,
    /// Reservations' waits, µs (a histogram: memory by its buckets, not its entries).
    pub waits: crate::scan::Histogram,
    pub max_wait_us: i64,
    /// Shops `auto_hot` marked, at least once.
    pub marked: HashSet<Vec<u8>>,
    /// Leases of the global and hot-lane levels (every admitted call; the hot ones), held
    /// whether or not `in_flight` limits them: their peaks size the limits.
    pub global_leases: Leases,
    pub lane_leases: Leases,
    /// The hot-shop level's peak: the most one shop held at once (while hot), which
    /// shop, and when (µs).
    pub hot_shop_peak: (u64, Vec<u8>, i64),
    /// Leases held for an estimated time: recorded denials admitted here (their call was
    /// not made) and calls without a `duration.ms`, held for the mean duration of the
    /// calls read before them.
    pub estimated: u64,
    /// Leases that ran out before their call ended (`lease_seconds` shorter than it).
    pub lease_expired: u64,
    /// Durations read so far (sum µs, count), for the estimate.
    durations: (i128, u64),
    /// Each endpoint bucket's state, by name (written once a call took from it).
    endpoint_buckets: HashMap<String, StoredBucket>,
    /// Per endpoint ([`NO_ROUTE`]: decided without one) and per class ([`NO_ROUTE`]: no
    /// class): what came out.
    pub by_endpoint: BTreeMap<String, RouteCounts>,
    pub by_class: BTreeMap<String, RouteCounts>,
    /// Attempts whose api is not a configured endpoint (the scenario has endpoints),
    /// decided without an endpoint: per api.
    pub unrouted: BTreeMap<String, u64>,
}

impl Sim {
    pub fn new(scenario: Scenario, common: Common) -> Self {
        Self {
            scenario,
            common,
            global: None,
            lane: None,
            provider: None,
            window: i64::MIN,
            all: [0; 2],
            shops: HashMap::new(),
            total: Counts::default(),
            seconds: BTreeMap::new(),
            waits: Default::default(),
            max_wait_us: 0,
            marked: HashSet::new(),
            global_leases: Leases::default(),
            lane_leases: Leases::default(),
            hot_shop_peak: (0, Vec::new(), 0),
            estimated: 0,
            lease_expired: 0,
            durations: (0, 0),
            endpoint_buckets: HashMap::new(),
            by_endpoint: BTreeMap::new(),
            by_class: BTreeMap::new(),
            unrouted: BTreeMap::new(),
        }
    }

    /// Calls decided without an endpoint because their api is not one.
    pub fn unrouted_total(&self) -> u64 {
        self.unrouted.values().sum()
    }

    /// The endpoint (name, bucket) an attempt of `api` is decided with: the configured
    /// endpoint of that name; else none (counted in [`Self::unrouted`] when the scenario
    /// has endpoints and the attempt has an api).
    fn endpoint_of(&mut self, api: Option<&[u8]>) -> Option<(String, BucketSpec)> {
        if self.scenario.limits.is_none() || self.scenario.endpoints.is_empty() {
            return None;
        }
        let api = api?;
        let found = std::str::from_utf8(api)
            .ok()
            .and_then(|name| Some((name, *self.scenario.endpoints.get(name)?)));
        match found {
            Some((name, spec)) => Some((name.to_string(), spec)),
            None => {
                let key = String::from_utf8_lossy(api);
                match self.unrouted.get_mut(&*key) {
                    Some(n) => *n += 1,
                    None => {
                        self.unrouted.insert(key.into_owned(), 1);
                    }
                }
                None
            }
        }
    }

    /// The class an attempt is decided in and its share (ppm): the event's `priority` when
    /// configured, else `--priority`'s for its api, else `default_priority`; none (share 0)
    /// without classes.
    fn class_of(&self, api: Option<&[u8]>, priority: Option<&[u8]>) -> (Option<String>, i64) {
        let Some(p) = self.scenario.priorities.as_ref() else {
            return (None, 0);
        };
        if self.scenario.limits.is_none() {
            return (None, 0);
        }
        let named = priority
            .and_then(|b| std::str::from_utf8(b).ok())
            .filter(|c| p.share_ppm(c).is_some());
        let mapped = || {
            api.and_then(|a| self.common.priority_by_api.get(a))
                .map(String::as_str)
                .filter(|c| p.share_ppm(c).is_some())
        };
        match named.or_else(mapped).or(p.default_class()) {
            Some(c) => (Some(c.to_string()), p.share_ppm(c).unwrap_or(0)),
            None => (None, 0),
        }
    }

    fn count_route(map: &mut BTreeMap<String, RouteCounts>, key: Option<&str>, v: Verdict) {
        let key = key.unwrap_or(NO_ROUTE);
        let c = match map.get_mut(key) {
            Some(c) => c,
            None => map.entry(key.to_string()).or_default(),
        };
        c.attempts += 1;
        match v {
            Verdict::Admitted => c.admitted += 1,
            Verdict::DeniedEndpoint => {
                c.denied += 1;
                c.denied_endpoint += 1;
            }
            _ => c.denied += 1,
        }
    }

    /// The bound of a lease: the candidate's `lease_seconds`, else the option's default.
    fn lease_us(&self) -> i64 {
        self.scenario
            .in_flight
            .map_or((DEFAULT_LEASE_SECONDS * 1e6) as i64, |f| f.lease_us)
    }

    /// Peak in flight per level (global, hot lane, hot shop) and when (Unix ms).
    pub fn peaks_in_flight(&self) -> [(u64, i64); 3] {
        [
            (
                self.global_leases.peak,
                self.global_leases.peak_at_us / 1000,
            ),
            (self.lane_leases.peak, self.lane_leases.peak_at_us / 1000),
            (self.hot_shop_peak.0, self.hot_shop_peak.2 / 1000),
        ]
    }

    /// Shifts a window pair `(at, [cur, prev])` to window `w`.
    fn shift(at: &mut i64, counts: &mut [i64; 2], w: i64) {
        if *at == w {
            return;
        }
        *counts = if *at != i64::MIN && *at + 1 == w {
            [0, counts[0]]
        } else {
            [0, 0]
        };
        *at = w;
    }

    /// Decides one attempt (one token) at `ts_ms` for `shop`, its call (if admitted)
    /// lasting an estimated time (see [`Self::estimated`]); an instant out of
    /// [`timestamp_in_range`] is not decided (false).
    pub fn attempt(&mut self, ts_ms: i64, shop: &[u8]) -> bool {
        self.attempt_call(ts_ms, shop, None).is_some()
    }

    /// Decides one attempt (one token) at `ts_ms` for `shop` whose call lasted
    /// `duration_us` (None: unknown, estimated), by [`step`]: the buckets first, then, if
    /// they admit it, the in-flight levels in the order global, hot lane, hot shop (the
    /// hot ones when the shop is hot); a call refused a lease takes no tokens, one refused
    /// tokens no lease. None: an instant out of [`timestamp_in_range`], not decided.
    pub fn attempt_call(
        &mut self,
        ts_ms: i64,
        shop: &[u8],
        duration_us: Option<i64>,
    ) -> Option<Verdict> {
        self.attempt_routed(ts_ms, shop, duration_us, None, None)
    }

    /// [`Self::attempt_call`] for a call of `api` (its endpoint, when configured) in the
    /// class `priority` names (see [`Self::class_of`]).
    pub fn attempt_routed(
        &mut self,
        ts_ms: i64,
        shop: &[u8],
        duration_us: Option<i64>,
        api: Option<&[u8]>,
        priority: Option<&[u8]>,
    ) -> Option<Verdict> {
        if !timestamp_in_range(ts_ms) {
            return None;
        }
        let endpoint = self.endpoint_of(api);
        let (class, share_ppm) = self.class_of(api, priority);
        let verdict = self.decide(ts_ms, shop, duration_us, endpoint.as_ref(), share_ppm);
        let name = endpoint.as_ref().map(|(n, _)| n.as_str());
        Self::count_route(&mut self.by_endpoint, name, verdict);
        Self::count_route(&mut self.by_class, class.as_deref(), verdict);
        Some(verdict)
    }

    /// One decision (see [`Self::attempt_call`]) with the call's endpoint and class share.
    fn decide(
        &mut self,
        ts_ms: i64,
        shop: &[u8],
        duration_us: Option<i64>,
        endpoint: Option<&(String, BucketSpec)>,
        share_ppm: i64,
    ) -> Verdict {
        let now = ts_ms * 1000;
        // How long its lease would be held: the recorded duration, else the mean of the
        // durations read before it (the same in every scenario: they read alike).
        let hold_us = match duration_us {
            Some(d) => {
                self.durations.0 += i128::from(d);
                self.durations.1 += 1;
                Ok(d)
            }
            None if self.durations.1 > 0 => {
                Err((self.durations.0 / self.durations.1 as i128) as i64)
            }
            None => Err(0),
        };
        let lease_us = self.lease_us();
        self.global_leases.expire(now);
        self.lane_leases.expire(now);
        let static_hot = self.common.hot_shops.contains(shop);
        let st = match self.shops.get_mut(shop) {
            Some(s) => s,
            None => self.shops.entry(shop.to_vec()).or_default(),
        };
        st.leases.expire(now);
        st.calls.expire(now);
        st.counts.attempts += 1;
        self.total.attempts += 1;
        let sec = self.seconds.entry(ts_ms.div_euclid(1000)).or_default();
        sec.attempts += 1;
        let in_flight = self.scenario.in_flight;
        // The leases held now per level (global, hot lane, this shop's while hot), as the
        // store's lease sets would hold them.
        let leases = [&self.global_leases, &self.lane_leases, &st.leases].map(|l| LeaseLevel {
            held: l.held() as i64,
            oldest_expiry_us: l.earliest_end().unwrap_or(0),
        });
        let (verdict, hot, call_at) = match &self.scenario.limits {
            None => (Verdict::Admitted, static_hot, now),
            Some(set) => {
                let auto = self.common.auto_hot.as_ref();
                let mut stored = StoredState {
                    buckets: [self.global, self.lane, st.bucket],
                    endpoint: endpoint.and_then(|(n, _)| self.endpoint_buckets.get(n).copied()),
                    mark_ttl_ms: st
                        .mark_until_us
                        .filter(|&u| u > now)
                        .map(|u| (u - now) / 1000),
                    windows: Default::default(),
                    adapt: None,
                    leases,
                    ..Default::default()
                };
                if let Some(a) = auto {
                    let w = auto_hot_window(now, a.window.as_micros() as i64);
                    Self::shift(&mut self.window, &mut self.all, w);
                    Self::shift(&mut st.window, &mut st.mine, w);
                    stored.windows = [
                        WindowCounts {
                            mine: st.mine[0],
                            all: self.all[0],
                        },
                        WindowCounts {
                            mine: st.mine[1],
                            all: self.all[1],
                        },
                    ];
                }
                // One decision, the model's: the buckets, then (when they allow) a lease
                // free on every level that applies, all or nothing.
                let (reply, next) = step(
                    set,
                    &stored,
                    &StepInput {
                        static_hot,
                        auto_hot: auto,
                        max_wait_us: self.common.max_wait_us,
                        in_flight: in_flight.as_ref(),
                        endpoint: endpoint.map(|(_, spec)| spec),
                        share_ppm,
                        ..StepInput::new(now, 1)
                    },
                );
                // The model's own rule for what is stored (a denial changes what it says).
                [self.global, self.lane, st.bucket] = next.buckets;
                if let (Some((name, _)), Some(b)) = (endpoint, next.endpoint) {
                    match self.endpoint_buckets.get_mut(name) {
                        Some(slot) => *slot = b,
                        None => {
                            self.endpoint_buckets.insert(name.clone(), b);
                        }
                    }
                }
                if auto.is_some() && reply.reason.is_none() {
                    st.mine[0] = next.windows[0].mine;
                    self.all[0] = next.windows[0].all;
                }
                if reply.became_hot {
                    let ttl_ms = next.mark_ttl_ms.unwrap_or(0);
                    st.mark_until_us = Some(now + ttl_ms * 1000);
                    self.marked.insert(shop.to_vec());
                }
                match reply.reason {
                    Some(level) if reply.in_flight => {
                        st.counts.denied_in_flight[level as usize] += 1;
                        self.total.denied_in_flight[level as usize] += 1;
                        (Verdict::DeniedInFlight(level), reply.hot, now)
                    }
                    Some(_) if reply.endpoint_denied => {
                        st.counts.denied_endpoint += 1;
                        self.total.denied_endpoint += 1;
                        (Verdict::DeniedEndpoint, reply.hot, now)
                    }
                    Some(lane) => {
                        st.counts.denied[lane as usize] += 1;
                        self.total.denied[lane as usize] += 1;
                        (Verdict::Denied(lane), reply.hot, now)
                    }
                    None => {
                        let wait = reservation_wait_with(
                            set,
                            endpoint.map(|(_, spec)| spec),
                            share_ppm,
                            &reply,
                        );
                        if wait > 0 {
                            st.counts.waited += 1;
                            self.total.waited += 1;
                            self.waits.add(wait as f64 / 1000.0);
                            self.max_wait_us = self.max_wait_us.max(wait);
                        }
                        (Verdict::Admitted, reply.hot, now + wait)
                    }
                }
            }
        };
        if verdict != Verdict::Admitted {
            sec.denied += 1;
            return verdict;
        }
        // The leases: taken at the decision, released when the call ends (after a
        // reservation's wait and the call's duration), or at the lease's bound.
        let hold = match hold_us {
            Ok(d) => d,
            Err(d) => {
                self.estimated += 1;
                d
            }
        };
        let lease_end = now.saturating_add(lease_us);
        let call_end = call_at.saturating_add(hold);
        if call_end > lease_end {
            self.lease_expired += 1;
        }
        let end = call_end.min(lease_end);
        self.global_leases.take(now, end);
        st.calls.take(now, end);
        st.counts.peak_in_flight = st.calls.peak;
        if hot {
            self.lane_leases.take(now, end);
            st.leases.take(now, end);
            if st.leases.peak > self.hot_shop_peak.0 {
                self.hot_shop_peak = (st.leases.peak, shop.to_vec(), st.leases.peak_at_us);
            }
        }
        st.counts.admitted += 1;
        self.total.admitted += 1;
        sec.admitted += 1;
        if hot {
            st.counts.admitted_hot += 1;
            self.total.admitted_hot += 1;
            sec.admitted_hot += 1;
        }
        // The provider's own limit, on the admitted call as it is made (after a
        // reservation's wait): the same bucket arithmetic, one lane.
        if let Some(p) = self.common.provider {
            let set = BucketSet {
                global: p,
                hot_lane: None,
                hot_shop: None,
            };
            let stored = StoredState {
                buckets: [self.provider, None, None],
                ..Default::default()
            };
            let (reply, next) = step(&set, &stored, &StepInput::new(call_at, 1));
            if reply.reason.is_some() {
                st.counts.provider_429 += 1;
                self.total.provider_429 += 1;
                sec.provider_429 += 1;
            } else {
                self.provider = next.buckets[0];
            }
        }
        Verdict::Admitted
    }

    /// Each shop's counts, most attempts first (then by ID).
    pub fn shops(&self) -> Vec<(&[u8], &Counts)> {
        let mut v: Vec<_> = self
            .shops
            .iter()
            .map(|(k, s)| (k.as_slice(), &s.counts))
            .collect();
        v.sort_by(|a, b| b.1.attempts.cmp(&a.1.attempts).then(a.0.cmp(b.0)));
        v
    }

    /// Each shop's counts, in no order.
    pub fn shops_unordered(&self) -> impl Iterator<Item = (&[u8], &Counts)> {
        self.shops.iter().map(|(k, s)| (k.as_slice(), &s.counts))
    }

    /// `shop`'s counts (None: no attempt of it was replayed).
    pub fn shop(&self, shop: &[u8]) -> Option<&Counts> {
        self.shops.get(shop).map(|s| &s.counts)
    }

    /// The provider's limit this replay put after the limiter, if any.
    pub fn provider(&self) -> Option<&BucketSpec> {
        self.common.provider.as_ref()
    }

    /// Whether `shop` was hot at any time: listed, or marked by `auto_hot`.
    pub fn was_hot(&self, shop: &[u8]) -> bool {
        self.common.hot_shops.contains(shop) || self.marked.contains(shop)
    }

    /// The most calls admitted in one second, and that second (Unix s).
    pub fn peak_admitted(&self) -> (u64, Option<i64>) {
        self.seconds.iter().fold((0, None), |(best, at), (&s, c)| {
            if c.admitted > best {
                (c.admitted, Some(s))
            } else {
                (best, at)
            }
        })
    }

    /// Calls admitted per second over `[start_ms, end_ms)` (whole seconds).
    pub fn admitted_rate(&self, start_ms: i64, end_ms: i64) -> f64 {
        let (a, b) = (start_ms.div_euclid(1000), (end_ms - 1).div_euclid(1000));
        let n: u64 = self.seconds.range(a..=b).map(|(_, c)| c.admitted).sum();
        n as f64 / ((b - a + 1).max(1)) as f64
    }
}

/// An attempt waiting in [`Merge`]: instant, arrival (ties in order), the attempt.
type Pending = (i64, u64, Attempt);

/// Attempts from several sources (files) in time order: each source in the order it was
/// written, the sources merged, with up to `tolerance_ms` of disorder inside a source put
/// right (workers write their events in batches at the end of a request). An attempt
/// later than that is decided when it comes (counted in `late`).
pub struct Merge {
    tolerance_ms: i64,
    heap: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// The newest attempt decided.
    released: i64,
    pub late: u64,
}

impl Merge {
    pub fn new(tolerance_ms: i64) -> Self {
        Self {
            tolerance_ms,
            heap: BinaryHeap::new(),
            seq: 0,
            released: i64::MIN,
            late: 0,
        }
    }

    pub fn push(&mut self, a: Attempt) {
        if a.ts_ms < self.released {
            self.late += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse((a.ts_ms, self.seq, a)));
    }

    /// Attempts no source can still precede: those at least `tolerance_ms` older than
    /// `frontier` (the oldest newest timestamp of the sources still being read), or all
    /// when `frontier` is `None` (every source read).
    /// `f` gets each attempt.
    pub fn release(&mut self, frontier: Option<i64>, mut f: impl FnMut(&Attempt)) {
        let limit = frontier.map_or(i64::MAX, |t| t.saturating_sub(self.tolerance_ms));
        while let Some(Reverse((ts, ..))) = self.heap.peek() {
            if *ts > limit {
                break;
            }
            let Reverse((ts, _, a)) = self.heap.pop().expect("peeked");
            self.released = self.released.max(ts);
            f(&a);
        }
    }

    pub fn pending(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(limits: &str, common: Common) -> Sim {
        Sim::new(parse_limits(limits, 0).unwrap(), common)
    }

    #[test]
    fn limits_are_parsed_and_refused_with_the_bucket_named() {
        let s = parse_limits("big: global=100/50 hot_lane=80/40,hot_shop=30/15", 0).unwrap();
        assert_eq!(s.name, "big");
        let set = s.limits.unwrap();
        assert_eq!(set.global.capacity(), 100);
        assert_eq!(set.hot_lane.unwrap().capacity(), 80);
        assert_eq!(set.hot_shop.unwrap().refill_per_second(), 15.0);
        assert_eq!(parse_limits("global=1/1", 1).unwrap().name, "limits2");
        for (bad, says) in [
            ("hot_lane=1/1", "no global"),
            ("global=0/1", "global.capacity"),
            ("global=10/x", "global.refill_per_second"),
            ("global=10", "not CAPACITY/RATE"),
            ("lane=10/1 global=1/1", "not a bucket"),
            ("global=1/1 global=2/2", "twice"),
        ] {
            let e = parse_limits(bad, 0).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(parse_provider("50/x").unwrap_err().contains("rate"));
        let g = BucketSpec::new("global", 100, 100.0).unwrap();
        assert_eq!(parse_auto_hot("", &g).unwrap().share, 0.3);
        assert_eq!(
            parse_auto_hot("share=0.5,window_seconds=5", &g)
                .unwrap()
                .share,
            0.5
        );
        assert!(parse_auto_hot("share=2", &g)
            .unwrap_err()
            .contains("auto_hot.share"));
        assert!(parse_auto_hot("colour=1", &g)
            .unwrap_err()
            .contains("auto_hot.colour"));
    }

    #[test]
    fn in_flight_is_parsed_with_its_levels_and_bound() {
        let s = parse_limits(
            "global=10/10 hot_lane=5/5 hot_shop=3/3 in_flight=20//5 lease_seconds=2.5",
            0,
        )
        .unwrap();
        let f = s.in_flight.unwrap();
        assert_eq!(f.limits, [20, 0, 5]);
        assert_eq!(f.lease_us, 2_500_000);
        let f = parse_limits("global=10/10 in_flight=4", 0)
            .unwrap()
            .in_flight
            .unwrap();
        assert_eq!((f.limits, f.lease_us), ([4, 0, 0], 30_000_000));
        // The form `limiter set` and `limiter status` print: 0 for a level without a limit.
        let f = parse_limits("global=10/10 hot_shop=3/3 in_flight=3/0/1", 0)
            .unwrap()
            .in_flight
            .unwrap();
        assert_eq!(f.limits, [3, 0, 1]);
        assert!(parse_limits("global=10/10 in_flight=1000001", 0).is_err());
        assert!(parse_limits("global=10/10", 0).unwrap().in_flight.is_none());
        for (bad, says) in [
            ("global=1/1 in_flight=", "in_flight= is not N[/M/K]"),
            ("global=1/1 in_flight=-1", "in_flight=-1 is not N[/M/K]"),
            (
                "global=1/1 in_flight=1 lease_seconds=0.5",
                "in_flight.lease_seconds must be a number of seconds from 1 to 600",
            ),
            (
                "global=1/1 in_flight=1 lease_seconds=x",
                "lease_seconds=x is not",
            ),
        ] {
            let e = parse_limits(bad, 0).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn endpoints_and_classes_are_parsed_as_the_options_and_as_published() {
        let s = parse_limits(
            "ep: global=100/100 endpoint.items=25/25, endpoint.v1/charges:confirm=50/50 priorities.critical=0 priorities.normal=0.2 default_priority=normal",
            0,
        )
        .unwrap();
        assert_eq!(s.name, "ep");
        assert_eq!(s.endpoints.get("items").unwrap().capacity(), 25);
        assert_eq!(
            s.endpoints
                .get("v1/charges:confirm")
                .unwrap()
                .refill_per_second(),
            50.0
        );
        let p = s.priorities.clone().unwrap();
        assert_eq!(p.share_ppm("normal"), Some(200_000));
        assert_eq!(p.share_ppm("critical"), Some(0));
        assert_eq!(p.default_class(), Some("normal"));
        // What the workers publish (and `limiter status` shows) is taken as it is.
        let published = format!(
            "global=100/100{}",
            live::describe_routes(&s.endpoints, s.priorities.as_ref())
        );
        let again = parse_limits(&published, 0).unwrap();
        assert_eq!(again.endpoints, s.endpoints);
        assert_eq!(again.priorities, s.priorities);
        // A first part whose endpoint name holds a `:` is not a scenario's name.
        let s = parse_limits("endpoint.v1:x=5/5 global=10/10", 1).unwrap();
        assert_eq!(s.name, "limits2");
        assert!(s.endpoints.get("v1:x").is_some());
        assert!(parse_limits("global=1/1", 0).unwrap().priorities.is_none());
        for (bad, says) in [
            (
                "global=10/10 endpoint.items=20/5",
                "endpoint.items.capacity may not exceed global.capacity (10), got 20",
            ),
            (
                "global=10/10 endpoint.items=5/50",
                "endpoint.items.refill_per_second may not exceed global.refill_per_second",
            ),
            ("global=10/10 endpoint.items=0/5", "endpoint.items.capacity"),
            (
                "global=10/10 endpoint.items=5",
                "endpoint.items: \"5\" is not CAPACITY/RATE",
            ),
            ("global=10/10 endpoint.items=x/5", "endpoint.items.capacity"),
            (
                "global=10/10 endpoint.a*b=5/5",
                "\"endpoint.a*b\": the endpoint name",
            ),
            (
                "global=10/10 endpoint.=5/5",
                "the endpoint name must be 1-64",
            ),
            (
                "global=10/10 endpoint.items=5/5 endpoint.items=6/6",
                "endpoint.items given twice",
            ),
            (
                "global=10/10 priorities.normal=1",
                "priorities.normal: \"1\" is not a share",
            ),
            ("global=10/10 priorities.normal=x", "priorities.normal"),
            (
                "global=10/10 priorities.normal=0.2 default_priority=urgent",
                "default_priority must be one of the priorities (normal), got \"urgent\"",
            ),
            (
                "global=10/10 default_priority=normal",
                "default_priority needs the priorities option",
            ),
            (
                "global=10/10 priorities.a=0 priorities.a=0.1",
                "priorities.a given twice",
            ),
            ("endpoint.items=5/5", "no global"),
            ("global=10/10 colour=1/1", "not a bucket"),
        ] {
            let e = parse_limits(bad, 0).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let scenarios = [parse_limits("global=1/1 priorities.normal=0.2", 0).unwrap()];
        let m = parse_priority_map(&["items=normal".into()], &scenarios).unwrap();
        assert_eq!(m[&b"items"[..]], "normal");
        for (items, says) in [
            (
                vec!["items=urgent"],
                "\"urgent\" is not a class of --limits limits (normal)",
            ),
            (vec!["items"], "is not API=CLASS"),
            (vec!["a=normal", "a=normal"], "given twice"),
        ] {
            let items: Vec<String> = items.into_iter().map(String::from).collect();
            let e = parse_priority_map(&items, &scenarios).unwrap_err();
            assert!(e.contains(says), "{items:?}: {e}");
        }
        let plain = [parse_limits("global=1/1", 0).unwrap()];
        assert!(parse_priority_map(&["a=b".into()], &plain)
            .unwrap_err()
            .contains("needs classes"));
    }

    /// Frozen rates (1 token per 1000 s): every count is the buckets' capacity. global 10,
    /// items 3, charges 10. Five items calls: 3 admitted, 2 denied by items (taking nothing
    /// from global: 7 left); eight charges calls: 7 admitted, the 8th denied by global
    /// (charges still holds 3); one items call: denied by global (checked first though
    /// items is empty too); two calls of api `tax`, no endpoint: denied by global.
    #[test]
    fn an_endpoint_binds_all_or_nothing_under_global() {
        let mut s = sim(
            "global=10/0.001 endpoint.items=3/0.001 endpoint.charges=10/0.001",
            Common::default(),
        );
        let mut t = 1_000_000;
        let mut call = |s: &mut Sim, api: &str| {
            t += 1;
            s.attempt_routed(t, b"a", Some(1_000), Some(api.as_bytes()), None)
                .unwrap()
        };
        let v: Vec<Verdict> = (0..5).map(|_| call(&mut s, "items")).collect();
        assert_eq!(
            v,
            [
                Verdict::Admitted,
                Verdict::Admitted,
                Verdict::Admitted,
                Verdict::DeniedEndpoint,
                Verdict::DeniedEndpoint
            ]
        );
        let admitted = (0..8)
            .filter(|_| call(&mut s, "charges") == Verdict::Admitted)
            .count();
        assert_eq!(admitted, 7);
        assert_eq!(call(&mut s, "items"), Verdict::Denied(Lane::Global));
        assert_eq!(call(&mut s, "tax"), Verdict::Denied(Lane::Global));
        assert_eq!(call(&mut s, "tax"), Verdict::Denied(Lane::Global));
        assert_eq!(s.total.admitted, 10);
        assert_eq!(s.total.denied_endpoint, 2);
        assert_eq!(s.total.denied, [4, 0, 0]);
        assert_eq!(s.total.denied_total(), 6);
        let rc = |attempts, admitted, denied, denied_endpoint| RouteCounts {
            attempts,
            admitted,
            denied,
            denied_endpoint,
        };
        assert_eq!(s.by_endpoint["items"], rc(6, 3, 3, 2));
        assert_eq!(s.by_endpoint["charges"], rc(8, 7, 1, 0));
        assert_eq!(s.by_endpoint[NO_ROUTE], rc(2, 0, 2, 0));
        assert_eq!(s.unrouted.get("tax"), Some(&2));
        assert_eq!(s.unrouted_total(), 2);
        assert_eq!(s.by_class[NO_ROUTE], rc(16, 10, 6, 2));
        assert_eq!(s.shop(b"a").unwrap().denied_endpoint, 2);
        // Without endpoints the same calls are global's alone: 10 admitted, none unrouted.
        let mut p = sim("global=10/0.001", Common::default());
        for i in 0..16 {
            p.attempt_routed(1_000 + i, b"a", None, Some(b"items"), None);
        }
        assert_eq!((p.total.admitted, p.total.denied), (10, [6, 0, 0]));
        assert!(p.unrouted.is_empty());
    }

    /// Frozen rates, global 10, items 5; classes critical 0, normal 0.2 (the default),
    /// background 0.5. Background may leave no less than 5 of global: 5 of 7 admitted;
    /// normal no less than 2: 3 of 5 (and a call naming a class not configured is normal:
    /// denied); critical takes the rest: 2 of 3. On items (5), background leaves 2.5: 2
    /// admitted, the 3rd denied by the endpoint; `--priority items=critical` makes a call
    /// of items naming no class critical.
    #[test]
    fn a_class_keeps_its_reserve_of_every_bucket() {
        let limits = "global=10/0.001 endpoint.items=5/0.001 priorities.critical=0 priorities.normal=0.2 priorities.background=0.5 default_priority=normal";
        let mut s = sim(limits, Common::default());
        let mut t = 2_000_000;
        let mut call = |s: &mut Sim, class: Option<&str>| {
            t += 1;
            s.attempt_routed(t, b"a", None, Some(b"zoneA"), class.map(str::as_bytes))
                .unwrap()
        };
        let n = |s: &mut Sim,
                 k: usize,
                 class: Option<&str>,
                 call: &mut dyn FnMut(&mut Sim, Option<&str>) -> Verdict| {
            (0..k)
                .filter(|_| call(s, class) == Verdict::Admitted)
                .count()
        };
        assert_eq!(n(&mut s, 7, Some("background"), &mut call), 5);
        assert_eq!(n(&mut s, 5, None, &mut call), 3);
        assert_eq!(call(&mut s, Some("urgent")), Verdict::Denied(Lane::Global));
        assert_eq!(n(&mut s, 3, Some("critical"), &mut call), 2);
        assert_eq!(s.total.admitted, 10);
        let rc = |attempts, admitted, denied| RouteCounts {
            attempts,
            admitted,
            denied,
            denied_endpoint: 0,
        };
        assert_eq!(s.by_class["background"], rc(7, 5, 2));
        assert_eq!(s.by_class["normal"], rc(6, 3, 3));
        assert_eq!(s.by_class["critical"], rc(3, 2, 1));
        assert_eq!(s.unrouted.get("zoneA"), Some(&16));
        // The endpoint's reserve: items holds 5, background leaves 2.5 of it.
        let common = Common {
            priority_by_api: [(b"items".to_vec(), "critical".to_string())]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let mut s = sim(limits, common);
        let v: Vec<Verdict> = (0..3)
            .map(|i| {
                s.attempt_routed(3_000 + i, b"b", None, Some(b"items"), Some(b"background"))
                    .unwrap()
            })
            .collect();
        assert_eq!(
            v,
            [
                Verdict::Admitted,
                Verdict::Admitted,
                Verdict::DeniedEndpoint
            ]
        );
        // Naming no class, items' calls are critical (--priority): the 3 tokens left.
        let admitted = (0..4)
            .filter(|i| {
                s.attempt_routed(3_010 + i, b"b", None, Some(b"items"), None)
                    == Some(Verdict::Admitted)
            })
            .count();
        assert_eq!(admitted, 3);
        assert_eq!(s.by_class["critical"].admitted, 3);
        assert_eq!(s.by_endpoint["items"].denied_endpoint, 2);
    }

    /// A call the buckets admit but the leases deny takes no tokens, so it counts nothing
    /// towards `auto_hot` and marks nothing (the model marks only an allowed decision).
    #[test]
    fn an_in_flight_denial_marks_no_shop_hot() {
        let set = parse_limits("global=1000/1000 hot_shop=100/100 in_flight=1", 0).unwrap();
        let global = set.limits.as_ref().unwrap().global;
        let auto = parse_auto_hot("window_seconds=1,share=0.5,min_tokens=2", &global).unwrap();
        let common = Common {
            auto_hot: Some(auto),
            ..Default::default()
        };
        let mut s = Sim::new(set, common);
        // Its first call holds the lease 10 s; its second (2 tokens of 2: hot if taken) is
        // denied by the lease.
        assert_eq!(
            s.attempt_call(1_000_000, b"f", Some(10_000_000)),
            Some(Verdict::Admitted)
        );
        assert_eq!(
            s.attempt_call(1_000_001, b"f", Some(1_000)),
            Some(Verdict::DeniedInFlight(Lane::Global))
        );
        assert!(!s.was_hot(b"f"));
        // Its lease ends 10 s later: admitted then, in another window (one token).
        assert_eq!(
            s.attempt_call(1_010_000, b"f", Some(1_000)),
            Some(Verdict::Admitted)
        );
        assert!(s.marked.is_empty());
    }

    /// A burst at one instant: the global bucket's capacity admitted, the rest denied by
    /// global; a listed hot shop stops at its own bucket first.
    #[test]
    fn a_burst_is_admitted_up_to_the_capacity_of_the_buckets_that_apply() {
        let mut s = sim("global=10/10", Common::default());
        for _ in 0..15 {
            s.attempt(1_000, b"a");
        }
        assert_eq!((s.total.admitted, s.total.denied), (10, [5, 0, 0]));
        let common = Common {
            hot_shops: [b"h".to_vec()].into_iter().collect(),
            ..Default::default()
        };
        let mut s = sim("global=10/10 hot_lane=8/8 hot_shop=4/4", common);
        for _ in 0..6 {
            s.attempt(1_000, b"h");
        }
        for _ in 0..8 {
            s.attempt(1_000, b"o");
        }
        let shops: HashMap<_, _> = s.shops().into_iter().collect();
        assert_eq!(shops[&b"h"[..]].admitted, 4);
        assert_eq!(shops[&b"h"[..]].denied, [0, 0, 2]);
        assert_eq!(shops[&b"h"[..]].admitted_hot, 4);
        // The hot shop took 4 of global's 10: 6 left for the others.
        assert_eq!(shops[&b"o"[..]].admitted, 6);
        assert_eq!(shops[&b"o"[..]].denied, [2, 0, 0]);
    }

    /// Refill: one call every 50 ms at 10/s from an empty bucket admits every other call.
    #[test]
    fn the_buckets_refill_at_their_rate_on_the_recorded_clock() {
        let mut s = sim("global=1/10", Common::default());
        for i in 0..100 {
            s.attempt(1_000 + i * 50, b"a");
        }
        assert_eq!(s.total.admitted, 50);
        assert_eq!(s.peak_admitted().0, 10);
        assert_eq!(s.admitted_rate(1_000, 6_000), 10.0);
    }

    /// Without limits every attempt is admitted; the provider's bucket predicts the 429s.
    #[test]
    fn the_provider_answers_429_past_its_own_bucket() {
        let scenario = Scenario {
            name: "none".into(),
            text: String::new(),
            limits: None,
            in_flight: None,
            ..Default::default()
        };
        let common = Common {
            provider: Some(parse_provider("5/5").unwrap()),
            ..Default::default()
        };
        let mut s = Sim::new(scenario, common);
        for i in 0..40 {
            // 20/s for 1.95 s against 5/s with a burst of 5: 5, then one per 200 ms (9).
            s.attempt(10_000 + i * 50, b"a");
        }
        assert_eq!(s.total.admitted, 40);
        assert_eq!(s.total.provider_429, 40 - 14);
    }

    /// `auto_hot`: a shop that takes most of the global bucket becomes hot and then finds
    /// the hot buckets' room only.
    #[test]
    fn auto_hot_marks_the_flooding_shop_and_the_hot_buckets_then_apply() {
        let set = BucketSet {
            global: BucketSpec::new("global", 100, 100.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(BucketSpec::new("hot_shop", 10, 10.0).unwrap()),
        };
        let auto = parse_auto_hot("window_seconds=1,share=0.5,min_tokens=20", &set.global).unwrap();
        let common = Common {
            auto_hot: Some(auto),
            ..Default::default()
        };
        let scenario = Scenario {
            name: "auto".into(),
            text: String::new(),
            limits: Some(set),
            in_flight: None,
            ..Default::default()
        };
        let mut s = Sim::new(scenario, common);
        // 10 s: the flooder at 200/s, two ordinary shops at 5/s each.
        for ms in (0..10_000).step_by(5) {
            s.attempt(1_000_000 + ms, b"flood");
            if ms % 200 == 0 {
                s.attempt(1_000_000 + ms, b"x");
                s.attempt(1_000_000 + ms, b"y");
            }
        }
        assert!(s.was_hot(b"flood") && !s.was_hot(b"x"));
        let shops: HashMap<_, _> = s.shops().into_iter().collect();
        let f = shops[&b"flood"[..]];
        // Hot: at most the hot shop bucket's 10/s (+ its capacity, + what it took before
        // it was marked); every ordinary call admitted.
        assert!(f.admitted < 10 * 10 + 10 + 100 + 40, "{f:?}");
        assert!(f.denied[2] > 0, "{f:?}");
        assert_eq!(shops[&b"x"[..]].admitted, 50);
        assert_eq!(shops[&b"y"[..]].admitted, 50);
    }

    /// A reservation waits for the tokens instead of being denied, within its bound.
    #[test]
    fn reservations_wait_instead_of_being_denied() {
        let common = Common {
            max_wait_us: 500_000,
            ..Default::default()
        };
        let mut s = sim("global=1/10", common);
        for _ in 0..5 {
            s.attempt(1_000, b"a");
        }
        // One at once, then 100 ms apart: within 500 ms, four more.
        assert_eq!(s.total.admitted, 5);
        assert_eq!(s.total.waited, 4);
        assert_eq!(s.max_wait_us, 400_000);
        for _ in 0..10 {
            s.attempt(1_000, b"a");
        }
        assert!(s.total.denied[0] > 0);
    }

    /// The merge releases in time order across sources, and puts a little disorder right.
    #[test]
    fn the_merge_puts_sources_and_disorder_in_time_order() {
        let mut m = Merge::new(100);
        let mut out = Vec::new();
        for (ts, shop) in [(1_000, "a"), (950, "b"), (1_200, "c")] {
            m.push(Attempt {
                ts_ms: ts,
                shop: shop.as_bytes().to_vec(),
                ..Default::default()
            });
        }
        m.release(Some(1_200), |a| out.push((a.ts_ms, a.shop.clone())));
        assert_eq!(out, vec![(950, b"b".to_vec()), (1_000, b"a".to_vec())]);
        m.push(Attempt {
            ts_ms: 900,
            shop: b"late".to_vec(),
            duration_us: Some(5),
            ..Default::default()
        });
        assert_eq!(m.late, 1);
        m.release(None, |a| out.push((a.ts_ms, a.shop.clone())));
        assert_eq!(out.len(), 4);
        assert_eq!(m.pending(), 0);
    }
}
