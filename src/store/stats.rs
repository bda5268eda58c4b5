//! Statistics: the rollup worker's SQL and the reads behind the stats API.
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
//! All aggregation is set-wise `INSERT … SELECT … GROUP BY` inside the
//! database: no event row travels to this process. Unique letters are found
//! with `INSERT IGNORE` into `stats_first_seen`, whose `rolled_by` column
//! names the batch that added a row, so the unique counters grow by one
//! `GROUP BY rolled_by` over exactly the rows that were new.
//!
//! The rollup transaction runs at READ COMMITTED so `INSERT … SELECT` takes
//! no gap locks on `events`: the writer keeps appending while a batch rolls.

use super::partitions;
use super::StoreError;
use crate::kind::EventKind;
use chrono::{NaiveDate, NaiveDateTime};
use sqlx::{Acquire, MySql, MySqlConnection, MySqlPool, QueryBuilder};
use std::collections::BTreeMap;
use std::time::Duration;

/// The events one rollup transaction covered: partition bounds and id range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBatch {
    /// First day of the partition (inclusive).
    pub lower: NaiveDate,
    /// End of the partition (exclusive).
    pub upper: NaiveDate,
    /// Events with `after_id < id <= last_id` were rolled.
    pub after_id: u64,
    pub last_id: u64,
    /// How many events the batch held.
    pub events: u64,
}

/// What one [`rollup`] run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RollupReport {
    pub batches: Vec<RolledBatch>,
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

/// How [`rollup_with`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollupOptions {
    /// Events per transaction.
    pub limit: u32,
    /// Zero: trust that ids become visible in order (one event writer).
    /// Otherwise roll only ids that were visible at least this long ago, so
    /// transactions of concurrent writers shorter than this are never skipped.
    pub settle: Duration,
}

impl Default for RollupOptions {
    /// The defaults of `linktrack stats rollup`: 50,000 events per
    /// transaction, one event writer.
    fn default() -> Self {
        RollupOptions {
            limit: 50_000,
            settle: Duration::ZERO,
        }
    }
}

