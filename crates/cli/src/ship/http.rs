//! One POST to a destination, sent again while the destination says "later" (408, 429,
//! 5xx, or no answer): not before its `Retry-After` (seconds or an HTTP date, at most
//! [`MAX_RETRY_AFTER`]) nor before a back-off doubling from 0.5 s to 30 s. What will
//! never pass is told apart: 413 (the caller splits the batch), a refused key, a wrong
//! address or a redirect (the shipper stops: every batch would fail the same way; a
//! redirect is never followed, so the key never goes to another host and a POST never
//! becomes a GET), any other 4xx (the caller isolates and dead-letters the events).
//!
//! A POST sent again after no answer (a reply lost, a timeout) may have been taken the
//! first time: its events are counted in [`Poster::maybe_twice`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest `Retry-After` honoured; a longer one is waited in this many seconds.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What the destination made of a POST, once it stopped saying "later".
#[derive(Debug, PartialEq)]
pub enum Answer {
    /// 2xx, with the answer's body (OTLP's partial success is in it).
    Accepted(Vec<u8>),
    /// 413: the batch is too large for it.
    TooLarge,
    /// A 4xx that will not pass if sent again (400: a malformed event, say).
    Rejected { status: u16, body: String },
}

/// Why a POST ended without an answer to act on: the shipper stops taking entries.
#[derive(Debug)]
pub struct Failed(pub String);

pub struct Poster {
    agent: ureq::Agent,
    stop: Arc<AtomicBool>,
    /// How long "later" is waited through before giving up (`None`: for ever, until
    /// stopped): `--once`'s `--retry-for`.
    pub retry_for: Option<Duration>,
    /// POSTs sent again.
    pub retried: u64,
    /// Events in POSTs sent again after no answer: the destination may have them twice.
    pub maybe_twice: u64,
    pub posts: u64,
    pub bytes_sent: u64,
}

impl Poster {
    pub fn new(timeout: Duration, stop: Arc<AtomicBool>, retry_for: Option<Duration>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A redirect is answered, never followed (see the module's comment).
            .max_redirects(0)
            .build()
            .into();
        Self {
            agent,
            stop,
            retry_for,
            retried: 0,
            maybe_twice: 0,
            posts: 0,
            bytes_sent: 0,
        }
    }

    /// POSTs `body` (holding `events` events) to `url` with `headers` until the destination
    /// gives an answer that "later" is not.
    pub fn post(
        &mut self,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        events: usize,
    ) -> Result<Answer, Failed> {
        // Named without a password it may hold (`https://user:secret@host/...`).
        let shown = redact(url);
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0u32;
        let mut counted_twice = false;
        let mut cut_while_sent = 0u32;
        loop {
            tries += 1;
            let mut req = self.agent.post(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            self.posts += 1;
            self.bytes_sent += body.len() as u64;
            let (later, why, maybe_taken) = match req.send(body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(retry_after)
                        .map(|d| d.min(MAX_RETRY_AFTER));
                    let bytes = resp
                        .body_mut()
                        .with_config()
                        .limit(1024 * 1024)
                        .read_to_vec()
                        .unwrap_or_default();
                    let text = String::from_utf8_lossy(&bytes);
                    match status {
                        200..=299 => return Ok(Answer::Accepted(bytes)),
                        413 => return Ok(Answer::TooLarge),
                        300..=399 => {
                            return Err(Failed(format!(
                                "{shown} answered {status} (a redirect{}): not followed; check --endpoint",
                                resp.headers()
                                    .get("location")
                                    .and_then(|v| v.to_str().ok())
                                    .map(|l| format!(" to {}", redact(l)))
                                    .unwrap_or_default()
                            )))
                        }
                        401 | 403 => {
                            return Err(Failed(format!(
                                "{shown} refused the key ({status} {}): check NEW_RELIC_INSERT_KEY / NEW_RELIC_LICENSE_KEY / --key-file (newrelic) or OTEL_EXPORTER_OTLP_HEADERS (otlp)",
                                one_line(&text)
                            )))
                        }
                        404 | 405 => {
                            return Err(Failed(format!(
                                "{shown} answered {status}: check --endpoint ({})",
                                one_line(&text)
                            )))
                        }
                        408 | 429 | 500..=599 => (retry_after, format!("{status} {}", one_line(&text)), false),
                        _ => {
                            return Ok(Answer::Rejected {
                                status,
                                body: one_line(&text),
                            })
                        }
                    }
                }
                // Nothing reached the destination: nothing of it can be there twice.
                Err(e @ (ureq::Error::HostNotFound | ureq::Error::ConnectionFailed)) => {
                    (None, format!("no connection: {e}"), false)
                }
                Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    (None, format!("no connection: {e}"), false)
                }
                // TLS failed (https to a plain port, a certificate that does not verify):
                // nothing was sent, and sending again will not help.
                Err(e) if is_tls_failure(&e) => {
                    return Err(Failed(format!(
                        "{shown}: TLS failed ({e}): check --endpoint's scheme and the server's certificate"
                    )))
                }
                Err(e @ (ureq::Error::Http(_) | ureq::Error::BadUri(_))) => {
                    return Err(Failed(format!(
                        "{shown}: the request cannot be made ({e}): check --endpoint and the key's characters"
                    )))
                }
                // A receiver past its body limit may answer 413 and close while the body is
                // still being written: the write fails and its answer is never read. A large
                // POST cut so twice in a row is taken as too large (the caller halves it).
                Err(ureq::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                    ) && body.len() > 64 * 1024 =>
                {
                    cut_while_sent += 1;
                    if cut_while_sent >= 2 {
                        return Ok(Answer::TooLarge);
                    }
                    (None, format!("no answer: {e} (cut while sent)"), true)
                }
                Err(e) => (None, format!("no answer: {e}"), true),
            };
            // Retry-After is the earliest time to send again; the back-off still grows.
            let wait = later.map_or(backoff, |l| l.max(backoff));
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if let Some(limit) = self.retry_for {
                if started.elapsed() + wait > limit {
                    return Err(Failed(format!(
                        "{shown}: {why}, still after {tries} tries in {:.1} s (--retry-for {} s)",
                        started.elapsed().as_secs_f64(),
                        limit.as_secs()
                    )));
                }
            }
            eprintln!(
                "checkout-guard ship: {shown}: {why}; sending again in {:.1} s",
                wait.as_secs_f64()
            );
            if !self.sleep(wait) {
                return Err(Failed(format!(
                    "stopped (SIGTERM/SIGINT) while {shown} answered {why}: the batch is left for the next run"
                )));
            }
            self.retried += 1;
            if maybe_taken && !counted_twice {
                // Once per POST, however often it is sent again: the most it can be twice.
                counted_twice = true;
                self.maybe_twice += events as u64;
            }
        }
    }

