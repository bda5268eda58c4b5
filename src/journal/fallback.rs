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

/// Free space on the journal's filesystem, with hysteresis (a
/// node with a few KB left answered ready and unready by turns while its
/// writes failed and succeeded): below `min` it is low, and stays low until
/// more than `resume` is free.
pub struct SpaceGate {
    dir: std::path::PathBuf,
    min: u64,
    resume: u64,
    low: AtomicBool,
    gauge: metrics::Gauge,
}

/// Why the journal's filesystem counts as full.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the journal's filesystem has {free} bytes free, under {min}: unready until over {resume}")]
pub struct LowSpace {
    pub free: u64,
    pub min: u64,
    pub resume: u64,
}

impl SpaceGate {
    pub(crate) fn new(dir: &std::path::Path, min: u64, resume: u64) -> SpaceGate {
        SpaceGate {
            dir: dir.to_owned(),
            min,
            resume: resume.max(min),
            low: AtomicBool::new(false),
            gauge: metrics::gauge!("linktrack_journal_free_bytes"),
        }
    }

    /// Measure now (one `statvfs`) and apply the hysteresis. A filesystem
    /// that cannot be measured is not held against the node (the writes
    /// say whether it works).
    pub fn check(&self) -> Result<(), LowSpace> {
        let Some(free) = free_bytes(&self.dir) else {
            return Ok(());
        };
        self.gauge.set(free as f64);
        self.after_measuring(free)
    }

    fn after_measuring(&self, free: u64) -> Result<(), LowSpace> {
        let was_low = self.low.load(Ordering::Relaxed);
        let low = if was_low {
            free <= self.resume
        } else {
            free < self.min
        };
        if low != was_low {
            self.low.store(low, Ordering::Relaxed);
            if low {
                tracing::error!(free, min = self.min, resume = self.resume,
                    "the journal's filesystem is nearly full: /readyz answers 503 until more is free");
            } else {
                tracing::info!(
                    free,
                    "the journal's filesystem has room again; /readyz is ready"
                );
            }
        }
        match low {
            true => Err(LowSpace {
                free,
                min: self.min,
                resume: self.resume,
            }),
            false => Ok(()),
        }
    }
}

/// Bytes an unprivileged process may still write on `dir`'s filesystem.
fn free_bytes(dir: &std::path::Path) -> Option<u64> {
    let stat = rustix::fs::statvfs(dir).ok()?;
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_space_has_hysteresis() {
        let gate = SpaceGate::new(std::path::Path::new("/"), 100, 300);
        assert!(gate.after_measuring(500).is_ok());
        assert!(
            gate.after_measuring(100).is_ok(),
            "at the threshold: not yet"
        );
        let low = gate.after_measuring(99).unwrap_err();
        assert_eq!(
            low,
            LowSpace {
                free: 99,
                min: 100,
                resume: 300
            }
        );
        // Back over the low threshold is not enough: it flapped there.
        assert!(gate.after_measuring(200).is_err());
        assert!(gate.after_measuring(300).is_err());
        assert!(gate.after_measuring(301).is_ok());
        assert!(
            gate.after_measuring(150).is_ok(),
            "ready until under 100 again"
        );
    }

    #[test]
    fn a_real_filesystem_is_measured() {
        let dir = tempfile::tempdir().unwrap();
        assert!(free_bytes(dir.path()).is_some_and(|free| free > 0));
    }
}