/// Roll every event not yet rolled, in transactions of at most `limit`
/// events each, partition by partition, trusting a single event writer.
pub async fn rollup(pool: &MySqlPool, limit: u32) -> Result<RollupReport, StoreError> {
    let options = RollupOptions {
        limit,
        settle: Duration::ZERO,
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
        ..*options
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
        while let Some(batch) = rollup_batch(pool, &range, &options).await? {
            report.batches.push(batch);
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
    Ok(report)
}

/// One events partition: days `lower..upper`, watermark kept under `day`.
struct PartitionRange {
    lower: NaiveDate,
    upper: NaiveDate,
    day: NaiveDate,
}

/// Roll the next at most `limit` events of one partition. `None` when it is
/// caught up (or nothing more has settled).
async fn rollup_batch(
    pool: &MySqlPool,
    range: &PartitionRange,
    options: &RollupOptions,
) -> Result<Option<RolledBatch>, StoreError> {
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
    let cap = if options.settle.is_zero() {
        u64::MAX
    } else {
        settled_cap(&mut tx, range, options.settle).await?
    };
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
    add_batch(&mut tx, &batch).await?;
    sqlx::query("UPDATE rollup_state SET last_id = ?, updated_at = NOW(3) WHERE day = ?")
        .bind(last_id)
        .bind(range.day)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Some(batch))
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

/// Add one batch of events to every rollup table.
async fn add_batch(conn: &mut MySqlConnection, batch: &RolledBatch) -> Result<(), StoreError> {
    // Derived tables (`AS s`) let ON DUPLICATE KEY UPDATE name the new count
    // portably: MariaDB lacks MySQL 8's `AS new` row alias, and MySQL 8
    // deprecates VALUES() there.
    let by_range = [
        // Time series (and, summed, nothing else: totals have their own table).
        "INSERT INTO stats_hourly (mailing_id, hour, kind, bot, n) \
         SELECT * FROM (SELECT mailing_id, DATE_FORMAT(occurred_at, '%Y-%m-%d %H:00:00') AS h, \
           kind, bot <> 0 AS b, COUNT(*) AS c FROM events \
           WHERE {RANGE} AND mailing_id IS NOT NULL GROUP BY mailing_id, h, kind, b) AS s \
         ON DUPLICATE KEY UPDATE n = n + s.c",
        "INSERT INTO stats_totals (mailing_id, kind, bot, total) \
         SELECT * FROM (SELECT mailing_id, kind, bot <> 0 AS b, COUNT(*) AS c FROM events \
           WHERE {RANGE} AND mailing_id IS NOT NULL GROUP BY mailing_id, kind, b) AS s \
         ON DUPLICATE KEY UPDATE total = total + s.c",
        "INSERT INTO stats_links (mailing_id, position, bot, clicks) \
         SELECT * FROM (SELECT mailing_id, position, bot <> 0 AS b, COUNT(*) AS c FROM events \
           WHERE {RANGE} AND mailing_id IS NOT NULL AND kind = 'click' AND position > 0 \
           GROUP BY mailing_id, position, b) AS s \
         ON DUPLICATE KEY UPDATE clicks = clicks + s.c",
        "INSERT INTO stats_bot_reasons (mailing_id, kind, reason, n) \
         SELECT * FROM (SELECT mailing_id, kind, COALESCE(bot_reason, 'unknown') AS r, COUNT(*) AS c \
           FROM events WHERE {RANGE} AND mailing_id IS NOT NULL AND bot <> 0 \
           GROUP BY mailing_id, kind, r) AS s \
         ON DUPLICATE KEY UPDATE n = n + s.c",
        // Letter 0 holds the mailing's shared image rows: not a letter.
        "INSERT IGNORE INTO stats_first_seen (mailing_id, kind, position, bot, letter_id, first_at, rolled_by) \
         SELECT mailing_id, kind, 0, bot <> 0 AS b, letter_id, MIN(occurred_at), {LAST} FROM events \
         WHERE {RANGE} AND mailing_id IS NOT NULL AND letter_id > 0 \
         GROUP BY mailing_id, kind, b, letter_id",
        "INSERT IGNORE INTO stats_first_seen (mailing_id, kind, position, bot, letter_id, first_at, rolled_by) \
         SELECT mailing_id, 'click', position, bot <> 0 AS b, letter_id, MIN(occurred_at), {LAST} FROM events \
         WHERE {RANGE} AND mailing_id IS NOT NULL AND letter_id > 0 AND kind = 'click' AND position > 0 \
         GROUP BY mailing_id, position, b, letter_id",
    ];
    for sql in by_range {
        // The batch id is a number we produced, so it is inlined rather than
        // bound: that keeps every statement's placeholders the same four.
        let sql = sql
            .replace("{RANGE}", RANGE)
            .replace("{LAST}", &batch.last_id.to_string());
        bind_range!(sqlx::query(&sql), batch)
            .execute(&mut *conn)
            .await?;
    }
    let by_new_rows = [
        "INSERT INTO stats_totals (mailing_id, kind, bot, uniq) \
         SELECT * FROM (SELECT mailing_id, kind, bot, COUNT(*) AS c FROM stats_first_seen \
           WHERE rolled_by = ? AND position = 0 GROUP BY mailing_id, kind, bot) AS s \
         ON DUPLICATE KEY UPDATE uniq = uniq + s.c",
        "INSERT INTO stats_links (mailing_id, position, bot, uniq) \
         SELECT * FROM (SELECT mailing_id, position, bot, COUNT(*) AS c FROM stats_first_seen \
           WHERE rolled_by = ? AND position > 0 GROUP BY mailing_id, position, bot) AS s \
         ON DUPLICATE KEY UPDATE uniq = uniq + s.c",
    ];
    for sql in by_new_rows {
        sqlx::query(sql)
            .bind(batch.last_id)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Counts for one kind of event, split by the bot flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub total: u64,
    /// Letters with at least one such event.
    pub unique: u64,
}

/// Human and bot counts of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Split {
    pub human: Counts,
    pub bot: Counts,
}

/// One link position of a mailing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    pub position: u32,
    /// The first letter's URL for this position (personalised URLs differ
    /// per letter); `None` when no letter of the mailing is stored.
    pub url: Option<String>,
    pub human: Counts,
    pub bot: Counts,
}

/// One hour of the time series (human events only; bots are in the totals).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HourStats {
    /// The start of the hour, UTC.
    pub hour: NaiveDateTime,
    pub opens: u64,
    pub clicks: u64,
    pub bot_opens: u64,
    pub bot_clicks: u64,
}

