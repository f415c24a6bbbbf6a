//! Where events go. A sink writes a batch, or says how many of its events (the first ones)
//! reached it and why the rest did not; the buffer counts the outcome.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{ErrorKind, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::time::{Duration, Instant};

use super::event::Event;
use super::json::write_event_line;
use crate::store;
use checkout_guard_config::Endpoint;

pub trait Sink: Send {
    fn name(&self) -> &'static str;
    /// Writes every event of the batch, or returns how many of its first events reached
    /// the sink (the rest did not) and why.
    fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)>;
}

/// How long a JSONL write waits, in all, for the file's lock held by someone else (a worker
/// frozen mid-append, a tool that locks the file) before it drops its batch.
pub const JSONL_LOCK_WAIT: Duration = Duration::from_millis(20);

/// The longest pause between two tries of the lock.
const LOCK_RETRY: Duration = Duration::from_millis(1);

/// Appends JSON lines to a file. Each batch is one `write` under an exclusive `flock` on a
/// file opened with `O_APPEND`, so many php-fpm workers appending at once never interleave
/// or tear a line.
///
/// - The lock is tried without blocking, again and again (pauses of 50 µs to 1 ms), for at most
///   [`JSONL_LOCK_WAIT`]; then the batch is dropped ("lock held").
/// - A write cut short (a full disk, a file size limit) is cut back to its last whole line
///   (`ftruncate` to the length the file had plus the whole lines that made it): those are
///   counted as written, the rest as dropped.
/// - A file that does not end in a newline (someone else's torn tail) gets one before the
///   batch, so a torn line is never glued to a good one.
///
/// - The open, lock and write run on a writer thread of the sink's (one per process,
///   started on first use): a request waits for it at most [`JSONL_WRITE_WAIT`]. A write
///   that blocks in the kernel (a hung network mount, a disk that stalls: a regular file
///   ignores `O_NONBLOCK`, and a blocked `write()` cannot be interrupted) is then left to
///   the writer, its batch counted as dropped, and every batch while it is still blocked
///   dropped at once (no second wait). Once it returns, the next batch is written again. A
///   batch counted as dropped this way may still reach the file when the write returns.
pub struct JsonlSink {
    file: JsonlFile,
    /// How long a request waits for the writer thread.
    write_wait: Duration,
    writer: Option<Writer>,
}

/// What a writer thread writes to: the path and its lock's bound.
struct JsonlFile {
    path: String,
    lock_wait: Duration,
    /// A test's stand-in for a write that blocks in the kernel: the writer sleeps this
    /// long before it opens the file.
    #[cfg(test)]
    stall: Duration,
}

/// A batch's lines and the end (in `lines`) of each event's line.
struct Batch {
    lines: String,
    ends: Vec<usize>,
}

type Outcome = Result<(), (usize, String)>;

/// The writer thread of a [`JsonlSink`]: batches go in, outcomes come out, one at a time.
struct Writer {
    jobs: std::sync::mpsc::SyncSender<Batch>,
    done: std::sync::mpsc::Receiver<Outcome>,
    /// A batch handed over whose outcome the sink stopped waiting for, and since when.
    stuck_since: Option<Instant>,
    /// The fork generation that started the thread (a forked child has not got it).
    generation: u64,
}

/// How long a request waits for a JSONL batch to be written (open, lock and write, on the
/// sink's writer thread) before it counts the batch as dropped and goes on.
pub const JSONL_WRITE_WAIT: Duration = Duration::from_millis(250);

impl JsonlSink {
    pub fn new(path: impl Into<String>) -> Self {
        Self {
            file: JsonlFile {
                path: path.into(),
                lock_wait: JSONL_LOCK_WAIT,
                #[cfg(test)]
                stall: Duration::ZERO,
            },
            write_wait: JSONL_WRITE_WAIT,
            writer: None,
        }
    }