    /// Sleeps `d` unless stopped meanwhile (false then).
    pub fn sleep(&self, d: Duration) -> bool {
        sleep_unless(&self.stop, d)
    }
}

/// Sleeps `d` in short steps; false as soon as `stop` is set.
pub fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = Instant::now() + d;
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// A TLS handshake or certificate failure, as ureq reports it (its own variants, or an I/O
/// error carrying rustls's).
fn is_tls_failure(e: &ureq::Error) -> bool {
    match e {
        ureq::Error::Tls(_) | ureq::Error::Rustls(_) | ureq::Error::TlsRequired => true,
        ureq::Error::Io(io) => io
            .get_ref()
            .is_some_and(|inner| inner.downcast_ref::<rustls::Error>().is_some()),
        _ => false,
    }
}

/// `Retry-After`: seconds, or an HTTP date (the wait until then; a date past is no wait).
fn retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(
        at.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// A URL as it may be shown: a password in it replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{}", &rest[at + 1..])
        }
        None => url.to_string(),
    }
}

/// A body as one short line for a log or an error.
fn one_line(s: &str) -> String {
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 200 {
        s.chars().take(200).collect::<String>() + "..."
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        assert_eq!(retry_after("7"), Some(Duration::from_secs(7)));
        let later = std::time::SystemTime::now() + Duration::from_secs(30);
        let d = retry_after(&httpdate::fmt_http_date(later)).unwrap();
        assert!(
            d > Duration::from_secs(28) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(
            retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(retry_after("soon"), None);
    }

    #[test]
    fn a_password_in_a_url_is_not_shown() {
        assert_eq!(
            redact("http://u:secret@127.0.0.1:9/v1"),
            "http://u:***@127.0.0.1:9/v1"
        );
        assert_eq!(redact("http://127.0.0.1:9/a@b"), "http://127.0.0.1:9/a@b");
    }
}
