//! The `checkout_guard.*` INI settings: process-wide defaults for every limiter.

use checkout_guard_config::Defaults;
use checkout_guard_model::ConfigError;
use ext_php_rs::ffi::zend_ini_entry;
use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::types::Zval;
use ext_php_rs::zend::{ExecutorGlobals, IniEntryDef, IniEntryDefs};

/// Every setting, in the order `phpinfo()` shows them.
pub fn all() -> &'static [Setting] {
    &ALL
}

// The settings, their defaults and scopes are the model's one table (`settings::ALL`).
use checkout_guard_config::settings::{Scope, ALL};
pub use checkout_guard_config::settings::{
    Setting, ENGINE, EVENTS_BUFFER_SIZE, EVENTS_JSONL_PATH, EVENTS_SINKS, EVENTS_STREAM_KEY,
    EVENTS_STREAM_MAXLEN, EVENTS_STREAM_URL, LOCAL_DENIALS, METRICS, MODE, ON_UNAVAILABLE,
    RETRY_INTERVAL_MS, SENTINEL_PASSWORD, SENTINEL_USER, TIMEOUT_MS, TLS_CAFILE, TLS_LOCAL_CERT,
    TLS_LOCAL_PK, TLS_PEER_NAME, URL,
};

// Telemetry settings are read once per process (its sinks are built once), so they are
// PHP_INI_SYSTEM: php.ini, -d, or php_admin_value in an FPM pool.
static ENTRIES: IniEntryDefs<21> = IniEntryDefs::new([
    entry(ALL[0]),
    entry(ALL[1]),
    entry(ALL[2]),
    entry(ALL[3]),
    entry(ALL[4]),
    entry(ALL[5]),
    entry(ALL[6]),
    entry(ALL[7]),
    entry(ALL[8]),
    entry(ALL[9]),
    entry(ALL[10]),
    entry(ALL[11]),
    entry(ALL[12]),
    entry(ALL[13]),
    entry(ALL[14]),
    entry(ALL[15]),
    entry(ALL[16]),
    entry(ALL[17]),
    entry(ALL[18]),
    entry(ALL[19]),
    IniEntryDef::end(),
]);

/// An INI entry whose changes PHP accepts as they come (values are validated where they
/// are used, with messages naming the setting). A handler is needed at all because
/// without one PHP refuses `ini_restore()` at run time.
const fn entry(s: Setting) -> IniEntryDef {
    let permission = match s.scope {
        Scope::All => IniEntryPermission::All,
        Scope::System => IniEntryPermission::System,
    };
    let mut e = IniEntryDef::new(s.name, s.default, permission);
    e.on_modify = Some(accept);
    e
}

unsafe extern "C" fn accept(
    _entry: *mut zend_ini_entry,
    _new_value: *mut ext_php_rs::ffi::zend_string,
    _mh_arg1: *mut std::ffi::c_void,
    _mh_arg2: *mut std::ffi::c_void,
    _mh_arg3: *mut std::ffi::c_void,
    _stage: std::ffi::c_int,
) -> std::ffi::c_int {
    0 // SUCCESS
}

pub fn register(module_number: i32) {
    IniEntryDef::register(ENTRIES.as_slice(), module_number);
}

/// The current value of one of our INI settings, looked up directly (not by copying every
/// directive, as `ExecutorGlobals::ini_values` does).
pub fn get(setting: Setting) -> Option<String> {
    registered(setting.name())
}

/// The current value of any registered INI setting (another extension's too); `None` when
/// no loaded extension registered it.
pub fn registered(name: &str) -> Option<String> {
    let globals = ExecutorGlobals::get();
    // SAFETY: EG(ini_directives) is set up before any request runs and holds
    // `zend_ini_entry` pointers owned by the engine.
    unsafe {
        let table = globals.ini_directives.as_ref()?;
        let entry = table.get(name)?.ptr::<zend_ini_entry>()?.as_ref()?;
        let value = entry.value.as_ref()?;
        Some(String::from_utf8_lossy(value.as_bytes()).into_owned())
    }
}

