//! The outbox of events going out (webhooks, AMQP): see the migration
//! `20261124090001_outbox.sql` for the design. Every statement here is
//! valid on MariaDB 10.6+ and MySQL 8; times are the database's clock
//! (`NOW(3)`, UTC in every linktrack session), so several servers agree on
//! what is due.

use super::bot_reason::read_bot_reason;
use super::error::StoreError;
use super::rolled_batch::RolledBatch;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};
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
    /// `Some(net)`: held for its settled verdict (the rollup's settle pass
    /// releases it, [`release_settled`]); sent anyway, as it is, `net` after
    /// it was queued. `None`: due at once.
    pub hold: Option<Duration>,
}

/// A claimed row, ready to send.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Claimed {
    pub id: u64,
    pub event_id: Vec<u8>,
    pub event_type: String,
    pub letter_id: Option<u64>,
    pub occurred_at: NaiveDateTime,
    pub payload: String,
    pub attempts: u32,
    /// Since the row was first enqueued (for the give-up age).
    pub age_ms: i64,
    /// The failed batch this row is retried in (see the migration
    /// `20261125090001_outbox_batch.sql`), if any.
    pub batch: Option<u64>,
    /// Still held: its settle pass never came, and the safety net sent it
    /// with its first verdict.
    pub held: i8,
}

/// The longest a row is held (a settle time past any sense must not make
/// `next_attempt_at` overflow and the insert fail).
const LONGEST_HOLD: Duration = Duration::from_secs(30 * 24 * 3_600);

/// Enqueue rows; a row already queued for its endpoint is left as it is.
/// (`IGNORE` is safe here: the table is not partitioned and no column can
/// be truncated: the payload is MEDIUMTEXT, the other values are ours.)
pub async fn enqueue(pool: &MySqlPool, rows: &[NewOutboxRow]) -> Result<(), StoreError> {
    let mut conn = pool.acquire().await?;
    enqueue_on(&mut conn, rows).await
}

/// [`enqueue`] on a connection: in the transaction of the caller (`bounces
/// ingest` queues a decision's event in the transaction that stores it).
pub async fn enqueue_on(
    conn: &mut MySqlConnection,
    rows: &[NewOutboxRow],
) -> Result<(), StoreError> {
    for chunk in rows.chunks(super::events::MAX_ROWS_PER_INSERT) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO outbox \
             (endpoint, event_id, event_type, letter_id, occurred_at, payload, held, \
              next_attempt_at) ",
        );
        query.push_values(chunk, |mut b, row| {
            b.push_bind(&row.endpoint)
                .push_bind(&row.event_id[..])
                .push_bind(row.event_type)
                .push_bind(row.letter_id)
                .push_bind(row.occurred_at.naive_utc())
                .push_bind(&row.payload)
                .push_bind(i8::from(row.hold.is_some()))
                .push("NOW(3) + INTERVAL ")
                .push_bind_unseparated(micros(row.hold.unwrap_or_default().min(LONGEST_HOLD)))
                .push_unseparated(" MICROSECOND");
        });
        query.build().execute(&mut *conn).await?;
    }
    Ok(())
}

