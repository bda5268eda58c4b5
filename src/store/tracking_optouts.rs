//! The tracking opt-out list: recipients who withdrew from open and click
//! tracking without unsubscribing. Their later letters are built and sent,
//! untracked. Addresses are stored normalised like suppressions (see
//! [`crate::address::normalize`]); callers pass normalised addresses.

use super::StoreError;
use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TrackingOptOut {
    pub email: String,
    /// `link` when the recipient used the letter's "stop tracking me" page,
    /// else what the operator gave (`manual` by default).
    pub source: String,
    pub created_at: NaiveDateTime,
}

/// Rows per statement for bulk reads and writes.
const BATCH: usize = 1_000;

/// Add addresses; an address already on the list keeps its first source.
/// Returns how many were new.
pub async fn add(pool: &MySqlPool, emails: &[String], source: &str) -> Result<u64, StoreError> {
    let mut added = 0;
    for chunk in emails.chunks(BATCH) {
        let mut query =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO tracking_optouts (email, source) ");
        query.push_values(chunk, |mut b, email| {
            b.push_bind(email).push_bind(source);
        });
        added += query.build().execute(pool).await?.rows_affected();
    }
    Ok(added)
}

/// Remove addresses (they are tracked again as their mailings say);
/// returns how many were on the list.
pub async fn remove(pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
    let mut removed = 0;
    for chunk in emails.chunks(BATCH) {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM tracking_optouts WHERE email IN ");
        super::push_in_list(&mut query, chunk);
        removed += query.build().execute(pool).await?.rows_affected();
    }
    Ok(removed)
}

/// Which of `emails` are on the list.
pub async fn opted_out_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let mut found = HashSet::new();
    for chunk in emails.chunks(BATCH) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT CONVERT(email USING utf8mb4) FROM tracking_optouts WHERE email IN ",
        );
        super::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<String> = query.build_query_scalar().fetch_all(pool).await?;
        found.extend(rows);
    }
    Ok(found)
}

/// The whole list in pages of `limit` after `after` (keyset pagination by
/// address, as the suppression list's).
pub async fn list(
    pool: &MySqlPool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<TrackingOptOut>, StoreError> {
    let rows: Vec<(String, String, NaiveDateTime)> = sqlx::query_as(
        "SELECT CONVERT(email USING utf8mb4), source, created_at FROM tracking_optouts \
         WHERE email > ? ORDER BY email LIMIT ?",
    )
    .bind(after.unwrap_or(""))
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(email, source, created_at)| TrackingOptOut {
            email,
            source,
            created_at,
        })
        .collect())
}
