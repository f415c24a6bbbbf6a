//! `checkout-guard replay`: recorded attempts at one API decided again under candidate
//! limits (the library's [`checkout_guard_cli::replay`]), read from every file at once (a
//! thread per file, merged in time order), printed per shop side by side, as JSON, or as
//! one self-contained HTML page.

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::io::{BufWriter, Write as _};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use checkout_guard_cli::replay::{
    duration_us, parse_auto_hot, parse_limits, parse_priority_map, parse_provider,
    timestamp_in_range, Attempt, Common, Counts, Interned, Merge, RouteCounts, Scenario, Sim,
    NO_ROUTE,
};
use checkout_guard_cli::scan::{
    parse_line, Accumulator, BadLine, Filter, ScanConfig, Window, DISORDER_TOLERANCE_MS,
    EXTERNAL_API_CALL, RATE_LIMIT_DECISION,
};
use checkout_guard_cli::shop_id;
use checkout_guard_config::validate_max_wait;
use checkout_guard_model::{BucketSpec, Lane, Reason};
use clap::Args;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::json;

use super::report::{bucket_ms, bucket_text, bucketed, chart, esc, Series, COLORS};
use crate::input::{feed_path, LineSink};
use crate::out::out;
use crate::time::{self, format_clock};

#[derive(Args)]
pub struct ReplayArgs {
    /// JSONL event files (gzip is detected); `-` reads stdin.
    #[arg(required = true)]
    files: Vec<String>,
    /// The API whose calls are replayed (each `ExternalApiCall` of it is one attempt);
    /// repeatable: the apis one limiter guards, each decided with the bucket of the
    /// endpoint of its name (`endpoint.NAME=C/R` in --limits) when there is one.
    #[arg(long, required = true)]
    api: Vec<String>,
    /// Whose denials (`RateLimitDecision`, allowed false) are attempts too; may be left
    /// out when the files hold one limiter's decisions.
    #[arg(long)]
    limiter: Option<String>,
    /// Candidate limits, `[name:]global=C/R [hot_lane=C/R] [hot_shop=C/R]
    /// [in_flight=N[/M/K]] [lease_seconds=S]` (C capacity, R refill per second; N, M, K
    /// calls in flight at once: globally, in the hot lane, per hot shop; S a lease's
    /// bound, default 30); repeatable, compared side by side. Left out: no limiter.
    /// With endpoints and classes: `endpoint.NAME=C/R` (a recorded call's endpoint is its
    /// api), `priorities.CLASS=SHARE`, `default_priority=CLASS`, as `limiter status` and
    /// the published settings show them.
    #[arg(long = "limits")]
    limits: Vec<String>,
    /// `API=CLASS`: the class of a call of that api whose event names no `priority`
    /// (else `default_priority`); repeatable.
    #[arg(long = "priority")]
    priority: Vec<String>,
    /// A shop that is always hot (the `hot_shops` option); repeatable. As `limiter status`
    /// shows it (`\\`, `\xHH`).
    #[arg(long = "hot")]
    hot: Vec<String>,
    /// `auto_hot` on: the option's defaults, or its fields
    /// (`window_seconds=10,share=0.3,ttl_seconds=300,min_tokens=20`).
    #[arg(long = "auto-hot", num_args = 0..=1, default_missing_value = "")]
    auto_hot: Option<String>,
    /// Reservations: each attempt waits up to this many seconds for its tokens
    /// (acquire()'s maxWaitSeconds).
    #[arg(long = "max-wait", allow_negative_numbers = true)]
    max_wait: Option<f64>,
    /// The provider's own limit, CAPACITY/RATE, as a token bucket: how many admitted
    /// calls it would have answered 429.
    #[arg(long)]
    provider: Option<String>,
    /// From this time (Unix ms or YYYY-MM-DDTHH:MM:SS[.mmm]Z), inclusive.
    #[arg(long, value_parser = time::parse_time)]
    from: Option<i64>,
    /// Up to this time (Unix ms or YYYY-MM-DDTHH:MM:SS[.mmm]Z), exclusive.
    #[arg(long, value_parser = time::parse_time)]
    to: Option<i64>,
    /// The high-load windows' threshold: the API's calls per second (as `scan
    /// --fine-threshold`).
    #[arg(long, default_value_t = 50.0)]
    fine_threshold: f64,
    /// JSON output.
    #[arg(long)]
    json: bool,
    /// Also write a self-contained HTML page (charts per second) to this file.
    #[arg(long)]
    output: Option<String>,
    /// Per-shop rows printed (most attempts first; --json has every shop).
    #[arg(long, default_value_t = 20)]
    top: usize,
}

/// Attempts sent from a file's reader to the merge, this many at a time.
const BATCH: usize = 4096;

