//! The append-only event journal: a directory of JSON-lines segment files.
//!
//! * The writer appends to `{seq:020}.active`. Events arrive over a bounded
//!   channel; everything queued is written as one batch with one `write`, and
//!   then every event of the batch is acknowledged. No fsync: the page cache
//!   survives a process crash, which is the failure we guard against.
//! * After [`JournalSettings::seal_after`] (or when the segment is full) the
//!   writer renames it to `{seq:020}.jsonl` ("sealed") and wakes the replayer.
//! * The replayer deletes a sealed segment only after all of its events are
//!   committed, so the set of files on disk *is* the replay position.
//! * At startup, [`recover`] seals any `.active` segment a crashed process left.

use crate::store::events::EventRow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::fs::{self, File, OpenOptions};
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;

const ACTIVE: &str = "active";
/// Holds the pid of the server using the directory.
pub const LOCK_FILE: &str = "lock";
const SEALED: &str = "jsonl";

/// Journal tuning. The defaults suit a tracking server.
#[derive(Debug, Clone)]
pub struct JournalSettings {
    pub dir: PathBuf,
    /// Events that may wait for the writer before handlers wait too.
    pub channel_capacity: usize,
    /// Most events written in one batch.
    pub max_batch: usize,
    /// Seal a non-empty segment this long after its first event, so the
    /// replayer sees events soon.
    pub seal_after: Duration,
    /// Seal a segment once it holds this many events.
    pub max_segment_events: usize,
    /// How long a handler waits for the append acknowledgement.
    pub ack_timeout: Duration,
    /// Wait between replay attempts while the database fails.
    pub retry_after: Duration,
}

impl JournalSettings {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalSettings {
            dir: dir.into(),
            channel_capacity: 8_192,
            max_batch: 1_024,
            seal_after: Duration::from_millis(250),
            max_segment_events: 20_000,
            ack_timeout: Duration::from_secs(2),
            retry_after: Duration::from_secs(1),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("journal {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the journal writer has stopped")]
    Stopped,
    #[error("appending to the journal failed: {0}")]
    Append(Arc<JournalError>),
    #[error(
        "journal {dir} is in use by another server (pid {pid}, as {dir}/{LOCK_FILE} says); \
         one server per journal directory: give this one its own --journal"
    )]
    Locked { dir: PathBuf, pid: u32 },
    #[error("the journal writer did not acknowledge within {0:?}")]
    Timeout(Duration),
    #[error("encoding an event: {0}")]
    Encode(#[from] serde_json::Error),
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One event waiting to be written, and who to tell when it is.
struct Pending {
    line: Vec<u8>,
    ack: oneshot::Sender<Result<(), Arc<JournalError>>>,
}

/// The handlers' side of the journal. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Pending>,
    ack_timeout: Duration,
}

impl Recorder {
    /// Append `row`; returns once it has been written to the segment file.
    pub async fn append(&self, row: EventRow) -> Result<(), JournalError> {
        let mut line = super::record::JournalRecord::encode(&row)?;
        line.push(b'\n');
        let (ack, acked) = oneshot::channel();
        let wait = async {
            self.tx
                .send(Pending { line, ack })
                .await
                .map_err(|_| JournalError::Stopped)?;
            match acked.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(err)) => Err(JournalError::Append(err)),
                Err(_) => Err(JournalError::Stopped),
            }
        };
        tokio::time::timeout(self.ack_timeout, wait)
            .await
            .map_err(|_| JournalError::Timeout(self.ack_timeout))?
    }
}

/// The running writer.
pub struct Writer {
    pub task: JoinHandle<()>,
    /// Notified whenever a segment is sealed.
    pub sealed: Arc<Notify>,
}

/// Path of segment `seq` in state `ext` (`active` or `jsonl`).
fn segment_path(dir: &Path, seq: u64, ext: &str) -> PathBuf {
    dir.join(format!("{seq:020}.{ext}"))
}

/// The sequence number of a segment file named by [`segment_path`].
fn segment_seq(path: &Path, ext: &str) -> Option<u64> {
    if path.extension()? != ext {
        return None;
    }
    path.file_stem()?.to_str()?.parse().ok()
}

