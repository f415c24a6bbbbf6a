//! Reading event files: plain or gzip-compressed (by their first bytes), or `-` for stdin,
//! line by line into one reused buffer, with a progress line on stderr at a terminal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, IsTerminal, Read, Write};
use std::time::{Duration, Instant};

use checkout_guard_cli::scan::{Accumulator, MAX_LINE_BYTES};
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

/// What takes the lines of a stream: the scan's [`Accumulator`], or the replay's reader.
pub trait LineSink {
    /// One line (without its newline); `n` is 1-based.
    fn line(&mut self, source: &str, n: u64, line: &[u8]);
    /// A line of `bytes` bytes, longer than `MAX_LINE_BYTES`, skipped unread.
    fn too_long(&mut self, source: &str, n: u64, bytes: u64);
}

impl LineSink for Accumulator {
    fn line(&mut self, source: &str, n: u64, line: &[u8]) {
        Accumulator::line(self, source, n, line)
    }
    fn too_long(&mut self, source: &str, n: u64, bytes: u64) {
        Accumulator::too_long(self, source, n, bytes)
    }
}

/// Every line of one file (or `-`, stdin; gzip detected) to `sink`, in order: how many.
pub fn feed_path<S: LineSink>(path: &str, sink: &mut S) -> io::Result<u64> {
    let named = |e: io::Error| {
        if e.to_string().starts_with(path) {
            e
        } else {
            io::Error::new(e.kind(), format!("{path}: {e}"))
        }
    };
    feed(open(path).map_err(named)?, path, sink, None).map_err(named)
}

