//! The rollup's SQL: events rolled into the small per-mailing statistics
//! tables, and the reads of a rolled batch the live layer publishes. The
//! loop that runs it is [`crate::rollup_worker`]; the stats API's reads are in
//! [`super::stats`].
//!
//! # Exactly once
//!
//! [`rollup`] reads `events` past a durable watermark (`rollup_state`: per
//! events partition, the last rolled `events.id`), adds the batch to the small
//! rollup tables and advances the watermark in ONE transaction. A crash before
//! COMMIT leaves both as they were, so the batch is simply rolled again; a
//! replayed journal entry never becomes a second `events` row (UNIQUE
//! (event_id, inserted)). Every event is therefore counted exactly once.
//!
//! The watermark assumes ids become visible in id order: an event committed
//! later with an id below the watermark would be skipped. That holds with a
//! single event writer (the tracking server's batch writer). With several
//! writers, give [`RollupOptions::settle`]: only ids that were already
//! visible that long ago are rolled (see `rollup_state` in the migration).
//!
//! Each batch is read once and counted in this process (`store::tally`,
//! which says why), then added to the tables with one upsert per table.
//! Unique letters are the per-letter rows a batch really added
//! (`stats_letter_events`, and `stats_first_seen` for "clicked any link"),
//! counted from the server's affected rows, so the unique counters grow by
//! exactly the letters that were new.
//!
//! The rollup transaction runs at READ COMMITTED so `INSERT … SELECT` takes
//! no gap locks on `events`: the writer keeps appending while a batch rolls.

use super::error::StoreError;
use super::partitions;
use super::recent_hits::RecentHits;
use super::rolled_batch::RolledBatch;
use crate::bots::letter_judgement::VerdictRules;
use crate::kind::EventKind;
use chrono::{NaiveDate, NaiveDateTime, Utc};
use sqlx::{Acquire, MySqlConnection, MySqlPool};
use std::sync::Arc;
use std::time::Duration;

/// What one [`rollup`] run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupReport {
    pub batches: Vec<RolledBatch>,
    /// Held outbox rows the settle pass released (docs/serve.md, "What is
    /// held, and for how long").
    pub released: u64,
}

impl RollupReport {
    pub fn events(&self) -> u64 {
        self.batches.iter().map(|b| b.events).sum()
    }
}

impl std::fmt::Display for RollupReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "stats rollup: {} events in {} batches",
            self.events(),
            self.batches.len()
        )
    }
}

/// The predicate naming one batch: partition bounds prune to one partition,
/// the id range is a primary-key range inside it. Bind with `bind_range!`.
const RANGE: &str = "inserted >= ? AND inserted < ? AND id > ? AND id <= ?";

/// The bot flag an event is counted under. An unsubscribe is an
/// instruction, not engagement: it is honoured whoever sends it (Gmail and
/// Yahoo send RFC 8058 one-click POSTs from their servers, with no user
/// agent or a library's), so it is always counted with the humans, as the
/// suppression it caused. Its verdict stays in `events.bot`/`bot_reason`
/// and in `stats_bot_reasons`, for information only.
const COUNTED_AS_BOT: &str = "(bot <> 0 AND kind <> 'unsubscribe')";

/// A mailing's own events, not late ones: a late event has
/// `link_id` 0 (its row was gone, see `server::hits::LATE_LINK_ID`) and
/// is counted in `stats_late` only, so the regular figures of a mailing
/// never change when an old letter is clicked months later. (`link_id` is
/// NULL only for events journaled before their link was known.)
const REGULAR: &str = "COALESCE(link_id, 1) <> 0";

/// How [`rollup_with`] runs.
#[derive(Debug, Clone, PartialEq)]
pub struct RollupOptions {
    /// Events per transaction.
    pub limit: u32,
    /// Zero: trust that ids become visible in order (one event writer).
    /// Otherwise roll only ids that were visible at least this long ago, so
    /// transactions of concurrent writers shorter than this are never skipped.
    pub settle: Duration,
    /// How verdicts settle: events are rolled only once their verdict is
    /// final (`rules.settle` after they happened), judged again with their
    /// letter in view in the transaction that counts them.
    pub verdicts: Arc<VerdictRules>,
    /// The settle pass's memory of recent hits, shared by the clones of
    /// these options (one per process; a default one starts empty).
    pub recent_hits: RecentHits,
}