/// One file's reader: every line to the scan (the windows, the malformed lines), the
/// attempts to the merge.
struct Source<'a> {
    acc: Accumulator,
    apis: &'a [String],
    limiter: Option<&'a [u8]>,
    from: Option<i64>,
    to: Option<i64>,
    batch: Vec<Attempt>,
    tx: SyncSender<Vec<Attempt>>,
    limiters: BTreeSet<String>,
    /// The limiters of every decision read (any time, allowed or not; at most
    /// [`LISTED_LIMITERS`]): what a `--limiter` no event carries is told.
    decision_limiters: BTreeSet<String>,
    /// Attempts whose timestamp no clock gives (see `timestamp_in_range`): skipped.
    out_of_range: u64,
    /// The apis' and classes' shared copies.
    interned: Interned,
}

/// How many limiter names `decision_limiters` keeps.
const LISTED_LIMITERS: usize = 50;

impl LineSink for Source<'_> {
    fn line(&mut self, source: &str, n: u64, line: &[u8]) {
        self.acc.line(source, n, line);
        let Ok(r) = parse_line(line) else { return };
        let Some(ts) = r.timestamp_ms else { return };
        if r.event_type.as_deref() == Some(RATE_LIMIT_DECISION)
            && self.decision_limiters.len() < LISTED_LIMITERS
        {
            let name = r.limiter.as_deref().unwrap_or(b"");
            if !self.decision_limiters.iter().any(|l| l.as_bytes() == name) {
                self.decision_limiters
                    .insert(String::from_utf8_lossy(name).into_owned());
            }
        }
        if self.from.is_some_and(|f| ts < f) || self.to.is_some_and(|t| ts >= t) {
            return;
        }
        let is_api =
            |a: Option<&[u8]>| a.is_some_and(|a| self.apis.iter().any(|x| x.as_bytes() == a));
        let attempt = match r.event_type.as_deref() {
            Some(EXTERNAL_API_CALL) => is_api(r.api.as_deref()),
            // A denial: an attempt whose call was not made. A shadow decision (allowed
            // true) made its call, counted as its ExternalApiCall. A denial naming an
            // endpoint that is not one of the apis is another api's.
            Some(RATE_LIMIT_DECISION)
                if r.allowed == Some(false)
                    && (r.endpoint.is_none() || is_api(r.endpoint.as_deref())) =>
            {
                let name = r.limiter.as_deref().unwrap_or(b"");
                if let Some(want) = self.limiter {
                    name == want
                } else {
                    if !self.limiters.iter().any(|l| l.as_bytes() == name) {
                        self.limiters
                            .insert(String::from_utf8_lossy(name).into_owned());
                    }
                    true
                }
            }
            _ => false,
        };
        if attempt && !timestamp_in_range(ts) {
            self.out_of_range += 1;
        } else if attempt {
            // A call's duration (its lease's); a denial's call was not made: unknown.
            let (duration, api) = match r.event_type.as_deref() {
                Some(EXTERNAL_API_CALL) => (duration_us(r.duration_ms()), r.api.as_deref()),
                _ => (None, r.endpoint.as_deref()),
            };
            self.batch.push(Attempt {
                ts_ms: ts,
                shop: r.shop.as_deref().unwrap_or(b"").to_vec(),
                duration_us: duration,
                api: api.map(|a| self.interned.get(a)),
                priority: r.priority.as_deref().map(|p| self.interned.get(p)),
            });
            if self.batch.len() >= BATCH {
                let _ = self.tx.send(std::mem::take(&mut self.batch));
            }
        }
    }

    fn too_long(&mut self, source: &str, n: u64, bytes: u64) {
        self.acc.too_long(source, n, bytes);
    }
}

struct Read {
    acc: Accumulator,
    limiters: BTreeSet<String>,
    decision_limiters: BTreeSet<String>,
    late: u64,
    out_of_range: u64,
}

