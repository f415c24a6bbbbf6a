//! A parsed [`Endpoint`] as redis-rs connects to it.

use checkout_guard_model::endpoint::Target;
use checkout_guard_model::Endpoint;
use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

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

/// What `endpoint` connects to, as redis-rs connects to it.
pub enum Addresses {
    Single(ConnectionInfo),
    /// A cluster's seed nodes, any of which gives the slot map.
    Cluster(Vec<ConnectionInfo>),
}

/// `endpoint`'s server or seeds, named for `client`.
pub fn addresses(endpoint: &Endpoint, client: Client) -> RedisResult<Addresses> {
    Ok(match endpoint.target() {
        Target::Single(url) => Addresses::Single(connection_info(url, client)?),
        Target::Cluster(seeds) => Addresses::Cluster(
            seeds
                .iter()
                .map(|s| connection_info(s, client))
                .collect::<RedisResult<_>>()?,
        ),
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
            let raw = url.replacen("valkey://", "redis://", 1);
            if !url.contains("+cluster") && raw.as_str().into_connection_info().is_ok() {
                assert!(
                    model.is_ok(),
                    "{url}: redis-rs takes it, the model refuses: {model:?}"
                );
            }
        }
        // The table is not all refusals (a model refusing everything would pass the above).
        assert!(accepted > 100, "only {accepted} URLs accepted");
    }

    /// Every address of an endpoint carries the client's name, cluster seeds included.
    #[test]
    fn every_address_is_named_for_its_client() {
        let lib_names = |url: &str, client: Client| -> Vec<String> {
            let infos = match addresses(&Endpoint::parse(url).unwrap(), client).unwrap() {
                Addresses::Single(i) => vec![i],
                Addresses::Cluster(seeds) => seeds,
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
    }
}