    /// The writer thread, started when there is none in this process; None when a thread
    /// cannot be started (then the batch is written on the caller's thread).
    fn writer(&mut self) -> Option<&mut Writer> {
        let generation = crate::process::generation();
        if self
            .writer
            .as_ref()
            .is_some_and(|w| w.generation != generation)
        {
            // Forked: the thread stayed in the parent. Its channels are only dropped.
            self.writer = None;
        }
        if self.writer.is_none() {
            let (jobs, job_rx) = std::sync::mpsc::sync_channel::<Batch>(1);
            let (done_tx, done) = std::sync::mpsc::sync_channel::<Outcome>(1);
            let file = JsonlFile {
                path: self.file.path.clone(),
                lock_wait: self.file.lock_wait,
                #[cfg(test)]
                stall: self.file.stall,
            };
            // Signals blocked: PHP's handlers need a PHP thread (connection's threads.rs).
            checkout_guard_connection::threads::spawn("cg-jsonl", move || {
                // Ends when the sink (its sender) is dropped.
                while let Ok(batch) = job_rx.recv() {
                    if done_tx.send(file.write(&batch)).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
            self.writer = Some(Writer {
                jobs,
                done,
                stuck_since: None,
                generation,
            });
        }
        self.writer.as_mut()
    }
}

impl JsonlFile {
    /// Tries the lock until `self.lock_wait` has passed, waiting 50 µs, then twice as long
    /// each time up to 1 ms, between tries (another worker's append takes microseconds).
    fn lock(&self, file: &File) -> Result<(), String> {
        let started = Instant::now();
        let mut pause = Duration::from_micros(50);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(()),
                Err(TryLockError::WouldBlock) => {
                    let waited = started.elapsed();
                    if waited >= self.lock_wait {
                        return Err(format!(
                            "lock held: {} stayed locked by another process for {} ms; batch dropped",
                            self.path,
                            self.lock_wait.as_millis()
                        ));
                    }
                    std::thread::sleep(pause.min(self.lock_wait - waited));
                    pause = (pause * 2).min(LOCK_RETRY);
                }
                Err(TryLockError::Error(e)) => return Err(format!("lock {}: {e}", self.path)),
            }
        }
    }

    /// Appends `lines` to the locked file; on a short write, cuts the file back to its last
    /// whole line. Returns how many events are in the file.
    fn append_locked(&self, file: &mut File, readable: bool, batch: &Batch) -> Outcome {
        let fail =
            |n: usize, what: &str, e: std::io::Error| (n, format!("{what} {}: {e}", self.path));
        let meta = file.metadata().map_err(|e| fail(0, "stat", e))?;
        // A pipe or a terminal (/dev/stderr) has no length to check or cut back to.
        let regular = meta.is_file();
        let mut len = meta.len();
        if regular && readable && len > 0 {
            let mut last = [0u8];
            file.read_exact_at(&mut last, len - 1)
                .map_err(|e| fail(0, "read", e))?;
            if last[0] != b'\n' {
                // Someone else's torn tail: ended here, so it stays one bad line.
                write_fully(file, b"\n").map_err(|(_, e)| fail(0, "write", e))?;
                len += 1;
            }
        }
        let bytes = batch.lines.as_bytes();
        if !regular {
            // A line at a time: a pipe takes a write of up to PIPE_BUF (4 KiB) whole or
            // not at all, so a full pipe leaves no torn line (a longer line may still be
            // cut: its reader sees one bad line).
            let mut start = 0;
            for (i, &end) in batch.ends.iter().enumerate() {
                if let Err((_, e)) = write_fully(file, &bytes[start..end]) {
                    return Err((
                        i,
                        format!(
                            "write {}: {e}; {i} of {} events written",
                            self.path,
                            batch.ends.len()
                        ),
                    ));
                }
                start = end;
            }
            return Ok(());
        }
        let Err((done, e)) = write_fully(file, bytes) else {
            return Ok(());
        };
        let whole = batch.ends.partition_point(|&end| end <= done);
        let keep = if whole == 0 { 0 } else { batch.ends[whole - 1] };
        if !regular || keep == done {
            return Err((
                whole,
                format!(
                    "write {}: {e}; {whole} of {} events written",
                    self.path,
                    batch.ends.len()
                ),
            ));
        }
        let why = match file.set_len(len + keep as u64) {
            Ok(()) => format!(
                "write {}: {e}; {whole} of {} events written, the file cut back to its last whole line",
                self.path,
                batch.ends.len()
            ),
            Err(cut) => format!(
                "write {}: {e}; {whole} of {} events written, and cutting back the torn line failed: {cut}",
                self.path,
                batch.ends.len()
            ),
        };
        Err((whole, why))
    }
}

/// Writes all of `bytes`, or says how many were written before the error.
fn write_fully(file: &mut File, bytes: &[u8]) -> Result<(), (usize, std::io::Error)> {
    let mut done = 0;
    while done < bytes.len() {
        match file.write(&bytes[done..]) {
            Ok(0) => return Err((done, ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err((done, e)),
        }
    }
    Ok(())
}

impl Sink for JsonlSink {
    fn name(&self) -> &'static str {
        "jsonl"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
        let mut batch = Batch {
            lines: String::new(),
            ends: Vec::with_capacity(events.len()),
        };
        for e in events {
            write_event_line(&mut batch.lines, e);
            batch.ends.push(batch.lines.len());
        }
        let wait = self.write_wait;
        let path = self.file.path.clone();
        let Some(w) = self.writer() else {
            return self.file.write(&batch);
        };
        if let Some(since) = w.stuck_since {
            match w.done.try_recv() {
                // The blocked write returned (its batch was counted as dropped already).
                Ok(_) => w.stuck_since = None,
                Err(std::sync::mpsc::TryRecvError::Empty) => {
                    return Err((
                        0,
                        format!(
                            "write {path}: the write before is still blocked after {} ms (a hung disk or mount?); batch dropped",
                            since.elapsed().as_millis()
                        ),
                    ))
                }
                Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                    self.writer = None;
                    return self.file.write(&batch);
                }
            }
        }
        if w.jobs.send(batch).is_err() {
            // The thread is gone (it cannot be: it ends only with the sink).
            self.writer = None;
            return Err((
                0,
                format!("write {path}: the writer thread ended; batch dropped"),
            ));
        }
        match w.done.recv_timeout(wait) {
            Ok(outcome) => outcome,
            Err(_) => {
                w.stuck_since = Some(Instant::now() - wait);
                Err((
                    0,
                    format!(
                        "write {path}: not done within {} ms (a hung disk or mount?); batch counted as dropped (it may still be written when the write returns)",
                        wait.as_millis()
                    ),
                ))
            }
        }
    }
}

impl JsonlFile {
    /// Opens, locks and appends `batch` (on the writer thread).
    fn write(&self, batch: &Batch) -> Outcome {
        #[cfg(test)]
        std::thread::sleep(self.stall);
        // Read too: the last byte tells whether the file ends with a whole line. A file
        // this process may only write to (or a pipe that cannot be reopened for reading)
        // is still written, without that check.
        let open = |read| {
            OpenOptions::new()
                .read(read)
                .append(true)
                .create(true)
                .open(&self.path)
        };
        // A path that is not a regular file (a log shipper's FIFO, /dev/stdout as a pipe)
        // is opened write-only and non-blocking: opened for reading too, this process
        // would be a reader of its own pipe (a batch nobody reads "written", and one larger
        // than the pipe blocked for ever); non-blocking, a FIFO without a reader refuses
        // the open (ENXIO) and a full pipe the write (EAGAIN): dropped and counted.
        let special = std::fs::metadata(&self.path).is_ok_and(|m| !m.is_file());
        let opened = if special {
            OpenOptions::new()
                .append(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&self.path)
                .map(|f| (f, false))
        } else {
            open(true)
                .map(|f| (f, true))
                .or_else(|_| open(false).map(|f| (f, false)))
        };
        let (mut file, readable) = match opened {
            Ok(f) => f,
            Err(e) => return Err((0, format!("open {}: {e}", self.path))),
        };
        self.lock(&file).map_err(|e| (0, e))?;
        let result = self.append_locked(&mut file, readable, batch);
        let _ = file.unlock();
        result
    }
}

/// XADDs each event to a Valkey stream as one field `event` holding the JSON object, with
/// an approximate MAXLEN; a batch is one pipelined round trip, bounded by the timeout, on
/// a pooled connection of its own (never the limiter's: a slow or refusing stream cannot
/// put the decisions' connection into back-off). Each XADD's reply is read: the entries
/// Valkey added are written, the ones it refused (maxmemory) or never answered dropped.
pub struct StreamSink {
    endpoint: Endpoint,
    key: String,
    maxlen: i64,
    timeout: Duration,
    retry_interval: Duration,
    line: String,
}

impl StreamSink {
    pub fn new(
        endpoint: Endpoint,
        key: String,
        maxlen: i64,
        timeout: Duration,
        retry_interval: Duration,
    ) -> Self {
        Self {
            endpoint,
            key,
            maxlen,
            timeout,
            retry_interval,
            line: String::new(),
        }
    }
}

impl Sink for StreamSink {
    fn name(&self) -> &'static str {
        "stream"
    }

