//! Live limits: capacities and rates changed while the limiter runs, without a deploy.
//!
//! Stored in Valkey under the limiter's hash tag: `limits` (a hash: per overridden bucket
//! `"<capacity>/<refill_per_second>"`, and `by`, `at`), `limits:v` (the version, read by
//! every decision in the same MGET as the buckets) and `changes` (a stream: version, by,
//! at, old, new). A worker decides with the version it knows; when the script sees another
//! one it decides nothing and says so, the worker reads version and hash together once,
//! validates them exactly like constructor options (same code), and asks again. Nothing
//! stored means the constructor's values.
//!
//! A version is `"<n>-<epoch>-<µs>"`: `n` counts the changes (what people see), `epoch` is
//! drawn at random by the writer whenever the stored limits are created anew, `µs` is
//! Valkey's time of the change (buckets carry their level over from that instant). After
//! Valkey lost its data the count starts again at 1, but with another epoch, so no worker
//! can take the new version 1 for the one it knew.
//!
//! The hash may also hold `mode` (`enforce` or `shadow`): the mode every worker of the
//! limiter decides in, over its `mode` option (the on-call kill switch). It changes no
//! bucket and nothing the decision does in Valkey; it rides with the version, so every
//! worker picks it up exactly as it picks up a bucket's change.

use checkout_guard_model::bucket::BucketSpec;
use checkout_guard_model::bucket::{BucketSet, Lane};
use checkout_guard_model::error::ConfigError;
use checkout_guard_model::AutoHot;
use checkout_guard_model::InFlight;
use checkout_guard_model::{Endpoints, Priorities};

use crate::options::{
    bucket_value, buckets_from_value, buckets_to_value, endpoints_from_value,
    priorities_from_value, Adaptive, Mode,
};
use crate::value::Value;

/// A version's readers: in the model (the decision reads the instant of the change from
/// it), here beside the codec of what it versions.
pub use checkout_guard_model::limits_version::{change_instant, version_number};

/// The live limits as stored: overrides of some buckets, and who set them when.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveLimits {
    /// The version as stored in `limits:v` (empty = none), byte for byte: what decisions
    /// compare (a version written by hand need not be UTF-8).
    pub id: Vec<u8>,
    /// Its change count, for people and events (0 = none).
    pub version: i64,
    /// Per lane, the overriding (capacity, refill_per_second).
    pub overrides: [Option<(i64, f64)>; 3],
    /// The mode set live over every worker's `mode` option (None: the option's).
    pub mode: Option<Mode>,
    /// Per level (global, hot lane, hot shop) the overriding `in_flight` limit (fields
    /// `in_flight.global`, `in_flight.hot_lane`, `in_flight.hot_shop`).
    pub in_flight: [Option<i64>; 3],
    /// Per endpoint the overriding (capacity, refill_per_second) (fields
    /// `endpoint.<name>`), sorted by name.
    pub endpoints: Vec<(String, (i64, f64))>,
    /// Per priority class the overriding share (fields `priorities.<class>`), sorted.
    pub priorities: Vec<(String, f64)>,
    pub by: String,
    pub at_ms: i64,
}

