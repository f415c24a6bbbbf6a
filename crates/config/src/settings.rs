//! The INI settings `checkout_guard.*` and their defaults: the one table. The extension
//! registers its INI entries from it and shows them in `phpinfo()` in its order, the
//! limiter's and telemetry's built-in defaults are parsed from it, the CLI's defaults
//! name it, and a test holds the README's settings tables to it.

use std::ffi::CStr;

/// Who may change a setting (PHP's `PHP_INI_ALL` or `PHP_INI_SYSTEM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// php.ini, `-d`, pool config, `ini_set()` at run time: read per limiter.
    All,
    /// php.ini, `-d`, `php_admin_value`: read once per process (telemetry's sinks).
    System,
}

/// One INI setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    pub name: &'static CStr,
    /// The built-in value ("" = empty).
    pub default: &'static CStr,
    pub scope: Scope,
    /// A password it may hold is masked wherever it is shown.
    pub secret_url: bool,
    /// The whole value is a secret: shown as `***` when set.
    pub secret: bool,
}

impl Setting {
    pub fn name(&self) -> &'static str {
        self.name.to_str().expect("ASCII")
    }

    pub fn default(&self) -> &'static str {
        self.default.to_str().expect("ASCII")
    }
}

const fn setting(name: &'static CStr, default: &'static CStr, scope: Scope) -> Setting {
    Setting {
        name,
        default,
        scope,
        secret_url: false,
        secret: false,
    }
}

pub const URL: Setting = Setting {
    secret_url: true,
    ..setting(c"checkout_guard.url", c"redis://127.0.0.1:6379", Scope::All)
};
pub const TIMEOUT_MS: Setting = setting(c"checkout_guard.timeout_ms", c"50", Scope::All);
pub const ON_UNAVAILABLE: Setting = setting(c"checkout_guard.on_unavailable", c"allow", Scope::All);
pub const RETRY_INTERVAL_MS: Setting =
    setting(c"checkout_guard.retry_interval_ms", c"1000", Scope::All);
pub const LOCAL_DENIALS: Setting = setting(c"checkout_guard.local_denials", c"1", Scope::All);
/// `auto`: the native module's `CG.DECIDE` where the server has it, the script elsewhere.
pub const ENGINE: Setting = setting(c"checkout_guard.engine", c"auto", Scope::All);
/// `enforce`, or `shadow`: decide and move the buckets, but let every call through.
pub const MODE: Setting = setting(c"checkout_guard.mode", c"enforce", Scope::All);
/// A TLS URL's CA file (PEM), instead of the system's roots. Empty: unset.
pub const TLS_CAFILE: Setting = setting(c"checkout_guard.tls.cafile", c"", Scope::All);
/// The client certificate (PEM) for mutual TLS. Empty: unset.
pub const TLS_LOCAL_CERT: Setting = setting(c"checkout_guard.tls.local_cert", c"", Scope::All);
/// The client certificate's private key (PEM). Empty: unset.
pub const TLS_LOCAL_PK: Setting = setting(c"checkout_guard.tls.local_pk", c"", Scope::All);
/// The name the server's certificate must carry, instead of the URL's host. Empty: unset.
pub const TLS_PEER_NAME: Setting = setting(c"checkout_guard.tls.peer_name", c"", Scope::All);
/// A Sentinel URL's sentinels' own ACL user (the `sentinel` option's default). Empty: unset.
pub const SENTINEL_USER: Setting = setting(c"checkout_guard.sentinel.user", c"", Scope::All);
/// A Sentinel URL's sentinels' own password (the `sentinel` option's default), shown
/// masked. Empty: unset.
pub const SENTINEL_PASSWORD: Setting = Setting {
    secret: true,
    ..setting(c"checkout_guard.sentinel.password", c"", Scope::All)
};
pub const EVENTS_SINKS: Setting = setting(c"checkout_guard.events.sinks", c"", Scope::System);
pub const EVENTS_JSONL_PATH: Setting =
    setting(c"checkout_guard.events.jsonl_path", c"", Scope::System);
