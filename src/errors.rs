//! The extension's exception classes and the mapping of core errors onto them.
//!
//! `ConfigurationException extends \InvalidArgumentException` and
//! `UnavailableException extends \RuntimeException` are registered with `ClassBuilder`
//! rather than `#[php_class]`, so they behave like ordinary PHP exceptions (file, line,
//! trace, `new` from PHP). Their SPL parents are looked up at run time with `dlsym`:
//! `ClassEntry::try_find` finds nothing during MINIT, and linking the `spl_ce_*`
//! symbols statically would make the library fail to load anywhere but in PHP. Their stubs
//! come from Reflection like every class's (scripts/stubs.php).

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

use checkout_guard_model::LimiterError;
use ext_php_rs::builders::ClassBuilder;
use ext_php_rs::exception::PhpException;
use ext_php_rs::zend::{ce, ClassEntry};

pub const CONFIGURATION_EXCEPTION: &str = "CheckoutGuard\\ConfigurationException";
pub const UNAVAILABLE_EXCEPTION: &str = "CheckoutGuard\\UnavailableException";

static CONFIGURATION_CE: AtomicPtr<ClassEntry> = AtomicPtr::new(std::ptr::null_mut());
static UNAVAILABLE_CE: AtomicPtr<ClassEntry> = AtomicPtr::new(std::ptr::null_mut());

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

#[cfg(target_os = "macos")]
const RTLD_DEFAULT: *mut c_void = -2isize as *mut c_void;
#[cfg(not(target_os = "macos"))]
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

/// The SPL class entry behind the global `zend_class_entry *NAME`, or `\Exception` if the
/// symbol cannot be found (never seen with PHP 8; keeps MINIT from failing).
fn spl_class(symbol: &CStr) -> &'static ClassEntry {
    // SAFETY: dlsym returns the address of the `zend_class_entry *` global, which SPL set
    // during its own MINIT, before any dynamically loaded extension starts.
    unsafe {
        let slot = dlsym(RTLD_DEFAULT, symbol.as_ptr()) as *const *const ClassEntry;
        if slot.is_null() || (*slot).is_null() {
            return ce::exception();
        }
        &**slot
    }
}

fn invalid_argument_exception() -> &'static ClassEntry {
    spl_class(c"spl_ce_InvalidArgumentException")
}

fn runtime_exception() -> &'static ClassEntry {
    spl_class(c"spl_ce_RuntimeException")
}

pub fn register_exception_classes() -> ext_php_rs::error::Result<()> {
    ClassBuilder::new(CONFIGURATION_EXCEPTION)
        .extends((invalid_argument_exception, "\\InvalidArgumentException"))
        .registration(|ce, _| CONFIGURATION_CE.store(ce, Ordering::Release))
        .register()?;
    ClassBuilder::new(UNAVAILABLE_EXCEPTION)
        .extends((runtime_exception, "\\RuntimeException"))
        .registration(|ce, _| UNAVAILABLE_CE.store(ce, Ordering::Release))
        .register()
}

fn class(slot: &AtomicPtr<ClassEntry>) -> &'static ClassEntry {
    // SAFETY: set once in MINIT to a class entry that lives as long as the process.
    unsafe { slot.load(Ordering::Acquire).as_ref() }.unwrap_or_else(ce::exception)
}

/// PHP refuses exception messages with NUL bytes (it throws a bare Error instead): a value
/// quoted into a message must never take the real exception's place.
fn printable(message: String) -> String {
    if message.contains('\0') {
        message.replace('\0', "\\x00")
    } else {
        message
    }
}

/// Bad options or arguments.
pub fn configuration(message: String) -> PhpException {
    PhpException::new(printable(message), 0, class(&CONFIGURATION_CE))
}

pub fn to_php(e: LimiterError) -> PhpException {
    match e {
        LimiterError::Config(c) => configuration(c.to_string()),
        e @ LimiterError::Unavailable { .. } => {
            PhpException::new(printable(e.to_string()), 0, class(&UNAVAILABLE_CE))
        }
    }
}
