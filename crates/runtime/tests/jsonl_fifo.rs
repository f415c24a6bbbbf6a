//! The JSONL sink on a path that is a FIFO (a log shipper's named pipe).
//! The sink opens the path read-write (to check the file's last byte), so on a FIFO this
//! process becomes a reader of its own pipe: with no other reader (the shipper is down or
//! restarting) a batch is "written" into the pipe's buffer and discarded when the sink
//! closes it, counted as written; a batch larger than the pipe buffer blocks the request
//! end for ever (only this process could read it). Expected: a FIFO without a reader is
//! an error (counted as dropped), as `open(O_WRONLY|O_NONBLOCK)` says (ENXIO), and never
//! a wait beyond the sink's bound.

use checkout_guard_runtime::telemetry::{AttrValue, Event, JsonlSink, Sink};
use std::sync::mpsc;
use std::time::Duration;

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

fn fifo(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("cg-attack2-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("events.fifo");
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a plain mkfifo on a fresh path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    path
}

#[test]
fn a_fifo_without_a_reader_counts_the_batch_as_dropped() {
    let path = fifo("small");
    let mut sink = JsonlSink::new(path.to_str().unwrap());
    // Nobody reads the pipe: these 3 events can reach no one.
    let r = sink.write(&events(3, 0));
    assert!(
        r.is_err(),
        "3 events into a FIFO nobody reads were counted as written (and are gone)"
    );
}

#[test]
fn a_fifo_without_a_reader_never_blocks_the_request_end() {
    let path = fifo("big");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sink = JsonlSink::new(path.to_str().unwrap());
        // 200 events of ~1 KiB: more than a pipe's 64 KiB buffer.
        let r = sink.write(&events(200, 1000));
        let _ = tx.send(r.map_err(|(n, _)| n));
    });
    // Generous: the sink's own bound is 20 ms.
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(r) => assert!(r.is_err(), "written into a FIFO nobody reads: {r:?}"),
        Err(_) => panic!("JsonlSink::write on a FIFO without a reader still blocked after 10 s"),
    }
}

#[test]
fn a_fifo_with_a_reader_gets_every_line() {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let path = fifo("read");
    // The reader opens first (non-blocking, so the open does not wait for a writer).
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&path)
        .unwrap();
    let mut sink = JsonlSink::new(path.to_str().unwrap());
    assert!(sink.write(&events(3, 10)).is_ok());
    let mut got = String::new();
    reader.read_to_string(&mut got).unwrap();
    let lines: Vec<_> = got.lines().collect();
    assert_eq!(lines.len(), 3, "{got:?}");
    assert!(lines.iter().all(|l| l.starts_with('{') && l.ends_with('}')));
}
