//! What linktrack keeps so that a person's choices outlive their data
//! (docs/privacy.md): the installation's address key, the erasures, the
//! change log every server follows, the servers' acknowledgements, the
//! "last open day" of `track: "last_open_day"` letters, and the one
//! question other features ask ([`withheld_among`]: may this address be
//! shown or used per person?).
//!
//! The address key (`address_key.rs`) and the change log (`change_log.rs`)
//! live in files of their own, which the address lists write too; they
//! are re-exported here.
//!
//! Nothing here stores an address in clear except `last_open_days` (whose
//! row `erase` deletes): erasures and changes are keyed hashes
//! ([`AddressKey::digest`]).

pub use super::address_key::load_key;
pub use super::change_log::{
    changes_since, last_change_id, prune_changes, Change, ChangeLog, ChangeRow, CHANGES_PER_READ,
};

use super::address_list::{SUPPRESSIONS, TRACKING_OPTOUTS};
use super::change_log::log_changes;
use super::error::StoreError;
use crate::address::{AddressKey, Fingerprint};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;
use std::time::Duration;

/// Entries read per statement by [`for_each_opted_out`].
const FULL_LOAD_PAGE: u32 = 50_000;

/// Call `each` with the fingerprint of every opted-out address, clear and
/// hashed (a server's full load), a page of `FULL_LOAD_PAGE` entries at
/// a time by key (the list may hold millions). Returns how many.
pub async fn for_each_opted_out(
    pool: &MySqlPool,
    key: &AddressKey,
    each: impl FnMut(Fingerprint),
) -> Result<u64, StoreError> {
    for_each_listed(pool, key, TRACKING_OPTOUTS, each).await
}

/// [`for_each_opted_out`] for the suppression list (the relay's full load).
pub async fn for_each_suppressed(
    pool: &MySqlPool,
    key: &AddressKey,
    each: impl FnMut(Fingerprint),
) -> Result<u64, StoreError> {
    for_each_listed(pool, key, SUPPRESSIONS, each).await
}

/// The fingerprint of every entry of `list`, clear and hashed, by pages.
async fn for_each_listed(
    pool: &MySqlPool,
    key: &AddressKey,
    list: super::address_list::AddressList,
    mut each: impl FnMut(Fingerprint),
) -> Result<u64, StoreError> {
    let mut n = 0;
    let mut after = String::new();
    loop {
        let page: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT CONVERT(email USING utf8mb4) FROM {} \
             WHERE email > ? ORDER BY email LIMIT ?",
            list.table()
        ))
        .bind(&after)
        .bind(FULL_LOAD_PAGE)
        .fetch_all(pool)
        .await?;
        let Some(last) = page.last() else { break };
        after = last.clone();
        for email in &page {
            each(key.fingerprint(email));
        }
        n += page.len() as u64;
    }
    let mut after: Vec<u8> = Vec::new();
    loop {
        let page: Vec<Vec<u8>> = sqlx::query_scalar(&format!(
            "SELECT email_hmac FROM {} WHERE email_hmac > ? ORDER BY email_hmac LIMIT ?",
            list.hashed_table()
        ))
        .bind(&after)
        .bind(FULL_LOAD_PAGE)
        .fetch_all(pool)
        .await?;
        let Some(last) = page.last() else { break };
        after = last.clone();
        for digest in &page {
            each(crate::address::fingerprint_of(digest));
        }
        n += page.len() as u64;
    }
    Ok(n)
}

/// Every erasure: (fingerprint, when the address was first erased).
pub async fn erasures(pool: &MySqlPool) -> Result<Vec<(Fingerprint, DateTime<Utc>)>, StoreError> {
    let rows: Vec<(Vec<u8>, NaiveDateTime)> =
        sqlx::query_as("SELECT email_hmac, erased_at FROM erasures")
            .fetch_all(pool)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(digest, at)| (crate::address::fingerprint_of(&digest), at.and_utc()))
        .collect())
}

/// An erasure as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Erasure {
    /// The address was erased before (this run only repeats it).
    pub repeated: bool,
    /// When it was first erased.
    pub erased_at: DateTime<Utc>,
    /// The change log's row servers must reach before the tables are
    /// scrubbed (a repeated erase logs a new one, so servers that came
    /// up since take it in too).
    pub change_id: u64,
}

/// Record the erasure of the address whose digest is `digest` (its first
/// time is kept) and log it for the servers.
pub async fn record_erasure(pool: &MySqlPool, digest: &[u8; 32]) -> Result<Erasure, StoreError> {
    let mut tx = pool.begin().await?;
    let inserted = sqlx::query("INSERT IGNORE INTO erasures (email_hmac) VALUES (?)")
        .bind(&digest[..])
        .execute(&mut *tx)
        .await?
        .rows_affected();
    let erased_at: NaiveDateTime =
        sqlx::query_scalar("SELECT erased_at FROM erasures WHERE email_hmac = ?")
            .bind(&digest[..])
            .fetch_one(&mut *tx)
            .await?;
    log_changes(&mut *tx, std::slice::from_ref(digest), Change::Erase).await?;
    let change_id: u64 = sqlx::query_scalar("SELECT LAST_INSERT_ID()")
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Erasure {
        repeated: inserted == 0,
        erased_at: erased_at.and_utc(),
        change_id,
    })
}

