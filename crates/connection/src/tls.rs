//! TLS beyond what redis-rs does itself: the check of a server's certificate against
//! `peer_name` (redis-rs checks the name against the URL's host only), and how a failed
//! handshake is shown.
//!
//! redis-rs (rustls) does the handshake inside its connect, lazily: on the first write of
//! the set-up, whose socket timeouts are what is left of the open's deadline, so a server
//! that accepts TCP and never answers the handshake fails the open within its timeout.

use std::sync::Arc;

use checkout_guard_config::Tls;
use redis::{ErrorKind, RedisError, RedisResult};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

fn config_error(what: &str, detail: String) -> RedisError {
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "TLS",
        format!("{what}: {detail}"),
    ))
}

/// rustls refused the client's own certificate (`tls.local_cert`) or key when the
/// connection's configuration was built: said as ours, not the server's (rustls words it
/// "invalid peer certificate" whichever side it is). The model refuses an X.509 v1
/// certificate at construction already; this is what is left (a key that does not match).
fn client_certificate_refused(cause: &str) -> RedisError {
    let cause = cause.replace("invalid peer certificate: ", "");
    let hint = if cause.contains("UnsupportedCertVersion") {
        ": it is X.509 v1 (or v2), and rustls accepts only v3 as the client's certificate; reissue it as v3 (openssl x509 -req ... -extfile)"
    } else {
        ""
    };
    RedisError::from((
        ErrorKind::InvalidClientConfig,
        "TLS client certificate refused",
        format!("our certificate tls.local_cert (with tls.local_pk) cannot be used by rustls ({cause}){hint}"),
    ))
}

/// The rustls configuration `tls` says: the CA file's certificates (else the system's
/// roots) and the client certificate for mutual TLS.
fn client_config(tls: &Tls) -> RedisResult<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    match &tls.cafile {
        Some(ca) => {
            for cert in CertificateDer::pem_slice_iter(&ca.pem) {
                let cert = cert.map_err(|e| config_error(&ca.path, e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| config_error(&ca.path, e.to_string()))?;
            }
        }
        None => {
            // The system's roots, read once per process (a bundle of a few hundred
            // certificates takes milliseconds to parse: not on every connect).
            static NATIVE: std::sync::OnceLock<Vec<CertificateDer<'static>>> =
                std::sync::OnceLock::new();
            let native = NATIVE.get_or_init(|| rustls_native_certs::load_native_certs().certs);
            roots.add_parsable_certificates(native.iter().cloned());
        }
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    Ok(match (&tls.local_cert, &tls.local_pk) {
        (Some(cert), Some(key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert.pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| config_error(&cert.path, e.to_string()))?;
            let key = PrivateKeyDer::from_pem_slice(&key.pem)
                .map_err(|e| config_error(&key.path, e.to_string()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| client_certificate_refused(&e.to_string()))?
        }
        _ => builder.with_no_client_auth(),
    })
}

/// The rustls configuration and server name of a connection of this crate's own
/// ([`crate::wire`]) to `host` as `tls` says: the chain verified against the CA file (else
/// the system's roots) and the name against `peer_name` when given, else `host`; with
/// `verify_peer => false`, nothing verified (the handshake's signatures still are).
pub(crate) fn wire_config(
    tls: &Tls,
    host: &str,
) -> RedisResult<(rustls::ClientConfig, ServerName<'static>)> {
    let name_of = |n: &str, what: &str| {
        ServerName::try_from(n.to_string()).map_err(|e| config_error(what, e.to_string()))
    };
    let name = match tls.peer_name.as_deref() {
        Some(peer) if tls.verify_peer => name_of(peer, "peer_name")?,
        _ => name_of(host.trim_start_matches('[').trim_end_matches(']'), "host")?,
    };
    let mut config = client_config(tls)?;
    if !tls.verify_peer {
        let provider = config.crypto_provider().clone();
        config
            .dangerous()
            .set_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)));
    }
    Ok((config, name))
}