/// Sealed segments in `dir`, oldest first.
pub async fn sealed_segments(dir: &Path) -> Result<Vec<PathBuf>, JournalError> {
    let mut found = segments(dir, SEALED).await?;
    found.sort_by_key(|(seq, _)| *seq);
    Ok(found.into_iter().map(|(_, path)| path).collect())
}

async fn segments(dir: &Path, ext: &str) -> Result<Vec<(u64, PathBuf)>, JournalError> {
    let mut entries = fs::read_dir(dir).await.map_err(io_error(dir))?;
    let mut found = Vec::new();
    while let Some(entry) = entries.next_entry().await.map_err(io_error(dir))? {
        let path = entry.path();
        if let Some(seq) = segment_seq(&path, ext) {
            found.push((seq, path));
        }
    }
    Ok(found)
}

/// Create the directory if needed, take its lock, seal segments a previous
/// process left active, and return the next free sequence number with the
/// lock (the directory is ours until it is dropped).
pub async fn recover(dir: &Path) -> Result<(u64, JournalLock), JournalError> {
    fs::create_dir_all(dir).await.map_err(io_error(dir))?;
    let lock = claim(dir).await?;
    for (seq, path) in segments(dir, ACTIVE).await? {
        let sealed = segment_path(dir, seq, SEALED);
        fs::rename(&path, &sealed).await.map_err(io_error(&path))?;
        tracing::info!(path = %sealed.display(), "recovered an unsealed journal segment");
    }
    let last = segments(dir, SEALED)
        .await?
        .into_iter()
        .map(|(seq, _)| seq)
        .max();
    Ok((last.map_or(0, |seq| seq + 1), lock))
}

/// The journal directory's lock, held while the server runs. An OS file
/// lock (`flock`): the kernel releases it when the process dies, however it
/// dies, so there is no stale lock to detect and no pid to probe.
#[derive(Debug)]
pub struct JournalLock {
    _file: std::fs::File,
}

/// How long a start waits for the lock: a server being restarted may still
/// be closing (a supervisor's overlap, a test's aborted instance).
const LOCK_WAIT: Duration = Duration::from_secs(3);

/// Make this process the directory's only user. Two writers would seal and
/// delete segments under each other's feet, losing events.
async fn claim(dir: &Path) -> Result<JournalLock, JournalError> {
    let path = dir.join(LOCK_FILE);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(io_error(&path))?;
    let waited = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if waited.elapsed() < LOCK_WAIT => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                let owner = std::fs::read_to_string(&path).unwrap_or_default();
                return Err(JournalError::Locked {
                    dir: dir.to_owned(),
                    pid: owner.trim().parse().unwrap_or(0),
                });
            }
            Err(std::fs::TryLockError::Error(err)) => return Err(io_error(&path)(err)),
        }
    }
    // The pid is for the operator reading the file; the lock is the flock.
    let mut writer = &file;
    file.set_len(0)
        .and_then(|()| {
            std::io::Write::write_all(&mut writer, format!("{}\n", std::process::id()).as_bytes())
        })
        .map_err(io_error(&path))?;
    Ok(JournalLock { _file: file })
}

/// Start the writer task with the segment sequence `next_seq`.
pub fn spawn_writer(
    settings: JournalSettings,
    next_seq: u64,
    stop: watch::Receiver<bool>,
) -> (Recorder, Writer) {
    let (tx, rx) = mpsc::channel(settings.channel_capacity.max(1));
    let sealed = Arc::new(Notify::new());
    let recorder = Recorder {
        tx,
        ack_timeout: settings.ack_timeout,
    };
    let state = WriterState {
        settings,
        seq: next_seq,
        open: None,
        sealed: sealed.clone(),
    };
    let task = tokio::spawn(state.run(rx, stop));
    (recorder, Writer { task, sealed })
}

/// The segment being appended to.
struct OpenSegment {
    file: File,
    events: usize,
    opened: Instant,
}

