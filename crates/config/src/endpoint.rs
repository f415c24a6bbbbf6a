use std::fmt;

use crate::mask::mask_password;
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
    /// A primary found through Valkey Sentinel: the sentinels asked in order for
    /// `service`'s primary, which is then opened as a single server.
    Sentinel(Sentinel),
}

/// What a `valkey+sentinel://` URL names (see [`Endpoint::parse`]).
#[derive(Clone, PartialEq, Eq)]
pub struct Sentinel {
    /// `redis://host:port` (`rediss://` for the TLS forms): the sentinels, in order, without
    /// credentials (the sentinels' own are [`Sentinel::user`] and [`Sentinel::password`]).
    pub sentinels: Vec<String>,
    /// The name the sentinels monitor the primary by (`sentinel monitor SERVICE ...`).
    pub service: String,
    /// The data nodes' database.
    pub db: i64,
    /// The data nodes' `user[:password]` as written in the URL (percent-encoded).
    pub userinfo: Option<String>,
    /// The sentinels' own ACL user and password (the `sentinel` option), if they have any.
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Sentinel {
    /// The URL of the primary the sentinels named: the data nodes' credentials and database.
    pub fn primary_url(&self, host: &str, port: u16) -> String {
        let scheme = if self.is_tls() { "rediss" } else { "redis" };
        let host = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]")
        } else {
            host.to_string()
        };
        match &self.userinfo {
            Some(u) => format!("{scheme}://{u}@{host}:{port}/{}", self.db),
            None => format!("{scheme}://{host}:{port}/{}", self.db),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.sentinels
            .first()
            .is_some_and(|s| s.starts_with("rediss://"))
    }
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
        let sentinel = [
            ("valkey+sentinel://", false),
            ("redis+sentinel://", false),
            ("valkeys+sentinel://", true),
            ("rediss+sentinel://", true),
        ]
        .iter()
        .find_map(|(scheme, tls)| url.strip_prefix(scheme).map(|rest| (rest, *tls)));
        if let Some((rest, tls)) = sentinel {
            let target =
                parse_sentinel(rest, tls).map_err(|why| format!("{why}, got \"{display}\""))?;
            return Ok(Self::new(url, display, Target::Sentinel(target), tls));
        }
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
                "must be a redis://, rediss://, valkey://, valkeys://, unix://, valkey+cluster:// or valkey+sentinel:// URL ({detail}), got \"{display}\""
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
        self.tls = tls;
        self.set_pool_key();
    }

    fn set_pool_key(&mut self) {
        let mut key = self.url.clone();
        if let Some(t) = &self.tls {
            key.push_str(&format!(" tls:{}", t.key()));
        }
        if let Target::Sentinel(s) = &self.target {
            if s.user.is_some() || s.password.is_some() {
                // Length-prefixed, so no two (user, password) pairs give the same key
                // ("a:b" + "c" and "a" + "b:c" would with a plain separator).
                let (user, password) = (
                    s.user.as_deref().unwrap_or(""),
                    s.password.as_deref().unwrap_or(""),
                );
                key.push_str(&format!(
                    " sentinel:{}:{user}:{}:{password}",
                    user.len(),
                    password.len()
                ));
            }
        }
        self.pool_key = key;
    }

    /// Whether this is a primary found through Sentinel.
    pub fn is_sentinel(&self) -> bool {
        matches!(self.target, Target::Sentinel(_))
    }

    /// A Sentinel endpoint whose sentinels authenticate with `user` / `password` (the
    /// `sentinel` option); an error for any other endpoint (the option names itself).
    ///
    /// A user without a password is an error too: `AUTH` takes a password, so a user alone
    /// would reach the sentinels as no one, silently (phpredis, Predis and redis-cli send no
    /// `AUTH` then). The options, the INI and the CLI refuse it first with their own names;
    /// this keeps any other caller from making such an endpoint. An ACL user with `nopass`
    /// takes any password.
    pub fn with_sentinel_auth(
        mut self,
        user: Option<String>,
        password: Option<String>,
    ) -> Result<Self, String> {
        let Target::Sentinel(s) = &mut self.target else {
            return Err(format!(
                "is only for a valkey+sentinel:// URL, got \"{}\"",
                self.display
            ));
        };
        if user.is_some() && password.is_none() {
            return Err("user is given without a password: the sentinels' AUTH needs both (an ACL user with nopass takes any password; leave the user out for sentinels with a password only)".into());
        }
        s.user = user;
        s.password = password;
        self.set_pool_key();
        Ok(self)
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

/// `[user[:password]@]host:port[,host:port...]/SERVICE[?db=N]`: the sentinels, the
/// service name, the data nodes' credentials and database.
fn parse_sentinel(rest: &str, tls: bool) -> Result<Sentinel, String> {
    let scheme = if tls { "rediss" } else { "redis" };
    let (userinfo, rest) = match rest.find('/') {
        Some(slash) => match rest[..slash].rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        },
        None => match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        },
    };
    let (hosts, path) = rest
        .split_once('/')
        .ok_or("a sentinel URL needs /SERVICE after its host:port sentinels")?;
    if hosts.is_empty() {
        return Err("a sentinel URL needs at least one host:port sentinel".into());
    }
    if path.contains('#') {
        return Err("a sentinel URL takes no #fragment".into());
    }
    let (service, query) = match path.split_once('?') {
        Some((s, q)) => (s, Some(q)),
        None => (path, None),
    };
    if service.is_empty() || service.contains('/') {
        return Err("a sentinel URL needs one service name after the sentinels (/SERVICE)".into());
    }
    let mut db = 0;
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        match pair.split_once('=') {
            Some(("db", v)) => {
                db = v.parse::<i64>().ok().filter(|d| *d >= 0).ok_or_else(|| {
                    format!("sentinel URL option db=\"{v}\" must be a database number")
                })?;
            }
            _ => return Err(format!("sentinel URL takes only ?db=N, not \"{pair}\"")),
        }
    }
    if let Some(u) = userinfo {
        if u.contains(['?', '#']) {
            // As in any URL, `?` and `#` end the authority: written in a password they must
            // be percent-encoded (%3F, %23), or the primary's URL would not parse.
            return Err("the credentials hold a '?' or '#': percent-encode them (%3F, %23)".into());
        }
        let (user, pass) = match u.split_once(':') {
            Some((user, pass)) => (user, Some(pass)),
            None => (u, None),
        };
        if !percent_decode_is_utf8(user) || !pass.is_none_or(percent_decode_is_utf8) {
            return Err("credentials are not valid UTF-8".into());
        }
    }
    let sentinels = hosts
        .split(',')
        .map(|node| {
            let (host, port) = node
                .rsplit_once(':')
                .filter(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
                .ok_or_else(|| format!("sentinel \"{node}\" must be host:port"))?;
            let url = format!("{scheme}://{host}:{port}");
            check_single(&url)
                .map(|()| url)
                .map_err(|e| format!("sentinel \"{node}\": {e}"))
        })
        .collect::<Result<Vec<_>, String>>()?;
    Ok(Sentinel {
        sentinels,
        service: service.to_string(),
        db,
        userinfo: userinfo.map(str::to_string),
        user: None,
        password: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn parses_sentinel_urls_with_the_data_nodes_credentials() {
        let ep = Endpoint::parse(
            "valkey+sentinel://app:s3cret@10.0.0.1:26379,10.0.0.2:26380/orders?db=2",
        )
        .unwrap();
        assert!(ep.is_sentinel() && !ep.is_cluster() && !ep.is_tls());
        assert_eq!(
            ep.display_url(),
            "valkey+sentinel://app:***@10.0.0.1:26379,10.0.0.2:26380/orders?db=2"
        );
        assert!(!format!("{ep:?}").contains("s3cret"));
        let Target::Sentinel(s) = ep.target() else {
            panic!("not a sentinel URL")
        };
        assert_eq!(
            s.sentinels,
            ["redis://10.0.0.1:26379", "redis://10.0.0.2:26380"]
        );
        assert_eq!(s.service, "orders");
        assert_eq!(s.db, 2);
        assert_eq!(
            s.primary_url("10.0.0.9", 6379),
            "redis://app:s3cret@10.0.0.9:6379/2"
        );
        for (url, tls) in [
            ("redis+sentinel://h:1/m", false),
            ("valkeys+sentinel://h:1/m", true),
            ("rediss+sentinel://u:p@h:1,h:2/m", true),
        ] {
            let ep = Endpoint::parse(url).unwrap();
            assert!(ep.is_sentinel(), "{url}");
            assert_eq!(ep.is_tls(), tls, "{url}");
            let Target::Sentinel(s) = ep.target() else {
                panic!("{url}")
            };
            assert_eq!(s.db, 0);
            assert_eq!(s.primary_url("h", 5).starts_with("rediss://"), tls);
        }
        for (bad, says) in [
            ("valkey+sentinel://u:pw@h:1", "/SERVICE"),
            ("valkey+sentinel://u:pw@/m", "at least one"),
            ("valkey+sentinel://u:pw@h:1/", "service name"),
            ("valkey+sentinel://u:pw@h:0/m", "must be host:port"),
            ("valkey+sentinel://u:pw@h:1,:2/m", "must be host:port"),
            ("valkey+sentinel://u:pw@h:1/m?db=x", "db=\"x\""),
            ("valkey+sentinel://u:pw@h:1/m?foo=1", "foo=1"),
            ("valkey+sentinel://u:pw@h:1/m/x", "service name"),
        ] {
            let e = Endpoint::parse(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad} accepted"));
            assert!(!e.contains(":pw@"), "{e}");
            assert!(e.contains(says) && e.contains("got \""), "{bad}: {e}");
        }
    }

    #[test]
    fn the_sentinels_own_credentials_only_go_with_a_sentinel_url() {
        let ep = Endpoint::parse("valkey+sentinel://h:1/m").unwrap();
        let plain_key = ep.pool_key().to_string();
        let ep = ep
            .with_sentinel_auth(Some("sen".into()), Some("xyzzy".into()))
            .unwrap();
        let Target::Sentinel(s) = ep.target() else {
            panic!("not a sentinel URL")
        };
        assert_eq!(
            (s.user.as_deref(), s.password.as_deref()),
            (Some("sen"), Some("xyzzy"))
        );
        assert_ne!(ep.pool_key(), plain_key);
        assert!(!format!("{ep:?}").contains("xyzzy"));
        let e = Endpoint::parse("redis://u:pw@h:1")
            .unwrap()
            .with_sentinel_auth(None, Some("x".into()))
            .unwrap_err();
        assert!(e.contains("sentinel://") && !e.contains("pw@"), "{e}");
        // A user alone would send no AUTH: refused, whoever makes the endpoint.
        let e = Endpoint::parse("valkey+sentinel://h:1/m")
            .unwrap()
            .with_sentinel_auth(Some("sen".into()), None)
            .unwrap_err();
        assert!(e.contains("user is given without a password"), "{e}");
    }

    #[test]
    fn a_question_mark_or_hash_in_a_sentinel_password_is_refused_and_never_shown() {
        // Review: parsed up to the '@' but masked only up to the '?', such a URL was
        // accepted, shown in clear, and never connected.
        for url in [
            "valkey+sentinel://app:pa?ss@10.0.0.1:26379/orders",
            "valkey+sentinel://app:pa#ss@10.0.0.1:26379/orders",
        ] {
            let e = Endpoint::parse(url)
                .err()
                .unwrap_or_else(|| panic!("{url} accepted"));
            assert!(e.contains("percent-encode"), "{e}");
            assert!(!e.contains("ss@"), "password shown: {e}");
        }
        let ep = Endpoint::parse("valkey+sentinel://app:pa%3Fss@10.0.0.1:26379/orders").unwrap();
        assert_eq!(
            ep.display_url(),
            "valkey+sentinel://app:***@10.0.0.1:26379/orders"
        );
    }

    #[test]
    fn two_pairs_of_sentinel_credentials_never_share_a_pool_key() {
        let key = |user: &str, password: &str| {
            Endpoint::parse("valkey+sentinel://h:1/m")
                .unwrap()
                .with_sentinel_auth(Some(user.into()), Some(password.into()))
                .unwrap()
                .pool_key()
                .to_string()
        };
        assert_ne!(key("a:b", "c"), key("a", "b:c"));
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