/// Reads every file at once and feeds their attempts, in time order, to every scenario.
fn read(args: &ReplayArgs, sims: &mut [Sim]) -> Result<Read, String> {
    let filter = Filter {
        event_types: Vec::new(),
        apis: args.api.clone(),
        shops: Vec::new(),
        from_ms: args.from,
        to_ms: args.to,
    };
    let limiter = args.limiter.as_deref().map(str::as_bytes);
    std::thread::scope(|scope| {
        let mut receivers: Vec<Receiver<Vec<Attempt>>> = Vec::new();
        let mut handles = Vec::new();
        for path in &args.files {
            let (tx, rx) = sync_channel(4);
            receivers.push(rx);
            let filter = filter.clone();
            handles.push(scope.spawn(move || {
                let mut s = Source {
                    acc: Accumulator::new(filter, 1000),
                    apis: &args.api,
                    limiter,
                    from: args.from,
                    to: args.to,
                    batch: Vec::new(),
                    tx,
                    limiters: BTreeSet::new(),
                    decision_limiters: BTreeSet::new(),
                    out_of_range: 0,
                    interned: Interned::default(),
                };
                let res = feed_path(path, &mut s);
                if !s.batch.is_empty() {
                    let _ = s.tx.send(std::mem::take(&mut s.batch));
                }
                res.map(|_| (s.acc, s.limiters, s.decision_limiters, s.out_of_range))
            }));
        }
        // The k-way merge: read from the source that is furthest behind; release what no
        // source can still precede (DISORDER_TOLERANCE_MS, as the scan tolerates).
        let mut merge = Merge::new(DISORDER_TOLERANCE_MS);
        let mut last: Vec<Option<i64>> = vec![Some(i64::MIN); receivers.len()];
        loop {
            let next = last
                .iter()
                .enumerate()
                .filter_map(|(i, t)| t.map(|t| (t, i)))
                .min();
            let Some((_, i)) = next else { break };
            match receivers[i].recv() {
                Ok(batch) => {
                    let newest = batch.iter().map(|a| a.ts_ms).max();
                    last[i] = Some(last[i].unwrap_or(i64::MIN).max(newest.unwrap_or(i64::MIN)));
                    for a in batch {
                        merge.push(a);
                    }
                }
                Err(_) => last[i] = None,
            }
            let frontier = last.iter().flatten().min().copied();
            merge.release(frontier, |a| decide(sims, a));
        }
        merge.release(None, |a| decide(sims, a));
        let mut acc: Option<Accumulator> = None;
        let mut limiters = BTreeSet::new();
        let mut decision_limiters = BTreeSet::new();
        let mut out_of_range = 0;
        for h in handles {
            let (a, l, d, o) = h
                .join()
                .map_err(|_| "a file's reader failed".to_string())?
                .map_err(|e| e.to_string())?;
            limiters.extend(l);
            decision_limiters.extend(d);
            out_of_range += o;
            match &mut acc {
                Some(all) => all.merge(a, 0),
                None => acc = Some(a),
            }
        }
        Ok(Read {
            acc: acc.expect("at least one file"),
            limiters,
            decision_limiters,
            late: merge.late,
            out_of_range,
        })
    })
}

/// One attempt decided in every scenario.
fn decide(sims: &mut [Sim], a: &Attempt) {
    for s in sims.iter_mut() {
        s.attempt_routed(
            a.ts_ms,
            &a.shop,
            a.duration_us,
            a.api.as_deref(),
            a.priority.as_deref(),
        );
    }
}

fn scenarios(args: &ReplayArgs) -> Result<Vec<Sim>, String> {
    let mut list = Vec::new();
    for (i, l) in args.limits.iter().enumerate() {
        list.push(parse_limits(l, i)?);
    }
    let names: HashSet<&str> = list.iter().map(|s| s.name.as_str()).collect();
    if names.len() < list.len() {
        return Err("two --limits have the same name: name them apart (NAME:global=...)".into());
    }
    if list.is_empty() {
        if args.auto_hot.is_some() || !args.hot.is_empty() || args.max_wait.is_some() {
            return Err("--hot, --auto-hot and --max-wait need --limits".into());
        }
        if !args.priority.is_empty() {
            return Err("--priority needs --limits with priorities.CLASS=SHARE".into());
        }
        list.push(Scenario {
            name: "no limiter".into(),
            ..Default::default()
        });
    }
    let priority_by_api = parse_priority_map(&args.priority, &list)?;
    let mut hot_shops = HashSet::new();
    for h in &args.hot {
        hot_shops.insert(shop_id::unescape(h.as_bytes()).map_err(|e| format!("--hot {h:?}: {e}"))?);
    }
    let max_wait_us = match args.max_wait {
        Some(s) => validate_max_wait(s).map_err(|e| format!("--max-wait: {}", e.message))?,
        None => 0,
    };
    let provider = args.provider.as_deref().map(parse_provider).transpose()?;
    list.into_iter()
        .map(|s| {
            let auto_hot = match (&args.auto_hot, &s.limits) {
                (Some(text), Some(set)) => Some(parse_auto_hot(text, &set.global)?),
                _ => None,
            };
            let common = Common {
                hot_shops: hot_shops.clone(),
                auto_hot,
                max_wait_us,
                provider,
                priority_by_api: priority_by_api.clone(),
            };
            Ok(Sim::new(s, common))
        })
        .collect()
}

