//! Connecting to MySQL or MariaDB: the URL check, the pool's settings and
//! options, a first direct attempt that says why a connection failed, lazy
//! and side pools, and the one-round-trip ping. Every pool of the service
//! is made here.

use super::connect_error::{self, ConnectTarget};
use super::error::StoreError;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection, MySqlPool};
use std::str::FromStr;
use std::time::Duration;

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

pub(crate) fn connect_options(url: &str) -> Result<MySqlConnectOptions, StoreError> {
    let url = mysql_url(url)?;
    let options = MySqlConnectOptions::from_str(&url)
        .map_err(|source| StoreError::BadUrlOptions { source })?;
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
        // per statement, on the server's CPU and the database's, for every
        // redirect. A connection used within the last second was alive
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
pub(crate) fn connect_failed(options: &MySqlConnectOptions, err: &sqlx::Error) -> StoreError {
    let target = ConnectTarget::of(options);
    let message = connect_error::describe(err, &target);
    StoreError::Connect { target, message }
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
