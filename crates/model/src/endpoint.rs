use std::fmt;

use crate::tls::Tls;

/// What an endpoint connects to: one server (its URL, `valkey://` written `redis://`,
/// `valkeys://` written `rediss://`), or a cluster found from seed nodes (each a
/// `redis://[user:password@]host:port` URL, `rediss://` for a TLS cluster).
/// Plain data: the connection layer (`checkout-guard-connection`) turns it into one.
#[derive(Clone, PartialEq, Eq)]
pub enum Target {
    Single(String),
    /// Seed nodes of a Valkey Cluster: any one that answers gives the slot map.
    Cluster(Vec<String>),
}

/// A parsed Valkey URL: what to connect to, and how to show it without its password.
#[derive(Clone)]
pub struct Endpoint {
    url: String,
    display: String,
    target: Target,
    /// `Some` for the TLS forms (verified by default), `None` for the plain ones.
    tls: Option<Tls>,
    /// The URL, and the TLS settings where there are any.
    pool_key: String,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Endpoint").field(&self.display).finish()
    }
}

impl Endpoint {
    /// Accepts `redis://[user[:password]@]host[:port][/db]`, `valkey://` (same form),
    /// `unix:///path/to/valkey.sock[?db=N&user=U&pass=P]` (also `redis+unix://`), and for a
    /// Valkey Cluster `valkey+cluster://[user[:password]@]host:port[,host:port...]` (also
    /// `redis+cluster://`): seed nodes, any of which gives the slot map.
    /// Each TCP form has a TLS twin: `rediss://` and `valkeys://`, `rediss+cluster://` and
    /// `valkeys+cluster://`, verified by default ([`Endpoint::with_tls`] sets how); a TLS
    /// URL takes no `#fragment` (verification is turned off only by an explicit option).
    /// The error message shows the URL with its password masked.
    pub fn parse(url: &str) -> Result<Self, String> {
        let display = mask_password(url);
        let cluster = [
            ("valkey+cluster://", false),
            ("redis+cluster://", false),
            ("valkeys+cluster://", true),
            ("rediss+cluster://", true),
        ]
        .iter()
        .find_map(|(scheme, tls)| url.strip_prefix(scheme).map(|rest| (rest, *tls)));
        if let Some((rest, tls)) = cluster {
            let seeds = parse_cluster_seeds(rest, tls)
                .map_err(|why| format!("{why}, got \"{display}\""))?;
            return Ok(Self::new(url, display, Target::Cluster(seeds), tls));
        }
        let normalized = match url.strip_prefix("valkey://") {
            Some(rest) => format!("redis://{rest}"),
            None => match url.strip_prefix("valkeys://") {
                Some(rest) => format!("rediss://{rest}"),
                None => url.to_string(),
            },
        };
        let tls = normalized.starts_with("rediss://");
        check_single(&normalized).map_err(|detail| {
            format!(
                "must be a redis://, rediss://, valkey://, valkeys://, unix:// or valkey+cluster:// URL ({detail}), got \"{display}\""
            )
        })?;
        Ok(Self::new(url, display, Target::Single(normalized), tls))
    }

    fn new(url: &str, display: String, target: Target, tls: bool) -> Self {
        let mut endpoint = Self {
            url: url.to_string(),
            display,
            target,
            tls: None,
            pool_key: String::new(),
        };
        endpoint.set_tls(tls.then(Tls::default));
        endpoint
    }

    fn set_tls(&mut self, tls: Option<Tls>) {
        self.pool_key = match &tls {
            None => self.url.clone(),
            Some(t) => format!("{} tls:{}", self.url, t.key()),
        };
        self.tls = tls;
    }

    /// Whether the URL is a TLS form (`rediss://`, `valkeys://`, `*s+cluster://`).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// A TLS endpoint with these settings; a plain one is returned as it is (the options
    /// refuse `tls` on a plain URL before this).
    pub fn with_tls(mut self, tls: Tls) -> Self {
        if self.is_tls() {
            self.set_tls(Some(tls));
        }
        self
    }

