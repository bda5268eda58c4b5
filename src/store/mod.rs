//! MySQL / MariaDB: the pool, migrations, and every SQL statement the service
//! runs. Nothing outside this module writes SQL.

pub mod address_list;
pub mod bounces;
pub mod breakdowns;
pub mod cluster;
pub(crate) mod connect_error;
pub mod dashboard_sessions;
pub mod deliveries;
pub mod engagement;
pub mod erase;
pub mod events;
pub mod link_templates;
pub mod links;
pub mod maintenance;
pub mod outbox;
pub mod partitions;
pub mod privacy;
pub mod rolled_batch;
pub mod rollup;
pub mod row_format;
pub mod seal_keys;
pub mod segments;
pub mod sequences;
pub mod shard_move;
pub mod stats;
pub mod suppressions;
mod tally;
pub mod tls_certificates;
pub mod tracking_domains;
pub mod tracking_optouts;
pub mod verdicts;

use chrono::NaiveDate;
use sqlx::migrate::MigrateDatabase;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, MySql, MySqlPool};
use std::str::FromStr;

pub use row_format::{set_row_format, RowFormat, RowFormatOptions, DEFAULT_ROW_FORMAT};
use std::time::Duration;

/// The migrations in `migrations/`, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// MySQL's "Table has no partition for value ..." (ER_NO_PARTITION_FOR_GIVEN_VALUE).
const ER_NO_PARTITION_FOR_GIVEN_VALUE: u16 = 1526;

/// MySQL errors about the server's state rather than the data, which go
/// away by themselves or by an operator's fix: lock wait timeout (1205),
/// deadlock (1213), missing privileges (1044, 1045, 1142, 1227) and a
/// read-only server, as during a failover (1290, 1792, 1836).
pub const RETRYABLE_MYSQL_ERRORS: [u16; 9] = [1205, 1213, 1044, 1045, 1142, 1227, 1290, 1792, 1836];

/// MySQL errors that say the connection is gone: killed (1927), server
/// gone away (2006), connection lost during the query (2013).
const BROKEN_CONNECTION_ERRORS: [u16; 3] = [1927, 2006, 2013];

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
    #[error("{0}")]
    Refused(String),
    /// The server could not be reached or refused the login: said once, with
    /// the target (never the password) and a hint (`connect_error`).
    #[error("{message}")]
    Connect {
        target: connect_error::ConnectTarget,
        message: String,
    },
    #[error("another `partitions` runner held the lock for `{lock}` longer than {waited:?}")]
    LockBusy { lock: String, waited: Duration },
    /// A seal key ring refused (`seal_keys`): says what to do.
    #[error(transparent)]
    SealKey(seal_keys::KeyRefusal),
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
    /// cluster); `done` says what happened on the others.
    #[error("{}", failed.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    NodesFailed {
        done: Vec<partitions::TableReport>,
        failed: Vec<cluster::NodeFailure>,
    },
}

impl StoreError {
    /// True when the server answered with an error about the data itself
    /// (a value it refuses), so running the same statement again can never
    /// succeed. Unreachable servers, locks, deadlocks, privileges and a
    /// read-only server ([`RETRYABLE_MYSQL_ERRORS`]) are not.
    pub fn is_rejected_data(&self) -> bool {
        let StoreError::Sqlx(err) = self else {
            return false;
        };
        mysql_error_number(err).is_some_and(|number| {
            !RETRYABLE_MYSQL_ERRORS.contains(&number)
                && !cluster::SPIDER_REMOTE_ERRORS.contains(&number)
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
    /// rows (`cluster::SPIDER_REMOTE_ERRORS`): the other nodes' rows still
    /// work, and these come back with the node.
    pub fn is_data_node_down(&self) -> bool {
        let StoreError::Sqlx(err) = self else {
            return false;
        };
        mysql_error_number(err).is_some_and(|n| cluster::SPIDER_REMOTE_ERRORS.contains(&n))
    }
}

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

/// Values per `IN (…)` list: far below the 65,535 placeholders of one
/// statement, and small enough that each statement stays short.
pub(crate) const IN_LIST_CHUNK: usize = 1_000;

/// Push `(?, ?, …)` with one bound value per item: the one builder of every
/// `IN` list (callers chunk their values by [`IN_LIST_CHUNK`]).
pub(crate) fn push_in_list<'q, T>(
    query: &mut sqlx::QueryBuilder<'q, MySql>,
    values: impl IntoIterator<Item = T>,
) where
    T: 'q + sqlx::Encode<'q, MySql> + sqlx::Type<MySql> + Send,
{
    query.push("(");
    let mut list = query.separated(", ");
    for value in values {
        list.push_bind(value);
    }
    query.push(")");
}

/// Connection settings shared by every command.
#[derive(Debug, Clone)]
pub struct PoolSettings {
    pub max_connections: u32,
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            max_connections: 16,
            acquire_timeout: Duration::from_secs(5),
        }
    }
}