impl Default for RollupOptions {
    /// The defaults of `linktrack stats rollup`: 50,000 events per
    /// transaction, one event writer, verdicts settled with what is known
    /// when the rollup runs.
    fn default() -> Self {
        RollupOptions {
            limit: 50_000,
            settle: Duration::ZERO,
            verdicts: Arc::default(),
            recent_hits: RecentHits::default(),
        }
    }
}

/// Roll every event not yet rolled, in transactions of at most `limit`
/// events each, partition by partition, trusting a single event writer.
pub async fn rollup(pool: &MySqlPool, limit: u32) -> Result<RollupReport, StoreError> {
    let options = RollupOptions {
        limit,
        ..RollupOptions::default()
    };
    rollup_with(pool, &options).await
}

/// Roll every event not yet rolled (or not yet settled), partition by partition.
pub async fn rollup_with(
    pool: &MySqlPool,
    options: &RollupOptions,
) -> Result<RollupReport, StoreError> {
    let options = RollupOptions {
        limit: options.limit.max(1),
        ..options.clone()
    };
    let mut report = RollupReport::default();
    let parts = partitions::list(pool, "events").await?;
    // MySQL's smallest DATE: the first partition holds everything before its bound.
    let mut lower = NaiveDate::from_ymd_opt(1000, 1, 1).unwrap_or_default();
    for partition in &parts {
        let range = PartitionRange {
            lower,
            upper: partition.upper,
            day: partition.last_day(),
        };
        while let Some((batch, released)) = rollup_batch(pool, &range, &options).await? {
            report.batches.push(batch);
            report.released += released;
        }
        lower = partition.upper;
    }
    // Watermarks of partitions that `rotate` dropped are useless; keep the
    // table small.
    if let Some(first) = parts.first() {
        sqlx::query("DELETE FROM rollup_state WHERE day < ?")
            .bind(first.last_day())
            .execute(pool)
            .await?;
    }
    // Minutes only serve the first hours' chart: three days are plenty. A
    // bounded delete per pass keeps each statement short.
    sqlx::query(
        "DELETE FROM stats_minutes WHERE minute < UTC_TIMESTAMP() - INTERVAL 3 DAY LIMIT 10000",
    )
    .execute(pool)
    .await?;
    Ok(report)
}

/// One events partition: days `lower..upper`, watermark kept under `day`.
struct PartitionRange {
    lower: NaiveDate,
    upper: NaiveDate,
    day: NaiveDate,
}

/// Roll the next at most `limit` events of one partition, and release the
/// held outbox rows of its events (how many is returned with the batch).
/// `None` when it is caught up (or nothing more has settled).
async fn rollup_batch(
    pool: &MySqlPool,
    range: &PartitionRange,
    options: &RollupOptions,
) -> Result<Option<(RolledBatch, u64)>, StoreError> {
    let mut conn = pool.acquire().await?;
    sqlx::query("INSERT IGNORE INTO rollup_state (day, last_id) VALUES (?, 0)")
        .bind(range.day)
        .execute(&mut *conn)
        .await?;
    // Applies to the next transaction only.
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await?;
    let mut tx = conn.begin().await?;
    // The row lock serialises concurrent rollup workers: the second one waits
    // here and then reads the advanced watermark.
    let after_id: u64 =
        sqlx::query_scalar("SELECT last_id FROM rollup_state WHERE day = ? FOR UPDATE")
            .bind(range.day)
            .fetch_one(&mut *tx)
            .await?;
    // The largest id no later commit can come in under.
    let visible = if options.settle.is_zero() {
        u64::MAX
    } else {
        settled_cap(&mut tx, range, options.settle).await?
    };
    let settled = verdicts_cap(
        &mut tx,
        range,
        after_id,
        options.verdicts.settle,
        options.limit,
    )
    .await?;
    let cap = visible.min(settled);
    let (events, last_id): (i64, Option<u64>) = sqlx::query_as(
        "SELECT COUNT(*), MAX(id) FROM (SELECT id FROM events \
         WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? ORDER BY id LIMIT ?) AS batch",
    )
    .bind(range.lower)
    .bind(range.upper)
    .bind(after_id)
    .bind(cap)
    .bind(options.limit)
    .fetch_one(&mut *tx)
    .await?;
    let Some(last_id) = last_id else {
        // Commit, not roll back: a settle observation may have been recorded.
        tx.commit().await?;
        return Ok(None);
    };
    let batch = RolledBatch {
        lower: range.lower,
        upper: range.upper,
        after_id,
        last_id,
        events: events as u64,
    };
    let revised = super::verdicts::settle_batch(
        &mut tx,
        &batch,
        &options.verdicts,
        &options.recent_hits,
        visible,
    )
    .await?;
    if revised > 0 {
        metrics::counter!("linktrack_verdicts_revised_total").increment(revised);
    }
    // Events out: the batch's held clicks and opens go with these verdicts.
    let released = super::outbox::release_settled(&mut tx, &batch).await?;
    if released > 0 {
        metrics::counter!("linktrack_outbound_released_total").increment(released);
    }
    add_batch(&mut tx, &batch).await?;
    sqlx::query("UPDATE rollup_state SET last_id = ?, updated_at = NOW(3) WHERE day = ?")
        .bind(last_id)
        .bind(range.day)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    options.recent_hits.committed(&batch);
    Ok(Some((batch, released)))
}