/// `verify_peer => false`: any certificate chain and name is accepted (as phpredis's
/// `verify_peer => false`); the handshake's signatures are checked with the provider's
/// algorithms, so the connection is still to the key holder of the certificate shown.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// An error of opening a TLS connection as `health()` and `UnavailableException` show it:
/// a failed handshake says so, with rustls's cause (an unknown CA, an expired certificate,
/// a name it is not valid for, a client certificate the server wanted); a timeout stays a
/// timeout (shown with the timeout that ran out).
pub fn in_handshake(e: RedisError, host: &str, port: u16) -> RedisError {
    // redis-rs builds rustls's configuration inside its connect: what rustls refuses of
    // the client's own certificate comes back as this.
    if e.kind() == ErrorKind::InvalidClientConfig
        && e.to_string()
            .contains("Unable to build client with TLS parameters")
    {
        return client_certificate_refused(e.detail().unwrap_or_default());
    }
    if e.is_timeout() || !e.is_io_error() {
        return e;
    }
    let mut text = e.to_string();
    if text.contains("invalid peer certificate") && text.contains("UnsupportedCertVersion") {
        text.push_str(
            " (the server's certificate, or one in the chain it sent, is X.509 v1 or v2: rustls accepts only v3; reissue it as v3 with extensions, e.g. openssl x509 -req ... -extfile with subjectAltName; a v1 CA in tls.cafile is fine)",
        );
    }
    // rustls's errors as redis-rs shows them ("invalid peer certificate: ...", "received
    // fatal alert: ...", "peer is incompatible: ...", "peer misbehaved: ...", "received
    // corrupt message ..." from a server that does not speak TLS); not "Connection reset
    // by peer" or a refused connection, which say what they are.
    let tls = [
        "certificate",
        "peer is incompatible",
        "peer misbehaved",
        "alert",
        "handshake",
        "tls",
        "ssl",
        "decrypt",
        "received corrupt message",
    ];
    let lower = text.to_ascii_lowercase();
    if tls.iter().any(|w| lower.contains(w)) {
        RedisError::from((
            ErrorKind::Io,
            "TLS handshake failed",
            format!("{host}:{port}: {text}"),
        ))
    } else {
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind, text: &str) -> RedisError {
        std::io::Error::new(kind, text.to_string()).into()
    }

    #[test]
    fn a_failed_handshake_is_named_and_other_failures_are_left_as_they_are() {
        let e = in_handshake(
            io(
                std::io::ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            ),
            "cache",
            6380,
        );
        let text = e.to_string();
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert!(
            text.contains("cache:6380") && text.contains("UnknownIssuer"),
            "{text}"
        );
        let e = in_handshake(
            io(
                std::io::ErrorKind::InvalidData,
                "received fatal alert: CertificateRequired",
            ),
            "cache",
            6380,
        );
        assert!(e.to_string().contains("TLS handshake failed"), "{e}");
        for (kind, text) in [
            (std::io::ErrorKind::ConnectionRefused, "Connection refused"),
            (
                std::io::ErrorKind::ConnectionReset,
                "Connection reset by peer",
            ),
        ] {
            let e = in_handshake(io(kind, text), "cache", 6380);
            assert!(!e.to_string().contains("TLS"), "{e}");
        }
        // The server's certificate in v1: said so, with the way out.
        let e = in_handshake(
            io(
                std::io::ErrorKind::InvalidData,
                "invalid peer certificate: Other(OtherError(UnsupportedCertVersion))",
            ),
            "cache",
            6380,
        );
        let text = e.to_string();
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert!(text.contains("the server's certificate"), "{text}");
        assert!(text.contains("X.509 v1"), "{text}");
        // Our own certificate refused as redis-rs says it: named as ours.
        let e = in_handshake(
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "Unable to build client with TLS parameters provided.",
                "invalid peer certificate: Other(OtherError(UnsupportedCertVersion))".to_string(),
            )),
            "cache",
            6380,
        );
        let text = e.to_string();
        assert!(text.contains("tls.local_cert"), "{text}");
        assert!(text.contains("X.509 v1"), "{text}");
        assert!(!text.contains("peer"), "{text}");
        let e = in_handshake(crate::errors::timed_out(), "cache", 6380);
        assert!(e.is_timeout(), "{e}");
        let auth = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        assert_eq!(
            in_handshake(auth, "cache", 6380).kind(),
            ErrorKind::AuthenticationFailed
        );
    }
}
