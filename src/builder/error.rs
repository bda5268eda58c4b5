//! [`BuildError`]: why a build stopped, naming the file, the setting or the
//! MTA at fault. Every stage of the builder returns it.

use super::mailing;
use super::mailing_context::PrepareError;
use crate::store::StoreError;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Mailing(#[from] mailing::MailingError),
    #[error("--bounce-domain: {0}")]
    BounceDomain(String),
    /// A letter's envelope sender under `--bounce-domain` is no address.
    #[error("--bounce-domain: {address:?} is no address")]
    BounceAddress {
        address: String,
        #[source]
        source: lettre::address::AddressError,
    },
    #[error("{path}: {source}")]
    Template { path: PathBuf, source: PrepareError },
    #[error("{path}: {size} bytes of HTML, over the limit of {limit} bytes; nothing was built: {reason}")]
    TooBig {
        path: PathBuf,
        size: usize,
        limit: usize,
        reason: &'static str,
    },
    #[error(
        "{path}: field `mailing_id`: {id:?} is taken for the existing mailing {existing:?} by the \
         database (ids compare without case or trailing spaces there), so the two would be one \
         mailing; nothing was built: give this mailing another id"
    )]
    MailingIdCollides {
        path: PathBuf,
        id: String,
        existing: String,
    },
    #[error(
        "{path}: {changed}, unlike the letters built under mailing_id {id:?} before, which may \
         be out already and keep linking where they did; nothing was built: give the changed \
         mailing a new mailing_id (such as \"{id}-2\"), or put the original back to resume \
         the earlier build"
    )]
    ChangedMailing {
        path: PathBuf,
        id: String,
        /// What changed: the subject, or a tracked link (its position, URLs).
        changed: String,
    },
    #[error("{path}: cannot read recipients: {source}")]
    Recipients {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot write: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Smtp(#[from] crate::delivery::smtp::SmtpError),
    #[error(transparent)]
    Pools(#[from] crate::delivery::pools::PoolsError),
    #[error(transparent)]
    DeliveryLog(#[from] crate::delivery::log_file::DeliveryLogError),
    #[error(transparent)]
    Ledger(#[from] crate::delivery::ledger::LedgerError),
    #[error(
        "the MTA at {host} kept failing for letter {letter_id} ({email}): {reply}; every letter \
         not yet delivered is left for a re-run of the same command"
    )]
    Delivery {
        host: String,
        letter_id: u64,
        email: String,
        reply: String,
    },
    /// A thread or task of the build ended without its result: it
    /// panicked (a bug), or the runtime shut down under it.
    #[error("internal error: {what}: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    #[error("internal error: summary: {0}")]
    SummaryJson(#[source] serde_json::Error),
    /// A broken invariant with no underlying error to carry.
    #[error("internal error: {0}")]
    Internal(String),
}

impl BuildError {
    /// [`BuildError::Task`] for the thread or task called `what`, as a
    /// `map_err` argument.
    pub(crate) fn task(what: &'static str) -> impl FnOnce(tokio::task::JoinError) -> BuildError {
        move |source| BuildError::Task { what, source }
    }
}
