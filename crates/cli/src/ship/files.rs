//! The JSONL file source: the `jsonl` sink's files, plain or gzip (rotated ones too),
//! with a checkpoint of how far each file was delivered.
//!
//! A file is known by its first line (a hash of it: the first event's timestamp and
//! attributes), not by its name, so `events.jsonl` renamed to `events.jsonl.1` and then
//! compressed to `events.jsonl.1.gz` is the same file and resumes where it was; a new
//! `events.jsonl` is a new file. Offsets count the uncompressed bytes. An event's id is
//! `<file>:<offset of its line>`, the same in every run.
//!
//! The checkpoint (a JSON file, replaced atomically: written beside, synced, renamed)
//! holds per file the offset delivered up to and the offset taken up to: entries between
//! the two were taken by a run that did not learn their fate (killed mid-batch), so they
//! may be at the destination already and count as taken again. A line not yet ended by
//! a newline in a plain file is a line still being written: it waits.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};

use super::stream::Entry;
use super::Source;

/// FNV-1a, 64 bits: a file's identity from its first line (stable across Rust versions
/// and machines, unlike std's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn is_gzip(path: &Path) -> Result<bool, String> {
    let mut magic = [0u8; 2];
    let mut f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    match f.read_exact(&mut magic) {
        Ok(()) => Ok(magic == [0x1f, 0x8b]),
        Err(_) => Ok(false),
    }
}

/// A file's reader and whether it is gzip.
type Opened = (Box<dyn BufRead>, bool);

fn open(path: &Path) -> Result<Opened, String> {
    let gz = is_gzip(path)?;
    let f = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(if gz {
        (
            Box::new(BufReader::with_capacity(
                256 * 1024,
                flate2::read::MultiGzDecoder::new(f),
            )),
            true,
        )
    } else {
        (Box::new(BufReader::with_capacity(256 * 1024, f)), false)
    })
}

/// `path` opened at `offset` uncompressed bytes: a plain file by a seek, a gzip one by
/// reading through. `Ok(None)`: the file is shorter than `offset`.
fn open_at(path: &Path, offset: u64) -> Result<Option<Opened>, String> {
    let gz = is_gzip(path)?;
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    if !gz {
        let mut f = File::open(path).map_err(err)?;
        if f.metadata().map_err(err)?.len() < offset {
            return Ok(None);
        }
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(offset)).map_err(err)?;
        return Ok(Some((
            Box::new(BufReader::with_capacity(256 * 1024, f)),
            false,
        )));
    }
    let (mut r, _) = open(path)?;
    let skipped = std::io::copy(&mut r.by_ref().take(offset), &mut std::io::sink()).map_err(err)?;
    Ok((skipped == offset).then_some((r, true)))
}

/// The most of a first line a file is known by.
const IDENTITY_BYTES: u64 = 1 << 20;

/// The identity of the file at `path`: its first line (or, for a first line longer than
/// 1 MiB, its first MiB, which no later write changes); `None` while a plain file holds
/// neither.
fn identity(path: &Path) -> Result<Option<String>, String> {
    let (mut r, gz) = open(path)?;
    let mut first = Vec::new();
    let mut read = 0u64;
    // The first line that is not blank (blank lines would make every such file one).
    loop {
        first.clear();
        let n = r
            .by_ref()
            .take(IDENTITY_BYTES)
            .read_until(b'\n', &mut first)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        read += n as u64;
        let blank = first.iter().all(u8::is_ascii_whitespace) && first.ends_with(b"\n");
        if n == 0 || !blank || read >= IDENTITY_BYTES {
            break;
        }
    }
    let complete = first.ends_with(b"\n") || first.len() as u64 == IDENTITY_BYTES;
    if read >= IDENTITY_BYTES && first.iter().all(u8::is_ascii_whitespace) {
        // A MiB of blank lines first: known by them (no later write changes them).
        return Ok(Some(
            format!("{:016x}", fnv1a(b"blank")) + &format!("{read:x}"),
        ));
    }
    if first.iter().all(u8::is_ascii_whitespace) || (!gz && !complete) {
        return Ok(None);
    }
    Ok(Some(format!("{:016x}", fnv1a(&first))))
}

#[derive(Default, Clone, Debug)]
struct Mark {
    path: String,
    /// Delivered (or dead-lettered) up to here.
    done: u64,
    /// Taken up to here by some run.
    taken: u64,
}

struct Reader {
    ident: String,
    path: PathBuf,
    reader: Box<dyn BufRead>,
    gz: bool,
    offset: u64,
}

pub struct FileSource {
    paths: Vec<PathBuf>,
    checkpoint: PathBuf,
    marks: BTreeMap<String, Mark>,
    readers: Vec<Reader>,
    /// The last batch taken: per file its end offset (acknowledged together).
    batch_ends: Vec<(String, u64)>,
    /// The first not yet delivered event's timestamp (ms), for the lag.
    oldest_ms: Option<f64>,
    /// Files whose last read failed this round (what, why).
    unreadable: Vec<String>,
    /// Held while the shipper runs: one shipper per checkpoint.
    _lock: File,
}