/// Everything the stats API and the dashboard show about one mailing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MailingSummary {
    pub mailing_id: String,
    pub subject: Option<String>,
    /// Letters stored by the builder (the mailing's distinct letter ids).
    pub letters_built: u64,
    pub opens: Split,
    pub clicks: Split,
    /// Proxied image loads (letter-independent: images are shared per mailing).
    pub images: Split,
    pub unsubscribes: Split,
    /// Bot events by kind and the server's reason.
    pub bot_reasons: BTreeMap<String, BTreeMap<String, u64>>,
    pub links: Vec<LinkStats>,
    pub hours: Vec<HourStats>,
}

/// The summary of one mailing, or `None` when nothing is known about it.
pub async fn summary(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<MailingSummary>, StoreError> {
    let mut s = MailingSummary {
        mailing_id: mailing_id.to_owned(),
        ..MailingSummary::default()
    };
    s.subject = sqlx::query_scalar("SELECT subject FROM mailings WHERE mailing_id = ?")
        .bind(mailing_id)
        .fetch_optional(pool)
        .await?;
    let has_events = read_totals(pool, &mut s).await?;
    s.letters_built = letters_built(pool, mailing_id).await?;
    if s.subject.is_none() && !has_events && s.letters_built == 0 {
        return Ok(None);
    }
    s.links = read_links(pool, mailing_id).await?;
    s.hours = read_hours(pool, mailing_id).await?;
    s.bot_reasons = read_bot_reasons(pool, mailing_id).await?;
    Ok(Some(s))
}

/// Fill the per-kind counts; true when the mailing has any.
async fn read_totals(pool: &MySqlPool, s: &mut MailingSummary) -> Result<bool, StoreError> {
    let rows: Vec<(EventKind, i8, u64, u64)> =
        sqlx::query_as("SELECT kind, bot, total, uniq FROM stats_totals WHERE mailing_id = ?")
            .bind(&s.mailing_id)
            .fetch_all(pool)
            .await?;
    for (kind, bot, total, unique) in &rows {
        let split = match kind {
            EventKind::Open => &mut s.opens,
            EventKind::Click => &mut s.clicks,
            EventKind::Image => &mut s.images,
            EventKind::Unsubscribe => &mut s.unsubscribes,
        };
        let counts = if *bot != 0 {
            &mut split.bot
        } else {
            &mut split.human
        };
        *counts = Counts {
            total: *total,
            unique: *unique,
        };
    }
    Ok(!rows.is_empty())
}

/// Letters built: the builder's own count (`stats_letters`, one key read)
/// when it keeps one, otherwise the distinct letter ids of the mailing's
/// link rows (letter 0 holds shared image rows). That fallback reads only
/// the `mailing_letter` index, but every entry of the mailing in it (about
/// 0.5 ms per 100 letters here); `examples/bench_stats.rs` measures both.
pub async fn letters_built(pool: &MySqlPool, mailing_id: &str) -> Result<u64, StoreError> {
    let kept: Option<u64> =
        sqlx::query_scalar("SELECT letters FROM stats_letters WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    match kept {
        Some(n) => Ok(n),
        None => count_letters(pool, mailing_id).await,
    }
}

/// Count the mailing's letters from the `mailing_letter` index.
pub async fn count_letters(pool: &MySqlPool, mailing_id: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id)
    .fetch_one(pool)
    .await?;
    Ok(n as u64)
}

/// Add `letters` newly stored letters to a mailing's count. The builder
/// calls this on the transaction that stores the batch's link rows, so a
/// crash or a resumed build never counts a letter twice or not at all.
pub async fn add_letters_built(
    conn: &mut MySqlConnection,
    mailing_id: &str,
    letters: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO stats_letters (mailing_id, letters) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE letters = letters + ?",
    )
    .bind(mailing_id)
    .bind(letters)
    .bind(letters)
    .execute(conn)
    .await?;
    Ok(())
}

