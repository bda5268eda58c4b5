//! The SQL of bounce and complaint intake (docs/bounces.md): which letter
//! a bounce names, and the `bounces` table of every decision.

use super::StoreError;
use chrono::NaiveDate;
use sqlx::MySqlPool;

/// A letter of ours: its mailing, id and recipient (normalised, as its
/// rows store it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LetterRow {
    pub mailing_id: String,
    pub letter_id: u64,
    pub email: String,
}

/// What a bounce token's plaintext leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenLetter {
    Found(LetterRow),
    /// The template is no mailing's unsubscribe template, or the token
    /// is dated before the mailing: a forged or foreign token.
    NoSuchMailing,
    /// The mailing exists but the letter's rows do not (their partition
    /// was rotated away, the address erased, or the letter id is forged).
    RowsGone {
        mailing_id: String,
        letter_id: u64,
    },
}

/// The letter of a bounce token: `template` the mailing's unsubscribe
/// template, `letter_id` the letter, `day` the token's day, which is
/// the day of the letter's unsubscribe row (one partition read).
pub async fn letter_of_token(
    pool: &MySqlPool,
    template: u32,
    letter_id: u64,
    day: NaiveDate,
) -> Result<TokenLetter, StoreError> {
    let mailing: Option<(String,)> = sqlx::query_as(
        "SELECT mailing_id FROM link_templates \
         WHERE id = ? AND kind = 'unsubscribe' AND position = 0 AND first_day <= ?",
    )
    .bind(template)
    .bind(day)
    .fetch_optional(pool)
    .await?;
    let Some((mailing_id,)) = mailing else {
        return Ok(TokenLetter::NoSuchMailing);
    };
    let email: Option<(String,)> = sqlx::query_as(
        "SELECT email FROM links WHERE inserted = ? AND mailing_id = ? AND letter_id = ? \
         AND kind = 'unsubscribe' LIMIT 1",
    )
    .bind(day)
    .bind(&mailing_id)
    .bind(letter_id)
    .fetch_optional(pool)
    .await?;
    Ok(match email {
        Some((email,)) if !email.is_empty() => TokenLetter::Found(LetterRow {
            mailing_id,
            letter_id,
            email,
        }),
        _ => TokenLetter::RowsGone {
            mailing_id,
            letter_id,
        },
    })
}

/// The letter `letter_id` of the mailing whose id, as Message-IDs write
/// it, is `mailing_part`, when `deliveries` says it was handed over: its
/// recipient from its unsubscribe row. `None`: no such delivered letter,
/// or its rows are gone.
pub async fn delivered_letter(
    pool: &MySqlPool,
    letter_id: u64,
    mailing_part: &str,
    part_of: impl Fn(&str) -> String,
) -> Result<Option<LetterRow>, StoreError> {
    // The mailings table has one row per mailing: the candidates are read
    // whole and matched in code (a Message-ID writes the id with its
    // unusual characters replaced), then each is checked by primary key.
    let mailings: Vec<(String,)> = sqlx::query_as("SELECT mailing_id FROM mailings")
        .fetch_all(pool)
        .await?;
    for (mailing_id,) in mailings {
        if part_of(&mailing_id) != mailing_part {
            continue;
        }
        let delivered: Option<(u64,)> = sqlx::query_as(
            "SELECT letter_id FROM deliveries WHERE mailing_id = ? AND letter_id = ? \
             AND status <> 'rejected'",
        )
        .bind(&mailing_id)
        .bind(letter_id)
        .fetch_optional(pool)
        .await?;
        if delivered.is_none() {
            continue;
        }
        let email: Option<(String,)> = sqlx::query_as(
            "SELECT email FROM links WHERE mailing_id = ? AND letter_id = ? \
             AND kind = 'unsubscribe' LIMIT 1",
        )
        .bind(&mailing_id)
        .bind(letter_id)
        .fetch_optional(pool)
        .await?;
        if let Some((email,)) = email.filter(|(e,)| !e.is_empty()) {
            return Ok(Some(LetterRow {
                mailing_id,
                letter_id,
                email,
            }));
        }
    }
    Ok(None)
}

