//! Calls from Rust into PHP, made safe for the process whatever the PHP side does.
//!
//! THE RULE (every call into PHP goes through [`call`]: callbacks, the status probes on
//! responses and exceptions, `newrelic_record_custom_event`, PSR-7 methods):
//! the callee may
//! - return anything: never assume a type; probe it;
//! - throw: the exception is taken and handed back as [`Ended::Threw`];
//! - `exit()`/`die()`: PHP 8 unwinds with an internal "unwind exit" object in
//!   `EG(exception)`. It is not a Throwable: never take it, call methods on it or free it;
//!   leave it pending and return to PHP at once ([`Ended::Exit`]), so the engine ends the
//!   script with the exit status asked for;
//! - be a Fiber destroyed while suspended inside the call: the engine unwinds the fiber
//!   with a "graceful exit" object, to be left pending the same way ([`Ended::FiberDestroyed`]);
//! - bail out (a fatal error, the memory limit): the engine `longjmp`s to the nearest
//!   `zend_try`. A `longjmp` through Rust frames that own values is undefined behaviour, so
//!   the call runs inside ext-php-rs's `try_catch`; on [`Ended::Bailout`] the caller drops
//!   what it owns, records what it can, and calls [`resume_bailout`], which jumps on.
//!
//! Nothing here holds a lock or a `RefCell` borrow across the call.

use std::ffi::c_void;
use std::panic::AssertUnwindSafe;

use ext_php_rs::boxed::ZBox;
use ext_php_rs::types::{ZendObject, Zval};
use ext_php_rs::zend::{try_catch, CatchError, ExecutorGlobals, ProcessGlobals};
use once_cell::sync::OnceCell;

/// How a call into PHP ended.
pub enum Ended {
    Returned(Zval),
    Threw(ZBox<ZendObject>),
    /// `exit()`/`die()`: the unwind-exit object is left pending in `EG(exception)`.
    Exit,
    /// A fatal error (e.g. the memory limit) that the engine unwinds like `exit(255)`.
    FatalExit,
    /// The fiber running the call was destroyed: the graceful-exit object is left pending.
    FiberDestroyed,
    /// A fatal error: the engine is bailing out; call [`resume_bailout`] once what the
    /// caller owns is dropped.
    Bailout,
    /// The call could not be made (not callable, bad arguments).
    Failed(String),
}

impl Ended {
    /// The call stopped the script's normal flow: return to PHP (or bail out) at once.
    pub fn is_unwinding(&self) -> bool {
        matches!(
            self,
            Ended::Exit | Ended::FatalExit | Ended::FiberDestroyed | Ended::Bailout
        )
    }

    /// What the measured call's `error.type` says for an unwinding end.
    pub fn error_type(&self) -> Option<&'static str> {
        match self {
            Ended::Exit => Some("exit"),
            Ended::FiberDestroyed => Some("fiber_destroyed"),
            Ended::Bailout | Ended::FatalExit => Some("fatal_error"),
            _ => None,
        }
    }
}

type IsSpecial = unsafe extern "C" fn(*const c_void) -> bool;

/// `zend_is_unwind_exit` and `zend_is_graceful_exit`, looked up at run time: declared as
/// extern symbols they would make the library fail to load anywhere but in PHP.
fn special_checks() -> &'static [Option<IsSpecial>; 2] {
    static CHECKS: OnceCell<[Option<IsSpecial>; 2]> = OnceCell::new();
    CHECKS.get_or_init(|| {
        let find = |name: &[u8]| {
            // SAFETY: dlsym with a NUL-terminated name; the symbols, when present, are the
            // engine's `bool f(const zend_object *)`.
            let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
            (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, IsSpecial>(p) })
        };
        [
            find(b"zend_is_unwind_exit\0"),
            find(b"zend_is_graceful_exit\0"),
        ]
    })
}

/// What is pending in `EG(exception)`: nothing, an unwind exit, a graceful exit, or a
/// real exception.
enum Pending {
    None,
    Exit,
    FiberDestroyed,
    Exception,
}

fn pending() -> Pending {
    let ex = ExecutorGlobals::get().exception;
    if ex.is_null() {
        return Pending::None;
    }
    let [unwind, graceful] = special_checks();
    // SAFETY: `ex` is the engine's pending exception object, valid while it is pending.
    if unwind.is_some_and(|f| unsafe { f(ex.cast()) }) {
        return Pending::Exit;
    }
    if graceful.is_some_and(|f| unsafe { f(ex.cast()) }) {
        return Pending::FiberDestroyed;
    }
    Pending::Exception
}

/// Makes one call into PHP (see the module's rule).
///
/// Outside any PHP frame (request shutdown, where the buffered events are written) the
/// engine turns an exception leaving the callee into a fatal "Uncaught" error at once. So
/// there the call runs under a dummy internal frame (as the engine itself uses), an
/// exception stays an exception, and an exit or fiber unwind (nothing left to unwind) is
/// released here and reported as [`Ended::Failed`].
pub fn call(f: impl FnOnce() -> ext_php_rs::error::Result<Zval>) -> Ended {
    call_inner(f, false)
}

