//! Dashboard login sessions: one row per login, keyed by the SHA-256 of the
//! random session id (the database never holds a usable cookie), with the
//! time it expires. Logout deletes the row; expired rows are deleted at the
//! next login.

use super::error::StoreError;
use sqlx::MySqlPool;
use std::time::Duration;

/// Stores a new session that expires `ttl` from now, and deletes the
/// sessions that have expired.
pub async fn create(pool: &MySqlPool, id_hash: &[u8; 32], ttl: Duration) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE expires <= UTC_TIMESTAMP()")
        .execute(pool)
        .await?;
    let seconds = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
    sqlx::query(
        "INSERT INTO dashboard_sessions (id_hash, created, expires) \
         VALUES (?, UTC_TIMESTAMP(), UTC_TIMESTAMP() + INTERVAL ? SECOND)",
    )
    .bind(&id_hash[..])
    .bind(seconds)
    .execute(pool)
    .await?;
    Ok(())
}

/// True when the session exists and has not expired.
pub async fn is_live(pool: &MySqlPool, id_hash: &[u8; 32]) -> Result<bool, StoreError> {
    let found: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM dashboard_sessions WHERE id_hash = ? AND expires > UTC_TIMESTAMP()",
    )
    .bind(&id_hash[..])
    .fetch_optional(pool)
    .await?;
    Ok(found.is_some())
}

/// Ends a session (logout). Unknown ids are no error.
pub async fn delete(pool: &MySqlPool, id_hash: &[u8; 32]) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM dashboard_sessions WHERE id_hash = ?")
        .bind(&id_hash[..])
        .execute(pool)
        .await?;
    Ok(())
}
