//! OpenTelemetry over OTLP/HTTP (binary protobuf, gzip), with OpenTelemetry's own
//! message definitions (`opentelemetry-proto`): every event as a log record at
//! `/v1/logs` (its attributes typed, `event.name` its type, `event_id` its id, its time
//! the recorded timestamp), and each batch's external calls as the semantic conventions'
//! `http.client.request.duration` at `/v1/metrics`: a histogram in seconds with their
//! bucket boundaries, a data point per `api`, method, server, status and error type,
//! delta temporality (each batch its own interval). Any OpenTelemetry backend then has
//! every call without the New Relic agent.

use std::collections::BTreeMap;
use std::io::Write;

use checkout_guard_model::events::{attr, EXTERNAL_API_CALL};
use flate2::write::GzEncoder;
use flate2::Compression;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, AggregationTemporality, Histogram, HistogramDataPoint, Metric, ResourceMetrics,
    ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use serde_json::Value;

use super::http::{redact, Answer, Failed, Poster};
use super::{send_split, Delivered, Event, ID_ATTRIBUTE};

/// The semantic conventions' metric name and its bucket boundaries (seconds).
pub const DURATION_METRIC: &str = "http.client.request.duration";
pub const DURATION_BOUNDS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
const MAX_RECORDS_PER_POST: usize = 20_000;
/// The most one POST carries, gzipped: New Relic's OTLP endpoint's limit (as its Event
/// API's, 1 MB), well under the OpenTelemetry Collector's default (20 MiB).
pub const MAX_POST_BYTES: usize = 1_000_000;
/// OTLP's SeverityNumber INFO.
const SEVERITY_INFO: i32 = 9;

pub struct Otlp {
    /// Extra headers (`OTEL_EXPORTER_OTLP_HEADERS`: New Relic's `api-key`, a collector's auth).
    headers: Vec<(String, String)>,
    logs_url: String,
    metrics_url: String,
    resource: Resource,
    /// Data points the backend refused (400): counted, never retried.
    pub metric_points_rejected: u64,
    pub metric_points: u64,
    /// External calls left out of `http.client.request.duration` (no usable duration).
    pub metric_calls_skipped: u64,
}

fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn any(v: &Value) -> Option<any_value::Value> {
    Some(match v {
        Value::String(s) => any_value::Value::StringValue(s.clone()),
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::DoubleValue(n.as_f64()?),
        },
        Value::Null => return None,
        other => any_value::Value::StringValue(other.to_string()),
    })
}

fn timestamp_ns(e: &Event) -> u64 {
    e.attributes
        .get(attr::TIMESTAMP)
        .and_then(Value::as_f64)
        .map_or(0, |ms| (ms.max(0.0) * 1e6) as u64)
}

/// The log record of one event.
pub fn log_record(e: &Event, observed_ns: u64) -> LogRecord {
    let event_type = e
        .attributes
        .get("eventType")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut attributes = vec![
        kv(
            "event.name",
            any_value::Value::StringValue(event_type.to_string()),
        ),
        kv(ID_ATTRIBUTE, any_value::Value::StringValue(e.id.clone())),
    ];
    attributes.extend(
        e.attributes
            .iter()
            .filter(|(k, _)| *k != "eventType" && *k != attr::TIMESTAMP)
            .filter_map(|(k, v)| Some(kv(k, any(v)?))),
    );
    LogRecord {
        time_unix_nano: timestamp_ns(e),
        observed_time_unix_nano: observed_ns,
        severity_number: SEVERITY_INFO,
        severity_text: "INFO".into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(event_type.to_string())),
        }),
        attributes,
        ..Default::default()
    }
}

/// The attributes a call's data point is keyed by, in the semantic conventions' names
/// (and `api`, the extension's name of the external API).
const POINT_KEYS: [&str; 6] = [
    attr::API,
    attr::METHOD,
    attr::SERVER_ADDRESS,
    attr::SERVER_PORT,
    attr::STATUS_CODE,
    attr::ERROR_TYPE,
];

