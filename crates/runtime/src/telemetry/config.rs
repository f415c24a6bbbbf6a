//! Telemetry settings, from the INI entries `checkout_guard.events.*`.

use checkout_guard_config::settings::{
    Setting, EVENTS_BUFFER_SIZE, EVENTS_STREAM_KEY, EVENTS_STREAM_MAXLEN,
};
use checkout_guard_config::tls::tls_from_value;
use checkout_guard_config::value::quote_bytes;
use checkout_guard_config::{Endpoint, TlsDefaults};
use checkout_guard_model::ConfigError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkKind {
    /// `newrelic_record_custom_event()` of the New Relic PHP agent.
    NewRelic,
    /// One JSON object a line, appended to a file.
    Jsonl,
    /// XADD to a Valkey stream.
    Stream,
}

impl SinkKind {
    pub fn name(self) -> &'static str {
        match self {
            SinkKind::NewRelic => "newrelic",
            SinkKind::Jsonl => "jsonl",
            SinkKind::Stream => "stream",
        }
    }
}

/// Validated telemetry settings. Telemetry is on when at least one sink is configured.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    pub sinks: Vec<SinkKind>,
    pub jsonl_path: Option<String>,
    pub stream: Option<Endpoint>,
    pub stream_key: String,
    pub stream_maxlen: i64,
    pub buffer_size: usize,
}

/// Raw INI strings, as PHP holds them.
#[derive(Debug, Default, Clone)]
pub struct RawTelemetryIni<'a> {
    pub sinks: Option<&'a str>,
    pub jsonl_path: Option<&'a str>,
    pub stream_url: Option<&'a str>,
    pub stream_key: Option<&'a str>,
    pub stream_maxlen: Option<&'a str>,
    pub buffer_size: Option<&'a str>,
    /// `checkout_guard.tls.*`: the stream sink's TLS settings when its URL is a TLS one.
    pub tls: TlsDefaults,
    /// `checkout_guard.sentinel.*`: the sentinels' own credentials when the stream sink's
    /// URL is a Sentinel one.
    pub sentinel_user: Option<&'a str>,
    pub sentinel_password: Option<&'a str>,
}

impl TelemetryConfig {
    /// Validates the settings; errors name the INI setting. `default_url` is
    /// `checkout_guard.url`, used by the stream sink when `events.stream_url` is empty.
    pub fn from_ini(raw: &RawTelemetryIni<'_>, default_url: &str) -> Result<Self, ConfigError> {
        let mut sinks = Vec::new();
        for name in raw
            .sinks
            .unwrap_or("")
            .split([',', ' '])
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let kind = match name {
                "newrelic" => SinkKind::NewRelic,
                "jsonl" => SinkKind::Jsonl,
                "stream" => SinkKind::Stream,
                other => {
                    return Err(ConfigError::new(
                        "checkout_guard.events.sinks",
                        format!(
                            "lists unknown sink {} (known: newrelic, jsonl, stream)",
                            quote_bytes(other.as_bytes())
                        ),
                    ))
                }
            };
            if !sinks.contains(&kind) {
                sinks.push(kind);
            }
        }
        let nonempty = |s: Option<&str>| {
            s.map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let jsonl_path = nonempty(raw.jsonl_path);
        if sinks.contains(&SinkKind::Jsonl) && jsonl_path.is_none() {
            return Err(ConfigError::new(
                "checkout_guard.events.jsonl_path",
                "must name a file when the jsonl sink is on, got \"\"",
            ));
        }
        let stream = if sinks.contains(&SinkKind::Stream) {
            let url = nonempty(raw.stream_url).unwrap_or_else(|| default_url.to_string());
            let endpoint = Endpoint::parse(&url)
                .map_err(|m| ConfigError::new("checkout_guard.events.stream_url", m))?;
            // A TLS URL is verified with the INI's `checkout_guard.tls.*` (the errors
            // name them); a plain one does not read them.
            let read = |path: &str| std::fs::read(path);
            let endpoint = match tls_from_value(None, &raw.tls, endpoint.is_tls(), &read)? {
                Some(tls) => endpoint.with_tls(tls),
                None => endpoint,
            };
            // A Sentinel URL's sentinels get `checkout_guard.sentinel.*` (other URLs
            // ignore them).
            let set = |v: Option<&str>| v.filter(|v| !v.trim().is_empty()).map(str::to_string);
            let (user, password) = (set(raw.sentinel_user), set(raw.sentinel_password));
            if endpoint.is_sentinel() && user.is_some() && password.is_none() {
                // No AUTH could be sent with a user alone (as the limiter's option).
                return Err(ConfigError::new(
                    "checkout_guard.sentinel.user",
                    "is given without a password: the sentinels' AUTH needs both (set checkout_guard.sentinel.password, or leave the user out for sentinels with a password only)",
                ));
            }
            Some(
                if endpoint.is_sentinel() && (user.is_some() || password.is_some()) {
                    endpoint
                        .with_sentinel_auth(user, password)
                        .map_err(|m| ConfigError::new("checkout_guard.events.stream_url", m))?
                } else {
                    endpoint
                },
            )
        } else {
            None
        };
        let stream_key =
            nonempty(raw.stream_key).unwrap_or_else(|| EVENTS_STREAM_KEY.default().into());
        // The built-in values come from the one table; they parse (checked by a test).
        let builtin = |s: Setting| s.default().parse::<i64>().unwrap_or(1);
        let int =
            |name: &str, raw: Option<&str>, default: i64, max: i64| -> Result<i64, ConfigError> {
                match raw.map(str::trim).filter(|s| !s.is_empty()) {
                    None => Ok(default),
                    Some(s) => s
                        .parse::<i64>()
                        .ok()
                        .filter(|v| (1..=max).contains(v))
                        .ok_or_else(|| {
                            ConfigError::new(
                                name,
                                format!(
                                    "must be an integer from 1 to {max}, got {}",
                                    quote_bytes(s.as_bytes())
                                ),
                            )
                        }),
                }
            };
        Ok(Self {
            sinks,
            jsonl_path,
            stream,
            stream_key,
            stream_maxlen: int(
                "checkout_guard.events.stream_maxlen",
                raw.stream_maxlen,
                builtin(EVENTS_STREAM_MAXLEN),
                1_000_000_000,
            )?,
            buffer_size: int(
                "checkout_guard.events.buffer_size",
                raw.buffer_size,
                builtin(EVENTS_BUFFER_SIZE),
                100_000,
            )? as usize,
        })
    }

