//! The delivery log (`--delivery-log`, default `FILE.deliveries.jsonl`
//! beside `--out`): what `deliveries` will hold, written to a local file
//! first. A letter's `sending` mark goes in before it is handed over, the
//! MTA's answer before its connection takes the next letter.
//!
//! Why a file: the guarantee is that a killed run leaves at most one
//! handed-over letter per connection whose answer is unknown. Waiting for
//! an InnoDB commit before every next letter kept that guarantee but held
//! each connection to one commit (an fsync, milliseconds on a busy
//! database) per letter. A `write(2)` to a file survives a kill of the
//! process just as well, in microseconds; `deliveries` is then written in
//! groups behind the lanes, and a re-run first applies whatever the file
//! holds that `deliveries` may not. The file is emptied once its lines are
//! committed (after each batch) and removed when the run ends. (A crash of
//! the machine, not of the process, can lose what the page cache held:
//! those letters' answers are then as unknown as the database says.)
//!
//! A line: `{"mailing_id":…,"letter_id":…,"status":"sending"|"delivered"|"rejected","reply":…}`.

use crate::locks::LockEvenPoisoned;
use crate::store::deliveries::DeliveryStatus;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// One letter's recorded answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogLine {
    pub mailing_id: String,
    pub letter_id: u64,
    pub status: DeliveryStatus,
    pub reply: String,
}

#[derive(Debug, thiserror::Error)]
pub enum DeliveryLogError {
    #[error("delivery log {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A line that is not JSON, or (`line` 0) one that could not be
    /// written as JSON.
    #[error("delivery log {path}, line {line}")]
    Line {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
}

/// The open log of one run, appended to by every lane.
#[derive(Debug)]
pub struct DeliveryLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl DeliveryLog {
    /// Open `path` for appending (created when missing). Lines a killed
    /// run left are kept: [`read_delivery_log`] reads them first.
    pub fn open(path: &Path) -> Result<DeliveryLog, DeliveryLogError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| io_error(path, source))?;
        Ok(DeliveryLog {
            path: path.to_owned(),
            file: Mutex::new(file),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Append `lines` in one `write(2)`: a kill leaves whole lines and at
    /// most a torn last one, which the reader skips (a torn mark: the
    /// letter was not handed over yet; a torn answer: the letter stays in
    /// doubt, as its answer never reached the file).
    pub fn append(&self, lines: &[LogLine]) -> Result<(), DeliveryLogError> {
        let mut bytes = Vec::with_capacity(lines.len() * 96);
        for line in lines {
            serde_json::to_writer(&mut bytes, line).map_err(|source| DeliveryLogError::Line {
                path: self.path.clone(),
                line: 0,
                source,
            })?;
            bytes.push(b'\n');
        }
        let mut file = self.file.lock_even_poisoned();
        file.write_all(&bytes)
            .map_err(|source| io_error(&self.path, source))
    }

    /// Empty the file: every line in it is committed to `deliveries`.
    pub fn clear(&self) -> Result<(), DeliveryLogError> {
        let file = self.file.lock_even_poisoned();
        file.set_len(0)
            .map_err(|source| io_error(&self.path, source))
    }

    /// Delete the file (nothing in it is needed any more).
    pub fn remove(&self) -> Result<(), DeliveryLogError> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io_error(&self.path, e)),
            _ => Ok(()),
        }
    }
}

/// Every whole line of the log at `path` (none when the file is missing).
/// A last line without its newline is a write a kill cut short: skipped. A
/// bad line anywhere else is an error naming it.
pub fn read_delivery_log(path: &Path) -> Result<Vec<LogLine>, DeliveryLogError> {
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => return Err(io_error(path, source)),
    };
    let mut reader = BufReader::new(file);
    let mut lines = Vec::new();
    let mut buffer = Vec::new();
    for number in 1.. {
        buffer.clear();
        let read = reader
            .read_until(b'\n', &mut buffer)
            .map_err(|source| io_error(path, source))?;
        if read == 0 || buffer.last() != Some(&b'\n') {
            break;
        }
        let line = serde_json::from_slice(&buffer).map_err(|source| DeliveryLogError::Line {
            path: path.to_owned(),
            line: number,
            source,
        })?;
        lines.push(line);
    }
    Ok(lines)
}

fn io_error(path: &Path, source: std::io::Error) -> DeliveryLogError {
    DeliveryLogError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(letter_id: u64) -> LogLine {
        LogLine {
            mailing_id: "m1".into(),
            letter_id,
            status: DeliveryStatus::Delivered,
            reply: "250 2.0.0 Ok: queued as \"X\"\n".into(),
        }
    }

    #[test]
    fn lines_written_are_read_back_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let log = DeliveryLog::open(&path).unwrap();
        log.append(&[line(1), line(2)]).unwrap();
        assert_eq!(read_delivery_log(&path).unwrap(), vec![line(1), line(2)]);
        log.clear().unwrap();
        assert!(read_delivery_log(&path).unwrap().is_empty());
        log.append(&[line(3)]).unwrap();
        assert_eq!(read_delivery_log(&path).unwrap(), vec![line(3)]);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_a_bad_middle_line_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let whole = serde_json::to_string(&line(1)).unwrap();
        std::fs::write(&path, format!("{whole}\n{}", &whole[..10])).unwrap();
        assert_eq!(read_delivery_log(&path).unwrap(), vec![line(1)]);
        std::fs::write(&path, format!("{whole}\nnot json\n{whole}\n")).unwrap();
        let err = read_delivery_log(&path).unwrap_err();
        let said = crate::error_report::chain(&err);
        assert!(said.contains("d.jsonl, line 2: "), "{said}");
        assert!(
            matches!(&err, DeliveryLogError::Line { source, .. } if source.is_syntax()),
            "the JSON parser's reason is kept: {err:?}"
        );
    }

    #[test]
    fn a_missing_log_has_no_lines() {
        let dir = tempfile::tempdir().unwrap();
        assert!(read_delivery_log(&dir.path().join("none"))
            .unwrap()
            .is_empty());
    }
}