/// `http.client.request.duration` over the batch's external calls: a delta histogram
/// point per attribute set.
/// Calls left out of the metric: no `duration.ms`, or not a number of 0 or more.
pub fn duration_metric(events: &[&Event]) -> (Option<Metric>, u64) {
    let mut skipped = 0;
    #[derive(Default)]
    struct Point {
        count: u64,
        sum: f64,
        min: f64,
        max: f64,
        buckets: [u64; DURATION_BOUNDS.len() + 1],
        start: u64,
        end: u64,
    }
    // Keyed by the attributes' values as text; the typed attributes kept beside.
    type Points = BTreeMap<Vec<(String, String)>, (Vec<KeyValue>, Point)>;
    let mut points = Points::new();
    for e in events {
        if e.attributes.get("eventType").and_then(Value::as_str) != Some(EXTERNAL_API_CALL) {
            continue;
        }
        let Some(ms) = e
            .attributes
            .get(attr::DURATION_MS)
            .and_then(Value::as_f64)
            .filter(|ms| ms.is_finite() && *ms >= 0.0)
        else {
            skipped += 1;
            continue;
        };
        let s = ms / 1000.0;
        // A status code recorded as a string ("200") is the number (one series, as the
        // semantic conventions type it).
        let present: Vec<(&str, Value)> = POINT_KEYS
            .iter()
            .filter_map(|k| {
                let v = e.attributes.get(*k).filter(|v| !v.is_null())?;
                let v = match (v, *k == attr::STATUS_CODE) {
                    (Value::String(s), true) => {
                        s.trim().parse::<i64>().map_or(v.clone(), Value::from)
                    }
                    _ => v.clone(),
                };
                Some((*k, v))
            })
            .collect();
        let key = present
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let t = timestamp_ns(e);
        let (_, p) = points.entry(key).or_insert_with(|| {
            let kvs = present
                .iter()
                .filter_map(|(k, v)| Some(kv(k, any(v)?)))
                .collect();
            (
                kvs,
                Point {
                    min: f64::INFINITY,
                    max: f64::NEG_INFINITY,
                    start: t,
                    end: t,
                    ..Default::default()
                },
            )
        });
        p.count += 1;
        p.sum += s;
        p.min = p.min.min(s);
        p.max = p.max.max(s);
        // A value on a boundary belongs to the bucket it closes (OTLP's upper-inclusive rule).
        let bucket = DURATION_BOUNDS
            .iter()
            .position(|b| s <= *b)
            .unwrap_or(DURATION_BOUNDS.len());
        p.buckets[bucket] += 1;
        p.start = p.start.min(t);
        p.end = p.end.max(t);
    }
    if points.is_empty() {
        return (None, skipped);
    }
    let data_points = points
        .into_values()
        .map(|(attributes, p)| HistogramDataPoint {
            attributes,
            start_time_unix_nano: p.start,
            // The interval's end is after its last call (a zero-length interval is not one).
            time_unix_nano: p.end.max(p.start + 1),
            count: p.count,
            sum: Some(p.sum),
            bucket_counts: p.buckets.to_vec(),
            explicit_bounds: DURATION_BOUNDS.to_vec(),
            min: Some(p.min),
            max: Some(p.max),
            ..Default::default()
        })
        .collect();
    (
        Some(Metric {
            name: DURATION_METRIC.into(),
            description: "Duration of HTTP client requests.".into(),
            unit: "s".into(),
            data: Some(metric::Data::Histogram(Histogram {
                data_points,
                aggregation_temporality: AggregationTemporality::Delta as i32,
            })),
            ..Default::default()
        }),
        skipped,
    )
}

fn scope() -> Option<InstrumentationScope> {
    Some(InstrumentationScope {
        name: "checkout-guard".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        ..Default::default()
    })
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(
        Vec::with_capacity(bytes.len() / 4 + 64),
        Compression::fast(),
    );
    gz.write_all(bytes).expect("writing to memory");
    gz.finish().expect("writing to memory")
}

const HEADERS: [(&str, &str); 2] = [
    ("Content-Type", "application/x-protobuf"),
    ("Content-Encoding", "gzip"),
];

