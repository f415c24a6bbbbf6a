//! The `phpinfo()` section: version and settings, with any password masked.

use checkout_guard_config::mask_password;
use ext_php_rs::zend::ModuleEntry;
use ext_php_rs::{info_table_end, info_table_header, info_table_row, info_table_start};

use crate::ini;
use checkout_guard_runtime::sync::Mutex;

/// The URLs of this process's limiters whose TLS is not verified (`verify_peer => false`),
/// for `phpinfo()`.
// The runtime's locks (pthread's with `std-locks`, which helgrind sees; std's are futexes:
// scripts/helgrind.sh at 16 threads reported note_mode's accesses as races).
static UNVERIFIED: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Records that a limiter of this process connects to `url` (password masked) without
/// verifying its TLS.
pub fn note_unverified(url: &str) {
    let mut urls = UNVERIFIED.lock();
    if !urls.iter().any(|u| u == url) && urls.len() < 16 {
        urls.push(url.to_string());
    }
}

/// The mode in force of the limiters (by name) this process made most recently, as it last
/// saw each (set when made and when it picked up live limits), for `phpinfo()`; and how
/// many older ones no longer fit.
static MODES: Mutex<(Vec<(String, &'static str)>, u64)> = Mutex::new((Vec::new(), 0));

/// How many limiters `phpinfo()` lists.
const MODES_SHOWN: usize = 64;

/// Records the mode in force of limiter `name`: the newest 64 limiters are shown, the
/// oldest dropped (a long-lived process, a test suite, makes many; the one just made or
/// switched is the one asked about).
pub fn note_mode(name: &str, mode: checkout_guard_config::Mode) {
    let mut guard = MODES.lock();
    let (modes, dropped) = &mut *guard;
    if let Some(i) = modes.iter().position(|(n, _)| n == name) {
        let (n, _) = modes.remove(i);
        modes.push((n, mode.as_str()));
        return;
    }
    if modes.len() >= MODES_SHOWN {
        modes.remove(0);
        *dropped += 1;
    }
    modes.push((name.to_string(), mode.as_str()));
}

/// The `in_flight` option of the limiters (by name) this process made most recently, as
/// their constructors gave it (`limiter set` may change the limits live): the newest 64.
static IN_FLIGHT: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

/// Records limiter `name`'s `in_flight` option for `phpinfo()`.
pub fn note_in_flight(name: &str, f: &checkout_guard_model::InFlight) {
    let text = format!(
        "global {}, hot_lane {}, hot_shop {}, lease {} s",
        f.limits[0],
        f.limits[1],
        f.limits[2],
        f.lease_us as f64 / 1e6
    );
    let mut list = IN_FLIGHT.lock();
    list.retain(|(n, _)| n != name);
    if list.len() >= MODES_SHOWN {
        list.remove(0);
    }
    list.push((name.to_string(), text));
}

pub extern "C" fn php_info(_module: *mut ModuleEntry) {
    // Called by the engine directly: a panic here must not unwind into C.
    let _ = std::panic::catch_unwind(|| {
        info_table_start!();
        info_table_header!("checkout_guard", "enabled");
        info_table_row!("version", checkout_guard_model::VERSION);
        info_table_row!(
            "decision script",
            "token bucket (GCRA), EVALSHA, one round trip on Valkey's clock"
        );
        // How requests are bracketed here: lifecycle.rs.
        let sapi = ext_php_rs::zend::php_sapi_name().unwrap_or_else(|| "unknown".into());
        let lifecycle = if crate::lifecycle::installed() {
            format!(
                "{sapi}: RINIT/RSHUTDOWN per request; requests handled inside one (a worker's, FrankenPHP) at the SAPI's activate/deactivate: {} ended in this process; this thread: {}",
                crate::lifecycle::handled_in_process(),
                crate::lifecycle::current().as_str()
            )
        } else {
            format!("{sapi}: RINIT/RSHUTDOWN per request (loaded by dl(): no SAPI hooks)")
        };
        info_table_row!("request lifecycle", lifecycle.as_str());
        // This process's (a php-fpm worker's) last decision; `health()` has it per limiter.
        info_table_row!(
            "engine of the last decision",
            checkout_guard_runtime::store::last_engine().unwrap_or("none yet in this process")
        );
        // Which processes share what this one learns (the same as health()'s
        // local_denials_table).
        let table = match checkout_guard_runtime::denials::sharing() {
            Some(t) => t.to_string(),
            None => "none yet in this process".into(),
        };
        info_table_row!("local denial table", table.as_str());
        // Where CheckoutGuard\Metrics' counters live: in the same mapping as the table.
        let counters = if checkout_guard_runtime::metrics::enabled() {
            format!(
                "on (checkout_guard.metrics): in the local denial table's memory, so shared as it is: {table}"
            )
        } else {
            "off (checkout_guard.metrics=0): nothing counted".into()
        };
        info_table_row!("metrics (CheckoutGuard\\Metrics)", counters.as_str());
        // The New Relic agent's cap and what the newrelic sink handed to it, counted
        // across the workers sharing that table (Telemetry::stats()['sinks']['newrelic']).
        let cap = crate::newrelic::cap_in_force();
        let cap_text = match cap {
            Some(c) => format!(
                "{c} custom events a minute ({})",
                checkout_guard_runtime::telemetry::agent_cap::CAP_SETTING
            ),
            None => "none: newrelic_record_custom_event() is not defined (the New Relic agent is not loaded)".into(),
        };
        info_table_row!("New Relic agent's cap", cap_text.as_str());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let counts = checkout_guard_runtime::telemetry::agent_cap::counts(now);
        let handed = format!(
            "last minute: {} ({} past the cap); this minute: {}; past the cap in total: {}",
            counts.last_minute.handed,
            counts.last_minute.over(cap),
            counts.this_minute.handed,
            counts.over_cap
        );
        info_table_row!("events handed to the New Relic agent", handed.as_str());
        // TLS URLs are verified; `verify_peer => false` is the only way not to be.
        let unverified = UNVERIFIED.lock().join(", ");
        let tls = if unverified.is_empty() {
            "rustls; every TLS connection verified".to_string()
        } else {
            format!("rustls; verification off (verify_peer => false) for {unverified}")
        };
        info_table_row!("TLS", tls.as_str());
        // The mode each limiter of this process decides in (live or option); the INI
        // default is the checkout_guard.mode row below.
        let modes = {
            let m = MODES.lock();
            let mut text =
                m.0.iter()
                    .rev()
                    .map(|(n, mode)| format!("{n}: {mode}"))
                    .collect::<Vec<_>>()
                    .join(", ");
            if m.1 > 0 {
                text.push_str(&format!(" (newest first; {} older not shown)", m.1));
            }
            text
        };
        let modes = if modes.is_empty() {
            "no limiter yet in this process".to_string()
        } else {
            modes
        };
        info_table_row!("mode in force", modes.as_str());
        // The in_flight option per limiter (0: a level without a limit).
        let in_flight = {
            let list = IN_FLIGHT.lock();
            list.iter()
                .rev()
                .map(|(n, t)| format!("{n}: {t}"))
                .collect::<Vec<_>>()
                .join("; ")
        };
        let in_flight = if in_flight.is_empty() {
            "no limiter with in_flight in this process".to_string()
        } else {
            in_flight
        };
        info_table_row!("in_flight (leases)", in_flight.as_str());
        for setting in ini::all() {
            let value = ini::get(*setting).unwrap_or_default();
            let value = if setting.secret && !value.is_empty() {
                "***".to_string()
            } else if setting.secret_url {
                mask_password(&value)
            } else {
                value
            };
            info_table_row!(setting.name(), value.as_str());
        }
        info_table_end!();
    });
}
