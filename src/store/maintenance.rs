//! When periodic maintenance (`partitions rotate`) last succeeded: written
//! by the task, read by the server's health gauges (docs/deploy.md, "Alerts").

use super::error::StoreError;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::MySqlPool;

/// The task name `partitions rotate` records under.
pub const ROTATE: &str = "partitions rotate";

/// Record that `task` succeeded now (UTC, the database's clock).
pub async fn record_success(pool: &MySqlPool, task: &str) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO maintenance_runs (task, last_success) VALUES (?, UTC_TIMESTAMP(6)) \
         ON DUPLICATE KEY UPDATE last_success = UTC_TIMESTAMP(6)",
    )
    .bind(task)
    .execute(pool)
    .await?;
    Ok(())
}

/// When `task` last succeeded; `None` if it never has.
pub async fn last_success(
    pool: &MySqlPool,
    task: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row: Option<(NaiveDateTime,)> =
        sqlx::query_as("SELECT last_success FROM maintenance_runs WHERE task = ?")
            .bind(task)
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|(at,)| at.and_utc()))
}

/// When the schema was first installed (the first migration's time): the
/// rotate alert waits as long after it as after a rotate, so a fresh
/// install is not alerted on before its first rotate is due.
pub async fn schema_installed(pool: &MySqlPool) -> Result<Option<DateTime<Utc>>, StoreError> {
    let row: (Option<DateTime<Utc>>,) =
        sqlx::query_as("SELECT MIN(installed_on) FROM _sqlx_migrations")
            .fetch_one(pool)
            .await?;
    Ok(row.0)
}
