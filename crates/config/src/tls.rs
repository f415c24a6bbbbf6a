//! TLS options of an endpoint (`rediss://`, `valkeys://`, `rediss+cluster://`,
//! `valkeys+cluster://`): the limiter option `'tls' => [...]` and the INI defaults
//! `checkout_guard.tls.*`, named like PHP's own SSL context options (`cafile`,
//! `local_cert`, `local_pk`, `peer_name`, `verify_peer`).
//!
//! The one place configuration reads files: a CA, certificate or key file is read and its PEM
//! checked when the options are validated, so a path that cannot be used is a
//! `ConfigurationException` at construction (naming the option and the path, never the
//! file's content), not an unavailable decision at every call.

use std::fmt;

use crate::value::{quote_bytes, Value};
use checkout_guard_model::error::ConfigError;

/// A PEM file as read when the options were validated: its path (shown) and content
/// (never shown).
#[derive(Clone, PartialEq, Eq)]
pub struct PemFile {
    pub path: String,
    pub pem: Vec<u8>,
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PemFile").field(&self.path).finish()
    }
}

/// An endpoint's TLS settings: verified by default, the chain against the system's roots
/// (or `cafile`), the name against the URL's host (or `peer_name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    /// CA certificates (PEM) that replace the system's roots.
    pub cafile: Option<PemFile>,
    /// The client certificate (PEM chain) for mutual TLS, with `local_pk`.
    pub local_cert: Option<PemFile>,
    /// The client certificate's private key (PEM).
    pub local_pk: Option<PemFile>,
    /// The name the server's certificate must carry, instead of the URL's host.
    pub peer_name: Option<String>,
    /// `false` only by the explicit option `verify_peer => false`: no check of the chain
    /// nor of the name.
    pub verify_peer: bool,
}

impl Default for Tls {
    fn default() -> Self {
        Self {
            cafile: None,
            local_cert: None,
            local_pk: None,
            peer_name: None,
            verify_peer: true,
        }
    }
}

impl Tls {
    /// What a connection pool keys on besides the URL: two limiters with different TLS
    /// settings never share a connection. Paths and names only.
    pub fn key(&self) -> String {
        let path = |p: &Option<PemFile>| p.as_ref().map_or("", |p| p.path.as_str()).to_string();
        format!(
            "cafile={};local_cert={};local_pk={};peer_name={};verify_peer={}",
            path(&self.cafile),
            path(&self.local_cert),
            path(&self.local_pk),
            self.peer_name.as_deref().unwrap_or(""),
            self.verify_peer
        )
    }

    /// One line for `health()` and `phpinfo()`.
    pub fn describe(&self) -> String {
        if !self.verify_peer {
            return "on, verification off (verify_peer => false)".to_string();
        }
        let mut out = String::from("on, verified against ");
        match &self.cafile {
            Some(ca) => out.push_str(&format!("cafile {}", ca.path)),
            None => out.push_str("the system's roots"),
        }
        if let Some(name) = &self.peer_name {
            out.push_str(&format!(", peer_name {name}"));
        }
        if self.local_cert.is_some() {
            out.push_str(", client certificate");
        }
        out
    }
}

/// The INI defaults `checkout_guard.tls.*` as given (empty: unset); read when a limiter
/// with a TLS URL is made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsDefaults {
    pub cafile: Option<String>,
    pub local_cert: Option<String>,
    pub local_pk: Option<String>,
    pub peer_name: Option<String>,
}

