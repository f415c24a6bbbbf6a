//! The connection layer over TLS against real TLS servers: Debian's `redis-server` (built
//! with TLS; `$REDIS_SERVER`, else `redis-server` on the PATH) started here with
//! certificates this test makes with `openssl`: a CA, another CA, a server certificate for
//! localhost and 127.0.0.1, one for another name, an expired one, a client certificate.
//! Every failure is an error within the open's timeout that says what went wrong.

#[path = "common/ports.rs"]
mod ports;

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use checkout_guard_config::tls::{tls_from_value, PemFile};
use checkout_guard_config::{Endpoint, Tls, TlsDefaults, Value};
use checkout_guard_connection::redis;
use checkout_guard_connection::{reconnect_once, Budget, Client, Connection, Failure};
use ports::free_port;

const TIMEOUT: Duration = Duration::from_millis(500);

/// Certificates made by `openssl` in a directory of this test's own.
struct Pki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Pki {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("cg-tls-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Self { dir };
        for ca in ["ca", "other-ca"] {
            openssl(
                &pki.dir,
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    &format!("{ca}.key"),
                    "-out",
                    &format!("{ca}.pem"),
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN=checkout-guard test {ca}"),
                    "-addext",
                    "basicConstraints=critical,CA:TRUE",
                    "-addext",
                    "keyUsage=critical,keyCertSign,cRLSign",
                ],
            );
        }
        let server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        pki.leaf("server", server, "2");
        pki.leaf(
            "other-name",
            "subjectAltName=DNS:cache.other.example\nextendedKeyUsage=serverAuth\n",
            "2",
        );
        pki.leaf("expired", server, "-1");
        pki.leaf("client", "extendedKeyUsage=clientAuth\n", "2");
        let dns_only = "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n";
        pki.leaf("dns-only", dns_only, "2");
        pki.leaf_by("dns-only-other-ca", dns_only, "2", "other-ca");
        // Both CAs in one file: the cluster bus of nodes whose certificates the two signed.
        let mut both = std::fs::read(pki.dir.join("ca.pem")).unwrap();
        both.extend(std::fs::read(pki.dir.join("other-ca.pem")).unwrap());
        std::fs::write(pki.dir.join("both-cas.pem"), both).unwrap();
        pki
    }

    /// A key and a certificate signed by the CA with these extensions, valid for `days`
    /// (negative: expired already).
    fn leaf(&self, name: &str, ext: &str, days: &str) {
        self.leaf_by(name, ext, days, "ca");
    }

    /// The same, signed by the CA `ca` (`ca` or `other-ca`).
    fn leaf_by(&self, name: &str, ext: &str, days: &str, ca: &str) {
        std::fs::write(self.dir.join(format!("{name}.ext")), ext).unwrap();
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={name}"),
            ],
        );
        let ca_pem = format!("{ca}.pem");
        let ca_key = format!("{ca}.key");
        let csr = format!("{name}.csr");
        let pem = format!("{name}.pem");
        let extfile = format!("{name}.ext");
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_pem,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            days,
        ];
        // No extensions: no -extfile, and openssl makes an X.509 v1 certificate.
        if !ext.is_empty() {
            args.extend(["-extfile", &extfile]);
        }
        openssl(&self.dir, &args);
    }

    /// An X.509 v1 CA and certificates as `openssl x509 -req` makes them without
    /// `-extfile` (v1), as OpenSSL (redis-cli, phpredis, the server) accepts them: the
    /// CA `ca-v1`; a v3 server certificate (`server-by-v1`) and a v3 client certificate
    /// (`client-by-v1`) it signed; a v1 server certificate (`server-v1`) and a v1 client
    /// certificate (`client-v1`) the v3 CA signed.
    fn with_v1(self) -> Self {
        openssl(
            &self.dir,
            &[
                "req",
                "-new",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                "ca-v1.key",
                "-out",
                "ca-v1.csr",
                "-subj",
                "/CN=checkout-guard test v1 CA",
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                "ca-v1.csr",
                "-signkey",
                "ca-v1.key",
                "-out",
                "ca-v1.pem",
                "-days",
                "2",
            ],
        );
        let server = "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n";
        self.leaf_by("server-by-v1", server, "2", "ca-v1");
        self.leaf_by(
            "client-by-v1",
            "extendedKeyUsage=clientAuth\n",
            "2",
            "ca-v1",
        );
        self.leaf_by("server-v1", "", "2", "ca");
        self.leaf_by("client-v1", "", "2", "ca");
        for (name, version) in [
            ("ca-v1", "1"),
            ("server-v1", "1"),
            ("client-v1", "1"),
            ("server-by-v1", "3"),
        ] {
            let out = Command::new("openssl")
                .args([
                    "x509",
                    "-noout",
                    "-text",
                    "-in",
                    &self.path(&format!("{name}.pem")),
                ])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                text.contains(&format!("Version: {version} ")),
                "{name} should be v{version}: {text}"
            );
        }
        self
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).to_str().unwrap().to_string()
    }

    fn pem(&self, file: &str) -> PemFile {
        let path = self.path(file);
        PemFile {
            pem: std::fs::read(&path).unwrap(),
            path,
        }
    }

    /// Verified against this CA (not the system's roots).
    fn tls(&self) -> Tls {
        Tls {
            cafile: Some(self.pem("ca.pem")),
            ..Tls::default()
        }
    }

    fn with_client_cert(&self) -> Tls {
        Tls {
            local_cert: Some(self.pem("client.pem")),
            local_pk: Some(self.pem("client.key")),
            ..self.tls()
        }
    }
}

