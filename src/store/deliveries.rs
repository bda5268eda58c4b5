//! What the SMTP delivery has handed over, per letter: a re-run skips it.

use super::StoreError;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// How the MTA took a letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "ENUM", rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Accepted (a 2xx reply to the message).
    Delivered,
    /// Refused for good (5xx): retrying cannot help.
    Rejected,
}

/// The letters of `mailing_id` among `letter_ids` that are already
/// delivered or rejected.
pub async fn settled_among(
    pool: &MySqlPool,
    mailing_id: &str,
    letter_ids: &[u64],
) -> Result<HashSet<u64>, StoreError> {
    let mut settled = HashSet::new();
    for chunk in letter_ids.chunks(super::IN_LIST_CHUNK) {
        let mut query =
            QueryBuilder::<MySql>::new("SELECT letter_id FROM deliveries WHERE mailing_id = ");
        query.push_bind(mailing_id).push(" AND letter_id IN ");
        super::push_in_list(&mut query, chunk.iter().copied());
        let ids: Vec<u64> = query.build_query_scalar().fetch_all(pool).await?;
        settled.extend(ids);
    }
    Ok(settled)
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
        // A letter's outcome is written once: a re-run skips settled letters.
        "INSERT IGNORE INTO deliveries (mailing_id, letter_id, status, reply, at) \
         VALUES (?, ?, ?, ?, UTC_TIMESTAMP())",
    )
    .bind(mailing_id)
    .bind(letter_id)
    .bind(status)
    .bind(reply)
    .execute(pool)
    .await?;
    Ok(())
}
