//! `checkout-guard ship`: the command line of [`checkout_guard_cli::ship`].

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use checkout_guard_cli::admin::endpoint_from_options;
use checkout_guard_cli::ship::files::FileSource;
use checkout_guard_cli::ship::http::Poster;
use checkout_guard_cli::ship::newrelic::{Key, NewRelic};
use checkout_guard_cli::ship::otlp::{headers_from_env, Otlp};
use checkout_guard_cli::ship::stream::StreamSource;
use checkout_guard_cli::ship::{run as ship, Config, Counts, Destination, Source};
use checkout_guard_cli::valkey::Valkey;
use checkout_guard_config::TlsDefaults;
use clap::{Args, ValueEnum};

use crate::out::outln;

#[derive(Clone, Copy, ValueEnum)]
pub enum To {
    /// New Relic's Event API (gzip JSON; the key from NEW_RELIC_INSERT_KEY, else
    /// NEW_RELIC_LICENSE_KEY, or --key-file).
    Newrelic,
    /// OpenTelemetry over OTLP/HTTP (protobuf): log records and http.client.request.duration
    /// (headers such as New Relic's api-key from OTEL_EXPORTER_OTLP_HEADERS).
    Otlp,
}

#[derive(Args)]
#[command(
    after_help = "Exit status: 0 when every entry taken was delivered or dead-lettered (--once: the source drained; long-running: stopped by SIGTERM or SIGINT between batches); 1 when some could not be delivered (the reason on stderr; they stay in the source for the next run), also when stopped while a batch was being retried or --once was stopped before the source was drained; 2 a bad option.\n\nDelivery is at least once: each event carries event_id (its stream entry's ID, or FILE:OFFSET), so a batch sent again after a crash or a lost answer can be recognised; the number taken again is `again` in --json."
)]
pub struct ShipArgs {
    /// The source: the stream sink's Valkey URL (as checkout_guard.events.stream_url;
    /// TLS, cluster and Sentinel URLs with the --tls-* and --sentinel-* options).
    #[arg(long, required_unless_present = "files", conflicts_with = "files")]
    stream: Option<String>,
    /// The source: the jsonl sink's files (plain or gzip, rotated ones too: a file is
    /// known by its first line, so a renamed or compressed one resumes), with --checkpoint.
    #[arg(long, num_args = 1.., requires = "checkpoint")]
    files: Vec<PathBuf>,
    /// With --files: where how far each file was delivered is kept (a JSON file, replaced
    /// atomically after each batch).
    #[arg(long, requires = "files")]
    checkpoint: Option<PathBuf>,
    /// The stream's key (checkout_guard.events.stream_key).
    #[arg(long, default_value = checkout_guard_config::settings::DEFAULT_STREAM_KEY)]
    stream_key: String,
    /// The consumer group shippers share (each entry goes to one of them).
    #[arg(long, default_value = "checkout-guard-ship")]
    group: String,
    /// This shipper's name in the group: a restarted shipper with the same name takes its
    /// unacknowledged entries again at once (default: the host's name; give each shipper
    /// on one host its own).
    #[arg(long)]
    consumer: Option<String>,
    /// Another consumer's entries left unacknowledged this long (its shipper died) are
    /// taken over, in seconds.
    #[arg(long, default_value_t = 60)]
    claim_idle: u64,
    /// The destination.
    #[arg(long, value_enum)]
    to: To,
    /// newrelic: the Event API's URL, account and region in it
    /// (https://insights-collector.newrelic.com/v1/accounts/ID/events, EU:
    /// https://insights-collector.eu01.nr-data.net/v1/accounts/ID/events); otlp: the
    /// OTLP/HTTP base URL (/v1/logs and /v1/metrics under it).
    #[arg(long)]
    endpoint: String,
    /// newrelic: a file whose first line is the insert key (instead of the environment).
    #[arg(long)]
    key_file: Option<String>,
    /// otlp: the resource's service.name.
    #[arg(long, default_value = "checkout-guard")]
    service_name: String,
    /// Deliver what is there now, then exit (cron, tests).
    #[arg(long)]
    once: bool,
    /// --once: how long a destination answering 429/5xx (or not answering) is waited
    /// through before giving up, in seconds (long-running: for ever).
    #[arg(long, default_value_t = 120)]
    retry_for: u64,
    /// Entries taken per batch (1 to 100000): the most a crash can send twice.
    #[arg(long, default_value_t = 10000)]
    batch: usize,
    /// Where events refused for good (a 4xx other than 408/429/413 for that event alone,
    /// or an entry that is not an event) are appended, a JSON line each with why.
    #[arg(long, default_value = "checkout-guard-ship.dead-letter.jsonl")]
    dead_letter: PathBuf,
    /// Valkey's per-call timeout, in milliseconds (1 to 60000).
    #[arg(long, default_value_t = 5000)]
    timeout_ms: u64,
    /// The destination's timeout per POST, in milliseconds.
    #[arg(long, default_value_t = 30000)]
    http_timeout_ms: u64,
    /// The shipper's numbers as one JSON object on stdout at exit.
    #[arg(long)]
    json: bool,
    /// TLS URL: CA certificates (PEM) instead of the system's roots.
    #[arg(long)]
    tls_cafile: Option<String>,
    /// TLS URL: client certificate (PEM) for mutual TLS, with --tls-local-pk.
    #[arg(long)]
    tls_local_cert: Option<String>,
    /// TLS URL: the client certificate's private key (PEM).
    #[arg(long)]
    tls_local_pk: Option<String>,
    /// TLS URL: the name the server's certificate must carry, instead of the URL's host.
    #[arg(long)]
    tls_peer_name: Option<String>,
    /// Sentinel URL: the sentinels' own ACL user.
    #[arg(long)]
    sentinel_user: Option<String>,
    /// Sentinel URL: the sentinels' own password (prefer the environment variable).
    #[arg(long, env = "CHECKOUT_GUARD_SENTINEL_PASSWORD", hide_env_values = true)]
    sentinel_password: Option<String>,
}