impl LiveLimits {
    /// The live limits of version `id` from `HGETALL limits`. A field that is not
    /// understood is an error naming it.
    pub fn from_stored(id: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> Result<Self, String> {
        let (live, errors) = Self::from_stored_lenient(id, fields);
        match errors.into_iter().next() {
            Some(e) => Err(e),
            None => Ok(live),
        }
    }

    /// As [`Self::from_stored`], keeping what could be read and listing what could not
    /// (the CLI shows a broken hash and can still repair it).
    pub fn from_stored_lenient(id: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> (Self, Vec<String>) {
        let mut out = Self {
            id: id.to_vec(),
            version: version_number(id),
            ..Self::default()
        };
        let mut errors = Vec::new();
        for (k, v) in fields {
            let text = String::from_utf8_lossy(v);
            let field = String::from_utf8_lossy(k);
            match &*field {
                "by" => out.by = text.into_owned(),
                "at" => match text.parse() {
                    Ok(at) => out.at_ms = at,
                    Err(_) => errors.push(format!("at {text:?}")),
                },
                "mode" => match Mode::parse("mode", v) {
                    Ok(m) => out.mode = Some(m),
                    Err(e) => errors.push(e.to_string()),
                },
                name if name.starts_with(ENDPOINT_PREFIX) => {
                    match parse_endpoint_field(name, &text) {
                        Ok(e) => out.endpoints.push(e),
                        Err(e) => errors.push(e),
                    }
                }
                name if name.starts_with(PRIORITIES_PREFIX) => {
                    match parse_priority_field(name, &text) {
                        Ok(p) => out.priorities.push(p),
                        Err(e) => errors.push(e),
                    }
                }
                name if name.starts_with(IN_FLIGHT_PREFIX) => {
                    match in_flight_field(name).zip(parse_in_flight_limit(name, &text).ok()) {
                        Some((lane, n)) => out.in_flight[lane as usize] = Some(n),
                        None => errors.push(
                            parse_in_flight_limit(name, &text)
                                .err()
                                .unwrap_or_else(|| format!("unknown field {name:?}")),
                        ),
                    }
                }
                name => match Lane::from_name(name) {
                    None => errors.push(format!("unknown field {name:?}")),
                    Some(lane) => match parse_bucket(lane, &text) {
                        Ok(b) => out.overrides[lane as usize] = Some(b),
                        Err(e) => errors.push(e),
                    },
                },
            }
        }
        out.endpoints.sort_by(|a, b| a.0.cmp(&b.0));
        out.priorities.sort_by(|a, b| a.0.cmp(&b.0));
        (out, errors)
    }

    /// The endpoints with these overrides applied to `base`, the constructor's, validated
    /// exactly like the option against `global` in force (none above global, also after
    /// global changed). Overrides of endpoints `base` lacks are ignored (another deploy's).
    pub fn apply_endpoints(
        &self,
        base: &Endpoints,
        global: &BucketSpec,
    ) -> Result<Endpoints, ConfigError> {
        // An override of an endpoint this worker's constructor does not declare is not
        // this worker's (a rolling deploy adds or removes endpoints): ignored. The CLI
        // refuses such a name when it is set.
        if base.is_empty() {
            return Ok(base.clone());
        }
        let entries = base
            .iter()
            .map(|(name, spec)| {
                let (c, r) = self
                    .endpoints
                    .iter()
                    .find(|(n, _)| n == name)
                    .map_or((spec.capacity(), spec.refill_per_second()), |(_, b)| *b);
                (name.to_string(), bucket_value(c, r))
            })
            .collect();
        endpoints_from_value(&Value::Map(entries), global).map_err(|e| {
            ConfigError::new(
                e.option.replacen("endpoints.", ENDPOINT_PREFIX, 1),
                e.message,
            )
        })
    }

    /// The priority classes with these overrides applied to `base`, the constructor's,
    /// validated as the option. Overrides of classes `base` lacks are ignored.
    pub fn apply_priorities(
        &self,
        base: Option<&Priorities>,
    ) -> Result<Option<Priorities>, ConfigError> {
        if self.priorities.is_empty() {
            return Ok(base.cloned());
        }
        // As endpoints: overrides of classes this worker does not declare are ignored.
        let Some(base) = base else {
            return Ok(None);
        };
        let entries = base
            .iter()
            .map(|(class, ppm)| {
                let share = self
                    .priorities
                    .iter()
                    .find(|(n, _)| n == class)
                    .map_or(ppm as f64 / 1e6, |(_, s)| *s);
                (class.to_string(), Value::Float(share))
            })
            .collect();
        let default = base
            .default_class()
            .map(|d| Value::Str(d.as_bytes().to_vec()));
        priorities_from_value(Some(&Value::Map(entries)), default.as_ref())
    }

    /// The buckets with these overrides applied to `base`, validated exactly like the
    /// constructor's options (a bucket may be overridden only if `base` configures it).
    pub fn apply(&self, base: &BucketSet) -> Result<BucketSet, ConfigError> {
        let mut value = buckets_to_value(base);
        let Value::Map(entries) = &mut value else {
            unreachable!("buckets_to_value returns a map")
        };
        for lane in Lane::ALL {
            let Some((capacity, rate)) = self.overrides[lane as usize] else {
                continue;
            };
            let Some(slot) = entries.iter_mut().find(|(k, _)| k == lane.as_str()) else {
                return Err(ConfigError::new(
                    lane.as_str(),
                    "is not configured by this limiter's constructor: only configured buckets can be changed live",
                ));
            };
            slot.1 = bucket_value(capacity, rate);
        }
        buckets_from_value(&value)
    }

    /// `in_flight` with these overrides applied to `base`, the constructor's, validated
    /// as the option is (only a limiter constructed with `in_flight` has levels to change;
    /// a hot level only where its bucket is; none above the global level's).
    pub fn apply_in_flight(
        &self,
        base: Option<&InFlight>,
        buckets: &BucketSet,
    ) -> Result<Option<InFlight>, ConfigError> {
        if self.in_flight.iter().all(Option::is_none) {
            return Ok(base.copied());
        }
        let Some(base) = base else {
            return Err(ConfigError::new(
                "in_flight",
                "is not configured by this limiter's constructor: only a limiter with in_flight can have its limits changed live",
            ));
        };
        let mut out = *base;
        for lane in Lane::ALL {
            if let Some(n) = self.in_flight[lane as usize] {
                if lane != Lane::Global && buckets.get(lane).is_none() {
                    return Err(ConfigError::new(
                        format!("{IN_FLIGHT_PREFIX}{}", lane.as_str()),
                        format!("needs the {} bucket: this limiter has none", lane.as_str()),
                    ));
                }
                out.limits[lane as usize] = n;
            }
        }
        for lane in [Lane::HotLane, Lane::HotShop] {
            if out.limits[lane as usize] > out.limits[0] {
                return Err(ConfigError::new(
                    format!("{IN_FLIGHT_PREFIX}{}", lane.as_str()),
                    format!(
                        "must be at most in_flight.global ({}), got {}",
                        out.limits[0], out.limits[lane as usize]
                    ),
                ));
            }
        }
        Ok(Some(out))
    }

    /// No bucket overridden, no in-flight limit and no mode set.
    pub fn is_empty(&self) -> bool {
        self.overrides.iter().all(Option::is_none)
            && self.in_flight.iter().all(Option::is_none)
            && self.mode.is_none()
            && self.endpoints.is_empty()
            && self.priorities.is_empty()
    }

    /// The mode a limiter whose option says `option` decides in under these limits.
    pub fn mode_over(&self, option: Mode) -> Mode {
        self.mode.unwrap_or(option)
    }
}

/// The prefix of the live limits' in-flight fields (`in_flight.global`, ...).
pub const IN_FLIGHT_PREFIX: &str = "in_flight.";
/// The prefix of the live limits' endpoint fields (`endpoint.charges.create`, ...) and of
/// the endpoints in the published settings.
pub const ENDPOINT_PREFIX: &str = "endpoint.";
/// The prefix of the live limits' class fields (`priorities.normal`, ...) and of the
/// classes in the published settings.
pub const PRIORITIES_PREFIX: &str = "priorities.";

/// A field `endpoint.<name>` with its `"<capacity>/<refill_per_second>"`; errors name
/// the field.
pub fn parse_endpoint_field(field: &str, text: &str) -> Result<(String, (i64, f64)), String> {
    let name = field.strip_prefix(ENDPOINT_PREFIX).unwrap_or(field);
    if !checkout_guard_model::endpoints::valid_name(name.as_bytes()) {
        return Err(format!(
            "{field:?}: the endpoint name must be 1-64 characters of A-Z a-z 0-9 _ . : / -"
        ));
    }
    let (c, r) = text
        .split_once('/')
        .ok_or_else(|| format!("{field}: {text:?} is not CAPACITY/RATE"))?;
    let c = c
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("{field}.capacity: {c:?} is not an integer"))?;
    let r = r
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{field}.refill_per_second: {r:?} is not a number"))?;
    Ok((name.to_string(), (c, r)))
}

/// A field `priorities.<class>` with its share (a number from 0 to 1, 1 excluded); errors
/// name the field.
pub fn parse_priority_field(field: &str, text: &str) -> Result<(String, f64), String> {
    let class = field.strip_prefix(PRIORITIES_PREFIX).unwrap_or(field);
    if !checkout_guard_model::endpoints::valid_name(class.as_bytes()) {
        return Err(format!(
            "{field:?}: the class name must be 1-64 characters of A-Z a-z 0-9 _ . : / -"
        ));
    }
    match text.trim().parse::<f64>() {
        Ok(s) if checkout_guard_model::endpoints::share_to_ppm(s).is_some() => {
            Ok((class.to_string(), s))
        }
        _ => Err(format!(
            "{field}: {text:?} is not a share from 0 (inclusive) to 1 (exclusive) in millionths (0, or 0.000001 to 0.999999)"
        )),
    }
}

/// How endpoints and classes are shown in events, the settings and by the CLI:
/// ` endpoint.items=25/25 priorities.normal=0.2 default_priority=normal` (each part led by
/// a space; empty when there are none).
pub fn describe_routes(endpoints: &Endpoints, priorities: Option<&Priorities>) -> String {
    let mut out = String::new();
    for (name, b) in endpoints.iter() {
        out.push_str(&format!(
            " {ENDPOINT_PREFIX}{name}={}/{}",
            b.capacity(),
            b.refill_per_second()
        ));
    }
    if let Some(p) = priorities {
        for (class, ppm) in p.iter() {
            out.push_str(&format!(" {PRIORITIES_PREFIX}{class}={}", ppm as f64 / 1e6));
        }
        if let Some(d) = p.default_class() {
            out.push_str(&format!(" default_priority={d}"));
        }
    }
    out
}

/// The level a live-limits field `in_flight.<level>` names.
pub fn in_flight_field(name: &str) -> Option<Lane> {
    name.strip_prefix(IN_FLIGHT_PREFIX)
        .and_then(Lane::from_name)
}

/// An in-flight limit as the CLI takes it and the limits hash stores it: an integer from
/// 1 to [`crate::options::MAX_IN_FLIGHT`]. Errors name the field.
pub fn parse_in_flight_limit(name: &str, text: &str) -> Result<i64, String> {
    let max = crate::options::MAX_IN_FLIGHT;
    match text.trim().parse::<i64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "{name}: {text:?} is not an integer from 1 to {max}"
        )),
    }
}

