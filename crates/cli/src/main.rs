//! `checkout-guard`: find the high-load windows and the daily peaks in the events that
//! checkout_guard records (JSONL, plain or gzip, or `-` for stdin).
//!
//!   checkout-guard scan FILE...    the two-stage scan (coarse candidates, fine windows)
//!   checkout-guard peaks FILE...   peak events per second per day, overall and per api
//!   checkout-guard limiter status|set|hot|unhot   on-call view and controls of a limiter
//!   checkout-guard replay FILE... --api A --limits ...   what-if: recorded attempts decided again
//!   checkout-guard ship --stream URL --to newrelic|otlp --endpoint URL   deliver the recorded events

mod commands;
mod input;
mod out;
mod time;

use std::process::ExitCode;

use checkout_guard_cli::scan::{Accumulator, Filter, Peak, ScanConfig, ScanResult, Window};
use clap::{Args, Parser, Subcommand};
use commands::{limiter, replay, report, ship};
use out::{out, outln};
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "checkout-guard",
    version,
    about = "Find high-load windows in checkout_guard's recorded events, and operate its limiters",
    after_help = "Exit status: 0 done; 2 an error, named on stderr; 141 stdout's reader went away before the output ended (`checkout-guard peaks FILE | head -1`): output stops quietly, the rest of the command (e.g. replay --output) is still done, as a shell shows a process ended by SIGPIPE."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The two-stage scan: coarse buckets with a low threshold pick candidates, fine
    /// buckets inside them keep the windows whose rate really reached the threshold.
    Scan(ScanArgs),
    /// Peak events per second per day (UTC), overall and per api: the morning check.
    Peaks(CommonArgs),
    /// An incident report for one time range: one self-contained HTML file.
    Report(ReportArgs),
    /// On-call: a running limiter's state, live limits and hot shops, in Valkey.
    Limiter(limiter::LimiterArgs),
    /// What-if: the recorded attempts at one API decided again by the limiter's model
    /// under candidate limits (and the provider's own limit), per shop, side by side.
    Replay(replay::ReplayArgs),
    /// Delivers the events the workers recorded in the Valkey stream to New Relic's Event
    /// API or to OpenTelemetry (OTLP/HTTP), each acknowledged only once accepted.
    Ship(ship::ShipArgs),
    /// Writes a synthetic day of events (2026-11-30) for tests and benchmarks.
    Generate {
        /// About how many events (about 215 bytes each: 100,000 make about 22 MB).
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// The random generator's seed: the same seed and count give the same file.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Output file; `-` for stdout.
        #[arg(short, long, default_value = "-")]
        output: String,
    },
}

#[derive(Args)]
struct CommonArgs {
    /// JSONL event files (gzip is detected); `-` reads stdin.
    #[arg(required = true)]
    files: Vec<String>,
    /// Only these apis (repeatable).
    #[arg(long = "api")]
    apis: Vec<String>,
    /// Only these shops (repeatable).
    #[arg(long = "shop")]
    shops: Vec<String>,
    /// Event types whose rate counts (repeatable; default ExternalApiCall).
    #[arg(long = "event-type")]
    event_types: Vec<String>,
    /// From this time (Unix ms or YYYY-MM-DDTHH:MM:SS[.mmm]Z), inclusive.
    #[arg(long, value_parser = time::parse_time)]
    from: Option<i64>,
    /// Up to this time (Unix ms or YYYY-MM-DDTHH:MM:SS[.mmm]Z), exclusive.
    #[arg(long, value_parser = time::parse_time)]
    to: Option<i64>,
    /// JSON output.
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// CSV output.
    #[arg(long)]
    csv: bool,
    /// Threads reading a large plain file (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
}

fn threads(c: &CommonArgs) -> usize {
    c.threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1)
}

