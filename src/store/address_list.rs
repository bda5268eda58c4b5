//! A list of normalised addresses, each with a note and the time it was
//! added: the suppression list (`suppressions`, note `reason`) and the
//! tracking opt-out list (`tracking_optouts`, note `source`) are two of them,
//! with the same statements. Addresses are stored normalised (see
//! [`crate::address::normalize`]); callers pass normalised addresses.

use super::StoreError;
use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// Rows per statement for bulk reads and writes.
const BATCH: usize = 1_000;

/// One list's table and the column of its note. Both are constants of
/// this crate, never input: they are written into the statements.
#[derive(Debug, Clone, Copy)]
pub struct AddressList {
    table: &'static str,
    note: &'static str,
}

/// The suppression list: never mailed.
pub const SUPPRESSIONS: AddressList = AddressList {
    table: "suppressions",
    note: "reason",
};

/// The tracking opt-out list: mailed, untracked.
pub const TRACKING_OPTOUTS: AddressList = AddressList {
    table: "tracking_optouts",
    note: "source",
};

/// One entry of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub email: String,
    pub note: String,
    pub created_at: NaiveDateTime,
}

impl AddressList {
    /// Add addresses; an address already on the list keeps its first note.
    /// Returns how many were new.
    pub async fn add(
        &self,
        pool: &MySqlPool,
        emails: &[String],
        note: &str,
    ) -> Result<u64, StoreError> {
        let mut added = 0;
        for chunk in emails.chunks(BATCH) {
            let mut query = QueryBuilder::<MySql>::new(format!(
                "INSERT IGNORE INTO {} (email, {}) ",
                self.table, self.note
            ));
            query.push_values(chunk, |mut b, email| {
                b.push_bind(email).push_bind(note);
            });
            added += query.build().execute(pool).await?.rows_affected();
        }
        Ok(added)
    }

    /// Remove addresses; returns how many were on the list.
    pub async fn remove(&self, pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
        let mut removed = 0;
        for chunk in emails.chunks(BATCH) {
            let mut query =
                QueryBuilder::<MySql>::new(format!("DELETE FROM {} WHERE email IN ", self.table));
            super::push_in_list(&mut query, chunk);
            removed += query.build().execute(pool).await?.rows_affected();
        }
        Ok(removed)
    }

    /// Which of `emails` are on the list.
    pub async fn among(
        &self,
        pool: &MySqlPool,
        emails: &[&str],
    ) -> Result<HashSet<String>, StoreError> {
        let mut found = HashSet::new();
        for chunk in emails.chunks(BATCH) {
            let mut query = QueryBuilder::<MySql>::new(format!(
                "SELECT CONVERT(email USING utf8mb4) FROM {} WHERE email IN ",
                self.table
            ));
            super::push_in_list(&mut query, chunk.iter().copied());
            let rows: Vec<String> = query.build_query_scalar().fetch_all(pool).await?;
            found.extend(rows);
        }
        Ok(found)
    }

    /// The whole list in pages of `limit` after `after` (keyset pagination
    /// by address keeps every page cheap on a long list).
    pub async fn page(
        &self,
        pool: &MySqlPool,
        after: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Entry>, StoreError> {
        let statement = format!(
            "SELECT CONVERT(email USING utf8mb4), {}, created_at FROM {} \
             WHERE email > ? ORDER BY email LIMIT ?",
            self.note, self.table
        );
        let rows: Vec<(String, String, NaiveDateTime)> = sqlx::query_as(&statement)
            .bind(after.unwrap_or(""))
            .bind(limit)
            .fetch_all(pool)
            .await?;
        Ok(rows
            .into_iter()
            .map(|(email, note, created_at)| Entry {
                email,
                note,
                created_at,
            })
            .collect())
    }
}
