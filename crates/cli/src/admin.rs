//! On-call operations on a running limiter, from outside PHP (the `checkout-guard limiter`
//! CLI): its state, live limits, hot marks. They work on any URL form the extension takes
//! (single server, Unix socket, cluster, ACL user) and know the limiter by its name; the
//! buckets it runs with come from the settings its workers publish.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use checkout_guard_config::live::{self, LiveLimits, Stored};
use checkout_guard_config::options::validate_name;
use checkout_guard_config::tls::{tls_from_value, TlsDefaults};
use checkout_guard_config::{validate_shop_id, validate_ttl, Endpoint, Mode, Value};
use checkout_guard_connection::scripts::{invoke, items, plain};
use checkout_guard_model::cmd::carry_step::{self, CarryStepCall};
use checkout_guard_model::cmd::decide::MODULE_COMMAND;
use checkout_guard_model::cmd::hot_scan::HotScanCall;
use checkout_guard_model::cmd::mark_hot::{mark_hot_command, unmark_hot_command};
use checkout_guard_model::cmd::read_adapt::{self, ReadAdaptCall};
use checkout_guard_model::cmd::read_limits::{self, ReadLimitsCall};
use checkout_guard_model::cmd::set_limits::{self, SetLimitsCall};
use checkout_guard_model::LaneArgs;
use checkout_guard_model::{BucketSet, Keys, Lane, StoredBucket};

use crate::valkey::Valkey;

/// Everything `limiter status` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Status {
    pub now_ms: i64,
    /// As published by the workers (`global=30/30 hot_lane=... auto_hot=...`), if any.
    pub settings: Option<String>,
    pub live: LiveLimits,
    /// The buckets in force (constructor settings with live limits over them; the
    /// constructor's alone while the stored live limits are invalid).
    pub buckets: Option<BucketSet>,
    /// The mode the workers decide in: the live one (`set mode=...`), else the one their
    /// published settings say (their `mode` option); None when neither is known.
    pub mode: Option<Mode>,
    /// What is wrong with the stored live limits (the workers then use the constructor's
    /// values): unreadable fields, or limits invalid over the published settings.
    pub problems: Vec<String>,
    /// Whole tokens in the shared buckets now (global, hot lane).
    pub levels: Vec<(Lane, i64, i64)>,
    /// Per endpoint (the `endpoints` option, live limits over it): its name, whole tokens
    /// left and capacity in force.
    pub endpoints: Vec<(String, i64, i64)>,
    /// The priority classes in force: each class's share, and the default class.
    pub classes: Vec<(String, f64)>,
    pub default_class: Option<String>,
    /// The endpoints and classes in force as the settings show them (`live::describe_routes`:
    /// empty without them), after the buckets in `limits in force`.
    pub routes: String,
    /// Hot shops: shop, "auto" or "marked", ms left.
    pub hot: Vec<(Vec<u8>, String, i64)>,
    pub window: Option<WindowView>,
    /// Recent "RateLimitDecision" events of this limiter in the events stream, by reason
    /// (or why the stream could not be read: another key namespace, another Valkey).
    pub decisions: Result<BTreeMap<String, u64>, String>,
    /// Of the same events, the shadow decisions enforcement would have denied (`mode:
    /// "shadow"`, let through), by reason: not in `decisions`, no buyer was refused.
    pub shadow_decisions: BTreeMap<String, u64>,
    /// Of the same events, the hot shops with the most enforced denials (at most
    /// [`TOP_HOT_SHOPS`]), most first: which shops a sale's denials are about.
    pub top_hot_denied: Vec<(String, u64)>,
    pub decisions_seconds: u64,
    /// Recent live-limit changes, newest first.
    pub changes: Vec<Change>,
    /// Whether this Valkey (on a cluster: the node asked) has the native module's
    /// `CG.DECIDE`: workers with `engine = auto` decide with it there.
    pub module_loaded: bool,
    /// Why whether the module is loaded is not known: the server refused `COMMAND INFO`
    /// (an ACL user without it, a managed service that disables `COMMAND`); then
    /// `module_loaded` is false and workers with `engine = auto` decide with the script.
    pub module_unknown: Option<String>,
    /// Decisions `CG.DECIDE` made at this Valkey (the node asked) since it started, from
    /// `INFO commandstats` (all limiters: the module is the server's); `None` without it.
    pub module_decisions: Option<u64>,
    /// The adaptive budget: None when the workers publish no `adaptive` option and
    /// Valkey holds no state nor last throttling answer for it.
    pub adaptive: Option<AdaptView>,
    /// The in-flight leases (issue 37): per level held, limit, oldest lease; the stats.
    pub in_flight: crate::in_flight::InFlightView,
    /// The events stream `decisions` were counted in, as found.
    pub stream: StreamView,
}

/// The telemetry stream `status` counts recent decisions in (`--events-key`): whether it
/// is there at all (the `stream` sink writes it; with only the `jsonl` sink, or another
/// key or Valkey, it is missing and no denial can be counted here), its length and newest
/// entry.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamView {
    pub key: String,
    pub exists: bool,
    pub length: u64,
    /// The newest entry's time (its ID's milliseconds).
    pub newest_ms: Option<i64>,
}

/// The adaptive budget as `limiter status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptView {
    /// The option as the workers publish it (None: not published, e.g. older workers).
    pub option: Option<checkout_guard_config::Adaptive>,
    /// The share of the limits in force now (0..=1), computed as a decision computes it
    /// (`AdaptState::permille_at` at Valkey's clock); None when the state is there but
    /// the option is not published (its floor and recovery are unknown).
    pub share: Option<f64>,
    /// Until when the provider's Retry-After pauses every shop (Unix ms), if it does.
    pub paused_until_ms: Option<i64>,
    /// The last throttling answer any worker reported (kept a day).
    pub last: Option<checkout_guard_model::adaptive::LastThrottle>,
}

/// Tokens taken over the auto-hot window (estimated as the script does): in all, and the
/// top shops, most first.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowView {
    pub total: f64,
    pub shops: Vec<(Vec<u8>, f64)>,
}

/// What `set` did: the new version's change count, the limits in force before and after,
/// and warnings (a capacity lowered: requests above it are denied from now on).
#[derive(Debug, Clone, PartialEq)]
pub struct SetOutcome {
    pub version: i64,
    pub old: String,
    pub new: String,
    pub warnings: Vec<String>,
}

/// One recorded change of live limits.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub version: i64,
    pub by: String,
    pub at_ms: i64,
    pub old: String,
    pub new: String,
}