impl Drop for Pki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `redis-server` serving TLS only, with the certificate `cert` (and its key), trusting
/// client certificates from the CA; `clients` is `--tls-auth-clients` (yes: required).
struct TlsServer {
    child: Child,
    port: u16,
}

impl TlsServer {
    fn start(pki: &Pki, cert: &str, clients: &str) -> Self {
        Self::start_with(pki, cert, clients, &[])
    }

    fn start_with(pki: &Pki, cert: &str, clients: &str, more: &[&str]) -> Self {
        Self::start_trusting(pki, cert, "ca.pem", clients, more)
    }

    /// The same, trusting the CAs in the file `ca` (for clients and for the cluster bus).
    fn start_trusting(pki: &Pki, cert: &str, ca: &str, clients: &str, more: &[&str]) -> Self {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let port = free_port();
        let child = Command::new(&bin)
            .args([
                "--port",
                "0",
                "--tls-port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &pki.path(""),
                "--tls-cert-file",
                &pki.path(&format!("{cert}.pem")),
                "--tls-key-file",
                &pki.path(&format!("{cert}.key")),
                "--tls-ca-cert-file",
                &pki.path(ca),
                "--tls-auth-clients",
                clients,
            ])
            .args(more)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} (apt-get install redis-server): {e}"));
        let server = Self { child, port };
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{bin} did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn endpoint(&self, host: &str, tls: Tls) -> Endpoint {
        Endpoint::parse(&format!("rediss://{host}:{}", self.port))
            .unwrap()
            .with_tls(tls)
    }
}

impl Drop for TlsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn ping(endpoint: &Endpoint) -> redis::RedisResult<String> {
    let mut c = Connection::open(endpoint, Client::WORKER, TIMEOUT)?;
    c.set_timeout(TIMEOUT)?;
    c.each_command(|c| redis::cmd("PING").query(c))
}

/// The open fails, within its timeout, with an error that names `cause`.
fn refused(endpoint: &Endpoint, cause: &str) -> String {
    let started = Instant::now();
    let e = ping(endpoint).expect_err("the TLS connection should fail");
    let elapsed = started.elapsed();
    assert!(elapsed < TIMEOUT * 3, "took {elapsed:?}: {e}");
    let text = e.to_string();
    assert!(text.contains(cause), "{text} should name {cause}");
    eprintln!("refused as it should be: {text}");
    text
}

#[test]
fn server_only_tls_is_verified_against_the_ca_and_the_urls_host() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, "server", "no");
    assert_eq!(
        ping(&server.endpoint("localhost", pki.tls())).unwrap(),
        "PONG"
    );
    assert_eq!(
        ping(&server.endpoint("127.0.0.1", pki.tls())).unwrap(),
        "PONG"
    );
    // valkeys:// is the same.
    let ep = Endpoint::parse(&format!("valkeys://localhost:{}", server.port))
        .unwrap()
        .with_tls(pki.tls());
    assert_eq!(ping(&ep).unwrap(), "PONG");
    // Verified by default: the system's roots do not know the test's CA.
    let e = refused(
        &server.endpoint("localhost", Tls::default()),
        "TLS handshake failed",
    );
    assert!(e.contains("UnknownIssuer"), "{e}");
    // Another CA.
    let other = Tls {
        cafile: Some(pki.pem("other-ca.pem")),
        ..Tls::default()
    };
    let e = refused(&server.endpoint("localhost", other), "TLS handshake failed");
    assert!(e.contains("UnknownIssuer"), "{e}");
    // A plain connection to a TLS port fails within the timeout too.
    let plain = Endpoint::parse(&format!("redis://127.0.0.1:{}", server.port)).unwrap();
    assert!(ping(&plain).is_err());
}

