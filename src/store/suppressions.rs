//! The suppression list (blacklist): an [`AddressList`] whose note is the
//! reason. Addresses are stored normalised (see
//! [`crate::address::normalize`]); callers pass normalised addresses.

use super::address_list::{AddressList, SUPPRESSIONS};
use super::StoreError;
use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use std::collections::HashSet;

/// One entry of the list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suppression {
    pub email: String,
    pub reason: String,
    pub created_at: NaiveDateTime,
}

const LIST: AddressList = SUPPRESSIONS;

/// Add addresses; an address already on the list keeps its first reason.
/// Returns how many were new.
pub async fn add(pool: &MySqlPool, emails: &[String], reason: &str) -> Result<u64, StoreError> {
    LIST.add(pool, emails, reason).await
}

/// Remove addresses; returns how many were on the list.
pub async fn remove(pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
    LIST.remove(pool, emails).await
}

/// Which of `emails` are on the list.
pub async fn suppressed_among(
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
) -> Result<Vec<Suppression>, StoreError> {
    let page = LIST.page(pool, after, limit).await?;
    Ok(page
        .into_iter()
        .map(|entry| Suppression {
            email: entry.email,
            reason: entry.note,
            created_at: entry.created_at,
        })
        .collect())
}
