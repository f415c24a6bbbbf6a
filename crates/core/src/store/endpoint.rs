use std::fmt;

use redis::{ConnectionInfo, IntoConnectionInfo};

/// A parsed Valkey URL: what to connect to, and how to show it without its password.
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    display: String,
    info: ConnectionInfo,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Endpoint").field(&self.display).finish()
    }
}

impl Endpoint {
    /// Accepts `redis://[user[:password]@]host[:port][/db]`, `valkey://` (same form), and
    /// `unix:///path/to/valkey.sock[?db=N&user=U&pass=P]` (also `redis+unix://`).
    /// The error message shows the URL with its password masked.
    pub fn parse(url: &str) -> Result<Self, String> {
        let display = mask_password(url);
        let normalized = match url.strip_prefix("valkey://") {
            Some(rest) => format!("redis://{rest}"),
            None => match url.strip_prefix("valkeys://") {
                Some(rest) => format!("rediss://{rest}"),
                None => url.to_string(),
            },
        };
        if normalized.starts_with("rediss://") {
            return Err(format!(
                "TLS (rediss://) is not supported by this build, got \"{display}\""
            ));
        }
        let info = normalized.as_str().into_connection_info().map_err(|e| {
            format!(
                "must be a redis://, valkey:// or unix:// URL ({}), got \"{display}\"",
                e.detail().unwrap_or("invalid URL")
            )
        })?;
        let redis_settings = info
            .redis_settings()
            .clone()
            .set_lib_name("checkout_guard", crate::VERSION);
        Ok(Self {
            url: url.to_string(),
            display,
            info: info.set_redis_settings(redis_settings),
        })
    }

    /// The URL with any password replaced by `***`.
    pub fn display_url(&self) -> &str {
        &self.display
    }

    pub(crate) fn pool_key(&self) -> &str {
        &self.url
    }

    pub(crate) fn connection_info(&self) -> &ConnectionInfo {
        &self.info
    }
}

/// Masks the password of `scheme://user:password@host` and of `?pass=`/`?password=`.
pub fn mask_password(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let auth_start = scheme_end + 3;
        let auth_end = out[auth_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| auth_start + i);
        if let Some(at) = out[auth_start..auth_end].rfind('@') {
            let userinfo = &out[auth_start..auth_start + at];
            let masked = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None => "***".to_string(),
            };
            out.replace_range(auth_start..auth_start + at, &masked);
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((k, _)) if k == "pass" || k == "password" => format!("{k}=***"),
                _ => pair.to_string(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords_everywhere() {
        assert_eq!(
            mask_password("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        assert_eq!(
            mask_password("redis://app:s3cr@t@10.0.0.1:6379/0"),
            "redis://app:***@10.0.0.1:6379/0"
        );
        assert_eq!(mask_password("redis://:pw@host"), "redis://:***@host");
        assert_eq!(mask_password("redis://tokenonly@host"), "redis://***@host");
        assert_eq!(
            mask_password("unix:///run/valkey.sock?db=1&pass=pw&user=u"),
            "unix:///run/valkey.sock?db=1&pass=***&user=u"
        );
    }

    #[test]
    fn parses_supported_forms_and_rejects_others_without_leaking() {
        assert!(Endpoint::parse("redis://127.0.0.1:6379/1").is_ok());
        assert!(Endpoint::parse("valkey://user:pw@localhost:7000").is_ok());
        assert!(Endpoint::parse("unix:///tmp/valkey.sock").is_ok());
        let e = Endpoint::parse("http://x").unwrap_err();
        assert!(e.contains("\"http://x\""), "{e}");
        let e = Endpoint::parse("rediss://u:topsecret@host").unwrap_err();
        assert!(e.contains("TLS") && !e.contains("topsecret"), "{e}");
        let ep = Endpoint::parse("redis://u:topsecret@host:1").unwrap();
        assert!(!format!("{ep:?}").contains("topsecret"));
        assert_eq!(ep.display_url(), "redis://u:***@host:1");
    }
}