/// The endpoint a command line names: `url` (the option `flag`, e.g. `--url` or `--stream`,
/// as errors name it), its TLS files (`--tls-*`, read and checked here) and a Sentinel
/// URL's own credentials (`--sentinel-user`, `--sentinel-password`). Errors name the
/// option and the value, never a password.
pub fn endpoint_from_options(
    flag: &str,
    url: &str,
    tls: &TlsDefaults,
    sentinel_user: Option<&str>,
    sentinel_password: Option<&str>,
) -> Result<Endpoint, String> {
    let mut endpoint = Endpoint::parse(url).map_err(|e| format!("{flag}: {e}"))?;
    if sentinel_user.is_some() || sentinel_password.is_some() {
        for (flag, v) in [
            ("--sentinel-user", sentinel_user),
            ("--sentinel-password", sentinel_password),
        ] {
            if v == Some("") {
                return Err(format!("{flag} must not be empty"));
            }
        }
        let flags = match (sentinel_user, sentinel_password) {
            (Some(_), None) => "--sentinel-user",
            (None, Some(_)) => "--sentinel-password",
            _ => "--sentinel-user/--sentinel-password",
        };
        if endpoint.is_sentinel() && sentinel_user.is_some() && sentinel_password.is_none() {
            // No AUTH could be sent with a user alone (as the limiter's option).
            return Err("--sentinel-user is given without a password: the sentinels' AUTH needs both (--sentinel-password or CHECKOUT_GUARD_SENTINEL_PASSWORD; an ACL user with nopass takes any password), or leave it out for sentinels with a password only".into());
        }
        endpoint = endpoint
            .with_sentinel_auth(
                sentinel_user.map(str::to_string),
                sentinel_password.map(str::to_string),
            )
            .map_err(|e| format!("{flags} {e}"))?;
    }
    if !endpoint.is_tls() && *tls != TlsDefaults::default() {
        return Err(format!(
            "--tls-* options need a TLS URL (rediss://, valkeys://, rediss+cluster://, valkeys+cluster://), got {flag} {}",
            endpoint.display_url()
        ));
    }
    let read = |path: &str| std::fs::read(path);
    match tls_from_value(None, tls, endpoint.is_tls(), &read) {
        Ok(Some(t)) => Ok(endpoint.with_tls(t)),
        Ok(None) => Ok(endpoint),
        Err(e) => {
            // Named as the command line names it.
            let option = e
                .option
                .replace("checkout_guard.tls.", "--tls-")
                .replace('_', "-");
            Err(format!("{option} {}", e.message))
        }
    }
}

/// A connection to use from the command line: generous timeout, no back-off between calls.
pub struct Admin {
    valkey: Valkey,
    keys: Keys,
    name: String,
}

impl Admin {
    pub fn new(url: &str, name: &str, timeout: Duration) -> Result<Self, String> {
        Self::with_tls(url, name, timeout, &TlsDefaults::default())
    }

    /// As [`Admin::new`], a TLS URL verified with `tls` (the `--tls-*` options: CA file,
    /// client certificate and key, peer name); the files are read and checked here, the
    /// error names the option and the path. `tls` with a plain URL is an error.
    pub fn with_tls(
        url: &str,
        name: &str,
        timeout: Duration,
        tls: &TlsDefaults,
    ) -> Result<Self, String> {
        Self::with_options(url, name, timeout, tls, None, None)
    }

    /// As [`Admin::with_tls`], with the sentinels' own credentials for a
    /// `valkey+sentinel://` URL (`--sentinel-user`, `--sentinel-password`; an error with
    /// any other URL, and for an empty value; the password is never shown).
    pub fn with_options(
        url: &str,
        name: &str,
        timeout: Duration,
        tls: &TlsDefaults,
        sentinel_user: Option<&str>,
        sentinel_password: Option<&str>,
    ) -> Result<Self, String> {
        let endpoint = endpoint_from_options("--url", url, tls, sentinel_user, sentinel_password)?;
        // The same name rules as the constructor, the error naming the command line's option
        // (ConfigError's Display starts with `checkout_guard:`, the extension's prefix).
        validate_name(&Value::Str(name.as_bytes().to_vec()))
            .map_err(|e| format!("--name {}", e.message))?;
        Ok(Self {
            valkey: Valkey::new(endpoint, timeout),
            keys: Keys::new(name),
            name: name.to_string(),
        })
    }

    fn call<T>(
        &self,
        op: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<T>,
    ) -> Result<T, String> {
        self.valkey.call(op)
    }

    /// The live limits' version and hash, read together (as a worker reads them).
    fn read_live(&self) -> Result<Stored, String> {
        let (limits_key, version_key) = (self.keys.limits(), self.keys.limits_version());
        let call = ReadLimitsCall {
            limits_key: &limits_key,
            version_key: &version_key,
        };
        let raw: read_limits::Raw = self.call(|c| invoke(&call, c))?;
        let read = ReadLimitsCall::decode_reply(raw);
        Ok(Stored {
            version: read.version,
            fields: read.fields,
            error: read.error,
        })
    }

    /// The constructor's buckets as the workers published them.
    fn published(&self) -> Result<(Option<String>, Option<BucketSet>), String> {
        let key = self.keys.settings();
        let text: Option<String> = self.call(|c| redis::cmd("GET").arg(&key).query(c))?;
        let set = match &text {
            Some(t) => Some(parse_settings(t)?),
            None => None,
        };
        Ok((text, set))
    }

    /// The stored live limits, with what could not be read.
    fn live(&self) -> Result<(LiveLimits, Vec<String>), String> {
        Ok(self.read_live()?.parse())
    }

    /// The buckets the workers decide with, as they do it: the live limits over `base`,
    /// or `base` alone when the stored limits are unreadable or invalid (then the problems).
    fn in_force(
        live: &LiveLimits,
        errors: &[String],
        base: &BucketSet,
    ) -> (BucketSet, Vec<String>) {
        if !errors.is_empty() {
            let problems = errors
                .iter()
                .map(|e| {
                    format!(
                        "stored live limits unreadable ({e}): the workers use the settings' values"
                    )
                })
                .collect();
            return (base.clone(), problems);
        }
        match live.apply(base) {
            Ok(set) => (set, Vec::new()),
            Err(e) => (
                base.clone(),
                vec![format!(
                    "stored live limits invalid over the published settings ({e}): the workers use the settings' values"
                )],
            ),
        }
    }

