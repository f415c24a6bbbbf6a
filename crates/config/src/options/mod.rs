//! Validation of the options array given to `new RateLimiter([...])`, and of the INI
//! defaults behind it. Everything that can be wrong is caught here, with a message naming
//! the option and the value.

use std::collections::HashSet;
use std::time::Duration;

mod adaptive;
mod auto_hot;
mod buckets;
mod checks;
mod defaults;
mod endpoints;
mod in_flight;

pub use adaptive::Adaptive;
pub use auto_hot::auto_hot_from_value;
pub use buckets::{bucket_value, buckets_from_value, buckets_to_value};
pub use checks::{validate_max_wait, validate_shop_id, validate_tokens, validate_ttl};
pub use defaults::Defaults;
pub use endpoints::{check_classes, endpoints_from_value, priorities_from_value, MAX_ENDPOINTS};
pub use in_flight::{in_flight_from_value, MAX_IN_FLIGHT};

use checkout_guard_model::bucket::BucketSet;
use checkout_guard_model::error::ConfigError;
use checkout_guard_model::AutoHot;

use crate::endpoint::Endpoint;
use crate::tls::tls_from_value;
use crate::value::{map_entries, option, quote_bytes, type_error, Value};

/// Longest shop ID, in bytes.
pub const MAX_SHOP_ID_BYTES: usize = 128;
/// Longest limiter name, in bytes.
const MAX_NAME_BYTES: usize = 64;
/// Most shops in `hot_shops`.
const MAX_HOT_SHOPS: usize = 10_000;
/// Longest `timeout_ms`.
const MAX_TIMEOUT_MS: i64 = 60_000;

/// What to do when Valkey cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnUnavailable {
    /// Let the checkout through (fail open): the provider's own limit still applies.
    Allow,
    /// Refuse the request (fail closed).
    Deny,
    /// Throw `UnavailableException`.
    Throw,
}