/// Claim up to `limit` due rows of `endpoint`, oldest due first, for
/// `lease`: until then no other sender takes them; after it (a crash, a
/// hang) they are due again. Two statements whatever the limit. Returns
/// them in the order they were queued.
///
/// The `due` index is forced: with a backlog, MariaDB otherwise picks
/// `oldest` and sorts every due row of the endpoint for each claim (seen
/// with `ANALYZE UPDATE` under a backlog, which then held the sender to a
/// crawl). Index hints in a single-table UPDATE
/// are valid on MySQL 8 too.
pub async fn claim(
    pool: &MySqlPool,
    endpoint: &str,
    limit: u32,
    lease: Duration,
) -> Result<Vec<Claimed>, StoreError> {
    let claim: u64 = rand::random::<u64>() >> 1;
    sqlx::query(
        "UPDATE outbox FORCE INDEX (due) \
         SET claim = ?, next_attempt_at = NOW(3) + INTERVAL ? MICROSECOND \
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
        "SELECT id, event_id, event_type, letter_id, occurred_at, payload, attempts, \
         CAST(TIMESTAMPDIFF(MICROSECOND, enqueued_at, NOW(3)) DIV 1000 AS SIGNED) AS age_ms, \
         batch, held FROM outbox WHERE claim = ? AND endpoint = ? ORDER BY id",
    )
    .bind(claim)
    .bind(endpoint)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Held rows of one settle pass read per statement.
const RELEASE_CHUNK: usize = 500;

/// Release the held rows of `batch`'s events (the rollup's settle pass, in
/// its transaction, after `store::verdicts::settle_batch` wrote the final
/// verdicts): each payload is rendered again with the event's settled
/// verdict and `"settled": true`, and the row is due at once. Returns how
/// many rows were released.
///
/// Only rows no sender ever took are rewritten (`claim IS NULL AND attempts
/// = 0`): a row the safety net already handed to a sink keeps the bytes it
/// was sent with, so a retry sends the same body under the same id. The
/// guard is in the UPDATE itself, so a sender claiming a row between the
/// read and the write wins and the row is left as it is.
pub async fn release_settled(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
) -> Result<u64, StoreError> {
    let held: Vec<(u64, String, i8, Option<String>)> = batch
        .bind_range(sqlx::query_as(concat!(
            "SELECT o.id, o.payload, e.bot, ",
            read_bot_reason!(e),
            " FROM events e \
                 JOIN outbox o ON o.held = 1 AND o.event_id = e.event_id \
                 WHERE e.inserted >= ? AND e.inserted < ? AND e.id > ? AND e.id <= ? \
                 AND o.claim IS NULL AND o.attempts = 0"
        )))
        .fetch_all(&mut *conn)
        .await?;
    let mut released = 0;
    for chunk in held.chunks(RELEASE_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new("UPDATE outbox SET payload = CASE id");
        for (id, stored, bot, reason) in chunk {
            let payload = crate::payload::settled(stored, *bot != 0, reason.as_deref())
                .unwrap_or_else(|err| {
                    // Not one of ours (hand-edited?): sent as it is.
                    tracing::warn!(id, %err, "held outbox row not rendered again");
                    stored.clone()
                });
            query
                .push(" WHEN ")
                .push_bind(*id)
                .push(" THEN ")
                .push_bind(payload);
        }
        query.push(
            " ELSE payload END, held = 0, next_attempt_at = NOW(3) \
             WHERE held = 1 AND claim IS NULL AND attempts = 0 AND id IN ",
        );
        super::in_list::push_in_list(&mut query, chunk.iter().map(|(id, ..)| *id));
        released += query.build().execute(&mut *conn).await?.rows_affected();
    }
    Ok(released)
}

/// Delete acknowledged rows (one statement per `IN_LIST_CHUNK`).
pub async fn delivered(pool: &MySqlPool, ids: &[u64]) -> Result<(), StoreError> {
    for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM outbox WHERE id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// When and how rows that were not delivered this time come back.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryLater {
    /// Due again after this long.
    pub delay: Duration,
    /// Count a failed attempt (rows released unsent, behind a failed one of
    /// the same letter, keep their count).
    pub attempted: bool,
    pub error: String,
    /// Keep the rows together as this batch (a failed batch), or not.
    pub batch: Option<u64>,
}

/// Try `ids` again later, as `retry` says (one statement per chunk).
pub async fn retry_later(
    pool: &MySqlPool,
    ids: &[u64],
    retry: &RetryLater,
) -> Result<(), StoreError> {
    for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new("UPDATE outbox SET attempts = attempts + ");
        query
            .push_bind(u32::from(retry.attempted))
            .push(", claim = NULL, next_attempt_at = NOW(3) + INTERVAL ")
            .push_bind(micros(retry.delay))
            .push(" MICROSECOND, last_error = ")
            .push_bind(truncated(&retry.error))
            .push(", batch = ")
            .push_bind(retry.batch)
            .push(" WHERE id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// Put claimed rows back unsent, first in line (due before any other row),
/// keeping their attempts and batch: the part of a failed batch whose other
/// rows a claim's limit left behind, so that the next claim takes the whole
/// batch again.
pub async fn release_first(pool: &MySqlPool, ids: &[u64]) -> Result<(), StoreError> {
    for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "UPDATE outbox SET claim = NULL, next_attempt_at = TIMESTAMP('2000-01-01') \
             WHERE id IN ",
        );
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// Move `ids` to the dead letters with `reason`, in one transaction.
pub async fn give_up(pool: &MySqlPool, ids: &[u64], reason: &str) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO outbox_dead (endpoint, event_id, event_type, letter_id, occurred_at, \
             payload, attempts, enqueued_at, reason) \
             SELECT endpoint, event_id, event_type, letter_id, occurred_at, payload, \
             attempts + 1, enqueued_at, ",
        );
        query
            .push_bind(truncated(reason))
            .push(" FROM outbox WHERE id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        query.push(
            " ON DUPLICATE KEY UPDATE attempts = VALUES(attempts), dead_at = NOW(3), \
             reason = VALUES(reason)",
        );
        query.build().execute(&mut *tx).await?;
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM outbox WHERE id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        query.build().execute(&mut *tx).await?;
    }
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

/// One endpoint's backlog: the counts and the oldest event.
pub async fn backlog_of(pool: &MySqlPool, endpoint: &str) -> Result<Backlog, StoreError> {
    let (queued, dead) = counts_of(pool, endpoint).await?;
    Ok(Backlog {
        queued,
        oldest: oldest_of(pool, endpoint).await?,
        dead,
    })
}

/// Rows queued and dead for `endpoint`: the costly part of a backlog (each
/// count reads its whole index range), for callers to run sparingly.
pub async fn counts_of(pool: &MySqlPool, endpoint: &str) -> Result<(u64, u64), StoreError> {
    let queued: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox WHERE endpoint = ?")
        .bind(endpoint)
        .fetch_one(pool)
        .await?;
    let dead: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM outbox_dead WHERE endpoint = ?")
        .bind(endpoint)
        .fetch_one(pool)
        .await?;
    Ok((queued.max(0) as u64, dead.max(0) as u64))
}

/// When the oldest undelivered event of `endpoint` happened: one dive into
/// the index `oldest (endpoint, occurred_at)`, cheap whatever the backlog.
pub async fn oldest_of(
    pool: &MySqlPool,
    endpoint: &str,
) -> Result<Option<NaiveDateTime>, StoreError> {
    let oldest: Option<NaiveDateTime> =
        sqlx::query_scalar("SELECT MIN(occurred_at) FROM outbox WHERE endpoint = ?")
            .bind(endpoint)
            .fetch_one(pool)
            .await?;
    Ok(oldest)
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// At most 255 characters (the column), cut on a character boundary.
fn truncated(text: &str) -> String {
    text.chars().take(255).collect()
}

/// One server's endpoint as registered in `outbound_endpoints`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct Registered {
    pub server: String,
    pub name: String,
    pub fingerprint: String,
    pub description: String,
}

/// Replace `server`'s registered endpoints with `endpoints` (`server` of
/// each is ignored), in one transaction.
pub async fn register_endpoints(
    pool: &MySqlPool,
    server: &str,
    endpoints: &[Registered],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM outbound_endpoints WHERE server = ?")
        .bind(server)
        .execute(&mut *tx)
        .await?;
    if !endpoints.is_empty() {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO outbound_endpoints (server, name, fingerprint, description) ",
        );
        query.push_values(endpoints, |mut b, endpoint| {
            b.push_bind(server)
                .push_bind(&endpoint.name)
                .push_bind(&endpoint.fingerprint)
                .push_bind(&endpoint.description);
        });
        query.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Mark `server`'s registration as current.
pub async fn refresh_registration(pool: &MySqlPool, server: &str) -> Result<(), StoreError> {
    sqlx::query("UPDATE outbound_endpoints SET seen_at = NOW(3) WHERE server = ?")
        .bind(server)
        .execute(pool)
        .await?;
    Ok(())
}

/// The endpoints other servers registered or refreshed within `recent`.
pub async fn endpoints_of_other_servers(
    pool: &MySqlPool,
    server: &str,
    recent: Duration,
) -> Result<Vec<Registered>, StoreError> {
    let rows = sqlx::query_as::<_, Registered>(
        "SELECT server, name, fingerprint, description FROM outbound_endpoints \
         WHERE server <> ? AND seen_at >= NOW(3) - INTERVAL ? MICROSECOND \
         ORDER BY name, server",
    )
    .bind(server)
    .bind(micros(recent))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}
