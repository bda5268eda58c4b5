//! Steps 2, 4 and 5 of a move: writes paused on the head, the rename of
//! the spare table queued behind the pause so that it runs before any
//! waiting writer, and the old node's copy renamed out of the cluster.

use super::tables::{count_rows, retired_name};
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};
use std::time::{Duration, Instant};

/// How long the pause waits for running transactions on the head, and the
/// rename for its lock, before the move gives up (nothing changed then).
const LOCK_WAIT: Duration = Duration::from_secs(60);

async fn lock_wait(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "SET SESSION lock_wait_timeout = {}",
        LOCK_WAIT.as_secs()
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Pause writes to the head's `table` on a connection of its own
/// (`FLUSH TABLES … WITH READ LOCK`): lookups go on, writers wait until
/// [`swap_in`] ends the pause.
pub(super) async fn pause_writes(
    pool: &MySqlPool,
    table: &str,
) -> Result<MySqlConnection, StoreError> {
    let mut pause = pool.acquire().await?.detach();
    lock_wait(&mut pause).await?;
    sqlx::query(&format!("FLUSH TABLES `{}` WITH READ LOCK", table))
        .execute(&mut pause)
        .await?;
    Ok(pause)
}

/// Swap the spare table in while writes are paused: the rename is queued
/// behind the pause on another connection, then the pause ends, and the
/// rename (a waiting exclusive lock goes before waiting writers) runs
/// before any writer.
pub(super) async fn swap_in(
    pool: &MySqlPool,
    pause: &mut MySqlConnection,
    table: &str,
    spare: &str,
) -> Result<(), StoreError> {
    let mut renamer = pool.acquire().await?.detach();
    lock_wait(&mut renamer).await?;
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut renamer)
        .await?;
    let rename = format!(
        "RENAME TABLE `{table}` TO `{}`, `{spare}` TO `{table}`",
        retired_name(table)
    );
    let renaming = tokio::spawn(async move {
        let done = sqlx::query(&rename).execute(&mut renamer).await;
        let _ = renamer.close().await;
        done
    });
    let queued = wait_until_queued(pause, id, &renaming).await;
    if queued.is_err() && !renaming.is_finished() {
        let _ = sqlx::query(&format!("KILL QUERY {id}"))
            .execute(&mut *pause)
            .await;
    }
    sqlx::query("UNLOCK TABLES").execute(&mut *pause).await?;
    queued?;
    renaming.await.map_err(|source| StoreError::Task {
        what: "the rename task",
        source,
    })??;
    Ok(())
}

/// Wait until connection `id` waits for a metadata lock.
async fn wait_until_queued(
    conn: &mut MySqlConnection,
    id: u64,
    renaming: &tokio::task::JoinHandle<Result<sqlx::mysql::MySqlQueryResult, sqlx::Error>>,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + LOCK_WAIT;
    while Instant::now() < deadline {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT CAST(STATE AS CHAR) FROM information_schema.PROCESSLIST WHERE ID = ?",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
        if state.is_some_and(|s| s.contains("metadata lock")) {
            return Ok(());
        }
        if renaming.is_finished() {
            return Err(StoreError::Refused(
                "the head's rename ended before the pause did: move abandoned".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(StoreError::Refused(format!(
        "the head's rename did not queue within {LOCK_WAIT:?}: move abandoned"
    )))
}

/// Rename the old node's copy out of the cluster's names, after checking
/// nothing was written to it since it was copied.
pub(super) async fn retire_old_copy(
    source: &mut MySqlConnection,
    table: &str,
    old_copy: &str,
    copied: u64,
    locked: bool,
) -> Result<(), StoreError> {
    if locked {
        // `RENAME TABLE` is refused under `LOCK TABLES`; this form is not,
        // and the writers waiting on the lock then fail with 1146.
        sqlx::query(&format!("ALTER TABLE `{table}` RENAME TO `{old_copy}`"))
            .execute(&mut *source)
            .await?;
        sqlx::query("UNLOCK TABLES").execute(&mut *source).await?;
    } else {
        sqlx::query(&format!("RENAME TABLE `{table}` TO `{old_copy}`"))
            .execute(&mut *source)
            .await?;
    }
    let now = count_rows(source, old_copy).await?;
    if now != copied {
        return Err(StoreError::Refused(format!(
            "`{old_copy}` (the old copy) has {now} rows, {copied} were copied: rows were written \
             to it during the move; copy the difference to the new node by hand"
        )));
    }
    Ok(())
}
