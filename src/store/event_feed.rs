//! The live event stream's reads (`GET /api/events/stream`, docs/api.md
//! "The event stream"): stored events and bounce decisions past an id, the
//! rollup's watermarks (an event at or below its day's watermark has its
//! settled verdict) and the verdicts of events read again.
//!
//! `events.id` and `bounces.id` only grow, so "past an id" is a cursor a
//! client can resume from. Every read of `events` names a lower bound on
//! `inserted`, so it reads only the partitions of the days in question.

use super::bot_reason::read_bot_reason;
use super::error::StoreError;
use super::in_list::{push_in_list, IN_LIST_CHUNK};
use crate::event::EventRow;
use crate::kind::EventKind;
use chrono::{NaiveDate, NaiveDateTime};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::BTreeMap;

/// An event row and its `events.id`.
#[derive(Debug, Clone)]
pub struct FeedEvent {
    pub id: u64,
    pub row: EventRow,
}

/// A stored bounce or complaint decision (a `bounces` row).
#[derive(Debug, Clone)]
pub struct FeedBounce {
    pub id: u64,
    pub source_key: Vec<u8>,
    pub source_message_id: String,
    pub email: String,
    pub mailing_id: String,
    pub letter_id: u64,
    /// `hard`, `soft`, `policy` or `complaint`.
    pub kind: String,
    pub status: String,
    pub diagnostic: String,
    pub action: String,
    pub received_at: NaiveDateTime,
}

const EVENT_COLUMNS: &str = concat!(
    "SELECT id, event_id, occurred_at, kind, uuid, link_id, mailing_id, \
     letter_id, email, position, ip, user_agent, country, bot, ",
    read_bot_reason!(),
    " FROM events "
);

type EventLine = (
    u64,
    Vec<u8>,
    NaiveDateTime,
    EventKind,
    Vec<u8>,
    Option<u64>,
    Option<String>,
    Option<u64>,
    Option<String>,
    Option<u32>,
    Option<String>,
    Option<String>,
    Option<String>,
    bool,
    Option<String>,
);

fn bytes16(bytes: &[u8]) -> [u8; 16] {
    let mut out = [0; 16];
    let n = bytes.len().min(16);
    out[..n].copy_from_slice(&bytes[..n]);
    out
}

fn feed_event(line: EventLine) -> FeedEvent {
    let (id, event_id, at, kind, uuid, link_id, mailing_id, letter_id, email, position) = (
        line.0, line.1, line.2, line.3, line.4, line.5, line.6, line.7, line.8, line.9,
    );
    FeedEvent {
        id,
        row: EventRow {
            event_id: bytes16(&event_id),
            occurred_at: at.and_utc(),
            kind,
            token: bytes16(&uuid),
            link_id,
            mailing_id,
            letter_id,
            email,
            position,
            ip: line.10,
            user_agent: line.11,
            country: line.12,
            bot: line.13,
            bot_reason: line.14,
        },
    }
}

/// The largest `events.id` and `bounces.id` stored (0 when none): where a
/// stream without a cursor starts.
pub async fn latest_ids(pool: &MySqlPool) -> Result<(u64, u64), StoreError> {
    let events: Option<u64> = sqlx::query_scalar("SELECT MAX(id) FROM events")
        .fetch_one(pool)
        .await?;
    let bounces: Option<u64> = sqlx::query_scalar("SELECT MAX(id) FROM bounces")
        .fetch_one(pool)
        .await?;
    Ok((events.unwrap_or(0), bounces.unwrap_or(0)))
}

/// At most `limit` events with an id above `after`, stored for a day from
/// `since` on and happened at `not_before` or later, in id order.
pub async fn events_after(
    pool: &MySqlPool,
    after: u64,
    since: NaiveDateTime,
    limit: u32,
) -> Result<Vec<FeedEvent>, StoreError> {
    let sql = format!(
        "{EVENT_COLUMNS} WHERE inserted >= ? AND id > ? AND occurred_at >= ? ORDER BY id LIMIT ?"
    );
    let lines: Vec<EventLine> = sqlx::query_as(&sql)
        .bind(since.date())
        .bind(after)
        .bind(since)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    Ok(lines.into_iter().map(feed_event).collect())
}