impl FileSource {
    pub fn new(paths: Vec<PathBuf>, checkpoint: PathBuf) -> Result<Self, String> {
        if paths.is_empty() {
            return Err("--files needs at least one path".into());
        }
        let marks = match std::fs::read(&checkpoint) {
            Ok(b) => parse_checkpoint(&b)
                .map_err(|e| format!("--checkpoint {}: {e}", checkpoint.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(format!("--checkpoint {}: {e}", checkpoint.display())),
        };
        // Said now, not at the first batch: a checkpoint that cannot be written loses nothing
        // but repeats everything.
        let dir = checkpoint
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            return Err(format!(
                "--checkpoint {}: {} is not a directory",
                checkpoint.display(),
                dir.display()
            ));
        }
        // One shipper per checkpoint: two would each deliver every file.
        let lock_path = PathBuf::from(format!("{}.lock", checkpoint.display()));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| {
                format!(
                    "--checkpoint {}: {}: {e}",
                    checkpoint.display(),
                    lock_path.display()
                )
            })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(format!(
                    "--checkpoint {}: another shipper holds it ({} is locked): one shipper per checkpoint",
                    checkpoint.display(),
                    lock_path.display()
                ))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(format!("--checkpoint {}: {}: {e}", checkpoint.display(), lock_path.display()))
            }
        }
        Ok(Self {
            paths,
            checkpoint,
            marks,
            readers: Vec::new(),
            batch_ends: Vec::new(),
            oldest_ms: None,
            unreadable: Vec::new(),
            _lock: lock,
        })
    }

    fn save(&self) -> Result<(), String> {
        let files: serde_json::Map<String, Value> = self
            .marks
            .iter()
            .map(|(k, m)| {
                (
                    k.clone(),
                    json!({"path": m.path, "delivered": m.done, "taken": m.taken}),
                )
            })
            .collect();
        let text = json!({"version": 1, "files": files}).to_string();
        let tmp = PathBuf::from(format!(
            "{}.{}.tmp",
            self.checkpoint.display(),
            std::process::id()
        ));
        let write = || -> Result<(), String> {
            let at = |what: &str, p: &Path, e: std::io::Error| {
                format!(
                    "--checkpoint {}: {what} {}: {e}",
                    self.checkpoint.display(),
                    p.display()
                )
            };
            let mut f = File::create(&tmp).map_err(|e| at("creating", &tmp, e))?;
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(|e| at("writing", &tmp, e))?;
            std::fs::rename(&tmp, &self.checkpoint).map_err(|e| at("renaming to it", &tmp, e))
        };
        write().inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
    }

    /// Opens the files not open yet (or whose path now holds another file, and whose old
    /// file was read to its end): each from its checkpoint.
    fn refresh(&mut self) -> Result<(), String> {
        let mut seen = Vec::new();
        for path in self.paths.clone() {
            let Some(ident) = (match identity(&path) {
                Ok(i) => i,
                // A file rotated away between two looks: found again under its new name.
                Err(_) if !path.exists() => None,
                Err(e) => return Err(e),
            }) else {
                continue;
            };
            seen.push(ident.clone());
            if self.readers.iter().any(|r| r.ident == ident) {
                continue;
            }
            let mark = self.marks.entry(ident.clone()).or_default();
            mark.path = path.display().to_string();
            let start = mark.done;
            // Past what was delivered (uncompressed bytes).
            let (reader, gz) = match open_at(&path, start)? {
                Some(r) => r,
                None => {
                    // Shorter than its checkpoint: truncated and written again.
                    eprintln!(
                        "checkout-guard ship: {} is shorter than what was delivered of it ({start} bytes): read again from its start",
                        path.display()
                    );
                    mark.done = 0;
                    mark.taken = 0;
                    open(&path)?
                }
            };
            let offset = mark.done;
            self.readers.push(Reader {
                ident,
                path,
                reader,
                gz,
                offset,
            });
        }
        // A file no path names any more (rotated out of the list, deleted): closed.
        self.readers.retain(|r| seen.contains(&r.ident));
        Ok(())
    }
}

fn parse_checkpoint(b: &[u8]) -> Result<BTreeMap<String, Mark>, String> {
    let v: Value = serde_json::from_slice(b).map_err(|e| format!("not a checkpoint: {e}"))?;
    let files = v["files"].as_object().ok_or("not a checkpoint: no files")?;
    files
        .iter()
        .map(|(k, m)| {
            let n = |f: &str| {
                m[f].as_u64()
                    .ok_or_else(|| format!("not a checkpoint: {k}.{f}"))
            };
            Ok((
                k.clone(),
                Mark {
                    path: m["path"].as_str().unwrap_or("").to_string(),
                    done: n("delivered")?,
                    taken: n("taken")?,
                },
            ))
        })
        .collect()
}