    fn write(&mut self, events: &[Event]) -> Result<(), (usize, String)> {
        let mut pipe = redis::pipe();
        for e in events {
            self.line.clear();
            write_event_line(&mut self.line, e);
            pipe.cmd("XADD")
                .arg(&self.key)
                .arg("MAXLEN")
                .arg("~")
                .arg(self.maxlen)
                .arg("*")
                .arg(checkout_guard_model::events::STREAM_FIELD)
                .arg(self.line.trim_end());
        }
        let replies = store::pipeline(
            &self.endpoint,
            store::Pool::Events,
            self.timeout,
            self.retry_interval,
            &pipe,
        );
        // An entry ID for each entry added (a trim by MAXLEN does not change the reply);
        // an error reply for each refused.
        let mut written = 0;
        let mut refused = None;
        for v in &replies.values {
            match v {
                redis::Value::ServerError(e) => {
                    refused.get_or_insert_with(|| {
                        format!("XADD refused: {}", redis::RedisError::from(e.clone()))
                    });
                }
                _ => written += 1,
            }
        }
        let error = match (replies.error, refused) {
            (Some(e), _) => Some(e.to_string()),
            (None, Some(r)) => Some(r),
            (None, None) => None,
        };
        match error {
            None => Ok(()),
            Some(e) => Err((written, format!("{e} at {}", self.endpoint.display_url()))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::event::AttrValue;
    use std::process::Command;

    fn events(n: usize, pad: usize) -> Vec<Event> {
        (0..n)
            .map(|i| {
                let mut e = Event::new(b"CheckoutStep").unwrap();
                e.set("i", AttrValue::Int(i as i64));
                e.set("pad", AttrValue::Str("x".repeat(pad)));
                e
            })
            .collect()
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("cg-sink-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// Each line parsed: the `i` of every whole event; panics on a torn line.
    fn whole_lines(path: &std::path::Path) -> Vec<i64> {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "torn tail: {text:?}"
        );
        text.lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect(l);
                v["i"].as_i64().unwrap()
            })
            .collect()
    }

    #[test]
    fn a_lock_held_elsewhere_drops_the_batch_after_the_bound_and_writes_nothing() {
        let dir = temp_dir("lock");
        let path = dir.join("e.jsonl");
        let holder = File::create(&path).unwrap();
        holder.lock().unwrap(); // another open file description: flock conflicts with it
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        let started = Instant::now();
        let (written, why) = sink.write(&events(3, 0)).unwrap_err();
        let waited = started.elapsed();
        assert_eq!(written, 0);
        assert!(why.contains("lock held"), "{why}");
        assert!(waited >= JSONL_LOCK_WAIT, "{waited:?}");
        // A bound only a blocking wait crosses (the lock is never released here).
        assert!(waited < Duration::from_secs(2), "{waited:?}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
        holder.unlock().unwrap();
        sink.write(&events(2, 0)).unwrap();
        assert_eq!(whole_lines(&path), vec![0, 1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_released_within_the_bound_is_taken_and_the_batch_written() {
        let dir = temp_dir("lock-released");
        let path = dir.join("e.jsonl");
        let holder = File::create(&path).unwrap();
        holder.lock().unwrap();
        let released = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(3));
            holder.unlock().unwrap();
        });
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        // Generous, so a busy machine that runs the thread late does not fail the test.
        sink.file.lock_wait = Duration::from_secs(5);
        sink.write(&events(2, 0)).unwrap();
        released.join().unwrap();
        assert_eq!(whole_lines(&path), vec![0, 1]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_write_that_blocks_is_waited_for_at_most_the_bound_and_the_batches_behind_it_dropped_at_once(
    ) {
        let dir = temp_dir("stall");
        let path = dir.join("e.jsonl");
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        sink.write_wait = Duration::from_millis(100);
        // The stand-in for a write blocked in the kernel (a hung mount): the writer thread
        // sleeps before it opens the file.
        sink.file.stall = Duration::from_millis(1500);
        let started = Instant::now();
        let (written, why) = sink.write(&events(2, 0)).unwrap_err();
        let waited = started.elapsed();
        assert_eq!(written, 0);
        assert!(why.contains("not done within 100 ms"), "{why}");
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        // Only a wait for the blocked write itself crosses this (1.5 s).
        assert!(waited < Duration::from_millis(1000), "{waited:?}");
        // While it is still blocked: dropped at once, no second wait.
        let started = Instant::now();
        let (written, why) = sink.write(&events(1, 0)).unwrap_err();
        assert_eq!(written, 0);
        assert!(why.contains("still blocked"), "{why}");
        assert!(
            started.elapsed() < Duration::from_millis(90),
            "{:?}",
            started.elapsed()
        );
        // The blocked write returns (its batch lands: counted as dropped, said so); the
        // next batch is written and waited for again.
        let deadline = Instant::now() + Duration::from_secs(10);
        while whole_lines(&path).len() < 2 {
            assert!(
                Instant::now() < deadline,
                "the blocked write never returned"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // The writer's next batch stalls too: give it the time to finish.
        sink.write_wait = Duration::from_secs(10);
        sink.write(&events(3, 0)).unwrap();
        assert_eq!(whole_lines(&path), vec![0, 1, 0, 1, 2]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_device_is_written_without_a_tail_check() {
        JsonlSink::new("/dev/null").write(&events(3, 0)).unwrap();
    }

    #[test]
    fn a_torn_tail_left_by_someone_else_is_ended_before_the_batch() {
        let dir = temp_dir("torn");
        let path = dir.join("e.jsonl");
        std::fs::write(&path, "{\"i\":7}\n{\"eventType\":\"Ch").unwrap();
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        sink.write(&events(2, 0)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[1], "{\"eventType\":\"Ch");
        assert!(
            lines[2].contains("\"i\":0") && lines[3].contains("\"i\":1"),
            "{text}"
        );
        assert!(text.ends_with('\n'));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A 64 KB tmpfs, unmounted on drop; None (the test says why it skips) when not root.
    struct SmallDisk(std::path::PathBuf);

    impl SmallDisk {
        fn mount(name: &str) -> Option<Self> {
            if unsafe { libc::geteuid() } != 0 {
                eprintln!("SKIPPED: mounting a small tmpfs needs root");
                return None;
            }
            let dir = temp_dir(name);
            let ok = Command::new("mount")
                .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
                .arg(&dir)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                eprintln!("SKIPPED: cannot mount a tmpfs on {}", dir.display());
                return None;
            }
            Some(SmallDisk(dir))
        }
    }

    impl Drop for SmallDisk {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_full_disk_keeps_the_whole_lines_that_made_it_counts_them_and_cuts_the_torn_one() {
        let Some(disk) = SmallDisk::mount("full") else {
            return;
        };
        let path = disk.0.join("e.jsonl");
        let filler = disk.0.join("filler");
        std::fs::write(&filler, vec![b'f'; 32 * 1024]).unwrap();
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        let (written, why) = sink.write(&events(200, 250)).unwrap_err();
        assert!(written > 0 && written < 200, "{written}: {why}");
        assert!(why.contains("No space left"), "{why}");
        assert_eq!(whole_lines(&path), (0..written as i64).collect::<Vec<_>>());
        std::fs::remove_file(&filler).unwrap();
        sink.write(&events(3, 0)).unwrap();
        let mut expected: Vec<i64> = (0..written as i64).collect();
        expected.extend([0, 1, 2]);
        assert_eq!(whole_lines(&path), expected);
    }
}
