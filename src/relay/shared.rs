//! What every SMTP session of one relay shares: its settings, the
//! database, the tracker, the spool and the spool worker's wake-up.

use super::hand_over::HandOver;
use super::settings::RelaySettings;
use super::spool::Spool;
use super::track::Tracker;
use crate::api_keys::KeyVerifier;
use sqlx::MySqlPool;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use tokio::sync::Notify;

/// Shared by the sessions (behind an `Arc`).
pub(crate) struct Shared {
    pub settings: RelaySettings,
    /// Checks an AUTH password: the API token or a key (scope `relay:send`).
    pub keys: KeyVerifier,
    pub pool: MySqlPool,
    /// Where each recipient stands (suppressed, erased, opted out), in
    /// memory, followed from the change logs.
    pub recipients: super::standing::Recipients,
    pub tracker: Tracker,
    pub spool: Arc<Spool>,
    /// The MTAs a message is handed to at once (`--forward now`).
    pub hand_over: Option<HandOver>,
    /// Told when a message is queued.
    pub wake: Arc<Notify>,
    /// Suppressed recipients accepted and dropped (`--suppressed drop`).
    pub dropped: AtomicU64,
    /// STARTTLS's server side; `None`: not offered.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}