struct WriterState {
    settings: JournalSettings,
    seq: u64,
    open: Option<OpenSegment>,
    sealed: Arc<Notify>,
}

impl WriterState {
    async fn run(mut self, mut rx: mpsc::Receiver<Pending>, mut stop: watch::Receiver<bool>) {
        let mut tick =
            tokio::time::interval(self.settings.seal_after / 2 + Duration::from_millis(1));
        loop {
            tokio::select! {
                received = rx.recv() => match received {
                    Some(first) => self.write_batch(first, &mut rx).await,
                    None => break,
                },
                _ = tick.tick() => self.seal_if_due().await,
                _ = stop.changed() => break,
            }
        }
        // Stopping: take what is already queued, then seal.
        rx.close();
        while let Some(first) = rx.recv().await {
            self.write_batch(first, &mut rx).await;
        }
        self.seal().await;
    }

    /// Write `first` and whatever else is queued as one batch, then ack each.
    async fn write_batch(&mut self, first: Pending, rx: &mut mpsc::Receiver<Pending>) {
        let mut batch = vec![first];
        while batch.len() < self.settings.max_batch {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        // One copy per line (a byte-by-byte `flat_map` here was two thirds
        // of the writer's instructions).
        let bytes = batch
            .iter()
            .map(|p| p.line.as_slice())
            .collect::<Vec<_>>()
            .concat();
        let result = self.append(&bytes, batch.len()).await.map_err(Arc::new);
        if let Err(err) = &result {
            tracing::error!(%err, events = batch.len(), "journal append failed");
        }
        for pending in batch {
            let _ = pending.ack.send(result.clone());
        }
        let full = self
            .open
            .as_ref()
            .is_some_and(|s| s.events >= self.settings.max_segment_events);
        if full {
            self.seal().await;
        }
    }

    async fn append(&mut self, bytes: &[u8], events: usize) -> Result<(), JournalError> {
        let path = segment_path(&self.settings.dir, self.seq, ACTIVE);
        if self.open.is_none() {
            let mut options = OpenOptions::new();
            options.create(true).append(true);
            // Events name addresses: only the service's user may read them.
            #[cfg(unix)]
            options.mode(0o600);
            let file = options.open(&path).await.map_err(io_error(&path))?;
            self.open = Some(OpenSegment {
                file,
                events: 0,
                opened: Instant::now(),
            });
        }
        let Some(segment) = self.open.as_mut() else {
            return Err(JournalError::Stopped);
        };
        segment
            .file
            .write_all(bytes)
            .await
            .map_err(io_error(&path))?;
        // tokio's File completes writes in the background; flush waits until
        // the bytes are in the OS, which is what the acknowledgement promises.
        segment.file.flush().await.map_err(io_error(&path))?;
        segment.events += events;
        metrics::gauge!("linktrack_journal_backlog_events").increment(events as f64);
        Ok(())
    }

    async fn seal_if_due(&mut self) {
        let due = self
            .open
            .as_ref()
            .is_some_and(|s| s.opened.elapsed() >= self.settings.seal_after);
        if due {
            self.seal().await;
        }
    }

    /// Close the active segment and hand it to the replayer.
    async fn seal(&mut self) {
        let Some(mut segment) = self.open.take() else {
            return;
        };
        let _ = segment.file.flush().await;
        drop(segment);
        let from = segment_path(&self.settings.dir, self.seq, ACTIVE);
        let to = segment_path(&self.settings.dir, self.seq, SEALED);
        if let Err(err) = fs::rename(&from, &to).await {
            // Left active, it is sealed by `recover` at the next start.
            tracing::error!(%err, path = %from.display(), "sealing a journal segment failed");
        }
        self.seq += 1;
        self.sealed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn event(n: u8) -> EventRow {
        EventRow {
            event_id: [n; 16],
            occurred_at: Utc::now(),
            kind: crate::kind::EventKind::Click,
            token: [n; 16],
            link_id: Some(u64::from(n)),
            mailing_id: None,
            letter_id: None,
            email: None,
            position: None,
            ip: None,
            user_agent: None,
            bot: false,
            bot_reason: None,
        }
    }

    fn files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[tokio::test]
    async fn appended_events_are_in_the_file_when_acknowledged_and_sealed_on_stop() {
        let dir = tempfile::tempdir().unwrap();
        let settings = JournalSettings {
            seal_after: Duration::from_secs(60),
            ..JournalSettings::new(dir.path())
        };
        let (next, _lock) = recover(dir.path()).await.unwrap();
        let (stop, stopped) = watch::channel(false);
        let (recorder, writer) = spawn_writer(settings, next, stopped);
        for n in 0..3 {
            recorder.append(event(n)).await.unwrap();
        }
        let active = dir.path().join("00000000000000000000.active");
        let text = std::fs::read_to_string(&active).unwrap();
        assert_eq!(text.lines().count(), 3);
        let first =
            crate::events::record::JournalRecord::decode(text.lines().next().unwrap()).unwrap();
        assert_eq!(first.event_id, [0; 16]);

        stop.send(true).unwrap();
        writer.task.await.unwrap();
        assert_eq!(files(dir.path()), ["00000000000000000000.jsonl", "lock"]);
        assert!(matches!(
            recorder.append(event(9)).await,
            Err(JournalError::Stopped)
        ));
    }

    #[tokio::test]
    async fn a_directory_in_use_is_refused_until_its_lock_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (_, held) = recover(dir.path()).await.unwrap();
        let owner = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(owner.trim(), std::process::id().to_string());
        let err = recover(dir.path()).await.unwrap_err();
        assert!(matches!(err, JournalError::Locked { .. }), "{err}");
        assert!(err.to_string().contains("--journal"), "{err}");
        drop(held);
        recover(dir.path()).await.unwrap();
    }

    /// A process killed with SIGKILL cannot clean up: the kernel releases its
    /// lock, and the next server starts without any stale-lock heuristics.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_lock_of_a_killed_process_is_free_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join(LOCK_FILE);
        std::fs::write(&lock, "").unwrap();
        // util-linux `flock` takes the same flock(2) lock std's File::lock does.
        // `--close`: the lock stays with `flock` itself, not with its `sleep`.
        let Ok(mut holder) = std::process::Command::new("flock")
            .arg("--close")
            .arg(&lock)
            .args(["sleep", "60"])
            .spawn()
        else {
            panic!("util-linux `flock` is needed for this test");
        };
        let file = std::fs::File::open(&lock).unwrap();
        while file.try_lock_shared().is_ok() {
            file.unlock().unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let err = recover(dir.path()).await.unwrap_err();
        assert!(matches!(err, JournalError::Locked { .. }), "{err}");
        holder.kill().unwrap();
        holder.wait().unwrap();
        recover(dir.path()).await.unwrap();
    }

    #[tokio::test]
    async fn recover_seals_leftovers_and_continues_the_sequence() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("00000000000000000004.jsonl"), "").unwrap();
        std::fs::write(dir.path().join("00000000000000000007.active"), "").unwrap();
        std::fs::write(dir.path().join("README"), "not a segment").unwrap();
        assert_eq!(recover(dir.path()).await.unwrap().0, 8);
        assert_eq!(
            files(dir.path()),
            [
                "00000000000000000004.jsonl",
                "00000000000000000007.jsonl",
                "README",
                "lock"
            ]
        );
        let sealed = sealed_segments(dir.path()).await.unwrap();
        assert_eq!(sealed.len(), 2);
        assert!(sealed[0] < sealed[1], "oldest first");
    }

    #[test]
    fn segment_names_sort_and_parse() {
        let dir = Path::new("/j");
        let path = segment_path(dir, 42, SEALED);
        assert_eq!(path, Path::new("/j/00000000000000000042.jsonl"));
        assert_eq!(segment_seq(&path, SEALED), Some(42));
        assert_eq!(segment_seq(&path, ACTIVE), None);
        assert_eq!(segment_seq(Path::new("/j/notes.jsonl"), SEALED), None);
    }
}
