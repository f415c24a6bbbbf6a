//! Reading event files: plain or gzip-compressed (by their first bytes), or `-` for stdin,
//! line by line into one reused buffer, with a progress line on stderr at a terminal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::time::{Duration, Instant};

use checkout_guard_core::scan::Accumulator;
use flate2::read::MultiGzDecoder;

fn open(path: &str) -> io::Result<Box<dyn BufRead>> {
    let raw: Box<dyn Read> = if path == "-" {
        Box::new(io::stdin().lock())
    } else {
        Box::new(File::open(path).map_err(|e| io::Error::new(e.kind(), format!("{path}: {e}")))?)
    };
    let mut buffered = BufReader::with_capacity(1 << 20, raw);
    let gz = buffered.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    Ok(if gz {
        Box::new(BufReader::with_capacity(
            1 << 20,
            MultiGzDecoder::new(buffered),
        ))
    } else {
        Box::new(buffered)
    })
}

/// Feeds every line of every file to the accumulator. Lines are cut in place out of large
/// blocks (no copy per line); a line longer than a block grows the buffer.
pub fn read_all(paths: &[String], acc: &mut Accumulator) -> io::Result<()> {
    const BLOCK: usize = 8 << 20;
    let progress = io::stderr().is_terminal();
    let started = Instant::now();
    let mut last_report = Instant::now();
    let mut total: u64 = 0;
    let mut buf = vec![0u8; BLOCK];
    for path in paths {
        let mut reader = open(path)?;
        let mut n: u64 = 0;
        let mut filled = 0; // bytes of buf holding data
        loop {
            if filled == buf.len() {
                buf.resize(buf.len() * 2, 0);
            }
            let got = reader.read(&mut buf[filled..])?;
            let eof = got == 0;
            filled += got;
            let mut start = 0;
            for end in memchr::memchr_iter(b'\n', &buf[..filled]) {
                n += 1;
                acc.line(path, n, &buf[start..end]);
                start = end + 1;
            }
            if eof {
                if start < filled {
                    n += 1;
                    acc.line(path, n, &buf[start..filled]);
                }
                break;
            }
            buf.copy_within(start..filled, 0);
            filled -= start;
            if progress && last_report.elapsed() > Duration::from_millis(250) {
                last_report = Instant::now();
                let secs = started.elapsed().as_secs_f64();
                let _ = write!(
                    io::stderr(),
                    "\r{path}: {n} lines ({:.1} M lines/s)   ",
                    (total + n) as f64 / secs / 1e6
                );
            }
        }
        total += n;
    }
    if progress && total >= 65_536 {
        let _ = writeln!(
            io::stderr(),
            "\r{total} lines in {:.1} s{:20}",
            started.elapsed().as_secs_f64(),
            ""
        );
    }
    Ok(())
}