#[test]
fn a_certificate_for_another_name_or_expired_is_refused() {
    let pki = Pki::new();
    let other = TlsServer::start(&pki, "other-name", "no");
    let e = refused(
        &other.endpoint("localhost", pki.tls()),
        "TLS handshake failed",
    );
    assert!(e.contains("not valid for name"), "{e}");
    // The name the certificate carries, given as peer_name.
    let named = Tls {
        peer_name: Some("cache.other.example".into()),
        ..pki.tls()
    };
    assert_eq!(ping(&other.endpoint("127.0.0.1", named)).unwrap(), "PONG");
    // peer_name is checked too, not only the chain.
    let wrong = Tls {
        peer_name: Some("cache.wrong.example".into()),
        ..pki.tls()
    };
    let e = refused(&other.endpoint("127.0.0.1", wrong), "TLS handshake failed");
    assert!(e.contains("not valid for name"), "{e}");
    // ... and the chain with it.
    let wrong_ca = Tls {
        peer_name: Some("cache.other.example".into()),
        cafile: Some(pki.pem("other-ca.pem")),
        ..Tls::default()
    };
    let e = refused(
        &other.endpoint("127.0.0.1", wrong_ca),
        "TLS handshake failed",
    );
    assert!(e.contains("UnknownIssuer"), "{e}");

    let expired = TlsServer::start(&pki, "expired", "no");
    let e = refused(
        &expired.endpoint("localhost", pki.tls()),
        "TLS handshake failed",
    );
    assert!(e.contains("Expired"), "{e}");
}

#[test]
fn verify_peer_false_connects_to_what_would_be_refused() {
    let pki = Pki::new();
    let other = TlsServer::start(&pki, "other-name", "no");
    let off = Tls {
        verify_peer: false,
        ..Tls::default()
    };
    assert_eq!(ping(&other.endpoint("localhost", off)).unwrap(), "PONG");
}

#[test]
fn mutual_tls_needs_the_client_certificate() {
    let pki = Pki::new();
    let server = TlsServer::start(&pki, "server", "yes");
    assert_eq!(
        ping(&server.endpoint("localhost", pki.with_client_cert())).unwrap(),
        "PONG"
    );
    let e = refused(
        &server.endpoint("localhost", pki.tls()),
        "TLS handshake failed",
    );
    assert!(e.to_lowercase().contains("certificate"), "{e}");
}

/// OpenSSL takes an X.509 v1 certificate (what `openssl x509 -req` makes without
/// `-extfile`) where rustls does not, on each side: a v1 CA is a trust anchor rustls
/// takes (server and client certificates it signed connect); a v1 server certificate is
/// refused at connect, the message naming the server's certificate and v1; a v1 client
/// certificate (ours) is refused when the options are read (`tls.local_cert`, naming v1
/// and rustls), and, if it reached a connect anyway, the error names it as ours, not as
/// the peer's (rustls's "invalid peer certificate").
#[test]
fn x509_v1_certificates_are_accepted_where_rustls_can_and_named_where_it_cannot() {
    let pki = Pki::new().with_v1();
    // The v1 CA: mutual TLS with certificates it signed.
    let by_v1 = TlsServer::start_trusting(&pki, "server-by-v1", "ca-v1.pem", "yes", &[]);
    let tls = Tls {
        cafile: Some(pki.pem("ca-v1.pem")),
        local_cert: Some(pki.pem("client-by-v1.pem")),
        local_pk: Some(pki.pem("client-by-v1.key")),
        ..Tls::default()
    };
    assert_eq!(
        ping(&by_v1.endpoint("localhost", tls.clone())).unwrap(),
        "PONG"
    );
    let with_name = Tls {
        peer_name: Some("localhost".into()),
        ..tls
    };
    assert_eq!(
        ping(&by_v1.endpoint("127.0.0.1", with_name)).unwrap(),
        "PONG"
    );
    // A v1 server certificate: refused by rustls, named as the server's.
    let v1_server = TlsServer::start(&pki, "server-v1", "no");
    let text = refused(
        &v1_server.endpoint("localhost", pki.tls()),
        "TLS handshake failed",
    );
    assert!(text.contains("the server's certificate"), "{text}");
    assert!(text.contains("X.509 v1"), "{text}");
    // A v1 client certificate, against a server that would take it: refused with the
    // options, naming tls.local_cert and why.
    let mutual = TlsServer::start(&pki, "server", "yes");
    let option = Value::Map(vec![
        ("cafile".into(), Value::Str(pki.path("ca.pem").into_bytes())),
        (
            "local_cert".into(),
            Value::Str(pki.path("client-v1.pem").into_bytes()),
        ),
        (
            "local_pk".into(),
            Value::Str(pki.path("client-v1.key").into_bytes()),
        ),
    ]);
    let e = tls_from_value(Some(&option), &TlsDefaults::default(), true, &|p| {
        std::fs::read(p)
    })
    .unwrap_err();
    assert_eq!(e.option, "tls.local_cert", "{e}");
    assert!(e.message.contains("X.509 v1"), "{e}");
    assert!(e.message.contains("rustls"), "{e}");
    assert!(e.message.contains(&pki.path("client-v1.pem")), "{e}");
    // The same certificate given to the connection layer directly: refused, as ours.
    let v1_client = Tls {
        local_cert: Some(pki.pem("client-v1.pem")),
        local_pk: Some(pki.pem("client-v1.key")),
        ..pki.tls()
    };
    let text = refused(&mutual.endpoint("localhost", v1_client), "tls.local_cert");
    assert!(text.contains("X.509 v1"), "{text}");
    assert!(!text.contains("invalid peer certificate"), "{text}");
}

