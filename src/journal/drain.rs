//! The drain: moves the events the journal could not write ([`super::fallback`])
//! back into the journal as soon as it writes again, else straight into the
//! database along the replay's own path.

use super::fallback::JournalHealth;
use super::line::Replayable;
use super::replay::Sinks;
use super::segments::Recorder;
use crate::event::EventRow;
use crate::retry::Backoff;
use sqlx::MySqlPool;
use std::path::{Path, PathBuf};
use tokio::sync::watch;

/// Events moved on per pass of the drain.
const DRAIN_BATCH: usize = 1_000;

/// Move queued events on until told to stop, then once more.
pub(crate) async fn drain(
    pool: MySqlPool,
    sinks: Sinks,
    recorder: Recorder,
    dir: PathBuf,
    retry: Backoff,
    mut stop: watch::Receiver<bool>,
) {
    let queue = recorder.fallback();
    let mut retries = retry.start();
    loop {
        let failed = drain_once(&pool, &sinks, &recorder).await.is_err();
        // After a failed pass, the schedule's wait for the failures in a
        // row; while events wait for a journal that cannot write, its first.
        let pause = if failed {
            retries.wait_after_failure()
        } else {
            retries.succeeded();
            retry.delay(0)
        };
        if !recorder.health().is_writable() && queue.is_empty() {
            // No event is coming to try the journal with (a drained node
            // gets no traffic): try the directory itself.
            probe(&dir, recorder.health());
        }
        if *stop.borrow() {
            break;
        }
        let idle = queue.is_empty() && recorder.health().is_writable();
        tokio::select! {
            _ = queue.wake.notified(), if !failed => {}
            _ = tokio::time::sleep(pause), if failed || !idle => {}
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
    let _ = drain_once(&pool, &sinks, &recorder).await;
    let left = queue.len();
    if left > 0 {
        metrics::counter!("linktrack_events_lost_total").increment(left as u64);
        tracing::error!(
            events = left,
            "stopping with events neither the journal nor the database took: lost"
        );
    }
}

/// One pass: every queued event into the journal if it writes, else into
/// the database; stops at the first batch neither takes.
async fn drain_once(pool: &MySqlPool, sinks: &Sinks, recorder: &Recorder) -> Result<(), ()> {
    let queue = recorder.fallback();
    loop {
        let batch = queue.peek(DRAIN_BATCH);
        if batch.is_empty() {
            return Ok(());
        }
        let journaled = journal_all(recorder, &batch);
        if journaled > 0 {
            queue.forget(journaled);
            metrics::counter!("linktrack_journal_fallback_stored_total", "to" => "journal")
                .increment(journaled as u64);
            continue;
        }
        // As in the journal: what the line would say is looked up.
        let events: Vec<Replayable> = batch.into_iter().map(Replayable::current).collect();
        let n = events.len();
        let mut down = crate::store::cluster::NodesDown::default();
        match super::replay::store_events(pool, sinks, events, &mut down).await {
            Ok(stored) if stored.held.is_empty() => {
                queue.forget(n);
                metrics::counter!("linktrack_journal_fallback_stored_total", "to" => "database")
                    .increment(n as u64);
            }
            Ok(stored) => {
                // The queue keeps the batch whole: its stored events are
                // no-ops when it is stored again.
                tracing::warn!(
                    events = n,
                    held = stored.held.len(),
                    "queued events wait for a data node; will retry"
                );
                return Err(());
            }
            Err(err) => {
                tracing::warn!(%err, events = n, "queued events not stored; will retry");
                return Err(());
            }
        }
    }
}

/// Append the batch to the journal, oldest first; how many went in.
fn journal_all(recorder: &Recorder, batch: &[EventRow]) -> usize {
    let mut written = 0;
    for row in batch {
        if recorder.append_without_fallback(row).is_err() {
            break;
        }
        written += 1;
    }
    written
}

/// Whether the journal's directory takes a write again: a page written and
/// removed. Only run while the journal is known not to write.
fn probe(dir: &Path, health: &JournalHealth) {
    let path = dir.join("write-probe");
    let written = std::fs::write(&path, [b'\n'; 4096]);
    let _ = std::fs::remove_file(&path);
    if written.is_ok() {
        health.set(true, None);
    }
}