/// `OTEL_EXPORTER_OTLP_HEADERS`, as OpenTelemetry's exporters read it: `key=value` pairs
/// separated by commas, values percent-decoded (W3C baggage's format); an error names the
/// pair's key (never its value: it is usually a secret).
pub fn headers_from_env(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let Some((k, v)) = pair.split_once('=') else {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_HEADERS: {pair:?} is not key=value"
                ));
            };
            let k = k.trim();
            if k.is_empty()
                || !k
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            {
                return Err(format!(
                    "OTEL_EXPORTER_OTLP_HEADERS: {k:?} is not a header name"
                ));
            }
            Ok((k.to_string(), percent_decode(v.trim())))
        })
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Otlp {
    /// `base` is the OTLP/HTTP base URL: `/v1/logs` and `/v1/metrics` go under it.
    pub fn new(base: &str, service_name: &str, headers: Vec<(String, String)>) -> Self {
        let base = base.trim_end_matches('/');
        Self {
            headers,
            logs_url: format!("{base}/v1/logs"),
            metrics_url: format!("{base}/v1/metrics"),
            resource: Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue(service_name.to_string()),
                )],
                ..Default::default()
            },
            metric_points_rejected: 0,
            metric_points: 0,
            metric_calls_skipped: 0,
        }
    }

    fn all_headers(&self) -> Vec<(&str, &str)> {
        HEADERS
            .iter()
            .copied()
            .chain(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .collect()
    }

    pub fn url(&self) -> String {
        self.logs_url.trim_end_matches("/v1/logs").to_string()
    }

    pub fn deliver(&mut self, poster: &mut Poster, events: &[Event]) -> Result<Delivered, Failed> {
        let observed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let records: Vec<LogRecord> = events.iter().map(|e| log_record(e, observed)).collect();
        let mut done = Delivered::default();
        let mut start = 0;
        while start < records.len() {
            let end = (start + MAX_RECORDS_PER_POST).min(records.len());
            let mut partly = Vec::new();
            send_split(
                start..end,
                &mut done,
                "413 from the OTLP receiver",
                &mut |r| {
                    let answer = self.post_logs(poster, &records, r.clone())?;
                    if let Answer::Accepted(body) = &answer {
                        // OTLP's partial success: accepted, some records refused unnamed.
                        if let Ok(resp) = ExportLogsServiceResponse::decode(body.as_slice()) {
                            if let Some(p) = resp.partial_success {
                                if p.rejected_log_records > 0 {
                                    // No more than the POST held, whatever the receiver claims.
                                    let refused =
                                        (p.rejected_log_records as u64).min(r.len() as u64);
                                    partly.push((r, refused, p.error_message));
                                }
                            }
                        }
                    }
                    Ok(answer)
                },
            )?;
            done.partly.extend(partly);
            start = end;
        }
        // The metric over the calls the backend took as logs.
        let refused: std::collections::HashSet<usize> =
            done.rejected.iter().map(|(i, _)| *i).collect();
        let taken: Vec<&Event> = events
            .iter()
            .enumerate()
            .filter(|(i, _)| !refused.contains(i))
            .map(|(_, e)| e)
            .collect();
        let (metric, skipped) = duration_metric(&taken);
        self.metric_calls_skipped += skipped;
        if let Some(m) = metric {
            let n = match &m.data {
                Some(metric::Data::Histogram(h)) => h.data_points.len() as u64,
                _ => 0,
            };
            let req = ExportMetricsServiceRequest {
                resource_metrics: vec![ResourceMetrics {
                    resource: Some(self.resource.clone()),
                    scope_metrics: vec![ScopeMetrics {
                        scope: scope(),
                        metrics: vec![m],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            };
            match poster.post(
                &self.metrics_url,
                &self.all_headers(),
                &gzip(&req.encode_to_vec()),
                n as usize,
            )? {
                Answer::Accepted(body) => {
                    let refused = ExportMetricsServiceResponse::decode(body.as_slice())
                        .ok()
                        .and_then(|r| r.partial_success)
                        .map_or(0, |p| p.rejected_data_points.max(0) as u64)
                        .min(n);
                    if refused > 0 {
                        eprintln!(
                            "checkout-guard ship: {} refused {refused} of {n} data points of {DURATION_METRIC} (counted)",
                            redact(&self.metrics_url)
                        );
                    }
                    self.metric_points += n - refused;
                    self.metric_points_rejected += refused;
                }
                other => {
                    eprintln!(
                        "checkout-guard ship: {} refused {n} data points of {DURATION_METRIC}: {other:?} (counted; the calls' log records were delivered)",
                        redact(&self.metrics_url)
                    );
                    self.metric_points_rejected += n;
                }
            }
        }
        Ok(done)
    }

    /// POSTs the log records in `range`.
    fn post_logs(
        &self,
        poster: &mut Poster,
        records: &[LogRecord],
        range: std::ops::Range<usize>,
    ) -> Result<Answer, Failed> {
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(self.resource.clone()),
                scope_logs: vec![ScopeLogs {
                    scope: scope(),
                    log_records: records[range].to_vec(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let n = req.resource_logs[0].scope_logs[0].log_records.len();
        let body = gzip(&req.encode_to_vec());
        if body.len() > MAX_POST_BYTES {
            // Split here rather than sent: a receiver past its limit may close the
            // connection before answering 413 (then it reads as no answer).
            return Ok(if n > 1 {
                Answer::TooLarge
            } else {
                Answer::Rejected {
                    status: 413,
                    body: format!(
                        "over {MAX_POST_BYTES} bytes gzipped alone ({} bytes), not sent",
                        body.len()
                    ),
                }
            });
        }
        poster.post(&self.logs_url, &self.all_headers(), &body, n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(ms: f64, status: i64) -> Event {
        Event {
            id: format!("{ms}-{status}"),
            attributes: serde_json::json!({
                "eventType": "ExternalApiCall", "timestamp": 1_700_000_000_000i64, "api": "payments",
                "http.request.method": "POST", "server.address": "psp.example", "server.port": 443,
                "http.response.status_code": status, "duration.ms": ms,
            })
            .as_object()
            .unwrap()
            .clone(),
        }
    }

    #[test]
    fn calls_fall_in_the_semantic_conventions_buckets_per_status() {
        let evs = [
            call(5.0, 200),
            call(40.0, 200),
            call(12_000.0, 200),
            call(100.0, 429),
        ];
        let refs: Vec<&Event> = evs.iter().collect();
        let m = duration_metric(&refs).0.unwrap();
        assert_eq!((m.name.as_str(), m.unit.as_str()), (DURATION_METRIC, "s"));
        let Some(metric::Data::Histogram(h)) = m.data else {
            panic!()
        };
        assert_eq!(
            h.aggregation_temporality,
            AggregationTemporality::Delta as i32
        );
        assert_eq!(h.data_points.len(), 2, "one point per status");
        let ok = h.data_points.iter().find(|p| p.count == 3).unwrap();
        // 0.005 s is on the first boundary: in the first bucket; 12 s past the last.
        assert_eq!(ok.bucket_counts[0], 1);
        assert_eq!(
            ok.bucket_counts[DURATION_BOUNDS.iter().position(|b| *b == 0.05).unwrap()],
            1
        );
        assert_eq!(ok.bucket_counts[DURATION_BOUNDS.len()], 1);
        assert!((ok.sum.unwrap() - 12.045).abs() < 1e-9);
        assert_eq!(ok.bucket_counts.len(), ok.explicit_bounds.len() + 1);
    }

    #[test]
    fn otlp_headers_are_read_as_opentelemetry_reads_them() {
        let h = headers_from_env("api-key=abc%3D1, x-tenant = shop ,").unwrap();
        assert_eq!(
            h,
            [
                ("api-key".to_string(), "abc=1".to_string()),
                ("x-tenant".into(), "shop".into())
            ]
        );
        let e = headers_from_env("api-key").unwrap_err();
        assert!(e.contains("api-key") && e.contains("key=value"), "{e}");
        assert_eq!(percent_decode("a%2"), "a%2");
    }

    #[test]
    fn a_log_record_keeps_the_events_time_id_and_typed_attributes() {
        let r = log_record(&call(40.0, 200), 5);
        assert_eq!(r.time_unix_nano, 1_700_000_000_000_000_000);
        let get = |k: &str| {
            r.attributes
                .iter()
                .find(|a| a.key == k)
                .and_then(|a| a.value.clone()?.value)
        };
        assert_eq!(
            get("event.name"),
            Some(any_value::Value::StringValue("ExternalApiCall".into()))
        );
        assert_eq!(
            get(ID_ATTRIBUTE),
            Some(any_value::Value::StringValue("40-200".into()))
        );
        assert_eq!(
            get("http.response.status_code"),
            Some(any_value::Value::IntValue(200))
        );
        assert_eq!(
            get("duration.ms"),
            Some(any_value::Value::DoubleValue(40.0))
        );
    }
}
