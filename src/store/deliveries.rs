//! What the SMTP delivery has handed over, per letter: a re-run skips it.

use super::error::StoreError;
use crate::mailing_id::MailingId;
use sqlx::{Connection, MySql, MySqlConnection, MySqlPool, QueryBuilder};
use std::collections::HashSet;

/// How the MTA took a letter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type, serde::Serialize, serde::Deserialize)]
#[sqlx(type_name = "ENUM", rename_all = "lowercase")]
#[serde(rename_all = "lowercase")]
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
    mailing_id: &MailingId,
    letter_ids: &[u64],
) -> Result<Recorded, StoreError> {
    let mut recorded = Recorded::default();
    for chunk in letter_ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT letter_id, CAST(status = 'sending' AS SIGNED) FROM deliveries WHERE mailing_id = ",
        );
        query
            .push_bind(mailing_id.as_str())
            .push(" AND letter_id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
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

/// What the delivery tasks of one mailing asked to write since the last
/// statement, written together (see `delivery::ledger`).
#[derive(Debug, Default)]
pub struct LedgerWrites {
    /// Letters about to be handed over: marked `sending`.
    pub sending: Vec<u64>,
    /// Letters the MTA answered: their status and reply.
    pub outcomes: Vec<(u64, DeliveryStatus, String)>,
    /// Letters the MTA never took: their mark dropped.
    pub forgotten: Vec<u64>,
}

impl LedgerWrites {
    /// Nothing to write.
    pub fn is_empty(&self) -> bool {
        self.sending.is_empty() && self.outcomes.is_empty() && self.forgotten.is_empty()
    }
}

/// Write `writes` on `conn`: one statement per kind of write, whatever the
/// number of letters (up to `IN_LIST_CHUNK` each). A single statement that
/// delivers nothing (marks only) runs on its own, one round trip; anything
/// else runs in one transaction with the mailing's delivered count
/// (`stats_deliveries`), so the count always agrees with the rows.
pub async fn write_ledger(
    conn: &mut MySqlConnection,
    mailing_id: &str,
    writes: &LedgerWrites,
) -> Result<(), StoreError> {
    let mut statements = ledger_statements(mailing_id, writes);
    if let [only] = statements.as_mut_slice() {
        if !only.delivers {
            only.query.build().execute(&mut *conn).await?;
            return Ok(());
        }
    }
    let mut tx = conn.begin().await?;
    let mut delivered = 0;
    for mut statement in statements {
        let done = statement.query.build().execute(&mut *tx).await?;
        if statement.delivers {
            delivered += done.rows_affected();
        }
    }
    count_delivered(&mut tx, mailing_id, delivered).await?;
    tx.commit().await?;
    Ok(())
}

/// Add `letters` to `mailing_id`'s delivered count, inside the transaction
/// that delivered them.
async fn count_delivered(
    conn: &mut MySqlConnection,
    mailing_id: &str,
    letters: u64,
) -> Result<(), StoreError> {
    if letters == 0 {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO stats_deliveries (mailing_id, delivered) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE delivered = delivered + ?",
    )
    .bind(mailing_id)
    .bind(letters)
    .bind(letters)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The letters of `mailing_id` delivered so far (every run, every sender
/// that records into `deliveries`): one row read.
pub async fn delivered_count(pool: &MySqlPool, mailing_id: &MailingId) -> Result<u64, StoreError> {
    let count: Option<(u64,)> =
        sqlx::query_as("SELECT delivered FROM stats_deliveries WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(count.map_or(0, |(letters,)| letters))
}

/// Write marks and outcomes recorded elsewhere first (a delivery log a
/// killed run left): (mailing, letter, status, reply) each, grouped by
/// mailing, marks before outcomes, in statements of up to `IN_LIST_CHUNK`
/// letters. A mark never overwrites an outcome, and writing either twice
/// changes nothing.
pub async fn apply_logged<'a>(
    pool: &MySqlPool,
    lines: impl Iterator<Item = (&'a str, u64, DeliveryStatus, &'a str)>,
) -> Result<(), StoreError> {
    type Answers<'a> = std::collections::BTreeMap<u64, (DeliveryStatus, &'a str)>;
    let mut by_mailing = std::collections::BTreeMap::<&str, (Vec<u64>, Answers)>::new();
    for (mailing_id, letter_id, status, reply) in lines {
        let (marks, answers) = by_mailing.entry(mailing_id).or_default();
        match status {
            DeliveryStatus::Sending => marks.push(letter_id),
            // A letter's last answer is the one that holds.
            _ => {
                answers.insert(letter_id, (status, reply));
            }
        }
    }
    let mut conn = pool.acquire().await?;
    for (mailing_id, (marks, answers)) in by_mailing {
        let writes = LedgerWrites {
            sending: marks,
            outcomes: answers
                .into_iter()
                .map(|(letter_id, (status, reply))| (letter_id, status, reply.to_owned()))
                .collect(),
            forgotten: Vec::new(),
        };
        write_ledger(&mut conn, mailing_id, &writes).await?;
    }
    Ok(())
}

/// One statement of a ledger write; `delivers` when the rows it changes
/// are letters newly delivered.
struct LedgerStatement<'a> {
    query: QueryBuilder<'a, MySql>,
    delivers: bool,
}

/// The statements that write `writes`: marks, then outcomes (delivered,
/// then rejected), then forgotten marks. An outcome settles a `sending`
/// mark only: a letter the MTA answered keeps its first answer, so a
/// delivered letter is counted once however often its answer is written.
fn ledger_statements<'a>(
    mailing_id: &'a str,
    writes: &'a LedgerWrites,
) -> Vec<LedgerStatement<'a>> {
    let mut statements = Vec::new();
    for chunk in writes.sending.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO deliveries (mailing_id, letter_id, status, reply, at) ",
        );
        query.push_values(chunk, |mut row, letter_id| {
            row.push_bind(mailing_id)
                .push_bind(*letter_id)
                .push("'sending', '', UTC_TIMESTAMP()");
        });
        statements.push(LedgerStatement {
            query,
            delivers: false,
        });
    }
    for status in [DeliveryStatus::Delivered, DeliveryStatus::Rejected] {
        let answers: Vec<&(u64, DeliveryStatus, String)> = writes
            .outcomes
            .iter()
            .filter(|(_, answered, _)| *answered == status)
            .collect();
        for chunk in answers.chunks(super::in_list::IN_LIST_CHUNK) {
            statements.push(LedgerStatement {
                query: settle_marks(mailing_id, status, chunk),
                delivers: status == DeliveryStatus::Delivered,
            });
        }
    }
    for chunk in writes.forgotten.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new("DELETE FROM deliveries WHERE mailing_id = ");
        query.push_bind(mailing_id);
        query.push(" AND status = 'sending' AND letter_id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        statements.push(LedgerStatement {
            query,
            delivers: false,
        });
    }
    statements
}