async fn read_links(pool: &MySqlPool, mailing_id: &str) -> Result<Vec<LinkStats>, StoreError> {
    let rows: Vec<(u32, i8, u64, u64)> = sqlx::query_as(
        "SELECT position, bot, clicks, uniq FROM stats_links WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id)
    .fetch_all(pool)
    .await?;
    let mut urls = link_urls(pool, mailing_id).await?;
    let mut by_position: BTreeMap<u32, LinkStats> = BTreeMap::new();
    for (&position, url) in &urls {
        by_position.insert(
            position,
            LinkStats {
                position,
                url: Some(url.clone()),
                ..LinkStats::default()
            },
        );
    }
    for (position, bot, clicks, unique) in rows {
        let link = by_position.entry(position).or_insert_with(|| LinkStats {
            position,
            url: urls.remove(&position),
            ..LinkStats::default()
        });
        let counts = Counts {
            total: clicks,
            unique,
        };
        if bot != 0 {
            link.bot = counts;
        } else {
            link.human = counts;
        }
    }
    Ok(by_position.into_values().collect())
}

/// Click URLs by position: from `stats_link_urls`, filled from the
/// mailing's first stored letter on the first call that finds one.
pub async fn link_urls(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let kept: Vec<(u32, String)> =
        sqlx::query_as("SELECT position, url FROM stats_link_urls WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_all(pool)
            .await?;
    if !kept.is_empty() {
        return Ok(kept.into_iter().collect());
    }
    let urls = first_letter_urls(pool, mailing_id).await?;
    if !urls.is_empty() {
        let mut insert = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO stats_link_urls (mailing_id, position, url) ",
        );
        insert.push_values(&urls, |mut row, (position, url)| {
            row.push_bind(mailing_id)
                .push_bind(*position)
                .push_bind(url);
        });
        insert.build().execute(pool).await?;
    }
    Ok(urls)
}

/// Click URLs by position of the mailing's first stored letter (probes the
/// `mailing_letter` index in every partition of `links`).
async fn first_letter_urls(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let first: Option<u64> = sqlx::query_scalar(
        "SELECT MIN(letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id)
    .fetch_one(pool)
    .await?;
    let Some(letter) = first else {
        return Ok(BTreeMap::new());
    };
    let rows: Vec<(u32, String)> = sqlx::query_as(
        "SELECT position, url FROM links WHERE mailing_id = ? AND letter_id = ? AND kind = 'click'",
    )
    .bind(mailing_id)
    .bind(letter)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

async fn read_hours(pool: &MySqlPool, mailing_id: &str) -> Result<Vec<HourStats>, StoreError> {
    let rows: Vec<(NaiveDateTime, EventKind, i8, u64)> = sqlx::query_as(
        "SELECT hour, kind, bot, n FROM stats_hourly \
         WHERE mailing_id = ? AND kind IN ('open', 'click') ORDER BY hour",
    )
    .bind(mailing_id)
    .fetch_all(pool)
    .await?;
    let mut hours: BTreeMap<NaiveDateTime, HourStats> = BTreeMap::new();
    for (hour, kind, bot, n) in rows {
        let h = hours.entry(hour).or_insert_with(|| HourStats {
            hour,
            ..HourStats::default()
        });
        match (kind, bot != 0) {
            (EventKind::Open, false) => h.opens += n,
            (EventKind::Open, true) => h.bot_opens += n,
            (EventKind::Click, false) => h.clicks += n,
            (EventKind::Click, true) => h.bot_clicks += n,
            // The query reads opens and clicks only.
            (EventKind::Image | EventKind::Unsubscribe, _) => {}
        }
    }
    Ok(hours.into_values().collect())
}

async fn read_bot_reasons(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, StoreError> {
    let rows: Vec<(String, String, u64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), reason, n FROM stats_bot_reasons WHERE mailing_id = ?",
    )
    .bind(mailing_id)
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (kind, reason, n) in rows {
        out.entry(kind).or_default().insert(reason, n);
    }
    Ok(out)
}

/// Store (or replace) a mailing's creative for the click map. Called by the
/// builder once per mailing.
pub async fn save_mailing(
    pool: &MySqlPool,
    mailing_id: &str,
    subject: &str,
    html: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO mailings (mailing_id, subject, html) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE subject = ?, html = ?",
    )
    .bind(mailing_id)
    .bind(subject)
    .bind(html)
    .bind(subject)
    .bind(html)
    .execute(pool)
    .await?;
    Ok(())
}

/// A mailing's saved creative, if the builder saved one.
pub async fn mailing_html(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT html FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?,
    )
}

/// One line of the dashboard's index.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MailingListing {
    pub mailing_id: String,
    pub subject: Option<String>,
    pub opens: u64,
    pub clicks: u64,
}