/// `url` if it names MySQL or MariaDB: `mysql://` as it is, `mariadb://`
/// spelt `mysql://` (sqlx's own spelling). Any other scheme is refused,
/// named, before any connection: sqlx's MySQL driver reads any URL, so a
/// `postgres://` URL would otherwise reach whatever MySQL server answered
/// on its host and port. The error never repeats the URL (it may hold a
/// password).
pub fn mysql_url(url: &str) -> Result<std::borrow::Cow<'_, str>, StoreError> {
    let Some((scheme, rest)) = url.trim().split_once("://") else {
        return Err(StoreError::BadUrl(
            "not a URL; expected mysql://USER:PASSWORD@HOST:PORT/DATABASE".to_owned(),
        ));
    };
    if scheme.eq_ignore_ascii_case("mysql") {
        Ok(std::borrow::Cow::Borrowed(url.trim()))
    } else if scheme.eq_ignore_ascii_case("mariadb") {
        Ok(std::borrow::Cow::Owned(format!("mysql://{rest}")))
    } else {
        Err(StoreError::BadUrl(format!(
            "the scheme {scheme:?} is not supported: linktrack stores in MariaDB or MySQL, \
             mysql://USER:PASSWORD@HOST:PORT/DATABASE (or mariadb://…)"
        )))
    }
}

fn connect_options(url: &str) -> Result<MySqlConnectOptions, StoreError> {
    let url = mysql_url(url)?;
    let options =
        MySqlConnectOptions::from_str(&url).map_err(|e| StoreError::BadUrl(e.to_string()))?;
    // Every DATETIME we write or read is UTC; statements are logged only when slow.
    Ok(options
        .timezone(Some("+00:00".to_owned()))
        .log_statements(tracing::log::LevelFilter::Trace)
        .log_slow_statements(tracing::log::LevelFilter::Warn, Duration::from_secs(1)))
}

