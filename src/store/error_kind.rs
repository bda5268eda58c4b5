//! [`StoreError::kind`]: a short, stable name for each failure (a
//! deadlock, a lock wait, a lost connection, a full pool...), so a log line
//! or a test tells them apart without reading the message.

use super::error::StoreError;
use super::mysql_errors::{
    is_no_partition, mysql_error_number, BROKEN_CONNECTION_ERRORS, ER_LOCK_DEADLOCK,
    ER_LOCK_WAIT_TIMEOUT, ER_NO_SUCH_TABLE, PRIVILEGE_ERRORS, READ_ONLY_ERRORS,
    SPIDER_REMOTE_ERRORS,
};

impl StoreError {
    /// A short, stable name for what went wrong (`deadlock`,
    /// `lock_wait_timeout`, `connection_lost`, `pool_timeout`, ...), for
    /// logs and tests that must tell one failure from another without
    /// reading the message. A data node's error is its own error's kind.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Sqlx(err) => sqlx_error_kind(err),
            StoreError::Migrate(_) => "migration",
            StoreError::NoPartition { .. } => "no_partition",
            StoreError::BadUrl(_)
            | StoreError::BadUrlOptions { .. }
            | StoreError::BadNodeUrl { .. } => "bad_url",
            StoreError::Task { .. } => "task",
            StoreError::Json { .. } => "json",
            StoreError::Refused(_) => "refused",
            StoreError::Connect { .. } => "connect",
            StoreError::LockBusy { .. } => "lock_busy",
            StoreError::SealKey(_) => "seal_key",
            StoreError::Corrupt { .. } => "corrupt",
            StoreError::Node { source, .. } => source.kind(),
            StoreError::NodesFailed { .. } => "nodes_failed",
        }
    }

    /// The MySQL error number behind this error, when the server gave one
    /// (a data node's included).
    pub fn mysql_error(&self) -> Option<u16> {
        match self {
            StoreError::Sqlx(err) => mysql_error_number(err),
            StoreError::Node { source, .. } => source.mysql_error(),
            _ => None,
        }
    }
}

/// [`StoreError::kind`] of a driver error: the server's error number
/// first (the classes `mysql_errors.rs` names), then what the driver saw.
fn sqlx_error_kind(err: &sqlx::Error) -> &'static str {
    if is_no_partition(err) {
        return "no_partition";
    }
    if let Some(number) = mysql_error_number(err) {
        return match number {
            ER_LOCK_DEADLOCK => "deadlock",
            ER_LOCK_WAIT_TIMEOUT => "lock_wait_timeout",
            ER_NO_SUCH_TABLE => "no_such_table",
            n if PRIVILEGE_ERRORS.contains(&n) => "privileges",
            n if READ_ONLY_ERRORS.contains(&n) => "read_only",
            n if BROKEN_CONNECTION_ERRORS.contains(&n) => "connection_lost",
            n if SPIDER_REMOTE_ERRORS.contains(&n) => "data_node_down",
            _ => "statement_refused",
        };
    }
    match err {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => {
            "connection_lost"
        }
        sqlx::Error::PoolTimedOut => "pool_timeout",
        sqlx::Error::PoolClosed => "pool_closed",
        sqlx::Error::Tls(_) => "tls",
        sqlx::Error::RowNotFound => "row_not_found",
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => "decode",
        sqlx::Error::Configuration(_) => "configuration",
        _ => "database",
    }
}

#[cfg(test)]
mod kind_tests {
    use super::super::error::StoreError;

    #[test]
    fn a_lost_connection_and_a_full_pool_are_told_apart() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let lost = StoreError::Sqlx(sqlx::Error::Io(reset));
        let waited = StoreError::Sqlx(sqlx::Error::PoolTimedOut);
        assert_eq!(lost.kind(), "connection_lost");
        assert_eq!(waited.kind(), "pool_timeout");
        assert_eq!(lost.mysql_error(), None);
    }

    #[test]
    fn a_data_node_s_error_is_its_own_error_s_kind() {
        let node = StoreError::Node {
            node: "node-2".into(),
            source: Box::new(StoreError::Sqlx(sqlx::Error::PoolClosed)),
        };
        assert_eq!(node.kind(), "pool_closed");
    }
}
