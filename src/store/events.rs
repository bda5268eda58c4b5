//! The `events` table (clicks, opens, image loads, unsubscribes) and the
//! unsubscribe write to `suppressions`.
//!
//! Events are inserted with multi-row inserts made idempotent by
//! `UNIQUE (event_id, inserted)`: every event carries a fresh `event_id`, so a
//! replayed journal batch is a no-op instead of a double count.
//!
//! The duplicate is absorbed with `ON DUPLICATE KEY UPDATE event_id = event_id`
//! rather than `INSERT IGNORE`, deliberately: with `IGNORE`, MySQL and MariaDB
//! silently discard a row whose day has no partition (and truncate oversized
//! values), which would lose events; this form still fails loudly on those.

pub use super::event_sql::{
    execute_insert, insert_sql, insert_sql_into, insert_sql_with_ids, MAX_ROWS_PER_INSERT,
};

use super::error::StoreError;
use crate::event::EventRow;

use sqlx::{MySql, MySqlPool, QueryBuilder};

/// Insert events, skipping any already stored (same `event_id` and day).
/// Fails with [`StoreError::NoPartition`] when a day has no partition.
/// Returns the server's affected-row count, for logging only.
/// On a Spider head each row gets its id from linktrack, taken for the
/// statement just before it runs (`cluster::event_ids` says how).
pub async fn insert_idempotent(pool: &MySqlPool, rows: &[EventRow]) -> Result<u64, StoreError> {
    let head = super::cluster::head_writes(pool).await?;
    let clock = match head {
        Some(_) => Some(super::cluster::event_clock(pool).await?),
        None => None,
    };
    let mut added = 0;
    for chunk in rows.chunks(MAX_ROWS_PER_INSERT) {
        let sql = match &clock {
            Some(clock) => insert_sql_with_ids(chunk, &clock.take(chunk.len())),
            None => insert_sql(chunk),
        };
        added += execute_insert(pool, &sql, chunk).await?;
    }
    Ok(added)
}

/// Put `emails` on the suppression list with reason `unsubscribe`. Each
/// address is normalised ([`crate::address::normalize`]), the form the
/// suppression list is keyed by. Idempotent: an address already listed keeps its original reason and
/// date. (`IGNORE` is safe here: the table is not partitioned and the
/// addresses come from `links.email`, which has the same length limit.)
/// Logged for the relays in the same transaction, as every change of the
/// list is (`suppression_changes`).
pub async fn suppress_unsubscribed(pool: &MySqlPool, emails: &[&str]) -> Result<(), StoreError> {
    if emails.is_empty() {
        return Ok(());
    }
    let key = super::address_key::load_key(pool).await?;
    for chunk in emails.chunks(MAX_ROWS_PER_INSERT) {
        // The one normalisation, as the build and `suppressions add` use
        // it: the entry is the key the next build looks up.
        let normalised: Vec<String> = chunk
            .iter()
            .map(|email| crate::address::normalize(email))
            .collect();
        let mut tx = pool.begin().await?;
        let mut query =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO suppressions (email, reason) ");
        query.push_values(&normalised, |mut b, email| {
            b.push_bind(email)
                .push_bind(super::suppressions::SuppressionReason::Unsubscribe.as_str());
        });
        query.build().execute(&mut *tx).await?;
        let digests: Vec<[u8; 32]> = normalised.iter().map(|e| key.digest(e)).collect();
        super::change_log::log_changes(&mut *tx, &digests, super::change_log::Change::Suppress)
            .await?;
        tx.commit().await?;
    }
    Ok(())
}
