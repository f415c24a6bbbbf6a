//! Everything the commands print to stdout goes through here (`outln!`, `out!`), so a reader
//! that goes away early (`checkout-guard peaks FILE | head -1`) ends the command quietly:
//! `println!` panicked on the closed pipe ("failed printing to stdout: Broken pipe").
//!
//! A closed stdout (EPIPE) is noted and later output is dropped; the command finishes what
//! it does besides printing (`replay --output FILE` still writes FILE), prints nothing
//! about it, and exits with [`CLOSED_STDOUT`], 141, the status a shell shows for a process
//! ended by SIGPIPE (`seq 1000000 | head -1` under `set -o pipefail`). Any other write
//! error (a full disk behind `> file`) is an error: named on stderr, exit status 2.
//!
//! SIGPIPE itself stays ignored (Rust's default): restoring it would kill the process on a
//! write to a Valkey Unix socket whose server went away, without the error it reports now.

use std::fmt;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

/// The exit status after stdout's reader went away: 128 + SIGPIPE (13).
pub const CLOSED_STDOUT: u8 = 141;

static CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away (a write failed with EPIPE).
pub fn closed() -> bool {
    CLOSED.load(Ordering::Relaxed)
}

/// What a failed write to stdout means: EPIPE is noted (`Ok`: the command goes on without
/// printing), anything else is the command's error.
pub fn check(e: io::Error) -> io::Result<()> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CLOSED.store(true, Ordering::Relaxed);
        Ok(())
    } else {
        Err(e)
    }
}

/// Writes `args` to stdout unless its reader went away; a write error other than EPIPE
/// ends the process with status 2, named.
pub fn print(args: fmt::Arguments<'_>) {
    if closed() {
        return;
    }
    let mut stdout = io::stdout().lock();
    // Flushed here, so an error is seen now, not lost in the flush at exit.
    let written = stdout.write_fmt(args).and_then(|()| stdout.flush());
    drop(stdout);
    if let Err(e) = written.or_else(check) {
        eprintln!("checkout-guard: writing to stdout: {e}");
        std::process::exit(2);
    }
}

/// `print!` to stdout through [`print`].
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!($($arg)*))
    };
}

/// `println!` to stdout through [`print`].
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::out::print(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};
