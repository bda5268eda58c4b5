//! The spool: every accepted message on disk before the client hears 250.
//! A message's letters (one per recipient) are written in a directory of
//! their own under `tmp/`, each file and the directory fsync'd, then the
//! directory is renamed into `queue/` (one atomic step: all its letters
//! are queued or none) and `queue/` fsync'd. A letter's file is renamed
//! from `.eml` to `.sending` before it is handed downstream and removed
//! once the MTA answered: one that a killed relay left `.sending` may have
//! arrived, and is sent again and named in the log (its Message-ID is the
//! same, as after a killed `build`). A refused one moves to `rejected/`
//! with the MTA's reply.
//!
//! A letter's file: one JSON line (`from`, `to`), then the message.

use super::track::Outgoing;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The spool directory.
#[derive(Debug)]
pub(crate) struct Spool {
    root: PathBuf,
}

/// A queued letter's file.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Queued {
    pub path: PathBuf,
    /// Renamed `.sending` by a relay that was killed before the answer.
    pub in_doubt: bool,
}

/// A spooled letter whose envelope line does not read (carried in the
/// `io::Error` the spool's callers handle).
#[derive(Debug, thiserror::Error)]
#[error("{}: envelope: {source}", path.display())]
struct BadEnvelope {
    path: PathBuf,
    #[source]
    source: serde_json::Error,
}

impl Spool {
    /// The spool at `root`, its folders made when missing.
    pub(crate) fn open(root: &Path) -> io::Result<Spool> {
        for folder in ["tmp", "queue", "rejected"] {
            fs::create_dir_all(root.join(folder))?;
        }
        Ok(Spool {
            root: root.to_owned(),
        })
    }

    /// Queue a message's letters durably; returns its spool id.
    pub(crate) fn put(&self, letters: &[Outgoing]) -> io::Result<String> {
        let id = new_id();
        let staging = self.root.join("tmp").join(&id);
        fs::create_dir(&staging)?;
        for (n, letter) in letters.iter().enumerate() {
            let mut file = File::create(staging.join(format!("{n:05}.eml")))?;
            let envelope = serde_json::to_vec(letter).map_err(io::Error::other)?;
            file.write_all(&envelope)?;
            file.write_all(b"\n")?;
            file.write_all(&letter.data)?;
            file.sync_all()?;
        }
        sync_dir(&staging)?;
        let queue = self.root.join("queue");
        fs::rename(&staging, queue.join(&id))?;
        sync_dir(&queue)?;
        sync_dir(&self.root.join("tmp"))?;
        Ok(id)
    }

    /// Every queued letter, oldest message first.
    pub(crate) fn queued(&self) -> io::Result<Vec<Queued>> {
        let mut found = Vec::new();
        for message in fs::read_dir(self.root.join("queue"))? {
            let message = message?.path();
            let Ok(letters) = fs::read_dir(&message) else {
                continue;
            };
            let mut any = false;
            for letter in letters {
                let path = letter?.path();
                any = true;
                match path.extension().and_then(|e| e.to_str()) {
                    Some("eml") => found.push(Queued {
                        path,
                        in_doubt: false,
                    }),
                    Some("sending") => found.push(Queued {
                        path,
                        in_doubt: true,
                    }),
                    _ => {}
                }
            }
            if !any {
                let _ = fs::remove_dir(&message);
            }
        }
        found.sort();
        Ok(found)
    }

    /// [`Spool::queued`], by the pool each letter goes out through (read
    /// from its envelope line), oldest first within a pool. A letter
    /// whose envelope cannot be read is left to [`Spool::load`] to report
    /// (it is listed under no pool).
    pub(crate) fn queued_by_pool(&self) -> io::Result<Vec<(Option<String>, Vec<Queued>)>> {
        let mut by_pool: Vec<(Option<String>, Vec<Queued>)> = Vec::new();
        for queued in self.queued()? {
            let pool = Spool::envelope(&queued.path)
                .ok()
                .and_then(|letter| letter.pool);
            match by_pool.iter_mut().find(|(p, _)| *p == pool) {
                Some((_, letters)) => letters.push(queued),
                None => by_pool.push((pool, vec![queued])),
            }
        }
        Ok(by_pool)
    }