    /// Changes live limits: `changes` are (lane, Some((capacity, rate))) to set or
    /// (lane, None) to go back to the constructor's value. Validated exactly like
    /// constructor options over the published settings; nothing is written when the
    /// result is invalid or when someone else changed them meanwhile. Any change that
    /// leads to valid limits is accepted, also over stored limits that are broken (what
    /// could not be read is dropped: the workers were not using it).
    pub fn set(
        &self,
        changes: &[(Lane, Option<(i64, f64)>)],
        by: &str,
    ) -> Result<SetOutcome, String> {
        self.set_with_mode(changes, None, by)
    }

    /// [`Self::set`], and with `mode` `Some(Some(m))` the mode every worker decides in
    /// from its next decision (`Some(None)`: back to each worker's `mode` option; `None`:
    /// the stored mode unchanged). The mode rides in the live limits' hash (`mode`) and
    /// version, so it reaches the workers exactly as a bucket's change does; it changes
    /// nothing the decision does in Valkey.
    pub fn set_with_mode(
        &self,
        changes: &[(Lane, Option<(i64, f64)>)],
        mode: Option<Option<Mode>>,
        by: &str,
    ) -> Result<SetOutcome, String> {
        self.set_all(changes, &[], mode, &RouteChanges::default(), by)
    }

    /// [`Self::set_with_mode`], and `in_flight` changes: per level (lane) the limit of
    /// leases held at once, `None` back to the workers' `in_flight` option. Validated as
    /// the option is, over the published settings' `in_flight` (a limiter without the
    /// option has no level to change). Like a bucket's change, a lower limit denies new
    /// leases until enough are released; it revokes none.
    pub fn set_all(
        &self,
        changes: &[(Lane, Option<(i64, f64)>)],
        in_flight: &[(Lane, Option<i64>)],
        mode: Option<Option<Mode>>,
        routes: &RouteChanges,
        by: &str,
    ) -> Result<SetOutcome, String> {
        // A lane twice is ambiguous (the last would win silently): refused.
        for (i, (lane, _)) in changes.iter().enumerate() {
            if changes[..i].iter().any(|(l, _)| l == lane) {
                return Err(format!(
                    "{} is given twice: give each bucket at most once; nothing written",
                    lane.as_str()
                ));
            }
        }
        let (_, base) = self.published()?;
        let base = base.ok_or_else(|| {
            let there = match self.limiters() {
                Ok((names, _)) if names.is_empty() => "no limiter has published settings there".to_string(),
                Ok((names, more)) => format!(
                    "limiters with published settings there: {}{}",
                    names.join(", "),
                    if more { ", ... (more not listed)" } else { "" }
                ),
                Err(e) => format!("the limiters there could not be listed ({e})"),
            };
            format!(
                "no settings published for limiter \"{}\" at {}: no worker has decided with it in the last day \
                 (check --name and --url), so the change cannot be validated; nothing written; {there}",
                self.name,
                self.valkey.endpoint().display_url()
            )
        })?;
        let (current, errors) = self.live()?;
        let mut next = current.clone();
        for (lane, value) in changes {
            next.overrides[*lane as usize] = *value;
        }
        for (lane, value) in in_flight {
            next.in_flight[*lane as usize] = *value;
        }
        if let Some(m) = mode {
            next.mode = m;
        }
        for (name, value) in &routes.endpoints {
            next.endpoints.retain(|(n, _)| n != name);
            if let Some(b) = value {
                next.endpoints.push((name.clone(), *b));
            }
        }
        next.endpoints.sort_by(|a, b| a.0.cmp(&b.0));
        for (class, value) in &routes.priorities {
            next.priorities.retain(|(n, _)| n != class);
            if let Some(sh) = value {
                next.priorities.push((class.clone(), *sh));
            }
        }
        next.priorities.sort_by(|a, b| a.0.cmp(&b.0));
        let (old, _) = Self::in_force(&current, &errors, &base);
        let new_set = next
            .apply(&base)
            .map_err(|e| format!("refused, nothing written: {e}"))?;
        let new = new_set.clone();
        let base_in_flight = self
            .published()?
            .0
            .and_then(|t| live::PublishedSettings::parse(&t).ok())
            .and_then(|p| p.in_flight);
        let new_in_flight = next
            .apply_in_flight(base_in_flight.as_ref(), &new_set)
            .map_err(|e| format!("refused, nothing written: {e}"))?;
        let old_in_flight = current
            .apply_in_flight(base_in_flight.as_ref(), &old)
            .unwrap_or(base_in_flight);
        // Endpoints and classes: validated as the options, over the published ones (only
        // names the workers' constructor declared; an endpoint never above global).
        let published = self
            .published()?
            .0
            .and_then(|t| live::PublishedSettings::parse(&t).ok());
        let (base_endpoints, base_priorities) = published
            .map(|p| (p.endpoints, p.priorities))
            .unwrap_or_default();
        // A name this command sets must be the workers' (their published options); one it
        // puts back to default, theirs or one overridden now (a deploy removed it).
        for (name, value) in &routes.endpoints {
            let known = base_endpoints.get(name).is_some()
                || (value.is_none() && current.endpoints.iter().any(|(n, _)| n == name));
            if !known {
                return Err(format!(
                    "refused, nothing written: {}{name} is not configured by the workers (their endpoints: {})",
                    live::ENDPOINT_PREFIX,
                    names_or_none(base_endpoints.iter().map(|(n, _)| n))
                ));
            }
        }
        for (class, value) in &routes.priorities {
            let known = base_priorities
                .as_ref()
                .is_some_and(|p| p.share_ppm(class).is_some())
                || (value.is_none() && current.priorities.iter().any(|(n, _)| n == class));
            if !known {
                return Err(format!(
                    "refused, nothing written: {}{class} is not configured by the workers (their priorities: {})",
                    live::PRIORITIES_PREFIX,
                    names_or_none(base_priorities.iter().flat_map(|p| p.iter().map(|(n, _)| n)))
                ));
            }
        }
        let new_endpoints = next
            .apply_endpoints(&base_endpoints, &new_set.global)
            .map_err(|e| format!("refused, nothing written: {e}"))?;
        let new_priorities = next
            .apply_priorities(base_priorities.as_ref())
            .map_err(|e| format!("refused, nothing written: {e}"))?;
        checkout_guard_config::options::check_classes(
            &new_set,
            &new_endpoints,
            new_priorities.as_ref(),
        )
        .map_err(|e| format!("refused, nothing written: {e}"))?;
        let old_endpoints = current
            .apply_endpoints(&base_endpoints, &old.global)
            .unwrap_or_else(|_| base_endpoints.clone());
        let old_priorities = current
            .apply_priorities(base_priorities.as_ref())
            .unwrap_or_else(|_| base_priorities.clone());
        let (old_args, new_args) = (LaneArgs::new(&old), LaneArgs::new(&new_set));
        let mut warnings = Vec::new();
        for lane in Lane::ALL {
            if let (Some(o), Some(n)) = (old.get(lane), new.get(lane)) {
                if n.capacity() < o.capacity() {
                    warnings.push(format!(
                        "warning: {} capacity lowered from {} to {}: acquire() asking for more than {} tokens is denied ({}) while this holds",
                        lane.as_str(),
                        o.capacity(),
                        n.capacity(),
                        n.capacity(),
                        lane.as_str()
                    ));
                }
            }
        }
        // The live mode, when one is stored before or after, is shown (and recorded in the
        // changes stream) with the buckets.
        let with_mode = |text: String, m: Option<Mode>| match (current.mode, next.mode, m) {
            (None, None, _) => text,
            (_, _, Some(m)) => format!("{text} mode={}", m.as_str()),
            (_, _, None) => format!("{text} mode=default"),
        };
        // The in-flight limits, when the limiter has them, are shown with the buckets.
        let with_in_flight = |text: String, f: Option<checkout_guard_model::InFlight>| match f {
            Some(f) => format!(
                "{text} in_flight={}/{}/{}",
                f.limits[0], f.limits[1], f.limits[2]
            ),
            None => text,
        };
        let (old, new) = (
            with_in_flight(with_mode(live::describe(&old), current.mode), old_in_flight)
                + &live::describe_routes(&old_endpoints, old_priorities.as_ref()),
            with_in_flight(with_mode(live::describe(&new), next.mode), new_in_flight)
                + &live::describe_routes(&new_endpoints, new_priorities.as_ref()),
        );
        let at = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let (limits, version_key, changes_key, global, lane) = (
            self.keys.limits(),
            self.keys.limits_version(),
            self.keys.changes(),
            self.keys.global(),
            self.keys.hot_lane(),
        );
        let epoch = fresh_epoch();
        // The hash's fields besides the version: every override of the new limits, and
        // the mode when one is stored.
        let mut fields: Vec<(&str, String)> = Lane::ALL
            .into_iter()
            .filter_map(|lane| {
                next.overrides[lane as usize].map(|(c, r)| (lane.as_str(), format!("{c}/{r}")))
            })
            .collect();
        if let Some(m) = next.mode {
            fields.push(("mode", m.as_str().to_string()));
        }
        const IN_FLIGHT_FIELDS: [&str; 3] = [
            "in_flight.global",
            "in_flight.hot_lane",
            "in_flight.hot_shop",
        ];
        for lane in Lane::ALL {
            if let Some(n) = next.in_flight[lane as usize] {
                fields.push((IN_FLIGHT_FIELDS[lane as usize], n.to_string()));
            }
        }
        let route_fields: Vec<(String, String)> = next
            .endpoints
            .iter()
            .map(|(n, (c, r))| (format!("{}{n}", live::ENDPOINT_PREFIX), format!("{c}/{r}")))
            .chain(
                next.priorities
                    .iter()
                    .map(|(c, sh)| (format!("{}{c}", live::PRIORITIES_PREFIX), sh.to_string())),
            )
            .collect();
        for (k, v) in &route_fields {
            fields.push((k.as_str(), v.clone()));
        }
        let call = SetLimitsCall {
            limits_key: &limits,
            version_key: &version_key,
            changes_key: &changes_key,
            global_key: &global,
            hot_lane_key: &lane,
            expected: &current.id,
            by,
            at_ms: at,
            old: &old,
            new: &new,
            epoch: &epoch,
            old_lanes: &old_args,
            new_lanes: &new_args,
            fields: &fields,
        };
        let version: set_limits::Reply = self.call(|c| invoke(&call, c))?;
        // Every bucket carried over now, as of the change: a key written under the old
        // limits must not expire on their schedule before a decision reads it (a drained
        // bucket whose rate was lowered would come back full).
        if let Err(e) = self.carry_over(&version, &new_set) {
            warnings.push(format!(
                "warning: buckets not carried over yet ({e}): each is at its next decision"
            ));
        }
        // Each endpoint's bucket whose limits changed, likewise (at its own limits).
        for (name, spec) in new_endpoints.iter() {
            if old_endpoints.get(name) == Some(spec) {
                continue;
            }
            if let Err(e) = self.carry_endpoint(&version, &new_set, name, spec) {
                warnings.push(format!(
                    "warning: endpoint {name}'s bucket not carried over yet ({e}): it is at its next decision"
                ));
            }
        }
        Ok(SetOutcome {
            version: live::version_number(&version),
            old,
            new,
            warnings,
        })
    }