    /// The TLS settings of a TLS endpoint.
    pub fn tls(&self) -> Option<&Tls> {
        self.tls.as_ref()
    }

    /// Whether this is a Valkey Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// The URL with any password replaced by `***`.
    pub fn display_url(&self) -> &str {
        &self.display
    }

    /// The URL as given (with the TLS settings' paths and names): processes keep one
    /// connection per distinct key.
    pub fn pool_key(&self) -> &str {
        &self.pool_key
    }

    pub fn target(&self) -> &Target {
        &self.target
    }
}

/// The checks the connection layer (redis-rs) makes of a single-server URL when it
/// connects, made here without it, rule for rule: a known scheme; for TCP a host that is
/// not a wildcard address, a database number in the path and credentials that decode to
/// UTF-8; for a Unix socket a file path and a database number in the query; and a known
/// `protocol`. A test of the connection layer holds the two to the same answers.
fn check_single(url: &str) -> Result<(), &'static str> {
    let parsed = url::Url::parse(url).map_err(|_| "invalid URL")?;
    let query = || parsed.query_pairs();
    let protocol_ok = query()
        .filter(|(k, _)| k == "protocol")
        .last()
        .is_none_or(|(_, v)| matches!(&*v, "2" | "resp2" | "3" | "resp3"));
    match parsed.scheme() {
        "redis" | "valkey" | "rediss" => {
            if parsed.scheme() == "rediss" && parsed.fragment().is_some() {
                return Err("a TLS URL takes no #fragment (set the tls option instead)");
            }
            let host = match parsed.host() {
                None => return Err("missing hostname"),
                Some(url::Host::Domain(d)) => d.to_string(),
                Some(url::Host::Ipv4(a)) => a.to_string(),
                Some(url::Host::Ipv6(a)) => a.to_string(),
            };
            if host == "0.0.0.0" || host == "::" {
                return Err("cannot connect to a wildcard address");
            }
            let db = parsed.path().trim_matches('/');
            if !db.is_empty() && db.parse::<i64>().is_err() {
                return Err("invalid database number");
            }
            let utf8 = percent_decode_is_utf8;
            if !utf8(parsed.username()) || !parsed.password().is_none_or(utf8) {
                return Err("credentials are not valid UTF-8");
            }
        }
        "unix" | "redis+unix" | "valkey+unix" => {
            if parsed.to_file_path().is_err() {
                return Err("missing socket path");
            }
            // The last `db` wins, as in a map of the query.
            if let Some((_, db)) = query().filter(|(k, _)| k == "db").last() {
                if db.parse::<i64>().is_err() {
                    return Err("invalid database number");
                }
            }
        }
        _ => return Err("URL provided is not a redis URL"),
    }
    if protocol_ok {
        Ok(())
    } else {
        Err("invalid protocol version (resp2 or resp3)")
    }
}

/// Whether percent-decoding `s` gives UTF-8.
fn percent_decode_is_utf8(s: &str) -> bool {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, ..) => {
                out.push(c);
                i += 1;
            }
        }
    }
    std::str::from_utf8(&out).is_ok()
}

