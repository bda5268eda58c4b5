//! The tracking opt-out list: recipients who withdrew from open and click
//! tracking without unsubscribing. Their later letters are built and sent,
//! untracked. An [`AddressList`] like the suppression list, whose note is
//! the source; callers pass normalised addresses.

use super::address_list::{AddressList, TRACKING_OPTOUTS};
use super::error::StoreError;
use chrono::NaiveDateTime;
use sqlx::MySqlPool;
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

const LIST: AddressList = TRACKING_OPTOUTS;

/// Add addresses; an address already on the list keeps its first source.
/// Returns how many were new.
pub async fn add(pool: &MySqlPool, emails: &[String], source: &str) -> Result<u64, StoreError> {
    LIST.add(pool, emails, source).await
}

/// Remove addresses (they are tracked again as their mailings say);
/// returns how many were on the list.
pub async fn remove(pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
    LIST.remove(pool, emails).await
}

/// Which of `emails` are on the list.
pub async fn opted_out_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    LIST.among(pool, emails).await
}

/// The whole list in pages of `limit` after `after`, by address.
pub async fn list(
    pool: &MySqlPool,
    after: Option<&str>,
    limit: u32,
) -> Result<Vec<TrackingOptOut>, StoreError> {
    let page = LIST.page(pool, after, limit).await?;
    Ok(page
        .into_iter()
        .map(|entry| TrackingOptOut {
            email: entry.email,
            source: entry.note,
            created_at: entry.created_at,
        })
        .collect())
}