pub fn run(args: ReplayArgs) -> Result<(), String> {
    // One reader per file, all at once: a file given twice would count twice, and `-`
    // twice would have two readers wait on one stdin (a hang).
    let mut seen = HashSet::new();
    for f in &args.files {
        if !seen.insert(f.as_str()) {
            return Err(format!("{f:?} is given twice: each file is read once"));
        }
    }
    let cfg = ScanConfig {
        fine_threshold: args.fine_threshold,
        ..ScanConfig::default()
    };
    cfg.validate()?;
    let mut sims = scenarios(&args)?;
    let read = read(&args, &mut sims)?;
    if args.limiter.is_none() && read.limiters.len() > 1 {
        let names: Vec<&str> = read.limiters.iter().map(String::as_str).collect();
        return Err(format!(
            "the files hold denials of {} limiters ({}): say whose count with --limiter NAME",
            names.len(),
            names.join(", ")
        ));
    }
    matched_something(&args, &read.acc)?;
    known_limiter(&args, &read)?;
    let windows = read.acc.scan(&cfg).windows;
    // The answer first: an --output that cannot be written loses nothing of it.
    if args.json {
        write_json(&args, &sims, &read, &windows)?;
    } else {
        out!("{}", text(&args, &sims, &read, &windows));
    }
    if let Some(path) = &args.output {
        let page = html(&args, &sims, &windows, sims[0].provider());
        std::fs::write(path, page).map_err(|e| format!("--output {path}: {e}"))?;
        eprintln!("checkout-guard: wrote {path}");
    }
    Ok(())
}

/// A replay of an api no `ExternalApiCall` of the files has (a typo, `payments` for
/// `payment`), or of a time range with no event, would decide the limiter's denials alone
/// as attempts: refused (exit 2, nothing printed), naming what the files hold.
fn matched_something(args: &ReplayArgs, acc: &Accumulator) -> Result<(), String> {
    let range = time::files_range(acc.first_ms, acc.last_ms);
    if acc.in_time == 0 && (args.from.is_some() || args.to.is_some()) {
        return Err(format!(
            "--from/--to matched no event: {range}; nothing replayed"
        ));
    }
    if acc.counted == 0 {
        return Err(format!(
            "--api {} matched no ExternalApiCall event{}: the apis in the files: {}; nothing replayed",
            args.api.join(" --api "),
            if args.from.is_some() || args.to.is_some() {
                " in --from/--to"
            } else {
                ""
            },
            acc.apis_text()
        ));
    }
    Ok(())
}

/// A `--limiter` no decision of the files carries (a typo, `paymnts` for `payments`)
/// would leave that limiter's denials out of the attempts without a word: refused (exit
/// 2, nothing printed), naming the limiters the files hold, as `--api` is. Files without
/// any decision lose nothing to it: taken.
fn known_limiter(args: &ReplayArgs, read: &Read) -> Result<(), String> {
    let Some(want) = &args.limiter else {
        return Ok(());
    };
    let names = &read.decision_limiters;
    if names.is_empty() || names.contains(want) {
        return Ok(());
    }
    let mut listed = names
        .iter()
        .map(|n| if n.is_empty() { "(none)" } else { n.as_str() })
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() >= LISTED_LIMITERS {
        listed.push_str(", ...");
    }
    Err(format!(
        "--limiter {want} matched no RateLimitDecision event: the limiters in the files: {listed}; nothing replayed"
    ))
}

/// `--json`, written as it goes: every object's keys in order (what a `serde_json::Value`
/// printed when the answer was built as one, 5.5 KB per shop held at once), the first
/// scenario's `totals`, `shops`, `windows` and `provider_429` at the top (the common case,
/// one `--limits`), every scenario under `scenarios`. What is held: one sorted list of
/// the shops' escaped IDs per map written.
struct JsonOut<'a> {
    args: &'a ReplayArgs,
    sims: &'a [Sim],
    read: &'a Read,
    windows: &'a [Window],
}

impl<'a> Serialize for JsonOut<'a> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let (args, read, first, windows) = (self.args, self.read, &self.sims[0], self.windows);
        let limiter = args
            .limiter
            .as_deref()
            .or_else(|| read.limiters.iter().next().map(String::as_str));
        let mut m = ser.serialize_map(None)?;
        // One api: its name (as before `--api` was repeatable); several: comma-separated.
        m.serialize_entry("api", &args.api.join(","))?;
        m.serialize_entry("apis", &args.api)?;
        m.serialize_entry("classes", &RoutesJson(&first.by_class))?;
        m.serialize_entry("endpoints", &RoutesJson(&first.by_endpoint))?;
        m.serialize_entry("from_ms", &args.from)?;
        m.serialize_entry("input", &InputJson { read, first })?;
        m.serialize_entry("limiter", &limiter)?;
        m.serialize_entry("provider", &args.provider)?;
        m.serialize_entry("provider_429", &first.total.provider_429)?;
        m.serialize_entry(
            "scenarios",
            &Each(self.sims, move |s: &'a Sim| ScenarioJson(s, windows)),
        )?;
        m.serialize_entry("shops", &ShopsJson(first))?;
        m.serialize_entry("to_ms", &args.to)?;
        m.serialize_entry("totals", &TotalsJson(first))?;
        m.serialize_entry("unrouted", &UnroutedJson(first))?;
        m.serialize_entry("windows", &WindowsJson(first, windows))?;
        m.end()
    }
}