impl TlsDefaults {
    /// From the raw INI strings; empty or blank is unset.
    pub fn from_ini(
        cafile: Option<&str>,
        local_cert: Option<&str>,
        local_pk: Option<&str>,
        peer_name: Option<&str>,
    ) -> Self {
        let set = |s: Option<&str>| {
            s.map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        Self {
            cafile: set(cafile),
            local_cert: set(local_cert),
            local_pk: set(local_pk),
            peer_name: set(peer_name),
        }
    }

    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

const KNOWN: &[&str] = &[
    "cafile",
    "local_cert",
    "local_pk",
    "peer_name",
    "verify_peer",
];

/// Which PEM a file must hold, and what rustls does with it at connect.
#[derive(Clone, Copy)]
enum Kind {
    /// `cafile`: certificates rustls takes as trust anchors.
    TrustAnchors,
    /// `local_cert`: the client's own certificate first (rustls parses it at connect as
    /// an end-entity certificate), then the chain sent with it.
    ClientCertificate,
    PrivateKey,
}

/// The TLS settings of an endpoint: the `tls` option (`None`: not given) over the INI
/// defaults. `tls_url` says whether the URL is a TLS form; `tls` options on a plain URL
/// are an error, the INI defaults then do not apply. `read` reads a file (`std::fs::read`
/// outside tests).
pub fn tls_from_value(
    option: Option<&Value>,
    defaults: &TlsDefaults,
    tls_url: bool,
    read: &dyn Fn(&str) -> std::io::Result<Vec<u8>>,
) -> Result<Option<Tls>, ConfigError> {
    if !tls_url {
        return match option {
            None => Ok(None),
            Some(_) => Err(ConfigError::new(
                "tls",
                "is for a TLS URL (rediss://, valkeys://, rediss+cluster://, valkeys+cluster://); the url is a plain one",
            )),
        };
    }
    // Each field: (its option name, the INI setting's name, the value and where it came from).
    let mut cafile = defaults
        .cafile
        .clone()
        .map(|p| (p, "checkout_guard.tls.cafile".to_string()));
    let mut local_cert = defaults
        .local_cert
        .clone()
        .map(|p| (p, "checkout_guard.tls.local_cert".to_string()));
    let mut local_pk = defaults
        .local_pk
        .clone()
        .map(|p| (p, "checkout_guard.tls.local_pk".to_string()));
    let mut peer_name = defaults.peer_name.clone();
    let mut verify_peer = true;
    if let Some(v) = option {
        let entries = crate::value::map_entries("tls", v)?;
        for (key, _) in entries {
            if !KNOWN.contains(&key.as_str()) {
                return Err(ConfigError::new(
                    format!("tls.{}", quote_bytes(key.as_bytes())),
                    format!("is not a known TLS option (known: {})", KNOWN.join(", ")),
                ));
            }
        }
        let string = |k: &str| -> Result<Option<String>, ConfigError> {
            match crate::value::option(entries, k) {
                None => Ok(None),
                Some(Value::Str(s)) if s.is_empty() => Err(ConfigError::new(
                    format!("tls.{k}"),
                    "must not be empty (leave it out to use the default)",
                )),
                Some(Value::Str(s)) => String::from_utf8(s.clone()).map(Some).map_err(|_| {
                    ConfigError::new(
                        format!("tls.{k}"),
                        format!("must be UTF-8, got {}", quote_bytes(s)),
                    )
                }),
                Some(v) => Err(crate::value::type_error(&format!("tls.{k}"), "a string", v)),
            }
        };
        fn named(k: &str) -> impl Fn(String) -> (String, String) + '_ {
            move |p| (p, format!("tls.{k}"))
        }
        if let Some(c) = string("cafile")?.map(named("cafile")) {
            cafile = Some(c);
        }
        if let Some(c) = string("local_cert")?.map(named("local_cert")) {
            local_cert = Some(c);
        }
        if let Some(c) = string("local_pk")?.map(named("local_pk")) {
            local_pk = Some(c);
        }
        if let Some(n) = string("peer_name")? {
            peer_name = Some(n);
        }
        match crate::value::option(entries, "verify_peer") {
            None => {}
            Some(Value::Bool(b)) => verify_peer = *b,
            Some(v) => {
                return Err(crate::value::type_error(
                    "tls.verify_peer",
                    "a bool (true or false)",
                    v,
                ))
            }
        }
    } else if defaults.is_empty() {
        return Ok(Some(Tls::default()));
    }
    if let Some(name) = &peer_name {
        if name.contains(|c: char| c.is_whitespace() || c.is_control() || c == '/') {
            return Err(ConfigError::new(
                "tls.peer_name",
                format!("must be a host name, got {}", quote_bytes(name.as_bytes())),
            ));
        }
    }
    match (&local_cert, &local_pk) {
        (Some((_, cert)), None) => {
            return Err(ConfigError::new(
                cert.clone(),
                "needs its private key too (tls.local_pk or checkout_guard.tls.local_pk)",
            ))
        }
        (None, Some((_, pk))) => {
            return Err(ConfigError::new(
                pk.clone(),
                "needs its certificate too (tls.local_cert or checkout_guard.tls.local_cert)",
            ))
        }
        _ => {}
    }
    let load = |f: Option<(String, String)>, kind: Kind| -> Result<Option<PemFile>, ConfigError> {
        f.map(|(path, option)| load_pem(&option, &path, kind, read))
            .transpose()
    };
    Ok(Some(Tls {
        cafile: load(cafile, Kind::TrustAnchors)?,
        local_cert: load(local_cert, Kind::ClientCertificate)?,
        local_pk: load(local_pk, Kind::PrivateKey)?,
        peer_name,
        verify_peer,
    }))
}

/// Reads `path` and checks it holds what `kind` says, in PEM; the error names `option`
/// and the path, never the content.
fn load_pem(
    option: &str,
    path: &str,
    kind: Kind,
    read: &dyn Fn(&str) -> std::io::Result<Vec<u8>>,
) -> Result<PemFile, ConfigError> {
    let pem = read(path).map_err(|e| {
        ConfigError::new(
            option,
            format!(
                "names a file that cannot be read: {} ({e})",
                quote_bytes(path.as_bytes())
            ),
        )
    })?;
    let labels = pem_labels(&pem).map_err(|why| {
        ConfigError::new(
            option,
            format!(
                "is not a PEM file ({why}): {}",
                quote_bytes(path.as_bytes())
            ),
        )
    })?;
    let ok = match kind {
        Kind::TrustAnchors | Kind::ClientCertificate => labels.iter().any(|l| l == "CERTIFICATE"),
        Kind::PrivateKey => labels
            .iter()
            .any(|l| l == "PRIVATE KEY" || l == "RSA PRIVATE KEY" || l == "EC PRIVATE KEY"),
    };
    if !ok {
        let wanted = match kind {
            Kind::TrustAnchors | Kind::ClientCertificate => "CERTIFICATE",
            Kind::PrivateKey => "PRIVATE KEY (PKCS#8, RSA or EC)",
        };
        return Err(ConfigError::new(
            option,
            format!(
                "holds no {wanted} block in PEM: {}",
                quote_bytes(path.as_bytes())
            ),
        ));
    }
    check_certificates(option, path, &pem, kind)?;
    Ok(PemFile {
        path: path.to_string(),
        pem,
    })
}

/// What rustls does with the certificates at connect, done here with the same parser
/// (webpki), so that a certificate it refuses is a `ConfigurationException` at
/// construction and not an unavailable decision at every call. rustls (webpki) accepts
/// only X.509 v3 as the client's own certificate (it parses it to check that it matches
/// the key), where OpenSSL (redis-cli, phpredis, the server) also accepts v1, which is
/// what `openssl x509 -req` makes without `-extfile`. A v1 CA is accepted (as a trust
/// anchor), so `cafile` can be v1.
fn check_certificates(option: &str, path: &str, pem: &[u8], kind: Kind) -> Result<(), ConfigError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;
    let quoted = || quote_bytes(path.as_bytes());
    let certs = match kind {
        Kind::PrivateKey => return Ok(()),
        Kind::TrustAnchors | Kind::ClientCertificate => CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| {
                ConfigError::new(
                    option,
                    format!(
                        "is not a PEM file the TLS library (rustls) can read ({e}): {}",
                        quoted()
                    ),
                )
            })?,
    };
    match kind {
        Kind::TrustAnchors => {
            for (i, cert) in certs.iter().enumerate() {
                webpki::anchor_from_trusted_cert(cert).map_err(|e| {
                    ConfigError::new(
                        option,
                        format!(
                            "holds a certificate (number {} in the file) that the TLS library (rustls) cannot use as a CA ({e:?}): {}",
                            i + 1,
                            quoted()
                        ),
                    )
                })?;
            }
        }
        Kind::ClientCertificate => {
            // Only the first is parsed by rustls; the rest of the chain goes to the server
            // as it is.
            if let Some(first) = certs.first() {
                if let Err(e) = webpki::EndEntityCert::try_from(first) {
                    let why = match e {
                        webpki::Error::UnsupportedCertVersion => "is an X.509 v1 (or v2) certificate: the TLS library (rustls) accepts only v3 as the client's own certificate, though OpenSSL (redis-cli, phpredis, the server) accepts v1; reissue it as v3 with extensions (`openssl x509 -req ... -extfile client.ext`, client.ext holding e.g. `extendedKeyUsage=clientAuth`)".to_string(),
                        e => format!(
                            "is a certificate the TLS library (rustls) cannot use as the client's own certificate ({e:?})"
                        ),
                    };
                    return Err(ConfigError::new(option, format!("{why}: {}", quoted())));
                }
            }
        }
        Kind::PrivateKey => {}
    }
    Ok(())
}

