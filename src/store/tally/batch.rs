//! The first stage of the rollup's counting: one batch of events read
//! once, the columns the statistics need, and the rules of what counts
//! (bot or human, regular or late).

use crate::kind::EventKind;
use crate::store::bot_reason::read_bot_reason;
use crate::store::error::StoreError;
use crate::store::rolled_batch::RolledBatch;
use chrono::NaiveDateTime;
use sqlx::MySqlConnection;

/// One event of a batch, the columns the statistics need.
#[derive(Debug, Clone)]
pub(crate) struct BatchEvent {
    pub mailing_id: String,
    pub letter_id: Option<u64>,
    pub kind: EventKind,
    pub occurred_at: NaiveDateTime,
    pub position: Option<u32>,
    pub link_id: Option<u64>,
    pub bot: bool,
    pub bot_reason: Option<String>,
    pub user_agent: Option<String>,
    pub country: Option<String>,
    pub email: Option<String>,
}

type EventRow = (
    String,
    Option<u64>,
    EventKind,
    NaiveDateTime,
    Option<u32>,
    Option<u64>,
    i8,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The batch's events of a mailing (one primary-key range in one partition),
/// with the verdicts the settle pass wrote in this transaction.
pub(crate) async fn read(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
) -> Result<Vec<BatchEvent>, StoreError> {
    let rows: Vec<EventRow> = batch
        .bind_range(sqlx::query_as(concat!(
            "SELECT mailing_id, letter_id, kind, occurred_at, position, link_id, bot, ",
            read_bot_reason!(),
            ", user_agent, country, email FROM events \
                 WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? \
                 AND mailing_id IS NOT NULL"
        )))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                mailing_id,
                letter_id,
                kind,
                occurred_at,
                position,
                link_id,
                bot,
                bot_reason,
                user_agent,
                country,
                email,
            )| BatchEvent {
                mailing_id,
                letter_id,
                kind,
                occurred_at,
                position,
                link_id,
                bot: bot != 0,
                bot_reason,
                user_agent,
                country,
                email,
            },
        )
        .collect())
}

/// The bot flag an event is counted under. An unsubscribe is an
/// instruction, not engagement: it is honoured whoever sends it (Gmail and
/// Yahoo send RFC 8058 one-click POSTs from their servers), so it is always
/// counted with the humans. Its verdict stays in `events` and in
/// `stats_bot_reasons`, for information only.
pub(super) fn counted_as_bot(event: &BatchEvent) -> bool {
    event.bot && event.kind != EventKind::Unsubscribe
}

/// A mailing's own event, not a late one: a late event has `link_id` 0 (its
/// row was gone) and is counted in `stats_late` only. (`link_id` is NULL
/// only for events journaled before their link was known.)
pub(super) fn is_regular(event: &BatchEvent) -> bool {
    event.link_id != Some(0)
}