    pub fn enabled(&self) -> bool {
        !self.sinks.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_validates() {
        let c = TelemetryConfig::from_ini(&RawTelemetryIni::default(), "redis://127.0.0.1:6379")
            .unwrap();
        assert!(!c.enabled());
        assert_eq!((c.buffer_size, c.stream_maxlen), (1000, 100_000));
        let raw = RawTelemetryIni {
            sinks: Some("jsonl, stream,newrelic,jsonl"),
            jsonl_path: Some("/tmp/e.jsonl"),
            buffer_size: Some("50"),
            ..Default::default()
        };
        let c = TelemetryConfig::from_ini(&raw, "redis://127.0.0.1:6379").unwrap();
        assert_eq!(
            c.sinks,
            vec![SinkKind::Jsonl, SinkKind::Stream, SinkKind::NewRelic]
        );
        assert_eq!(c.stream.unwrap().display_url(), "redis://127.0.0.1:6379");
        assert_eq!(c.buffer_size, 50);

        let bad =
            |raw: RawTelemetryIni| TelemetryConfig::from_ini(&raw, "redis://x:1").unwrap_err();
        let e = bad(RawTelemetryIni {
            sinks: Some("jsonl,kafka"),
            jsonl_path: Some("/tmp/x"),
            ..Default::default()
        });
        assert!(
            e.to_string()
                .contains("checkout_guard.events.sinks lists unknown sink \"kafka\""),
            "{e}"
        );
        let e = bad(RawTelemetryIni {
            sinks: Some("jsonl"),
            ..Default::default()
        });
        assert_eq!(e.option, "checkout_guard.events.jsonl_path");
        let e = bad(RawTelemetryIni {
            buffer_size: Some("0"),
            ..Default::default()
        });
        assert_eq!(e.option, "checkout_guard.events.buffer_size");
        let e = bad(RawTelemetryIni {
            sinks: Some("stream"),
            stream_url: Some("http://x"),
            ..Default::default()
        });
        assert_eq!(e.option, "checkout_guard.events.stream_url");
        // The stream's TLS URL takes the INI's TLS settings.
        let tls = |cafile: &str| RawTelemetryIni {
            sinks: Some("stream"),
            stream_url: Some("rediss://cache.internal:6380"),
            tls: TlsDefaults::from_ini(Some(cafile), None, None, Some("cache.internal")),
            ..Default::default()
        };
        let e = bad(tls("/nonexistent/ca.pem"));
        assert_eq!(e.option, "checkout_guard.tls.cafile", "{e}");
        let c = TelemetryConfig::from_ini(&tls(""), "redis://x:1").unwrap();
        let stream = c.stream.unwrap();
        assert_eq!(
            stream.tls().unwrap().peer_name.as_deref(),
            Some("cache.internal")
        );
        // A Sentinel stream URL: the sentinels' user needs their password (no AUTH could
        // be sent with a user alone); a password alone is fine; other URLs ignore both.
        let sentinel = |url: &'static str, user, password| RawTelemetryIni {
            sinks: Some("stream"),
            stream_url: Some(url),
            sentinel_user: user,
            sentinel_password: password,
            ..Default::default()
        };
        let e = bad(sentinel("valkey+sentinel://h:1/m", Some("sen"), None));
        assert_eq!(e.option, "checkout_guard.sentinel.user", "{e}");
        assert!(e.to_string().contains("without a password"), "{e}");
        for (url, user, password) in [
            ("valkey+sentinel://h:1/m", Some("sen"), Some("pw")),
            ("valkey+sentinel://h:1/m", None, Some("pw")),
            ("redis://h:1", Some("sen"), None),
        ] {
            TelemetryConfig::from_ini(&sentinel(url, user, password), "redis://x:1")
                .unwrap_or_else(|e| panic!("{url} {user:?} {password:?}: {e}"));
        }
    }
}