    /// Carries endpoint `name`'s bucket over to `spec` (version `version`): the carry step
    /// with the endpoint's key alone as its pattern (glob characters escaped) and its
    /// limits as the hot-shop lane's, which the step applies to every key it matches that
    /// is not global's or the hot lane's.
    fn carry_endpoint(
        &self,
        version: &[u8],
        set: &BucketSet,
        name: &str,
        spec: &checkout_guard_model::BucketSpec,
    ) -> Result<(), String> {
        let key = self.keys.endpoint(name);
        let mut pattern = Vec::with_capacity(key.len() + 4);
        for &b in &key {
            if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                pattern.push(b'\\');
            }
            pattern.push(b);
        }
        let set = BucketSet {
            global: set.global,
            hot_lane: set.hot_lane,
            hot_shop: Some(*spec),
        };
        self.carry_matching(version, &set, &pattern)
    }

    /// Carries every bucket of the limiter over to `set` (version `version`).
    fn carry_over(&self, version: &[u8], set: &BucketSet) -> Result<(), String> {
        self.carry_matching(version, set, &self.keys.bucket_pattern())
    }

    /// Carries the buckets whose keys match `pattern` over to `set` (version `version`):
    /// global's and the hot lane's at their lanes, any other at the hot-shop lane's limits;
    /// a script step at a time (SCAN inside Valkey, 1,000 keys a step, routed by the hash
    /// tag).
    fn carry_matching(
        &self,
        version: &[u8],
        set: &BucketSet,
        pattern: &[u8],
    ) -> Result<(), String> {
        let (global, lane) = (self.keys.global(), self.keys.hot_lane());
        let args = LaneArgs::new(set);
        let mut cursor = b"0".to_vec();
        loop {
            let call = CarryStepCall {
                global_key: &global,
                hot_lane_key: &lane,
                cursor: &cursor,
                pattern,
                version,
                lanes: &args,
            };
            let step = carry_step::Reply::decode_reply(self.call(|c| invoke(&call, c))?);
            if step.done() {
                return Ok(());
            }
            cursor = step.cursor;
        }
    }

    /// Marks `shop` hot for every worker until `ttl_seconds` run out (as markHot()).
    pub fn hot(&self, shop: &[u8], ttl_seconds: i64) -> Result<(), String> {
        validate_shop_id(shop).map_err(|e| format!("{} {}", e.option, e.message))?;
        validate_ttl(ttl_seconds).map_err(|e| format!("{} {}", e.option, e.message))?;
        let cmd = plain(mark_hot_command(&self.keys.hot_flag(shop), ttl_seconds));
        self.call(|c| cmd.query::<()>(c))
    }

    /// Ends a hot mark (manual or automatic). Returns whether there was one.
    pub fn unhot(&self, shop: &[u8]) -> Result<bool, String> {
        validate_shop_id(shop).map_err(|e| format!("{} {}", e.option, e.message))?;
        let cmd = plain(unmark_hot_command(&self.keys.hot_flag(shop)));
        self.call(|c| cmd.query::<i64>(c)).map(|n| n > 0)
    }

    /// The limiter's state; `events_key` is the telemetry stream to count recent
    /// decisions in (over the last `seconds`).
    pub fn status(&self, events_key: &str, seconds: u64) -> Result<Status, String> {
        let (settings, base) = self.published()?;
        let (live, errors) = self.live()?;
        let published_mode = settings
            .as_deref()
            .and_then(|t| live::PublishedSettings::parse(t).ok())
            .map(|p| p.mode);
        let mode = live.mode.or(published_mode);
        let (buckets, problems) = match &base {
            Some(b) => {
                let (set, problems) = Self::in_force(&live, &errors, b);
                (Some(set), problems)
            }
            None => (None, errors),
        };
        let (secs, micros): (i64, i64) = self.call(|c| redis::cmd("TIME").query(c))?;
        let now_us = secs * 1_000_000 + micros;
        let mut levels = Vec::new();
        if let Some(set) = &buckets {
            let keys = [self.keys.global(), self.keys.hot_lane()];
            let stored: Vec<Option<Vec<u8>>> =
                self.call(|c| redis::cmd("MGET").arg(&keys[0]).arg(&keys[1]).query(c))?;
            for (lane, raw) in [Lane::Global, Lane::HotLane].into_iter().zip(stored) {
                if let Some(spec) = set.get(lane) {
                    // Read as the next decision reads it (the level carried over a change;
                    // a value no engine reads is a missing key: full).
                    let bucket = raw.as_deref().and_then(StoredBucket::read_like_the_script);
                    let (tat, _) = StoredBucket::effective_tat(
                        bucket.as_ref(),
                        spec,
                        now_us,
                        live::change_instant(&live.id),
                    );
                    let level = spec.whole_tokens(tat, now_us);
                    levels.push((lane, level, spec.capacity()));
                }
            }
        }
        // The endpoints' buckets and the classes in force (over the published options).
        let published = settings
            .as_deref()
            .and_then(|t| live::PublishedSettings::parse(t).ok());
        let (mut endpoints, mut classes, mut default_class) = (Vec::new(), Vec::new(), None);
        let mut routes = String::new();
        if let (Some(p), Some(set)) = (&published, &buckets) {
            let in_force = live
                .apply_endpoints(&p.endpoints, &set.global)
                .unwrap_or_else(|_| p.endpoints.clone());
            let names: Vec<(String, checkout_guard_model::BucketSpec)> =
                in_force.iter().map(|(n, b)| (n.to_string(), *b)).collect();
            if !names.is_empty() {
                let keys: Vec<Vec<u8>> = names.iter().map(|(n, _)| self.keys.endpoint(n)).collect();
                let stored: Vec<Option<Vec<u8>>> = self.call(|c| {
                    let mut cmd = redis::cmd("MGET");
                    for k in &keys {
                        cmd.arg(k);
                    }
                    cmd.query(c)
                })?;
                for ((name, spec), raw) in names.into_iter().zip(stored) {
                    let bucket = raw.as_deref().and_then(StoredBucket::read_like_the_script);
                    let (tat, _) = StoredBucket::effective_tat(
                        bucket.as_ref(),
                        &spec,
                        now_us,
                        live::change_instant(&live.id),
                    );
                    endpoints.push((name, spec.whole_tokens(tat, now_us), spec.capacity()));
                }
            }
            let classes_in_force = live
                .apply_priorities(p.priorities.as_ref())
                .unwrap_or_else(|_| p.priorities.clone());
            routes = live::describe_routes(&in_force, classes_in_force.as_ref());
            if let Some(p) = classes_in_force {
                classes = p
                    .iter()
                    .map(|(c, ppm)| (c.to_string(), ppm as f64 / 1e6))
                    .collect();
                default_class = p.default_class().map(str::to_owned);
            }
        }
        let hot = self.hot_shops()?;
        // The in-flight section only for a limiter with leases (the option published, or
        // live in-flight limits stored): others, and an on-call user whose ACL allows only
        // what a limiter without leases needs, are not asked for more. A section that cannot
        // be read is a problem shown in it, never a failed status.
        let with_in_flight = settings
            .as_deref()
            .and_then(|t| live::PublishedSettings::parse(t).ok())
            .is_some_and(|p| p.in_flight.is_some())
            || live.in_flight.iter().any(Option::is_some);
        let in_flight = if with_in_flight {
            crate::in_flight::read(&self.valkey, &self.keys, now_us, settings.as_deref())
                .unwrap_or_else(|e| crate::in_flight::InFlightView {
                    now_us,
                    problems: vec![format!("in-flight leases not read: {e}")],
                    ..Default::default()
                })
        } else {
            crate::in_flight::InFlightView::none(now_us)
        };
        let window = match settings.as_deref().and_then(auto_hot_window_us) {
            Some(w) => Some(self.window(w, now_us)?),
            None => None,
        };
        let stream = self.stream_view(events_key);
        let (decisions, shadow_decisions, hot_denied) = if !stream.exists {
            (
                Err(format!("no events stream at key {events_key:?}")),
                BTreeMap::new(),
                BTreeMap::new(),
            )
        } else {
            match self.recent_decisions(events_key, now_us / 1000, seconds) {
                Ok((d, s, h)) => (Ok(d), s, h),
                Err(e) => (Err(e), BTreeMap::new(), BTreeMap::new()),
            }
        };
        let changes = self.recent_changes()?;
        let adaptive = self.adaptive(settings.as_deref(), now_us)?;
        let module = self.module_loaded();
        Ok(Status {
            now_ms: now_us / 1000,
            settings,
            live,
            mode,
            buckets,
            problems,
            levels,
            endpoints,
            classes,
            default_class,
            routes,
            hot,
            window,
            decisions,
            shadow_decisions,
            top_hot_denied: top_by_count(hot_denied, TOP_HOT_SHOPS),
            decisions_seconds: seconds,
            changes,
            module_loaded: matches!(module, Ok(true)),
            module_unknown: module.err(),
            module_decisions: self.module_decisions(),
            adaptive,
            in_flight,
            stream,
        })
    }

    /// The events stream at `key`: there or not, its length and newest entry. A key that
    /// cannot be asked about counts as there (the reading of it says what is wrong).
    fn stream_view(&self, key: &str) -> StreamView {
        let mut v = StreamView {
            key: key.to_string(),
            exists: true,
            ..Default::default()
        };
        let Ok(kind) = self.call(|c| redis::cmd("TYPE").arg(key).query::<String>(c)) else {
            return v;
        };
        if kind == "none" {
            v.exists = false;
            return v;
        }
        if kind != "stream" {
            return v;
        }
        v.length = self
            .call(|c| redis::cmd("XLEN").arg(key).query::<u64>(c))
            .unwrap_or(0);
        let newest: Vec<(String, Vec<(String, String)>)> = self
            .call(|c| {
                redis::cmd("XREVRANGE")
                    .arg(key)
                    .arg("+")
                    .arg("-")
                    .arg("COUNT")
                    .arg(1)
                    .query(c)
            })
            .unwrap_or_default();
        v.newest_ms = newest
            .first()
            .and_then(|(id, _)| id.split('-').next()?.parse().ok());
        v
    }

    /// Whether Valkey holds anything of this limiter: the settings its workers publish
    /// (at each decision, kept a day), live limits or their changes, a bucket, the
    /// adaptive budget's state, in-flight leases, a hot shop. A name with none of them is unknown here: a
    /// typo of `--name`, or another `--url`.
    pub fn known(&self) -> Result<bool, String> {
        let k = &self.keys;
        // The string keys with MGET (an on-call ACL user has it; a key of another type
        // reads as nil): the live limits' version is there whenever limits or changes are.
        let strings = [
            k.settings(),
            k.limits_version(),
            k.global(),
            k.hot_lane(),
            k.adapt(),
            k.adapt_last(),
        ];
        let found: Vec<Option<Vec<u8>>> =
            self.call(|c| redis::cmd("MGET").arg(&strings[..]).query(c))?;
        if found.iter().any(Option::is_some) {
            return Ok(true);
        }
        // The other types with EXISTS, one slot (the hash tag): a user without EXISTS
        // is not asked twice, the hot shops below still answer.
        let others = [
            k.limits(),
            k.changes(),
            k.adapt(),
            k.leases(Lane::Global, b""),
            k.leases(Lane::HotLane, b""),
            k.lease_stats(),
        ];
        let n: i64 = self
            .call(|c| redis::cmd("EXISTS").arg(&others[..]).query(c))
            .unwrap_or(0);
        Ok(n > 0 || !self.hot_shops()?.is_empty())
    }

    /// The names of the limiters whose workers published settings at this Valkey (a
    /// SCAN for `{cg:*}:settings`; on a cluster, of the node asked), sorted, at most
    /// [`LISTED_LIMITERS`] (then `true`: more not listed).
    pub fn limiters(&self) -> Result<(Vec<String>, bool), String> {
        let mut names = std::collections::BTreeSet::new();
        let mut cursor = "0".to_string();
        // Bounded: a keyspace of millions is a few hundred steps of 10,000.
        for _ in 0..1000 {
            let (next, found): (String, Vec<Vec<u8>>) = self.call(|c| {
                redis::cmd("SCAN")
                    .arg(&cursor)
                    .arg("MATCH")
                    .arg("{cg:*}:settings")
                    .arg("COUNT")
                    .arg(10_000)
                    .query(c)
            })?;
            for key in found {
                let name = key
                    .strip_prefix(b"{cg:")
                    .and_then(|r| r.strip_suffix(b"}:settings"));
                if let Some(n) = name {
                    names.insert(String::from_utf8_lossy(n).into_owned());
                }
            }
            cursor = next;
            if cursor == "0" || names.len() > LISTED_LIMITERS {
                break;
            }
        }
        let more = names.len() > LISTED_LIMITERS || cursor != "0";
        Ok((names.into_iter().take(LISTED_LIMITERS).collect(), more))
    }

    /// Why this limiter's name is refused: nothing of it at this Valkey, and the limiters
    /// that are there.
    pub fn unknown(&self) -> String {
        let at = self.valkey.endpoint().display_url();
        let there = match self.limiters() {
            Ok((names, _)) if names.is_empty() => format!(
                "no limiter has published settings at {at} (a worker publishes them at each decision, kept a day): check --url"
            ),
            Ok((names, more)) => format!(
                "limiters with published settings at {at}{}: {}{}",
                if self.valkey.endpoint().is_cluster() {
                    " (the node asked)"
                } else {
                    ""
                },
                names.join(", "),
                if more { ", ... (more not listed)" } else { "" }
            ),
            Err(e) => format!("the limiters there could not be listed ({e})"),
        };
        format!(
            "unknown limiter {:?} at {at}: Valkey holds nothing of it (no settings published by a worker in the last day, no live limits, buckets or hot shops); {there}",
            self.name
        )
    }

    /// The adaptive budget: its state and last throttling answer (one MGET), the share
    /// computed with the published option at Valkey's `now_us`.
    fn adaptive(&self, settings: Option<&str>, now_us: i64) -> Result<Option<AdaptView>, String> {
        use checkout_guard_model::adaptive::{AdaptState, LastThrottle, FULL};
        let option = settings
            .and_then(|t| live::PublishedSettings::parse(t).ok())
            .and_then(|p| p.adaptive);
        let (state_key, last_key) = (self.keys.adapt(), self.keys.adapt_last());
        let call = ReadAdaptCall {
            adapt_key: &state_key,
            last_key: &last_key,
        };
        // Both read as the workers' `health()` reads them (empty: missing); the share is
        // computed at the status's own `now_us`.
        let (state, last, _): read_adapt::Reply = self.call(|c| invoke(&call, c))?;
        let state = Some(state)
            .filter(|s| !s.is_empty())
            .as_deref()
            .and_then(AdaptState::read_like_the_script);
        let last = Some(last)
            .filter(|l| !l.is_empty())
            .as_deref()
            .and_then(LastThrottle::parse);
        if option.is_none() && state.is_none() && last.is_none() {
            return Ok(None);
        }
        let share = match (&option, state) {
            (_, None) => Some(1.0),
            (Some(o), Some(s)) => Some(s.permille_at(now_us, &o.params()) as f64 / FULL as f64),
            (None, Some(_)) => None,
        };
        let paused_until_ms = state
            .filter(|s| s.paused_at(now_us))
            .map(|s| s.pause_until.div_euclid(1000));
        Ok(Some(AdaptView {
            option,
            share,
            paused_until_ms,
            last,
        }))
    }

    /// `calls=` of `cmdstat_CG.DECIDE` in `INFO commandstats`; `None` when it has none.
    fn module_decisions(&self) -> Option<u64> {
        let info: String = self
            .call(|c| redis::cmd("INFO").arg("commandstats").query(c))
            .ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix("cmdstat_CG.DECIDE:"))
            .and_then(|rest| rest.split(',').find_map(|kv| kv.strip_prefix("calls=")))
            .and_then(|n| n.trim().parse().ok())
    }

    /// `COMMAND INFO CG.DECIDE` answers nil where the command is unknown; a refusal
    /// (`NOPERM`, `unknown command` where `COMMAND` is renamed away) is the error, quoted.
    fn module_loaded(&self) -> Result<bool, String> {
        self.call(|c| {
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg(MODULE_COMMAND)
                .query::<Vec<redis::Value>>(c)
        })
        .map(|v| v.first().is_some_and(|i| !matches!(i, redis::Value::Nil)))
    }

    fn hot_shops(&self) -> Result<Vec<(Vec<u8>, String, i64)>, String> {
        let route = self.keys.global();
        let pattern = self.keys.hot_flag_pattern();
        let prefix_len = self.keys.hot_flag(b"").len();
        let mut out = Vec::new();
        let mut cursor = b"0".to_vec();
        loop {
            let call = HotScanCall {
                route: &route,
                cursor: &cursor,
                pattern: &pattern,
            };
            let reply: Vec<redis::Value> = self.call(|c| invoke(&call, c))?;
            let step = HotScanCall::decode_reply(items(reply));
            cursor = step.cursor;
            for flag in step.flags {
                let kind = if flag.value == b"auto" {
                    "auto"
                } else {
                    "marked"
                };
                out.push((
                    flag.key[prefix_len..].to_vec(),
                    kind.to_string(),
                    flag.pttl_ms,
                ));
            }
            if cursor == b"0" {
                break;
            }
        }
        out.sort();
        Ok(out)
    }

    fn window(&self, w: i64, now_us: i64) -> Result<WindowView, String> {
        let win = now_us / w;
        let prefix = self.keys.auto_hot_prefix();
        let key = |n: i64| [prefix.as_slice(), n.to_string().as_bytes()].concat();
        let (cur, prev) = (key(win), key(win - 1));
        let read = |k: &Vec<u8>| -> Result<Vec<(Vec<u8>, i64)>, String> {
            self.call(|c| redis::cmd("HGETALL").arg(k).query(c))
        };
        let f = 1.0 - (now_us % w) as f64 / w as f64;
        let mut per: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
        for (field, n) in read(&cur)? {
            *per.entry(field).or_default() += n as f64;
        }
        for (field, n) in read(&prev)? {
            *per.entry(field).or_default() += n as f64 * f;
        }
        let total = per.remove(&b""[..]).unwrap_or(0.0);
        let mut shops: Vec<(Vec<u8>, f64)> = per.into_iter().collect();
        shops.sort_by(|a, b| b.1.total_cmp(&a.1));
        shops.truncate(10);
        Ok(WindowView { total, shops })
    }

    fn recent_decisions(
        &self,
        events_key: &str,
        now_ms: i64,
        seconds: u64,
    ) -> Result<(ByReason, ByReason, ByReason), String> {
        let from = window_start_ms(now_ms, seconds);
        // Newest first: when the window holds more than the count, the latest entries
        // are the ones counted (oldest first, a flood earlier in the window hid the
        // last decisions).
        let entries: Vec<(String, Vec<(String, String)>)> = self.call(|c| {
            redis::cmd("XREVRANGE")
                .arg(events_key)
                .arg("+")
                .arg(format!("{from}"))
                .arg("COUNT")
                .arg(100_000)
                .query(c)
        })?;
        let mut by = BTreeMap::new();
        let mut shadow = BTreeMap::new();
        // Denials of hot shops, by shop (enforced, not `unavailable`): the shops a sale is
        // about. Shop ids are never metric labels (unbounded); on-call finds them here.
        let mut hot_denied = BTreeMap::new();
        use checkout_guard_model::events::{attr, EVENT_TYPE, RATE_LIMIT_DECISION, STREAM_FIELD};
        for (_, fields) in entries {
            for (k, line) in fields {
                // Cheap filter first: most events of the stream are other kinds.
                if k == STREAM_FIELD
                    && line.contains(RATE_LIMIT_DECISION)
                    && json_field(&line, EVENT_TYPE).as_deref() == Some(RATE_LIMIT_DECISION)
                    && json_field(&line, attr::LIMITER).as_deref() == Some(self.name.as_str())
                {
                    if let Some(reason) = json_field(&line, attr::REASON) {
                        let shadow_mode =
                            json_field(&line, attr::MODE).as_deref() == Some("shadow");
                        if !shadow_mode && reason != "unavailable" {
                            let v: serde_json::Value =
                                serde_json::from_str(&line).unwrap_or_default();
                            let shop = v.get(attr::SHOP_ID).and_then(|s| s.as_str());
                            if let (Some(true), Some(shop)) =
                                (v.get(attr::HOT_SHOP).and_then(|h| h.as_bool()), shop)
                            {
                                *hot_denied.entry(shop.to_string()).or_insert(0) += 1;
                            }
                        }
                        let into = if shadow_mode { &mut shadow } else { &mut by };
                        *into.entry(reason).or_insert(0) += 1;
                    }
                }
            }
        }
        Ok((by, shadow, hot_denied))
    }

    fn recent_changes(&self) -> Result<Vec<Change>, String> {
        let key = self.keys.changes();
        let entries: Vec<(String, BTreeMap<String, String>)> = self.call(|c| {
            redis::cmd("XREVRANGE")
                .arg(&key)
                .arg("+")
                .arg("-")
                .arg("COUNT")
                .arg(5)
                .query(c)
        })?;
        Ok(entries
            .into_iter()
            .map(|(_, f)| {
                let get = |k: &str| f.get(k).cloned().unwrap_or_default();
                Change {
                    version: get("version").parse().unwrap_or(0),
                    by: get("by"),
                    at_ms: get("at").parse().unwrap_or(0),
                    old: get("old"),
                    new: get("new"),
                }
            })
            .collect())
    }
}

