//! Sending mechanics: each built letter as a complete RFC 5322 message
//! ([`message`]); [`smtp`] hands messages to an MTA, [`pools`] names each
//! pool's MTAs, [`ledger`] records each outcome so a re-run delivers nothing
//! twice ([`log_file`]: first in a local file, so a connection need not
//! wait for a database commit before its next letter). Which letters go when is the builder's (`builder::handover`).

pub mod body;
pub mod ledger;
pub mod log_file;
pub mod message;
pub mod pools;
pub mod smtp;

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