#[derive(Args)]
struct ScanArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Coarse bucket size: a duration with its unit (5m, 300s, 1h, 250ms).
    #[arg(long, default_value = "5m", value_parser = time::parse_duration)]
    coarse: i64,
    /// Coarse threshold: average events per second over a coarse bucket. At or below
    /// fine-threshold x fine / coarse the scan finds every window a full fine scan would.
    #[arg(long, default_value_t = 5.0)]
    coarse_threshold: f64,
    /// Fine bucket size: a duration with its unit (1s, 250ms).
    #[arg(long, default_value = "1s", value_parser = time::parse_duration)]
    fine: i64,
    /// Fine threshold: events per second within a fine bucket.
    #[arg(long, default_value_t = 50.0)]
    fine_threshold: f64,
}

#[derive(Args)]
struct ReportArgs {
    #[command(flatten)]
    scan: ScanArgs,
    /// The incident's time range, START..END (Unix ms or YYYY-MM-DDTHH:MM:SS[.mmm]Z).
    #[arg(long)]
    window: String,
    /// Where to write the HTML.
    #[arg(short, long, default_value = "report.html")]
    output: String,
    /// The report's title.
    #[arg(long, default_value = "Incident report")]
    title: String,
    /// The two `CheckoutStep` step names the report reads, STARTED,PAID: "checkouts
    /// started", "paid", the calls per checkout and the payment channels (every step is
    /// listed in the funnel).
    #[arg(long, default_value = "cart,paid", value_parser = checkout_guard_cli::scan::Steps::parse)]
    steps: checkout_guard_cli::scan::Steps,
}

fn scan_config(a: &ScanArgs) -> Result<ScanConfig, String> {
    let cfg = ScanConfig {
        coarse_ms: a.coarse,
        coarse_threshold: a.coarse_threshold,
        fine_ms: a.fine,
        fine_threshold: a.fine_threshold,
    };
    cfg.validate()?;
    Ok(cfg)
}

fn filter(c: &CommonArgs) -> Filter {
    Filter {
        event_types: c.event_types.clone(),
        apis: c.apis.clone(),
        shops: c.shops.clone(),
        from_ms: c.from,
        to_ms: c.to,
    }
}

fn read(c: &CommonArgs, fine_ms: i64) -> Result<Accumulator, String> {
    let mut acc = Accumulator::new(filter(c), fine_ms);
    input::read_all(&c.files, &mut acc, threads(c)).map_err(|e| e.to_string())?;
    Ok(acc)
}

fn input_json(acc: &Accumulator) -> serde_json::Value {
    json!({
        "events": acc.events,
        "counted": acc.counted,
        "malformed": acc.malformed,
        "missing_timestamp": acc.missing_timestamp,
        "out_of_order": acc.out_of_order,
        "bad_lines": acc.bad_lines.iter().map(|b| json!({"file": b.source, "line": b.line, "problem": b.what})).collect::<Vec<_>>(),
    })
}

fn problems_text(acc: &Accumulator) -> String {
    let mut s = format!(
        "input: {} events read, {} counted; {} malformed, {} without timestamp, {} out of order (> 10 s behind)\n",
        acc.events, acc.counted, acc.malformed, acc.missing_timestamp, acc.out_of_order
    );
    for b in &acc.bad_lines {
        s.push_str(&format!("  {}:{}: {}\n", b.source, b.line, b.what));
    }
    let listed = acc.bad_lines.len() as u64;
    let bad = acc.malformed + acc.missing_timestamp + acc.out_of_order;
    if bad > listed {
        s.push_str(&format!("  ... and {} more\n", bad - listed));
    }
    s
}

