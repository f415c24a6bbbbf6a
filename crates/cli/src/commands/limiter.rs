//! `checkout-guard limiter`: what on-call needs of a running limiter, against the same
//! Valkey URL forms as the extension (redis://, valkey://, unix://, valkey+cluster://,
//! valkey+sentinel://, their TLS twins rediss://, valkeys://, rediss+cluster://,
//! valkeys+cluster://, valkeys+sentinel:// with the `--tls-*` options, user:password@;
//! a Sentinel URL's sentinels' own credentials with `--sentinel-user`/`--sentinel-password`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use checkout_guard_cli::admin::{Admin, Status};
use checkout_guard_cli::in_flight::{InFlightView, Level, Source};
use checkout_guard_cli::shop_id;
use checkout_guard_config::{live, Mode};
use checkout_guard_model::Lane;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::out::{out, outln};
use crate::time;

#[derive(Args)]
pub struct LimiterArgs {
    /// Valkey URL, as in checkout_guard.url.
    #[arg(
        long,
        env = "CHECKOUT_GUARD_URL",
        default_value = checkout_guard_config::settings::DEFAULT_URL,
        global = true
    )]
    url: String,
    /// The limiter's name (its `name` option). A name Valkey holds nothing of is refused
    /// (status, set, hot, unhot), naming the limiters there.
    #[arg(long, default_value = "default", global = true)]
    name: String,
    /// Per-call timeout, in milliseconds (1 to 60000).
    #[arg(long, default_value_t = 2000, global = true)]
    timeout_ms: u64,
    /// TLS URL: CA certificates (PEM) instead of the system's roots (as checkout_guard.tls.cafile).
    #[arg(long, global = true)]
    tls_cafile: Option<String>,
    /// TLS URL: client certificate (PEM) for mutual TLS, with --tls-local-pk.
    #[arg(long, global = true)]
    tls_local_cert: Option<String>,
    /// TLS URL: the client certificate's private key (PEM).
    #[arg(long, global = true)]
    tls_local_pk: Option<String>,
    /// TLS URL: the name the server's certificate must carry, instead of the URL's host.
    #[arg(long, global = true)]
    tls_peer_name: Option<String>,
    /// Sentinel URL: the sentinels' own ACL user (the URL's credentials are the data nodes').
    #[arg(long, global = true)]
    sentinel_user: Option<String>,
    /// Sentinel URL: the sentinels' own password (never shown; prefer the environment
    /// variable, which `ps` does not show).
    #[arg(
        long,
        global = true,
        env = "CHECKOUT_GUARD_SENTINEL_PASSWORD",
        hide_env_values = true
    )]
    sentinel_password: Option<String>,
    #[command(subcommand)]
    command: LimiterCommand,
}