/// The largest id that may be rolled with a settle time, on the locked
/// `rollup_state` row. When the last observation is at least `settle` old,
/// its id becomes safe and a new observation (the partition's largest
/// visible id, now) is recorded.
async fn settled_cap(
    conn: &mut MySqlConnection,
    range: &PartitionRange,
    settle: Duration,
) -> Result<u64, StoreError> {
    let micros = u64::try_from(settle.as_micros()).unwrap_or(u64::MAX);
    let (safe_id, seen_id, observed, ripe): (u64, u64, i64, i64) = sqlx::query_as(
        "SELECT safe_id, seen_id, seen_at IS NOT NULL, \
           COALESCE(seen_at <= NOW(3) - INTERVAL ? MICROSECOND, 1) \
         FROM rollup_state WHERE day = ?",
    )
    .bind(micros)
    .bind(range.day)
    .fetch_one(&mut *conn)
    .await?;
    if ripe == 0 {
        return Ok(safe_id);
    }
    let safe_id = if observed != 0 { seen_id } else { safe_id };
    // The last entry of the partition's primary key: one index dive.
    let visible: Option<u64> = sqlx::query_scalar(
        "SELECT id FROM events WHERE inserted >= ? AND inserted < ? ORDER BY id DESC LIMIT 1",
    )
    .bind(range.lower)
    .bind(range.upper)
    .fetch_optional(&mut *conn)
    .await?;
    sqlx::query("UPDATE rollup_state SET safe_id = ?, seen_id = ?, seen_at = NOW(3) WHERE day = ?")
        .bind(safe_id)
        .bind(visible.unwrap_or(0))
        .bind(range.day)
        .execute(&mut *conn)
        .await?;
    Ok(safe_id)
}

/// The largest id whose verdict has settled, among the next `window`
/// unrolled events (one batch's worth): the event before the first that
/// happened less than `settle` ago, or the window's last when all have
/// settled. Reading only the window keeps the statement short however
/// long the backlog: walking a settled backlog to its end grows with the
/// backlog (the slow log of a `bench_stats` run shows it); a batch never
/// takes more than `window` events anyway.
async fn verdicts_cap(
    conn: &mut MySqlConnection,
    range: &PartitionRange,
    after_id: u64,
    settle: Duration,
    window: u32,
) -> Result<u64, StoreError> {
    if settle.is_zero() {
        return Ok(u64::MAX);
    }
    let cutoff = Utc::now() - chrono::Duration::from_std(settle).unwrap_or_default();
    let (last, unsettled): (Option<u64>, Option<u64>) = sqlx::query_as(
        "SELECT MAX(id), MIN(IF(occurred_at > ?, id, NULL)) FROM (SELECT id, occurred_at \
           FROM events WHERE inserted >= ? AND inserted < ? AND id > ? ORDER BY id LIMIT ?) AS w",
    )
    .bind(cutoff.naive_utc())
    .bind(range.lower)
    .bind(range.upper)
    .bind(after_id)
    .bind(window)
    .fetch_one(&mut *conn)
    .await?;
    Ok(match (unsettled, last) {
        (Some(id), _) => id.saturating_sub(1),
        (None, Some(last)) => last,
        (None, None) => after_id,
    })
}