/// How many limiter names an unknown `--name` lists.
pub const LISTED_LIMITERS: usize = 20;

/// Decisions counted by reason (or by shop).
type ByReason = BTreeMap<String, u64>;

/// How many hot shops `limiter status` names by their denials.
pub const TOP_HOT_SHOPS: usize = 5;

/// The `n` keys with the largest counts, largest first (ties by key).
fn top_by_count(counts: ByReason, n: usize) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v.truncate(n);
    v
}

/// A fresh epoch for limits stored anew: random, so never one a worker knew before.
fn fresh_epoch() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

/// The string `field` of an event line (JSON), if it has one.
fn json_field(line: &str, field: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    v.get(field)?.as_str().map(str::to_string)
}

/// Parses published settings (`global=30/30 hot_lane=25/25 auto_hot=...`) into buckets,
/// through the constructor's validation.
pub fn parse_settings(text: &str) -> Result<BucketSet, String> {
    live::PublishedSettings::parse(text).map(|p| p.buckets)
}

/// The auto-hot window (µs) in published settings, if auto_hot is on.
fn auto_hot_window_us(text: &str) -> Option<i64> {
    let auto_hot = live::PublishedSettings::parse(text).ok()?.auto_hot?;
    Some(auto_hot.window.as_micros() as i64)
}