#[derive(Subcommand)]
enum LimiterCommand {
    /// Bucket levels, limits in force, hot shops and until when, recent decisions by
    /// reason, recent changes.
    Status {
        /// The telemetry stream to count recent decisions in (checkout_guard.events.stream_key;
        /// written only by the `stream` sink of checkout_guard.events.sinks).
        #[arg(long, default_value = checkout_guard_config::settings::DEFAULT_STREAM_KEY)]
        events_key: String,
        /// How far back to count decisions, in seconds.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// JSON output (one object) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Changes live limits, picked up by every worker at its next decision:
    /// `global=40/40` (capacity/refill per second) or `hot_lane=default` (back to the
    /// constructor's value); `mode=shadow` (every call let through, denials only
    /// reported), `mode=enforce`, `mode=default` (back to the workers' `mode` option);
    /// `in_flight.global=16`, `in_flight.hot_lane=12`, `in_flight.hot_shop=6` (leases
    /// held at once, for a limiter with the `in_flight` option) or `in_flight.LEVEL=default`;
    /// `endpoint.NAME=25/25` or `endpoint.NAME=default` (an endpoint the workers'
    /// `endpoints` option declares), `priorities.CLASS=0.3` or `priorities.CLASS=default`
    /// (a class of their `priorities` option).
    /// Validated like constructor options; nothing written if not.
    Set {
        /// BUCKET=CAPACITY/RATE, BUCKET=default (BUCKET is global, hot_lane or hot_shop),
        /// mode=enforce|shadow|default, or in_flight.LEVEL=N, in_flight.LEVEL=default
        /// (LEVEL is global, hot_lane or hot_shop), endpoint.NAME=CAPACITY/RATE|default,
        /// priorities.CLASS=SHARE|default.
        #[arg(required = true)]
        changes: Vec<String>,
        /// Who makes the change (recorded with it).
        #[arg(long, env = "USER", default_value = "unknown")]
        by: String,
    },
    /// Marks a shop hot for every worker (as markHot()). SHOP as `status` shows it: `\\` is
    /// a backslash, `\xHH` a byte (a shop ID that is not UTF-8).
    Hot {
        /// The shop ID, as `status` shows it (`\\` a backslash, `\xHH` a byte).
        shop: OsString,
        /// How long the shop stays hot, in seconds.
        #[arg(long, default_value_t = 3600)]
        ttl: i64,
        /// Mark it even though Valkey holds nothing of this limiter yet (before its
        /// workers' first decision); without it an unknown --name is refused, naming the
        /// limiters there (a typo would mark a shop of no limiter).
        #[arg(long)]
        new_limiter: bool,
    },
    /// Ends a shop's hot mark (manual or automatic); hot_shops listed in code stay hot.
    /// SHOP as `status` shows it (`\\`, `\xHH`).
    Unhot {
        /// The shop ID, as `status` shows it (`\\` a backslash, `\xHH` a byte).
        shop: OsString,
        /// Take it even though Valkey holds nothing of this limiter (nothing to unmark:
        /// exit 0); without it an unknown --name is refused, naming the limiters there (a
        /// typo would leave the shop hot under the real name).
        #[arg(long)]
        new_limiter: bool,
    },
    /// Prints the decision script and, per shop, the KEYS and ARGV of one decision as the
    /// extension encodes it (JSON; nothing is sent): for benchmarks and hand checks with
    /// `EVAL`/`EVALSHA`.
    Call {
        /// The global bucket, CAPACITY/RATE.
        #[arg(long)]
        global: String,
        /// Tokens the decision asks for (acquire()'s $tokens).
        #[arg(long, default_value_t = 1)]
        tokens: i64,
        /// Shop IDs as `status` shows them (`\\`, `\xHH`).
        #[arg(required = true)]
        shops: Vec<OsString>,
    },
}

pub fn run(args: LimiterArgs) -> Result<(), String> {
    if let LimiterCommand::Call {
        global,
        tokens,
        shops,
    } = &args.command
    {
        outln!("{}", encoded_calls(&args.name, global, *tokens, shops)?);
        return Ok(());
    }
    let tls = checkout_guard_config::TlsDefaults::from_ini(
        args.tls_cafile.as_deref(),
        args.tls_local_cert.as_deref(),
        args.tls_local_pk.as_deref(),
        args.tls_peer_name.as_deref(),
    );
    let admin = Admin::with_options(
        &args.url,
        &args.name,
        Duration::from_millis(args.timeout_ms.clamp(1, 60_000)),
        &tls,
        args.sentinel_user.as_deref(),
        args.sentinel_password.as_deref(),
    )?;
    match args.command {
        LimiterCommand::Status {
            events_key,
            seconds,
            json,
        } => {
            let st = admin.status(&events_key, seconds)?;
            // Nothing of this name in Valkey: a typo of --name or another --url, said
            // (exit 2) instead of an empty status.
            if st.settings.is_none() && !admin.known()? {
                return Err(admin.unknown());
            }
            if json {
                outln!("{}", status_json(&args.name, &st));
            } else {
                out!("{}", status_text(&args.name, &st));
            }
        }
        LimiterCommand::Set { changes, by } => {
            let (parsed, mode, in_flight, routes) = parse_changes(&changes)?;
            let done = admin.set_all(&parsed, &in_flight, mode, &routes, &by)?;
            for w in &done.warnings {
                eprintln!("{w}");
            }
            outln!(
                "limiter {}: live limits version {} by {by}",
                args.name,
                done.version
            );
            outln!("  old: {}", done.old);
            outln!("  new: {}", done.new);
        }
        LimiterCommand::Hot {
            shop,
            ttl,
            new_limiter,
        } => {
            let raw = shop_id::unescape(shop.as_bytes())?;
            // Checked before Valkey is asked, named as the command line names it.
            checkout_guard_config::validate_ttl(ttl).map_err(|e| format!("--ttl {}", e.message))?;
            if !new_limiter && !admin.known()? {
                return Err(format!(
                    "{}; nothing marked (`hot --new-limiter` marks it all the same, for a limiter whose workers have not decided yet)",
                    admin.unknown()
                ));
            }
            admin.hot(&raw, ttl)?;
            outln!(
                "limiter {}: shop \"{}\" hot for {ttl} s",
                args.name,
                shop_id::escape(&raw)
            );
        }
        LimiterCommand::Call { .. } => unreachable!("handled above"),
        LimiterCommand::Unhot { shop, new_limiter } => {
            let raw = shop_id::unescape(shop.as_bytes())?;
            let was = admin.unhot(&raw)?;
            // A mark removed: the limiter is known. Nothing removed under a name Valkey
            // holds nothing of is a typo (the shop stays hot under the real name): exit 2,
            // as status/set/hot, unless said on purpose (unmarking what is not marked is
            // idempotent: scripts may do it for a limiter that is gone).
            if !was && !new_limiter && !admin.known()? {
                return Err(format!(
                    "{}; nothing unmarked (`unhot --new-limiter` takes it all the same, for a limiter Valkey holds nothing of)",
                    admin.unknown()
                ));
            }
            outln!(
                "limiter {}: shop \"{}\" {}",
                args.name,
                shop_id::escape(&raw),
                if was {
                    "no longer marked hot"
                } else {
                    "was not marked hot"
                }
            );
        }
    }
    Ok(())
}

/// A live change's arguments: the buckets' and the mode's. Each bucket and the mode at
/// most once: a repeated one is ambiguous (which did the operator mean?), refused naming
/// it and both arguments, before anything is read or written.
type Changes = (
    Vec<(Lane, Option<(i64, f64)>)>,
    Option<Option<Mode>>,
    Vec<(Lane, Option<i64>)>,
    checkout_guard_cli::admin::RouteChanges,
);

fn parse_changes(args: &[String]) -> Result<Changes, String> {
    let mut mode: Option<(Option<Mode>, &str)> = None;
    let mut parsed = Vec::new();
    let mut in_flight = Vec::new();
    // The argument that named each lane, and each in-flight level.
    let mut given: [Option<&str>; 3] = [None; 3];
    let mut given_in_flight: [Option<&str>; 3] = [None; 3];
    let twice = |what: &str, first: &str, second: &str| {
        format!(
            "{what} is given twice ({first:?}, {second:?}): give each bucket and the mode at most once; nothing written"
        )
    };
    let mut routes = checkout_guard_cli::admin::RouteChanges::default();
    let mut given_routes: Vec<(String, &str)> = Vec::new();
    for c in args {
        if c.starts_with(live::ENDPOINT_PREFIX) || c.starts_with(live::PRIORITIES_PREFIX) {
            let (field, value) = c.split_once('=').ok_or_else(|| {
                format!("{c:?}: expected endpoint.NAME=CAPACITY/RATE, priorities.CLASS=SHARE or either =default")
            })?;
            if let Some((_, first)) = given_routes.iter().find(|(f, _)| f == field) {
                return Err(twice(field, first, c));
            }
            given_routes.push((field.to_string(), c));
            if let Some(name) = field.strip_prefix(live::ENDPOINT_PREFIX) {
                let v = match value {
                    "default" => None,
                    v => Some(live::parse_endpoint_field(field, v)?.1),
                };
                if v.is_none() && !checkout_guard_model::endpoints::valid_name(name.as_bytes()) {
                    live::parse_endpoint_field(field, "0/0")?;
                }
                routes.endpoints.push((name.to_string(), v));
            } else {
                let class = field.strip_prefix(live::PRIORITIES_PREFIX).unwrap_or(field);
                let v = match value {
                    "default" => None,
                    v => Some(live::parse_priority_field(field, v)?.1),
                };
                if v.is_none() && !checkout_guard_model::endpoints::valid_name(class.as_bytes()) {
                    live::parse_priority_field(field, "0")?;
                }
                routes.priorities.push((class.to_string(), v));
            }
            continue;
        }
        if c.starts_with(live::IN_FLIGHT_PREFIX) {
            let (lane, value) = parse_in_flight_change(c)?;
            if let Some(first) = given_in_flight[lane as usize].replace(c) {
                return Err(twice(
                    &format!("{}{}", live::IN_FLIGHT_PREFIX, lane.as_str()),
                    first,
                    c,
                ));
            }
            in_flight.push((lane, value));
            continue;
        }
        match c.strip_prefix("mode=") {
            Some(m) => {
                let m = parse_mode(m)?;
                if let Some((_, first)) = mode {
                    return Err(twice("mode", first, c));
                }
                mode = Some((m, c));
            }
            None => {
                let (lane, value) = parse_change(c)?;
                if let Some(first) = given[lane as usize].replace(c) {
                    return Err(twice(lane.as_str(), first, c));
                }
                parsed.push((lane, value));
            }
        }
    }
    Ok((parsed, mode.map(|(m, _)| m), in_flight, routes))
}

/// `in_flight.global=40`, `in_flight.hot_shop=default`.
fn parse_in_flight_change(arg: &str) -> Result<(Lane, Option<i64>), String> {
    let bad = || {
        format!("{arg:?}: expected in_flight.LEVEL=N or in_flight.LEVEL=default, LEVEL one of global, hot_lane, hot_shop")
    };
    let (field, value) = arg.split_once('=').ok_or_else(bad)?;
    let lane = live::in_flight_field(field).ok_or_else(bad)?;
    if value == "default" {
        return Ok((lane, None));
    }
    live::parse_in_flight_limit(field, value).map(|n| (lane, Some(n)))
}

/// The value of `mode=`: enforce, shadow, or default (`None`: the workers' option).
fn parse_mode(value: &str) -> Result<Option<Mode>, String> {
    match value {
        "default" => Ok(None),
        v => Mode::parse("mode", v.as_bytes()).map(Some).map_err(|e| {
            format!(
                "{} {} (or \"default\": back to the workers' mode option)",
                e.option, e.message
            )
        }),
    }
}

/// `global=40/40`, `hot_lane=default`.
fn parse_change(arg: &str) -> Result<(Lane, Option<(i64, f64)>), String> {
    let bad = || {
        format!("{arg:?}: expected BUCKET=CAPACITY/RATE or BUCKET=default, BUCKET one of global, hot_lane, hot_shop, or mode=enforce|shadow|default")
    };
    let (bucket, value) = arg.split_once('=').ok_or_else(bad)?;
    let lane = Lane::from_name(bucket).ok_or_else(bad)?;
    if value == "default" {
        return Ok((lane, None));
    }
    live::parse_bucket(lane, value).map(|b| (lane, Some(b)))
}

/// A shop ID as text and JSON show it: escaped (see [`shop_id`]), the form `hot`/`unhot`
/// take back.
fn shop_text(b: &[u8]) -> String {
    shop_id::escape(b)
}

fn status_text(name: &str, st: &Status) -> String {
    let mut out = format!("limiter {name} at {}\n", time::format_ms(st.now_ms));
    match (&st.settings, &st.buckets) {
        (Some(s), Some(b)) => {
            out.push_str(&format!("  settings (workers): {s}\n"));
            if !st.problems.is_empty() {
                out.push_str(&format!(
                    "  limits in force: {} (the settings: stored live limits version {} not used)\n",
                    live::describe(b),
                    st.live.version
                ));
            } else if st.live.is_empty() {
                out.push_str("  limits in force: the settings (no live limits)\n");
            } else {
                out.push_str(&format!(
                    "  limits in force: {}{} (live version {}, by {}, {})\n",
                    live::describe(b),
                    st.routes,
                    st.live.version,
                    st.live.by,
                    time::format_ms(st.live.at_ms)
                ));
            }
        }
        _ => out
            .push_str("  settings: none published yet (no worker has decided with this limiter)\n"),
    }
    out.push_str(&match (st.live.mode, st.mode) {
        (Some(m), _) => format!(
            "  mode: {} (live, version {} by {}: every worker at its next decision; `limiter set mode=default` goes back to the workers' option)\n",
            m.as_str(),
            st.live.version,
            st.live.by
        ),
        (None, Some(m)) => format!("  mode: {} (the workers' mode option)\n", m.as_str()),
        (None, None) => "  mode: the workers' mode option (none published yet)\n".to_string(),
    });
    for p in &st.problems {
        out.push_str(&format!(
            "  PROBLEM: {p}; fix it with `limiter set BUCKET=...` or `BUCKET=default`\n"
        ));
    }
    let recheck = checkout_guard_config::options::MODULE_RECHECK_SECONDS;
    out.push_str(&if let Some(why) = &st.module_unknown {
        format!("  engine: unknown whether the native module is loaded: this Valkey refused COMMAND INFO ({why}); workers with engine auto decide with the Lua script where COMMAND is refused (engine lua is the setting for such a server)")
    } else if st.module_loaded {
        format!("  engine: the native module is loaded (CG.DECIDE): workers with engine module decide with it, with engine auto within {recheck} s of its loading (they ask again every {recheck} s while it is missing)")
    } else {
        "  engine: no native module at this Valkey: workers decide with the Lua script (engine module cannot decide)".to_string()
    });
    match st.module_decisions {
        Some(n) => out.push_str(&format!(
            "; {n} decisions by the module since this Valkey started (every limiter)\n"
        )),
        None => out.push('\n'),
    }
    if let Some(a) = &st.adaptive {
        out.push_str(&adaptive_line(a, st.now_ms));
    }
    for (lane, level, cap) in &st.levels {
        out.push_str(&format!(
            "  bucket {}: {level} of {cap} tokens\n",
            lane.as_str()
        ));
    }
    for (name, level, cap) in &st.endpoints {
        out.push_str(&format!("  endpoint {name}: {level} of {cap} tokens\n"));
    }
    if !st.classes.is_empty() {
        let list: Vec<String> = st
            .classes
            .iter()
            .map(|(c, share)| {
                let default = if st.default_class.as_deref() == Some(c) {
                    " (default)"
                } else {
                    ""
                };
                format!("{c} leaves {}%{default}", share * 100.0)
            })
            .collect();
        out.push_str(&format!(
            "  priority classes (of every bucket): {}\n",
            list.join(", ")
        ));
    }
    out.push_str(&in_flight_text(&st.in_flight));
    if st.hot.is_empty() {
        out.push_str("  hot shops: none marked\n");
    } else {
        out.push_str(&format!("  hot shops: {} marked\n", st.hot.len()));
    }
    for (shop, kind, ttl) in &st.hot {
        let until = if *ttl >= 0 {
            format!(
                "until {} ({} s left)",
                time::format_ms(st.now_ms + ttl),
                ttl / 1000
            )
        } else {
            "no expiry".to_string()
        };
        out.push_str(&format!(
            "  hot shop \"{}\": {kind}, {until}\n",
            shop_text(shop)
        ));
    }
    if let Some(w) = &st.window {
        out.push_str(&format!("  auto_hot window: {:.0} tokens taken", w.total));
        for (shop, n) in w.shops.iter().take(5) {
            let share = if w.total > 0.0 {
                100.0 * n / w.total
            } else {
                0.0
            };
            out.push_str(&format!(", \"{}\" {share:.0}%", shop_text(shop)));
        }
        out.push('\n');
    }
    out.push_str(&format!(
        "  denied/unavailable in the last {} s:",
        st.decisions_seconds
    ));
    match &st.decisions {
        Ok(d) if d.is_empty() => out.push_str(" none recorded"),
        Ok(d) => {
            for (reason, n) in d {
                out.push_str(&format!(" {reason} {n}"));
            }
        }
        Err(_) if !st.stream.exists => out.push_str(&format!(
            " unknown: no events stream at {:?} (the telemetry `stream` sink is off: checkout_guard.events.sinks without `stream`, \
             or it writes elsewhere: checkout_guard.events.stream_key, checkout_guard.events.stream_url). \
             Counts come from that stream (--events-key KEY), or from the JSONL file of the `jsonl` sink \
             (checkout_guard.events.jsonl_path): `checkout-guard report --window START..END FILE` counts them by shop and reason, \
             `checkout-guard scan FILE` in each high-load window",
            st.stream.key
        )),
        Err(e) => out.push_str(&format!(" events stream not readable ({e})")),
    }
    if let (Ok(d), Some(newest)) = (&st.decisions, st.stream.newest_ms) {
        let from = st.now_ms - 1000 * st.decisions_seconds as i64;
        if d.is_empty() && newest < from {
            out.push_str(&format!(
                " (the stream {:?} holds {} events, the newest at {}: is the `stream` sink still on?)",
                st.stream.key,
                st.stream.length,
                time::format_ms(newest)
            ));
        }
    }
    out.push('\n');
    if !st.shadow_decisions.is_empty() {
        out.push_str(&format!(
            "  would have denied (shadow, let through) in the last {} s:",
            st.decisions_seconds
        ));
        for (reason, n) in &st.shadow_decisions {
            out.push_str(&format!(" {reason} {n}"));
        }
        out.push('\n');
    }
    if !st.top_hot_denied.is_empty() {
        out.push_str(&format!(
            "  hot shops most denied in the last {} s:",
            st.decisions_seconds
        ));
        for (shop, n) in &st.top_hot_denied {
            out.push_str(&format!(" {shop:?} {n}"));
        }
        out.push('\n');
    }
    for c in &st.changes {
        out.push_str(&format!(
            "  change v{} by {} at {}: {} -> {}\n",
            c.version,
            c.by,
            time::format_ms(c.at_ms),
            c.old,
            c.new
        ));
    }
    out
}

/// Hot shops' lease sets listed in the text (`--json` lists every one found).
const TEXT_SHOPS: usize = 20;

fn secs(us: i64) -> String {
    format!("{:.1} s", us as f64 / 1e6)
}

/// `held N of LIMIT (source); oldest lease: expires in X s (held Y s)`.
fn level_text(l: &Level, limit: Option<(u64, Source)>, v: &InFlightView) -> String {
    if l.foreign {
        return "not a lease set (another type of value at its key)".into();
    }
    let mut t = format!(
        "{} held of {}",
        l.held,
        limit.map_or("-".to_string(), |(n, s)| format!("{n} ({})", s.as_str()))
    );
    if let Some(left) = l.oldest_remaining_us(v.now_us) {
        t.push_str(&format!("; oldest lease expires in {}", secs(left)));
        if let Some(age) = l.oldest_age_us(v.now_us, v.lease_seconds) {
            t.push_str(&format!(" (held {})", secs(age)));
        }
    }
    if l.stale > 0 {
        t.push_str(&format!("; {} expired, not yet pruned", l.stale));
    }
    t
}

/// The in-flight leases: one line per level, the hot shops holding leases, the stats.
fn in_flight_text(v: &InFlightView) -> String {
    if v.is_empty() {
        return "  in-flight leases: none (no in_flight limit published or set live, no lease held or recorded)\n".into();
    }
    let mut out = format!(
        "  in-flight leases (lease_seconds {}):\n",
        v.lease_seconds
            .map_or("unknown: the oldest lease's age is not shown".into(), |s| {
                format!("{s}")
            })
    );
    for (name, l, limit) in [
        ("global", &v.global, v.limits[0]),
        ("hot_lane", &v.hot_lane, v.limits[1]),
    ] {
        out.push_str(&format!("    {name}: {}\n", level_text(l, limit, v)));
    }
    out.push_str(&format!(
        "    hot_shop: {}{} held by {} shop(s){}, limit {} each\n",
        if v.shops_truncated { "at least " } else { "" },
        v.hot_shop_held(),
        v.shops.len(),
        if v.shops_truncated {
            " (more not listed)"
        } else {
            ""
        },
        v.limits[2].map_or("-".to_string(), |(n, s)| format!("{n} ({})", s.as_str()))
    ));
    for (shop, l) in v.shops.iter().take(TEXT_SHOPS) {
        out.push_str(&format!(
            "      shop \"{}\": {}\n",
            shop_text(shop),
            level_text(l, v.limits[2], v)
        ));
    }
    if v.shops.len() > TEXT_SHOPS {
        out.push_str(&format!(
            "      ... {} more (--json lists them)\n",
            v.shops.len() - TEXT_SHOPS
        ));
    }
    let n = |x: Option<i64>| x.map_or("?".to_string(), |n| n.to_string());
    out.push_str(&format!(
        "    released {}{}, leaked {} (released at request end), expired {}\n",
        n(v.stats.released),
        v.stats.mean_hold_us().map_or(String::new(), |h| format!(
            " (mean hold {:.3} s)",
            h as f64 / 1e6
        )),
        n(v.stats.leaked),
        n(v.stats.expired)
    ));
    for p in &v.problems {
        out.push_str(&format!("    PROBLEM: {p}\n"));
    }
    out
}

fn level_json(l: &Level, limit: Option<(u64, Source)>, v: &InFlightView) -> serde_json::Value {
    json!({
        "held": l.held,
        "limit": limit.map(|(n, _)| n),
        "limit_source": limit.map(|(_, s)| s.as_str()),
        "oldest_remaining_ms": l.oldest_remaining_us(v.now_us).map(|u| u as f64 / 1000.0),
        "oldest_age_ms": l.oldest_age_us(v.now_us, v.lease_seconds).map(|u| u as f64 / 1000.0),
        "expired_not_pruned": l.stale,
        "not_a_lease_set": l.foreign,
    })
}

fn in_flight_json(v: &InFlightView) -> serde_json::Value {
    json!({
        "lease_seconds": v.lease_seconds,
        "levels": {
            "global": level_json(&v.global, v.limits[0], v),
            "hot_lane": level_json(&v.hot_lane, v.limits[1], v),
            "hot_shop": {
                // The listed shops' sum: a lower bound when `shops_truncated`.
                "held": v.hot_shop_held(),
                "held_is_lower_bound": v.shops_truncated,
                "limit": v.limits[2].map(|(n, _)| n),
                "limit_source": v.limits[2].map(|(_, s)| s.as_str()),
                "shops": v.shops.iter().map(|(s, l)| {
                    let mut j = level_json(l, v.limits[2], v);
                    j["shop"] = json!(shop_text(s));
                    j["shop_hex"] = json!(shop_id::hex(s));
                    j
                }).collect::<Vec<_>>(),
                "shops_truncated": v.shops_truncated,
            },
        },
        "released": v.stats.released,
        "hold_us": v.stats.hold_us,
        "mean_hold_ms": v.stats.mean_hold_us().map(|u| u as f64 / 1000.0),
        "leaked": v.stats.leaked,
        "expired": v.stats.expired,
        "problems": v.problems,
    })
}

/// `  adaptive: share 0.70 of the limits (...); paused ...; last throttling answer ...`
fn adaptive_line(a: &checkout_guard_cli::admin::AdaptView, now_ms: i64) -> String {
    let mut out = String::from("  adaptive: ");
    out.push_str(&match a.share {
        Some(s) => format!("share {s:.3} of the limits in force"),
        None => "share unknown (the workers publish no adaptive option)".to_string(),
    });
    match &a.option {
        Some(o) => out.push_str(&format!(
            " (option: statuses {:?}, decrease {}, floor {}, {} s from the floor back to the limits)",
            o.statuses, o.decrease, o.min_share, o.recover_seconds
        )),
        None => out.push_str(" (not in the workers' published settings)"),
    }
    if let Some(until) = a.paused_until_ms {
        out.push_str(&format!(
            "; PAUSED by the provider's Retry-After until {} ({:.1} s left): every shop denied, reason provider",
            time::format_ms(until),
            (until - now_ms).max(0) as f64 / 1000.0
        ));
    }
    match &a.last {
        Some(l) => {
            out.push_str(&format!(
                "; last throttling answer: {} at {}",
                l.status,
                time::format_ms(l.at_us.div_euclid(1000))
            ));
            if l.retry_after_us > 0 {
                out.push_str(&format!(
                    " (Retry-After {} s)",
                    l.retry_after_us as f64 / 1e6
                ));
            }
        }
        None => out.push_str("; no throttling answer in the last day"),
    }
    out.push('\n');
    out
}

fn adaptive_json(a: &checkout_guard_cli::admin::AdaptView) -> serde_json::Value {
    json!({
        "share": a.share,
        "option": a.option.as_ref().map(|o| json!({"statuses": o.statuses, "decrease": o.decrease, "min_share": o.min_share, "recover_seconds": o.recover_seconds})),
        "paused_until": a.paused_until_ms.map(time::format_ms),
        "paused_until_ms": a.paused_until_ms,
        "last_throttle": a.last.map(|l| json!({"status": l.status, "at": time::format_ms(l.at_us.div_euclid(1000)), "at_ms": l.at_us.div_euclid(1000), "retry_after": (l.retry_after_us > 0).then(|| l.retry_after_us as f64 / 1e6)})),
    })
}

fn status_json(name: &str, st: &Status) -> serde_json::Value {
    json!({
        "limiter": name,
        "now": time::format_ms(st.now_ms),
        "settings": st.settings,
        "limits": st.buckets.as_ref().map(|b| live::describe(b) + &st.routes),
        "live_version": st.live.version,
        "mode": st.mode.map(Mode::as_str),
        "mode_live": st.live.mode.map(Mode::as_str),
        "module_loaded": st.module_loaded,
        "module_unknown": st.module_unknown,
        "module_decisions": st.module_decisions,
        "problems": st.problems,
        "buckets": st.levels.iter().map(|(l, level, cap)| json!({"bucket": l.as_str(), "tokens": level, "capacity": cap})).collect::<Vec<_>>(),
        "endpoints": st.endpoints.iter().map(|(n, level, cap)| json!({"endpoint": n, "tokens": level, "capacity": cap})).collect::<Vec<_>>(),
        "priorities": st.classes.iter().map(|(c, share)| json!({"class": c, "share": share, "default": st.default_class.as_deref() == Some(c.as_str())})).collect::<Vec<_>>(),
        "hot_shops": st.hot.iter().map(|(s, kind, ttl)| json!({"shop": shop_text(s), "shop_hex": shop_id::hex(s), "kind": kind, "ttl_ms": ttl})).collect::<Vec<_>>(),
        "window": st.window.as_ref().map(|w| json!({"tokens": w.total, "shops": w.shops.iter().map(|(s, n)| json!({"shop": shop_text(s), "shop_hex": shop_id::hex(s), "tokens": n})).collect::<Vec<_>>()})),
        "decisions": st.decisions.as_ref().ok(),
        "decisions_error": st.decisions.as_ref().err(),
        "shadow_decisions": st.shadow_decisions,
        "adaptive": st.adaptive.as_ref().map(adaptive_json),
        "in_flight": in_flight_json(&st.in_flight),
        "decisions_seconds": st.decisions_seconds,
        "hot_shop_count": st.hot.len(),
        "top_hot_shops_by_denials": st.top_hot_denied.iter().map(|(s, n)| json!({"shop": s, "denied": n})).collect::<Vec<_>>(),
        "events_stream": {"key": st.stream.key, "exists": st.stream.exists, "length": st.stream.length, "newest": st.stream.newest_ms.map(time::format_ms), "newest_ms": st.stream.newest_ms},
        "changes": st.changes.iter().map(|c| json!({"version": c.version, "by": c.by, "at": time::format_ms(c.at_ms), "old": c.old, "new": c.new})).collect::<Vec<_>>(),
    })
}

/// The decision script and one encoded call per shop (see `LimiterCommand::Call`), built
/// by the model's encoder, the one the extension uses.
fn encoded_calls(
    name: &str,
    global: &str,
    tokens: i64,
    shops: &[OsString],
) -> Result<String, String> {
    use checkout_guard_config::options::validate_name;
    use checkout_guard_config::{bucket_value, buckets_from_value, Value};
    use checkout_guard_model::cmd::decide;
    use checkout_guard_model::{AdaptArgs, AutoHotArgs, DecideCall, Keys, LaneArgs, ShopKeys};

    validate_name(&Value::Str(name.as_bytes().to_vec()))
        .map_err(|e| format!("--name {}", e.message))?;
    let (c, r) = live::parse_bucket(Lane::Global, global).map_err(|e| format!("--global: {e}"))?;
    let set = buckets_from_value(&Value::Map(vec![("global".into(), bucket_value(c, r))]))
        .map_err(|e| e.to_string())?;
    let (lanes, auto) = (LaneArgs::new(&set), AutoHotArgs::new(None));
    let off = AdaptArgs::off();
    let settings = live::describe(&set);
    let keys = Keys::new(name);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let shops = shops
        .iter()
        .map(|s| shop_id::unescape(OsStr::as_bytes(s)))
        .collect::<Result<Vec<_>, _>>()?;
    let calls: Vec<_> = shops
        .iter()
        .map(|shop| {
            let shop = shop.as_slice();
            let shop_keys = ShopKeys::new(&keys, shop);
            let call = DecideCall {
                endpoint: None,
                share_ppm: 0,
                in_flight: &checkout_guard_model::InFlightArgs::off(),
                lease_id: b"",
                keys: shop_keys.decide_keys(),
                tokens,
                static_hot: false,
                lanes: &lanes,
                version: b"",
                shop,
                auto_hot: &auto,
                adapt: &off,
                settings: &settings,
                peek: false,
                max_wait_us: 0,
            };
            json!({
                "shop": shop_text(shop),
                "keys": call.sent_keys().map(text).collect::<Vec<_>>(),
                "argv": call.argv().iter().map(|a| text(a)).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({"script": decide::source(), "calls": calls}).to_string())
}
