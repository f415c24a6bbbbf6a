//! The process-wide defaults of every limiter, from the INI settings (`crate::settings`).

use super::{Engine, Mode, OnUnavailable, MAX_TIMEOUT_MS};
use crate::tls::TlsDefaults;
use crate::value::quote_bytes;
use checkout_guard_model::error::ConfigError;

/// Process-wide defaults, from the INI settings `checkout_guard.*`. The option array
/// overrides `url`, `timeout_ms` and `on_unavailable`; `retry_interval_ms` is INI only.
#[derive(Debug, Clone)]
pub struct Defaults {
    pub url: String,
    pub timeout_ms: i64,
    pub on_unavailable: OnUnavailable,
    pub retry_interval_ms: i64,
    /// The flood fast path (`checkout_guard.local_denials`): see `denials.rs`.
    pub local_denials: bool,
    /// Which engine decides (`checkout_guard.engine`).
    pub engine: Engine,
    /// Enforce or shadow (`checkout_guard.mode`).
    pub mode: Mode,
    /// A TLS URL's settings where its `tls` option does not give them
    /// (`checkout_guard.tls.*`).
    pub tls: TlsDefaults,
    /// A Sentinel URL's sentinels' own user and password where its `sentinel` option does
    /// not give them (`checkout_guard.sentinel.*`).
    pub sentinel_user: Option<String>,
    pub sentinel_password: Option<String>,
}

impl Default for Defaults {
    /// The built-in values of the INI settings (`settings::ALL`, the one table).
    fn default() -> Self {
        use crate::settings::{
            ENGINE, LOCAL_DENIALS, MODE, ON_UNAVAILABLE, RETRY_INTERVAL_MS, TIMEOUT_MS, URL,
        };
        let builtin = Self {
            url: String::new(),
            timeout_ms: 0,
            on_unavailable: OnUnavailable::Allow,
            retry_interval_ms: 0,
            local_denials: false,
            engine: Engine::Auto,
            mode: Mode::Enforce,
            tls: TlsDefaults::default(),
            sentinel_user: None,
            sentinel_password: None,
        };
        builtin
            .read(
                Some(URL.default()),
                Some(TIMEOUT_MS.default()),
                Some(ON_UNAVAILABLE.default()),
                Some(RETRY_INTERVAL_MS.default()),
            )
            .and_then(|d| d.with_local_denials(Some(LOCAL_DENIALS.default())))
            .and_then(|d| d.with_engine(Some(ENGINE.default())))
            .and_then(|d| d.with_mode(Some(MODE.default())))
            .expect("the built-in settings are valid")
    }
}

impl Defaults {
    /// Builds the defaults from raw INI strings, validating each; the error names the INI
    /// setting. A missing value keeps the built-in default.
    pub fn from_ini(
        url: Option<&str>,
        timeout_ms: Option<&str>,
        on_unavailable: Option<&str>,
        retry_interval_ms: Option<&str>,
    ) -> Result<Self, ConfigError> {
        Self::default().read(url, timeout_ms, on_unavailable, retry_interval_ms)
    }

    fn read(
        mut self,
        url: Option<&str>,
        timeout_ms: Option<&str>,
        on_unavailable: Option<&str>,
        retry_interval_ms: Option<&str>,
    ) -> Result<Self, ConfigError> {
        let d = &mut self;
        if let Some(u) = url.filter(|u| !u.trim().is_empty()) {
            d.url = u.trim().to_string();
        }
        let int = |name: &str, raw: &str, min: i64, max: i64| -> Result<i64, ConfigError> {
            raw.trim()
                .parse::<i64>()
                .ok()
                .filter(|v| (min..=max).contains(v))
                .ok_or_else(|| {
                    ConfigError::new(
                        name,
                        format!(
                            "must be an integer from {min} to {max}, got {}",
                            quote_bytes(raw.as_bytes())
                        ),
                    )
                })
        };
        if let Some(t) = timeout_ms {
            d.timeout_ms = int("checkout_guard.timeout_ms", t, 1, MAX_TIMEOUT_MS)?;
        }
        if let Some(p) = on_unavailable {
            d.on_unavailable =
                OnUnavailable::parse("checkout_guard.on_unavailable", p.trim().as_bytes())?;
        }
        if let Some(r) = retry_interval_ms {
            d.retry_interval_ms = int("checkout_guard.retry_interval_ms", r, 0, 3_600_000)?;
        }
        Ok(self)
    }

    /// Sets the TLS defaults from their INI values (empty: unset); the files are read
    /// when a limiter with a TLS URL is made.
    pub fn with_tls(
        mut self,
        cafile: Option<&str>,
        local_cert: Option<&str>,
        local_pk: Option<&str>,
        peer_name: Option<&str>,
    ) -> Self {
        self.tls = TlsDefaults::from_ini(cafile, local_cert, local_pk, peer_name);
        self
    }

    /// Sets the sentinels' own credentials from their INI values; empty or blank is unset.
    pub fn with_sentinel(mut self, user: Option<&str>, password: Option<&str>) -> Self {
        let set = |v: Option<&str>| v.filter(|v| !v.trim().is_empty()).map(str::to_string);
        self.sentinel_user = set(user);
        self.sentinel_password = set(password);
        self
    }

    /// Sets `engine` from its INI value: auto, lua or module.
    pub fn with_engine(mut self, raw: Option<&str>) -> Result<Self, ConfigError> {
        if let Some(raw) = raw {
            self.engine = Engine::parse("checkout_guard.engine", raw.trim().as_bytes())?;
        }
        Ok(self)
    }

    /// Sets `mode` from its INI value: enforce or shadow.
    pub fn with_mode(mut self, raw: Option<&str>) -> Result<Self, ConfigError> {
        if let Some(raw) = raw {
            self.mode = Mode::parse("checkout_guard.mode", raw.trim().as_bytes())?;
        }
        Ok(self)
    }

    /// Sets `local_denials` from its INI value: on/off, 1/0, true/false, yes/no.
    pub fn with_local_denials(mut self, raw: Option<&str>) -> Result<Self, ConfigError> {
        if let Some(raw) = raw {
            self.local_denials = match raw.trim().to_ascii_lowercase().as_str() {
                "1" | "on" | "true" | "yes" => true,
                "0" | "off" | "false" | "no" | "" => false,
                _ => {
                    return Err(ConfigError::new(
                        "checkout_guard.local_denials",
                        format!(
                            "must be on or off (1/0, true/false, yes/no), got {}",
                            quote_bytes(raw.as_bytes())
                        ),
                    ))
                }
            };
        }
        Ok(self)
    }
}
