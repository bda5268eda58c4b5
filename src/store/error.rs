//! [`StoreError`], the one error of the storage layer, and what a caller
//! asks of it (rejected data, unavailable, a broken connection, a data node
//! down). Every file of the store returns it; it lives here, apart from the
//! files it names, so that none of them imports `store/mod.rs`.

use super::connect_error::ConnectTarget;
use super::mysql_errors::{
    mysql_error_number, BROKEN_CONNECTION_ERRORS, RETRYABLE_MYSQL_ERRORS, SPIDER_REMOTE_ERRORS,
};
use super::node_address::NodeAddressError;
use super::node_failure::NodeFailure;
use crate::token::KeyRefusal;
use chrono::NaiveDate;
use std::time::Duration;

/// Errors of the storage layer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error(
        "table `{table}` has no partition for {date}: run `linktrack partitions ensure` \
         (and check that the daily `linktrack partitions rotate` cron is running)"
    )]
    NoPartition {
        table: &'static str,
        date: NaiveDate,
    },
    #[error("invalid DATABASE_URL: {0}")]
    BadUrl(String),
    /// `DATABASE_URL` named MySQL but its options did not parse (a port
    /// that is no number, an unknown `ssl-mode`...).
    #[error("invalid DATABASE_URL: {source}")]
    BadUrlOptions {
        #[source]
        source: sqlx::Error,
    },
    /// A node URL given as a flag (`flag`, such as `--to`) was refused.
    #[error("invalid DATABASE_URL: {flag}: {source}")]
    BadNodeUrl {
        flag: &'static str,
        #[source]
        source: NodeAddressError,
    },
    #[error("{0}")]
    Refused(String),
    /// Rows that could not become the JSON document a statement reads.
    #[error("{what} could not be written as JSON: {source}")]
    Json {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A task of the store's (one per data node, a rename on its own
    /// connection) ended without its result: it panicked, or the runtime
    /// shut down under it.
    #[error("{what} failed: {source}")]
    Task {
        what: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
    /// The server could not be reached or refused the login: said once, with
    /// the target (never the password) and a hint (`connect_error`).
    #[error("{message}")]
    Connect {
        target: ConnectTarget,
        message: String,
    },
    #[error("another `partitions` runner held the lock for `{lock}` longer than {waited:?}")]
    LockBusy { lock: String, waited: Duration },
    /// A seal key ring refused (`seal_keys`): says what to do.
    #[error(transparent)]
    SealKey(KeyRefusal),
    #[error("unexpected data in `{table}`: {detail}")]
    Corrupt { table: &'static str, detail: String },
    /// A Spider cluster's data node failed (`store::cluster`).
    #[error("data node {node}: {source}")]
    Node {
        node: String,
        #[source]
        source: Box<StoreError>,
    },
    /// Some data nodes failed while the others were done (`partitions` on a
    /// cluster; what the others did is in its [`PartitionRun`]).
    ///
    /// [`PartitionRun`]: crate::store::partitions::PartitionRun
    #[error("{}", failed.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    NodesFailed { failed: Vec<NodeFailure> },
}

impl StoreError {
    /// True when a database or node URL was refused before any connection
    /// (a setting to mend, which no retry will).
    pub fn is_bad_url(&self) -> bool {
        matches!(
            self,
            StoreError::BadUrl(_)
                | StoreError::BadUrlOptions { .. }
                | StoreError::BadNodeUrl { .. }
        )
    }

    /// True when the server answered with an error about the data itself
    /// (a value it refuses), so running the same statement again can never
    /// succeed. Unreachable servers, locks, deadlocks, privileges and a
    /// read-only server ([`RETRYABLE_MYSQL_ERRORS`]) are not.
    pub fn is_rejected_data(&self) -> bool {
        let StoreError::Sqlx(err) = self else {
            return false;
        };
        mysql_error_number(err).is_some_and(|number| {
            !RETRYABLE_MYSQL_ERRORS.contains(&number) && !SPIDER_REMOTE_ERRORS.contains(&number)
        })
    }

    /// True when the database could not be reached or the connection broke,
    /// as opposed to the statement being wrong.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Connect { .. })
            || self.is_data_node_down()
            || matches!(
                self,
                StoreError::Sqlx(
                    sqlx::Error::Io(_)
                        | sqlx::Error::PoolTimedOut
                        | sqlx::Error::PoolClosed
                        | sqlx::Error::Tls(_)
                        | sqlx::Error::Protocol(_)
                        | sqlx::Error::WorkerCrashed
                )
            )
    }
}

impl StoreError {
    /// True when the statement's connection was found dead: the server
    /// closed it (a restart, `KILL`, `wait_timeout`) before or while the
    /// statement was sent. The statement may succeed on another connection.
    pub fn is_broken_connection(&self) -> bool {
        let StoreError::Sqlx(err) = self else {
            return false;
        };
        matches!(err, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
            || mysql_error_number(err).is_some_and(|n| BROKEN_CONNECTION_ERRORS.contains(&n))
    }

    /// True when a Spider head could not reach the data node holding the
    /// rows ([`SPIDER_REMOTE_ERRORS`]): the other nodes' rows still
    /// work, and these come back with the node.
    pub fn is_data_node_down(&self) -> bool {
        let StoreError::Sqlx(err) = self else {
            return false;
        };
        mysql_error_number(err).is_some_and(|n| SPIDER_REMOTE_ERRORS.contains(&n))
    }
}
