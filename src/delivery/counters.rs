//! Running counts of a run's delivery (delivered, retried, refused): kept
//! by the SMTP sessions (`smtp/`), shown by the builder's progress bar.

use std::sync::atomic::{AtomicU64, Ordering};

/// Running counts of this run's delivery, for the progress bar.
#[derive(Debug, Default)]
pub struct DeliveryCounters {
    pub delivered: AtomicU64,
    /// Temporary failures retried (4xx, refused connections, timeouts).
    pub retried: AtomicU64,
    /// Refused for good by the MTA.
    pub rejected: AtomicU64,
}

impl DeliveryCounters {
    /// "delivered 120 · retried 3 · refused 1", for the progress bar.
    pub fn line(&self) -> String {
        format!(
            "delivered {} · retried {} · refused {}",
            self.delivered.load(Ordering::Relaxed),
            self.retried.load(Ordering::Relaxed),
            self.rejected.load(Ordering::Relaxed)
        )
    }
}
