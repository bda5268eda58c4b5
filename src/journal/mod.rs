//! Recording hits (clicks, opens, image loads, unsubscribes) without making
//! the visitor wait for the database.
//!
//! A handler appends its event to the journal ([`segments`]), an append-only
//! JSON-lines segment file, and answers once the line is written (the OS
//! page cache, no fsync). The `replay` task inserts
//! sealed segments into `events` and deletes a segment only once all of its
//! events are committed, so a slow or absent database only grows the backlog,
//! and a crash loses nothing that was acknowledged. `bots` classifies every
//! event; bots are stored with a reason, never dropped.

mod drain;
pub mod fallback;
pub(crate) mod line;
mod outbox_sink;
pub mod readers;
pub(crate) mod replay;
pub mod segments;

use crate::event::EventRow;
pub use outbox_sink::{Enqueued, OutboxSink};
use segments::{JournalError, JournalSettings, Recorder};
use sqlx::MySqlPool;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The running journal sealer and replayer, and the handle handlers record with.
pub struct EventPipeline {
    recorder: Recorder,
    /// Two stop signals, because the order matters: the writer must seal its
    /// last segment before the replayer makes its final pass.
    stop_writer: watch::Sender<bool>,
    stop_replayer: watch::Sender<bool>,
    stop_drain: watch::Sender<bool>,
    writer: JoinHandle<()>,
    /// Moves events the journal could not write on ([`fallback`]).
    drain: JoinHandle<()>,
    replayer: JoinHandle<()>,
    /// The journal directory is ours while this is held.
    _lock: segments::JournalLock,
}

impl EventPipeline {
    /// Recover the journal directory (segments a previous process left
    /// behind become replayable), then start the writer and the replayer.
    /// `outbox` takes each replayed batch (events out); every event is
    /// screened with `privacy` (opt-outs, erasures) before it is stored;
    /// links are read through `router` when there is one (a Spider head).
    /// The replayer runs on `replay_on` when given (the server's
    /// low-priority runtime), else on the current runtime.
    pub async fn start(
        pool: MySqlPool,
        settings: JournalSettings,
        outbox: Arc<dyn OutboxSink>,
        privacy: crate::privacy::Privacy,
        router: Option<crate::store::cluster::Router>,
        replay_on: Option<tokio::runtime::Handle>,
    ) -> Result<Self, JournalError> {
        let (next_segment, lock) = segments::recover(&settings.dir).await?;
        let (stop_writer, writer_stopped) = watch::channel(false);
        let (stop_replayer, replayer_stopped) = watch::channel(false);
        let (recorder, writer) =
            segments::spawn_writer(settings.clone(), next_segment, writer_stopped);
        let sinks = replay::Sinks {
            outbox,
            privacy,
            router,
            readers: recorder.readers().clone(),
        };
        let sealed = writer.sealed.clone();
        let (stop_drain, drain_stopped) = watch::channel(false);
        let drain = tokio::spawn(drain::drain(
            pool.clone(),
            sinks.clone(),
            recorder.clone(),
            settings.dir.clone(),
            settings.retry_schedule(),
            drain_stopped,
        ));
        let replay = replay::run(pool, settings, sinks, sealed, replayer_stopped);
        let replayer = match replay_on {
            Some(runtime) => runtime.spawn(replay),
            None => tokio::spawn(replay),
        };
        Ok(EventPipeline {
            recorder,
            stop_writer,
            stop_replayer,
            stop_drain,
            writer: writer.task,
            drain,
            replayer,
            _lock: lock,
        })
    }

    /// The handle handlers journal their hits with.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Graceful stop: the writer appends whatever is queued and seals its
    /// segment, then the replayer makes one last pass, bounded by `deadline`.
    /// Events it cannot insert in time stay in the journal for the next start.
    pub async fn shutdown(self, deadline: Duration) {
        // The drain first, while the journal still takes its events.
        let _ = self.stop_drain.send(true);
        if tokio::time::timeout(deadline, self.drain).await.is_err() {
            tracing::error!(
                ?deadline,
                "events queued for a journal that could not write: lost"
            );
        }
        let _ = self.stop_writer.send(true);
        if let Err(err) = self.writer.await {
            tracing::error!(%err, "journal sealer failed while stopping");
        }
        let _ = self.stop_replayer.send(true);
        if tokio::time::timeout(deadline, self.replayer).await.is_err() {
            tracing::warn!(
                ?deadline,
                "events not yet in the database stay in the journal for the next start"
            );
        }
        tracing::debug!("event pipeline stopped");
    }

    /// Handles that stop the tasks at once, as a crash would: nothing is
    /// flushed or sealed. For tests of journal durability.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn abort_handles(&self) -> Vec<tokio::task::AbortHandle> {
        vec![
            self.writer.abort_handle(),
            self.replayer.abort_handle(),
            self.drain.abort_handle(),
        ]
    }
}

/// Where the journal lives by default, relative to the working directory.
pub fn default_journal_dir() -> PathBuf {
    PathBuf::from("journal")
}

/// Append one event; returns once it is in the journal file or, when the
/// journal cannot write, queued for the database ([`fallback`]), with
/// `true`; `false` if it is lost.
pub fn append(recorder: &Recorder, row: EventRow) -> bool {
    match recorder.append(row) {
        Ok(()) => true,
        Err(err) => {
            // Callers still answer the visitor: losing one statistic is
            // better than failing a redirect.
            metrics::counter!("linktrack_events_lost_total").increment(1);
            tracing::error!(%err, "event not recorded");
            false
        }
    }
}
