//! The append-only event journal: a directory of segment files of one line
//! per event (`line.rs`; the sealed ones are named `.jsonl`, as when
//! the lines were JSON).
//!
//! * A handler appends its event's line to `{seq:020}.active` itself, with
//!   one `write` under a mutex, and is answered once the line is in the
//!   file. No fsync: the page cache survives a process crash, which is the
//!   failure we guard against. A write to the page cache takes a few
//!   microseconds; handing each event to a writer task instead (a channel,
//!   the blocking pool for the file, an acknowledgement back) cost more
//!   than the write in wake-ups between threads (`bench_serve`: server CPU
//!   per open).
//! * After [`JournalSettings::seal_after`] (or when the segment is full) the
//!   segment is renamed to `{seq:020}.jsonl` ("sealed") and the replayer is
//!   woken: by the sealer task, or by the append that filled it.
//! * The replayer deletes a sealed segment only after all of its events are
//!   committed, so the set of files on disk *is* the replay position.
//! * At startup, [`recover`] seals any `.active` segment a crashed process left.

use super::fallback::{FallbackQueue, JournalHealth, QUEUE_CAPACITY};
use crate::event::EventRow;
use crate::retry::Backoff;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio::fs;
use tokio::sync::{watch, Notify};
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
    /// Seal a non-empty segment this long after its first event, so the
    /// replayer sees events soon.
    pub seal_after: Duration,
    /// Seal a segment once it holds this many events.
    pub max_segment_events: usize,
    /// Wait between replay attempts while the database fails.
    pub retry_after: Duration,
    /// `/readyz` turns unready when the journal's filesystem has less
    /// free space than this (bytes)…
    pub min_free_bytes: u64,
    /// …and ready again only once it has more than this (hysteresis: a node
    /// at the edge does not flap).
    pub resume_free_bytes: u64,
}

/// Default of `--journal-min-free-bytes`: about 200,000 events of headroom.
pub const DEFAULT_MIN_FREE_BYTES: u64 = 64 << 20;
/// Default of `--journal-resume-free-bytes`.
pub const DEFAULT_RESUME_FREE_BYTES: u64 = 256 << 20;

impl JournalSettings {
    /// How a failed replay or drain pass is retried: `retry_after` apart,
    /// for as long as the server runs.
    pub(crate) fn retry_schedule(&self) -> Backoff {
        Backoff::constant(self.retry_after)
    }

    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JournalSettings {
            dir: dir.into(),
            seal_after: Duration::from_millis(250),
            max_segment_events: 20_000,
            retry_after: Duration::from_secs(1),
            min_free_bytes: DEFAULT_MIN_FREE_BYTES,
            resume_free_bytes: DEFAULT_RESUME_FREE_BYTES,
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
    #[error("the journal has stopped")]
    Stopped,
    #[error(
        "journal {dir} is in use by another server (pid {pid}, as {dir}/{LOCK_FILE} says); \
         one server per journal directory: give this one its own --journal"
    )]
    Locked { dir: PathBuf, pid: u32 },
    #[error(
        "journal {path}: {source}; and the fallback queue is full ({} events): event lost",
        super::fallback::QUEUE_CAPACITY
    )]
    QueueFull {
        path: PathBuf,
        source: std::io::Error,
    },
}

fn io_error(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io {
        path: path.to_owned(),
        source,
    }
}

/// The handlers' side of the journal. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    segment: Arc<Mutex<SegmentState>>,
    /// Where an event the journal cannot write waits ([`super::fallback`]).
    fallback: Arc<FallbackQueue>,
    health: Arc<JournalHealth>,
    space: Arc<super::fallback::SpaceGate>,
    /// The rows requests read, for their hits' replay ([`super::readers`]).
    readers: Arc<super::readers::ReaderHandoff>,
}

impl Recorder {
    /// Where a request leaves the link row it read for its hit's replay.
    pub fn readers(&self) -> &Arc<super::readers::ReaderHandoff> {
        &self.readers
    }