/// A server that follows the change log, as `erase` sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerAck {
    pub server: String,
    /// Every event it stores from now on honours changes up to this id.
    pub applied_id: u64,
}

/// Note that `server` honours every change up to `applied_id` (and is alive).
pub async fn acknowledge(
    pool: &MySqlPool,
    server: &str,
    applied_id: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO privacy_servers (server, applied_id, seen_at) VALUES (?, ?, NOW(3)) \
         ON DUPLICATE KEY UPDATE applied_id = GREATEST(applied_id, ?), seen_at = NOW(3)",
    )
    .bind(server)
    .bind(applied_id)
    .bind(applied_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// The servers seen within `within` (alive, as far as anyone can tell).
pub async fn live_servers(
    pool: &MySqlPool,
    within: Duration,
) -> Result<Vec<ServerAck>, StoreError> {
    let rows: Vec<(String, u64)> = sqlx::query_as(
        "SELECT server, applied_id FROM privacy_servers \
         WHERE seen_at >= NOW(3) - INTERVAL ? SECOND ORDER BY server",
    )
    .bind(within.as_secs().max(1))
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(server, applied_id)| ServerAck { server, applied_id })
        .collect())
}

/// Note each address's last open day: the row is overwritten with a later
/// day, never an earlier one (a journal replayed late). One statement per
/// day and chunk, the day bound once (no `VALUES()` in the upsert: MySQL 8
/// deprecates it).
pub async fn note_last_opens(
    pool: &MySqlPool,
    opens: &[(String, NaiveDate)],
) -> Result<(), StoreError> {
    let mut by_day: std::collections::BTreeMap<NaiveDate, Vec<&str>> = Default::default();
    for (email, day) in opens {
        by_day.entry(*day).or_default().push(email);
    }
    for (day, emails) in by_day {
        for chunk in emails.chunks(super::in_list::IN_LIST_CHUNK) {
            let mut query = QueryBuilder::<MySql>::new("INSERT INTO last_open_days (email, day) ");
            query.push_values(chunk, |mut b, email| {
                b.push_bind(*email).push_bind(day);
            });
            query
                .push(" ON DUPLICATE KEY UPDATE day = GREATEST(day, ")
                .push_bind(day)
                .push(")");
            query.build().execute(pool).await?;
        }
    }
    Ok(())
}

/// The last open day of an address, if one is kept.
pub async fn last_open_day(pool: &MySqlPool, email: &str) -> Result<Option<NaiveDate>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT day FROM last_open_days WHERE email = ?")
            .bind(crate::address::normalize(email))
            .fetch_optional(pool)
            .await?,
    )
}

/// Which of `emails` (normalised) may not be used or shown per person:
/// on the tracking opt-out list (in clear or as a keyed hash, the entry
/// of an erased address) or erased. Features that list people (exports,
/// per-recipient breakdowns) filter through this; their rows from before
/// an opt-out still name the address (an opt-out acts on what is
/// recorded from then on), so they must ask.
pub async fn withheld_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let key = load_key(pool).await?;
    let mut withheld = TRACKING_OPTOUTS.among_with(pool, &key, emails).await?;
    withheld.extend(erased_among_with(pool, &key, emails).await?);
    Ok(withheld)
}

/// Which of `emails` (normalised) were erased (`linktrack erase`).
pub async fn erased_among(
    pool: &MySqlPool,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let key = load_key(pool).await?;
    erased_among_with(pool, &key, emails).await
}

async fn erased_among_with(
    pool: &MySqlPool,
    key: &AddressKey,
    emails: &[&str],
) -> Result<HashSet<String>, StoreError> {
    let mut erased_emails = HashSet::new();
    for chunk in emails.chunks(super::in_list::IN_LIST_CHUNK) {
        let digests: Vec<[u8; 32]> = chunk.iter().map(|e| key.digest(e)).collect();
        let mut query =
            QueryBuilder::<MySql>::new("SELECT email_hmac FROM erasures WHERE email_hmac IN ");
        super::in_list::push_in_list(&mut query, digests.iter().map(|d| d.to_vec()));
        let erased: HashSet<Vec<u8>> = query
            .build_query_scalar::<Vec<u8>>()
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
        for (email, digest) in chunk.iter().zip(&digests) {
            if erased.contains(&digest[..]) {
                erased_emails.insert((*email).to_owned());
            }
        }
    }
    Ok(erased_emails)
}

/// Whether `email` is suppressed, in clear or as a keyed hash (the
/// entry an erasure leaves).
pub async fn is_suppressed(pool: &MySqlPool, email: &str) -> Result<bool, StoreError> {
    let email = crate::address::normalize(email);
    Ok(!SUPPRESSIONS
        .among(pool, &[email.as_str()])
        .await?
        .is_empty())
}

/// Whether `email` was erased (`linktrack erase`): its keyed hash is in
/// `erasures`.
pub async fn is_erased(pool: &MySqlPool, email: &str) -> Result<bool, StoreError> {
    let email = crate::address::normalize(email);
    let key = load_key(pool).await?;
    let digest = key.digest(&email);
    let found: Option<i64> =
        sqlx::query_scalar("SELECT 1 FROM erasures WHERE email_hmac = ? LIMIT 1")
            .bind(digest.to_vec())
            .fetch_optional(pool)
            .await?;
    Ok(found.is_some())
}
