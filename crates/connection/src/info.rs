//! A parsed [`Endpoint`] as redis-rs connects to it.

use checkout_guard_config::endpoint::Target;
use checkout_guard_config::{Endpoint, Tls};
use redis::{
    ClientTlsConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult,
    TlsCertificates,
};

/// Who opens a connection: its name in `CLIENT LIST` (`lib-name=`), so an operator tells
/// the workers' connections from the CLI's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Client {
    lib_name: &'static str,
}

impl Client {
    /// The PHP worker (the extension's limiters and stream sink).
    pub const WORKER: Client = Client {
        lib_name: "checkout_guard",
    };
    /// The on-call command line.
    pub const CLI: Client = Client {
        lib_name: "checkout_guard_cli",
    };

    pub fn lib_name(&self) -> &'static str {
        self.lib_name
    }
}

/// One URL of an endpoint the model accepted (a single server, or one cluster seed), as
/// redis-rs connects to it, named for `client` (`CLIENT SETINFO LIB-NAME`, `LIB-VER`).
pub fn connection_info(url: &str, client: Client) -> RedisResult<ConnectionInfo> {
    let info = url.into_connection_info()?;
    let settings = info
        .redis_settings()
        .clone()
        .set_lib_name(client.lib_name, checkout_guard_model::VERSION);
    Ok(info.set_redis_settings(settings))
}

/// The certificates of `tls` as redis-rs takes them: the CA file (else the system's
/// roots), the client certificate and key for mutual TLS.
pub fn certificates(tls: &Tls) -> TlsCertificates {
    TlsCertificates {
        client_tls: match (&tls.local_cert, &tls.local_pk) {
            (Some(cert), Some(key)) => Some(ClientTlsConfig {
                client_cert: cert.pem.clone(),
                client_key: key.pem.clone(),
            }),
            _ => None,
        },
        root_cert: tls.cafile.as_ref().map(|ca| ca.pem.clone()),
    }
}

/// One `rediss://` URL of a TLS endpoint as redis-rs connects to it: its certificates,
/// verification of the chain and of the name (the URL's host), or of nothing with
/// `verify_peer => false`. The handshake is `wire.rs`'s own ([`crate::tls::wire_config`]:
/// `peer_name` checked in it); the address says TLS and how to verify.
pub fn tls_connection_info(url: &str, client: Client, tls: &Tls) -> RedisResult<ConnectionInfo> {
    let info = connection_info(url, client)?;
    let info = redis::Client::build_with_tls(info, certificates(tls))?
        .get_connection_info()
        .clone();
    let mut addr = match info.addr().clone() {
        ConnectionAddr::TcpTls {
            host,
            port,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host,
            port,
            insecure: !tls.verify_peer,
            tls_params,
        },
        other => other,
    };
    if tls.verify_peer && tls.peer_name.is_some() {
        addr.set_danger_accept_invalid_hostnames(true);
    }
    Ok(info.set_addr(addr))
}

/// What `endpoint` connects to, as redis-rs connects to it.
// Made once per connect and consumed by it: the size of a TLS address does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Addresses {
    Single(ConnectionInfo),
    /// A cluster's seed nodes, any of which gives the slot map.
    Cluster(Vec<ConnectionInfo>),
    /// The sentinels, asked in order for `service`'s primary (with the sentinels' own
    /// credentials, if any); [`primary_info`] names the primary they give.
    Sentinel {
        sentinels: Vec<ConnectionInfo>,
        service: String,
    },
}

/// The primary `host:port` a sentinel named for a Sentinel endpoint, with the data
/// nodes' credentials, database and TLS settings, named for `client`.
pub fn primary_info(
    endpoint: &Endpoint,
    client: Client,
    host: &str,
    port: u16,
) -> RedisResult<ConnectionInfo> {
    let Target::Sentinel(s) = endpoint.target() else {
        return Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "not a sentinel endpoint",
        )));
    };
    let url = s.primary_url(host, port);
    match endpoint.tls() {
        Some(tls) => tls_connection_info(&url, client, tls),
        None => connection_info(&url, client),
    }
}

