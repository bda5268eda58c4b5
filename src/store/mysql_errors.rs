//! The MySQL error numbers the store tells apart, and the one reader of a
//! server error's number: which errors go away by themselves, which say the
//! connection or a Spider data node is gone, and "no partition for this
//! day". Kept apart from [`StoreError`](super::error::StoreError) so the
//! connection-failure text (`connect_error`) and the cluster read them too.

/// MySQL's "Table has no partition for value ..." (ER_NO_PARTITION_FOR_GIVEN_VALUE).
const ER_NO_PARTITION_FOR_GIVEN_VALUE: u16 = 1526;

/// MySQL errors about the server's state rather than the data, which go
/// away by themselves or by an operator's fix: lock wait timeout (1205),
/// deadlock (1213), missing privileges (1044, 1045, 1142, 1227) and a
/// read-only server, as during a failover (1290, 1792, 1836).
pub const RETRYABLE_MYSQL_ERRORS: [u16; 9] = [1205, 1213, 1044, 1045, 1142, 1227, 1290, 1792, 1836];

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
