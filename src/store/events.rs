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

use super::{is_no_partition, StoreError};
use crate::kind::EventKind;
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::{MySql, MySqlPool, QueryBuilder};

/// Columns bound per event row.
const COLUMNS_PER_ROW: usize = 14;
/// Rows per statement: far below the 65,535-placeholder limit, and small
/// enough (user agents are at most 512 bytes) to stay well under the
/// default `max_allowed_packet`.
pub const MAX_ROWS_PER_INSERT: usize = 1_000;
const _: () = assert!(MAX_ROWS_PER_INSERT * COLUMNS_PER_ROW <= 65_535);

/// One event row as stored. `inserted` is the UTC day of `occurred_at`.
///
/// Not the journal's line format: that is
/// `crate::events::record::JournalRecord`, versioned apart from this row.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRow {
    pub event_id: [u8; 16],
    pub occurred_at: DateTime<Utc>,
    pub kind: EventKind,
    /// The token that was hit, as stored in `events.uuid`.
    pub token: [u8; 16],
    pub link_id: Option<u64>,
    pub mailing_id: Option<String>,
    pub letter_id: Option<u64>,
    pub email: Option<String>,
    pub position: Option<u32>,
    pub ip: Option<String>,
    pub user_agent: Option<String>,
    pub bot: bool,
    pub bot_reason: Option<String>,
}

impl EventRow {
    /// The partition key.
    pub fn inserted(&self) -> NaiveDate {
        self.occurred_at.date_naive()
    }
}

/// Insert events, skipping any already stored (same `event_id` and day).
/// Fails with [`StoreError::NoPartition`] when a day has no partition.
/// Returns the server's affected-row count, for logging only.
pub async fn insert_idempotent(pool: &MySqlPool, rows: &[EventRow]) -> Result<u64, StoreError> {
    let mut added = 0;
    for chunk in rows.chunks(MAX_ROWS_PER_INSERT) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO events (inserted, event_id, occurred_at, kind, uuid, link_id, \
             mailing_id, letter_id, email, position, ip, user_agent, bot, bot_reason) ",
        );
        query.push_values(chunk, |mut b, row| {
            b.push_bind(row.inserted())
                .push_bind(&row.event_id[..])
                .push_bind(row.occurred_at.naive_utc())
                .push_bind(row.kind)
                .push_bind(&row.token[..])
                .push_bind(row.link_id)
                .push_bind(&row.mailing_id)
                .push_bind(row.letter_id)
                .push_bind(&row.email)
                .push_bind(row.position)
                .push_bind(&row.ip)
                .push_bind(&row.user_agent)
                .push_bind(row.bot)
                .push_bind(&row.bot_reason);
        });
        query.push(" ON DUPLICATE KEY UPDATE event_id = event_id");
        match query.build().execute(pool).await {
            Ok(done) => added += done.rows_affected(),
            Err(err) if is_no_partition(&err) => {
                return Err(StoreError::NoPartition {
                    table: "events",
                    date: chunk
                        .iter()
                        .map(EventRow::inserted)
                        .max()
                        .unwrap_or_default(),
                })
            }
            Err(err) => return Err(err.into()),
        }
    }
    Ok(added)
}

/// Put `emails` on the suppression list with reason `unsubscribe`. Each
/// address is trimmed and lowercased, the form the suppression list is keyed
/// by. Idempotent: an address already listed keeps its original reason and
/// date. (`IGNORE` is safe here: the table is not partitioned and the
/// addresses come from `links.email`, which has the same length limit.)
pub async fn suppress_unsubscribed(pool: &MySqlPool, emails: &[&str]) -> Result<(), StoreError> {
    for chunk in emails.chunks(MAX_ROWS_PER_INSERT) {
        let mut query =
            QueryBuilder::<MySql>::new("INSERT IGNORE INTO suppressions (email, reason) ");
        query.push_values(chunk, |mut b, email| {
            b.push_bind(email.trim().to_lowercase())
                .push_bind("unsubscribe");
        });
        query.build().execute(pool).await?;
    }
    Ok(())
}
