//! The flush log's files: one **segment** per window (the commits between two
//! materializations), `wal/<window as 16 hex digits>.log` inside the store's directory.
//!
//! A flush appends ONE record to the current segment and syncs it (`fdatasync`): `payload
//! length (u32 LE) · CRC-32 of the payload (u32 LE) · payload` (the payload is the log entries
//! of every commit since the previous flush, see `entries`). A crash in the middle of an
//! append leaves a torn record at the end of the last segment: it held only commits no flush
//! returned for, so reading stops there and the next append first cuts it off. Anything else
//! that does not read back (a bad checksum followed by more records, a torn record in a
//! segment that a later one follows: every segment is synced whole before the next one
//! starts) is corruption, and the store refuses to open rather than lose commits.
//!
//! The directory itself is synced when a segment is created or removed, so a segment a flush
//! wrote to survives a crash with its name.

use crate::error::{BackendErrorKind, StoreError};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// Bytes before a record's payload: its length and its checksum.
const HEADER: usize = 8;

/// The segments' directory inside the store's directory.
pub(super) fn dir_of(store: &Path) -> PathBuf {
    store.join("wal")
}

fn name(window: u64) -> String {
    format!("{window:016x}.log")
}

fn window_of(file_name: &str) -> Option<u64> {
    let hex = file_name.strip_suffix(".log")?;
    match hex.len() == 16 {
        true => u64::from_str_radix(hex, 16).ok(),
        false => None,
    }
}

pub(super) fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Backend {
        backend: "sled",
        kind: BackendErrorKind::Io,
        detail: format!("flush log: {what} {}: {e}", path.display()),
    }
}

fn corrupt(detail: String) -> StoreError {
    StoreError::Corrupt {
        space: "flush log",
        detail,
    }
}

/// The windows that have a segment in `dir`, oldest first (none when `dir` does not exist).
pub(super) fn windows(dir: &Path) -> Result<Vec<u64>, StoreError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error("list", dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error("list", dir, e))?;
        if let Some(w) = entry.file_name().to_str().and_then(window_of) {
            out.push(w);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// One segment as read back: its records' payloads, and where a torn record at its end
/// begins (`None`: it ends on a whole record).
pub(super) struct Segment {
    pub records: Vec<Vec<u8>>,
    pub torn_at: Option<u64>,
}

/// Reads the segment of `window`. A record that does not read back is torn when nothing but
/// a cut record can explain it (it runs past the end of the file); a bad checksum is torn
/// only at the very end of the file, corruption otherwise.
pub(super) fn read(dir: &Path, window: u64) -> Result<Segment, StoreError> {
    let path = dir.join(name(window));
    let mut bytes = Vec::new();
    File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut bytes))
        .map_err(|e| io_error("read", &path, e))?;
    let mut records = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let header = rest.get(..HEADER).and_then(|h| {
            let len = u32::from_le_bytes(h.get(..4)?.try_into().ok()?) as usize;
            let crc = u32::from_le_bytes(h.get(4..)?.try_into().ok()?);
            Some((len, crc))
        });
        let Some((len, crc)) = header else {
            return Ok(Segment {
                records,
                torn_at: Some(at as u64),
            });
        };
        let Some(payload) = rest.get(HEADER..HEADER + len) else {
            return Ok(Segment {
                records,
                torn_at: Some(at as u64),
            });
        };
        if crc32fast::hash(payload) != crc {
            if at + HEADER + len == bytes.len() {
                // the last record, written but not synced when the process died
                return Ok(Segment {
                    records,
                    torn_at: Some(at as u64),
                });
            }
            return Err(corrupt(format!(
                "segment {} has a bad checksum at byte {at}, with records after it",
                name(window)
            )));
        }
        records.push(payload.to_vec());
        at += HEADER + len;
    }
    Ok(Segment {
        records,
        torn_at: None,
    })
}

/// Appends records to segments, one writer at a time (the storage's flush lock).
#[derive(Debug)]
pub(super) struct Writer {
    dir: PathBuf,
    /// The segment open for appending: its window, the file, and its length.
    open: Option<(u64, File, u64)>,
    /// A segment whose end is a torn record, and where that record begins: cut off before
    /// the segment is appended to (not at open: a store only read is left as found).
    pub torn: Option<(u64, u64)>,
}

impl Writer {
    pub fn new(dir: PathBuf) -> Writer {
        Writer {
            dir,
            open: None,
            torn: None,
        }
    }