/// Counts per endpoint or per class, by name ([`NO_ROUTE`]: none).
struct RoutesJson<'a>(&'a std::collections::BTreeMap<String, RouteCounts>);

impl Serialize for RoutesJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_map(self.0.iter().map(|(k, c)| {
            (
                k,
                json!({
                    "admitted": c.admitted,
                    "attempts": c.attempts,
                    "denied": c.denied,
                    "denied_by_endpoint": c.denied_endpoint,
                }),
            )
        }))
    }
}

/// The calls of apis without an endpoint bucket (the scenario has endpoints).
struct UnroutedJson<'a>(&'a Sim);

impl Serialize for UnroutedJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("apis", &self.0.unrouted)?;
        m.serialize_entry("calls", &self.0.unrouted_total())?;
        m.end()
    }
}

/// A JSON array of `f` of each item, made as it is written.
struct Each<'a, T, J, F: Fn(&'a T) -> J>(&'a [T], F);

impl<'a, T, J: Serialize, F: Fn(&'a T) -> J> Serialize for Each<'a, T, J, F> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        ser.collect_seq(self.0.iter().map(&self.1))
    }
}

struct InputJson<'a> {
    read: &'a Read,
    first: &'a Sim,
}

impl Serialize for InputJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let r = self.read;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("attempts", &self.first.total.attempts)?;
        m.serialize_entry(
            "bad_lines",
            &Each(
                &r.acc.bad_lines,
                |b: &BadLine| json!({ "file": b.source, "line": b.line, "what": b.what }),
            ),
        )?;
        m.serialize_entry("late", &r.late)?;
        m.serialize_entry("lines", &r.acc.events)?;
        m.serialize_entry("malformed", &r.acc.malformed)?;
        m.serialize_entry("missing_timestamp", &r.acc.missing_timestamp)?;
        m.serialize_entry("out_of_range", &r.out_of_range)?;
        m.end()
    }
}

/// In-flight denials by level, the levels by name (global, hot_lane, hot_shop).
fn levels_json<T: Serialize>(v: [T; 3]) -> serde_json::Value {
    let [g, l, s] = v;
    json!({ "global": g, "hot_lane": l, "hot_shop": s })
}

/// Denials by bucket: the lanes by name, and `endpoint` (the call's endpoint's bucket).
struct DeniedJson<'a>(&'a Counts);

impl Serialize for DeniedJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut lanes = Lane::ALL;
        lanes.sort_by_key(|l| l.as_str());
        let c = self.0;
        ser.collect_map(
            std::iter::once(("endpoint", c.denied_endpoint))
                .chain(lanes.iter().map(|&l| (l.as_str(), c.denied[l as usize]))),
        )
    }
}

struct ScenarioJson<'a>(&'a Sim, &'a [Window]);

impl Serialize for ScenarioJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("classes", &RoutesJson(&s.by_class))?;
        m.serialize_entry("endpoints", &RoutesJson(&s.by_endpoint))?;
        m.serialize_entry("limits", &s.scenario.text)?;
        m.serialize_entry("name", &s.scenario.name)?;
        m.serialize_entry("shops", &ShopsJson(s))?;
        m.serialize_entry("totals", &TotalsJson(s))?;
        m.serialize_entry("unrouted", &UnroutedJson(s))?;
        m.serialize_entry("windows", &WindowsJson(s, self.1))?;
        m.end()
    }
}

struct TotalsJson<'a>(&'a Sim);

impl Serialize for TotalsJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let t = &s.total;
        let (peak, at) = s.peak_admitted();
        let pct = |p: f64| s.waits.percentile(p).map(|ms| ms / 1000.0);
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("admitted", &t.admitted)?;
        m.serialize_entry("admitted_hot", &t.admitted_hot)?;
        m.serialize_entry("attempts", &t.attempts)?;
        m.serialize_entry("denied", &DeniedJson(t))?;
        m.serialize_entry("denied_in_flight", &levels_json(t.denied_in_flight))?;
        m.serialize_entry("denied_total", &t.denied_total())?;
        let peaks = s.peaks_in_flight();
        let f = s.scenario.in_flight;
        m.serialize_entry(
            "in_flight",
            &json!({
                "estimated_durations": s.estimated,
                "lease_expired": s.lease_expired,
                "limits": f.map(|f| {
                    let [g, l, k] = Lane::ALL.map(|lane| f.limit(lane));
                    json!({"global": g, "hot_lane": l, "hot_shop": k, "lease_seconds": f.lease_us as f64 / 1e6})
                }),
                "peak": levels_json(peaks.map(|p| p.0)),
                "peak_at_ms": levels_json(peaks.map(|p| (p.0 > 0).then_some(p.1))),
                "peak_hot_shop": (s.hot_shop_peak.0 > 0).then(|| shop_id::escape(&s.hot_shop_peak.1)),
            }),
        )?;
        m.serialize_entry("peak_admitted_per_second", &peak)?;
        m.serialize_entry("peak_at_ms", &at.map(|s| s.saturating_mul(1000)))?;
        m.serialize_entry("provider_429", &t.provider_429)?;
        m.serialize_entry(
            "reservations",
            &json!({
                "max_s": s.max_wait_us as f64 / 1e6,
                "p50_s": pct(50.0),
                "p95_s": pct(95.0),
                "waited": t.waited,
            }),
        )?;
        m.end()
    }
}