/// A server that accepts TCP and never answers the handshake: the open ends within its
/// timeout, as a timeout (with and without peer_name's own check).
#[test]
fn a_handshake_that_never_ends_times_out_within_the_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let _held = std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    for tls in [
        Tls::default(),
        Tls {
            peer_name: Some("cache.example".into()),
            ..Tls::default()
        },
    ] {
        let ep = Endpoint::parse(&format!("rediss://127.0.0.1:{port}"))
            .unwrap()
            .with_tls(tls);
        let started = Instant::now();
        let e = ping(&ep).expect_err("nothing answered");
        assert!(e.is_timeout(), "{e}");
        assert!(started.elapsed() < TIMEOUT * 3, "{:?}", started.elapsed());
    }
    // A cluster seed that never answers the handshake: the open fails, bounded.
    let ep = Endpoint::parse(&format!("rediss+cluster://127.0.0.1:{port}"))
        .unwrap()
        .with_tls(Tls::default());
    let started = Instant::now();
    assert!(Connection::open(&ep, Client::WORKER, TIMEOUT).is_err());
    let took = started.elapsed();
    eprintln!("cluster open against a hung handshake: {took:?}");
    assert!(took < TIMEOUT * 3, "{took:?}");
}

/// A one-node TLS cluster (`--tls-cluster yes`) holding every slot, its slot map naming
/// the node by IP (`cluster-announce-ip`) or by name (`cluster-announce-hostname`).
fn tls_cluster(pki: &Pki, cert: &str, by_name: bool) -> TlsServer {
    let port = free_port();
    let conf = pki.path(&format!("nodes-{port}.conf"));
    // The bus on a port of its own: by default it is the client port + 10,000, a port
    // nobody reserved (and past 65,535 for a client port past 55,535).
    let bus = free_port().to_string();
    let mut more = vec![
        "--cluster-enabled",
        "yes",
        "--tls-cluster",
        "yes",
        "--cluster-port",
        &bus,
        "--cluster-config-file",
    ];
    more.push(&conf);
    if !by_name {
        // A node that was never met would be named by the address it was asked at.
        more.extend(["--cluster-announce-ip", "127.0.0.1"]);
    } else {
        more.extend([
            "--cluster-announce-hostname",
            "localhost",
            "--cluster-preferred-endpoint-type",
            "hostname",
        ]);
    }
    let server = TlsServer::start_with(pki, cert, "no", &more);
    // Every slot to the node, over a single-server TLS connection.
    let admin = Endpoint::parse(&format!("rediss://127.0.0.1:{}", server.port))
        .unwrap()
        .with_tls(Tls {
            verify_peer: false,
            ..Tls::default()
        });
    let mut c = Connection::open(&admin, Client::CLI, TIMEOUT).unwrap();
    c.set_timeout(TIMEOUT).unwrap();
    c.each_command(|c| {
        redis::cmd("CLUSTER")
            .arg("ADDSLOTSRANGE")
            .arg(0)
            .arg(16383)
            .query::<()>(c)
    })
    .unwrap();
    let started = Instant::now();
    loop {
        let info: String = c
            .each_command(|c| redis::cmd("CLUSTER").arg("INFO").query(c))
            .unwrap();
        if info.contains("cluster_state:ok") {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{info}");
        std::thread::sleep(Duration::from_millis(20));
    }
    server
}

fn cluster_set_get(server: &TlsServer, host: &str, tls: Tls) -> redis::RedisResult<String> {
    let ep = Endpoint::parse(&format!("rediss+cluster://{host}:{}", server.port))
        .unwrap()
        .with_tls(tls);
    let mut c = Connection::open(&ep, Client::WORKER, TIMEOUT)?;
    c.set_timeout(TIMEOUT)?;
    c.each_command(|c| {
        redis::cmd("SET")
            .arg("{cg:tls}:k")
            .arg("v")
            .query::<()>(c)?;
        redis::cmd("GET").arg("{cg:tls}:k").query(c)
    })
}

/// Every node of a TLS cluster is verified, by its name in the slot map: a slot map that
/// names the node by IP, with a certificate that carries only a DNS name, is refused even
/// though the seed (reached by that name) was fine; announcing the name fixes it, as does
/// `peer_name`; a wrong CA is refused and `verify_peer => false` takes anything.
#[test]
fn every_node_of_a_tls_cluster_is_verified() {
    let pki = Pki::new();
    let by_ip = tls_cluster(&pki, "server", false);
    assert_eq!(
        cluster_set_get(&by_ip, "127.0.0.1", pki.tls()).unwrap(),
        "v"
    );
    let valkeys = Endpoint::parse(&format!("valkeys+cluster://localhost:{}", by_ip.port))
        .unwrap()
        .with_tls(pki.tls());
    assert!(Connection::open(&valkeys, Client::WORKER, TIMEOUT).is_ok());
    let other_ca = Tls {
        cafile: Some(pki.pem("other-ca.pem")),
        ..Tls::default()
    };
    let e = cluster_set_get(&by_ip, "127.0.0.1", other_ca).unwrap_err();
    assert!(e.to_string().contains("UnknownIssuer"), "{e}");

    // The certificate carries `localhost` only; the slot map says 127.0.0.1.
    let dns_by_ip = tls_cluster(&pki, "dns-only", false);
    let e = cluster_set_get(&dns_by_ip, "localhost", pki.tls()).unwrap_err();
    assert!(e.to_string().contains("not valid for name"), "{e}");
    let named = Tls {
        peer_name: Some("localhost".into()),
        ..pki.tls()
    };
    assert_eq!(
        cluster_set_get(&dns_by_ip, "127.0.0.1", named).unwrap(),
        "v"
    );
    let off = Tls {
        verify_peer: false,
        ..Tls::default()
    };
    assert_eq!(cluster_set_get(&dns_by_ip, "127.0.0.1", off).unwrap(), "v");

    let dns_by_name = tls_cluster(&pki, "dns-only", true);
    assert_eq!(
        cluster_set_get(&dns_by_name, "localhost", pki.tls()).unwrap(),
        "v"
    );
}

/// Three primaries over TLS (`--tls-cluster yes`, each bus on a port of its own), met by IP
/// (`CLUSTER MEET 127.0.0.1 ...`, `cluster-announce-ip 127.0.0.1`) and each given a third of
/// the slots, so the slot map names every node `127.0.0.1`. Node `i` serves the certificate
/// `certs[i]`; every node trusts both CAs, so the bus (whose nodes present the client
/// certificate to each other) forms whichever signed a node's.
struct TlsCluster {
    nodes: Vec<TlsServer>,
}

fn admin(port: u16) -> Connection {
    let ep = Endpoint::parse(&format!("rediss://127.0.0.1:{port}"))
        .unwrap()
        .with_tls(Tls {
            verify_peer: false,
            ..Tls::default()
        });
    let mut c = Connection::open(&ep, Client::CLI, TIMEOUT).unwrap();
    c.set_timeout(TIMEOUT).unwrap();
    c
}

fn cluster_cmd<T: redis::FromRedisValue>(c: &mut Connection, args: &[&str]) -> T {
    c.each_command(|c| redis::cmd("CLUSTER").arg(args).query(c))
        .unwrap_or_else(|e| panic!("CLUSTER {args:?}: {e}"))
}

impl TlsCluster {
    fn start(pki: &Pki, certs: &[&str]) -> Self {
        let mut nodes = Vec::new();
        let mut buses = Vec::new();
        for cert in certs {
            let bus = free_port();
            let conf = pki.path(&format!("nodes-{bus}.conf"));
            let bus_port = bus.to_string();
            let (client_cert, client_key) = (pki.path("client.pem"), pki.path("client.key"));
            let more = [
                "--cluster-enabled",
                "yes",
                "--tls-cluster",
                "yes",
                "--cluster-config-file",
                &conf,
                "--cluster-port",
                &bus_port,
                "--cluster-announce-ip",
                "127.0.0.1",
                // The bus wants a client certificate of the node that connects.
                "--tls-client-cert-file",
                &client_cert,
                "--tls-client-key-file",
                &client_key,
            ];
            nodes.push(TlsServer::start_trusting(
                pki,
                cert,
                "both-cas.pem",
                "no",
                &more,
            ));
            buses.push(bus);
        }
        let mut first = admin(nodes[0].port);
        for (node, bus) in nodes.iter().zip(&buses).skip(1) {
            let _: () = cluster_cmd(
                &mut first,
                &[
                    "MEET",
                    "127.0.0.1",
                    &node.port.to_string(),
                    &bus.to_string(),
                ],
            );
        }
        let n = nodes.len();
        for (i, node) in nodes.iter().enumerate() {
            let (from, to) = Self::range(i, n);
            let _: () = cluster_cmd(
                &mut admin(node.port),
                &["ADDSLOTSRANGE", &from.to_string(), &to.to_string()],
            );
        }
        // Ready: every node sees every slot served and the others known.
        let started = Instant::now();
        for node in &nodes {
            let mut c = admin(node.port);
            loop {
                let info: String = cluster_cmd(&mut c, &["INFO"]);
                if info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{n}\r"))
                {
                    break;
                }
                assert!(started.elapsed() < Duration::from_secs(20), "{info}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Self { nodes }
    }

    /// Node `i`'s slots of `n` nodes.
    fn range(i: usize, n: usize) -> (u16, u16) {
        let slots = usize::from(checkout_guard_model::slot::SLOTS);
        ((i * slots / n) as u16, ((i + 1) * slots / n - 1) as u16)
    }

    /// A key in node `i`'s slots.
    fn key_on(&self, i: usize) -> String {
        let (from, to) = Self::range(i, self.nodes.len());
        (0..)
            .map(|j| format!("{{cg:tls:{j}}}:k"))
            .find(|k| (from..=to).contains(&checkout_guard_model::slot::key_slot(k.as_bytes())))
            .unwrap()
    }

    /// The endpoint with these nodes (by index) as seeds, reached by `host`.
    fn endpoint(&self, host: &str, seeds: &[usize], tls: Tls) -> Endpoint {
        let seeds: Vec<String> = seeds
            .iter()
            .map(|&i| format!("{host}:{}", self.nodes[i].port))
            .collect();
        Endpoint::parse(&format!("rediss+cluster://{}", seeds.join(",")))
            .unwrap()
            .with_tls(tls)
    }
}

/// One write of `value` to `key` (and its read back) on a new connection, as a worker's
/// call is made: through `reconnect_once`, so a failure is what the call would report.
fn cluster_write(ep: &Endpoint, key: &str, value: &str) -> Result<String, Failure> {
    let mut kept = None;
    reconnect_once(
        &mut kept,
        Budget::starting_now(TIMEOUT),
        |left| Connection::open(ep, Client::WORKER, left),
        |c| {
            c.each_command(|c| {
                redis::cmd("SET").arg(key).arg(value).query::<()>(c)?;
                redis::cmd("GET").arg(key).query(c)
            })
        },
    )
}

/// What node `port` itself holds at `key` (asked over its own connection, not the
/// cluster's: the write reached that node).
fn held_by(port: u16, key: &str) -> Option<String> {
    admin(port)
        .each_command(|c| redis::cmd("GET").arg(key).query(c))
        .unwrap()
}

/// An unavailable call (not Valkey's answer) whose cause names `cause`.
fn unavailable(got: Result<String, Failure>, cause: &str) -> String {
    let failure = got.expect_err("the call should fail");
    assert!(
        !matches!(failure, Failure::Reply(_)),
        "{failure:?} is not a reply"
    );
    let text = failure.into_error().to_string();
    assert!(text.contains(cause), "{text} should name {cause}");
    text
}

/// The issue's case on three primaries: the slot map names every node by IP while the
/// certificates carry only `localhost`. With `peer_name` a write on a key in each node's
/// slots lands on that node; without it every one is refused for the name, even though the
/// seed (reached as `localhost`) passed; and a node whose certificate another CA signed is
/// refused for its chain while the seed and the other node are fine.
#[test]
fn every_node_of_a_three_node_tls_cluster_is_verified() {
    let pki = Pki::new();
    let cluster = TlsCluster::start(&pki, &["dns-only"; 3]);
    // The premise: the slot map names the nodes by IP.
    let slots: Vec<Vec<redis::Value>> = cluster_cmd(&mut admin(cluster.nodes[0].port), &["SLOTS"]);
    assert_eq!(slots.len(), 3, "{slots:?}");
    for range in &slots {
        let node: Vec<redis::Value> = redis::from_redis_value(range[2].clone()).unwrap();
        let ip: String = redis::from_redis_value(node[0].clone()).unwrap();
        assert_eq!(ip, "127.0.0.1", "{slots:?}");
    }

    let named = Tls {
        peer_name: Some("localhost".into()),
        ..pki.tls()
    };
    for seeds in [&[0][..], &[1, 2]] {
        let ep = cluster.endpoint("127.0.0.1", seeds, named.clone());
        for (i, node) in cluster.nodes.iter().enumerate() {
            let key = cluster.key_on(i);
            let value = format!("from {seeds:?}");
            let got = cluster_write(&ep, &key, &value)
                .unwrap_or_else(|e| panic!("node {i} with peer_name: {e:?}"));
            assert_eq!(got, value);
            assert_eq!(held_by(node.port, &key).as_deref(), Some(value.as_str()));
        }
    }

    // A seed that is down, listed first, is skipped with peer_name as without it: the
    // next seed gives the slot map (the seeds' name checks ran up front, so one down seed
    // failed every open).
    let down = free_port();
    for tls in [
        named.clone(),
        Tls {
            verify_peer: false,
            ..Tls::default()
        },
    ] {
        let seeds = format!("127.0.0.1:{down},127.0.0.1:{}", cluster.nodes[0].port);
        let ep = Endpoint::parse(&format!("rediss+cluster://{seeds}"))
            .unwrap()
            .with_tls(tls.clone());
        let got = cluster_write(&ep, &cluster.key_on(1), "after a down seed");
        assert_eq!(
            got.unwrap_or_else(|e| panic!("{tls:?}: {e:?}")),
            "after a down seed"
        );
    }

    // No peer_name: the seed as `localhost` is fine, every node in the slot map is not.
    let by_name = cluster.endpoint("localhost", &[0], pki.tls());
    for i in 0..3 {
        let text = unavailable(
            cluster_write(&by_name, &cluster.key_on(i), "no"),
            "not valid for name",
        );
        eprintln!("node {i} without peer_name: {text}");
    }
    // Seeds by IP without peer_name: the seeds themselves are refused, named.
    let by_ip = cluster.endpoint("127.0.0.1", &[0, 1, 2], pki.tls());
    unavailable(
        cluster_write(&by_ip, &cluster.key_on(0), "no"),
        "not valid for name",
    );
    drop(cluster);

    // The third node's certificate signed by another CA (the bus trusts both).
    let mixed = TlsCluster::start(&pki, &["dns-only", "dns-only", "dns-only-other-ca"]);
    let ep = mixed.endpoint("127.0.0.1", &[0], named.clone());
    for i in 0..2 {
        assert_eq!(cluster_write(&ep, &mixed.key_on(i), "ok").unwrap(), "ok");
    }
    let text = unavailable(cluster_write(&ep, &mixed.key_on(2), "no"), "UnknownIssuer");
    eprintln!("the other CA's node: {text}");
    assert_eq!(held_by(mixed.nodes[2].port, &mixed.key_on(2)), None);
    // ... and as a seed, the same.
    let ep = mixed.endpoint("127.0.0.1", &[2], named);
    unavailable(cluster_write(&ep, &mixed.key_on(0), "no"), "UnknownIssuer");
}

/// A sentinel (Debian's `redis-server --sentinel`) serving TLS only on a port of its own,
/// speaking TLS to the primary it monitors (`tls-replication yes`).
fn tls_sentinel(pki: &Pki, primary: u16) -> TlsServer {
    let port = free_port();
    let conf = pki.path(&format!("sentinel-{port}.conf"));
    std::fs::write(
        &conf,
        format!(
            "port 0\ntls-port {port}\nbind 127.0.0.1\ndir {dir}\n\
             tls-cert-file {dir}/server.pem\ntls-key-file {dir}/server.key\n\
             tls-ca-cert-file {dir}/ca.pem\ntls-auth-clients no\ntls-replication yes\n\
             sentinel monitor cgtls 127.0.0.1 {primary} 1\n",
            dir = pki.path("")
        ),
    )
    .unwrap();
    let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
    let child = Command::new(&bin)
        .arg(&conf)
        .arg("--sentinel")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{bin} (apt-get install redis-server): {e}"));
    let server = TlsServer { child, port };
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no sentinel on {port}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    server
}

/// `valkeys+sentinel://`: TLS to the sentinel and to the primary it names, both verified
/// with the same `tls` settings; a sentinel whose certificate the CA did not sign is
/// refused within the timeout, the handshake's cause named.
#[test]
fn a_tls_sentinel_url_verifies_the_sentinels_and_the_primary() {
    let pki = Pki::new();
    let primary = TlsServer::start(&pki, "server", "no");
    let sentinel = tls_sentinel(&pki, primary.port);
    let url = format!("valkeys+sentinel://127.0.0.1:{}/cgtls", sentinel.port);
    let ep = Endpoint::parse(&url).unwrap().with_tls(pki.tls());
    let mut c = Connection::open(&ep, Client::WORKER, TIMEOUT).unwrap();
    assert_eq!(
        c.primary(),
        Some(format!("127.0.0.1:{}", primary.port).as_str())
    );
    c.set_timeout(TIMEOUT).unwrap();
    let got: String = c
        .each_command(|c| {
            redis::cmd("SET")
                .arg("cg:tls-sentinel")
                .arg("v")
                .query::<()>(c)?;
            redis::cmd("GET").arg("cg:tls-sentinel").query(c)
        })
        .unwrap();
    assert_eq!(got, "v");
    let other = Endpoint::parse(&url).unwrap().with_tls(Tls {
        cafile: Some(pki.pem("other-ca.pem")),
        ..Tls::default()
    });
    let text = refused(&other, "sentinel");
    assert!(text.to_ascii_lowercase().contains("certificate"), "{text}");
}

/// With `peer_name`, each sentinel's own name check is part of asking it: a sentinel that
/// is down, listed first, is skipped like one that does not answer, and the next names the
/// primary (review: the checks ran up front and one down sentinel failed every open).
#[test]
fn a_down_sentinel_with_peer_name_is_skipped() {
    let pki = Pki::new();
    let primary = TlsServer::start(&pki, "server", "no");
    let sentinel = tls_sentinel(&pki, primary.port);
    let down = free_port();
    let url = format!(
        "valkeys+sentinel://127.0.0.1:{down},127.0.0.1:{}/cgtls",
        sentinel.port
    );
    let ep = Endpoint::parse(&url).unwrap().with_tls(Tls {
        peer_name: Some("localhost".into()),
        ..pki.tls()
    });
    let c = Connection::open(&ep, Client::WORKER, TIMEOUT)
        .unwrap_or_else(|e| panic!("the second sentinel names the primary: {e}"));
    assert_eq!(
        c.primary(),
        Some(format!("127.0.0.1:{}", primary.port).as_str())
    );
}

/// The tests of this binary run in parallel, each starting servers on ports from
/// `free_port()`: a port handed out twice lets two servers race for it, and the one that
/// loses answers its test from the other's server ("Slot 10922 is already busy" when a
/// cluster node's port was a one-node cluster's). The kernel hands out a released port
/// again, so the binary keeps what it handed out.
#[test]
fn free_ports_are_never_handed_out_twice() {
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3000 {
        let port = free_port();
        assert!(seen.insert(port), "port {port} handed out twice");
    }
}

/// Outgoing connections take their local port from the ephemeral range: a port chosen there
/// can be taken by a client socket before the server binds it.
#[test]
fn free_ports_are_below_the_ephemeral_range() {
    let low = ports::ephemeral_low();
    if low < 11_024 {
        eprintln!("skipped: the ephemeral range starts at {low}");
        return;
    }
    for _ in 0..200 {
        let port = free_port();
        assert!(
            (1024..low).contains(&port),
            "port {port} is in the ephemeral range (from {low})"
        );
    }
}
