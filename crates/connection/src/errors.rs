//! What a failed command's error means, and how a failure is shown.
//!
//! The tests for what a reply means read the error's text, as Valkey writes it
//! (`ERR unknown command`, `NOPERM`, `ERR wrong number of arguments`): redis-rs gives most
//! of these no kind of their own.

use std::time::Duration;

use redis::{ErrorKind, RedisError};

/// Valkey answered with an error: the connection is still in step and is kept (a broken
/// or timed-out connection is not, its stream may hold a late reply).
pub fn is_reply_error(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// The server does not know the command (`ERR unknown command 'CG.DECIDE'`): a module
/// not loaded, unloaded, or a cluster node not upgraded.
pub fn is_missing_command(e: &RedisError) -> bool {
    text(e).contains("unknown command")
}

/// The connection's ACL user may not run the command (`NOPERM`).
pub fn is_denied_by_acl(e: &RedisError) -> bool {
    text(e).contains("noperm")
}

/// The server's command takes another number of arguments than was sent
/// (`ERR wrong number of arguments`): another build's command of the same name.
pub fn is_wrong_arity(e: &RedisError) -> bool {
    text(e).contains("wrong number of arguments")
}

/// A demoted primary (now a replica) refused a write (`READONLY You can't write against
/// a read only replica.`): the connection is to the wrong server and is dropped as a
/// broken one, so the next open asks the sentinels again.
pub fn is_readonly(e: &RedisError) -> bool {
    is_reply_error(e) && text(e).starts_with("readonly")
        || e.code().is_some_and(|c| c.eq_ignore_ascii_case("READONLY"))
}

/// A Sentinel endpoint's primary found demoted by [`crate::Connection::check_still_primary`]
/// (`ROLE` answered `slave`): the connection is to the wrong server, as with `READONLY`, and
/// the read-only `ROLE` that found it changed nothing, so the call may run again on a new
/// connection.
pub fn demoted(at: &str, role: &str) -> RedisError {
    std::io::Error::other(format!(
        "sentinel: the primary {at} is now a replica (ROLE {role})"
    ))
    .into()
}

/// The error of [`demoted`].
pub fn is_demoted(e: &RedisError) -> bool {
    let t = e.to_string();
    t.contains("sentinel: the primary ") && t.contains(" is now a replica (ROLE ")
}

fn text(e: &RedisError) -> String {
    e.to_string().to_ascii_lowercase()
}

/// A failure as `health()['last_error']` shows it: a timeout says so, with the timeout
/// that ran out (the OS says "Resource temporarily unavailable").
pub fn describe(e: &RedisError, timeout: Duration) -> String {
    if e.is_timeout() {
        format!("timed out after {} ms", timeout.as_millis())
    } else {
        // One line: a parse error's text spans several, and a cause goes into log lines
        // and exception messages.
        e.to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// The error of a call whose deadline passed before it could send (or read) anything more.
pub fn timed_out() -> RedisError {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "timed out").into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> RedisError {
        // As redis-rs reads an error reply off the wire.
        let wire = format!("-{text}\r\n");
        match redis::parse_redis_value(wire.as_bytes()) {
            Ok(redis::Value::ServerError(e)) => e.into(),
            other => panic!("{text}: {other:?}"),
        }
    }

    /// Each test matches what it names and nothing else: a module that is not loaded, an
    /// ACL that denies it and another build's arity are three different answers (the
    /// engine choice treats all three as "the module cannot be used", by name).
    #[test]
    fn each_reply_is_classified_by_what_it_says() {
        let cases = [
            (
                "ERR unknown command 'CG.DECIDE', with args beginning with: ",
                (true, false, false),
            ),
            (
                "NOPERM User app has no permissions to run the 'cg.decide' command",
                (false, true, false),
            ),
            (
                "ERR wrong number of arguments for 'cg.decide' command",
                (false, false, true),
            ),
            (
                "OOM command not allowed when used memory > 'maxmemory'.",
                (false, false, false),
            ),
            (
                "READONLY You can't write against a read only replica.",
                (false, false, false),
            ),
        ];
        for (text, want) in cases {
            let e = reply(text);
            assert!(is_reply_error(&e), "{text}");
            let got = (
                is_missing_command(&e),
                is_denied_by_acl(&e),
                is_wrong_arity(&e),
            );
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn readonly_from_a_demoted_primary_is_told_apart() {
        assert!(is_readonly(&reply(
            "READONLY You can't write against a read only replica."
        )));
        for other in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "ERR unknown command 'READONLY'",
        ] {
            assert!(!is_readonly(&reply(other)), "{other}");
        }
        assert!(!is_readonly(&timed_out()));
    }

    #[test]
    fn a_broken_or_slow_connection_is_not_a_reply() {
        for e in [
            timed_out(),
            RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ] {
            assert!(!is_reply_error(&e), "{e}");
        }
    }

    /// A cause is one line (it goes into log lines and exception messages): a parse
    /// error's text spans several (adversarial review).
    #[test]
    fn a_cause_is_described_on_one_line() {
        let e = redis::parse_redis_value(b"?garbled\r\n").unwrap_err();
        assert!(e.to_string().contains('\n'), "the case: {e}");
        let d = describe(&e, Duration::from_millis(50));
        assert!(!d.contains('\n') && !d.is_empty(), "{d}");
    }

    #[test]
    fn a_timeout_is_described_with_the_timeout_that_ran_out() {
        let slow = RedisError::from(std::io::Error::from(std::io::ErrorKind::WouldBlock));
        assert_eq!(
            describe(&slow, Duration::from_millis(50)),
            "timed out after 50 ms"
        );
        assert_eq!(
            describe(&timed_out(), Duration::from_millis(7)),
            "timed out after 7 ms"
        );
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(
            describe(&refused, Duration::from_millis(50)),
            refused.to_string()
        );
    }
}