/// Every shop of a scenario, by escaped ID (the order of a JSON object's keys).
struct ShopsJson<'a>(&'a Sim);

impl Serialize for ShopsJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        let mut shops: Vec<(String, &[u8], &Counts)> = s
            .shops_unordered()
            .map(|(id, c)| (shop_id::escape(id), id, c))
            .collect();
        shops.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        ser.collect_map(shops.iter().map(|(key, id, c)| {
            (
                key,
                ShopJson {
                    c,
                    hot: s.was_hot(id),
                },
            )
        }))
    }
}

struct ShopJson<'a> {
    c: &'a Counts,
    hot: bool,
}

impl Serialize for ShopJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let c = self.c;
        let mut m = ser.serialize_map(None)?;
        m.serialize_entry("admitted", &c.admitted)?;
        m.serialize_entry("attempts", &c.attempts)?;
        m.serialize_entry("denied", &DeniedJson(c))?;
        m.serialize_entry("denied_in_flight", &levels_json(c.denied_in_flight))?;
        m.serialize_entry("denied_total", &c.denied_total())?;
        m.serialize_entry("hot", &self.hot)?;
        m.serialize_entry("peak_in_flight", &c.peak_in_flight)?;
        m.serialize_entry("provider_429", &c.provider_429)?;
        m.serialize_entry("waited", &c.waited)?;
        m.end()
    }
}

struct WindowsJson<'a>(&'a Sim, &'a [Window]);

impl Serialize for WindowsJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let s = self.0;
        ser.collect_seq(self.1.iter().map(|w| {
            json!({
                "admitted_per_second": s.admitted_rate(w.start_ms, w.end_ms),
                "calls_peak_per_second": w.peak_rps,
                "end_ms": w.end_ms,
                "start_ms": w.start_ms,
            })
        }))
    }
}

/// Writes `--json` to stdout as it goes, one line.
fn write_json(
    args: &ReplayArgs,
    sims: &[Sim],
    read: &Read,
    windows: &[Window],
) -> Result<(), String> {
    let out = JsonOut {
        args,
        sims,
        read,
        windows,
    };
    let mut w = BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    serde_json::to_writer(&mut w, &out)
        .map_err(std::io::Error::from)
        .and_then(|()| w.write_all(b"\n"))
        .and_then(|()| w.flush())
        // A reader that went away ends it quietly (see out.rs).
        .or_else(crate::out::check)
        .map_err(|e| format!("writing the JSON to stdout: {e}"))
}