fn pool_options(settings: &PoolSettings) -> MySqlPoolOptions {
    MySqlPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(settings.acquire_timeout)
        // sqlx pings every connection it hands out by default: a round trip
        // per statement, 7% of a redirect's server CPU (perf) and database
        // work besides. A connection used within the last second was alive
        // then; one idle longer (the database may have restarted) is pinged.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_IF_IDLE_FOR {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// How long a pooled connection may have been idle before it is pinged
/// when handed out again.
const PING_IF_IDLE_FOR: Duration = Duration::from_secs(1);

/// Open a pool on an existing database.
pub async fn connect(url: &str, settings: &PoolSettings) -> Result<MySqlPool, StoreError> {
    let options = connect_options(url)?;
    // One direct attempt first: it fails at once with the real cause
    // (refused, access denied), where the pool would retry until its
    // acquire timeout and then report only that.
    let probe = options
        .connect()
        .await
        .map_err(|err| connect_failed(&options, &err))?;
    let _ = probe.close().await;
    pool_options(settings)
        .connect_with(options.clone())
        .await
        .map_err(|err| connect_failed(&options, &err))
}

/// A small pool of its own for a background worker, to the same database
/// with the same options as `pool`, connecting on first use: whatever the
/// worker does, it never holds one of the request path's connections.
/// Create it on the runtime the worker runs on (its connections belong there).
pub fn side_pool(pool: &MySqlPool, connections: u32) -> MySqlPool {
    let settings = PoolSettings {
        max_connections: connections.max(1),
        ..PoolSettings::default()
    };
    pool_options(&settings).connect_lazy_with((*pool.connect_options()).clone())
}

/// A connection failure as a [`StoreError::Connect`] naming what was tried.
fn connect_failed(options: &MySqlConnectOptions, err: &sqlx::Error) -> StoreError {
    let target = connect_error::ConnectTarget::of(options);
    let message = connect_error::describe(err, &target);
    StoreError::Connect { target, message }
}

/// Create the database if it is missing, then apply every pending migration.
/// Safe to run any number of times.
pub async fn migrate(url: &str) -> Result<MySqlPool, StoreError> {
    let pool = create_database_and_connect(url).await?;
    MIGRATOR.run(&pool).await?;
    after_migrations(&pool).await?;
    Ok(pool)
}

/// What the SQL migrations cannot do: address-list entries stored before
/// addresses had one form (IDN domains in A-labels, issue 38) move to it.
/// Cheap when there is nothing to move (one scan of each list's key).
pub(crate) async fn after_migrations(pool: &MySqlPool) -> Result<(), StoreError> {
    for list in [address_list::SUPPRESSIONS, address_list::TRACKING_OPTOUTS] {
        let moved = list.renormalise(pool).await?;
        if moved > 0 {
            tracing::info!(moved, "address list entries moved to their normalised form");
        }
    }
    Ok(())
}

/// Create the database named in `url` if it is missing, and connect.
pub(crate) async fn create_database_and_connect(url: &str) -> Result<MySqlPool, StoreError> {
    // Validate first so a bad URL is reported as such, not as a failed CREATE.
    let options = connect_options(url)?;
    let url = &*mysql_url(url)?;
    let exists = MySql::database_exists(url)
        .await
        .map_err(|err| connect_failed(&options, &err))?;
    if !exists {
        tracing::info!("creating the database named in DATABASE_URL");
        MySql::create_database(url)
            .await
            .map_err(|err| connect_failed(&options, &err))?;
    }
    connect(url, &PoolSettings::default()).await
}

/// How many migrations have been applied successfully.
pub async fn applied_migrations(pool: &MySqlPool) -> Result<i64, StoreError> {
    let applied = sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success = 1")
        .fetch_one(pool)
        .await?;
    Ok(applied)
}

/// One trivial round trip: is the database there?
pub async fn ping(pool: &MySqlPool) -> Result<(), StoreError> {
    sqlx::query("SELECT 1").execute(pool).await?;
    Ok(())
}

/// A pool that connects on first use, so a server can start while the
/// database is down.
pub fn connect_lazy(url: &str, settings: &PoolSettings) -> Result<MySqlPool, StoreError> {
    let options = connect_options(url)?;
    Ok(pool_options(settings).connect_lazy_with(options))
}

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
            StoreError::BadUrl(_) => "bad_url",
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

/// MySQL's deadlock (ER_LOCK_DEADLOCK).
const ER_LOCK_DEADLOCK: u16 = 1213;
/// MySQL's lock wait timeout (ER_LOCK_WAIT_TIMEOUT).
const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// MySQL's "Table doesn't exist" (ER_NO_SUCH_TABLE).
const ER_NO_SUCH_TABLE: u16 = 1146;

/// [`StoreError::kind`] of a driver error: the server's error number
/// first (the classes of [`RETRYABLE_MYSQL_ERRORS`] and
/// [`BROKEN_CONNECTION_ERRORS`]), then what the driver saw.
fn sqlx_error_kind(err: &sqlx::Error) -> &'static str {
    if let Some(number) = mysql_error_number(err) {
        return match number {
            ER_LOCK_DEADLOCK => "deadlock",
            ER_LOCK_WAIT_TIMEOUT => "lock_wait_timeout",
            ER_NO_PARTITION_FOR_GIVEN_VALUE => "no_partition",
            ER_NO_SUCH_TABLE => "no_such_table",
            1044 | 1045 | 1142 | 1227 => "privileges",
            1290 | 1792 | 1836 => "read_only",
            n if BROKEN_CONNECTION_ERRORS.contains(&n) => "connection_lost",
            n if cluster::SPIDER_REMOTE_ERRORS.contains(&n) => "data_node_down",
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
    use super::StoreError;

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