/// One bucket as the CLI takes it, the settings show it and the limits hash stores it:
/// `"<capacity>/<refill_per_second>"`. Errors name the option, as the constructor's do.
pub fn parse_bucket(lane: Lane, text: &str) -> Result<(i64, f64), String> {
    let name = lane.as_str();
    let (c, r) = text
        .split_once('/')
        .ok_or_else(|| format!("{name}: {text:?} is not CAPACITY/RATE"))?;
    let c = c
        .trim()
        .parse::<i64>()
        .map_err(|_| format!("{name}.capacity: {c:?} is not an integer"))?;
    let r = r
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{name}.refill_per_second: {r:?} is not a number"))?;
    Ok((c, r))
}

/// The live limits as stored: the version (`limits:v`, empty = none) and the hash's
/// fields; a key of another type reads as empty, with the hash's error.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    pub version: Vec<u8>,
    pub fields: Vec<(Vec<u8>, Vec<u8>)>,
    pub error: Option<String>,
}

impl Stored {
    /// What a worker decides with, and what could not be read (see
    /// [`LiveLimits::from_stored_lenient`]).
    pub fn parse(&self) -> (LiveLimits, Vec<String>) {
        let (live, mut errors) = LiveLimits::from_stored_lenient(&self.version, &self.fields);
        if let Some(e) = &self.error {
            errors.insert(0, format!("limits: {e}"));
        }
        (live, errors)
    }
}

