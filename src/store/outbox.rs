//! The outbox of events going out (webhooks, AMQP): see the migration
//! `20261124090001_outbox.sql` for the design. Every statement here is
//! valid on MariaDB 10.6+ and MySQL 8; times are the database's clock
//! (`NOW(3)`, UTC in every linktrack session), so several servers agree on
//! what is due.

use super::StoreError;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::BTreeMap;
use std::time::Duration;

/// One row to enqueue: an event rendered for one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct NewOutboxRow {
    pub endpoint: String,
    pub event_id: [u8; 16],
    pub event_type: &'static str,
    pub letter_id: Option<u64>,
    pub occurred_at: DateTime<Utc>,
    pub payload: String,
}

/// A claimed row, ready to send.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Claimed {
    pub id: u64,
    pub event_id: Vec<u8>,
    pub event_type: String,
    pub letter_id: Option<u64>,
    pub payload: String,
    pub attempts: u32,
    /// Since the row was first enqueued (for the give-up age).
    pub age_ms: i64,
}

/// Enqueue rows; a row already queued for its endpoint is left as it is.
/// (`IGNORE` is safe here: the table is not partitioned and no column can
/// be truncated: the payload is MEDIUMTEXT, the other values are ours.)
pub async fn enqueue(pool: &MySqlPool, rows: &[NewOutboxRow]) -> Result<(), StoreError> {
    for chunk in rows.chunks(super::events::MAX_ROWS_PER_INSERT) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO outbox \
             (endpoint, event_id, event_type, letter_id, occurred_at, payload) ",
        );
        query.push_values(chunk, |mut b, row| {
            b.push_bind(&row.endpoint)
                .push_bind(&row.event_id[..])
                .push_bind(row.event_type)
                .push_bind(row.letter_id)
                .push_bind(row.occurred_at.naive_utc())
                .push_bind(&row.payload);
        });
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// Claim up to `limit` due rows of `endpoint`, oldest due first, for
/// `lease`: until then no other sender takes them; after it (a crash, a
/// hang) they are due again. Returns them in the order they were queued.
pub async fn claim(
    pool: &MySqlPool,
    endpoint: &str,
    limit: u32,
    lease: Duration,
) -> Result<Vec<Claimed>, StoreError> {
    let claim: u64 = rand::random::<u64>() >> 1;
    sqlx::query(
        "UPDATE outbox SET claim = ?, next_attempt_at = NOW(3) + INTERVAL ? MICROSECOND \
         WHERE endpoint = ? AND next_attempt_at <= NOW(3) \
         ORDER BY next_attempt_at, id LIMIT ?",
    )
    .bind(claim)
    .bind(micros(lease))
    .bind(endpoint)
    .bind(limit)
    .execute(pool)
    .await?;
    let rows = sqlx::query_as::<_, Claimed>(
        "SELECT id, event_id, event_type, letter_id, payload, attempts, \
         CAST(TIMESTAMPDIFF(MICROSECOND, enqueued_at, NOW(3)) DIV 1000 AS SIGNED) AS age_ms \
         FROM outbox WHERE claim = ? AND endpoint = ? ORDER BY id",
    )
    .bind(claim)
    .bind(endpoint)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Delete acknowledged rows.
pub async fn delivered(pool: &MySqlPool, ids: &[u64]) -> Result<(), StoreError> {
    for chunk in ids.chunks(super::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM outbox WHERE id IN ");
        super::push_in_list(&mut query, chunk.iter().copied());
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// Try `id` again after `delay`, counting a failed attempt when `attempted`
/// (rows released unsent, behind a failed one of the same letter, keep
/// their count).
pub async fn retry_later(
    pool: &MySqlPool,
    id: u64,
    delay: Duration,
    attempted: bool,
    error: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE outbox SET attempts = attempts + ?, claim = NULL, \
         next_attempt_at = NOW(3) + INTERVAL ? MICROSECOND, last_error = ? WHERE id = ?",
    )
    .bind(u32::from(attempted))
    .bind(micros(delay))
    .bind(truncated(error))
    .bind(id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Move `id` to the dead letters with `reason`, in one transaction.
pub async fn give_up(pool: &MySqlPool, id: u64, reason: &str) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO outbox_dead (endpoint, event_id, event_type, letter_id, occurred_at, \
         payload, attempts, enqueued_at, reason) \
         SELECT endpoint, event_id, event_type, letter_id, occurred_at, payload, attempts + 1, \
         enqueued_at, ? FROM outbox WHERE id = ? \
         ON DUPLICATE KEY UPDATE attempts = VALUES(attempts), dead_at = NOW(3), \
         reason = VALUES(reason)",
    )
    .bind(truncated(reason))
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("DELETE FROM outbox WHERE id = ?")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

/// Put the dead letters of `endpoint` for events since `since` back in the
/// outbox, due now, with a fresh give-up age. Returns how many.
pub async fn replay_dead(
    pool: &MySqlPool,
    endpoint: &str,
    since: NaiveDateTime,
) -> Result<u64, StoreError> {
    let mut tx = pool.begin().await?;
    let moved = sqlx::query(
        "INSERT INTO outbox (endpoint, event_id, event_type, letter_id, occurred_at, payload) \
         SELECT endpoint, event_id, event_type, letter_id, occurred_at, payload \
         FROM outbox_dead WHERE endpoint = ? AND occurred_at >= ? ORDER BY id \
         ON DUPLICATE KEY UPDATE next_attempt_at = NOW(3)",
    )
    .bind(endpoint)
    .bind(since)
    .execute(&mut *tx)
    .await?;
    let removed = sqlx::query("DELETE FROM outbox_dead WHERE endpoint = ? AND occurred_at >= ?")
        .bind(endpoint)
        .bind(since)
        .execute(&mut *tx)
        .await?
        .rows_affected();
    tx.commit().await?;
    tracing::debug!(
        endpoint,
        moved = moved.rows_affected(),
        removed,
        "dead letters queued again"
    );
    Ok(removed)
}

/// What waits for one endpoint.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Backlog {
    /// Rows not yet acknowledged (due, waiting for a retry, or in flight).
    pub queued: u64,
    /// The oldest of them: when its event happened.
    pub oldest: Option<NaiveDateTime>,
    /// Rows given up on.
    pub dead: u64,
}

/// The backlog of every endpoint that has rows, by endpoint name.
pub async fn backlog(pool: &MySqlPool) -> Result<BTreeMap<String, Backlog>, StoreError> {
    let queued: Vec<(String, i64, Option<NaiveDateTime>)> =
        sqlx::query_as("SELECT endpoint, COUNT(*), MIN(occurred_at) FROM outbox GROUP BY endpoint")
            .fetch_all(pool)
            .await?;
    let dead: Vec<(String, i64)> =
        sqlx::query_as("SELECT endpoint, COUNT(*) FROM outbox_dead GROUP BY endpoint")
            .fetch_all(pool)
            .await?;
    let mut out: BTreeMap<String, Backlog> = BTreeMap::new();
    for (endpoint, n, oldest) in queued {
        let entry = out.entry(endpoint).or_default();
        entry.queued = n.max(0) as u64;
        entry.oldest = oldest;
    }
    for (endpoint, n) in dead {
        out.entry(endpoint).or_default().dead = n.max(0) as u64;
    }
    Ok(out)
}

/// One endpoint's backlog (an index range read each).
pub async fn backlog_of(pool: &MySqlPool, endpoint: &str) -> Result<Backlog, StoreError> {
    let (queued, oldest): (i64, Option<NaiveDateTime>) =
        sqlx::query_as("SELECT COUNT(*), MIN(occurred_at) FROM outbox WHERE endpoint = ?")
            .bind(endpoint)
            .fetch_one(pool)
            .await?;
    let dead: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_dead WHERE endpoint = ?")
        .bind(endpoint)
        .fetch_one(pool)
        .await?;
    Ok(Backlog {
        queued: queued.max(0) as u64,
        oldest,
        dead: dead.max(0) as u64,
    })
}

/// The URL and tags (`meta.tags`) of link rows, by link id; `by_day` names
/// each id's partition day (the token's date).
pub async fn link_urls_and_tags(
    pool: &MySqlPool,
    by_day: &BTreeMap<NaiveDate, Vec<u64>>,
) -> Result<BTreeMap<u64, (String, Vec<String>)>, StoreError> {
    let mut out = BTreeMap::new();
    for (day, ids) in by_day {
        for chunk in ids.chunks(super::IN_LIST_CHUNK) {
            let mut query = QueryBuilder::<MySql>::new(
                "SELECT id, url, CAST(meta AS CHAR) FROM links WHERE inserted = ",
            );
            query.push_bind(*day).push(" AND id IN ");
            super::push_in_list(&mut query, chunk.iter().copied());
            let rows: Vec<(u64, String, Option<String>)> =
                query.build_query_as().fetch_all(pool).await?;
            for (id, url, meta) in rows {
                out.insert(id, (url, super::rollup::tags_of(meta.as_deref())));
            }
        }
    }
    Ok(out)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// At most 255 characters (the column), cut on a character boundary.
fn truncated(text: &str) -> String {
    text.chars().take(255).collect()
}
