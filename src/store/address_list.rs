//! A list of normalised addresses, each with a note and the time it was
//! added: the suppression list (`suppressions`, note `reason`) and the
//! tracking opt-out list (`tracking_optouts`, note `source`) are two of them,
//! with the same statements. Addresses are stored normalised (see
//! [`crate::address::normalize`]); callers pass normalised addresses.
//!
//! Each list has a second table (`…_hashed`) for the entries of erased
//! addresses: the entry outlives the readable address as its keyed hash
//! ([`AddressKey::digest`]), so a later build still skips (or sends
//! untracked) an erased address. [`AddressList::among`] checks both forms;
//! `remove` takes both away. Changes are also logged for the processes
//! that hold a list in memory and follow its log (`super::change_log`):
//! the opt-out list's for every server, the suppression list's for the
//! relay.

use super::address_key::load_key;
use super::change_log::{log_changes, Change};
use super::error::StoreError;
use crate::address::AddressKey;
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
    /// The entries of erased addresses, by keyed hash.
    hashed: &'static str,
    /// What an address added, and one removed, is logged as.
    on_add: Change,
    on_remove: Change,
}

/// The suppression list: never mailed.
pub const SUPPRESSIONS: AddressList = AddressList {
    table: "suppressions",
    note: "reason",
    hashed: "suppressions_hashed",
    on_add: Change::Suppress,
    on_remove: Change::Unsuppress,
};

/// The tracking opt-out list: mailed, untracked; followed by every server
/// (hits on letters already sent are stored anonymously).
pub const TRACKING_OPTOUTS: AddressList = AddressList {
    table: "tracking_optouts",
    note: "source",
    hashed: "tracking_optouts_hashed",
    on_add: Change::OptOut,
    on_remove: Change::OptIn,
};

/// What erasing did to an address's entry ([`AddressList::keep_as_hash`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashedEntry {
    /// The entry in clear became its keyed hash.
    Hashed,
    /// Only the keyed hash was there (an earlier erase).
    AlreadyHashed,
    /// The address is not on the list.
    NotListed,
}

/// One entry of a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub email: String,
    pub note: String,
    pub created_at: NaiveDateTime,
}