/// How a bucket set is shown in events and by the CLI: `global=30/30 hot_lane=...`
/// (capacity / refill per second).
pub fn describe(set: &BucketSet) -> String {
    Lane::ALL
        .into_iter()
        .filter_map(|lane| {
            set.get(lane).map(|b| {
                format!(
                    "{}={}/{}",
                    lane.as_str(),
                    b.capacity(),
                    b.refill_per_second()
                )
            })
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The settings a worker publishes (the decision writes them to `settings` when the
/// stored ones differ) and the CLI reads back: the constructor's buckets as [`describe`]
/// shows them, then with `auto_hot` `auto_hot=<window s>s/<share>/<ttl s>s/<min tokens>`,
/// e.g. `global=30/30 hot_lane=25/25 auto_hot=10s/0.3/300s/31`. One codec: [`Self::encode`]
/// writes what [`Self::parse`] reads.
#[derive(Debug, Clone, PartialEq)]
pub struct PublishedSettings {
    pub buckets: BucketSet,
    pub auto_hot: Option<AutoHot>,
    /// The `mode` option the worker runs with: `mode=shadow` at the end when shadow,
    /// nothing when enforce (what workers before the mode published).
    pub mode: Mode,
    /// The `adaptive` option: `adaptive=<min_share>/<recover_seconds>s/<decrease>/<statuses>`
    /// (statuses comma-separated), e.g. `adaptive=0.1/60s/0.7/429,503`; nothing when off.
    /// The CLI computes the share in force from it (`AdaptState::permille_at`).
    pub adaptive: Option<Adaptive>,
    /// The `in_flight` option: `in_flight=<global>/<hot_lane>/<hot_shop>/<lease>s` (0: a
    /// level without a limit), e.g. `in_flight=40/0/10/30s`; nothing when off.
    pub in_flight: Option<InFlight>,
    /// The `endpoints` option: `endpoint.<name>=<capacity>/<rate>` each ([`describe_routes`]).
    pub endpoints: Endpoints,
    /// The `priorities` and `default_priority` options: `priorities.<class>=<share>` each,
    /// `default_priority=<class>`.
    pub priorities: Option<Priorities>,
}

impl PublishedSettings {
    /// The text a worker publishes.
    pub fn encode(buckets: &BucketSet, auto_hot: Option<&AutoHot>) -> String {
        let mut out = describe(buckets);
        if let Some(a) = auto_hot {
            out.push_str(&format!(
                " auto_hot={}s/{}/{}s/{}",
                a.window.as_secs_f64(),
                a.share,
                a.ttl_seconds,
                a.min_tokens
            ));
        }
        out
    }

    /// [`Self::encode`], with ` mode=shadow` when the `mode` option is shadow.
    pub fn encode_in(buckets: &BucketSet, auto_hot: Option<&AutoHot>, mode: Mode) -> String {
        Self::encode_all(buckets, auto_hot, None, mode)
    }

    /// [`Self::encode_in`] with the `adaptive` part (before the mode) when the option is on.
    pub fn encode_all(
        buckets: &BucketSet,
        auto_hot: Option<&AutoHot>,
        adaptive: Option<&Adaptive>,
        mode: Mode,
    ) -> String {
        let mut out = Self::encode(buckets, auto_hot);
        if let Some(a) = adaptive {
            let statuses: Vec<String> = a.statuses.iter().map(u16::to_string).collect();
            out.push_str(&format!(
                " adaptive={}/{}s/{}/{}",
                a.min_share,
                a.recover_seconds,
                a.decrease,
                statuses.join(",")
            ));
        }
        if mode == Mode::Shadow {
            out.push_str(" mode=shadow");
        }
        out
    }

    /// [`Self::encode_all`] with the `in_flight` part (at the end) when the option is on.
    pub fn encode_with_in_flight(
        buckets: &BucketSet,
        auto_hot: Option<&AutoHot>,
        adaptive: Option<&Adaptive>,
        mode: Mode,
        in_flight: Option<&InFlight>,
    ) -> String {
        let mut out = Self::encode_all(buckets, auto_hot, adaptive, mode);
        if let Some(f) = in_flight {
            let [g, l, s] = f.limits;
            out.push_str(&format!(
                " in_flight={g}/{l}/{s}/{}s",
                f.lease_us as f64 / 1e6
            ));
        }
        out
    }

    /// Published settings, validated as the constructor's options are. Parts that are no
    /// bucket are skipped (an older or newer worker's); an `auto_hot` part that does not
    /// read as one reads as off (it only tells the CLI which window to show).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut entries = Vec::new();
        let mut auto_hot = None;
        let mut adaptive = None;
        let mut in_flight = None;
        let mut mode = Mode::Enforce;
        let (mut endpoints, mut classes, mut default) = (Vec::new(), Vec::new(), None);
        for part in text.split_whitespace() {
            let Some((k, v)) = part.split_once('=') else {
                continue;
            };
            if k.starts_with(ENDPOINT_PREFIX) {
                let (name, (c, r)) =
                    parse_endpoint_field(k, v).map_err(|e| format!("published settings: {e}"))?;
                endpoints.push((name, bucket_value(c, r)));
            } else if k.starts_with(PRIORITIES_PREFIX) {
                let (class, share) =
                    parse_priority_field(k, v).map_err(|e| format!("published settings: {e}"))?;
                classes.push((class, Value::Float(share)));
            } else if k == "default_priority" {
                default = Some(Value::Str(v.as_bytes().to_vec()));
            } else if k == "mode" {
                mode = Mode::parse("mode", v.as_bytes()).unwrap_or(Mode::Enforce);
            } else if k == "auto_hot" {
                auto_hot = parse_auto_hot(v);
            } else if k == "adaptive" {
                adaptive = parse_adaptive(v);
            } else if k == "in_flight" {
                in_flight = parse_in_flight(v);
            } else if let Some(lane) = Lane::from_name(k) {
                let (c, r) =
                    parse_bucket(lane, v).map_err(|e| format!("published settings: {e}"))?;
                entries.push((k.to_string(), bucket_value(c, r)));
            }
        }
        let buckets = buckets_from_value(&Value::Map(entries))
            .map_err(|e| format!("published settings: {e}"))?;
        let endpoints = match endpoints.is_empty() {
            true => Endpoints::default(),
            false => endpoints_from_value(&Value::Map(endpoints), &buckets.global)
                .map_err(|e| format!("published settings: {e}"))?,
        };
        let priorities = match classes.is_empty() {
            true => None,
            false => priorities_from_value(Some(&Value::Map(classes)), default.as_ref())
                .map_err(|e| format!("published settings: {e}"))?,
        };
        Ok(Self {
            buckets,
            auto_hot,
            mode,
            adaptive,
            in_flight,
            endpoints,
            priorities,
        })
    }
}

/// `<global>/<hot_lane>/<hot_shop>/<lease>s` (a part that does not read as one reads as
/// off: it only tells the CLI the limits).
fn parse_in_flight(text: &str) -> Option<InFlight> {
    let mut parts = text.split('/');
    let mut limits = [0i64; 3];
    for l in &mut limits {
        *l = parts.next()?.parse().ok().filter(|n: &i64| *n >= 0)?;
    }
    let lease: f64 = parts.next()?.strip_suffix('s')?.parse().ok()?;
    if parts.next().is_some() || limits[0] < 1 || !(lease > 0.0 && lease.is_finite()) {
        return None;
    }
    Some(InFlight {
        limits,
        lease_us: (lease * 1e6).round() as i64,
    })
}

/// `<min_share>/<recover_seconds>s/<decrease>/<status,...>`, validated as the option (a
/// part that does not read as one reads as off: it only tells the CLI the share).
fn parse_adaptive(text: &str) -> Option<Adaptive> {
    let mut parts = text.split('/');
    let min_share: f64 = parts.next()?.parse().ok()?;
    let recover: f64 = parts.next()?.strip_suffix('s')?.parse().ok()?;
    let decrease: f64 = parts.next()?.parse().ok()?;
    let statuses = parts
        .next()?
        .split(',')
        .map(|s| s.parse::<i64>().ok().map(Value::Int))
        .collect::<Option<Vec<_>>>()?;
    if parts.next().is_some() {
        return None;
    }
    let v = Value::Map(vec![
        ("min_share".into(), Value::Float(min_share)),
        ("recover_seconds".into(), Value::Float(recover)),
        ("decrease".into(), Value::Float(decrease)),
        ("statuses".into(), Value::List(statuses)),
    ]);
    Adaptive::from_value(&v).ok().flatten()
}

/// `<window s>s/<share>/<ttl s>s/<min tokens>`, validated as the option.
fn parse_auto_hot(text: &str) -> Option<AutoHot> {
    let mut parts = text.split('/');
    let window: f64 = parts.next()?.strip_suffix('s')?.parse().ok()?;
    let share: f64 = parts.next()?.parse().ok()?;
    let ttl: i64 = parts.next()?.strip_suffix('s')?.parse().ok()?;
    let min_tokens: i64 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !window.is_finite() || window < 0.0 {
        return None;
    }
    AutoHot::new(
        std::time::Duration::from_secs_f64(window),
        share,
        ttl,
        min_tokens,
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_limits_are_read_applied_and_refused_naming_the_field() {
        let fields = |pairs: &[(&str, &str)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            pairs
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect()
        };
        let live = LiveLimits::from_stored(
            b"1-a-1",
            &fields(&[("in_flight.global", "5"), ("in_flight.hot_shop", "2")]),
        )
        .unwrap();
        assert_eq!(live.in_flight, [Some(5), None, Some(2)]);
        assert!(!live.is_empty());
        let set = BucketSet {
            global: checkout_guard_model::BucketSpec::new("global", 10, 10.0).unwrap(),
            hot_lane: None,
            hot_shop: Some(checkout_guard_model::BucketSpec::new("hot_shop", 5, 5.0).unwrap()),
        };
        let base = InFlight {
            limits: [20, 0, 4],
            lease_us: 30_000_000,
        };
        let f = live.apply_in_flight(Some(&base), &set).unwrap().unwrap();
        assert_eq!((f.limits, f.lease_us), ([5, 0, 2], 30_000_000));
        // A limiter without the option has no level to change.
        assert_eq!(
            live.apply_in_flight(None, &set).unwrap_err().option,
            "in_flight"
        );
        // No hot level above the global one, none without its bucket.
        let over =
            LiveLimits::from_stored(b"1-a-1", &fields(&[("in_flight.hot_shop", "21")])).unwrap();
        assert_eq!(
            over.apply_in_flight(Some(&base), &set).unwrap_err().option,
            "in_flight.hot_shop"
        );
        let lane =
            LiveLimits::from_stored(b"1-a-1", &fields(&[("in_flight.hot_lane", "1")])).unwrap();
        assert_eq!(
            lane.apply_in_flight(Some(&base), &set).unwrap_err().option,
            "in_flight.hot_lane"
        );
        for bad in [
            ("in_flight.global", "0"),
            ("in_flight.global", "x"),
            ("in_flight.burst", "3"),
        ] {
            let e = LiveLimits::from_stored(b"1-a-1", &fields(&[bad])).unwrap_err();
            assert!(e.contains(bad.0), "{bad:?}: {e}");
        }
        // The published settings carry the option.
        let text =
            PublishedSettings::encode_with_in_flight(&set, None, None, Mode::Enforce, Some(&base));
        assert!(text.ends_with(" in_flight=20/0/4/30s"), "{text}");
        assert_eq!(
            PublishedSettings::parse(&text).unwrap().in_flight,
            Some(base)
        );
    }
    #[test]
    fn endpoints_and_classes_are_read_applied_published_and_refused_naming_the_field() {
        let fields = |pairs: &[(&str, &str)]| -> Vec<(Vec<u8>, Vec<u8>)> {
            pairs
                .iter()
                .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
                .collect()
        };
        let global = BucketSpec::new("global", 100, 100.0).unwrap();
        let endpoints = Endpoints::new(vec![
            (
                "items".into(),
                BucketSpec::new("endpoints.items", 25, 25.0).unwrap(),
            ),
            (
                "charges.create".into(),
                BucketSpec::new("endpoints.charges.create", 25, 25.0).unwrap(),
            ),
        ]);
        let classes = Priorities::new(
            vec![("critical".into(), 0), ("normal".into(), 200_000)],
            Some("normal".into()),
        );
        let live = LiveLimits::from_stored(
            b"2-a-1",
            &fields(&[("endpoint.items", "10/5"), ("priorities.normal", "0.3")]),
        )
        .unwrap();
        assert!(!live.is_empty());
        let e = live.apply_endpoints(&endpoints, &global).unwrap();
        assert_eq!(
            e.get("items")
                .map(|b| (b.capacity(), b.refill_per_second())),
            Some((10, 5.0))
        );
        assert_eq!(e.get("charges.create").map(|b| b.capacity()), Some(25));
        let p = live.apply_priorities(Some(&classes)).unwrap().unwrap();
        assert_eq!(
            (p.share_ppm("normal"), p.default_class()),
            (Some(300_000), Some("normal"))
        );
        // An endpoint never above global in force (also when global is lowered live).
        let l = LiveLimits::from_stored(b"1-a-1", &fields(&[("endpoint.items", "101/1")])).unwrap();
        let err = l.apply_endpoints(&endpoints, &global).unwrap_err();
        assert!(err.option.starts_with("endpoint.items"), "{err}");
        // Another deploy's names (a rolling deploy) are not this worker's: ignored, the
        // rest applied.
        let l = LiveLimits::from_stored(
            b"1-a-1",
            &fields(&[
                ("endpoint.orders", "1/1"),
                ("endpoint.items", "2/2"),
                ("priorities.vip", "0.1"),
            ]),
        )
        .unwrap();
        let e = l.apply_endpoints(&endpoints, &global).unwrap();
        assert_eq!(
            (e.get("items").unwrap().capacity(), e.get("orders")),
            (2, None)
        );
        assert_eq!(
            l.apply_priorities(Some(&classes)).unwrap(),
            Some(classes.clone())
        );
        assert_eq!(l.apply_priorities(None).unwrap(), None);
        let small = BucketSpec::new("global", 20, 20.0).unwrap();
        let err = LiveLimits::default()
            .apply_endpoints(&endpoints, &small)
            .unwrap_err();
        assert!(err.option.starts_with("endpoint."), "{err}");
        for bad in [
            ("priorities.normal", "1"),
            ("priorities.normal", "-0.1"),
            ("priorities.normal", "x"),
            ("endpoint.items", "10"),
            ("endpoint.a b", "1/1"),
        ] {
            let e = LiveLimits::from_stored(b"1-a-1", &fields(&[bad])).unwrap_err();
            assert!(e.contains(bad.0), "{bad:?}: {e}");
        }
        // The published settings carry both, read back as the options.
        let set = BucketSet {
            global,
            hot_lane: None,
            hot_shop: None,
        };
        let text = PublishedSettings::encode_with_in_flight(&set, None, None, Mode::Enforce, None)
            + &describe_routes(&endpoints, Some(&classes));
        assert!(text.contains(" endpoint.charges.create=25/25 endpoint.items=25/25 priorities.critical=0 priorities.normal=0.2 default_priority=normal"), "{text}");
        let back = PublishedSettings::parse(&text).unwrap();
        assert_eq!(
            (back.endpoints, back.priorities),
            (endpoints, Some(classes))
        );
    }

    use checkout_guard_model::bucket::BucketSpec;

    fn base() -> BucketSet {
        BucketSet {
            global: BucketSpec::new("global", 30, 30.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 25, 25.0).unwrap()),
            hot_shop: None,
        }
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn overrides_apply_over_the_constructor_values() {
        let live = LiveLimits::from_stored(
            b"3-abc",
            &fields(&[
                ("by", "alice"),
                ("at", "1700000000000"),
                ("global", "60/45.5"),
            ]),
        )
        .unwrap();
        assert_eq!((live.version, live.by.as_str()), (3, "alice"));
        let set = live.apply(&base()).unwrap();
        assert_eq!(describe(&set), "global=60/45.5 hot_lane=25/25");
    }

    #[test]
    fn invalid_overrides_are_refused_like_constructor_options() {
        let refuse = |pairs: &[(&str, &str)]| {
            LiveLimits::from_stored(b"1-abc", &fields(pairs))
                .map_err(|e| e.to_string())
                .and_then(|l| l.apply(&base()).map_err(|e| e.to_string()))
                .unwrap_err()
        };
        // A hot lane above global, as the constructor refuses it.
        assert!(refuse(&[("global", "20/20")]).contains("hot_lane"));
        assert!(refuse(&[("global", "0/5")]).contains("global.capacity"));
        assert!(refuse(&[("global", "10/-1")]).contains("global.refill_per_second"));
        assert!(refuse(&[("hot_shop", "5/5")]).contains("not configured"));
        assert!(
            refuse(&[("global", "ten/5")]).contains("global.capacity: \"ten\" is not an integer")
        );
        assert!(refuse(&[("global", "10 5")]).contains("is not CAPACITY/RATE"));
        assert!(refuse(&[("bogus", "1/1")]).contains("unknown field"));
    }

    #[test]
    fn a_live_mode_is_read_and_a_bad_one_refused_by_name() {
        let live = LiveLimits::from_stored(b"4-abc", &fields(&[("mode", "shadow"), ("by", "bob")]))
            .unwrap();
        assert_eq!(live.mode, Some(Mode::Shadow));
        assert!(!live.is_empty());
        assert_eq!(live.mode_over(Mode::Enforce), Mode::Shadow);
        assert_eq!(describe(&live.apply(&base()).unwrap()), describe(&base()));
        let none = LiveLimits::from_stored(b"5-abc", &fields(&[("global", "60/60")])).unwrap();
        assert_eq!(none.mode_over(Mode::Shadow), Mode::Shadow);
        let err = LiveLimits::from_stored(b"6-abc", &fields(&[("mode", "dry")])).unwrap_err();
        assert!(err.contains("mode") && err.contains("dry"), "{err}");
    }

    #[test]
    fn versions_count_changes_and_epochs_differ() {
        assert_eq!(LiveLimits::from_stored(b"3-9f0c", &[]).unwrap().version, 3);
        let (live, errors) = LiveLimits::from_stored_lenient(
            b"2-x",
            &fields(&[("global", "lots"), ("hot_lane", "5/5"), ("bogus", "1")]),
        );
        assert_eq!(live.overrides[1], Some((5, 5.0)));
        assert_eq!(live.overrides[0], None);
        assert_eq!(errors.len(), 2, "{errors:?}");
    }

    #[test]
    fn published_settings_read_back_what_a_worker_wrote() {
        use crate::options::LimiterOptions;
        use crate::value::Value;
        let opts = |auto_hot: Value| {
            let v = Value::Map(vec![
                ("name".into(), Value::Str(b"p".to_vec())),
                ("global".into(), bucket_value(30, 30.5)),
                ("hot_lane".into(), bucket_value(25, 25.0)),
                ("auto_hot".into(), auto_hot),
            ]);
            LimiterOptions::from_value(&v, &crate::Defaults::default()).unwrap()
        };
        let window = |s: f64| {
            Value::Map(vec![
                ("window_seconds".into(), Value::Float(s)),
                ("share".into(), Value::Float(0.3)),
            ])
        };
        for o in [
            opts(Value::Bool(true)),
            opts(Value::Bool(false)),
            opts(window(2.5)),
            opts(window(1.001)),
            opts(window(3600.0)),
        ] {
            let text = PublishedSettings::encode(&o.buckets, o.auto_hot.as_ref());
            let back = PublishedSettings::parse(&text).unwrap();
            assert_eq!(back.buckets, o.buckets, "{text}");
            assert_eq!(back.auto_hot, o.auto_hot, "{text}");
        }
        let text = PublishedSettings::encode(
            &opts(Value::Bool(true)).buckets,
            opts(window(2.5)).auto_hot.as_ref(),
        );
        assert_eq!(
            text,
            "global=30/30.5 hot_lane=25/25 auto_hot=2.5s/0.3/300s/8"
        );
        // The mode: said when shadow only (enforce publishes what it always did).
        let o = opts(Value::Bool(true));
        let text = PublishedSettings::encode_in(&o.buckets, None, Mode::Shadow);
        assert_eq!(text, "global=30/30.5 hot_lane=25/25 mode=shadow");
        assert_eq!(PublishedSettings::parse(&text).unwrap().mode, Mode::Shadow);
        let text = PublishedSettings::encode_in(&o.buckets, None, Mode::Enforce);
        assert_eq!(text, "global=30/30.5 hot_lane=25/25");
        assert_eq!(PublishedSettings::parse(&text).unwrap().mode, Mode::Enforce);
        // Validated as the options are.
        assert!(PublishedSettings::parse("global=x/1").is_err());
        assert!(PublishedSettings::parse("hot_lane=5/5")
            .unwrap_err()
            .contains("global"));
        // An auto_hot the option would refuse reads as off; other parts are skipped.
        let p = PublishedSettings::parse("global=30/30 auto_hot=0.5s/0.3/300s/8 future=1").unwrap();
        assert_eq!(p.auto_hot, None);
        let p = PublishedSettings::parse("global=30/30 auto_hot=2s/0.3/300s/8").unwrap();
        assert_eq!(p.auto_hot.map(|a| a.window.as_micros()), Some(2_000_000));
    }

    /// The `adaptive` part: written before the mode, read back as the option it came
    /// from; one the option would refuse reads as off.
    #[test]
    fn published_adaptive_settings_round_trip() {
        let set = BucketSet {
            global: checkout_guard_model::bucket::BucketSpec::new("global", 30, 30.0).unwrap(),
            hot_lane: None,
            hot_shop: None,
        };
        let a = Adaptive {
            statuses: vec![429, 503],
            decrease: 0.7,
            recover_seconds: 60.0,
            min_share: 0.1,
        };
        let text = PublishedSettings::encode_all(&set, None, Some(&a), Mode::Shadow);
        assert_eq!(
            text,
            "global=30/30 adaptive=0.1/60s/0.7/429,503 mode=shadow"
        );
        let back = PublishedSettings::parse(&text).unwrap();
        assert_eq!((back.adaptive, back.mode), (Some(a.clone()), Mode::Shadow));
        let odd = Adaptive {
            statuses: vec![429],
            decrease: 0.55,
            recover_seconds: 0.25,
            min_share: 1.0,
        };
        let text = PublishedSettings::encode_all(&set, None, Some(&odd), Mode::Enforce);
        assert_eq!(PublishedSettings::parse(&text).unwrap().adaptive, Some(odd));
        assert_eq!(
            PublishedSettings::parse("global=30/30").unwrap().adaptive,
            None
        );
        for bad in [
            "0/60s/0.7/429",
            "0.1/60/0.7/429",
            "0.1/60s/1.5/429",
            "0.1/60s/0.7/200",
            "0.1/60s/0.7/",
        ] {
            let text = format!("global=30/30 adaptive={bad}");
            assert_eq!(
                PublishedSettings::parse(&text).unwrap().adaptive,
                None,
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        /// Whatever options a worker runs with, the CLI reads back its buckets and
        /// `auto_hot` from the text it published.
        #[test]
        fn published_settings_round_trip(
            caps in [1..=1000i64, 1..=1000i64, 1..=1000i64],
            rates in [0.01..=1000.0f64, 0.01..=1000.0f64, 0.01..=1000.0f64],
            lanes in [proptest::bool::ANY, proptest::bool::ANY],
            window_ms in proptest::option::of(1000..=3_600_000u64),
            share in 0.001..0.999f64,
            ttl in 1..=checkout_guard_model::MAX_TTL_SECONDS,
            min_tokens in 1..=1_000_000_000i64,
        ) {
            let mut entries = vec![("global".to_string(), bucket_value(caps[0], rates[0]))];
            for (i, lane) in [Lane::HotLane, Lane::HotShop].into_iter().enumerate() {
                if lanes[i] {
                    // No larger and no faster than global, as the options require.
                    let cap = caps[i + 1].min(caps[0]);
                    let rate = rates[i + 1].min(rates[0]);
                    entries.push((lane.as_str().to_string(), bucket_value(cap, rate)));
                }
            }
            let buckets = buckets_from_value(&Value::Map(entries)).unwrap();
            let auto_hot = window_ms.map(|ms| {
                AutoHot::new(std::time::Duration::from_millis(ms), share, ttl, min_tokens).unwrap()
            });
            let text = PublishedSettings::encode(&buckets, auto_hot.as_ref());
            let back = PublishedSettings::parse(&text).unwrap();
            proptest::prop_assert_eq!(&back.buckets, &buckets, "{}", text);
            proptest::prop_assert_eq!(back.auto_hot, auto_hot, "{}", text);
        }
    }
}