/// Runs the command: `Err` (exit 2) for a bad option, `Ok(false)` (exit 1) when some
/// entries could not be delivered.
pub fn run(a: ShipArgs) -> Result<bool, String> {
    if !(1..=100_000).contains(&a.batch) {
        return Err(format!("--batch must be 1 to 100000, got {}", a.batch));
    }
    if !(1..=60_000).contains(&a.timeout_ms) {
        return Err(format!(
            "--timeout-ms must be 1 to 60000, got {}",
            a.timeout_ms
        ));
    }
    if a.http_timeout_ms == 0 {
        return Err("--http-timeout-ms must be at least 1".into());
    }
    let endpoint_url = url_of(&a.endpoint)?;
    let tls = TlsDefaults {
        cafile: a.tls_cafile.clone(),
        local_cert: a.tls_local_cert.clone(),
        local_pk: a.tls_local_pk.clone(),
        peer_name: a.tls_peer_name.clone(),
    };
    let mut dest = match a.to {
        To::Newrelic => {
            if a.key_file.is_none() && endpoint_url.ends_with("/v1/logs") {
                return Err("--to newrelic --endpoint is the Event API's URL (.../v1/accounts/ID/events), not an OTLP one".into());
            }
            Destination::NewRelic(NewRelic::new(
                &endpoint_url,
                Key::find(a.key_file.as_deref())?,
            ))
        }
        To::Otlp => {
            if a.key_file.is_some() {
                return Err("--key-file is for --to newrelic".into());
            }
            let headers = match std::env::var("OTEL_EXPORTER_OTLP_HEADERS") {
                Ok(text) => headers_from_env(&text)?,
                Err(_) => Vec::new(),
            };
            Destination::Otlp(Otlp::new(&endpoint_url, &a.service_name, headers))
        }
    };
    let mut source: Box<dyn Source> = match (&a.stream, a.checkpoint.clone()) {
        (Some(url), _) => {
            let endpoint = endpoint_from_options(
                "--stream",
                url,
                &tls,
                a.sentinel_user.as_deref(),
                a.sentinel_password.as_deref(),
            )?;
            let consumer = a.consumer.clone().unwrap_or_else(host_name);
            if consumer.is_empty() {
                return Err("--consumer must not be empty".into());
            }
            let valkey = Valkey::new(endpoint, Duration::from_millis(a.timeout_ms));
            Box::new(StreamSource::new(
                valkey,
                &a.stream_key,
                &a.group,
                &consumer,
                Duration::from_secs(a.claim_idle),
                a.once,
            ))
        }
        (None, Some(checkpoint)) => Box::new(FileSource::new(a.files.clone(), checkpoint)?),
        (None, None) => {
            return Err("a source: --stream URL, or --files PATH... --checkpoint FILE".into())
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, Arc::clone(&stop))
            .map_err(|e| format!("signal handler: {e}"))?;
    }
    let mut poster = Poster::new(
        Duration::from_millis(a.http_timeout_ms),
        Arc::clone(&stop),
        a.once.then(|| Duration::from_secs(a.retry_for)),
    );
    let cfg = Config {
        batch: a.batch,
        once: a.once,
        dead_letter: a.dead_letter.clone(),
        log_every: Duration::from_secs(10),
        block: Duration::from_millis(a.timeout_ms.clamp(1, 1000)),
    };
    let started = Instant::now();
    let mut counts = Counts::default();
    let result = ship(
        source.as_mut(),
        &mut dest,
        &mut poster,
        &cfg,
        &stop,
        &mut counts,
    );
    eprintln!("checkout-guard ship: {}", counts.line());
    if a.json {
        let mut j = counts.json(started.elapsed());
        j["ok"] = serde_json::Value::Bool(result.is_ok());
        if let Err(e) = &result {
            j["error"] = serde_json::Value::String(e.clone());
        }
        outln!("{j}");
    }
    match result {
        Ok(()) => Ok(true),
        Err(e) => {
            eprintln!("checkout-guard ship: {e}");
            Ok(false)
        }
    }
}

/// An http(s) URL, checked.
fn url_of(s: &str) -> Result<String, String> {
    if !(s.starts_with("http://") || s.starts_with("https://")) || s.len() < 9 {
        return Err(format!(
            "--endpoint must be an http:// or https:// URL, got {s:?}"
        ));
    }
    Ok(s.to_string())
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "shipper".into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_endpoint_must_be_http() {
        assert!(super::url_of("ftp://x").is_err());
        assert!(super::url_of("http://127.0.0.1:1/v1/accounts/1/events").is_ok());
    }
}
