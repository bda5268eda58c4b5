//! The MySQL error numbers the store tells apart, and the one reader of a
//! server error's number: which errors go away by themselves, which say the
//! connection or a Spider data node is gone, and "no partition for this
//! day". Kept apart from [`StoreError`](super::error::StoreError) so the
//! connection-failure text (`connect_error`) and the cluster read them too.

/// MySQL's "Table has no partition for value ..." (ER_NO_PARTITION_FOR_GIVEN_VALUE).
const ER_NO_PARTITION_FOR_GIVEN_VALUE: u16 = 1526;

/// MySQL's lock wait timeout (ER_LOCK_WAIT_TIMEOUT).
pub(crate) const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// MySQL's deadlock (ER_LOCK_DEADLOCK).
pub(crate) const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's "Table doesn't exist" (ER_NO_SUCH_TABLE).
pub(crate) const ER_NO_SUCH_TABLE: u16 = 1146;

/// Missing privileges: on the database (1044), the login (1045), a table
/// (1142), an operation (1227).
pub(crate) const PRIVILEGE_ERRORS: [u16; 4] = [1044, 1045, 1142, 1227];

/// A read-only server, as during a failover (1290, 1792, 1836).
pub(crate) const READ_ONLY_ERRORS: [u16; 3] = [1290, 1792, 1836];

/// MySQL errors about the server's state rather than the data, which go
/// away by themselves or by an operator's fix: a lock wait timeout, a
/// deadlock, missing privileges and a read-only server.
pub const RETRYABLE_MYSQL_ERRORS: [u16; 9] = [
    ER_LOCK_WAIT_TIMEOUT,
    ER_LOCK_DEADLOCK,
    PRIVILEGE_ERRORS[0],
    PRIVILEGE_ERRORS[1],
    PRIVILEGE_ERRORS[2],
    PRIVILEGE_ERRORS[3],
    READ_ONLY_ERRORS[0],
    READ_ONLY_ERRORS[1],
    READ_ONLY_ERRORS[2],
];

/// MySQL errors that say the connection is gone: killed (1927), server
/// gone away (2006), connection lost during the query (2013).
pub(crate) const BROKEN_CONNECTION_ERRORS: [u16; 3] = [1927, 2006, 2013];

/// Errors a Spider head answers with when a data node is down: the remote
/// server has gone away (12701), cannot connect to the foreign data source
/// (1429), and the client-side lost-connection errors it passes on (2006,
/// 2013). The statement works again once the node is back.
pub const SPIDER_REMOTE_ERRORS: [u16; 4] = [12701, 1429, 2006, 2013];

/// The MySQL error number of a server error. (sqlx's `code()` is the
/// SQLSTATE, which lumps many errors together.)
pub(crate) fn mysql_error_number(err: &sqlx::Error) -> Option<u16> {
    err.as_database_error()
        .and_then(|db| db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .map(|db| db.number())
}

/// True when `err` is MySQL's "no partition for the given value".
pub(crate) fn is_no_partition(err: &sqlx::Error) -> bool {
    mysql_error_number(err) == Some(ER_NO_PARTITION_FOR_GIVEN_VALUE)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list as it was written out before its groups were named.
    #[test]
    fn the_retryable_errors_are_the_groups_together() {
        assert_eq!(
            RETRYABLE_MYSQL_ERRORS,
            [1205, 1213, 1044, 1045, 1142, 1227, 1290, 1792, 1836]
        );
    }
}
