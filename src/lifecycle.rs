//! Request boundaries in every SAPI, FrankenPHP's worker mode included.
//!
//! php-fpm, the CLI, Apache's mod_php and the embed SAPI start and end each request with
//! `php_request_startup()`/`php_request_shutdown()`: our RINIT and RSHUTDOWN run for each.
//! FrankenPHP's worker mode runs one long request (the worker script), and each HTTP
//! request it handles inside it (`frankenphp_handle_request()`) is bracketed by
//! `frankenphp_worker_request_startup()`/`_shutdown()`, which call the RINIT/RSHUTDOWN of a
//! fixed list of modules only (`MODULES_TO_RELOAD`: filter, session) but `sapi_activate()`
//! and `sapi_deactivate()` every time (php/frankenphp, frankenphp.c at fb62c30: lines
//! 566-633 and 505-538; its comment at line 67 says to hook `sapi_module.activate` and
//! `.deactivate` for this, as dd-trace-php#3169 does).
//!
//! So the extension hooks both, chained to the SAPI's own handlers, in every SAPI. A hook
//! acts only while this thread is inside a PHP request whose RINIT ran and whose RSHUTDOWN
//! did not: `php_request_startup()` calls `sapi_activate()` before the modules' RINIT, and
//! `php_request_shutdown()` calls `sapi_deactivate()` after their RSHUTDOWN, so in every
//! SAPI that brackets requests the classic way the hooks only pass the call on. Inside a
//! worker's long request they are the handled request's start and end, where the
//! extension does what RINIT and RSHUTDOWN do: call counts from 0; at the end, the leases
//! still held released and the request's events written. The end of the request that
//! boots a worker (FrankenPHP's "dummy request", shut down the same way before the first
//! handled request) is one too.
//!
//! `exit()` or a fatal error inside a handled request (`max_execution_time` included) ends
//! the worker's whole request in FrankenPHP (`zend_bailout()`, frankenphp.c line 914): the
//! RSHUTDOWN that follows is that request's end, as everywhere else.
//!
//! A module loaded with `dl()` is unloaded at its request's end while the hooks would stay
//! in the SAPI: such a module installs none (RINIT/RSHUTDOWN still bracket its request).
//! MSHUTDOWN puts the SAPI's handlers back if the hooks are still the current ones.

use std::cell::Cell;
use std::os::raw::c_int;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

type Hook = unsafe extern "C" fn() -> c_int;

/// The SAPI's handlers the hooks replaced (null: none), set in MINIT before any request.
static PREVIOUS_ACTIVATE: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());
static PREVIOUS_DEACTIVATE: AtomicPtr<()> = AtomicPtr::new(ptr::null_mut());
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Handled requests ended inside a longer request in this process (all threads).
static HANDLED_ENDED: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Between this thread's RINIT and RSHUTDOWN.
    static IN_REQUEST: Cell<bool> = const { Cell::new(false) };
    /// Handled requests ended inside this thread's current PHP request.
    static HANDLED_HERE: Cell<u64> = const { Cell::new(0) };
}

/// What the SAPI brackets and how the extension sees it, for `health()` and `phpinfo()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lifecycle {
    /// Each request is a PHP request: RINIT/RSHUTDOWN.
    Request,
    /// This thread's PHP request handles requests inside it (FrankenPHP's worker mode):
    /// each one bracketed by the SAPI's activate/deactivate.
    Worker,
}

impl Lifecycle {
    pub fn as_str(self) -> &'static str {
        match self {
            Lifecycle::Request => "request",
            Lifecycle::Worker => "worker",
        }
    }
}

/// This thread's: `Worker` once a handled request ended inside its current PHP request.
pub fn current() -> Lifecycle {
    if HANDLED_HERE.get() > 0 {
        Lifecycle::Worker
    } else {
        Lifecycle::Request
    }
}

/// Handled requests this thread's current PHP request has ended so far.
pub fn handled_here() -> u64 {
    HANDLED_HERE.get()
}

/// Handled requests ended in this process, all threads.
pub fn handled_in_process() -> u64 {
    HANDLED_ENDED.load(Ordering::Relaxed)
}

/// Whether the hooks are in the SAPI (not under `dl()`).
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

