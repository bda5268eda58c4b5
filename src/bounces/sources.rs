//! Where `bounces ingest` reads messages: standard input (one message: a
//! pipe transport's), a file (one message, or an mbox when it starts with
//! a `From ` line), a maildir (`cur/` and `new/`) or a folder of message
//! files. A message over the size limit is kept only as its length.

use std::io::Read;
use std::path::{Path, PathBuf};

/// One message to ingest: where it came from, its bytes (empty when it
/// is over the limit) and its whole length.
#[derive(Debug)]
pub struct Message {
    pub name: String,
    pub raw: Vec<u8>,
    pub size: usize,
}

/// A source that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct SourceError {
    pub path: String,
    pub source: std::io::Error,
}

/// Every message of `source` (`None` or `-`: standard input).
pub fn read(source: Option<&Path>, max_bytes: usize) -> Result<Vec<Message>, SourceError> {
    match source {
        None => stdin(max_bytes),
        Some(path) if path == Path::new("-") => stdin(max_bytes),
        Some(path) if path.is_dir() => folder(path, max_bytes),
        Some(path) => file(path, max_bytes),
    }
}

fn error(path: &Path) -> impl Fn(std::io::Error) -> SourceError + '_ {
    move |source| SourceError {
        path: path.display().to_string(),
        source,
    }
}

/// Standard input, one message; read to its end (a pipe's writer must not
/// see its message refused half way), keeping at most `max_bytes + 1`.
fn stdin(max_bytes: usize) -> Result<Vec<Message>, SourceError> {
    let path = Path::new("standard input");
    let mut raw = Vec::new();
    let mut input = std::io::stdin().lock();
    let kept = (&mut input)
        .take(max_bytes as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(error(path))?;
    let rest = std::io::copy(&mut input, &mut std::io::sink()).map_err(error(path))?;
    let size = kept + rest as usize;
    Ok(vec![bounded("stdin".into(), raw, size, max_bytes)])
}

fn bounded(name: String, raw: Vec<u8>, size: usize, max_bytes: usize) -> Message {
    let raw = if size > max_bytes { Vec::new() } else { raw };
    Message { name, raw, size }
}

/// One file: an mbox (its messages named `FILE#N`) or one message.
fn file(path: &Path, max_bytes: usize) -> Result<Vec<Message>, SourceError> {
    let size = std::fs::metadata(path).map_err(error(path))?.len() as usize;
    let name = path.display().to_string();
    let mut head = [0u8; 5];
    let starts_mbox = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(error(path))?
        == 5
        && &head == b"From ";
    if !starts_mbox {
        if size > max_bytes {
            return Ok(vec![bounded(name, Vec::new(), size, max_bytes)]);
        }
        let raw = std::fs::read(path).map_err(error(path))?;
        return Ok(vec![bounded(name, raw, size, max_bytes)]);
    }
    let raw = std::fs::read(path).map_err(error(path))?;
    Ok(mbox(&raw)
        .into_iter()
        .enumerate()
        .map(|(n, message)| {
            let size = message.len();
            bounded(format!("{name}#{}", n + 1), message, size, max_bytes)
        })
        .collect())
}

/// The messages of an mbox: each starts at a `From ` line at the start of
/// the file or after an empty line; `>From ` lines are unquoted.
fn mbox(raw: &[u8]) -> Vec<Vec<u8>> {
    let mut messages: Vec<Vec<u8>> = Vec::new();
    let mut previous_blank = true;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        if previous_blank && line.starts_with(b"From ") {
            messages.push(Vec::new());
            previous_blank = false;
            continue;
        }
        previous_blank = line == b"\n" || line == b"\r\n";
        if let Some(message) = messages.last_mut() {
            match line.strip_prefix(b">") {
                Some(rest) if rest.starts_with(b"From ") || rest.starts_with(b">From ") => {
                    message.extend_from_slice(rest)
                }
                _ => message.extend_from_slice(line),
            }
        }
    }
    messages
}

/// A maildir (its `new/` and `cur/`) or a folder of message files, in
/// name order.
fn folder(path: &Path, max_bytes: usize) -> Result<Vec<Message>, SourceError> {
    let subdirs: Vec<PathBuf> = ["new", "cur"]
        .iter()
        .map(|sub| path.join(sub))
        .filter(|sub| sub.is_dir())
        .collect();
    let dirs = if subdirs.is_empty() {
        vec![path.to_path_buf()]
    } else {
        subdirs
    };
    let mut files = Vec::new();
    for dir in &dirs {
        for entry in std::fs::read_dir(dir).map_err(error(dir))? {
            let entry = entry.map_err(error(dir))?;
            if entry.file_type().map_err(error(dir))?.is_file() {
                files.push(entry.path());
            }
        }
    }
    files.sort();
    let mut messages = Vec::new();
    for file_path in files {
        messages.extend(file(&file_path, max_bytes)?);
    }
    Ok(messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mbox_splits_at_from_lines_and_unquotes_them() {
        let raw = b"From a@b Fri Nov 27 01:00:00 2026\nSubject: one\n\n>From here\n\nFrom c@d Fri Nov 27 01:00:01 2026\nSubject: two\n\nbody\n";
        let messages = mbox(raw);
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[0], b"Subject: one\n\nFrom here\n\n");
        assert_eq!(messages[1], b"Subject: two\n\nbody\n");
    }

    #[test]
    fn a_maildir_a_folder_and_a_big_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("new")).unwrap();
        std::fs::create_dir_all(dir.path().join("cur")).unwrap();
        std::fs::write(dir.path().join("new/1"), b"Subject: a\n\nx\n").unwrap();
        std::fs::write(dir.path().join("cur/2"), b"Subject: b\n\nyyyyyyyy\n").unwrap();
        let read_all = read(Some(dir.path()), 100).unwrap();
        assert_eq!(read_all.len(), 2);
        let small = read(Some(dir.path()), 15).unwrap();
        let too_big: Vec<_> = small.iter().filter(|m| m.raw.is_empty()).collect();
        assert_eq!(too_big.len(), 1);
        assert_eq!(too_big[0].size, 21);
    }
}
