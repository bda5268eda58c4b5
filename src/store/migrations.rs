//! The schema: the migrations in `migrations/`, creating the database when
//! it is missing, applying what is pending, and what the SQL migrations
//! cannot do by themselves (`after_migrations`).

use super::address_list;
use super::connect::{connect, connect_failed, connect_options, mysql_url, PoolSettings};
use super::error::StoreError;
use sqlx::migrate::MigrateDatabase;
use sqlx::{MySql, MySqlPool};

/// The migrations in `migrations/`, embedded at compile time.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Create the database if it is missing, then apply every pending migration.
/// Safe to run any number of times.
pub async fn migrate(url: &str) -> Result<MySqlPool, StoreError> {
    let pool = create_database_and_connect(url).await?;
    MIGRATOR.run(&pool).await?;
    after_migrations(&pool).await?;
    Ok(pool)
}

/// What the SQL migrations cannot do: address-list entries stored before
/// addresses had one form (IDN domains in A-labels) move to it.
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
