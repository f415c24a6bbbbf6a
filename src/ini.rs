//! The `checkout_guard.*` INI settings: process-wide defaults for every limiter.

use checkout_guard_model::{ConfigError, Defaults};
use ext_php_rs::ffi::zend_ini_entry;
use ext_php_rs::flags::IniEntryPermission;
use ext_php_rs::zend::{ExecutorGlobals, IniEntryDef, IniEntryDefs};

pub const URL: &str = "checkout_guard.url";
pub const TIMEOUT_MS: &str = "checkout_guard.timeout_ms";
pub const ON_UNAVAILABLE: &str = "checkout_guard.on_unavailable";
pub const RETRY_INTERVAL_MS: &str = "checkout_guard.retry_interval_ms";
pub const LOCAL_DENIALS: &str = "checkout_guard.local_denials";
pub const EVENTS_SINKS: &str = "checkout_guard.events.sinks";
pub const EVENTS_JSONL_PATH: &str = "checkout_guard.events.jsonl_path";
pub const EVENTS_STREAM_URL: &str = "checkout_guard.events.stream_url";
pub const EVENTS_STREAM_KEY: &str = "checkout_guard.events.stream_key";
pub const EVENTS_STREAM_MAXLEN: &str = "checkout_guard.events.stream_maxlen";
pub const EVENTS_BUFFER_SIZE: &str = "checkout_guard.events.buffer_size";

/// The telemetry settings, shown in phpinfo() in this order.
pub const EVENTS: [&str; 6] = [
    EVENTS_SINKS,
    EVENTS_JSONL_PATH,
    EVENTS_STREAM_URL,
    EVENTS_STREAM_KEY,
    EVENTS_STREAM_MAXLEN,
    EVENTS_BUFFER_SIZE,
];

// Telemetry settings are read once per process (its sinks are built once), so they are
// PHP_INI_SYSTEM: php.ini, -d, or php_admin_value in an FPM pool.
static ENTRIES: IniEntryDefs<12> = IniEntryDefs::new([
    entry(
        c"checkout_guard.url",
        c"redis://127.0.0.1:6379",
        IniEntryPermission::All,
    ),
    entry(c"checkout_guard.timeout_ms", c"50", IniEntryPermission::All),
    entry(
        c"checkout_guard.on_unavailable",
        c"allow",
        IniEntryPermission::All,
    ),
    entry(
        c"checkout_guard.retry_interval_ms",
        c"1000",
        IniEntryPermission::All,
    ),
    entry(
        c"checkout_guard.local_denials",
        c"1",
        IniEntryPermission::All,
    ),
    entry(
        c"checkout_guard.events.sinks",
        c"",
        IniEntryPermission::System,
    ),
    entry(
        c"checkout_guard.events.jsonl_path",
        c"",
        IniEntryPermission::System,
    ),
    entry(
        c"checkout_guard.events.stream_url",
        c"",
        IniEntryPermission::System,
    ),
    entry(
        c"checkout_guard.events.stream_key",
        c"checkout_guard:events",
        IniEntryPermission::System,
    ),
    entry(
        c"checkout_guard.events.stream_maxlen",
        c"100000",
        IniEntryPermission::System,
    ),
    entry(
        c"checkout_guard.events.buffer_size",
        c"1000",
        IniEntryPermission::System,
    ),
    IniEntryDef::end(),
]);

/// An INI entry whose changes PHP accepts as they come (values are validated where they
/// are used, with messages naming the setting). A handler is needed at all because
/// without one PHP refuses `ini_restore()` at run time.
const fn entry(
    name: &'static std::ffi::CStr,
    value: &'static std::ffi::CStr,
    permission: IniEntryPermission,
) -> IniEntryDef {
    let mut e = IniEntryDef::new(name, value, permission);
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
pub fn get(name: &str) -> Option<String> {
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

/// Every limiter's defaults, validated (the error names the INI setting).
pub fn defaults() -> Result<Defaults, ConfigError> {
    Defaults::from_ini(
        get(URL).as_deref(),
        get(TIMEOUT_MS).as_deref(),
        get(ON_UNAVAILABLE).as_deref(),
        get(RETRY_INTERVAL_MS).as_deref(),
    )?
    .with_local_denials(get(LOCAL_DENIALS).as_deref())
}