fn status_mix(w: &Window) -> String {
    w.status
        .iter()
        .map(|(s, n)| format!("{s}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn denials(w: &Window) -> String {
    w.denials
        .iter()
        .map(|((r, s), n)| format!("{r}/{s}:{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn window_json(w: &Window) -> serde_json::Value {
    json!({
        "start": time::format_ms(w.start_ms), "end": time::format_ms(w.end_ms),
        "start_ms": w.start_ms, "end_ms": w.end_ms,
        "peak_rps": w.peak_rps, "peak_at": time::format_ms(w.peak_at_ms),
        "calls": w.calls,
        "status": w.status.iter().map(|(s, n)| (s.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "denials": w.denials.iter().map(|((r, s), n)| json!({"reason": r, "shop": s, "count": n})).collect::<Vec<_>>(),
    })
}

fn print_scan(args: &ScanArgs, cfg: &ScanConfig, acc: &Accumulator, r: &ScanResult) {
    let c = &args.common;
    if c.json {
        let out = json!({
            "windows": r.windows.iter().map(window_json).collect::<Vec<_>>(),
            "scan": {"coarse_ms": cfg.coarse_ms, "coarse_threshold": cfg.coarse_threshold,
                     "fine_ms": cfg.fine_ms, "fine_threshold": cfg.fine_threshold,
                     "coarse_buckets": r.coarse_buckets, "candidates": r.candidates,
                     "fine_buckets_examined": r.fine_examined,
                     "complete": cfg.coarse_threshold <= cfg.complete_coarse_threshold()},
            "input": input_json(acc),
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return;
    }
    if c.csv {
        outln!("start,end,start_ms,end_ms,peak_rps,peak_at,calls,status,denials");
        for w in &r.windows {
            outln!(
                "{},{},{},{},{},{},{},{},{}",
                time::format_ms(w.start_ms),
                time::format_ms(w.end_ms),
                w.start_ms,
                w.end_ms,
                w.peak_rps,
                time::format_ms(w.peak_at_ms),
                w.calls,
                status_mix(w),
                denials(w)
            );
        }
        eprint!("{}", problems_text(acc));
        return;
    }
    outln!(
        "{:<23}  {:<23}  {:>6}  {:>8}  {:<12}  {:>7}  {:<24}  denials (reason/shop:n)",
        "window start (UTC)",
        "end",
        "secs",
        "peak/s",
        "peak at",
        "calls",
        "status:n"
    );
    for w in &r.windows {
        outln!(
            "{:<23}  {:<23}  {:>6.1}  {:>8.1}  {:<12}  {:>7}  {:<24}  {}",
            time::format_ms(w.start_ms),
            time::format_ms(w.end_ms),
            (w.end_ms - w.start_ms) as f64 / 1000.0,
            w.peak_rps,
            time::format_clock(w.peak_at_ms),
            w.calls,
            status_mix(w),
            denials(w)
        );
    }
    outln!(
        "{} window(s). coarse pass: {} buckets of {} s, {} candidate(s) at >= {}/s; fine pass: {} buckets of {} ms examined at >= {}/s{}",
        r.windows.len(), r.coarse_buckets, cfg.coarse_ms / 1000, r.candidates, cfg.coarse_threshold,
        r.fine_examined, cfg.fine_ms, cfg.fine_threshold,
        if cfg.coarse_threshold <= cfg.complete_coarse_threshold() { " (complete: same as a full fine scan)" } else { "" }
    );
    out!("{}", problems_text(acc));
}

fn print_peaks(c: &CommonArgs, acc: &Accumulator, peaks: &[Peak]) {
    let api = |p: &Peak| {
        if p.api.is_empty() {
            "(all)".to_string()
        } else {
            p.api.clone()
        }
    };
    if c.json {
        let out = json!({
            "peaks": peaks.iter().map(|p| json!({"day": time::format_day(p.day), "api": api(p), "peak_rps": p.peak_rps, "at": time::format_ms(p.at_ms), "events": p.total})).collect::<Vec<_>>(),
            "input": input_json(acc),
        });
        outln!("{}", serde_json::to_string_pretty(&out).expect("JSON"));
        return;
    }
    if c.csv {
        outln!("day,api,peak_rps,at,events");
        for p in peaks {
            outln!(
                "{},{},{},{},{}",
                time::format_day(p.day),
                api(p),
                p.peak_rps,
                time::format_ms(p.at_ms),
                p.total
            );
        }
        eprint!("{}", problems_text(acc));
        return;
    }
    outln!(
        "{:<10}  {:<16}  {:>8}  {:<12}  {:>10}",
        "day (UTC)",
        "api",
        "peak/s",
        "at",
        "events"
    );
    for p in peaks {
        outln!(
            "{:<10}  {:<16}  {:>8}  {:<12}  {:>10}",
            time::format_day(p.day),
            api(p),
            p.peak_rps,
            time::format_clock(p.at_ms),
            p.total
        );
    }
    out!("{}", problems_text(acc));
}

/// A report whose window, event types, apis or shops matched no event is refused (exit 2,
/// nothing written), naming the filter that matched nothing and what the files hold: their
/// time range, the event types, the apis, the busiest shops of the window.
fn matched_something(acc: &Accumulator, c: &CommonArgs, window: &str) -> Result<(), String> {
    let range = time::files_range(acc.first_ms, acc.last_ms);
    if acc.in_time == 0 {
        return Err(format!(
            "--window {window}{} matched no event: {range}; nothing written",
            if c.from.is_some() || c.to.is_some() {
                " with --from/--to"
            } else {
                ""
            }
        ));
    }
    let m = &acc.matches;
    let mut none = Vec::new();
    if !c.event_types.is_empty() && m.types == 0 {
        none.push(format!(
            "--event-type {} matched no event in --window {window}: the event types there: {}",
            c.event_types.join(", --event-type "),
            m.types_text()
        ));
    } else if !c.apis.is_empty() && m.apis == 0 {
        none.push(format!(
            "--api {} matched no event in --window {window}: the apis in the files: {}",
            c.apis.join(", --api "),
            acc.apis_text()
        ));
    }
    if !c.shops.is_empty() && m.shops == 0 {
        none.push(format!(
            "--shop {} matched no event in --window {window}: the shops there, busiest first: {}",
            c.shops.join(", --shop "),
            m.shops_text(5)
        ));
    }
    if none.is_empty() {
        Ok(())
    } else {
        Err(format!("{}; nothing written", none.join("; ")))
    }
}

/// Runs the command: `Ok(status)`, 0 done, 1 `ship` could not deliver everything.
fn run() -> Result<u8, String> {
    match Cli::parse().command {
        Command::Scan(args) => {
            let cfg = scan_config(&args)?;
            let acc = read(&args.common, cfg.fine_ms)?;
            let r = acc.scan(&cfg);
            print_scan(&args, &cfg, &acc, &r);
        }
        Command::Peaks(c) => {
            let acc = read(&c, 1000)?;
            print_peaks(&c, &acc, &acc.peaks());
        }
        Command::Report(args) => {
            let cfg = scan_config(&args.scan)?;
            let (a, b) = args
                .window
                .split_once("..")
                .ok_or_else(|| format!("--window must be START..END, got {:?}", args.window))?;
            let (t0, t1) = (time::parse_time(a)?, time::parse_time(b)?);
            report::check_window(t0, t1, &args.window)?;
            let mut f = filter(&args.scan.common);
            f.from_ms = Some(f.from_ms.map_or(t0, |x| x.max(t0)));
            f.to_ms = Some(f.to_ms.map_or(t1, |x| x.min(t1)));
            let mut acc = Accumulator::new(f, cfg.fine_ms);
            acc.report = Some(checkout_guard_cli::scan::ReportData {
                steps: args.steps.clone(),
                ..Default::default()
            });
            input::read_all(
                &args.scan.common.files,
                &mut acc,
                threads(&args.scan.common),
            )
            .map_err(|e| e.to_string())?;
            matched_something(&acc, &args.scan.common, &args.window)?;
            let r = acc.scan(&cfg);
            let html = report::html(&acc, &r, &cfg, t0, t1, &args.title);
            std::fs::write(&args.output, html).map_err(|e| format!("{}: {e}", args.output))?;
            eprintln!(
                "checkout-guard: wrote {} ({} window(s))",
                args.output,
                r.windows.len()
            );
        }
        Command::Limiter(args) => limiter::run(args)?,
        Command::Replay(args) => replay::run(args)?,
        Command::Ship(args) => {
            if !ship::run(args)? {
                return Ok(1);
            }
        }
        Command::Generate {
            events,
            seed,
            output,
        } => {
            if output == "-" {
                // A reader that went away ends it quietly (see out.rs).
                let stdout = std::io::stdout().lock();
                match checkout_guard_cli::scan::synthetic::day(events, seed, stdout) {
                    Ok(written) => eprintln!("checkout-guard: wrote {written} events"),
                    Err(e) => out::check(e).map_err(|e| format!("writing to stdout: {e}"))?,
                }
            } else {
                let f = std::fs::File::create(&output).map_err(|e| format!("{output}: {e}"))?;
                let written = checkout_guard_cli::scan::synthetic::day(events, seed, f)
                    .map_err(|e| format!("{output}: {e}"))?;
                eprintln!("checkout-guard: wrote {written} events");
            }
        }
    }
    Ok(0)
}

fn main() -> ExitCode {
    match run() {
        // stdout's reader went away: quietly, as a process ended by SIGPIPE (out.rs).
        Ok(_) if out::closed() => ExitCode::from(out::CLOSED_STDOUT),
        Ok(status) => ExitCode::from(status),
        Err(e) => {
            eprintln!("checkout-guard: {e}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    /// Every argument of every command and subcommand, with its command path.
    fn walk(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Arg)>) {
        let path = format!("{path} {}", cmd.get_name()).trim().to_string();
        for a in cmd.get_arguments() {
            out.push((path.clone(), a.clone()));
        }
        for sub in cmd.get_subcommands() {
            walk(sub, &path, out);
        }
    }

    fn args() -> Vec<(String, clap::Arg)> {
        let mut cmd = Cli::command();
        // The help and version flags clap adds, with their help text.
        cmd.build();
        let mut out = Vec::new();
        walk(&cmd, "", &mut out);
        out
    }

    fn name(a: &clap::Arg) -> String {
        a.get_long()
            .map_or_else(|| format!("<{}>", a.get_id()), |l| format!("--{l}"))
    }

    /// `--help` explains every flag and argument: none is shown bare (issue 38: `--json`,
    /// `<SHOP>`, `--seed` had no text).
    #[test]
    fn every_argument_of_every_command_has_help_text() {
        let all = args();
        assert!(all.len() > 50, "the walk found {} arguments", all.len());
        let bare: Vec<String> = all
            .iter()
            .filter(|(_, a)| a.get_help().is_none_or(|h| h.to_string().trim().is_empty()))
            .map(|(path, a)| format!("{path} {}", name(a)))
            .collect();
        assert!(bare.is_empty(), "arguments without help text: {bare:?}");
    }

    /// A value with a unit says it: durations in seconds or milliseconds (or the forms
    /// `time::parse_duration` takes), sizes in bytes.
    #[test]
    fn every_duration_names_its_unit() {
        let units = [
            " seconds",
            " s)",
            " s ",
            "milliseconds",
            " ms",
            "Unix ms",
            "5m",
            "1s",
        ];
        let mut missing = Vec::new();
        for (path, a) in args() {
            let id = a.get_id().as_str().to_string();
            let timed = [
                "ttl", "seconds", "timeout", "wait", "coarse", "fine", "from", "to",
            ]
            .iter()
            .any(|k| id.split('_').any(|w| w == *k))
                && !id.contains("threshold")
                // `ship --to newrelic|otlp` is a destination, not a time.
                && a.get_possible_values().is_empty();
            if !timed {
                continue;
            }
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default()
                + &a.get_long_help().map(|h| h.to_string()).unwrap_or_default();
            if !units.iter().any(|u| help.contains(u)) {
                missing.push(format!("{path} {}: {help:?}", name(&a)));
            }
        }
        assert!(missing.is_empty(), "durations without a unit: {missing:#?}");
    }
}