/// `UPDATE` the `sending` marks of `answers` (all with `status`) to their
/// answer: the rows it changes are the letters it settles.
fn settle_marks<'a>(
    mailing_id: &'a str,
    status: DeliveryStatus,
    answers: &[&'a (u64, DeliveryStatus, String)],
) -> QueryBuilder<'a, MySql> {
    let mut query = QueryBuilder::<MySql>::new("UPDATE deliveries SET status = ");
    query.push_bind(status).push(", reply = CASE letter_id");
    for (letter_id, _, reply) in answers {
        let reply: String = reply.chars().take(512).collect();
        query
            .push(" WHEN ")
            .push_bind(*letter_id)
            .push(" THEN ")
            .push_bind(reply);
    }
    query
        .push(" END, at = UTC_TIMESTAMP() WHERE mailing_id = ")
        .push_bind(mailing_id);
    query.push(" AND status = 'sending' AND letter_id IN ");
    super::in_list::push_in_list(&mut query, answers.iter().map(|(id, ..)| *id));
    query
}

/// Record what MTAs answered for letters handed over by the relay, each
/// `(mailing_id, letter_id, status, reply)`: their rows written and the
/// delivered ones counted, one transaction per mailing (as a build's
/// ledger writes them), so stats and exports count relayed letters too.
pub async fn record_answers(
    pool: &MySqlPool,
    answers: &[(String, u64, DeliveryStatus, String)],
) -> Result<(), StoreError> {
    let mut by_mailing: std::collections::BTreeMap<&str, LedgerWrites> = Default::default();
    for (mailing_id, letter_id, status, reply) in answers {
        let writes = by_mailing.entry(mailing_id.as_str()).or_default();
        writes.sending.push(*letter_id);
        writes.outcomes.push((*letter_id, *status, reply.clone()));
    }
    let mut conn = pool.acquire().await?;
    for (mailing_id, writes) in &by_mailing {
        write_ledger(&mut conn, mailing_id, writes).await?;
    }
    Ok(())
}

/// Record `letter_ids` of `mailing_id` as delivered now (the database's
/// clock), with `reply`: letters handed over outside linktrack's SMTP
/// delivery, as the demo's letters are when it starts serving them. Their
/// clicks are then judged from this moment (a click within the verdicts'
/// minimum delay after it is `too_fast`), not from when they were built.
pub async fn mark_delivered_now(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letter_ids: &[u64],
    reply: &str,
) -> Result<(), StoreError> {
    let letter_ids: std::collections::BTreeSet<u64> = letter_ids.iter().copied().collect();
    let letter_ids: Vec<u64> = letter_ids.into_iter().collect();
    let mut conn = pool.acquire().await?;
    for chunk in letter_ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut tx = conn.begin().await?;
        // Those already delivered are not counted again; locked so that no
        // other writer settles them between this read and the upsert.
        let mut already = QueryBuilder::<MySql>::new(
            "SELECT COUNT(*) FROM deliveries WHERE status = 'delivered' AND mailing_id = ",
        );
        already
            .push_bind(mailing_id.as_str())
            .push(" AND letter_id IN ");
        super::in_list::push_in_list(&mut already, chunk.iter().copied());
        already.push(" FOR UPDATE");
        let (already,): (i64,) = already.build_query_as().fetch_one(&mut *tx).await?;
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO deliveries (mailing_id, letter_id, status, reply, at) ",
        );
        query.push_values(chunk, |mut row, letter_id| {
            row.push_bind(mailing_id.as_str())
                .push_bind(*letter_id)
                .push("'delivered'")
                .push_bind(reply)
                .push("UTC_TIMESTAMP()");
        });
        query
            .push(" ON DUPLICATE KEY UPDATE status = 'delivered', at = UTC_TIMESTAMP(), reply = ")
            .push_bind(reply);
        query.build().execute(&mut *tx).await?;
        let newly = (chunk.len() as u64).saturating_sub(u64::try_from(already).unwrap_or(0));
        count_delivered(&mut tx, mailing_id.as_str(), newly).await?;
        tx.commit().await?;
    }
    Ok(())
}