    /// A letter's envelope line alone (its message left unread).
    fn envelope(path: &Path) -> io::Result<Outgoing> {
        use std::io::BufRead;
        let mut line = Vec::new();
        io::BufReader::new(File::open(path)?).read_until(b'\n', &mut line)?;
        serde_json::from_slice(line.trim_ascii_end()).map_err(io::Error::other)
    }

    /// A letter's envelope and message.
    pub(crate) fn load(path: &Path) -> io::Result<Outgoing> {
        let bytes = fs::read(path)?;
        let split = memchr::memchr(b'\n', &bytes)
            .ok_or_else(|| io::Error::other(format!("{}: no envelope line", path.display())))?;
        let mut letter: Outgoing = serde_json::from_slice(&bytes[..split]).map_err(|source| {
            io::Error::other(BadEnvelope {
                path: path.to_owned(),
                source,
            })
        })?;
        letter.data = bytes[split + 1..].to_vec();
        Ok(letter)
    }

    /// Rename the letter `.sending` before it goes downstream (durably);
    /// returns its new path.
    pub(crate) fn mark_sending(queued: &Queued) -> io::Result<PathBuf> {
        if queued.in_doubt {
            return Ok(queued.path.clone());
        }
        let sending = queued.path.with_extension("sending");
        fs::rename(&queued.path, &sending)?;
        sync_parent(&sending)?;
        Ok(sending)
    }

    /// Back to `.eml`: nothing reached the MTA (a temporary failure).
    pub(crate) fn unmark(sending: &Path) -> io::Result<()> {
        let queued = sending.with_extension("eml");
        fs::rename(sending, &queued)?;
        sync_parent(&queued)
    }

    /// The MTA took the letter: it leaves the spool.
    pub(crate) fn delivered(sending: &Path) -> io::Result<()> {
        fs::remove_file(sending)?;
        sync_parent(sending)
    }

    /// The MTA refused the letter for good: kept in `rejected/` with its
    /// reply first.
    pub(crate) fn rejected(&self, sending: &Path, reply: &str) -> io::Result<PathBuf> {
        let message = sending
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let letter = sending
            .file_stem()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let target = self
            .root
            .join("rejected")
            .join(format!("{message}-{letter}.eml"));
        let mut bytes = format!(
            "X-Linktrack-Relay-Reply: {}\r\n",
            reply.replace(['\r', '\n'], " ")
        )
        .into_bytes();
        bytes.extend(fs::read(sending)?);
        let mut file = File::create(&target)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        sync_parent(&target)?;
        Self::delivered(sending)?;
        Ok(target)
    }
}

/// A message's spool id: its arrival time (sorts in order) and random bits.
fn new_id() -> String {
    let now = chrono::Utc::now();
    format!(
        "{}-{:08x}",
        now.format("%Y%m%dT%H%M%S%.6f"),
        rand::random::<u32>()
    )
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => sync_dir(dir),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_are_queued_marked_and_settled() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::open(dir.path()).unwrap();
        let letter = |to: &str| Outgoing {
            pool: None,
            letter: None,
            from: "a@example.com".into(),
            to: to.into(),
            data: b"Subject: x\r\n\r\nbody\r\n".to_vec(),
        };
        spool
            .put(&[letter("b@example.org"), letter("c@example.org")])
            .unwrap();
        let queued = spool.queued().unwrap();
        assert_eq!(queued.len(), 2);
        assert_eq!(
            Spool::load(&queued[0].path).unwrap(),
            letter("b@example.org")
        );
        assert_eq!(Spool::load(&queued[0].path).unwrap().data, letter("b").data);
        let sending = Spool::mark_sending(&queued[0]).unwrap();
        assert!(spool.queued().unwrap()[0].in_doubt);
        Spool::delivered(&sending).unwrap();
        let sending = Spool::mark_sending(&spool.queued().unwrap()[0]).unwrap();
        let kept = spool.rejected(&sending, "550 5.1.1 no such user").unwrap();
        assert!(std::fs::read_to_string(kept)
            .unwrap()
            .starts_with("X-Linktrack-Relay-Reply: 550"));
        assert!(spool.queued().unwrap().is_empty());
    }
}