/// Feeds every line of every file to the accumulator. A large plain file is split at line
/// boundaries and read by `threads` threads, each into its own accumulator, merged in
/// order (line numbers stay those of the file).
pub fn read_all(paths: &[String], acc: &mut Accumulator, threads: usize) -> io::Result<()> {
    let progress = io::stderr().is_terminal();
    let started = Instant::now();
    let mut total: u64 = 0;
    for path in paths {
        total += match splittable(path, threads)? {
            Some(len) => read_parallel(path, len, threads, acc, progress)?,
            None => feed(open(path)?, path, acc, progress.then_some((started, total)))?,
        };
    }
    if progress && total >= 65_536 {
        // "\x1b[K" clears what is left of the progress line.
        let _ = writeln!(
            io::stderr(),
            "\r\x1b[K{total} lines in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The size of a plain (not gzip) regular file worth splitting across threads.
fn splittable(path: &str, threads: usize) -> io::Result<Option<u64>> {
    if threads < 2 || path == "-" {
        return Ok(None);
    }
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if !meta.is_file() || meta.len() < 64 << 20 {
        return Ok(None);
    }
    let mut magic = [0u8; 2];
    let mut f = File::open(path)?;
    let _ = f.read(&mut magic)?;
    Ok((magic != [0x1f, 0x8b]).then_some(meta.len()))
}

fn read_parallel(
    path: &str,
    len: u64,
    threads: usize,
    acc: &mut Accumulator,
    progress: bool,
) -> io::Result<u64> {
    use std::io::{Seek, SeekFrom};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    // Range starts: after the first newline at or past each equal split point.
    let mut starts = vec![0u64];
    let mut f = File::open(path)?;
    for k in 1..threads as u64 {
        let mut at = len * k / threads as u64;
        f.seek(SeekFrom::Start(at))?;
        // Skipped, not read into memory: the line may be any length.
        at += BufReader::new(&mut f).skip_until(b'\n')? as u64;
        if at > *starts.last().expect("one") && at < len {
            starts.push(at);
        }
    }
    starts.push(len);
    // Bytes read by all threads, for the progress line.
    let read = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let parts: Vec<io::Result<(Accumulator, u64)>> = std::thread::scope(|scope| {
        let (read, done) = (&read, &done);
        if progress {
            scope.spawn(move || {
                let started = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(250));
                    let r = read.load(Ordering::Relaxed);
                    let _ = write!(
                        io::stderr(),
                        "\r{path}: {:.0}% ({:.0} MB/s, {threads} threads)   ",
                        r as f64 * 100.0 / len as f64,
                        r as f64 / 1e6 / started.elapsed().as_secs_f64()
                    );
                }
            });
        }
        let handles: Vec<_> = starts
            .windows(2)
            .map(|w| {
                let (from, to) = (w[0], w[1]);
                let mut part = acc.sibling();
                scope.spawn(move || -> io::Result<(Accumulator, u64)> {
                    let mut f = File::open(path)?;
                    f.seek(SeekFrom::Start(from))?;
                    let counted = Counting {
                        inner: f.take(to - from),
                        read,
                    };
                    let lines = feed(Box::new(counted), path, &mut part, None)?;
                    Ok((part, lines))
                })
            })
            .collect();
        let parts = handles
            .into_iter()
            .map(|h| h.join().expect("reader thread"))
            .collect();
        done.store(true, Ordering::Relaxed);
        parts
    });
    let mut offset = 0;
    for part in parts {
        let (part, lines) = part?;
        acc.merge(part, offset);
        offset += lines;
    }
    Ok(offset)
}

/// A reader that adds what it reads to a shared counter (progress of parallel reads).
struct Counting<'a, R> {
    inner: R,
    read: &'a std::sync::atomic::AtomicU64,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read
            .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads one stream to the end, feeding its lines (numbered from 1). Lines are cut in
/// place out of large blocks (no copy per line). A line longer than `MAX_LINE_BYTES` is
/// skipped as it streams by (never held) and counted as malformed, so memory stays one
/// block whatever the input. With `progress`, reports at a terminal.
fn feed<S: LineSink>(
    mut reader: Box<dyn Read + '_>,
    path: &str,
    acc: &mut S,
    progress: Option<(Instant, u64)>,
) -> io::Result<u64> {
    // Larger than the cap, so the rest of a line that fits it always fits the block.
    const BLOCK: usize = 8 << 20;
    let mut buf = vec![0u8; BLOCK];
    let mut last_report = Instant::now();
    let mut n: u64 = 0;
    let mut filled = 0; // bytes of buf holding data
                        // While inside a line longer than the cap: its bytes so far, none of them kept.
    let mut skipping: Option<u64> = None;
    let take = |acc: &mut S, n: u64, line: &[u8]| {
        if line.len() > MAX_LINE_BYTES {
            acc.too_long(path, n, line.len() as u64);
        } else {
            acc.line(path, n, line);
        }
    };
    loop {
        let got = reader.read(&mut buf[filled..])?;
        let eof = got == 0;
        filled += got;
        let mut start = 0;
        if let Some(skipped) = skipping {
            match memchr::memchr(b'\n', &buf[..filled]) {
                Some(end) => {
                    n += 1;
                    acc.too_long(path, n, skipped + end as u64);
                    start = end + 1;
                    skipping = None;
                }
                None if eof => {
                    n += 1;
                    acc.too_long(path, n, skipped + filled as u64);
                    return Ok(n);
                }
                None => {
                    skipping = Some(skipped + filled as u64);
                    filled = 0;
                    continue;
                }
            }
        }
        let from = start;
        for end in memchr::memchr_iter(b'\n', &buf[from..filled]) {
            let end = from + end;
            n += 1;
            take(acc, n, &buf[start..end]);
            start = end + 1;
        }
        if eof {
            if start < filled {
                n += 1;
                take(acc, n, &buf[start..filled]);
            }
            return Ok(n);
        }
        let rest = filled - start;
        if rest > MAX_LINE_BYTES {
            skipping = Some(rest as u64);
            filled = 0;
        } else {
            buf.copy_within(start..filled, 0);
            filled = rest;
        }
        if let Some((started, before)) = progress {
            if last_report.elapsed() > Duration::from_millis(250) {
                last_report = Instant::now();
                let secs = started.elapsed().as_secs_f64();
                let _ = write!(
                    io::stderr(),
                    "\r{path}: {n} lines ({:.1} M lines/s)   ",
                    (before + n) as f64 / secs / 1e6
                );
            }
        }
    }
}
