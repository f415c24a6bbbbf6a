//! One POST to a destination, sent again while the destination says "later" (408, 429,
//! 5xx, or no answer): after its `Retry-After` when it gives one (seconds, at most
//! [`MAX_RETRY_AFTER`]), else after a back-off doubling from 0.5 s to 30 s. What will
//! never pass is told apart: 413 (the caller splits the batch), a refused key or a wrong
//! address (the shipper stops: every batch would fail the same way), any other 4xx
//! (the caller isolates and dead-letters the events).

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
    Accepted,
    /// 413: the batch is too large for it.
    TooLarge,
    /// A 4xx that will not pass if sent again (400: a malformed event, say).
    Rejected {
        status: u16,
        body: String,
    },
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
    pub posts: u64,
    pub bytes_sent: u64,
}

impl Poster {
    pub fn new(timeout: Duration, stop: Arc<AtomicBool>, retry_for: Option<Duration>) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .build()
            .into();
        Self {
            agent,
            stop,
            retry_for,
            retried: 0,
            posts: 0,
            bytes_sent: 0,
        }
    }

    /// POSTs `body` to `url` with `headers` until the destination gives an answer that
    /// "later" is not.
    pub fn post(
        &mut self,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Answer, Failed> {
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        let mut tries = 0u32;
        loop {
            tries += 1;
            let mut req = self.agent.post(url);
            for (k, v) in headers {
                req = req.header(*k, *v);
            }
            self.posts += 1;
            self.bytes_sent += body.len() as u64;
            let (later, why) = match req.send(body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(|s| Duration::from_secs(s).min(MAX_RETRY_AFTER));
                    let text = resp
                        .body_mut()
                        .with_config()
                        .limit(64 * 1024)
                        .read_to_string()
                        .unwrap_or_default();
                    match status {
                        200..=299 => return Ok(Answer::Accepted),
                        413 => return Ok(Answer::TooLarge),
                        401 | 403 => {
                            return Err(Failed(format!(
                                "{url} refused the key ({status} {}): check the key's environment variable or file",
                                one_line(&text)
                            )))
                        }
                        404 | 405 => {
                            return Err(Failed(format!(
                                "{url} answered {status}: check --endpoint ({})",
                                one_line(&text)
                            )))
                        }
                        408 | 429 | 500..=599 => (retry_after, format!("{status} {}", one_line(&text))),
                        _ => {
                            return Ok(Answer::Rejected {
                                status,
                                body: one_line(&text),
                            })
                        }
                    }
                }
                Err(e) => (None, format!("no answer: {e}")),
            };
            let wait = later.unwrap_or(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
            if let Some(limit) = self.retry_for {
                if started.elapsed() + wait > limit {
                    return Err(Failed(format!(
                        "{url}: {why}, still after {tries} tries in {:.1} s (--retry-for {} s)",
                        started.elapsed().as_secs_f64(),
                        limit.as_secs()
                    )));
                }
            }
            eprintln!(
                "checkout-guard ship: {url}: {why}; sending again in {:.1} s",
                wait.as_secs_f64()
            );
            if !self.sleep(wait) {
                return Err(Failed(format!("stopped while {url} answered {why}")));
            }
            self.retried += 1;
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

/// A body as one short line for a log or an error.
fn one_line(s: &str) -> String {
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > 200 {
        s.chars().take(200).collect::<String>() + "..."
    } else {
        s
    }
}
