//! The counters in Prometheus' text exposition format (0.0.4) or OpenMetrics 1.0.0. Off
//! the hot path (a scrape every few seconds): plain `String` formatting.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::{decode, region, Family, Kind, Region, DURATION_BOUNDS, SUM, VALUES};

pub const CONTENT_TYPE_PROMETHEUS: &str = "text/plain; version=0.0.4; charset=utf-8";
pub const CONTENT_TYPE_OPENMETRICS: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Every family's series as this process's region holds them (the workers' sums), in the
/// Prometheus text format, or OpenMetrics (ending `# EOF`) when `openmetrics`. Families
/// with no series yet are announced (HELP, TYPE) without samples. Without a region, only
/// the announcements.
pub fn render(openmetrics: bool) -> String {
    let mut out = render_region(region(), openmetrics);
    // Whether these are the master's counters: a worker whose shared table could not be
    // made (a /dev/shm it cannot write, too small) counts alone, and each scrape would read
    // whichever worker answered, up and down. Said in the exposition and in the log.
    let private = match crate::denials::sharing() {
        Some(crate::denials::Sharing::Private(why)) => Some(why),
        _ => None,
    };
    let name = "checkout_guard_metrics_shared";
    let mut tail = format!(
        "# HELP {name} {}\n# TYPE {name} gauge\n{name} {}\n",
        escape_help(
            "1: the counters are shared by the workers of this php-fpm master (or this process's \
             alone outside php-fpm); 0: this worker's alone (its shared table could not be made: see PHP's log)",
            openmetrics
        ),
        if private.is_some() { 0 } else { 1 }
    );
    if openmetrics {
        // Before the closing "# EOF".
        out.truncate(out.len() - "# EOF\n".len());
        tail.push_str("# EOF\n");
    }
    out.push_str(&tail);
    if let Some(why) = private {
        let now = crate::clock::SystemClock::monotonic_ns();
        crate::warn_log::warn(&["metrics", "private"], &why, now, || {
            format!(
                "PHP Warning:  checkout_guard: CheckoutGuard\\Metrics::render() reads this worker's \
                 counters alone, not its php-fpm master's ({why}): each scrape counts what one worker \
                 did (said at most once a minute)"
            )
        });
    }
    out
}

/// One label set's values, duplicates (two slots claimed at once) added up.
type Series = BTreeMap<(Family, Vec<String>), [u64; VALUES]>;

fn collect(r: &Region) -> Series {
    let mut out: Series = BTreeMap::new();
    for (key, values) in r.published() {
        let Some(k) = decode(&key) else { continue };
        let kind = k.0.kind();
        match out.get_mut(&k) {
            None => {
                out.insert(k, values);
            }
            // A gauge: the latest set (its time is the second value).
            Some(have) if kind == Kind::Gauge => {
                if values[1] > have[1] {
                    *have = values;
                }
            }
            Some(have) => {
                for (a, b) in have.iter_mut().zip(values) {
                    *a = a.wrapping_add(b);
                }
            }
        }
    }
    out
}

pub(super) fn render_region(r: Option<&Region>, om: bool) -> String {
    let series = r.map(collect).unwrap_or_default();
    let mut out = String::with_capacity(4096 + series.len() * 160);
    for family in Family::ALL {
        let kind = family.kind();
        let base = family.base_name();
        let (type_name, type_word) = match (kind, om) {
            (Kind::Counter | Kind::SecondsCounter, true) => (base.to_string(), "counter"),
            (Kind::Counter | Kind::SecondsCounter, false) => (format!("{base}_total"), "counter"),
            (Kind::Gauge, _) => (base.to_string(), "gauge"),
            (Kind::Histogram, _) => (base.to_string(), "histogram"),
        };
        let _ = writeln!(out, "# HELP {type_name} {}", escape_help(family.help(), om));
        let _ = writeln!(out, "# TYPE {type_name} {type_word}");
        for ((f, labels), v) in &series {
            if *f != family {
                continue;
            }
            let pairs: Vec<(&str, &str)> = family
                .labels()
                .iter()
                .copied()
                .zip(labels.iter().map(String::as_str))
                .collect();
            match kind {
                Kind::Counter => sample(
                    &mut out,
                    &format!("{base}_total"),
                    &pairs,
                    None,
                    &v[0].to_string(),
                ),
                Kind::SecondsCounter => sample(
                    &mut out,
                    &format!("{base}_total"),
                    &pairs,
                    None,
                    &float(v[0] as f64 / 1e9),
                ),
                Kind::Gauge => sample(&mut out, base, &pairs, None, &float(f64::from_bits(v[0]))),
                Kind::Histogram => {
                    let mut cumulative = 0u64;
                    for (i, bound) in DURATION_BOUNDS.iter().enumerate() {
                        cumulative += v[i];
                        let le = float(*bound);
                        sample(
                            &mut out,
                            &format!("{base}_bucket"),
                            &pairs,
                            Some(&le),
                            &cumulative.to_string(),
                        );
                    }
                    cumulative += v[DURATION_BOUNDS.len()];
                    sample(
                        &mut out,
                        &format!("{base}_bucket"),
                        &pairs,
                        Some("+Inf"),
                        &cumulative.to_string(),
                    );
                    sample(
                        &mut out,
                        &format!("{base}_count"),
                        &pairs,
                        None,
                        &cumulative.to_string(),
                    );
                    sample(
                        &mut out,
                        &format!("{base}_sum"),
                        &pairs,
                        None,
                        &float(v[SUM] as f64 / 1e9),
                    );
                }
            }
        }
    }
    // The region itself: when it was made (a reset is a new start time) and what found no
    // room.
    let started = r.map_or(0, Region::started_ms);
    let name = "checkout_guard_metrics_start_time_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} {}",
        escape_help(
            "Unix time when these counters were made: a php-fpm master's start or reload resets them",
            om
        )
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
    sample(&mut out, name, &[], None, &float(started as f64 / 1e3));
    let base = "checkout_guard_metrics_series_dropped";
    let type_name = if om {
        base.to_string()
    } else {
        format!("{base}_total")
    };
    let _ = writeln!(
        out,
        "# HELP {type_name} {}",
        escape_help(
            "Label sets not counted: the shared table had no free slot",
            om
        )
    );
    let _ = writeln!(out, "# TYPE {type_name} counter");
    sample(
        &mut out,
        &format!("{base}_total"),
        &[],
        None,
        &r.map_or(0, Region::series_dropped).to_string(),
    );
    if om {
        out.push_str("# EOF\n");
    }
    out
}

/// One sample line: `name{a="x",le="0.5"} value`.
fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], le: Option<&str>, value: &str) {
    out.push_str(name);
    if !labels.is_empty() || le.is_some() {
        out.push('{');
        let mut first = true;
        for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
            if !first {
                out.push(',');
            }
            first = false;
            out.push_str(k);
            out.push_str("=\"");
            escape_label(out, v);
            out.push('"');
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(value);
    out.push('\n');
}

/// A label value as both formats escape it: `\`, `"` and a line feed.
fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// HELP text: `\` and line feeds escaped (and `"` in OpenMetrics).
fn escape_help(v: &str, om: bool) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if om => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A float as both formats read it: an integral value with `.0` (OpenMetrics' canonical
/// `le`), `+Inf`, `-Inf`, `NaN`.
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}
