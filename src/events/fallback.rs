//! What happens to an event the journal cannot write (a full or read-only
//! disk): it is not dropped. It waits in a bounded in-memory queue, and a
//! drain task moves it on: back into the journal as soon as the journal
//! writes again, else straight into the database (the replay's own path:
//! links resolved, unsubscribes applied, outbound queued).
//!
//! While the journal cannot write, [`JournalHealth`] says so: `/readyz`
//! answers 503 so a load balancer drains the node, and
//! `linktrack_journal_writable` is 0 for the alert. The queue holds
//! [`QUEUE_CAPACITY`] events; what does not fit is counted in
//! `linktrack_events_lost_total` (and logged), the only way an answered
//! hit loses its event while the process lives.

use super::journal::Recorder;
use super::record::Replayable;
use crate::outbound::Outbound;
use crate::store::events::EventRow;
use sqlx::MySqlPool;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Events held in memory at most while neither the journal nor the
/// database takes them (about 300 bytes each: 30 MB).
pub const QUEUE_CAPACITY: usize = 100_000;

/// Events moved on per pass of the drain.
const DRAIN_BATCH: usize = 1_000;

/// Whether the journal's last write succeeded, shared by the recorder, the
/// drain and `/readyz`.
pub struct JournalHealth {
    writable: AtomicBool,
    gauge: metrics::Gauge,
}

impl JournalHealth {
    pub(crate) fn new() -> JournalHealth {
        let gauge = metrics::gauge!("linktrack_journal_writable");
        gauge.set(1.0);
        JournalHealth {
            writable: AtomicBool::new(true),
            gauge,
        }
    }

    pub fn is_writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed)
    }

    /// Record the outcome of a write; a change is logged once, not per event.
    pub(crate) fn set(&self, writable: bool, cause: Option<&dyn std::fmt::Display>) {
        if self.writable.swap(writable, Ordering::Relaxed) == writable {
            return;
        }
        self.gauge.set(if writable { 1.0 } else { 0.0 });
        match (writable, cause) {
            (true, _) => tracing::info!("the journal writes again; /readyz is ready"),
            (false, Some(cause)) => tracing::error!(
                %cause,
                "the journal cannot write: events go to memory and the database directly, \
                 /readyz answers 503 until it writes again"
            ),
            (false, None) => tracing::error!("the journal cannot write"),
        }
    }
}

/// Events waiting for the journal or the database.
pub struct FallbackQueue {
    events: Mutex<VecDeque<EventRow>>,
    capacity: usize,
    wake: Notify,
    queued: metrics::Gauge,
}

impl FallbackQueue {
    pub(crate) fn new(capacity: usize) -> FallbackQueue {
        FallbackQueue {
            events: Mutex::new(VecDeque::new()),
            capacity,
            wake: Notify::new(),
            queued: metrics::gauge!("linktrack_journal_fallback_queued_events"),
        }
    }

    /// Keep `row` for the drain; false (and `row` dropped) when the queue
    /// is full.
    pub(crate) fn push(&self, row: EventRow) -> bool {
        let Ok(mut events) = self.events.lock() else {
            return false;
        };
        if events.len() >= self.capacity {
            return false;
        }
        events.push_back(row);
        self.queued.set(events.len() as f64);
        drop(events);
        self.wake.notify_one();
        true
    }

    /// Up to `most` of the oldest events, left in the queue (they leave it
    /// with [`FallbackQueue::forget`] once stored).
    fn peek(&self, most: usize) -> Vec<EventRow> {
        self.events
            .lock()
            .map(|events| events.iter().take(most).cloned().collect())
            .unwrap_or_default()
    }

    /// Drop the `n` oldest events: they are stored.
    fn forget(&self, n: usize) {
        if let Ok(mut events) = self.events.lock() {
            let n = n.min(events.len());
            events.drain(..n);
            self.queued.set(events.len() as f64);
        }
    }

    pub fn len(&self) -> usize {
        self.events.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Move queued events on until told to stop, then once more.
pub(crate) async fn drain(
    pool: MySqlPool,
    outbound: Outbound,
    recorder: Recorder,
    dir: PathBuf,
    retry_after: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let queue = recorder.fallback();
    loop {
        let failed = drain_once(&pool, &outbound, &recorder).await.is_err();
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
            _ = tokio::time::sleep(retry_after), if failed || !idle => {}
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
    let _ = drain_once(&pool, &outbound, &recorder).await;
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
async fn drain_once(pool: &MySqlPool, outbound: &Outbound, recorder: &Recorder) -> Result<(), ()> {
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
        let events: Vec<Replayable> = batch
            .into_iter()
            .map(|row| Replayable {
                // As in the journal (record version 2): an event without
                // its link (an open) has its link looked up.
                resolve_link: row.link_id.is_none(),
                row,
            })
            .collect();
        let n = events.len();
        match super::replay::store_events(pool, outbound, events).await {
            Ok(_) => {
                queue.forget(n);
                metrics::counter!("linktrack_journal_fallback_stored_total", "to" => "database")
                    .increment(n as u64);
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
