//! checkout_guard: the PHP extension. This crate only wires PHP to the runtime:
//! classes, INI entries, the phpinfo() section. Decisions live in `crates/model` (pure)
//! and `crates/runtime` (store, caches, telemetry), which have no PHP symbols.

#![cfg_attr(windows, feature(abi_vectorcall))]

mod args;
mod convert;
mod decision;
mod errors;
mod info;
mod ini;
mod interfaces;
mod leases;
mod lifecycle;
mod metrics;
mod newrelic;
mod php_call;
mod probe;
mod rate_limiter;
mod recording;
mod telemetry;

use ext_php_rs::prelude::*;

/// MINIT: INI entries and the exception classes (which extend SPL classes and so are
/// registered by hand; see `errors.rs`). Must never panic: a panic here aborts PHP.
fn startup(ty: i32, module_number: i32) -> i32 {
    ini::register(module_number);
    // Request boundaries inside a worker's long request (FrankenPHP): see lifecycle.rs.
    // SAFETY: MINIT, before any request.
    unsafe { lifecycle::install(ty) };
    // Failing open (an unreachable Valkey, a sink that cannot write) is said in PHP's
    // error log, at most once a minute per cause.
    checkout_guard_runtime::warn_log::set_writer(php_call::log_error);
    // Telemetry's set-up and the New Relic agent's call, registered once.
    recording::register();
    let _ = std::panic::catch_unwind(share_local_denials);
    match errors::register_exception_classes() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("checkout_guard: could not register exception classes: {e}");
            -1
        }
    }
}

/// The table of local denials, shared by the workers of a php-fpm master however the
/// extension is loaded. Loaded globally (`extension=` in php.ini or conf.d), module
/// start-up runs in the master before it forks its workers: they inherit the table. Loaded
/// per pool (`php_admin_value[extension]`), it runs in each worker after the fork (its
/// parent is then a php-fpm, the master): the workers map one file in /dev/shm named after
/// the master. Any other SAPI: shared with the processes forked afterwards.
fn share_local_denials() {
    use checkout_guard_runtime::{denials, process};
    let fpm = ext_php_rs::zend::php_sapi_name().as_deref() == Some("fpm-fcgi");
    match fpm.then(process::same_program_parent).flatten() {
        Some(master) => {
            // On failure the worker has a table of its own; health() and phpinfo() say why.
            let _ = denials::init_for_siblings(std::path::Path::new("/dev/shm"), master);
            ini::note_refused_pool_settings(master);
        }
        None => denials::init_shared(),
    }
}

/// RINIT: call counts are per request.
unsafe extern "C" fn request_startup(_ty: i32, _module_number: i32) -> i32 {
    // `$shopId` declared `string|int` (ext-php-rs declares no union types), parameters
    // with a default not nullable (args.rs): once per
    // process, at its first request, before PHP code could reflect on the methods or a
    // class implement CheckoutGuard\Limiter (the classes exist only after MINIT's end).
    static DECLARED_TYPES: std::sync::Once = std::sync::Once::new();
    DECLARED_TYPES.call_once(|| {
        // PHP_INI_SYSTEM, so read once; at the first request, after php-fpm applied a
        // pool's php_admin_value lines (loaded per pool, they come after module start-up).
        ini::apply_metrics_setting();
        for class in [
            "CheckoutGuard\\RateLimiter",
            "CheckoutGuard\\Limiter",
            "CheckoutGuard\\Decision",
            "CheckoutGuard\\Telemetry",
            "CheckoutGuard\\Metrics",
        ] {
            if let Some(ce) = ext_php_rs::zend::ClassEntry::try_find(class) {
                // SAFETY: the first RINIT of the process; see declare_types.
                unsafe { args::declare_types(ce) };
            }
        }
    });
    // Called by the engine directly: a panic must not unwind into C.
    let _ = std::panic::catch_unwind(recording::request_startup);
    lifecycle::request_started();
    0
}

/// RSHUTDOWN: the request's events go to the sinks (the response body is already flushed).
unsafe extern "C" fn request_shutdown(_ty: i32, _module_number: i32) -> i32 {
    lifecycle::request_ending();
    request_end();
    0
}

/// A request's end, at RSHUTDOWN or (a request handled inside a worker's long request)
/// at the SAPI's deactivate: the leases it still holds are released (and counted leaked)
/// first, then its events go to the sinks. Never panics into the engine.
pub(crate) fn request_end() {
    let _ = std::panic::catch_unwind(leases::release_all_at_request_end);
    let _ = std::panic::catch_unwind(recording::flush_at_request_end);
}

unsafe extern "C" {
    /// PHP's UNREGISTER_INI_ENTRIES() (Zend/zend_ini.h, PHP 8.2 and later).
    fn zend_unregister_ini_entries_ex(module_number: i32, module_type: i32);
}

/// MSHUTDOWN: the SAPI's activate/deactivate handlers back (lifecycle.rs). A module loaded
/// by `dl()` also unregisters its INI entries here: PHP does it itself only for a module
/// without an MSHUTDOWN (`module_destructor`, Zend/zend_API.c), and the entries must go
/// before the library is unloaded (else PHP frees them at exit from unmapped memory).
unsafe extern "C" fn module_shutdown(ty: i32, module_number: i32) -> i32 {
    // SAFETY: the engine runs MSHUTDOWN after the last request.
    unsafe { lifecycle::uninstall() };
    if ty == ext_php_rs::ffi::MODULE_TEMPORARY as i32 {
        // SAFETY: this module's entries, registered at its MINIT with this number and type.
        unsafe { zend_unregister_ini_entries_ex(module_number, ty) };
    }
    0
}

/// Post-deactivate: events measured after our RSHUTDOWN (another module's request end,
/// e.g. a session save handler) are written too.
unsafe extern "C" fn post_deactivate() -> i32 {
    let _ = std::panic::catch_unwind(recording::flush_after_request);
    0
}

#[php_module]
#[php(startup = startup)]
pub fn get_module(module: ModuleBuilder) -> ModuleBuilder {
    module
        .name("checkout_guard")
        .version(checkout_guard_model::VERSION)
        .interface::<interfaces::PhpInterfaceLimiter>()
        .interface::<interfaces::PhpInterfaceLimiterDecision>()
        .class::<rate_limiter::RateLimiter>()
        .class::<decision::Decision>()
        .class::<telemetry::Telemetry>()
        .class::<metrics::Metrics>()
        .request_startup_function(request_startup)
        .request_shutdown_function(request_shutdown)
        .shutdown_function(module_shutdown)
        .post_deactivate_function(post_deactivate)
        .info_function(info::php_info)
}