    /// Appends `payload` as one record to the segment of `window` (creating it, and the
    /// directory, when needed) and syncs it.
    pub fn append(&mut self, window: u64, payload: &[u8]) -> Result<(), StoreError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| corrupt(format!("a record of {} bytes", payload.len())))?;
        let mut record = Vec::with_capacity(HEADER + payload.len());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
        record.extend_from_slice(payload);
        let path = self.dir.join(name(window));
        let (file, end) = self.segment(window)?;
        let before = *end;
        match file.write_all(&record).and_then(|()| file.sync_data()) {
            Ok(()) => {
                *end += record.len() as u64;
                Ok(())
            }
            Err(e) => {
                // What was written of the record is cut off before the next append: a torn
                // record is only ever the last one.
                self.torn = Some((window, before));
                self.open = None;
                Err(io_error("append to", &path, e))
            }
        }
    }

    fn segment(&mut self, window: u64) -> Result<(&mut File, &mut u64), StoreError> {
        if self.open.as_ref().is_none_or(|(w, _, _)| *w != window) {
            self.open = None;
            std::fs::create_dir_all(&self.dir).map_err(|e| io_error("create", &self.dir, e))?;
            let path = self.dir.join(name(window));
            let existed = path.exists();
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| io_error("open", &path, e))?;
            if let Some((w, at)) = self.torn {
                if w == window {
                    file.set_len(at)
                        .and_then(|()| file.sync_data())
                        .map_err(|e| io_error("cut the torn record off", &path, e))?;
                    self.torn = None;
                }
            }
            if !existed {
                sync_dir(&self.dir)?;
            }
            let len = file
                .metadata()
                .map_err(|e| io_error("stat", &path, e))?
                .len();
            self.open = Some((window, file, len));
        }
        match &mut self.open {
            Some((_, file, len)) => Ok((file, len)),
            None => Err(corrupt("no segment open".into())),
        }
    }

    /// Closes the open segment (the next append opens its window's again).
    pub fn close(&mut self) {
        self.open = None;
    }
}

/// Removes every segment of a window up to `through` (materialized: sled holds it).
pub(super) fn remove_through(dir: &Path, through: u64) -> Result<(), StoreError> {
    let mut removed = false;
    for w in windows(dir)? {
        if w <= through {
            let path = dir.join(name(w));
            match std::fs::remove_file(&path) {
                Ok(()) => removed = true,
                // (a materialization of an earlier window removed it just now)
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("remove", &path, e)),
            }
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error("sync", dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_in_order_and_a_torn_tail_is_cut_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::new(dir.path().to_path_buf());
        w.append(3, b"one").unwrap();
        w.append(3, b"two").unwrap();
        w.append(4, b"three").unwrap();
        assert_eq!(windows(dir.path()).unwrap(), vec![3, 4]);
        let r = read(dir.path(), 3).unwrap();
        assert_eq!(r.records, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(r.torn_at, None);
        drop(w);

        // a record cut short by a crash (header whole, payload not)
        let path = dir.path().join(name(4));
        let whole = std::fs::metadata(&path).unwrap().len();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&100u32.to_le_bytes()).unwrap();
        f.write_all(&[1, 2, 3, 4, 5, 6]).unwrap();
        drop(f);
        let r = read(dir.path(), 4).unwrap();
        assert_eq!(r.records, vec![b"three".to_vec()]);
        assert_eq!(r.torn_at, Some(whole));

        let mut w = Writer::new(dir.path().to_path_buf());
        w.torn = Some((4, whole));
        w.append(4, b"four").unwrap();
        let r = read(dir.path(), 4).unwrap();
        assert_eq!(r.records, vec![b"three".to_vec(), b"four".to_vec()]);
        assert_eq!(r.torn_at, None);

        remove_through(dir.path(), 3).unwrap();
        assert_eq!(windows(dir.path()).unwrap(), vec![4]);
    }

    #[test]
    fn a_bad_checksum_is_torn_at_the_end_and_corruption_before_more_records() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = Writer::new(dir.path().to_path_buf());
        w.append(1, b"first").unwrap();
        w.append(1, b"second").unwrap();
        drop(w);
        let path = dir.path().join(name(1));
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        let r = read(dir.path(), 1).unwrap();
        assert_eq!(r.records, vec![b"first".to_vec()]);
        assert_eq!(r.torn_at, Some((HEADER + 5) as u64));
        // the same damage to the first record, with the second after it: refused
        bytes[last] ^= 0xFF;
        bytes[HEADER] ^= 0xFF;
        std::fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read(dir.path(), 1),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