/// As [`call`], for a callee that is not the application's (a telemetry sink): an `exit()`
/// in it is released too, and the exit status restored, wherever it happens. A fatal error
/// still bails out, and a destroyed fiber still unwinds.
pub fn call_contained(f: impl FnOnce() -> ext_php_rs::error::Result<Zval>) -> Ended {
    call_inner(f, true)
}

/// PHP's last error as far as telling a new one apart goes: its message, type and line.
fn last_error() -> (usize, i32, u32) {
    let pg = ProcessGlobals::get();
    (
        pg.last_error_message as usize,
        pg.last_error_type,
        pg.last_error_lineno as u32,
    )
}

/// E_ERROR, E_PARSE, E_CORE_ERROR, E_COMPILE_ERROR, E_USER_ERROR, E_RECOVERABLE_ERROR.
const FATAL_ERRORS: i32 = 1 | 4 | 16 | 64 | 256 | 4096;

fn call_inner(f: impl FnOnce() -> ext_php_rs::error::Result<Zval>, contain_exit: bool) -> Ended {
    let (top_level, exit_status) = {
        let eg = ExecutorGlobals::get();
        (eg.current_execute_data.is_null(), eg.exit_status)
    };
    let error_before = last_error();
    let dummy = top_level.then(pass_function).flatten();
    let mut frame: ext_php_rs::ffi::zend_execute_data = unsafe { std::mem::zeroed() };
    if let Some(func) = dummy {
        frame.func = func;
        ExecutorGlobals::get_mut().current_execute_data = &raw mut frame;
    }
    let result = try_catch(AssertUnwindSafe(f));
    if dummy.is_some() {
        ExecutorGlobals::get_mut().current_execute_data = std::ptr::null_mut();
    }
    let outcome = match result {
        Err(CatchError::Bailout) => return Ended::Bailout,
        Err(e) => Err(e.to_string()),
        Ok(r) => r.map_err(|e| e.to_string()),
    };
    // A fatal error unwinds like exit(255) where the engine can: told apart from an exit by
    // a new fatal error in PHP's last error.
    let fatal = || {
        let now = last_error();
        now != error_before && now.1 & FATAL_ERRORS != 0
    };
    match pending() {
        Pending::Exit if fatal() => {
            if top_level {
                // Nothing above to unwind: released as the engine would; a fatal error
                // stays one (its status 255 kept).
                drop(ExecutorGlobals::take_exception());
                Ended::Failed("fatal error".into())
            } else {
                Ended::FatalExit
            }
        }
        // Nothing above to unwind, or an exit that is not the callee's to make: released
        // as the engine releases it, and the exit status restored.
        Pending::Exit if top_level || contain_exit => release_exit(exit_status),
        Pending::FiberDestroyed if top_level => release_exit(exit_status),
        Pending::Exit => Ended::Exit,
        Pending::FiberDestroyed => Ended::FiberDestroyed,
        Pending::Exception => match ExecutorGlobals::take_exception() {
            Some(ex) => Ended::Threw(ex),
            None => Ended::Failed("exception vanished".into()),
        },
        Pending::None => match outcome {
            Ok(v) => Ended::Returned(v),
            Err(e) => Ended::Failed(e),
        },
    }
}

/// Releases a pending exit (or fiber unwind) object as the engine would, and puts back the
/// exit status the process had before the call.
fn release_exit(exit_status: i32) -> Ended {
    drop(ExecutorGlobals::take_exception());
    ExecutorGlobals::get_mut().exit_status = exit_status;
    Ended::Failed("exited".into())
}

/// The engine's `zend_pass_function`, the internal function of its own dummy frames.
fn pass_function() -> Option<*mut ext_php_rs::ffi::zend_function> {
    static PASS: OnceCell<usize> = OnceCell::new();
    let p = *PASS.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; a data symbol of the engine.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"zend_pass_function".as_ptr()) as usize }
    });
    (p != 0).then_some(p as *mut ext_php_rs::ffi::zend_function)
}

/// Jumps on to the engine's enclosing `zend_try` after a bailout caught by [`call`].
///
/// # Safety
/// Every value the calling frames own must have been dropped (nothing needing `Drop` may
/// be left on the frames this jumps over).
pub unsafe fn resume_bailout() -> ! {
    unsafe { ext_php_rs::zend::bailout() }
}

/// Writes one line to PHP's error log (`error_log`, or stderr), bypassing the error
/// handlers an application may have set (which could turn a warning into an exception).
pub fn log_error(message: &str) {
    type LogErr = unsafe extern "C" fn(*const std::ffi::c_char, std::ffi::c_int);
    static LOG: OnceCell<usize> = OnceCell::new();
    let p = *LOG.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; PHP's
        // `void php_log_err_with_severity(const char *msg, int syslog_type)`.
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"php_log_err_with_severity".as_ptr()) as usize }
    });
    let Ok(text) = std::ffi::CString::new(message.replace('\0', " ")) else {
        return;
    };
    if p == 0 {
        eprintln!("{message}");
        return;
    }
    // SAFETY: the symbol has this signature; `text` outlives the call; 4 = LOG_WARNING.
    unsafe { std::mem::transmute::<usize, LogErr>(p)(text.as_ptr(), 4) }
}