/// Mailings with a saved creative or any rolled event, at most `limit`,
/// ordered by id.
pub async fn list_mailings(
    pool: &MySqlPool,
    limit: u32,
) -> Result<Vec<MailingListing>, StoreError> {
    let rows: Vec<(String, Option<String>, i64, i64)> = sqlx::query_as(
        "SELECT ids.mailing_id, m.subject, \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'open' AND t.bot = 0), 0) AS SIGNED), \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'click' AND t.bot = 0), 0) AS SIGNED) \
         FROM (SELECT mailing_id FROM mailings UNION SELECT DISTINCT mailing_id FROM stats_totals) AS ids \
         LEFT JOIN mailings m ON m.mailing_id = ids.mailing_id \
         ORDER BY ids.mailing_id LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(mailing_id, subject, opens, clicks)| MailingListing {
            mailing_id,
            subject,
            opens: opens.max(0) as u64,
            clicks: clicks.max(0) as u64,
        })
        .collect())
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
        "SELECT mailing_id, kind, bot <> 0 AS b, COUNT(*) FROM events \
         WHERE {RANGE} AND mailing_id IS NOT NULL GROUP BY mailing_id, kind, b"
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
    let mut by_day: BTreeMap<NaiveDate, Vec<u64>> = BTreeMap::new();
    for (.., link_id, uuid) in &rows {
        if let (Some(id), Ok(token)) = (link_id, crate::token::Token::from_bytes(uuid)) {
            by_day.entry(token.date()).or_default().push(*id);
        }
    }
    let tags = link_tags(pool, &by_day).await?;
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
                    .and_then(|id| tags.get(&id).cloned())
                    .unwrap_or_default(),
            },
        )
        .collect())
}

/// `meta.tags` of the given link rows, by link id.
async fn link_tags(
    pool: &MySqlPool,
    by_day: &BTreeMap<NaiveDate, Vec<u64>>,
) -> Result<BTreeMap<u64, Vec<String>>, StoreError> {
    let mut out = BTreeMap::new();
    for (day, ids) in by_day {
        for chunk in ids.chunks(1_000) {
            let mut query = QueryBuilder::<MySql>::new(
                "SELECT id, CAST(meta AS CHAR) FROM links WHERE inserted = ",
            );
            query.push_bind(*day).push(" AND id IN (");
            let mut list = query.separated(", ");
            for id in chunk {
                list.push_bind(*id);
            }
            query.push(")");
            let rows: Vec<(u64, Option<String>)> = query.build_query_as().fetch_all(pool).await?;
            for (id, meta) in rows {
                out.insert(id, tags_of(meta.as_deref()));
            }
        }
    }
    Ok(out)
}

/// The `tags` array of a link's meta JSON; anything else is no tags.
fn tags_of(meta: Option<&str>) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Meta {
        #[serde(default)]
        tags: Vec<String>,
    }
    meta.and_then(|m| serde_json::from_str::<Meta>(m).ok())
        .map(|m| m.tags)
        .unwrap_or_default()
}

/// Addresses of the given letters of a mailing (from their pixel rows),
/// skipping erased ones.
pub async fn addresses_of_letters(
    pool: &MySqlPool,
    mailing_id: &str,
    letter_ids: &[u64],
) -> Result<Vec<String>, StoreError> {
    let mut found = Vec::new();
    for chunk in letter_ids.chunks(1_000) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT email FROM links WHERE kind = 'pixel' AND email <> '' AND mailing_id = ",
        );
        query.push_bind(mailing_id).push(" AND letter_id IN (");
        let mut list = query.separated(", ");
        for id in chunk {
            list.push_bind(*id);
        }
        query.push(")");
        let rows: Vec<(String,)> = query.build_query_as().fetch_all(pool).await?;
        found.extend(rows.into_iter().map(|(e,)| e));
    }
    found.sort();
    found.dedup();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_come_from_meta_or_are_empty() {
        assert_eq!(tags_of(Some(r#"{"tags":["ruby","web"]}"#)), ["ruby", "web"]);
        assert!(tags_of(Some(r#"{"other":1}"#)).is_empty());
        assert!(tags_of(Some("not json")).is_empty());
        assert!(tags_of(None).is_empty());
    }
}