fn text(args: &ReplayArgs, sims: &[Sim], read: &Read, windows: &[Window]) -> String {
    let mut o = String::new();
    let limiter = args
        .limiter
        .clone()
        .or_else(|| read.limiters.iter().next().cloned())
        .unwrap_or_else(|| "none recorded".into());
    let _ = writeln!(
        o,
        "replay of {} attempts at api {} (denials of limiter {limiter}), {} lines read",
        sims[0].total.attempts,
        args.api.join(", "),
        read.acc.events
    );
    for s in sims {
        if s.unrouted.is_empty() {
            continue;
        }
        let _ = writeln!(
            o,
            "{}{} calls of apis without an endpoint bucket: {} (decided without an endpoint)",
            if sims.len() > 1 {
                format!("{}: ", s.scenario.name)
            } else {
                String::new()
            },
            s.unrouted_total(),
            s.unrouted.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    if read.acc.malformed + read.acc.missing_timestamp > 0 {
        let _ = writeln!(
            o,
            "{} malformed line(s), {} without a timestamp, skipped:",
            read.acc.malformed, read.acc.missing_timestamp
        );
        for b in &read.acc.bad_lines {
            let _ = writeln!(o, "  {}:{}: {}", b.source, b.line, b.what);
        }
    }
    if read.out_of_range > 0 {
        let _ = writeln!(
            o,
            "{} attempt(s) with a timestamp out of range (before 1970 or after 2255), skipped",
            read.out_of_range
        );
    }
    if read.late > 0 {
        let _ = writeln!(
            o,
            "{} attempt(s) more than {} s out of order, decided when read",
            read.late,
            DISORDER_TOLERANCE_MS / 1000
        );
    }
    let row = |o: &mut String, label: &str, vals: Vec<String>| {
        let _ = write!(o, "{label:<28}");
        for v in vals {
            let _ = write!(o, "  {v:>22}");
        }
        o.push('\n');
    };
    row(
        &mut o,
        "",
        sims.iter().map(|s| s.scenario.name.clone()).collect(),
    );
    row(
        &mut o,
        "limits",
        sims.iter()
            .map(|s| {
                if s.scenario.text.is_empty() {
                    "-".into()
                } else {
                    s.scenario.text.clone()
                }
            })
            .collect(),
    );
    let each = |f: &dyn Fn(&Sim) -> String| sims.iter().map(f).collect::<Vec<_>>();
    row(&mut o, "attempts", each(&|s| s.total.attempts.to_string()));
    row(&mut o, "admitted", each(&|s| s.total.admitted.to_string()));
    let endpoints = sims.iter().any(|s| !s.scenario.endpoints.is_empty());
    let classes = sims.iter().any(|s| s.scenario.priorities.is_some());
    for lane in Lane::ALL {
        row(
            &mut o,
            &format!("denied by {}", lane.as_str()),
            each(&|s| s.total.denied[lane as usize].to_string()),
        );
        if lane == Lane::Global && endpoints {
            row(
                &mut o,
                "denied by endpoint",
                each(&|s| s.total.denied_endpoint.to_string()),
            );
        }
    }
    let in_flight = sims.iter().any(|s| s.scenario.in_flight.is_some());
    if in_flight {
        for lane in Lane::ALL {
            let i = lane as usize;
            row(
                &mut o,
                &format!("denied by {}", Reason::in_flight(lane).as_str()),
                each(&|s| {
                    let limit = s.scenario.in_flight.and_then(|f| f.limit(lane));
                    match limit {
                        Some(n) => format!("{} (at {n})", s.total.denied_in_flight[i]),
                        None => "-".into(),
                    }
                }),
            );
        }
    }
    row(
        &mut o,
        "peak in flight g/l/s",
        each(&|s| {
            let p = s.peaks_in_flight();
            format!("{}/{}/{}", p[0].0, p[1].0, p[2].0)
        }),
    );
    let estimated: u64 = sims.iter().map(|s| s.estimated).sum();
    if estimated > 0 {
        row(
            &mut o,
            "leases, est. duration",
            each(&|s| s.estimated.to_string()),
        );
    }
    if args.provider.is_some() {
        row(
            &mut o,
            "provider 429 (predicted)",
            each(&|s| s.total.provider_429.to_string()),
        );
    }
    row(
        &mut o,
        "peak admitted/s",
        each(&|s| match s.peak_admitted() {
            (n, Some(at)) => format!("{n} at {}", &format_clock(at.saturating_mul(1000))[..8]),
            _ => "0".into(),
        }),
    );
    if args.max_wait.is_some() {
        row(
            &mut o,
            "waited (p50/p95/max s)",
            each(&|s| {
                let p = |x: f64| {
                    s.waits
                        .percentile(x)
                        .map_or("-".into(), |ms| format!("{:.2}", ms / 1000.0))
                };
                format!(
                    "{} ({}/{}/{:.2})",
                    s.total.waited,
                    p(50.0),
                    p(95.0),
                    s.max_wait_us as f64 / 1e6
                )
            }),
        );
    }
    // Per endpoint and per class: admitted/denied (denied by the endpoint's own bucket).
    let routes =
        |o: &mut String,
         label: &str,
         of: &dyn Fn(&Sim) -> &std::collections::BTreeMap<String, RouteCounts>| {
            let names: BTreeSet<&String> = sims.iter().flat_map(|s| of(s).keys()).collect();
            for name in names {
                let shown = if name == NO_ROUTE { "none" } else { name };
                row(
                    o,
                    &format!("{label} {shown}"),
                    each(&|s| match of(s).get(name) {
                        Some(c) if label == "endpoint" && name != NO_ROUTE => {
                            format!("{}/{} (e:{})", c.admitted, c.denied, c.denied_endpoint)
                        }
                        Some(c) => format!("{}/{}", c.admitted, c.denied),
                        None => "-".into(),
                    }),
                );
            }
        };
    if endpoints {
        let _ = writeln!(
            o,
            "per endpoint: admitted/denied (e: by the endpoint's bucket)"
        );
        routes(&mut o, "endpoint", &|s| &s.by_endpoint);
    }
    if classes {
        let _ = writeln!(o, "per class: admitted/denied");
        routes(&mut o, "class", &|s| &s.by_class);
    }
    for w in windows {
        row(
            &mut o,
            &format!(
                "{}-{}",
                &format_clock(w.start_ms)[..8],
                &format_clock(w.end_ms)[..8]
            ),
            each(&|s| format!("{:.1}/s admitted", s.admitted_rate(w.start_ms, w.end_ms))),
        );
    }
    let _ = writeln!(
        o,
        "\nper shop (top {} by attempts; --json lists every shop): attempts admitted denied(global/hot_lane/hot_shop{}){} peak-in-flight{}",
        args.top,
        if endpoints { "/endpoint" } else { "" },
        if in_flight {
            " if:in-flight-denied(global/hot_lane/hot_shop)"
        } else {
            ""
        },
        if args.provider.is_some() { " 429" } else { "" },
    );
    for (id, _) in sims[0].shops().into_iter().take(args.top) {
        let mut line = format!("{:<24}", shop_id::escape(id));
        for s in sims {
            let c = s.shop(id).cloned().unwrap_or_default();
            let _ = write!(
                line,
                "  {:>6} {:>6} {:>4}/{}/{}{}{} {}{}{}",
                c.attempts,
                c.admitted,
                c.denied[0],
                c.denied[1],
                c.denied[2],
                if endpoints {
                    format!("/{}", c.denied_endpoint)
                } else {
                    String::new()
                },
                if in_flight {
                    format!(
                        " if:{}/{}/{}",
                        c.denied_in_flight[0], c.denied_in_flight[1], c.denied_in_flight[2]
                    )
                } else {
                    String::new()
                },
                c.peak_in_flight,
                if args.provider.is_some() {
                    format!(" {}", c.provider_429)
                } else {
                    String::new()
                },
                if s.was_hot(id) { " hot" } else { "" }
            );
        }
        let _ = writeln!(o, "{line}");
    }
    o
}

fn html(
    args: &ReplayArgs,
    sims: &[Sim],
    windows: &[Window],
    provider: Option<&BucketSpec>,
) -> String {
    let (t0, t1) = sims
        .iter()
        .flat_map(|s| s.seconds.keys())
        .fold((i64::MAX, i64::MIN), |(a, b), &s| {
            (a.min(s * 1000), b.max(s * 1000 + 1000))
        });
    let (t0, t1) = if t0 > t1 { (0, 1000) } else { (t0, t1) };
    let step = bucket_ms(t0, t1);
    let shade: Vec<(i64, i64)> = windows.iter().map(|w| (w.start_ms, w.end_ms)).collect();
    let mut h = String::new();
    let title = format!("What-if replay: api {}", args.api.join(", "));
    let _ = write!(
        h,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>
body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} th{{background:#f3f3f3}} td.l,th.l{{text-align:left}}</style></head><body><h1>{t}</h1>
<p>Each point is the busiest second of its {b} bucket. Shaded: the high-load windows the scan finds in the recorded calls.</p>"#,
        t = esc(&title),
        b = bucket_text(step)
    );
    let _ = write!(h, "<table id=\"totals\"><tr><th class=\"l\">scenario</th><th class=\"l\">limits</th><th>attempts</th><th>admitted</th><th>denied</th><th>predicted 429</th></tr>");
    for s in sims {
        let _ = write!(
            h,
            "<tr><td class=\"l\">{}</td><td class=\"l\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            esc(&s.scenario.name),
            esc(&s.scenario.text),
            s.total.attempts,
            s.total.admitted,
            s.total.denied_total(),
            s.total.provider_429
        );
    }
    h.push_str("</table>");
    for s in sims {
        let series_of = |f: fn(&checkout_guard_cli::replay::Second) -> u64| {
            bucketed(t0, t1, step, s.seconds.iter().map(|(&k, c)| (k, f(c))))
        };
        let mut series: Vec<Series<'_>> = vec![
            (
                "admitted, other shops",
                COLORS[0],
                series_of(|c| c.admitted - c.admitted_hot),
            ),
            (
                "admitted, hot shops",
                COLORS[3],
                series_of(|c| c.admitted_hot),
            ),
            ("denied", COLORS[2], series_of(|c| c.denied)),
        ];
        if let Some(p) = provider {
            series.push(("predicted 429", COLORS[1], series_of(|c| c.provider_429)));
            let rate = p.refill_per_second().round() as u64;
            series.push((
                "provider's limit",
                "#444",
                bucketed(t0, t1, step, (t0 / 1000..t1 / 1000).map(|s| (s, rate))),
            ));
        }
        let _ = write!(h, "<h2>{}</h2>", esc(&s.scenario.name));
        h.push_str(&chart(
            t0,
            t1,
            &series,
            &shade,
            &format!(
                "calls per second, {}",
                if s.scenario.text.is_empty() {
                    "no limiter"
                } else {
                    &s.scenario.text
                }
            ),
        ));
    }
    h.push_str("</body></html>\n");
    h
}
