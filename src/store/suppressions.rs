//! The suppression list (blacklist). Addresses are stored normalised (see
//! [`crate::address::normalize`]); callers pass normalised addresses.

use super::StoreError;
use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suppression {
    pub email: String,
    pub reason: String,
    pub created_at: NaiveDateTime,
}

/// Rows per statement for bulk reads and writes.
const BATCH: usize = 1_000;

/// Add addresses; an address already on the list keeps its first reason.
/// Returns how many were new.
pub async fn add(pool: &MySqlPool, emails: &[String], reason: &str) -> Result<u64, StoreError> {
    let mut added = 0;
    for chunk in emails.chunks(BATCH) {
        let mut query =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO suppressions (email, reason) ");
        query.push_values(chunk, |mut b, email| {
            b.push_bind(email).push_bind(reason);
        });
        added += query.build().execute(pool).await?.rows_affected();
    }
    Ok(added)
}

/// Remove addresses; returns how many were on the list.
pub async fn remove(pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
    let mut removed = 0;
    for chunk in emails.chunks(BATCH) {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM suppressions WHERE email IN ");
        super::push_in_list(&mut query, chunk);
        removed += query.build().execute(pool).await?.rows_affected();
    }
    Ok(removed)
}

/// Which of `emails` are on the list.
pub async fn suppressed_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let mut found = HashSet::new();
    for chunk in emails.chunks(BATCH) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT CONVERT(email USING utf8mb4) FROM suppressions WHERE email IN ",
        );
        super::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<String> = query.build_query_scalar().fetch_all(pool).await?;
        found.extend(rows);
    }
    Ok(found)
}

/// The whole list, oldest first, in pages of `limit` after `after` (keyset
/// pagination by address keeps every page cheap on a long list).
pub async fn list(
    pool: &MySqlPool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<Suppression>, StoreError> {
    let rows: Vec<(String, String, NaiveDateTime)> = sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), reason, created_at FROM suppressions \
         WHERE email > ? ORDER BY email LIMIT ?",
    )
    .bind(after.unwrap_or(""))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(email, reason, created_at)| Suppression {
            email,
            reason,
            created_at,
        })
        .collect())
}
