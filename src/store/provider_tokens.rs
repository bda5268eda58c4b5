//! The signature tokens of provider webhook posts (`provider_tokens`),
//! shared by every server: a token is bound to the first event it
//! carried, so a signed post replayed on another server with another
//! body is refused there too (docs/bounces.md, "Provider webhooks").

use super::error::StoreError;
use sha2::{Digest, Sha256};
use sqlx::MySqlPool;
use std::time::Duration;

/// What the database says about a post's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenUse {
    /// First seen now, bound to this event.
    First,
    /// Seen before with the same event: the provider retrying its post.
    SameEvent,
    /// Seen before with another event: a replay.
    OtherEvent,
}

/// Bind `token` to `event_key` for `provider`, unless it is bound
/// already; which of the two it was. One statement, so two servers
/// racing on the same token agree on which event it carries.
pub async fn bind(
    pool: &MySqlPool,
    provider: &str,
    token: &str,
    event_key: &[u8; 32],
) -> Result<TokenUse, StoreError> {
    let token_hash: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    let inserted = sqlx::query(
        "INSERT IGNORE INTO provider_tokens (provider, token_hash, event_key, seen_at) \
         VALUES (?, ?, ?, UTC_TIMESTAMP())",
    )
    .bind(provider)
    .bind(token_hash.as_slice())
    .bind(event_key.as_slice())
    .execute(pool)
    .await?;
    if inserted.rows_affected() == 1 {
        return Ok(TokenUse::First);
    }
    let bound: Option<Vec<u8>> = sqlx::query_scalar(
        "SELECT event_key FROM provider_tokens WHERE provider = ? AND token_hash = ?",
    )
    .bind(provider)
    .bind(token_hash.as_slice())
    .fetch_optional(pool)
    .await?;
    Ok(match bound {
        Some(key) if key.as_slice() == event_key.as_slice() => TokenUse::SameEvent,
        Some(_) => TokenUse::OtherEvent,
        // Pruned between the two statements: it is older than any
        // accepted signature, so the post is refused as stale anyway.
        None => TokenUse::OtherEvent,
    })
}

/// Drop tokens older than `age` (a signature that old is refused as stale
/// before its token is looked at), at most `limit` rows.
pub async fn prune(pool: &MySqlPool, age: Duration, limit: u32) -> Result<u64, StoreError> {
    let done = sqlx::query(
        "DELETE FROM provider_tokens WHERE seen_at < UTC_TIMESTAMP() - INTERVAL ? SECOND LIMIT ?",
    )
    .bind(age.as_secs())
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