impl OnUnavailable {
    pub fn parse(option: &str, s: &[u8]) -> Result<Self, ConfigError> {
        match s {
            b"allow" => Ok(Self::Allow),
            b"deny" => Ok(Self::Deny),
            b"throw" => Ok(Self::Throw),
            _ => Err(ConfigError::new(
                option,
                format!(
                    "must be \"allow\", \"deny\" or \"throw\", got {}",
                    quote_bytes(s)
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Throw => "throw",
        }
    }
}

/// How long `engine = auto` goes on with the script on a connection whose server had no
/// usable `CG.DECIDE` before asking again (`COMMAND INFO`): a module loaded later
/// (`MODULE LOAD`, a reload after an unload) decides within this time, on a connection
/// that is never replaced too. A module that goes away is noticed at once, by its error
/// reply.
pub const MODULE_RECHECK_SECONDS: u64 = 5;

/// Which engine decides in Valkey.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The native module's `CG.DECIDE` where the server has it, the script elsewhere.
    Auto,
    /// Always the Lua script (works on every Valkey, managed services included).
    Lua,
    /// Always the module: a server without it cannot decide (`on_unavailable` applies).
    Module,
}

impl Engine {
    pub fn parse(option: &str, s: &[u8]) -> Result<Self, ConfigError> {
        match s {
            b"auto" => Ok(Self::Auto),
            b"lua" => Ok(Self::Lua),
            b"module" => Ok(Self::Module),
            _ => Err(ConfigError::new(
                option,
                format!(
                    "must be \"auto\", \"lua\" or \"module\", got {}",
                    quote_bytes(s)
                ),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Lua => "lua",
            Self::Module => "module",
        }
    }
}

/// Whether a limiter's denials are enforced (`mode`, `checkout_guard.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Denials are denials: `isAllowed()` is what the buckets say.
    Enforce,
    /// The same decision, the same buckets moved, but every call is let through:
    /// `isAllowed()` is always true and `wouldAllow()` says what enforcement would have
    /// answered.
    Shadow,
}

impl Mode {
    pub fn parse(option: &str, s: &[u8]) -> Result<Self, ConfigError> {
        match s {
            b"enforce" => Ok(Self::Enforce),
            b"shadow" => Ok(Self::Shadow),
            _ => Err(ConfigError::new(
                option,
                format!("must be \"enforce\" or \"shadow\", got {}", quote_bytes(s)),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Enforce => "enforce",
            Self::Shadow => "shadow",
        }
    }
}

/// A limiter's validated options.
#[derive(Debug, Clone)]
pub struct LimiterOptions {
    pub name: String,
    pub buckets: BucketSet,
    pub hot_shops: HashSet<Vec<u8>>,
    pub endpoint: Endpoint,
    pub timeout: Duration,
    pub on_unavailable: OnUnavailable,
    pub retry_interval: Duration,
    /// Deny in the worker what Valkey is certain to deny (INI only).
    pub local_denials: bool,
    /// Hot shops found by their share of the global bucket's consumption.
    pub auto_hot: Option<AutoHot>,
    /// Which engine decides.
    pub engine: Engine,
    /// Enforce its denials, or only report them (shadow); live limits may override it.
    pub mode: Mode,
    /// The budget follows the provider's throttling answers (`feedback()`).
    pub adaptive: Option<Adaptive>,
    /// At most so many calls in flight at once (leases beside the buckets).
    pub in_flight: Option<checkout_guard_model::InFlight>,
    /// Per-endpoint buckets under the global one (empty: none), docs/endpoints.md.
    pub endpoints: checkout_guard_model::Endpoints,
    /// Priority classes and the default class (`None`: no `priorities`).
    pub priorities: Option<checkout_guard_model::Priorities>,
}

const KNOWN: &[&str] = &[
    "name",
    "global",
    "hot_lane",
    "hot_shop",
    "hot_shops",
    "url",
    "timeout_ms",
    "on_unavailable",
    "auto_hot",
    "engine",
    "tls",
    "sentinel",
    "mode",
    "adaptive",
    "in_flight",
    "endpoints",
    "priorities",
    "default_priority",
];

impl LimiterOptions {
    /// Validates an options array. Unknown keys, missing `global`, out-of-range numbers,
    /// hot buckets larger than global and unusable URLs are errors naming the option.
    pub fn from_value(options: &Value, defaults: &Defaults) -> Result<Self, ConfigError> {
        let entries = map_entries("options", options)?;
        for (key, _) in entries {
            if !KNOWN.contains(&key.as_str()) {
                return Err(ConfigError::new(
                    quote_bytes(key.as_bytes()),
                    format!("is not a known option (known: {})", KNOWN.join(", ")),
                ));
            }
        }
        let get = |k: &str| option(entries, k);

        let name = match get("name") {
            None => "default".to_string(),
            Some(v) => validate_name(v)?,
        };
        let buckets = buckets_from_value(options)?;
        let auto_hot = match get("auto_hot") {
            None => None,
            Some(v) => auto_hot_from_value(v, &buckets.global)?,
        };
        let hot_shops = match get("hot_shops") {
            None => HashSet::new(),
            Some(v) => shop_list("hot_shops", v)?,
        };
        let url = match get("url") {
            None => defaults.url.clone(),
            Some(Value::Str(s)) => String::from_utf8(s.clone()).map_err(|_| {
                ConfigError::new("url", format!("must be UTF-8, got {}", quote_bytes(s)))
            })?,
            Some(v) => return Err(type_error("url", "a string", v)),
        };
        let mut endpoint = Endpoint::parse(&url).map_err(|msg| ConfigError::new("url", msg))?;
        let read = |path: &str| std::fs::read(path);
        if let Some(tls) = tls_from_value(get("tls"), &defaults.tls, endpoint.is_tls(), &read)? {
            endpoint = endpoint.with_tls(tls);
        }
        endpoint = sentinel_from_value(get("sentinel"), endpoint, defaults)?;
        let timeout_ms = match get("timeout_ms") {
            None => defaults.timeout_ms,
            Some(Value::Int(t)) if (1..=MAX_TIMEOUT_MS).contains(t) => *t,
            Some(v) => {
                return Err(ConfigError::new(
                    "timeout_ms",
                    format!(
                        "must be an integer from 1 to {MAX_TIMEOUT_MS}, got {}",
                        v.describe()
                    ),
                ))
            }
        };
        let on_unavailable = match get("on_unavailable") {
            None => defaults.on_unavailable,
            Some(Value::Str(s)) => OnUnavailable::parse("on_unavailable", s)?,
            Some(v) => {
                return Err(type_error(
                    "on_unavailable",
                    "\"allow\", \"deny\" or \"throw\"",
                    v,
                ))
            }
        };
        let engine = match get("engine") {
            None => defaults.engine,
            Some(Value::Str(s)) => Engine::parse("engine", s)?,
            Some(v) => return Err(type_error("engine", "\"auto\", \"lua\" or \"module\"", v)),
        };
        let mode = match get("mode") {
            None => defaults.mode,
            Some(Value::Str(s)) => Mode::parse("mode", s)?,
            Some(v) => return Err(type_error("mode", "\"enforce\" or \"shadow\"", v)),
        };
        let adaptive = match get("adaptive") {
            None => None,
            Some(v) => Adaptive::from_value(v)?,
        };
        let in_flight = match get("in_flight") {
            None => None,
            Some(v) => Some(in_flight_from_value(v, &buckets)?),
        };
        let endpoints = match get("endpoints") {
            None => checkout_guard_model::Endpoints::default(),
            Some(v) => endpoints_from_value(v, &buckets.global)?,
        };
        let priorities = priorities_from_value(get("priorities"), get("default_priority"))?;
        endpoints::check_classes(&buckets, &endpoints, priorities.as_ref())?;
        Ok(Self {
            endpoints,
            priorities,
            in_flight,
            adaptive,
            engine,
            mode,
            name,
            buckets,
            hot_shops,
            endpoint,
            timeout: Duration::from_millis(timeout_ms as u64),
            on_unavailable,
            retry_interval: Duration::from_millis(defaults.retry_interval_ms as u64),
            local_denials: defaults.local_denials,
            auto_hot,
        })
    }
}

/// The `sentinel` option (`['user' => NAME, 'password' => SECRET]`, both optional): the
/// sentinels' own credentials, for a `valkey+sentinel://` URL only; what it leaves out is
/// taken from the INI defaults (`checkout_guard.sentinel.*`, ignored for other URLs). The
/// password is never shown in an error.
pub fn sentinel_from_value(
    given: Option<&Value>,
    endpoint: Endpoint,
    defaults: &Defaults,
) -> Result<Endpoint, ConfigError> {
    let Some(v) = given else {
        if !endpoint.is_sentinel()
            || (defaults.sentinel_user.is_none() && defaults.sentinel_password.is_none())
        {
            return Ok(endpoint);
        }
        if defaults.sentinel_password.is_none() {
            return Err(sentinel_user_alone(SENTINEL_USER_INI));
        }
        return endpoint
            .with_sentinel_auth(
                defaults.sentinel_user.clone(),
                defaults.sentinel_password.clone(),
            )
            .map_err(|msg| ConfigError::new("sentinel", msg));
    };
    if !endpoint.is_sentinel() {
        return Err(ConfigError::new(
            "sentinel",
            "is for a Sentinel URL (valkey+sentinel://, redis+sentinel://, valkeys+sentinel://, rediss+sentinel://); the url is not one",
        ));
    }
    // The value is not shown: it may be the password given on its own. An empty PHP
    // array is a list (was refused as "must be an array ..., got array").
    let empty = matches!(v, Value::List(items) if items.is_empty());
    if !matches!(v, Value::Map(_)) && !empty {
        return Err(ConfigError::new(
            "sentinel",
            format!(
                "must be an array ['user' => NAME, 'password' => SECRET], got {}",
                v.type_name()
            ),
        ));
    }
    let entries = map_entries("sentinel", v)?;
    const FIELDS: &[&str] = &["user", "password"];
    for (key, _) in entries {
        if !FIELDS.contains(&key.as_str()) {
            return Err(ConfigError::new(
                format!("sentinel.{}", quote_bytes(key.as_bytes())),
                format!(
                    "is not a known sentinel option (known: {})",
                    FIELDS.join(", ")
                ),
            ));
        }
    }
    let string = |k: &str| -> Result<Option<String>, ConfigError> {
        let name = format!("sentinel.{k}");
        match option(entries, k) {
            None => Ok(None),
            Some(Value::Str(s)) if s.is_empty() => Err(ConfigError::new(
                name,
                "must not be empty (leave it out for sentinels without one)",
            )),
            Some(Value::Str(s)) => String::from_utf8(s.clone())
                .map(Some)
                .map_err(|_| ConfigError::new(name, "must be a UTF-8 string")),
            Some(v) if k == "password" => Err(ConfigError::new(
                name,
                format!("must be a string, got {}", v.type_name()),
            )),
            Some(v) => Err(type_error(&name, "a string", v)),
        }
    };
    let own_user = string("user")?;
    let user_from = if own_user.is_some() {
        "sentinel.user"
    } else {
        SENTINEL_USER_INI
    };
    let user = own_user.or_else(|| defaults.sentinel_user.clone());
    let password = string("password")?.or_else(|| defaults.sentinel_password.clone());
    if user.is_some() && password.is_none() {
        return Err(sentinel_user_alone(user_from));
    }
    endpoint
        .with_sentinel_auth(user, password)
        .map_err(|msg| ConfigError::new("sentinel", msg))
}

const SENTINEL_USER_INI: &str = "checkout_guard.sentinel.user";

/// A sentinels' user without a password (from `option`): no AUTH could be sent with it
/// (AUTH takes a password; a user alone would silently authenticate as no one), so it is
/// refused rather than ignored.
fn sentinel_user_alone(option: &str) -> ConfigError {
    ConfigError::new(
        option,
        "is given without a password: the sentinels' AUTH needs both (give sentinel.password or checkout_guard.sentinel.password, or leave the user out for sentinels with a password only)",
    )
}

pub fn validate_name(v: &Value) -> Result<String, ConfigError> {
    let ok = |s: &[u8]| {
        !s.is_empty()
            && s.len() <= MAX_NAME_BYTES
            && s.iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
    };
    match v {
        Value::Str(s) if ok(s) => Ok(String::from_utf8(s.clone()).expect("ASCII")),
        Value::Str(s) => Err(ConfigError::new(
            "name",
            format!(
                "must be 1 to {MAX_NAME_BYTES} characters from A-Z a-z 0-9 _ . : -, got {}",
                quote_bytes(s)
            ),
        )),
        v => Err(type_error("name", "a string", v)),
    }
}

fn shop_list(option: &str, v: &Value) -> Result<HashSet<Vec<u8>>, ConfigError> {
    let items: Vec<&Value> = match v {
        Value::List(items) => items.iter().collect(),
        Value::Map(entries) => entries.iter().map(|(_, v)| v).collect(),
        v => return Err(type_error(option, "a list of shop IDs", v)),
    };
    if items.len() > MAX_HOT_SHOPS {
        return Err(ConfigError::new(
            option,
            format!(
                "may list at most {MAX_HOT_SHOPS} shops, got {}",
                items.len()
            ),
        ));
    }
    let mut set = HashSet::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        match item {
            Value::Str(s) => {
                validate_shop_id(s)
                    .map_err(|e| ConfigError::new(format!("{option}[{i}]"), e.message))?;
                set.insert(s.clone());
            }
            Value::Int(n) => {
                // PHP turns numeric string keys into ints; accept an int shop ID as its digits.
                set.insert(n.to_string().into_bytes());
            }
            v => return Err(type_error(&format!("{option}[{i}]"), "a string", v)),
        }
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;
    use checkout_guard_model::bucket::BucketSpec;
    use checkout_guard_model::MAX_TTL_SECONDS;

    /// The constructor's doc (the PHP stubs, generated from `src/rate_limiter.rs`) names
    /// every option the constructor takes.
    #[test]
    fn the_constructors_doc_names_every_option() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../stubs/checkout_guard.stubs.php"
        );
        let stubs = std::fs::read_to_string(path).expect("the PHP stubs");
        let doc = stubs
            .split("class RateLimiter ")
            .nth(1)
            .and_then(|s| s.split("public function __construct").next())
            .expect("RateLimiter::__construct's doc in the stubs");
        let listed = doc
            .split("Options:")
            .nth(1)
            .and_then(|s| s.split('(').next())
            .expect("an `Options: a, b, c (see the README)` line");
        let listed: Vec<&str> = listed
            .split(|c: char| c == ',' || c.is_whitespace() || c == '*')
            .filter(|w| !w.is_empty())
            .collect();
        for option in KNOWN {
            assert!(
                listed.contains(option),
                "the constructor's doc does not name `{option}` (lists {listed:?})"
            );
        }
    }

    fn map(entries: &[(&str, Value)]) -> Value {
        Value::Map(
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn bucket_v(capacity: i64, rate: f64) -> Value {
        map(&[
            ("capacity", Value::Int(capacity)),
            ("refill_per_second", Value::Float(rate)),
        ])
    }

    fn parse(entries: &[(&str, Value)]) -> Result<LimiterOptions, ConfigError> {
        LimiterOptions::from_value(&map(entries), &Defaults::default())
    }

    fn err(entries: &[(&str, Value)]) -> ConfigError {
        parse(entries).expect_err("should be rejected")
    }

    #[test]
    fn minimal_options_take_the_defaults() {
        let o = parse(&[("global", bucket_v(100, 50.0))]).unwrap();
        assert_eq!(o.name, "default");
        assert_eq!(o.buckets.global.capacity(), 100);
        assert!(o.buckets.hot_lane.is_none() && o.buckets.hot_shop.is_none());
        assert_eq!(o.timeout, Duration::from_millis(50));
        assert_eq!(o.on_unavailable, OnUnavailable::Allow);
        assert_eq!(o.retry_interval, Duration::from_millis(1000));
        assert_eq!(o.endpoint.display_url(), "redis://127.0.0.1:6379");
    }

    #[test]
    fn full_options() {
        let o = parse(&[
            ("name", "payments".into()),
            ("global", bucket_v(100, 50.0)),
            ("hot_lane", bucket_v(80, 40.0)),
            (
                "hot_shop",
                map(&[
                    ("capacity", Value::Int(30)),
                    ("refill_per_second", Value::Int(15)),
                ]),
            ),
            (
                "hot_shops",
                Value::List(vec!["shop-a".into(), Value::Int(42)]),
            ),
            ("url", "redis://127.0.0.1:7000/2".into()),
            ("timeout_ms", Value::Int(20)),
            ("on_unavailable", "deny".into()),
        ])
        .unwrap();
        assert_eq!(o.name, "payments");
        assert_eq!(o.buckets.hot_shop.unwrap().refill_per_second(), 15.0);
        assert!(o.hot_shops.contains(&b"shop-a"[..]) && o.hot_shops.contains(&b"42"[..]));
        assert_eq!(o.on_unavailable, OnUnavailable::Deny);
        assert_eq!(o.timeout, Duration::from_millis(20));
    }

    /// Each bad input is rejected with a message naming the option and the value.
    #[test]
    fn bad_options_name_the_option_and_value() {
        let g = || ("global", bucket_v(10, 5.0));
        type Case<'a> = (Vec<(&'a str, Value)>, &'a str, &'a str);
        let cases: Vec<Case> = vec![
            (
                vec![g(), ("capcity", Value::Int(1))],
                "\"capcity\"",
                "not a known option",
            ),
            (vec![], "global", "is required"),
            (
                vec![("global", bucket_v(0, 5.0))],
                "global.capacity",
                "got 0",
            ),
            (
                vec![("global", bucket_v(10, -1.0))],
                "global.refill_per_second",
                "got -1.0",
            ),
            (
                vec![(
                    "global",
                    map(&[
                        ("capacity", Value::Float(2.5)),
                        ("refill_per_second", Value::Int(1)),
                    ]),
                )],
                "global.capacity",
                "got float 2.5",
            ),
            (
                vec![(
                    "global",
                    map(&[
                        ("capacity", Value::Int(2)),
                        ("refill_per_second", Value::Int(1)),
                        ("burst", Value::Int(1)),
                    ]),
                )],
                "global.burst",
                "not a known option",
            ),
            (
                vec![("global", map(&[("capacity", Value::Int(2))]))],
                "global.refill_per_second",
                "is required",
            ),
            (
                vec![g(), ("hot_lane", bucket_v(11, 5.0))],
                "hot_lane.capacity",
                "got 11",
            ),
            (
                vec![g(), ("hot_lane", bucket_v(10, 5.5))],
                "hot_lane.refill_per_second",
                "got 5.5",
            ),
            (
                vec![g(), ("hot_shop", bucket_v(20, 1.0))],
                "hot_shop.capacity",
                "got 20",
            ),
            (vec![g(), ("name", "a{b}".into())], "name", "\"a{b}\""),
            (vec![g(), ("name", "".into())], "name", "got \"\""),
            (vec![g(), ("name", Value::Int(3))], "name", "got int 3"),
            (
                vec![
                    g(),
                    ("hot_shops", Value::List(vec!["ok".into(), "bad\n".into()])),
                ],
                "hot_shops[1]",
                "control",
            ),
            (
                vec![g(), ("hot_shops", "shop".into())],
                "hot_shops",
                "a list",
            ),
            (
                vec![g(), ("url", "http://example".into())],
                "url",
                "http://example",
            ),
            (vec![g(), ("url", Value::Int(6379))], "url", "got int 6379"),
            (
                vec![g(), ("timeout_ms", Value::Int(0))],
                "timeout_ms",
                "got 0",
            ),
            (
                vec![g(), ("timeout_ms", "50".into())],
                "timeout_ms",
                "got \"50\"",
            ),
            (
                vec![g(), ("on_unavailable", "maybe".into())],
                "on_unavailable",
                "got \"maybe\"",
            ),
        ];
        for (entries, option, needle) in cases {
            let e = err(&entries);
            assert_eq!(e.option, option, "{e}");
            assert!(
                e.to_string().contains(needle),
                "{e} should contain {needle}"
            );
        }
    }

    #[test]
    fn sentinel_options_go_with_a_sentinel_url_only() {
        let auth = map(&[("user", "sen".into()), ("password", "hunter2".into())]);
        let o = parse(&[
            ("global", bucket_v(1, 1.0)),
            ("url", "valkey+sentinel://app:pw@h:26379/orders".into()),
            ("sentinel", auth.clone()),
        ])
        .unwrap();
        let crate::endpoint::Target::Sentinel(s) = o.endpoint.target() else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(s.user.as_deref(), Some("sen"));
        assert_eq!(s.password.as_deref(), Some("hunter2"));
        // The INI defaults fill in what the option leaves out, and only for a Sentinel URL.
        let defaults = Defaults::default().with_sentinel(Some("ini-user"), Some("ini-pw"));
        let with = |url: &str, sentinel: Option<Value>| {
            let mut entries = vec![("global", bucket_v(1, 1.0)), ("url", url.into())];
            if let Some(v) = sentinel {
                entries.push(("sentinel", v));
            }
            LimiterOptions::from_value(&map(&entries), &defaults).unwrap()
        };
        let o = with(
            "valkey+sentinel://h:1/m",
            Some(map(&[("user", "own".into())])),
        );
        let crate::endpoint::Target::Sentinel(s) = o.endpoint.target() else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("own"), Some("ini-pw"))
        );
        let o = with("valkey+sentinel://h:1/m", None);
        let crate::endpoint::Target::Sentinel(s) = o.endpoint.target() else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(s.user.as_deref(), Some("ini-user"));
        // A user without a password anywhere sends no AUTH: refused, named where it came
        // from (the option, else the INI); a password alone is fine (requirepass).
        let user_only = Defaults::default().with_sentinel(Some("ini-user"), None);
        let sentinel_url = |sentinel: Option<Value>, defaults: &Defaults| {
            let mut entries = vec![
                ("global", bucket_v(1, 1.0)),
                ("url", "valkey+sentinel://h:1/m".into()),
            ];
            if let Some(v) = sentinel {
                entries.push(("sentinel", v));
            }
            LimiterOptions::from_value(&map(&entries), defaults)
        };
        for (sentinel, defaults, option) in [
            (
                Some(map(&[("user", "own".into())])),
                Defaults::default(),
                "sentinel.user",
            ),
            (None, user_only.clone(), "checkout_guard.sentinel.user"),
            (
                Some(map(&[])),
                user_only.clone(),
                "checkout_guard.sentinel.user",
            ),
            (
                Some(Value::List(vec![])),
                user_only.clone(),
                "checkout_guard.sentinel.user",
            ),
            (
                Some(map(&[("user", "own".into())])),
                user_only.clone(),
                "sentinel.user",
            ),
        ] {
            let e = sentinel_url(sentinel.clone(), &defaults).unwrap_err();
            assert_eq!(e.option, option, "{sentinel:?}: {e}");
            assert!(e.to_string().contains("without a password"), "{e}");
        }
        let o = sentinel_url(
            Some(map(&[("password", "pw".into())])),
            &Defaults::default(),
        )
        .unwrap();
        let crate::endpoint::Target::Sentinel(s) = o.endpoint.target() else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (None, Some("pw"))
        );
        // The INI's user with the option's password.
        let o = sentinel_url(Some(map(&[("password", "pw".into())])), &user_only).unwrap();
        let crate::endpoint::Target::Sentinel(s) = o.endpoint.target() else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("ini-user"), Some("pw"))
        );
        assert!(!with("redis://h:1", None).endpoint.is_sentinel());
        type Case<'a> = (Vec<(&'a str, Value)>, &'a str, &'a str);
        let cases: Vec<Case> = vec![
            (
                vec![("url", "redis://h:1".into()), ("sentinel", auth.clone())],
                "sentinel",
                "Sentinel URL",
            ),
            (
                vec![
                    ("url", "valkey+sentinel://h:1/m".into()),
                    ("sentinel", map(&[("pass", "x".into())])),
                ],
                "sentinel.\"pass\"",
                "known",
            ),
            (
                vec![
                    ("url", "valkey+sentinel://h:1/m".into()),
                    ("sentinel", map(&[("user", Value::Int(3))])),
                ],
                "sentinel.user",
                "a string",
            ),
            (
                vec![
                    ("url", "valkey+sentinel://h:1/m".into()),
                    ("sentinel", map(&[("password", "".into())])),
                ],
                "sentinel.password",
                "empty",
            ),
            (
                vec![
                    ("url", "valkey+sentinel://h:1/m".into()),
                    ("sentinel", "hunter2".into()),
                ],
                "sentinel",
                "",
            ),
        ];
        for (mut entries, option, needle) in cases {
            entries.push(("global", bucket_v(1, 1.0)));
            let e = err(&entries);
            assert_eq!(e.option, option, "{e}");
            assert!(e.to_string().contains(needle), "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn tls_options_go_with_a_tls_url_only() {
        let dir = std::env::temp_dir().join(format!("cg-tls-opts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, crate::tls::tests::CERT).unwrap();
        let ca = ca.to_str().unwrap().to_string();
        let tls = map(&[
            ("cafile", ca.as_str().into()),
            ("peer_name", "cache".into()),
        ]);
        let o = parse(&[
            ("global", bucket_v(1, 1.0)),
            ("url", "rediss://h:6380".into()),
            ("tls", tls.clone()),
        ])
        .unwrap();
        let t = o.endpoint.tls().expect("TLS settings");
        assert_eq!(t.cafile.as_ref().unwrap().path, ca);
        assert_eq!(t.peer_name.as_deref(), Some("cache"));
        // The INI defaults apply to a TLS URL given without the option.
        let defaults = Defaults::default().with_tls(Some(&ca), None, None, None);
        let o = LimiterOptions::from_value(
            &map(&[
                ("global", bucket_v(1, 1.0)),
                ("url", "valkeys+cluster://h:7000".into()),
            ]),
            &defaults,
        )
        .unwrap();
        assert_eq!(o.endpoint.tls().unwrap().cafile.as_ref().unwrap().path, ca);
        // ... and not to a plain one; the option on a plain URL is an error.
        let o =
            LimiterOptions::from_value(&map(&[("global", bucket_v(1, 1.0))]), &defaults).unwrap();
        assert!(o.endpoint.tls().is_none());
        let e = err(&[("global", bucket_v(1, 1.0)), ("tls", tls)]);
        assert_eq!(e.option, "tls", "{e}");
        let missing = dir.join("missing.pem");
        let e = err(&[
            ("global", bucket_v(1, 1.0)),
            ("url", "rediss://h:6380".into()),
            (
                "tls",
                map(&[
                    ("local_cert", missing.to_str().unwrap().into()),
                    ("local_pk", ca.as_str().into()),
                ]),
            ),
        ]);
        assert_eq!(e.option, "tls.local_cert", "{e}");
        assert!(e.message.contains("missing.pem"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn non_map_options_are_rejected() {
        let e = LimiterOptions::from_value(&Value::Int(1), &Defaults::default()).unwrap_err();
        assert_eq!(e.option, "options");
        let e = LimiterOptions::from_value(&Value::List(vec![]), &Defaults::default()).unwrap_err();
        assert_eq!(e.option, "global");
    }

    #[test]
    fn password_in_a_bad_url_is_masked() {
        let e = err(&[
            ("global", bucket_v(1, 1.0)),
            ("url", "redis://user:s3cret@:notaport".into()),
        ]);
        assert!(!e.to_string().contains("s3cret"), "{e}");
    }

    #[test]
    fn shop_ids_tokens_and_ttl() {
        assert!(validate_shop_id(b"shop-1").is_ok());
        assert!(validate_shop_id("ショップ{1}:x y".as_bytes()).is_ok());
        assert!(validate_shop_id(b"\xff\xfe").is_ok());
        assert!(validate_shop_id(&[b'a'; 128]).is_ok());
        for bad in [&b""[..], &[b'a'; 129], b"a\tb", b"\x7f", b"a\0"] {
            let e = validate_shop_id(bad).unwrap_err();
            assert_eq!(e.option, "shopId");
        }
        let set = BucketSet {
            global: BucketSpec::new("global", 10, 1.0).unwrap(),
            hot_lane: Some(BucketSpec::new("hot_lane", 5, 1.0).unwrap()),
            hot_shop: None,
        };
        assert!(validate_tokens(5, &set).is_ok());
        let e = validate_tokens(6, &set).unwrap_err();
        assert!(e.to_string().contains("from 1 to 5") && e.to_string().contains("got 6"));
        assert!(validate_tokens(0, &set).is_err());
        assert!(
            validate_ttl(1).is_ok()
                && validate_ttl(0).is_err()
                && validate_ttl(MAX_TTL_SECONDS + 1).is_err()
        );
    }

    #[test]
    fn ini_defaults_are_validated_naming_the_setting() {
        let d = Defaults::from_ini(
            Some("redis://10.0.0.1:6380"),
            Some("25"),
            Some("deny"),
            Some("0"),
        )
        .unwrap();
        assert_eq!(
            (d.timeout_ms, d.on_unavailable, d.retry_interval_ms),
            (25, OnUnavailable::Deny, 0)
        );
        let e = Defaults::from_ini(None, Some("abc"), None, None).unwrap_err();
        assert_eq!(e.option, "checkout_guard.timeout_ms");
        let e = Defaults::from_ini(None, None, Some("open"), None).unwrap_err();
        assert_eq!(e.option, "checkout_guard.on_unavailable");
        let e = Defaults::from_ini(None, None, None, Some("-1")).unwrap_err();
        assert_eq!(e.option, "checkout_guard.retry_interval_ms");
        let d = Defaults::default();
        assert!(d.local_denials);
        assert!(
            !d.clone()
                .with_local_denials(Some(" Off "))
                .unwrap()
                .local_denials
        );
        assert!(
            d.clone()
                .with_local_denials(Some("1"))
                .unwrap()
                .local_denials
        );
        assert!(d.clone().with_local_denials(None).unwrap().local_denials);
        let e = d.with_local_denials(Some("sometimes")).unwrap_err();
        assert_eq!(e.option, "checkout_guard.local_denials");
        assert!(e.to_string().contains("\"sometimes\""), "{e}");
    }

    #[test]
    fn endpoints_and_priorities_are_options_of_the_limiter() {
        let g = || ("global", bucket_v(100, 100.0));
        let o = parse(&[g()]).unwrap();
        assert!(o.endpoints.is_empty() && o.priorities.is_none());
        let o = parse(&[
            g(),
            (
                "endpoints",
                Value::Map(vec![("charges.confirm".into(), bucket_v(25, 25.0))]),
            ),
            (
                "priorities",
                Value::Map(vec![
                    ("critical".into(), Value::Float(0.0)),
                    ("normal".into(), Value::Float(0.2)),
                ]),
            ),
            ("default_priority", "normal".into()),
        ])
        .unwrap();
        assert_eq!(o.endpoints.get("charges.confirm").unwrap().capacity(), 25);
        let p = o.priorities.unwrap();
        assert_eq!(
            (p.share_ppm("normal"), p.default_class()),
            (Some(200_000), Some("normal"))
        );
        // An endpoint above global is refused naming it; the options stay known.
        let e = err(&[
            g(),
            (
                "endpoints",
                Value::Map(vec![("items".into(), bucket_v(200, 25.0))]),
            ),
        ]);
        assert_eq!(e.option, "endpoints.items.capacity", "{e}");
        assert!(e.to_string().contains("got 200"), "{e}");
        let e = err(&[g(), ("default_priority", "normal".into())]);
        assert_eq!(e.option, "default_priority", "{e}");
    }

    #[test]
    fn mode_is_enforce_by_default_and_shadow_on_request() {
        let g = || ("global", bucket_v(10, 10.0));
        assert_eq!(parse(&[g()]).unwrap().mode, Mode::Enforce);
        assert_eq!(
            parse(&[g(), ("mode", "shadow".into())]).unwrap().mode,
            Mode::Shadow
        );
        let e = err(&[g(), ("mode", "dry-run".into())]);
        assert_eq!(e.option, "mode");
        assert!(e.to_string().contains("\"dry-run\""), "{e}");
        let e = err(&[g(), ("mode", Value::Int(1))]);
        assert_eq!(e.option, "mode");
        // The INI default of every limiter; the option overrides it.
        let shadow = Defaults::default().with_mode(Some(" shadow ")).unwrap();
        let o = LimiterOptions::from_value(&map(&[g()]), &shadow).unwrap();
        assert_eq!(o.mode, Mode::Shadow);
        let o =
            LimiterOptions::from_value(&map(&[g(), ("mode", "enforce".into())]), &shadow).unwrap();
        assert_eq!(o.mode, Mode::Enforce);
        let e = Defaults::default().with_mode(Some("Shadow")).unwrap_err();
        assert_eq!(e.option, "checkout_guard.mode");
        assert!(e.to_string().contains("\"Shadow\""), "{e}");
    }
}
