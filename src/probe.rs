//! What a measured call ended with: its status code, found in what it returned (an int,
//! an array with `status`, a PSR-7 response) or in what it threw (`getResponse()`).
//! The probes call into PHP: see `php_call.rs` for what that may do.

use ext_php_rs::types::{ZendObject, Zval};

use crate::php_call::{self, Ended};

/// The status code in what a call returned: an int, an array with a `status` key, or an
/// object with `getStatusCode()` (a PSR-7 response); 0 when there is none. `Err` when a
/// method probed ended the script's normal flow (exit, fiber destroyed, fatal error).
pub fn status_of(v: &Zval) -> Result<i64, Ended> {
    let v = v.dereference();
    if let Some(i) = v.long() {
        return Ok(i);
    }
    if let Some(ht) = v.array() {
        return Ok(ht
            .get("status")
            .and_then(|s| s.dereference().long())
            .unwrap_or(0));
    }
    if let Some(obj) = v.object() {
        return Ok(call_status_method(obj, "getStatusCode")?.unwrap_or(0));
    }
    Ok(0)
}

/// Calls a method that takes no argument and returns the status it leads to; swallows
/// whatever the method throws or returns that is not a status (the call's own outcome
/// matters, not this probe's). A call into PHP: see `php_call.rs`.
pub fn call_status_method(obj: &ZendObject, method: &str) -> Result<Option<i64>, Ended> {
    // What the method returned is read and dropped inside the guarded call: dropping it may
    // run a destructor (PHP code) that exits or hits a fatal error.
    let inner = std::cell::Cell::new(None);
    let ended = php_call::call(|| {
        let r = obj.try_call_method(method, vec![])?;
        let status = if method == "getStatusCode" {
            Ok(r.long())
        } else {
            status_of(&r).map(Some)
        };
        drop(r);
        match status {
            Ok(status) => inner.set(Some(status)),
            // A fatal error in a nested probe: bail on out of this call too.
            // SAFETY: `r` is dropped; nothing on this closure's frame needs dropping.
            Err(Ended::Bailout) => unsafe { php_call::resume_bailout() },
            // exit() or a destroyed fiber in a nested probe: still pending, seen below.
            Err(_) => {}
        }
        Ok(Zval::new())
    });
    match ended {
        Ended::Returned(_) => Ok(inner.take().flatten()),
        Ended::Threw(_) | Ended::Failed(_) => Ok(None),
        stop => Err(stop),
    }
}
