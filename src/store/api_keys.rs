//! The `api_keys` table: keys an operator created for integrations, each
//! kept as its keyed hash (never the key), with its public prefix, its
//! scopes (the comma-separated names; `api_keys/` reads them), its expiry,
//! revocation and last use. What a key is and how it is checked is in
//! [`crate::api_keys`]; here is only the SQL.

use super::error::StoreError;
use chrono::NaiveDateTime;
use sqlx::MySqlPool;

/// A key as `keys list` and `GET /api/keys` show it (never the key).
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct KeyRow {
    pub name: String,
    pub prefix: String,
    /// Comma-separated scope names, as stored.
    pub scopes: String,
    pub created: NaiveDateTime,
    pub expires: Option<NaiveDateTime>,
    pub revoked: Option<NaiveDateTime>,
    pub last_used: Option<NaiveDateTime>,
}

/// A new key's row.
#[derive(Debug, Clone)]
pub struct NewKey<'a> {
    pub name: &'a str,
    pub prefix: &'a str,
    pub key_hash: &'a [u8; 32],
    pub scopes: &'a str,
    /// Days until it expires; `None`: never.
    pub expires_in_days: Option<u32>,
}

/// What [`create`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Created(KeyRow),
    /// A key of that name exists (revoked keys keep their name).
    NameTaken,
}

const COLUMNS: &str = "name, prefix, scopes, created, expires, revoked, last_used";

/// Stores a new key, unless a key has its name.
pub async fn create(pool: &MySqlPool, key: &NewKey<'_>) -> Result<Created, StoreError> {
    let inserted = sqlx::query(
        "INSERT INTO api_keys (name, prefix, key_hash, scopes, created, expires) \
         VALUES (?, ?, ?, ?, UTC_TIMESTAMP(), \
                 CASE WHEN ? IS NULL THEN NULL ELSE UTC_TIMESTAMP() + INTERVAL ? DAY END)",
    )
    .bind(key.name)
    .bind(key.prefix)
    .bind(&key.key_hash[..])
    .bind(key.scopes)
    .bind(key.expires_in_days)
    .bind(key.expires_in_days)
    .execute(pool)
    .await;
    match inserted {
        Ok(_) => {}
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(Created::NameTaken),
        Err(e) => return Err(e.into()),
    }
    let row =
        sqlx::query_as::<_, KeyRow>(&format!("SELECT {COLUMNS} FROM api_keys WHERE prefix = ?"))
            .bind(key.prefix)
            .fetch_one(pool)
            .await?;
    Ok(Created::Created(row))
}

/// Every key, oldest first.
pub async fn list(pool: &MySqlPool) -> Result<Vec<KeyRow>, StoreError> {
    Ok(
        sqlx::query_as::<_, KeyRow>(&format!("SELECT {COLUMNS} FROM api_keys ORDER BY id"))
            .fetch_all(pool)
            .await?,
    )
}

/// Revokes the key named `name_or_prefix` (its name, or its public
/// prefix). Returns the key, or `None` when no key is so named. Revoking
/// a revoked key keeps its first revocation time.
pub async fn revoke(pool: &MySqlPool, name_or_prefix: &str) -> Result<Option<KeyRow>, StoreError> {
    sqlx::query(
        "UPDATE api_keys SET revoked = COALESCE(revoked, UTC_TIMESTAMP()) \
         WHERE name = ? OR prefix = ?",
    )
    .bind(name_or_prefix)
    .bind(name_or_prefix)
    .execute(pool)
    .await?;
    Ok(sqlx::query_as::<_, KeyRow>(&format!(
        "SELECT {COLUMNS} FROM api_keys WHERE name = ? OR prefix = ? LIMIT 1"
    ))
    .bind(name_or_prefix)
    .bind(name_or_prefix)
    .fetch_optional(pool)
    .await?)
}

/// A live key found by its hash: its prefix, scopes and expiry. `None`
/// when no key has that hash, or it is revoked or expired.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct LiveKey {
    pub name: String,
    pub prefix: String,
    pub scopes: String,
    pub expires: Option<NaiveDateTime>,
}

/// The live key with this hash, if any, and its `last_used` set to now.
pub async fn find_live(
    pool: &MySqlPool,
    key_hash: &[u8; 32],
) -> Result<Option<LiveKey>, StoreError> {
    let found = sqlx::query_as::<_, LiveKey>(
        "SELECT name, prefix, scopes, expires FROM api_keys \
         WHERE key_hash = ? AND revoked IS NULL \
           AND (expires IS NULL OR expires > UTC_TIMESTAMP())",
    )
    .bind(&key_hash[..])
    .fetch_optional(pool)
    .await?;
    if found.is_some() {
        sqlx::query("UPDATE api_keys SET last_used = UTC_TIMESTAMP() WHERE key_hash = ?")
            .bind(&key_hash[..])
            .execute(pool)
            .await?;
    }
    Ok(found)
}