/// One decision, as stored.
#[derive(Debug, Clone)]
pub struct Decision<'a> {
    pub source_key: [u8; 32],
    pub source_message_id: &'a str,
    pub letter: &'a LetterRow,
    /// `hard`, `soft`, `policy` or `complaint`.
    pub kind: &'a str,
    pub status: &'a str,
    pub diagnostic: &'a str,
    /// `suppressed`, `counted`, `reported` or `listed`.
    pub action: &'a str,
}

/// Store a decision; `false` when this message's decision for this
/// address is already stored (a second delivery of the same bounce).
pub async fn record(pool: &MySqlPool, decision: &Decision<'_>) -> Result<bool, StoreError> {
    let diagnostic: String = decision.diagnostic.chars().take(1000).collect();
    let source_id: String = decision.source_message_id.chars().take(255).collect();
    let status: String = decision.status.chars().take(16).collect();
    let inserted = sqlx::query(
        "INSERT IGNORE INTO bounces (source_key, source_message_id, email, mailing_id, \
         letter_id, kind, status, diagnostic, action, received_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, UTC_TIMESTAMP())",
    )
    .bind(decision.source_key.to_vec())
    .bind(source_id)
    .bind(&decision.letter.email)
    .bind(&decision.letter.mailing_id)
    .bind(decision.letter.letter_id)
    .bind(decision.kind)
    .bind(status)
    .bind(diagnostic)
    .bind(decision.action)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Whether this message's decision for `email` is stored already.
pub async fn seen(
    pool: &MySqlPool,
    source_key: &[u8; 32],
    email: &str,
) -> Result<bool, StoreError> {
    let row: Option<(u64,)> =
        sqlx::query_as("SELECT id FROM bounces WHERE source_key = ? AND email = ?")
            .bind(source_key.to_vec())
            .bind(email)
            .fetch_optional(pool)
            .await?;
    Ok(row.is_some())
}

/// Distinct letters to `email` that soft-bounced within `days` days.
pub async fn soft_letters(pool: &MySqlPool, email: &str, days: u32) -> Result<u64, StoreError> {
    let (count,): (i64,) = sqlx::query_as(
        "SELECT COUNT(DISTINCT mailing_id, letter_id) FROM bounces \
         WHERE email = ? AND kind = 'soft' AND received_at >= UTC_TIMESTAMP() - INTERVAL ? DAY",
    )
    .bind(email)
    .bind(days)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Change the action of a stored decision (a soft bounce that reached
/// the limit: `suppressed`).
pub async fn set_action(
    pool: &MySqlPool,
    source_key: &[u8; 32],
    email: &str,
    action: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE bounces SET action = ? WHERE source_key = ? AND email = ?")
        .bind(action)
        .bind(source_key.to_vec())
        .bind(email)
        .execute(pool)
        .await?;
    Ok(())
}

/// Complaints received and letters delivered in the last 24 hours: the
/// complaint rate's two sides (the alert of docs/bounces.md). Each is a
/// range read of one index (migration 20261208000001).
pub async fn last_day(pool: &MySqlPool) -> Result<(u64, u64), StoreError> {
    let (complaints,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM bounces \
         WHERE received_at >= UTC_TIMESTAMP() - INTERVAL 1 DAY AND kind = 'complaint'",
    )
    .fetch_one(pool)
    .await?;
    let (delivered,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM deliveries \
         WHERE at >= UTC_TIMESTAMP() - INTERVAL 1 DAY AND status = 'delivered'",
    )
    .fetch_one(pool)
    .await?;
    Ok((
        u64::try_from(complaints).unwrap_or(0),
        u64::try_from(delivered).unwrap_or(0),
    ))
}