/// The warning naming the pool's `checkout_guard.*` lines php-fpm refused in this worker
/// (loaded per pool, written after the extension line), said at the first use of the
/// settings.
static REFUSED: once_cell::sync::OnceCell<String> = once_cell::sync::OnceCell::new();
static REFUSED_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// At module start-up in a php-fpm worker that loaded the extension per pool (its master
/// `master`): reads the pool's lines back from php-fpm's configuration and keeps a warning
/// naming the `checkout_guard.*` ones php-fpm refused (see `runtime::fpm_pool`). Said on
/// stderr at once (php-fpm's log with `catch_workers_output`) and in PHP's error log at
/// the first use of the settings, inside a request (the pool's `error_log`, or the web
/// server's log through FastCGI): outside a request php-fpm's worker logs nowhere.
pub fn note_refused_pool_settings(master: u32) {
    use checkout_guard_runtime::fpm_pool;
    let own = own_file_stem();
    if let Some(w) = fpm_pool::refused_warning(master, own.as_deref().unwrap_or("checkout_guard")) {
        eprintln!("{w}");
        let _ = REFUSED.set(w);
    }
}

/// This extension's file name as `extension=` gives it (`checkout_guard`), by `dladdr`.
fn own_file_stem() -> Option<String> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the address of a function of this library and fills `info`.
    let found = unsafe { libc::dladdr(own_file_stem as *const libc::c_void, &mut info) };
    if found == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path owned by the dynamic loader.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    Some(checkout_guard_runtime::fpm_pool::extension_stem(&path).to_string())
}

/// Says the refused pool settings in PHP's error log, once per process.
fn say_refused_once() {
    if let Some(w) = REFUSED.get() {
        if !REFUSED_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            crate::php_call::log_error(w);
        }
    }
}

/// Every limiter's defaults, validated (the error names the INI setting).
pub fn defaults() -> Result<Defaults, ConfigError> {
    say_refused_once();
    Defaults::from_ini(
        get(URL).as_deref(),
        get(TIMEOUT_MS).as_deref(),
        get(ON_UNAVAILABLE).as_deref(),
        get(RETRY_INTERVAL_MS).as_deref(),
    )?
    .with_local_denials(get(LOCAL_DENIALS).as_deref())?
    .with_engine(get(ENGINE).as_deref())?
    .with_mode(get(MODE).as_deref())
    .map(|d| {
        d.with_tls(
            get(TLS_CAFILE).as_deref(),
            get(TLS_LOCAL_CERT).as_deref(),
            get(TLS_LOCAL_PK).as_deref(),
            get(TLS_PEER_NAME).as_deref(),
        )
        .with_sentinel(
            get(SENTINEL_USER).as_deref(),
            get(SENTINEL_PASSWORD).as_deref(),
        )
    })
}

extern "C" {
    /// PHP's `cfg_get_entry()`: a directive as php.ini (or `-d`) gave it, whether or not an
    /// extension registered it.
    fn cfg_get_entry(name: *const std::ffi::c_char, name_length: usize) -> *mut Zval;
}

/// A directive's value as php.ini (or `-d`) set it, registered or not; `None` when unset.
pub fn configured(name: &str) -> Option<String> {
    // SAFETY: PHP's configuration hash is built at start-up and only read afterwards; the
    // name is passed with its length (no NUL needed).
    unsafe {
        let zv = cfg_get_entry(name.as_ptr().cast(), name.len()).as_ref()?;
        zv.str().map(str::to_owned)
    }
}

/// `checkout_guard.metrics` as this process counts by: on unless set off. A value that is
/// neither is said in PHP's error log (naming the setting and the value) and counting
/// stays on.
pub fn apply_metrics_setting() {
    let raw = get(METRICS).unwrap_or_default();
    let on = match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "on" | "true" | "yes" => true,
        "0" | "off" | "false" | "no" | "" => false,
        _ => {
            crate::php_call::log_error(&format!(
                "PHP Warning:  checkout_guard: checkout_guard.metrics must be on or off (1/0, true/false, yes/no), got {raw:?}; counting stays on"
            ));
            true
        }
    };
    checkout_guard_runtime::metrics::set_enabled(on);
}
