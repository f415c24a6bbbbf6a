//! The incident report: one self-contained HTML file (no network, no scripts) with inline
//! SVG charts, built from one pass over the events of a time range.

use std::fmt::Write;

use checkout_guard_cli::scan::{Accumulator, ReportData, ScanConfig, ScanResult, CLASSES};

use crate::time::format_ms;

pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// One line of a chart: label, colour, (ms, value) points.
pub(crate) type Series<'a> = (&'a str, &'a str, Vec<(i64, u64)>);

pub(crate) const COLORS: [&str; 4] = ["#1b7837", "#b2182b", "#f1a340", "#5e3c99"];

/// A line chart of per-second series over [t0, t1), with windows shaded.
pub(crate) fn chart(
    t0: i64,
    t1: i64,
    series: &[Series<'_>],
    windows: &[(i64, i64)],
    title: &str,
) -> String {
    let (w, h, pad) = (900.0, 200.0, 40.0);
    let span = ((t1 - t0) as f64 / 1000.0).max(1.0);
    let ymax = series
        .iter()
        .flat_map(|(_, _, pts)| pts.iter().map(|p| p.1))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |ms: i64| pad + ms.saturating_sub(t0) as f64 / 1000.0 / span * w;
    let y = |v: f64| pad + h - v / ymax * h;
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{}" height="{}" role="img" aria-label="{}">"#,
        w + 2.0 * pad,
        h + 2.0 * pad + 20.0,
        esc(title)
    );
    // Shaded where they meet the chart (a window of the far past or future is not
    // drawn miles off it).
    for &(a, b) in windows.iter().filter(|&&(a, b)| b > t0 && a < t1) {
        let (a, b) = (a.max(t0), b.min(t1));
        let _ = write!(
            s,
            r##"<rect class="window-mark" x="{:.1}" y="{pad}" width="{:.1}" height="{h}" fill="#fde0dd"/>"##,
            x(a),
            (x(b) - x(a)).max(1.0)
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{pad}" y="{pad}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##
    );
    let _ = write!(
        s,
        r#"<text x="{pad}" y="{}" font-size="12">{}</text>"#,
        pad - 8.0,
        esc(title)
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{ymax:.0}/s</text>"#,
        pad - 4.0,
        pad + 4.0
    );
    let _ = write!(
        s,
        r#"<text x="{pad}" y="{}" font-size="10">{}</text>"#,
        pad + h + 14.0,
        esc(&format_ms(t0))
    );
    let _ = write!(
        s,
        r#"<text x="{}" y="{}" font-size="10" text-anchor="end">{}</text>"#,
        pad + w,
        pad + h + 14.0,
        esc(&format_ms(t1))
    );
    for (i, (label, color, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|&(t, v)| format!("{:.1},{:.1}", x(t), y(v as f64)))
            .collect();
        let _ = write!(
            s,
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        let lx = pad + i as f64 * 180.0;
        let _ = write!(
            s,
            r#"<rect x="{lx}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{}" font-size="11">{}</text>"#,
            pad + h + 22.0,
            lx + 14.0,
            pad + h + 31.0,
            esc(label)
        );
    }
    s.push_str("</svg>");
    s
}

/// At most this many points per chart line, whatever the window: the bucket a point stands
/// for grows with the window (a day: 1 min, a month: 30 min, a year: 6 h).
pub const MAX_POINTS: i64 = 2000;

/// The longest window a report covers. Memory follows the data inside the window, not its
/// length, but a window of centuries is a typo, refused rather than guessed at.
pub const MAX_WINDOW_DAYS: i64 = 400;

/// Refuses a window that is empty, reversed or longer than `MAX_WINDOW_DAYS`, naming it.
pub fn check_window(t0: i64, t1: i64, given: &str) -> Result<(), String> {
    if t1 <= t0 {
        return Err(format!("--window ends before it starts: {given:?}"));
    }
    let span = i128::from(t1) - i128::from(t0);
    if span > i128::from(MAX_WINDOW_DAYS) * 86_400_000 {
        return Err(format!(
            "--window {given:?} spans {:.0} days; a report covers at most {MAX_WINDOW_DAYS} days (narrow the window to the incident)",
            span as f64 / 86_400_000.0
        ));
    }
    Ok(())
}

/// The bucket size of a chart over [t0, t1): the smallest round size that keeps a line
/// within `MAX_POINTS`.
pub fn bucket_ms(t0: i64, t1: i64) -> i64 {
    const STEPS_S: [i64; 20] = [
        1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200,
        86_400, 172_800, 604_800,
    ];
    let span = (t1 - t0).max(1);
    STEPS_S
        .iter()
        .map(|s| s * 1000)
        .find(|step| (span + step - 1) / step <= MAX_POINTS)
        .unwrap_or_else(|| (span + MAX_POINTS - 1) / MAX_POINTS)
}

/// One point per bucket of `step` ms over [t0, t1), buckets without data at zero: the
/// busiest second of each bucket (for 1 s buckets, the second itself). Costs one pass over
/// the per-second data plus the (bounded) points.
pub(crate) fn bucketed(
    t0: i64,
    t1: i64,
    step: i64,
    secs: impl Iterator<Item = (i64, u64)>,
) -> Vec<(i64, u64)> {
    // In i128: a bucket of the first or last seconds there are starts or ends past i64
    // (a point's time is clamped to it).
    let (t0, t1, step) = (i128::from(t0), i128::from(t1), i128::from(step));
    let b0 = t0.div_euclid(step) * step;
    let n = (t1 - b0 + step - 1) / step;
    let clamp = |ms: i128| ms.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    let mut pts: Vec<(i64, u64)> = (0..n).map(|i| (clamp(b0 + i * step), 0)).collect();
    for (s, v) in secs {
        let ms = i128::from(s) * 1000;
        if ms < b0 {
            continue;
        }
        if let Some(p) = usize::try_from((ms - b0) / step)
            .ok()
            .and_then(|i| pts.get_mut(i))
        {
            p.1 = p.1.max(v);
        }
    }
    pts
}

pub(crate) fn bucket_text(step: i64) -> String {
    match step {
        s if s % 86_400_000 == 0 => format!("{} d", s / 86_400_000),
        s if s % 3_600_000 == 0 => format!("{} h", s / 3_600_000),
        s if s % 60_000 == 0 => format!("{} min", s / 60_000),
        s if s % 1000 == 0 => format!("{} s", s / 1000),
        s => format!("{s} ms"),
    }
}

pub fn html(
    acc: &Accumulator,
    r: &ScanResult,
    cfg: &ScanConfig,
    t0: i64,
    t1: i64,
    title: &str,
) -> String {
    let empty = ReportData::default();
    let d = acc.report.as_ref().unwrap_or(&empty);
    let mut h = String::new();
    let _ = write!(
        h,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{t}</title><style>
body{{font-family:sans-serif;margin:24px;color:#222}} table{{border-collapse:collapse;margin:8px 0 20px}}
td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}} th{{background:#f3f3f3}} td.l,th.l{{text-align:left}}
h2{{margin-top:28px}} .muted{{color:#777}}</style></head><body><h1>{t}</h1>"#,
        t = esc(title)
    );
    let peak = r
        .windows
        .iter()
        .map(|w| (w.peak_rps, w.peak_at_ms))
        .fold((0.0, 0), |a, b| if b.0 > a.0 { b } else { a });
    let calls_429: u64 = d.shop_429.values().sum();
    let denials: u64 = d.shop_denials.values().flat_map(|m| m.values()).sum();
    let _ = write!(h, r#"<h2>Overview</h2><table id="overview">"#);
    let rows: Vec<(&str, String)> = vec![
        (
            "period (UTC)",
            format!("{} .. {}", format_ms(t0), format_ms(t1)),
        ),
        ("external API calls", acc.counted.to_string()),
        (
            "checkouts started",
            d.checkouts().map_or("-".into(), |n| n.to_string()),
        ),
        ("paid", d.paid().map_or("-".into(), |n| n.to_string())),
        ("429 answers", calls_429.to_string()),
        ("limiter denials", denials.to_string()),
        ("high-load windows", r.windows.len().to_string()),
        (
            "highest peak",
            if r.windows.is_empty() {
                "-".into()
            } else {
                format!("{:.1}/s at {}", peak.0, format_ms(peak.1))
            },
        ),
        (
            "events read (bad lines)",
            format!("{} ({})", acc.events, acc.malformed + acc.missing_timestamp),
        ),
    ];
    for (k, v) in rows {
        let _ = write!(
            h,
            r#"<tr><th class="l">{}</th><td class="l" data-key="{}">{}</td></tr>"#,
            esc(k),
            esc(k),
            esc(&v)
        );
    }
    h.push_str("</table>");

    let _ = write!(
        h,
        r#"<h2>High-load windows</h2><p class="muted">fine buckets of {} ms at &ge; {}/s inside coarse buckets of {} s at &ge; {}/s</p><table id="windows"><tr><th class="l">start</th><th class="l">end</th><th>peak/s</th><th class="l">peak at</th><th>calls</th><th class="l">status</th><th class="l">denials</th></tr>"#,
        cfg.fine_ms,
        cfg.fine_threshold,
        cfg.coarse_ms / 1000,
        cfg.coarse_threshold
    );
    for w in &r.windows {
        let status: Vec<String> = w.status.iter().map(|(s, n)| format!("{s}:{n}")).collect();
        let den: Vec<String> = w
            .denials
            .iter()
            .map(|((r, s), n)| format!("{r}/{s}:{n}"))
            .collect();
        let _ = write!(
            h,
            r#"<tr class="window" data-start-ms="{}" data-end-ms="{}" data-calls="{}"><td class="l">{}</td><td class="l">{}</td><td>{:.1}</td><td class="l">{}</td><td>{}</td><td class="l">{}</td><td class="l">{}</td></tr>"#,
            w.start_ms,
            w.end_ms,
            w.calls,
            format_ms(w.start_ms),
            format_ms(w.end_ms),
            w.peak_rps,
            format_ms(w.peak_at_ms),
            w.calls,
            esc(&status.join(" ")),
            esc(&den.join(" "))
        );
    }
    h.push_str("</table>");

    let marks: Vec<(i64, i64)> = r.windows.iter().map(|w| (w.start_ms, w.end_ms)).collect();
    let fine = acc.fine_counts();
    let per_second: std::collections::HashMap<i64, u64> = if cfg.fine_ms == 1000 {
        fine.into_iter().collect()
    } else {
        let mut m = std::collections::HashMap::new();
        for (b, n) in fine {
            // The second the bucket starts in (floored: a bucket before 1970 too).
            let second = (i128::from(b) * i128::from(cfg.fine_ms)).div_euclid(1000);
            *m.entry(second as i64).or_default() += n;
        }
        m
    };
    let step = bucket_ms(t0, t1);
    h.push_str("<h2>Calls per second</h2>");
    if step > 1000 {
        let _ = write!(
            h,
            r#"<p class="muted" id="resolution">each point: the busiest second of {}</p>"#,
            bucket_text(step)
        );
    }
    h.push_str(&chart(
        t0,
        t1,
        &[(
            "calls/s",
            "#2166ac",
            bucketed(t0, t1, step, per_second.into_iter()),
        )],
        &marks,
        "all external API calls (high-load windows shaded)",
    ));

    h.push_str("<h2>Status codes over time, per api</h2>");
    for (api, secs) in &d.status_over_time {
        let series: Vec<Series<'_>> = (0..4)
            .map(|c| {
                (
                    CLASSES[c],
                    COLORS[c],
                    bucketed(t0, t1, step, secs.iter().map(|(&s, v)| (s, v[c]))),
                )
            })
            .collect();
        h.push_str(&chart(t0, t1, &series, &marks, &format!("api {api}")));
    }

    h.push_str(r#"<h2>Latency per api</h2><table id="latency"><tr><th class="l">api</th><th>calls</th><th>p50 ms</th><th>p95 ms</th><th>p99 ms</th></tr>"#);
    for (api, hist) in &d.latency {
        let p = |q| hist.percentile(q).map_or("-".into(), |v| format!("{v:.1}"));
        let _ = write!(
            h,
            r#"<tr><td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(api),
            hist.count(),
            p(50.0),
            p(95.0),
            p(99.0)
        );
    }
    h.push_str(r#"</table><p class="muted">percentiles from a histogram of 5%-wide buckets (upper bounds)</p>"#);

    h.push_str(r#"<h2>429s and limiter decisions by shop</h2><table id="shops"><tr><th class="l">shop</th><th>429s</th><th class="l">denials by reason</th></tr>"#);
    let mut shops: Vec<&String> = d.shop_429.keys().chain(d.shop_denials.keys()).collect();
    shops.sort();
    shops.dedup();
    shops.sort_by_key(|s| {
        std::cmp::Reverse(
            d.shop_429.get(*s).copied().unwrap_or(0)
                + d.shop_denials.get(*s).map_or(0, |m| m.values().sum()),
        )
    });
    for shop in shops.iter().take(30) {
        let den: Vec<String> = d
            .shop_denials
            .get(*shop)
            .map(|m| m.iter().map(|(r, n)| format!("{r}:{n}")).collect())
            .unwrap_or_default();
        let _ = write!(
            h,
            r#"<tr><td class="l">{}</td><td>{}</td><td class="l">{}</td></tr>"#,
            esc(shop),
            d.shop_429.get(*shop).copied().unwrap_or(0),
            esc(&den.join(" "))
        );
    }
    h.push_str("</table>");

    h.push_str(r#"<h2>External API call flow</h2><table id="flow"><tr><th class="l">api</th><th>calls</th><th>per checkout</th></tr>"#);
    for (api, n) in &d.calls_per_api {
        let per = d
            .checkouts()
            .filter(|&c| c > 0)
            .map_or("-".into(), |c| format!("{:.2}", *n as f64 / c as f64));
        let _ = write!(
            h,
            r#"<tr><td class="l">{}</td><td>{n}</td><td>{per}</td></tr>"#,
            esc(api)
        );
    }
    h.push_str("</table>");

    if !d.funnel.is_empty() {
        let _ = write!(
            h,
            r#"<h2>Purchase funnel</h2><p class="muted">CheckoutStep events by step; checkouts started are step &quot;{}&quot;, paid step &quot;{}&quot; (report --steps STARTED,PAID)</p><table id="funnel"><tr><th class="l">step</th><th>events</th></tr>"#,
            esc(&d.steps.started),
            esc(&d.steps.paid)
        );
        let mut steps: Vec<(&String, &u64)> = d.funnel.iter().collect();
        steps.sort_by_key(|(_, n)| std::cmp::Reverse(**n)); // a funnel narrows
        for (step, n) in steps {
            let _ = write!(
                h,
                r#"<tr><td class="l">{}</td><td>{n}</td></tr>"#,
                esc(step)
            );
        }
        h.push_str(r#"</table><h2>Payment channels (paid)</h2><table id="channels"><tr><th class="l">channel</th><th>paid</th></tr>"#);
        for (c, n) in &d.channels {
            let _ = write!(h, r#"<tr><td class="l">{}</td><td>{n}</td></tr>"#, esc(c));
        }
        h.push_str("</table>");
    }
    h.push_str("</body></html>\n");
    h
}