/// Empty: the stream sink uses `checkout_guard.url`.
pub const EVENTS_STREAM_URL: Setting = Setting {
    secret_url: true,
    ..setting(c"checkout_guard.events.stream_url", c"", Scope::System)
};
pub const EVENTS_STREAM_KEY: Setting = setting(
    c"checkout_guard.events.stream_key",
    c"checkout_guard:events",
    Scope::System,
);
pub const EVENTS_STREAM_MAXLEN: Setting = setting(
    c"checkout_guard.events.stream_maxlen",
    c"100000",
    Scope::System,
);
pub const EVENTS_BUFFER_SIZE: Setting =
    setting(c"checkout_guard.events.buffer_size", c"1000", Scope::System);
/// Live counters in memory shared by a php-fpm master's workers (`CheckoutGuard\\Metrics`):
/// `1` (default) or `0` (nothing counted). Read once per process.
pub const METRICS: Setting = setting(c"checkout_guard.metrics", c"1", Scope::System);

/// Every setting, in the order `phpinfo()` shows them.
pub const ALL: [Setting; 20] = [
    URL,
    TIMEOUT_MS,
    ON_UNAVAILABLE,
    RETRY_INTERVAL_MS,
    LOCAL_DENIALS,
    ENGINE,
    MODE,
    TLS_CAFILE,
    TLS_LOCAL_CERT,
    TLS_LOCAL_PK,
    TLS_PEER_NAME,
    SENTINEL_USER,
    SENTINEL_PASSWORD,
    EVENTS_SINKS,
    EVENTS_JSONL_PATH,
    EVENTS_STREAM_URL,
    EVENTS_STREAM_KEY,
    EVENTS_STREAM_MAXLEN,
    EVENTS_BUFFER_SIZE,
    METRICS,
];

/// The defaults as plain strings, for clap's `default_value` (which wants `&'static str`
/// in a const context).
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";
pub const DEFAULT_STREAM_KEY: &str = "checkout_guard:events";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plain_string_defaults_are_the_tables() {
        assert_eq!(DEFAULT_URL, URL.default());
        assert_eq!(DEFAULT_STREAM_KEY, EVENTS_STREAM_KEY.default());
    }

    #[test]
    fn names_are_unique_and_namespaced() {
        let mut names: Vec<_> = ALL.iter().map(|s| s.name()).collect();
        assert!(names.iter().all(|n| n.starts_with("checkout_guard.")));
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    /// The README's settings tables list every setting with the default in force:
    /// rows `| `checkout_guard.x` | `default` | meaning |` (an empty default is written
    /// `empty ...`, and the stream URL's as the setting it falls back to).
    #[test]
    fn the_docs_settings_tables_match_this_table() {
        // docs/settings.md holds the limiter's settings; docs/telemetry.md#settings holds
        // telemetry's (the README links to both). Together they list every setting.
        let mut rows = Vec::new();
        for doc in ["docs/settings.md", "docs/telemetry.md"] {
            let path = format!("{}/../../{doc}", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            // docs/settings.md is the settings page itself; telemetry.md has a section.
            let section = match doc {
                "docs/settings.md" => text.as_str(),
                _ => text
                    .split("\n## Settings")
                    .nth(1)
                    .unwrap_or_else(|| panic!("{doc}: a `## Settings` section")),
            };
            let section = section.split("\n## ").next().unwrap_or(section);
            rows.extend(
                section
                    .lines()
                    .filter(|l| l.starts_with("| `checkout_guard."))
                    .map(str::to_string),
            );
        }
        let mut seen = Vec::new();
        for row in &rows {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            let (name, shown) = (cells[1].trim_matches('`'), cells[2]);
            let s = ALL
                .iter()
                .find(|s| s.name() == name)
                .unwrap_or_else(|| panic!("the settings tables list unknown setting {name}"));
            let ok = match s.default() {
                "" if s.name == EVENTS_STREAM_URL.name => shown == "`checkout_guard.url`",
                "" => shown.starts_with("empty"),
                d => shown == format!("`{d}`"),
            };
            assert!(
                ok,
                "settings table: {name} shown as {shown}, default is {:?}",
                s.default()
            );
            seen.push(name.to_string());
        }
        for s in ALL {
            assert!(
                seen.iter().any(|n| n == s.name()),
                "no settings table (docs/settings.md, docs/telemetry.md) lists {}",
                s.name()
            );
        }
    }
}
