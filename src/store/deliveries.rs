//! What the SMTP delivery has handed over, per letter: a re-run skips it.

use super::StoreError;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// How the MTA took a letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "ENUM", rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Handed to the MTA; its reply not yet recorded.
    Sending,
    /// Accepted (a 2xx reply to the message).
    Delivered,
    /// Refused for good (5xx): retrying cannot help.
    Rejected,
}

/// What earlier runs recorded for some letters of a mailing.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Delivered or rejected: never sent again.
    pub settled: HashSet<u64>,
    /// Handed over by a run that died before recording the reply: they may
    /// have arrived.
    pub in_doubt: HashSet<u64>,
}

/// The recorded state of `letter_ids` of `mailing_id`.
pub async fn recorded_among(
    pool: &MySqlPool,
    mailing_id: &str,
    letter_ids: &[u64],
) -> Result<Recorded, StoreError> {
    let mut recorded = Recorded::default();
    for chunk in letter_ids.chunks(super::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT letter_id, CAST(status = 'sending' AS SIGNED) FROM deliveries WHERE mailing_id = ",
        );
        query.push_bind(mailing_id).push(" AND letter_id IN ");
        super::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<(u64, i64)> = query.build_query_as().fetch_all(pool).await?;
        for (letter_id, sending) in rows {
            if sending != 0 {
                recorded.in_doubt.insert(letter_id);
            } else {
                recorded.settled.insert(letter_id);
            }
        }
    }
    Ok(recorded)
}

/// Mark a letter as being handed over, before its SMTP transaction: a crash
/// before [`record`] leaves it `sending`, which the next run reports.
pub async fn mark_sending(
    pool: &MySqlPool,
    mailing_id: &str,
    letter_id: u64,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT IGNORE INTO deliveries (mailing_id, letter_id, status, reply, at) \
         VALUES (?, ?, 'sending', '', UTC_TIMESTAMP())",
    )
    .bind(mailing_id)
    .bind(letter_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Record one letter's outcome, right after the MTA's reply, so the window
/// in which a crash could make a re-run deliver it again is one message.
pub async fn record(
    pool: &MySqlPool,
    mailing_id: &str,
    letter_id: u64,
    status: DeliveryStatus,
    reply: &str,
) -> Result<(), StoreError> {
    let reply: String = reply.chars().take(512).collect();
    sqlx::query(
        "UPDATE deliveries SET status = ?, reply = ?, at = UTC_TIMESTAMP() \
         WHERE mailing_id = ? AND letter_id = ?",
    )
    .bind(status)
    .bind(reply)
    .bind(mailing_id)
    .bind(letter_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Drop the `sending` mark of a letter the MTA never took (refused
/// connection, still failing after every retry): it is simply undelivered.
pub async fn forget(pool: &MySqlPool, mailing_id: &str, letter_id: u64) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM deliveries WHERE mailing_id = ? AND letter_id = ? AND status = 'sending'",
    )
    .bind(mailing_id)
    .bind(letter_id)
    .execute(pool)
    .await?;
    Ok(())
}