/// `[user[:password]@]host:port[,host:port...]`: every seed gets the same credentials
/// (and `rediss://` when `tls`). No database number (a cluster has only database 0) and
/// no query.
fn parse_cluster_seeds(rest: &str, tls: bool) -> Result<Vec<String>, String> {
    let scheme = if tls { "rediss" } else { "redis" };
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if hosts.is_empty() {
        return Err("a cluster URL needs at least one host:port seed".into());
    }
    if hosts.contains(['/', '?', '#']) {
        return Err("a cluster URL takes host:port seeds only (no database, no options)".into());
    }
    hosts
        .split(',')
        .map(|seed| {
            let (host, port) = seed
                .rsplit_once(':')
                .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
                .ok_or_else(|| format!("cluster seed \"{seed}\" must be host:port"))?;
            let url = match userinfo {
                Some(u) => format!("{scheme}://{u}@{host}:{port}"),
                None => format!("{scheme}://{host}:{port}"),
            };
            check_single(&url)
                .map(|()| url)
                .map_err(|e| format!("cluster seed \"{seed}\": {e}"))
        })
        .collect()
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
        let e = Endpoint::parse("rediss://u:topsecret@host:1#insecure").unwrap_err();
        assert!(e.contains("#fragment") && !e.contains("topsecret"), "{e}");
        let ep = Endpoint::parse("redis://u:topsecret@host:1").unwrap();
        assert!(!ep.is_cluster());
        assert!(!format!("{ep:?}").contains("topsecret"));
        assert_eq!(ep.display_url(), "redis://u:***@host:1");
    }

    #[test]
    fn every_tcp_form_has_a_tls_twin_verified_by_default() {
        for (url, single) in [
            (
                "rediss://u:pw@cache.internal:6380/2",
                "rediss://u:pw@cache.internal:6380/2",
            ),
            (
                "valkeys://cache.internal:6380",
                "rediss://cache.internal:6380",
            ),
        ] {
            let ep = Endpoint::parse(url).unwrap();
            assert!(ep.is_tls() && !ep.is_cluster(), "{url}");
            assert!(ep.target() == &Target::Single(single.into()), "{url}");
            assert_eq!(ep.tls(), Some(&Tls::default()));
            assert!(ep.tls().unwrap().verify_peer);
        }
        for url in [
            "rediss+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001",
            "valkeys+cluster://u:pw@10.0.0.1:7000,10.0.0.2:7001",
        ] {
            let ep = Endpoint::parse(url).unwrap();
            assert!(ep.is_tls() && ep.is_cluster(), "{url}");
            let Target::Cluster(seeds) = ep.target() else {
                panic!("not a cluster")
            };
            assert_eq!(seeds[1], "rediss://u:pw@10.0.0.2:7001");
        }
        for plain in ["redis://h:1", "valkey+cluster://h:1", "unix:///tmp/v.sock"] {
            let ep = Endpoint::parse(plain).unwrap();
            assert!(!ep.is_tls() && ep.tls().is_none(), "{plain}");
            assert_eq!(ep.pool_key(), plain);
            // Settings do not make a plain endpoint a TLS one.
            assert!(ep.with_tls(Tls::default()).tls().is_none());
        }
        // Different TLS settings, different connections.
        let ep = Endpoint::parse("rediss://h:1").unwrap();
        let off = ep.clone().with_tls(Tls {
            verify_peer: false,
            ..Tls::default()
        });
        assert_ne!(ep.pool_key(), off.pool_key());
        assert!(!off.tls().unwrap().verify_peer);
    }

    #[test]
    fn parses_cluster_seeds_with_shared_credentials() {
        let ep =
            Endpoint::parse("valkey+cluster://app:s3cret@10.0.0.1:7000,10.0.0.2:7001").unwrap();
        assert!(ep.is_cluster());
        assert_eq!(
            ep.display_url(),
            "valkey+cluster://app:***@10.0.0.1:7000,10.0.0.2:7001"
        );
        let Target::Cluster(seeds) = ep.target() else {
            panic!("not a cluster")
        };
        assert_eq!(seeds.len(), 2);
        for seed in seeds {
            assert!(seed.starts_with("redis://app:s3cret@10.0.0."), "{seed}");
        }
        assert!(Endpoint::parse("redis+cluster://127.0.0.1:7000").is_ok());
        for bad in [
            "valkey+cluster://",
            "valkey+cluster://u:pw@host",
            "valkey+cluster://host:0",
            "valkey+cluster://host:7000/1",
            "valkey+cluster://host:7000,:7001",
        ] {
            let e = Endpoint::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(!e.contains(":pw@"), "{e}");
            assert!(e.contains("got \""), "{e}");
        }
    }
}