/// Bind a batch's range to a query written with [`RANGE`] (a macro because
/// `Query` and `QueryAs` share no bind trait).
macro_rules! bind_range {
    ($query:expr, $batch:expr) => {
        $query
            .bind($batch.lower)
            .bind($batch.upper)
            .bind($batch.after_id)
            .bind($batch.last_id)
    };
}

/// Add one batch of events to every rollup table: the batch read once and
/// counted in this process, the unique counters grown by the per-letter
/// rows the batch really added (`store::tally`).
async fn add_batch(conn: &mut MySqlConnection, batch: &RolledBatch) -> Result<(), StoreError> {
    let events = super::tally::read(conn, batch).await?;
    // Minutes only serve the first hours' chart: three days are kept.
    let minutes_since = Utc::now().naive_utc() - chrono::Duration::days(3);
    super::tally::Tally::of(&events, minutes_since)
        .write(conn, batch)
        .await?;
    Ok(())
}

/// How many events of one kind a rolled batch held for a mailing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindCount {
    pub mailing_id: String,
    pub kind: EventKind,
    pub bot: bool,
    pub n: u64,
}

/// Events of a rolled batch by mailing, kind and bot flag, for the live counters.
pub async fn batch_counts(
    pool: &MySqlPool,
    batch: &RolledBatch,
) -> Result<Vec<KindCount>, StoreError> {
    let sql = format!(
        "SELECT mailing_id, kind, {COUNTED_AS_BOT} AS b, COUNT(*) FROM events \
         WHERE {RANGE} AND mailing_id IS NOT NULL AND {REGULAR} GROUP BY mailing_id, kind, b"
    );
    let rows: Vec<(String, EventKind, i64, i64)> = bind_range!(sqlx::query_as(&sql), batch)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(mailing_id, kind, bot, n)| KindCount {
            mailing_id,
            kind,
            bot: bot != 0,
            n: n.max(0) as u64,
        })
        .collect())
}

/// One click of a rolled batch, for the live layer.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchClick {
    pub mailing_id: String,
    pub letter_id: u64,
    pub position: u32,
    pub bot: bool,
    pub occurred_at: NaiveDateTime,
    /// The link row's tags (`meta.tags`), empty when it has none.
    pub tags: Vec<String>,
}

/// The clicks of a rolled batch with their link's tags. The link row is
/// found by the token's own date (its partition) and id, one statement per
/// link day.
pub async fn batch_clicks(
    pool: &MySqlPool,
    batch: &RolledBatch,
) -> Result<Vec<BatchClick>, StoreError> {
    type Row = (String, u64, u32, i8, NaiveDateTime, Option<u64>, Vec<u8>);
    let sql = format!(
        "SELECT mailing_id, letter_id, position, bot, occurred_at, link_id, uuid FROM events \
         WHERE {RANGE} AND kind = 'click' AND mailing_id IS NOT NULL AND letter_id IS NOT NULL \
         AND position IS NOT NULL ORDER BY id"
    );
    let rows: Vec<Row> = bind_range!(sqlx::query_as(&sql), batch)
        .fetch_all(pool)
        .await
        .map_err(StoreError::from)?;
    let links = rows
        .iter()
        .filter_map(|(.., link_id, uuid)| link_id.map(|id| (id, uuid.as_slice())));
    let mut tags = super::links::urls_and_tags(pool, links).await?;
    Ok(rows
        .into_iter()
        .map(
            |(mailing_id, letter_id, position, bot, occurred_at, link_id, _)| BatchClick {
                mailing_id,
                letter_id,
                position,
                bot: bot != 0,
                occurred_at,
                tags: link_id
                    .and_then(|id| tags.remove(&id))
                    .map(|(_url, tags)| tags)
                    .unwrap_or_default(),
            },
        )
        .collect())
}