impl Source for FileSource {
    fn describe(&self) -> String {
        format!(
            "{} file(s) ({}...), checkpoint {}",
            self.paths.len(),
            self.paths[0].display(),
            self.checkpoint.display()
        )
    }

    fn take(&mut self, count: usize, block: Option<Duration>) -> Result<Vec<Entry>, String> {
        let before: Vec<(String, u64)> = self
            .marks
            .iter()
            .map(|(k, m)| (k.clone(), m.taken))
            .collect();
        let taken = self.take_inner(count, block);
        if taken.is_err() {
            // Nothing of this round is lost: the files are opened again at what was
            // delivered, and what was read this round is read again next time.
            self.readers.clear();
            self.batch_ends.clear();
            for (k, t) in before {
                if let Some(m) = self.marks.get_mut(&k) {
                    m.taken = t;
                }
            }
        }
        taken
    }

    fn ack(&mut self, _ids: &[String]) -> Result<(), String> {
        for (ident, end) in self.batch_ends.drain(..) {
            if let Some(m) = self.marks.get_mut(&ident) {
                m.done = m.done.max(end);
            }
        }
        self.oldest_ms = None;
        self.save()
    }

    /// The oldest event of the batch in hand, else the next line not yet taken of each
    /// open file (read from its buffer, not consumed): its timestamp's age.
    fn lag_ms(&mut self) -> Result<u64, String> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_millis() as f64);
        let oldest = self.oldest_ms.or_else(|| {
            self.readers
                .iter_mut()
                .filter_map(|r| {
                    let buf = r.reader.fill_buf().ok()?;
                    let line = &buf[..memchr::memchr(b'\n', buf)?];
                    serde_json::from_slice::<Value>(line)
                        .ok()?
                        .get("timestamp")?
                        .as_f64()
                })
                .reduce(f64::min)
        });
        Ok(oldest.map_or(0, |t| (now - t).max(0.0) as u64))
    }

    fn trimmed(&self) -> u64 {
        0
    }

    fn unfinished(&self) -> Option<String> {
        (!self.unreadable.is_empty()).then(|| {
            format!(
                "not read to their end (read again next run): {}",
                self.unreadable.join("; ")
            )
        })
    }
}

impl FileSource {
    fn take_inner(&mut self, count: usize, block: Option<Duration>) -> Result<Vec<Entry>, String> {
        self.refresh()?;
        let mut out = Vec::new();
        self.batch_ends.clear();
        self.unreadable.clear();
        let mut bytes = 0usize;
        let mut broken = Vec::new();
        for r in &mut self.readers {
            let mark = self.marks.get_mut(&r.ident).expect("a mark per open file");
            let mut line = Vec::new();
            let mut read_any = false;
            while out.len() < count && bytes < super::MAX_BATCH_BYTES {
                line.clear();
                let n = match r.reader.read_until(b'\n', &mut line) {
                    Ok(n) => n,
                    Err(e) => {
                        // A gzip file still being compressed, a disk error: this file is
                        // left for now (opened again next round at what was read of it);
                        // the others go on.
                        eprintln!(
                            "checkout-guard ship: {}: {e} (read again later)",
                            r.path.display()
                        );
                        self.unreadable.push(format!("{}: {e}", r.path.display()));
                        broken.push(r.ident.clone());
                        break;
                    }
                };
                if n == 0 {
                    break;
                }
                if !line.ends_with(b"\n") && !r.gz {
                    // Still being written: this line waits (read again from its start).
                    match open_at(&r.path, r.offset)? {
                        Some((reader, _)) => r.reader = reader,
                        None => broken.push(r.ident.clone()),
                    }
                    break;
                }
                let at = r.offset;
                r.offset += n as u64;
                read_any = true;
                let text = line.strip_suffix(b"\n").unwrap_or(&line);
                let text = text.strip_suffix(b"\r").unwrap_or(text);
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let event = match serde_json::from_slice::<Value>(text) {
                    Ok(Value::Object(m)) => Ok(m),
                    Ok(_) => Err("the line is not a JSON object".to_string()),
                    Err(e) => Err(format!("the line is not JSON: {e}")),
                };
                bytes += n;
                let raw = event.is_err().then(|| super::raw_text(text));
                out.push(Entry {
                    id: format!("{}:{at}", r.ident),
                    event,
                    again: at < mark.taken,
                    trimmed: false,
                    size: n,
                    raw,
                });
            }
            if read_any {
                mark.taken = mark.taken.max(r.offset);
                self.batch_ends.push((r.ident.clone(), r.offset));
            }
            if out.len() >= count {
                break;
            }
        }
        self.readers.retain(|r| !broken.contains(&r.ident));
        self.oldest_ms = out
            .iter()
            .find_map(|e| e.event.as_ref().ok()?.get("timestamp")?.as_f64());
        if !self.batch_ends.is_empty() {
            // What this run takes is marked before it is sent: a run killed now leaves the
            // next one knowing these may be at the destination already.
            self.save()?;
        } else if let Some(b) = block {
            std::thread::sleep(b);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function() {
        // FNV-1a 64 test vectors.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
