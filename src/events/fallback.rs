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
//!
//! The queue and the health are here, below the journal that fills them;
//! the task that empties them is `drain`.

use crate::event::EventRow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use tokio::sync::Notify;

/// Events held in memory at most while neither the journal nor the
/// database takes them (about 300 bytes each: 30 MB).
pub const QUEUE_CAPACITY: usize = 100_000;

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
    /// Woken by each push, for the drain.
    pub(crate) wake: Notify,
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
    pub(crate) fn peek(&self, most: usize) -> Vec<EventRow> {
        self.events
            .lock()
            .map(|events| events.iter().take(most).cloned().collect())
            .unwrap_or_default()
    }

    /// Drop the `n` oldest events: they are stored.
    pub(crate) fn forget(&self, n: usize) {
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