    /// Append `row`; returns once it has been written to the segment file,
    /// or, when the journal cannot write, once it is queued for the
    /// fallback drain ([`super::fallback`]). Not async: one `write` under a
    /// std mutex, held for no await.
    pub fn append(&self, row: EventRow) -> Result<(), JournalError> {
        match self.append_without_fallback(&row) {
            Err(JournalError::Io { path, source }) => {
                metrics::counter!("linktrack_journal_errors_total").increment(1);
                if self.fallback.push(row) {
                    Ok(())
                } else {
                    Err(JournalError::QueueFull { path, source })
                }
            }
            other => other,
        }
    }

    /// Append `row` to the journal file only, noting whether it wrote.
    pub(crate) fn append_without_fallback(&self, row: &EventRow) -> Result<(), JournalError> {
        let mut line = super::line::JournalLine::encode(row);
        line.push(b'\n');
        let written = self.append_line(&line);
        match &written {
            Ok(()) => self.health.set(true, None),
            Err(err @ JournalError::Io { .. }) => self.health.set(false, Some(err)),
            Err(_) => {}
        }
        written
    }

    /// Whether the journal's last write succeeded (`/readyz`).
    pub fn health(&self) -> &JournalHealth {
        &self.health
    }

    /// Whether the journal's filesystem has room, with hysteresis
    /// (`/readyz`): `Err` says how much is free and what it waits for.
    pub fn space(&self) -> Result<(), super::fallback::LowSpace> {
        self.space.check()
    }

    pub(crate) fn fallback(&self) -> &FallbackQueue {
        &self.fallback
    }

    fn append_line(&self, line: &[u8]) -> Result<(), JournalError> {
        // A panic while the lock was held (none is known) stops the journal
        // rather than writing after a half-done append.
        let mut segment = self.segment.lock().map_err(|_| JournalError::Stopped)?;
        segment.append(line)
    }
}

/// The running sealer task.
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

/// The segments not yet replayed, active and sealed, oldest first: none
/// means every journaled event is in the database. Blocking, for tools and
/// tests that watch a server's journal from outside.
pub fn unreplayed_segments(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if let Some(seq) = segment_seq(&path, ACTIVE).or_else(|| segment_seq(&path, SEALED)) {
            found.push((seq, path));
        }
    }
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

/// Open the journal for appends at segment `next_seq`, and start the task
/// that seals segments when they are due (and the last one on `stop`).
pub fn spawn_writer(
    settings: JournalSettings,
    next_seq: u64,
    stop: watch::Receiver<bool>,
) -> (Recorder, Writer) {
    let sealed = Arc::new(Notify::new());
    let tick = settings.seal_after / 2 + Duration::from_millis(1);
    let space = super::fallback::SpaceGate::new(
        &settings.dir,
        settings.min_free_bytes,
        settings.resume_free_bytes,
    );
    let segment = Arc::new(Mutex::new(SegmentState {
        settings,
        seq: next_seq,
        open: None,
        sealed: sealed.clone(),
        stopped: false,
        backlog: metrics::gauge!("linktrack_journal_backlog_events"),
    }));
    let task = tokio::spawn(seal_when_due(segment.clone(), tick, stop));
    let recorder = Recorder {
        segment,
        fallback: Arc::new(FallbackQueue::new(QUEUE_CAPACITY)),
        health: Arc::new(JournalHealth::new()),
        space: Arc::new(space),
        readers: Arc::default(),
    };
    (recorder, Writer { task, sealed })
}

/// Seal the active segment once it is [`JournalSettings::seal_after`] old;
/// on `stop`, refuse further appends and seal what there is.
async fn seal_when_due(
    segment: Arc<Mutex<SegmentState>>,
    tick: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let mut ticks = tokio::time::interval(tick);
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                if let Ok(mut segment) = segment.lock() {
                    segment.seal_if_due();
                }
            }
            _ = stop.changed() => break,
        }
    }
    if let Ok(mut segment) = segment.lock() {
        segment.stopped = true;
        segment.seal();
    }
}