/// MINIT: the hooks go in front of the SAPI's handlers. `ty` is the module's type:
/// `MODULE_TEMPORARY` (loaded by `dl()`) installs nothing.
///
/// # Safety
/// Only from MINIT, before a request runs on another thread (`sapi_module` is the
/// process's, read by every thread's `sapi_activate()`).
pub unsafe fn install(ty: i32) {
    if ty == ext_php_rs::ffi::MODULE_TEMPORARY as i32 || INSTALLED.load(Ordering::Relaxed) {
        return;
    }
    let ours_activate: Hook = activate;
    let ours_deactivate: Hook = deactivate;
    // SAFETY: MINIT, one thread; see the function's contract.
    unsafe {
        let module = &mut *ptr::addr_of_mut!(ext_php_rs::ffi::sapi_module);
        let prev = module
            .activate
            .filter(|&p| !ptr::fn_addr_eq(p, ours_activate))
            .map_or(ptr::null_mut(), |p| p as *mut ());
        PREVIOUS_ACTIVATE.store(prev, Ordering::Release);
        let prev = module
            .deactivate
            .filter(|&p| !ptr::fn_addr_eq(p, ours_deactivate))
            .map_or(ptr::null_mut(), |p| p as *mut ());
        PREVIOUS_DEACTIVATE.store(prev, Ordering::Release);
        module.activate = Some(ours_activate);
        module.deactivate = Some(ours_deactivate);
    }
    INSTALLED.store(true, Ordering::Release);
}

/// MSHUTDOWN: the SAPI's handlers back, each only if ours is still the current one (when
/// another extension hooked over ours, its chain still reaches the SAPI's through ours).
///
/// # Safety
/// Only from MSHUTDOWN, after the last request.
pub unsafe fn uninstall() {
    if !INSTALLED.swap(false, Ordering::AcqRel) {
        return;
    }
    let ours_activate: Hook = activate;
    let ours_deactivate: Hook = deactivate;
    // SAFETY: MSHUTDOWN, no request runs.
    unsafe {
        let module = &mut *ptr::addr_of_mut!(ext_php_rs::ffi::sapi_module);
        if module
            .activate
            .is_some_and(|c| ptr::fn_addr_eq(c, ours_activate))
        {
            module.activate = previous(&PREVIOUS_ACTIVATE);
        }
        if module
            .deactivate
            .is_some_and(|c| ptr::fn_addr_eq(c, ours_deactivate))
        {
            module.deactivate = previous(&PREVIOUS_DEACTIVATE);
        }
    }
}

fn previous(slot: &AtomicPtr<()>) -> Option<Hook> {
    let p = slot.load(Ordering::Acquire);
    // SAFETY: the slot holds null or a `Hook` stored by `install`; function pointers are
    // pointer-sized.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut (), Hook>(p) })
}

/// RINIT's end: this thread is inside a request.
pub fn request_started() {
    IN_REQUEST.set(true);
    HANDLED_HERE.set(0);
}

/// RSHUTDOWN's start: the request is ending the classic way.
pub fn request_ending() {
    IN_REQUEST.set(false);
}

/// `sapi_module.activate`: the SAPI's handler first (as `sapi_activate()` would call it),
/// then, inside a request, a handled request starts.
unsafe extern "C" fn activate() -> c_int {
    // SAFETY: `sapi_activate()` would call the previous handler the same way.
    let result = previous(&PREVIOUS_ACTIVATE).map_or(0, |p| unsafe { p() });
    if IN_REQUEST.get() {
        // Called by the engine: a panic must not unwind into C.
        let _ = std::panic::catch_unwind(crate::recording::request_startup);
    }
    result
}

/// `sapi_module.deactivate`: inside a request, the handled request ends (what RSHUTDOWN
/// does), then the SAPI's handler.
unsafe extern "C" fn deactivate() -> c_int {
    if IN_REQUEST.get() {
        HANDLED_HERE.set(HANDLED_HERE.get() + 1);
        HANDLED_ENDED.fetch_add(1, Ordering::Relaxed);
        crate::request_end();
    }
    // SAFETY: `sapi_deactivate()` would call the previous handler the same way.
    previous(&PREVIOUS_DEACTIVATE).map_or(0, |p| unsafe { p() })
}
