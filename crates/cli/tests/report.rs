//! The incident report: one self-contained HTML file that a real browser (Debian's
//! headless Chromium) renders, showing the same windows as the scan.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_checkout-guard");
const T0: i64 = 1_796_030_000_000 - 1_796_030_000_000 % 300_000;

fn events() -> String {
    let mut lines = Vec::new();
    for s in 0..120i64 {
        let rate = if (40..50).contains(&s) { 150 } else { 3 };
        for i in 0..rate {
            let ts = T0 + s * 1000 + i * 1000 / rate;
            let (api, status) = if i % 2 == 0 {
                ("zoneA", 200)
            } else {
                ("payment", if s % 2 == 0 { 429 } else { 200 })
            };
            lines.push(format!(
                r#"{{"eventType":"ExternalApiCall","timestamp":{ts},"api":"{api}","http.response.status_code":{status},"duration.ms":{}.5,"shop.id":"<b>shop-{}</b>"}}"#,
                20 + i % 40,
                i % 3
            ));
            if i % 2 == 0 {
                lines.push(format!(r#"{{"eventType":"CheckoutStep","timestamp":{ts},"step":"cart","shop.id":"s","payment.channel":"card"}}"#));
                if status == 200 && s % 3 == 0 {
                    lines.push(format!(r#"{{"eventType":"CheckoutStep","timestamp":{ts},"step":"paid","shop.id":"s","payment.channel":"konbini"}}"#));
                }
            }
        }
        if (40..50).contains(&s) {
            lines.push(format!(r#"{{"eventType":"RateLimitDecision","timestamp":{},"shop.id":"flash","reason":"hot_shop","allowed":false}}"#, T0 + s * 1000));
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn the_report_renders_in_a_browser_and_matches_the_scan() {
    let dir = std::env::temp_dir().join(format!("cg-report-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(&file, events()).unwrap();
    let html = dir.join("report.html");
    let window = format!("{}..{}", T0, T0 + 120_000);
    let args = ["--fine-threshold", "100", "--coarse-threshold", "0.3"];
    let out = Command::new(BIN)
        .args([
            "report",
            file.to_str().unwrap(),
            "--window",
            &window,
            "-o",
            html.to_str().unwrap(),
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = std::fs::read_to_string(&html).unwrap();
    // Self-contained: nothing to fetch, nothing to run; shop names are escaped.
    for banned in ["<script", "src=", "href=", "<link", "@import", "<b>shop"] {
        assert!(!page.contains(banned), "report contains {banned}");
    }
    for section in [
        "id=\"overview\"",
        "id=\"windows\"",
        "id=\"latency\"",
        "id=\"shops\"",
        "id=\"flow\"",
        "id=\"funnel\"",
        "id=\"channels\"",
        "<svg",
    ] {
        assert!(page.contains(section), "report lacks {section}");
    }

    let scan = Command::new(BIN)
        .args([
            "scan",
            "--json",
            "--from",
            &T0.to_string(),
            "--to",
            &(T0 + 120_000).to_string(),
            file.to_str().unwrap(),
        ])
        .args(args)
        .output()
        .unwrap();
    let scan: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap();
    let windows = scan["windows"].as_array().unwrap();
    assert_eq!(windows.len(), 1);

    // What a browser renders: Chromium's DOM after layout.
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("no Chromium: run scripts/setup.sh (installs Debian's chromium)");
    let profile = dir.join("profile");
    let dom = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", html.display()))
        .output()
        .unwrap();
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    let w = &windows[0];
    let row = format!(
        r#"data-start-ms="{}" data-end-ms="{}" data-calls="{}""#,
        w["start_ms"], w["end_ms"], w["calls"]
    );
    assert!(
        dom.contains(&row),
        "the rendered report does not show the scan's window {row}"
    );
    assert!(dom.contains(&format!(
        r#"data-key="external API calls">{}<"#,
        scan["input"]["counted"]
    )));
    assert!(dom.contains("hot_shop:10"), "denials by shop");
    assert!(
        dom.contains("&lt;b&gt;shop-1&lt;/b&gt;"),
        "shop names shown as text"
    );
    let svgs = dom.matches("<svg").count();
    assert_eq!(svgs, 3, "calls/s and one status chart per api");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Peak RSS in KB of `checkout-guard ARGS`, run under `/usr/bin/time -v` with its address
/// space capped at 2 GB (so a build that sizes its memory by the window fails fast
/// instead of taking the machine): (exit code, peak RSS, stderr).
fn peak_rss(args: &[&str]) -> (i32, u64, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"ulimit -v 2000000; exec /usr/bin/time -v "$@""#)
        .arg("sh")
        .arg(BIN)
        .args(args)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = err
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Maximum resident set size (kbytes): ")
        })
        .unwrap_or_else(|| panic!("no RSS from /usr/bin/time -v: {err}"))
        .parse()
        .unwrap();
    let code = err
        .lines()
        .find_map(|l| l.trim().strip_prefix("Exit status: "))
        .map_or(-1, |c| c.parse().unwrap());
    (code, rss, err)
}

/// Points of every line of every chart in a report.
fn polyline_points(page: &str) -> Vec<usize> {
    page.split("<polyline ")
        .skip(1)
        .map(|p| {
            let pts = p.split("points=\"").nth(1).unwrap();
            pts[..pts.find('"').unwrap()].split(' ').count()
        })
        .collect()
}

#[test]
fn memory_follows_the_data_in_the_window_not_the_window() {
    let dir = std::env::temp_dir().join(format!("cg-report-rss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("day.jsonl");
    let out = Command::new(BIN)
        .args(["generate", "--events", "100000", "--seed", "3"])
        .args(["-o", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    // The synthetic day starts at a midnight (UTC) and lasts one day.
    let first = std::fs::read_to_string(&file).unwrap();
    let ts: i64 = first.split("\"timestamp\":").nth(1).unwrap()[..13]
        .parse()
        .unwrap();
    let day0 = ts - ts % 86_400_000;
    const D: i64 = 86_400_000;
    let mut rss = Vec::new();
    for (name, t0, t1) in [
        ("day", day0, day0 + D),
        ("month", day0 - 15 * D, day0 + 16 * D),
        ("year", day0 - 180 * D, day0 + 185 * D),
    ] {
        let html = dir.join(format!("{name}.html"));
        let window = format!("{t0}..{t1}");
        let (code, kb, err) = peak_rss(&[
            "report",
            file.to_str().unwrap(),
            "--window",
            &window,
            "-o",
            html.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{name}: {err}");
        let page = std::fs::read_to_string(&html).unwrap();
        let points = polyline_points(&page);
        assert!(!points.is_empty());
        assert!(
            points.iter().all(|&n| n <= 2000),
            "{name}: a chart line has {:?} points",
            points.iter().max()
        );
        assert!(
            page.contains("data-key=\"external API calls\">"),
            "{name}: the overview"
        );
        rss.push((name, kb, page.len()));
    }
    let (day_kb, day_html) = (rss[0].1, rss[0].2);
    for &(name, kb, html) in &rss[1..] {
        // The old report drew one point per second of the window: a month took 900 MB
        // over a 1M-event day, a year more than 6 GB.
        assert!(
            kb < day_kb + 32 * 1024,
            "{name} window: peak RSS {kb} KB, the day's {day_kb} KB ({rss:?})"
        );
        assert!(
            html < day_html * 2,
            "{name} window: {html} bytes of HTML, the day's {day_html}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_unreasonable_window_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("cg-report-refuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(&file, events()).unwrap();
    let html = dir.join("report.html");
    for window in [
        "0..99999999999999",
        "-9223372036854775808..9223372036854775807",
        "2025-01-01T00:00:00Z..2027-01-01T00:00:00Z",
    ] {
        let (code, _, err) = peak_rss(&[
            "report",
            file.to_str().unwrap(),
            &format!("--window={window}"),
            "-o",
            html.to_str().unwrap(),
        ]);
        assert_eq!(code, 2, "{window}: {err}");
        assert!(err.contains(window), "{window} not named: {err}");
        assert!(err.contains("at most 400 days"), "{err}");
        assert!(!html.exists(), "no report written for {window}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs `report FILE --window W -o HTML ARGS`: (exit code, stderr, the page if written).
fn report(file: &std::path::Path, window: &str, args: &[&str]) -> (i32, String, Option<String>) {
    let html = file.with_extension(format!("{}.html", args.len()));
    let _ = std::fs::remove_file(&html);
    let out = Command::new(BIN)
        .args(["report", file.to_str().unwrap(), "--window", window])
        .args(["-o", html.to_str().unwrap()])
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        std::fs::read_to_string(&html).ok(),
    )
}

/// A window with no event (a day off) and an api no call has (`payments` for `payment`)
/// are refused, exit 2, nothing written, naming the files' time range and apis; the
/// windows and apis that are there still make a report.
#[test]
fn a_window_or_an_api_that_matched_nothing_is_refused_naming_what_is_there() {
    let dir = std::env::temp_dir().join(format!("cg-report-none-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(&file, events()).unwrap();
    let day_after = format!("{}..{}", T0 + 86_400_000, T0 + 2 * 86_400_000);
    let (code, err, page) = report(&file, &day_after, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(page.is_none());
    assert!(err.contains("matched no event"), "{err}");
    assert!(
        err.contains("the files' events run from 2026-11-30 09:10:00.000 to 2026-11-30 09:11:59."),
        "{err}"
    );
    let window = format!("{}..{}", T0, T0 + 120_000);
    let (code, err, page) = report(&file, &window, &["--api", "payments"]);
    assert_eq!(code, 2, "{err}");
    assert!(page.is_none());
    assert!(
        err.contains("--api payments matched no event")
            && err.contains("the apis in the files: payment, zoneA"),
        "{err}"
    );
    let (code, err, page) = report(&file, &window, &["--api", "payment"]);
    assert_eq!(code, 0, "{err}");
    assert!(page.unwrap().contains("data-key=\"external API calls\">"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `--shop` or an `--event-type` that matched no event of the window (a typo) is
/// refused, exit 2, nothing written, naming what is there (the busiest shops, a few; the
/// event types); with `--api payment`, which is there, and `--shop nope` the message
/// blames `--shop`, not `--api`. A shop with denials only (no call) still makes a report.
#[test]
fn a_shop_or_an_event_type_that_matched_nothing_is_refused_naming_what_is_there() {
    let dir = std::env::temp_dir().join(format!("cg-report-filters-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    std::fs::write(&file, events()).unwrap();
    let window = format!("{}..{}", T0, T0 + 120_000);
    let (code, err, page) = report(&file, &window, &["--shop", "shop-77777"]);
    assert_eq!(code, 2, "{err}");
    assert!(page.is_none());
    assert!(
        err.contains("--shop shop-77777 matched no event in --window")
            && err.contains("the shops there, busiest first: s, <b>shop-0</b>, <b>shop-1</b>, <b>shop-2</b>, flash (5 in all)"),
        "{err}"
    );
    let (code, err, page) = report(&file, &window, &["--event-type", "ExternalApiCal"]);
    assert_eq!(code, 2, "{err}");
    assert!(page.is_none());
    assert!(
        err.contains("--event-type ExternalApiCal matched no event in --window")
            && err.contains(
                "the event types there: CheckoutStep, ExternalApiCall, RateLimitDecision"
            ),
        "{err}"
    );
    let (code, err, page) = report(&file, &window, &["--api", "payment", "--shop", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(page.is_none());
    assert!(err.contains("--shop nope matched no event"), "{err}");
    assert!(!err.contains("--api"), "{err}");
    // Both wrong: both named.
    let (code, err, _) = report(&file, &window, &["--api", "paymnt", "--shop", "nope"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--api paymnt matched no event")
            && err.contains("--shop nope matched no event"),
        "{err}"
    );
    for ok in [
        &["--shop", "flash"][..],
        &["--api", "payment", "--shop", "<b>shop-1</b>"],
        &["--event-type", "CheckoutStep"],
    ] {
        let (code, err, page) = report(&file, &window, ok);
        assert_eq!(code, 0, "{ok:?}: {err}");
        assert!(page.is_some(), "{ok:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The two steps the report reads are `cart` and `paid` unless `--steps` names others;
/// the page says which; a bad value is refused by name.
#[test]
fn the_steps_read_as_started_and_paid_are_configurable() {
    let dir = std::env::temp_dir().join(format!("cg-report-steps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("events.jsonl");
    // Another shop's names: `basket` starts a checkout, `ordered` pays it.
    let renamed = events()
        .replace(r#""step":"cart""#, r#""step":"basket""#)
        .replace(r#""step":"paid""#, r#""step":"ordered""#);
    std::fs::write(&file, renamed).unwrap();
    let window = format!("{}..{}", T0, T0 + 120_000);
    let cell = |page: &str, key: &str| -> String {
        let at = format!("data-key=\"{key}\">");
        let rest = &page[page.find(&at).unwrap_or_else(|| panic!("{key}")) + at.len()..];
        rest[..rest.find('<').unwrap()].to_string()
    };
    let (code, err, page) = report(&file, &window, &[]);
    assert_eq!(code, 0, "{err}");
    let page = page.unwrap();
    assert_eq!(cell(&page, "checkouts started"), "-");
    assert_eq!(cell(&page, "paid"), "-");
    assert!(
        page.contains("checkouts started are step &quot;cart&quot;, paid step &quot;paid&quot;")
    );
    let (code, err, page) = report(&file, &window, &["--steps", "basket,ordered"]);
    assert_eq!(code, 0, "{err}");
    let page = page.unwrap();
    let started: u64 = cell(&page, "checkouts started").parse().unwrap();
    let paid: u64 = cell(&page, "paid").parse().unwrap();
    assert!(started > paid && paid > 0, "{started} {paid}");
    assert!(
        page.contains("<td class=\"l\">konbini</td>"),
        "the paid step's channels"
    );
    for bad in ["cart", "cart,", ",paid", "a,b,c"] {
        let (code, err, page) = report(&file, &window, &["--steps", bad]);
        assert_eq!(code, 2, "{bad}");
        assert!(page.is_none());
        assert!(
            err.contains("--steps") && err.contains("STARTED,PAID"),
            "{err}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