/// The segment being appended to.
struct OpenSegment {
    file: std::fs::File,
    path: PathBuf,
    events: usize,
    /// Bytes of whole lines written: a failed write is cut back to this.
    bytes: u64,
    opened: Instant,
}

/// The journal's file state, behind the [`Recorder`]'s mutex.
struct SegmentState {
    settings: JournalSettings,
    seq: u64,
    open: Option<OpenSegment>,
    sealed: Arc<Notify>,
    /// Set when the server stops: later appends fail with `Stopped`.
    stopped: bool,
    /// `linktrack_journal_backlog_events`, registered once: the `gauge!`
    /// macro looks the metric up in the recorder's registry on every call,
    /// and this is every event's.
    backlog: metrics::Gauge,
}

impl SegmentState {
    /// Write one event's line; seal the segment when it is full.
    fn append(&mut self, line: &[u8]) -> Result<(), JournalError> {
        if self.stopped {
            return Err(JournalError::Stopped);
        }
        if self.open.is_none() {
            let path = segment_path(&self.settings.dir, self.seq, ACTIVE);
            let mut options = std::fs::OpenOptions::new();
            options.create(true).append(true);
            // Events name addresses: only the service's user may read them.
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(&path).map_err(io_error(&path))?;
            self.open = Some(OpenSegment {
                file,
                path,
                events: 0,
                bytes: 0,
                opened: Instant::now(),
            });
        }
        let Some(segment) = self.open.as_mut() else {
            return Err(JournalError::Stopped);
        };
        // One write of the whole line (an O_APPEND write of a few hundred
        // bytes is not split), so a crash leaves at most a torn last line,
        // which the replay skips. The caller logs a failure (`journal::append`).
        if let Err(err) = segment.file.write_all(line) {
            // A full disk may take part of the line: cut it off, or later
            // lines would follow a torn one and the segment would not
            // replay. If even that fails, seal here: a torn *last* line is
            // skipped by the replay.
            if segment.file.set_len(segment.bytes).is_err() {
                self.seal();
            }
            return Err(io_error(&self.settings.dir)(err));
        }
        segment.bytes += line.len() as u64;
        segment.events += 1;
        self.backlog.increment(1.0);
        if segment.events >= self.settings.max_segment_events {
            self.seal();
        }
        Ok(())
    }

    fn seal_if_due(&mut self) {
        let due = self
            .open
            .as_ref()
            .is_some_and(|s| s.opened.elapsed() >= self.settings.seal_after);
        if due {
            self.seal();
        }
    }

    /// Close the active segment and hand it to the replayer.
    fn seal(&mut self) {
        let Some(OpenSegment { file, path, .. }) = self.open.take() else {
            return;
        };
        drop(file);
        let to = segment_path(&self.settings.dir, self.seq, SEALED);
        if let Err(err) = std::fs::rename(&path, &to) {
            // Left active, it is sealed by `recover` at the next start.
            tracing::error!(%err, path = %path.display(), "sealing a journal segment failed");
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
            country: None,
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
            recorder.append(event(n)).unwrap();
        }
        let active = dir.path().join("00000000000000000000.active");
        let text = std::fs::read_to_string(&active).unwrap();
        assert_eq!(text.lines().count(), 3);
        let first =
            crate::journal::line::JournalLine::decode(text.lines().next().unwrap()).unwrap();
        assert_eq!(first.event_id, [0; 16]);

        stop.send(true).unwrap();
        writer.task.await.unwrap();
        assert_eq!(files(dir.path()), ["00000000000000000000.jsonl", "lock"]);
        assert!(matches!(
            recorder.append(event(9)),
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

    /// The waits before `crate::retry`: `retry_after` (1 s by default)
    /// after every failed pass, however many, forever.
    #[test]
    fn failed_passes_retry_on_the_old_schedule() {
        let schedule = JournalSettings::new("/nowhere").retry_schedule();
        for failures in [1, 2, 10, 1_000, u32::MAX] {
            assert_eq!(
                schedule.next(failures, Duration::from_secs(86_400 * 365), true),
                Ok(Duration::from_secs(1))
            );
        }
    }
}
