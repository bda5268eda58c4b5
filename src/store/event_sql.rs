//! An event insert's statement, its values written into the text (see
//! [`insert_sql`]): one server's `events`, a Spider head's with ids given,
//! or a data node's `events_NN`. Below the cluster's code, whose replay
//! writes straight to the nodes with it; `events.rs` re-exports it.

use super::error::StoreError;
use super::mysql_errors::is_no_partition;
use crate::event::EventRow;
use sqlx::MySqlPool;

/// Columns bound per event row.
const COLUMNS_PER_ROW: usize = 14;
/// Rows per statement: far below the 65,535-placeholder limit (the outbox
/// binds its rows), and small enough to stay under the default
/// `max_allowed_packet` (16 MB) even when [`insert_sql`] writes every field
/// at its longest in hex (about 7 KB a row).
pub const MAX_ROWS_PER_INSERT: usize = 1_000;
const _: () = assert!(MAX_ROWS_PER_INSERT * COLUMNS_PER_ROW <= 65_535);

/// Run one statement of [`insert_sql`]'s kind for `chunk`, a missing day
/// said as [`StoreError::NoPartition`].
pub async fn execute_insert(
    pool: &MySqlPool,
    sql: &str,
    chunk: &[EventRow],
) -> Result<u64, StoreError> {
    match sqlx::raw_sql(sql).execute(pool).await {
        Ok(done) => Ok(done.rows_affected()),
        Err(err) if is_no_partition(&err) => Err(StoreError::NoPartition {
            table: "events",
            date: chunk
                .iter()
                .map(EventRow::inserted)
                .max()
                .unwrap_or_default(),
        }),
        Err(err) => Err(err.into()),
    }
}

/// The statement of `events::insert_idempotent` for one chunk of rows. It goes
/// over the text protocol with its values written into it: replay batches
/// vary in size, so a prepared statement had a new shape almost every time
/// and was prepared, described parameter by parameter (14 per row) and
/// closed again for one execution, which cost the server a round trip and
/// the client more than the insert. Numbers are written as digits, the
/// kind as its fixed spelling, and every text and byte value as a hex
/// literal, so nothing needs escaping and nothing can be injected.
pub fn insert_sql(rows: &[EventRow]) -> String {
    statement("events", rows, None)
}

/// [`insert_sql`] giving the rows the ids `ids`, one each, in order (a
/// Spider head's rows: never the column default).
pub fn insert_sql_with_ids(rows: &[EventRow], ids: &[u64]) -> String {
    statement("events", rows, Some(ids))
}

/// [`insert_sql_with_ids`] into the data table `table` of a Spider data
/// node (`events_07`: a name the head's partition comment gives).
pub fn insert_sql_into(table: &str, rows: &[EventRow], ids: &[u64]) -> String {
    statement(&format!("`{table}`"), rows, Some(ids))
}

fn statement(table: &str, rows: &[EventRow], ids: Option<&[u64]>) -> String {
    let mut sql = String::with_capacity(200 + rows.len() * 900);
    sql.push_str("INSERT INTO ");
    sql.push_str(table);
    sql.push_str(if ids.is_some() {
        " (id, inserted, event_id, occurred_at, kind, uuid, link_id, \
         mailing_id, letter_id, email, position, ip, user_agent, country, bot, bot_reason) VALUES "
    } else {
        " (inserted, event_id, occurred_at, kind, uuid, link_id, \
         mailing_id, letter_id, email, position, ip, user_agent, country, bot, bot_reason) VALUES "
    });
    for (n, row) in rows.iter().enumerate() {
        if n > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        if let Some(ids) = ids {
            push_number(&mut sql, ids.get(n).copied());
            sql.push_str(", ");
        }
        // Written without `core::fmt` (see `crate::timestamp`).
        crate::timestamp::with_sql_datetime(&row.occurred_at, |time| {
            let day = time.split_once(' ').map_or(time, |(day, _)| day);
            sql.push('\'');
            sql.push_str(day);
            sql.push_str("', ");
            push_bytes(&mut sql, &row.event_id);
            sql.push_str(", '");
            sql.push_str(time);
            sql.push_str("', '");
        });
        sql.push_str(row.kind.as_str());
        sql.push_str("', ");
        push_bytes(&mut sql, &row.token);
        sql.push_str(", ");
        push_number(&mut sql, row.link_id);
        sql.push_str(", ");
        push_text(&mut sql, row.mailing_id.as_deref());
        sql.push_str(", ");
        push_number(&mut sql, row.letter_id);
        sql.push_str(", ");
        push_text(&mut sql, row.email.as_deref());
        sql.push_str(", ");
        push_number(&mut sql, row.position);
        sql.push_str(", ");
        push_text(&mut sql, row.ip.as_deref());
        sql.push_str(", ");
        push_text(&mut sql, row.user_agent.as_deref());
        sql.push_str(", ");
        push_text(&mut sql, row.country.as_deref());
        sql.push_str(if row.bot { ", 1, " } else { ", 0, " });
        match &*super::bot_reason::stored(row.bot_reason.as_deref()) {
            "" => sql.push_str("''"),
            reason => push_text(&mut sql, Some(reason)),
        }
        sql.push(')');
    }
    sql.push_str(" ON DUPLICATE KEY UPDATE event_id = event_id");
    sql
}

/// `X'…'`: bytes as a hex literal.
fn push_bytes(sql: &mut String, bytes: &[u8]) {
    sql.push_str("X'");
    // Encoded whole, then appended: a `push` per digit encoded each one as
    // UTF-8 and checked the capacity each time.
    sql.push_str(&hex::encode(bytes));
    sql.push('\'');
}

/// Text as a UTF-8 hex literal (`_utf8mb4 X'…'`), or `NULL`.
pub(super) fn push_text(sql: &mut String, text: Option<&str>) {
    match text {
        Some(text) => {
            sql.push_str("_utf8mb4 ");
            push_bytes(sql, text.as_bytes());
        }
        None => sql.push_str("NULL"),
    }
}

/// A number in digits, or `NULL` (itoa: `write!` went through `core::fmt`).
pub(super) fn push_number(sql: &mut String, number: Option<impl itoa::Integer>) {
    match number {
        Some(number) => sql.push_str(itoa::Buffer::new().format(number)),
        None => sql.push_str("NULL"),
    }
}
