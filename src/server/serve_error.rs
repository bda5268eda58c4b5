//! Why the server could not start or stopped serving ([`ServeError`]):
//! what [`App::build`](super::App::build) and [`App::run`](super::App::run)
//! return.

use super::stats::StatsError;
use crate::journal::segments::JournalError;
use std::net::SocketAddr;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error("building the image proxy client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("preparing the stats dashboard: {0}")]
    Stats(#[source] Box<StatsError>),
    #[error("listening on {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
    #[error("serving HTTP: {0}")]
    Io(#[from] std::io::Error),
    /// The seal key ring is refused (`store::seal_keys`).
    #[error(transparent)]
    SealKey(crate::store::seal_keys::KeyRefusal),
    /// The TLS listener's configuration was refused.
    #[error("setting up TLS: {0}")]
    Tls(#[source] rustls::Error),
    /// The admin listener's task panicked or was cancelled.
    #[error("the admin listener stopped: {0}")]
    AdminTask(#[source] tokio::task::JoinError),
}

impl From<StatsError> for ServeError {
    fn from(err: StatsError) -> Self {
        ServeError::Stats(Box::new(err))
    }
}