impl AddressList {
    /// The table of the entries in clear.
    pub fn table(&self) -> &'static str {
        self.table
    }

    /// The table of the entries of erased addresses.
    pub fn hashed_table(&self) -> &'static str {
        self.hashed
    }

    /// Add addresses; an address already on the list keeps its first note.
    /// Returns how many were new.
    pub async fn add(
        &self,
        pool: &MySqlPool,
        emails: &[String],
        note: &str,
    ) -> Result<u64, StoreError> {
        let key = load_key(pool).await?;
        let mut added = 0;
        for chunk in emails.chunks(BATCH) {
            let mut tx = pool.begin().await?;
            let mut query = QueryBuilder::<MySql>::new(format!(
                "INSERT IGNORE INTO {} (email, {}) ",
                self.table, self.note
            ));
            query.push_values(chunk, |mut b, email| {
                b.push_bind(email).push_bind(note);
            });
            added += query.build().execute(&mut *tx).await?.rows_affected();
            let digests: Vec<[u8; 32]> = chunk.iter().map(|e| key.digest(e)).collect();
            log_changes(&mut *tx, &digests, self.on_add).await?;
            tx.commit().await?;
        }
        Ok(added)
    }

    /// Remove addresses, in clear and as keyed hashes; returns how many
    /// entries were on the list.
    pub async fn remove(&self, pool: &MySqlPool, emails: &[String]) -> Result<u64, StoreError> {
        let key = load_key(pool).await?;
        let mut removed = 0;
        for chunk in emails.chunks(BATCH) {
            let digests: Vec<[u8; 32]> = chunk.iter().map(|e| key.digest(e)).collect();
            let mut tx = pool.begin().await?;
            let mut query =
                QueryBuilder::<MySql>::new(format!("DELETE FROM {} WHERE email IN ", self.table));
            super::in_list::push_in_list(&mut query, chunk);
            removed += query.build().execute(&mut *tx).await?.rows_affected();
            let mut query = QueryBuilder::<MySql>::new(format!(
                "DELETE FROM {} WHERE email_hmac IN ",
                self.hashed
            ));
            super::in_list::push_in_list(&mut query, digests.iter().map(|d| d.to_vec()));
            removed += query.build().execute(&mut *tx).await?.rows_affected();
            log_changes(&mut *tx, &digests, self.on_remove).await?;
            tx.commit().await?;
        }
        Ok(removed)
    }

    /// Which of `emails` are on the list, in clear or as keyed hashes.
    pub async fn among(
        &self,
        pool: &MySqlPool,
        emails: &[&str],
    ) -> Result<HashSet<String>, StoreError> {
        let key = load_key(pool).await?;
        self.among_with(pool, &key, emails).await
    }

    /// [`AddressList::among`] with the key already read.
    pub async fn among_with(
        &self,
        pool: &MySqlPool,
        key: &AddressKey,
        emails: &[&str],
    ) -> Result<HashSet<String>, StoreError> {
        let mut found = HashSet::new();
        for chunk in emails.chunks(BATCH) {
            let mut query = QueryBuilder::<MySql>::new(format!(
                "SELECT CONVERT(email USING utf8mb4) FROM {} WHERE email IN ",
                self.table
            ));
            super::in_list::push_in_list(&mut query, chunk.iter().copied());
            let rows: Vec<String> = query.build_query_scalar().fetch_all(pool).await?;
            found.extend(rows);
            let digests: Vec<[u8; 32]> = chunk.iter().map(|e| key.digest(e)).collect();
            let mut query = QueryBuilder::<MySql>::new(format!(
                "SELECT email_hmac FROM {} WHERE email_hmac IN ",
                self.hashed
            ));
            super::in_list::push_in_list(&mut query, digests.iter().map(|d| d.to_vec()));
            let hashed: HashSet<Vec<u8>> = query
                .build_query_scalar::<Vec<u8>>()
                .fetch_all(pool)
                .await?
                .into_iter()
                .collect();
            for (email, digest) in chunk.iter().zip(&digests) {
                if hashed.contains(&digest[..]) {
                    found.insert((*email).to_owned());
                }
            }
        }
        Ok(found)
    }

    /// Add entries as keyed hashes (an erased address's unsubscribe that
    /// reached the database after the erasure); existing entries stay.
    pub async fn add_hashed(
        &self,
        pool: &MySqlPool,
        digests: &[[u8; 32]],
        note: &str,
    ) -> Result<u64, StoreError> {
        let mut added = 0;
        for chunk in digests.chunks(BATCH) {
            let mut tx = pool.begin().await?;
            let mut query = QueryBuilder::<MySql>::new(format!(
                "INSERT IGNORE INTO {} (email_hmac, {}) ",
                self.hashed, self.note
            ));
            query.push_values(chunk, |mut b, digest| {
                b.push_bind(digest.to_vec()).push_bind(note);
            });
            added += query.build().execute(&mut *tx).await?.rows_affected();
            log_changes(&mut *tx, chunk, self.on_add).await?;
            tx.commit().await?;
        }
        Ok(added)
    }

    /// Erasing `email`: its entry, if any, becomes its keyed hash (note and
    /// time kept). Idempotent. Nothing is logged: both forms have the same
    /// keyed hash, which is what the followers hold.
    pub async fn keep_as_hash(
        &self,
        pool: &MySqlPool,
        key: &AddressKey,
        email: &str,
    ) -> Result<HashedEntry, StoreError> {
        let digest = key.digest(email);
        let mut tx = pool.begin().await?;
        sqlx::query(&format!(
            "INSERT IGNORE INTO {} (email_hmac, {note}, created_at) \
             SELECT ?, {note}, created_at FROM {} WHERE email = ?",
            self.hashed,
            self.table,
            note = self.note
        ))
        .bind(&digest[..])
        .bind(email)
        .execute(&mut *tx)
        .await?;
        let cleared = sqlx::query(&format!("DELETE FROM {} WHERE email = ?", self.table))
            .bind(email)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        let hashed: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {} WHERE email_hmac = ?",
            self.hashed
        ))
        .bind(&digest[..])
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(match (cleared > 0, hashed > 0) {
            (true, _) => HashedEntry::Hashed,
            (false, true) => HashedEntry::AlreadyHashed,
            (false, false) => HashedEntry::NotListed,
        })
    }

    /// How many entries of erased addresses the list keeps as hashes.
    pub async fn hashed_count(&self, pool: &MySqlPool) -> Result<u64, StoreError> {
        let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {}", self.hashed))
            .fetch_one(pool)
            .await?;
        Ok(n as u64)
    }

    /// Entries stored before an address had one form (an IDN domain in
    /// U-labels, a decomposed accent) under their normalised form now
    /// (`migrate` runs it): only entries with non-ASCII characters can
    /// differ. Returns how many moved. Nothing is logged: a follower's
    /// keyed hash is of the normalised form, the same for both.
    pub async fn renormalise(&self, pool: &MySqlPool) -> Result<u64, StoreError> {
        let stored: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT CONVERT(email USING utf8mb4) FROM {} WHERE LENGTH(email) <> CHAR_LENGTH(email)",
            self.table
        ))
        .fetch_all(pool)
        .await?;
        let mut moved = 0;
        for old in stored {
            let new = crate::address::normalize(&old);
            if new == old {
                continue;
            }
            let mut tx = pool.begin().await?;
            sqlx::query(&format!(
                "INSERT IGNORE INTO {table} (email, {note}, created_at) \
                 SELECT ?, {note}, created_at FROM {table} WHERE email = ?",
                table = self.table,
                note = self.note
            ))
            .bind(&new)
            .bind(&old)
            .execute(&mut *tx)
            .await?;
            sqlx::query(&format!("DELETE FROM {} WHERE email = ?", self.table))
                .bind(&old)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            moved += 1;
        }
        Ok(moved)
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