/// `endpoint`'s server or seeds, named for `client`.
pub fn addresses(endpoint: &Endpoint, client: Client) -> RedisResult<Addresses> {
    let info = |url: &str| match endpoint.tls() {
        Some(tls) => tls_connection_info(url, client, tls),
        None => connection_info(url, client),
    };
    Ok(match endpoint.target() {
        Target::Single(url) => Addresses::Single(info(url)?),
        Target::Cluster(seeds) => {
            Addresses::Cluster(seeds.iter().map(|s| info(s)).collect::<RedisResult<_>>()?)
        }
        Target::Sentinel(s) => Addresses::Sentinel {
            sentinels: s
                .sentinels
                .iter()
                .map(|url| {
                    let i = info(url)?;
                    let mut settings = i.redis_settings().clone();
                    if let Some(user) = &s.user {
                        settings = settings.set_username(user);
                    }
                    if let Some(pass) = &s.password {
                        settings = settings.set_password(pass);
                    }
                    Ok(i.set_redis_settings(settings))
                })
                .collect::<RedisResult<_>>()?,
            service: s.service.clone(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model checks URLs without a Valkey client; this layer parses them again when it
    /// connects. The two must agree, or a URL the constructor accepted would fail at every
    /// call (or one redis-rs takes would be refused).
    #[test]
    fn the_models_url_check_agrees_with_the_connection_layer() {
        let urls = [
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1",
            "redis://localhost:6379/0",
            "redis://localhost:6379/15",
            "redis://localhost:6379/x",
            "redis://localhost:6379/-1",
            "redis://localhost:99999",
            "redis://localhost:0",
            "redis://:pw@localhost:6379",
            "redis://user:p%40ss@localhost:6379/2",
            "redis://user@localhost",
            "redis://[::1]:6379",
            "redis://[::1",
            "redis://",
            "redis:///3",
            "redis://host:6379/1?protocol=resp3",
            "redis://host:6379/1?protocol=resp9",
            "redis://host:6379/?protocol=3",
            "redis://0.0.0.0:6379",
            "redis://[::]:6379",
            "redis://u:%ff@host",
            "redis://%ff:pw@host",
            "redis://u:%e2%82%ac@host",
            "unix:///tmp/valkey.sock?protocol=resp3&db=1",
            "unix:///tmp/valkey.sock?protocol=x",
            "valkey+unix:///tmp/valkey.sock",
            "unix://host/tmp/valkey.sock",
            "redis://host#frag",
            "redis://host:6379/1?db=2",
            "redis://host:6379/1/2",
            "redis://ho st:6379",
            "valkey://localhost:7000",
            "unix:///tmp/valkey.sock",
            "unix:///tmp/valkey.sock?db=3",
            "unix:///tmp/valkey.sock?db=x",
            "unix:///tmp/valkey.sock?user=u&pass=p",
            "redis+unix:///tmp/valkey.sock",
            "unix://",
            "unix:///",
            "http://127.0.0.1",
            "127.0.0.1:6379",
            "",
            "redis:127.0.0.1",
            "valkey+cluster://127.0.0.1:7000,127.0.0.1:7001",
            "valkey+cluster://u:p@127.0.0.1:7000",
            "rediss://127.0.0.1:6380",
            "valkeys://u:p@localhost:6380/3",
            "rediss://h:1#insecure",
            "rediss://h:1#x",
            "rediss+cluster://u:p@127.0.0.1:7000,127.0.0.1:7001",
            "valkeys+cluster://127.0.0.1:7000",
        ];
        // And every combination of these parts.
        let mut all: Vec<String> = urls.iter().map(|u| u.to_string()).collect();
        for scheme in [
            "redis://",
            "valkey://",
            "unix://",
            "redis+unix://",
            "rediss://",
            "x://",
        ] {
            for auth in ["", "u@", ":p@", "u:p%zz@", "u:%c3%28@"] {
                for host in ["", "h", "127.0.0.1", "[::1]", "0.0.0.0", "/tmp/s.sock"] {
                    for port in ["", ":1", ":0", ":65536", ":x"] {
                        for tail in [
                            "",
                            "/",
                            "/2",
                            "/a",
                            "?db=1",
                            "?db=z",
                            "?protocol=2",
                            "/1?protocol=4",
                        ] {
                            all.push(format!("{scheme}{auth}{host}{port}{tail}"));
                        }
                    }
                }
            }
        }
        let mut accepted = 0;
        for url in all.iter().map(String::as_str) {
            let model = Endpoint::parse(url);
            if let Ok(endpoint) = &model {
                accepted += 1;
                for client in [Client::WORKER, Client::CLI] {
                    if let Err(e) = addresses(endpoint, client) {
                        panic!("{url}: accepted by the model, refused when connecting: {e}");
                    }
                }
            }
            // What redis-rs alone accepts (with valkey:// as redis://), the model accepts.
            // A TLS URL's `#insecure` is refused on purpose: verification is turned off
            // by the explicit option only.
            let raw = url.replacen("valkey://", "redis://", 1);
            let insecure = url.starts_with("rediss://") && url.contains('#');
            if !url.contains("+cluster") && !insecure && raw.as_str().into_connection_info().is_ok()
            {
                assert!(
                    model.is_ok(),
                    "{url}: redis-rs takes it, the model refuses: {model:?}"
                );
            }
        }
        // The table is not all refusals (a model refusing everything would pass the above).
        assert!(accepted > 100, "only {accepted} URLs accepted");
    }

    /// A TLS endpoint's addresses are TLS ones, verified unless `verify_peer => false`
    /// said otherwise; a plain endpoint's are plain.
    #[test]
    fn tls_endpoints_connect_over_tls_verified_by_default() {
        let addr = |url: &str, tls: Option<Tls>| -> Vec<ConnectionAddr> {
            let mut endpoint = Endpoint::parse(url).unwrap();
            if let Some(t) = tls {
                endpoint = endpoint.with_tls(t);
            }
            match addresses(&endpoint, Client::WORKER).unwrap() {
                Addresses::Single(i) => vec![i.addr().clone()],
                Addresses::Cluster(seeds)
                | Addresses::Sentinel {
                    sentinels: seeds, ..
                } => seeds.iter().map(|i| i.addr().clone()).collect(),
            }
        };
        let insecure = |a: &ConnectionAddr| match a {
            ConnectionAddr::TcpTls { insecure, .. } => Some(*insecure),
            _ => None,
        };
        for url in [
            "rediss://h:6380",
            "valkeys://h:6380",
            "valkeys+cluster://h:1,h:2",
            "valkeys+sentinel://h:1,h:2/m",
        ] {
            for a in addr(url, None) {
                assert_eq!(insecure(&a), Some(false), "{url}: {a:?}");
            }
        }
        let off = Tls {
            verify_peer: false,
            ..Tls::default()
        };
        assert_eq!(insecure(&addr("rediss://h:6380", Some(off))[0]), Some(true));
        assert_eq!(insecure(&addr("redis://h:6379", None)[0]), None);
    }

    /// Every address of an endpoint carries the client's name, cluster seeds included.
    #[test]
    fn every_address_is_named_for_its_client() {
        let lib_names = |url: &str, client: Client| -> Vec<String> {
            let infos = match addresses(&Endpoint::parse(url).unwrap(), client).unwrap() {
                Addresses::Single(i) => vec![i],
                Addresses::Cluster(seeds)
                | Addresses::Sentinel {
                    sentinels: seeds, ..
                } => seeds,
            };
            infos
                .iter()
                .map(|i| i.redis_settings().lib_name().unwrap_or("").to_string())
                .collect()
        };
        assert_eq!(lib_names("redis://h:1", Client::WORKER), ["checkout_guard"]);
        assert_eq!(
            lib_names("valkey+cluster://u:p@h:1,h:2", Client::CLI),
            ["checkout_guard_cli", "checkout_guard_cli"]
        );
        assert_eq!(
            lib_names("valkey+sentinel://h:1/m", Client::WORKER),
            ["checkout_guard"]
        );
    }

    /// The sentinels get the `sentinel` option's credentials, the primary the URL's
    /// (the data nodes') with its database, over TLS for the TLS forms.
    #[test]
    fn sentinels_and_the_primary_get_their_own_credentials() {
        let ep = Endpoint::parse("valkeys+sentinel://app:datapw@h:1,h:2/m?db=3")
            .unwrap()
            .with_sentinel_auth(Some("sen".into()), Some("senpw".into()))
            .unwrap();
        let Addresses::Sentinel { sentinels, service } = addresses(&ep, Client::WORKER).unwrap()
        else {
            panic!("not a sentinel endpoint")
        };
        assert_eq!(service, "m");
        for s in &sentinels {
            assert_eq!(s.redis_settings().username(), Some("sen"));
            assert_eq!(s.redis_settings().password(), Some("senpw"));
            assert!(matches!(s.addr(), ConnectionAddr::TcpTls { .. }));
        }
        let p = primary_info(&ep, Client::WORKER, "10.0.0.5", 6379).unwrap();
        assert_eq!(p.redis_settings().username(), Some("app"));
        assert_eq!(p.redis_settings().password(), Some("datapw"));
        assert_eq!(p.redis_settings().db(), 3);
        assert!(
            matches!(p.addr(), ConnectionAddr::TcpTls { host, port: 6379, .. } if host == "10.0.0.5")
        );
    }
}