/// The events among `ids` stored for a day from `since` on (ids a poll saw
/// skipped, looked for again: a row committed after a higher one).
pub async fn events_with_ids(
    pool: &MySqlPool,
    ids: &[u64],
    since: NaiveDate,
) -> Result<Vec<FeedEvent>, StoreError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(EVENT_COLUMNS);
        query
            .push("WHERE inserted >= ")
            .push_bind(since)
            .push(" AND id IN ");
        push_in_list(&mut query, chunk.iter().copied());
        let lines: Vec<EventLine> = query.build_query_as().fetch_all(pool).await?;
        found.extend(lines.into_iter().map(feed_event));
    }
    found.sort_by_key(|e| e.id);
    Ok(found)
}

const BOUNCE_COLUMNS: &str = "SELECT id, source_key, source_message_id, \
     CONVERT(email USING utf8mb4), mailing_id, letter_id, kind, status, diagnostic, action, \
     received_at FROM bounces ";

type BounceLine = (
    u64,
    Vec<u8>,
    String,
    String,
    String,
    u64,
    String,
    String,
    String,
    String,
    NaiveDateTime,
);

fn feed_bounce(line: BounceLine) -> FeedBounce {
    FeedBounce {
        id: line.0,
        source_key: line.1,
        source_message_id: line.2,
        email: line.3,
        mailing_id: line.4,
        letter_id: line.5,
        kind: line.6,
        status: line.7,
        diagnostic: line.8,
        action: line.9,
        received_at: line.10,
    }
}

/// At most `limit` decisions with an id above `after`, received at `since`
/// or later, in id order.
pub async fn bounces_after(
    pool: &MySqlPool,
    after: u64,
    since: NaiveDateTime,
    limit: u32,
) -> Result<Vec<FeedBounce>, StoreError> {
    let sql = format!("{BOUNCE_COLUMNS} WHERE id > ? AND received_at >= ? ORDER BY id LIMIT ?");
    let lines: Vec<BounceLine> = sqlx::query_as(&sql)
        .bind(after)
        .bind(since)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    Ok(lines.into_iter().map(feed_bounce).collect())
}

/// The decisions among `ids`.
pub async fn bounces_with_ids(
    pool: &MySqlPool,
    ids: &[u64],
) -> Result<Vec<FeedBounce>, StoreError> {
    let mut found = Vec::new();
    for chunk in ids.chunks(IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(BOUNCE_COLUMNS);
        query.push("WHERE id IN ");
        push_in_list(&mut query, chunk.iter().copied());
        let lines: Vec<BounceLine> = query.build_query_as().fetch_all(pool).await?;
        found.extend(lines.into_iter().map(feed_bounce));
    }
    found.sort_by_key(|b| b.id);
    Ok(found)
}

/// The rollup's watermark of each of `days` that has one: events of that
/// day with an id at or below it are rolled, their verdicts settled.
pub async fn rolled_up_to(
    pool: &MySqlPool,
    days: &[NaiveDate],
) -> Result<BTreeMap<NaiveDate, u64>, StoreError> {
    if days.is_empty() {
        return Ok(BTreeMap::new());
    }
    let mut query =
        QueryBuilder::<MySql>::new("SELECT day, last_id FROM rollup_state WHERE day IN ");
    push_in_list(&mut query, days.iter().copied());
    let rows: Vec<(NaiveDate, u64)> = query.build_query_as().fetch_all(pool).await?;
    Ok(rows.into_iter().collect())
}

/// The verdicts (bot, reasons) of the events `ids` of `day`, as stored now.
pub async fn verdicts(
    pool: &MySqlPool,
    day: NaiveDate,
    ids: &[u64],
) -> Result<BTreeMap<u64, (bool, Option<String>)>, StoreError> {
    let mut found = BTreeMap::new();
    for chunk in ids.chunks(IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(concat!(
            "SELECT id, bot, ",
            read_bot_reason!(),
            " FROM events WHERE inserted = "
        ));
        query.push_bind(day).push(" AND id IN ");
        push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<(u64, bool, Option<String>)> = query.build_query_as().fetch_all(pool).await?;
        found.extend(
            rows.into_iter()
                .map(|(id, bot, reason)| (id, (bot, reason))),
        );
    }
    Ok(found)
}