/// The labels of the PEM blocks in `pem` (`-----BEGIN L-----`, base64, `-----END L-----`),
/// or what is wrong: no block, a block not ended, a body that is not base64.
fn pem_labels(pem: &[u8]) -> Result<Vec<String>, &'static str> {
    let text = std::str::from_utf8(pem).map_err(|_| "not text")?;
    let mut labels = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut body = String::new();
        let mut ended = false;
        for line in lines.by_ref() {
            if line == end {
                ended = true;
                break;
            }
            if line.contains(':') {
                // An RFC 1421 header (`Proc-Type: 4,ENCRYPTED`): not base64.
                continue;
            }
            body.push_str(line);
        }
        if !ended {
            return Err("a block is not ended");
        }
        if body.is_empty() || !is_base64(&body) {
            return Err("a block's body is not base64");
        }
        labels.push(label.to_string());
    }
    if labels.is_empty() {
        return Err("no -----BEGIN block");
    }
    Ok(labels)
}

fn is_base64(s: &str) -> bool {
    let data = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - data.len() <= 2
        && data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A real X.509 v3 certificate (ed25519, self-signed, made with `openssl req -x509`).
    pub(crate) const CERT: &str = "-----BEGIN CERTIFICATE-----
MIIBOjCB7aADAgECAhRPIBDzujyaSKyxMhN2+py9zsbdvjAFBgMrZXAwEjEQMA4G
A1UEAwwHdGVzdC12MzAgFw0yNjEyMDYwMzE4NTdaGA8yMTI2MTExMjAzMTg1N1ow
EjEQMA4GA1UEAwwHdGVzdC12MzAqMAUGAytlcAMhAJH/1n+ayjv/IhWZ7fFl/TZZ
GTdC5EgIqgK4Kj6oeJsZo1MwUTAdBgNVHQ4EFgQUkrb6XYsFG2HpU9UvUD1kapb7
L/swHwYDVR0jBBgwFoAUkrb6XYsFG2HpU9UvUD1kapb7L/swDwYDVR0TAQH/BAUw
AwEB/zAFBgMrZXADQQBroCNKPiVLlE8h1WIYKCyPSGxBpQ9zFu1DoTR0ERRmIdqP
23QuBg8cXVrRWQk6UNQ/d50KclKka1qnB1hS6KoM
-----END CERTIFICATE-----
";
    /// The same key in an X.509 v1 certificate, as `openssl x509 -req -signkey` makes it
    /// without `-extfile`.
    const CERT_V1: &str = "-----BEGIN CERTIFICATE-----
MIHgMIGTAhQttmjWyOOAXeMjimrwi7Fc5HDRUDAFBgMrZXAwEjEQMA4GA1UEAwwH
dGVzdC12MTAgFw0yNjEyMDYwMzE4NTdaGA8yMTI2MTExMjAzMTg1N1owEjEQMA4G
A1UEAwwHdGVzdC12MTAqMAUGAytlcAMhAJH/1n+ayjv/IhWZ7fFl/TZZGTdC5EgI
qgK4Kj6oeJsZMAUGAytlcANBAGzgSiyPm3oiVt+Z6mygVt9J6lPf2c1NuDR22yJt
DOZ6jKUb9U717RS922kqttrGboUl/1nx0KPcjsy1VtAekwY=
-----END CERTIFICATE-----
";
    const KEY: &str =
        "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIB==\n-----END PRIVATE KEY-----\n";

    fn files(path: &str) -> std::io::Result<Vec<u8>> {
        match path {
            "/ca.pem" | "/client.pem" => Ok(CERT.into()),
            "/client.key" => Ok(KEY.into()),
            "/v1.pem" => Ok(CERT_V1.into()),
            "/v1-then-v3.pem" => Ok(format!("{CERT_V1}{CERT}").into()),
            "/v3-then-v1.pem" => Ok(format!("{CERT}{CERT_V1}").into()),
            "/notder.pem" => {
                Ok(b"-----BEGIN CERTIFICATE-----\nMAMCAQA=\n-----END CERTIFICATE-----\n".to_vec())
            }
            "/garbage.pem" => Ok(b"not a pem at all, secret-content".to_vec()),
            "/truncated.pem" => Ok(b"-----BEGIN CERTIFICATE-----\nMIIB\n".to_vec()),
            "/notbase64.pem" => Ok(
                b"-----BEGIN CERTIFICATE-----\nsecret content!\n-----END CERTIFICATE-----\n"
                    .to_vec(),
            ),
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "No such file or directory",
            )),
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

    fn tls(option: Option<Value>, d: &TlsDefaults) -> Result<Option<Tls>, ConfigError> {
        tls_from_value(option.as_ref(), d, true, &files)
    }

    #[test]
    fn a_tls_url_without_options_is_verified_against_the_system() {
        let t = tls(None, &TlsDefaults::default()).unwrap().unwrap();
        assert_eq!(t, Tls::default());
        assert!(t.verify_peer && t.cafile.is_none());
        assert_eq!(t.describe(), "on, verified against the system's roots");
        // A plain URL has no TLS, and the INI defaults do not make it one.
        let d = TlsDefaults::from_ini(Some("/ca.pem"), None, None, None);
        assert_eq!(tls_from_value(None, &d, false, &files).unwrap(), None);
    }

    #[test]
    fn options_override_the_ini_defaults_field_by_field() {
        let d = TlsDefaults::from_ini(Some(" /ca.pem "), Some(""), None, Some("cache.internal"));
        assert_eq!(d.local_cert, None);
        let t = tls(None, &d).unwrap().unwrap();
        assert_eq!(t.cafile.as_ref().unwrap().path, "/ca.pem");
        assert_eq!(t.cafile.as_ref().unwrap().pem, CERT.as_bytes());
        assert_eq!(t.peer_name.as_deref(), Some("cache.internal"));
        let t = tls(
            Some(map(&[
                ("local_cert", "/client.pem".into()),
                ("local_pk", "/client.key".into()),
                ("peer_name", "other".into()),
            ])),
            &d,
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.cafile.as_ref().unwrap().path, "/ca.pem");
        assert_eq!(t.local_pk.as_ref().unwrap().pem, KEY.as_bytes());
        assert_eq!(t.peer_name.as_deref(), Some("other"));
        assert!(t.verify_peer);
        assert!(!format!("{t:?}").contains("MIIB"), "{t:?}");
        assert_eq!(
            t.describe(),
            "on, verified against cafile /ca.pem, peer_name other, client certificate"
        );
    }

    #[test]
    fn verification_is_off_only_by_the_explicit_option() {
        let t = tls(
            Some(map(&[("verify_peer", Value::Bool(false))])),
            &TlsDefaults::default(),
        )
        .unwrap()
        .unwrap();
        assert!(!t.verify_peer);
        assert!(t.describe().contains("verification off"));
        assert_ne!(t.key(), Tls::default().key());
        for bad in [Value::Int(0), "false".into(), Value::Str(b"0".to_vec())] {
            let e = tls(
                Some(map(&[("verify_peer", bad.clone())])),
                &TlsDefaults::default(),
            )
            .unwrap_err();
            assert_eq!(e.option, "tls.verify_peer", "{e}");
            assert!(e.message.contains("a bool"), "{e}");
        }
    }

    /// rustls (webpki) refuses an X.509 v1 certificate as the client's own (at connect, in
    /// its check that the certificate matches the key: "invalid peer certificate:
    /// UnsupportedCertVersion"): refused here, at construction, naming `tls.local_cert`
    /// (or the INI setting), why and the way out. A v1 CA is a trust anchor rustls takes,
    /// and a v1 certificate later in the client's chain is sent as it is: both accepted.
    #[test]
    fn a_v1_client_certificate_is_refused_at_construction_and_a_v1_ca_is_not() {
        let d = TlsDefaults::default();
        for file in ["/v1.pem", "/v1-then-v3.pem"] {
            let e = tls(
                Some(map(&[
                    ("local_cert", file.into()),
                    ("local_pk", "/client.key".into()),
                ])),
                &d,
            )
            .unwrap_err();
            assert_eq!(e.option, "tls.local_cert", "{e}");
            for needle in ["X.509 v1", "rustls", "v3", "-extfile", file] {
                assert!(e.message.contains(needle), "{e} should contain {needle}");
            }
            assert!(!e.message.contains("peer"), "{e}: it is our certificate");
        }
        let d = TlsDefaults::from_ini(None, Some("/v1.pem"), Some("/client.key"), None);
        let e = tls(None, &d).unwrap_err();
        assert_eq!(e.option, "checkout_guard.tls.local_cert", "{e}");
        assert!(e.message.contains("X.509 v1"), "{e}");
        // A v3 certificate followed by a v1 one in its chain, and a v1 CA: accepted.
        let t = tls(
            Some(map(&[
                ("cafile", "/v1.pem".into()),
                ("local_cert", "/v3-then-v1.pem".into()),
                ("local_pk", "/client.key".into()),
            ])),
            &TlsDefaults::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.cafile.unwrap().path, "/v1.pem");
        // What is not a certificate at all (base64 but not DER) is refused for both.
        for (option, entries) in [
            ("cafile", map(&[("cafile", "/notder.pem".into())])),
            (
                "local_cert",
                map(&[
                    ("local_cert", "/notder.pem".into()),
                    ("local_pk", "/client.key".into()),
                ]),
            ),
        ] {
            let e = tls(Some(entries), &TlsDefaults::default()).unwrap_err();
            assert_eq!(e.option, format!("tls.{option}"), "{e}");
            assert!(e.message.contains("rustls"), "{e}");
            assert!(e.message.contains("/notder.pem"), "{e}");
        }
    }

    /// Each bad input names the option (or INI setting) and the path, never the content.
    #[test]
    fn bad_tls_options_name_the_option_and_path() {
        let d = TlsDefaults::default();
        let cases: Vec<(Value, &str, &str)> = vec![
            (
                map(&[("cafile", "/missing.pem".into())]),
                "tls.cafile",
                "cannot be read: \"/missing.pem\"",
            ),
            (
                map(&[("cafile", "/garbage.pem".into())]),
                "tls.cafile",
                "not a PEM file (no -----BEGIN block): \"/garbage.pem\"",
            ),
            (
                map(&[("cafile", "/truncated.pem".into())]),
                "tls.cafile",
                "not ended",
            ),
            (
                map(&[("cafile", "/notbase64.pem".into())]),
                "tls.cafile",
                "not base64",
            ),
            (
                map(&[("cafile", "/client.key".into())]),
                "tls.cafile",
                "holds no CERTIFICATE block",
            ),
            (
                map(&[
                    ("local_cert", "/client.pem".into()),
                    ("local_pk", "/client.pem".into()),
                ]),
                "tls.local_pk",
                "PRIVATE KEY",
            ),
            (
                map(&[("local_cert", "/client.pem".into())]),
                "tls.local_cert",
                "needs its private key",
            ),
            (
                map(&[("local_pk", "/client.key".into())]),
                "tls.local_pk",
                "needs its certificate",
            ),
            (
                map(&[("cafle", "/ca.pem".into())]),
                "tls.\"cafle\"",
                "not a known TLS option",
            ),
            (map(&[("cafile", Value::Int(1))]), "tls.cafile", "a string"),
            (map(&[("cafile", "".into())]), "tls.cafile", "empty"),
            (
                map(&[("peer_name", "a b".into())]),
                "tls.peer_name",
                "host name",
            ),
            (Value::Int(1), "tls", "an array"),
        ];
        for (v, option, needle) in cases {
            let e = tls(Some(v), &d).unwrap_err();
            assert_eq!(e.option, option, "{e}");
            assert!(e.message.contains(needle), "{e} should contain {needle}");
            assert!(!e.message.contains("secret"), "{e}");
        }
        let e = tls_from_value(
            Some(&map(&[("cafile", "/ca.pem".into())])),
            &d,
            false,
            &files,
        )
        .unwrap_err();
        assert_eq!(e.option, "tls");
        assert!(e.message.contains("plain"), "{e}");
        // An INI default is named as the INI setting.
        let d = TlsDefaults::from_ini(Some("/missing.pem"), None, None, None);
        let e = tls(None, &d).unwrap_err();
        assert_eq!(e.option, "checkout_guard.tls.cafile", "{e}");
        assert!(e.message.contains("\"/missing.pem\""), "{e}");
    }
}