/// The first millisecond of the last `seconds` before `now_ms`, as a stream ID's time:
/// saturating (a `--seconds` of any u64 is "everything"), never before 0.
fn window_start_ms(now_ms: i64, seconds: u64) -> i64 {
    let span = i64::try_from(seconds)
        .unwrap_or(i64::MAX)
        .saturating_mul(1000);
    now_ms.saturating_sub(span).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_of_recent_decisions_starts_at_0_at_the_earliest() {
        assert_eq!(window_start_ms(1_796_000_000_000, 60), 1_795_999_940_000);
        assert_eq!(window_start_ms(1_796_000_000_000, u64::MAX), 0);
        assert_eq!(
            window_start_ms(1_796_000_000_000, i64::MAX as u64 / 1000 + 1),
            0
        );
        assert_eq!(window_start_ms(5_000, 10), 0);
    }

    /// A lane given twice is refused before any I/O (nothing listens on port 1: a
    /// connection error otherwise), not decided by the last one.
    #[test]
    fn a_lane_given_twice_is_refused_before_anything_is_sent() {
        let admin = Admin::new(
            "redis://127.0.0.1:1/0",
            "payments",
            Duration::from_millis(200),
        )
        .unwrap();
        let e = admin
            .set(
                &[
                    (Lane::Global, Some((60, 55.0))),
                    (Lane::Global, Some((6, 55.0))),
                ],
                "test",
            )
            .unwrap_err();
        assert!(e.contains("global is given twice"), "{e}");
        let e = admin
            .set(
                &[
                    (Lane::HotShop, None),
                    (Lane::Global, None),
                    (Lane::HotShop, None),
                ],
                "test",
            )
            .unwrap_err();
        assert!(e.contains("hot_shop is given twice"), "{e}");
    }

    #[test]
    fn published_settings_round_trip_through_validation() {
        let set = parse_settings("global=30/30.5 hot_lane=25/25 auto_hot=10s/0.3/300s/31").unwrap();
        assert_eq!(live::describe(&set), "global=30/30.5 hot_lane=25/25");
        assert_eq!(
            auto_hot_window_us("global=30/30 auto_hot=2.5s/0.3/300s/8"),
            Some(2_500_000)
        );
        assert_eq!(auto_hot_window_us("global=30/30"), None);
        assert!(parse_settings("global=x/1").is_err());
        assert!(parse_settings("hot_lane=5/5")
            .unwrap_err()
            .contains("global"));
    }

    /// The window `limiter status` reads counters in is the one the workers count in, to
    /// the microsecond: the window µs a worker sends (`AutoHotArgs`) from the settings it
    /// publishes. Before the one codec the CLI took `seconds * 1e6` truncated, 1 µs short
    /// for 1.001 s or 1.0006 s (another window number: the counters shown were none).
    #[test]
    fn the_status_window_is_the_workers_to_the_microsecond() {
        use checkout_guard_model::{AutoHot, AutoHotArgs, BucketSpec};
        let global = BucketSet {
            global: BucketSpec::new("global", 30, 30.0).unwrap(),
            hot_lane: None,
            hot_shop: None,
        };
        for seconds in [1.001, 1.0006, 1.003, 2.5, 10.0, 1234.567891, 3600.0] {
            let a = AutoHot::new(std::time::Duration::from_secs_f64(seconds), 0.3, 300, 8).unwrap();
            let sent: i64 = AutoHotArgs::new(Some(&a)).text()[0].parse().unwrap();
            let text = live::PublishedSettings::encode(&global, Some(&a));
            assert_eq!(auto_hot_window_us(&text), Some(sent), "{seconds} s: {text}");
        }
    }

    #[test]
    fn json_fields_are_read_from_compact_lines() {
        let line = r#"{"eventType":"RateLimitDecision","limiter":"p","reason":"hot_shop"}"#;
        assert_eq!(json_field(line, "reason").as_deref(), Some("hot_shop"));
        assert_eq!(json_field(line, "missing"), None);
    }
}

/// A live change's endpoints and classes: per endpoint its (capacity, rate), per class
/// its share; `None` back to the workers' option.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RouteChanges {
    pub endpoints: Vec<(String, Option<(i64, f64)>)>,
    pub priorities: Vec<(String, Option<f64>)>,
}

/// Names for a message: `a, b`, or `none`.
fn names_or_none<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = names.collect();
    match all.is_empty() {
        true => "none".to_string(),
        false => all.join(", "),
    }
}
