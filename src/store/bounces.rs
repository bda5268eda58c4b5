//! The SQL of bounce and complaint intake (docs/bounces.md): which letter
//! a bounce names, and the `bounces` table of every decision.

use super::error::StoreError;
use crate::mailing_id::MailingId;
use chrono::NaiveDate;
use sqlx::{MySqlExecutor, MySqlPool};

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
pub async fn record(
    db: impl MySqlExecutor<'_>,
    decision: &Decision<'_>,
) -> Result<bool, StoreError> {
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
    .execute(db)
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
pub async fn soft_letters(
    db: impl MySqlExecutor<'_>,
    email: &str,
    days: u32,
) -> Result<u64, StoreError> {
    let (count,): (i64,) = sqlx::query_as(
        "SELECT COUNT(DISTINCT mailing_id, letter_id) FROM bounces \
         WHERE email = ? AND kind = 'soft' AND received_at >= UTC_TIMESTAMP() - INTERVAL ? DAY",
    )
    .bind(email)
    .bind(days)
    .fetch_one(db)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// Change the action of a stored decision (a soft bounce that reached
/// the limit: `suppressed`).
pub async fn set_action(
    db: impl MySqlExecutor<'_>,
    source_key: &[u8; 32],
    email: &str,
    action: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE bounces SET action = ? WHERE source_key = ? AND email = ?")
        .bind(action)
        .bind(source_key.to_vec())
        .bind(email)
        .execute(db)
        .await?;
    Ok(())
}

/// A mailing's bounces and complaints: letters that
/// hard-bounced, soft-bounced (counted once however often), were blocked
/// by a policy or complained about, and the base their rates are of:
/// the letters the SMTP hand-off delivered (`deliveries`), or, when the
/// mailing's letters went out through another MTA (no `deliveries`
/// rows), the letters built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(into = "BounceFigures")]
pub struct BounceSummary {
    pub delivered: u64,
    pub letters_built: u64,
    pub hard: u64,
    pub soft: u64,
    pub policy: u64,
    pub complaints: u64,
}

/// [`BounceSummary`] as the stats API sends it: counts, the base and the
/// rates (0 to 1; 0 when the base is 0).
#[derive(Debug, Clone, serde::Serialize)]
pub struct BounceFigures {
    pub delivered: u64,
    /// `delivered` or `built`: what the rates are of.
    pub rate_base: &'static str,
    pub base: u64,
    pub hard: u64,
    pub soft: u64,
    pub policy: u64,
    pub complaints: u64,
    pub hard_rate: f64,
    pub soft_rate: f64,
    pub policy_rate: f64,
    pub complaint_rate: f64,
}

impl BounceSummary {
    /// What the rates are of: (`delivered` or `built`, the count).
    pub fn base(&self) -> (&'static str, u64) {
        if self.delivered > 0 {
            ("delivered", self.delivered)
        } else {
            ("built", self.letters_built)
        }
    }

    /// `count` of the base, 0 to 1.
    pub fn rate(&self, count: u64) -> f64 {
        match self.base().1 {
            0 => 0.0,
            base => count as f64 / base as f64,
        }
    }
}

impl From<BounceSummary> for BounceFigures {
    fn from(s: BounceSummary) -> Self {
        let (rate_base, base) = s.base();
        BounceFigures {
            delivered: s.delivered,
            rate_base,
            base,
            hard: s.hard,
            soft: s.soft,
            policy: s.policy,
            complaints: s.complaints,
            hard_rate: s.rate(s.hard),
            soft_rate: s.rate(s.soft),
            policy_rate: s.rate(s.policy),
            complaint_rate: s.rate(s.complaints),
        }
    }
}

/// The bounce figures of `mailing_id` (`letters_built` its letters
/// built, the base when none was delivered over SMTP): two index range
/// reads, `bounces_mailing` and the `deliveries` primary key.
pub async fn mailing_summary(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letters_built: u64,
) -> Result<BounceSummary, StoreError> {
    let kinds: Vec<(String, i64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), COUNT(DISTINCT letter_id) FROM bounces \
         WHERE mailing_id = ? GROUP BY kind",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    let delivered = super::deliveries::delivered_count(pool, mailing_id).await?;
    let mut summary = BounceSummary {
        delivered,
        letters_built,
        ..BounceSummary::default()
    };
    for (kind, letters) in kinds {
        let letters = u64::try_from(letters).unwrap_or(0);
        match kind.as_str() {
            "hard" => summary.hard = letters,
            "soft" => summary.soft = letters,
            "policy" => summary.policy = letters,
            "complaint" => summary.complaints = letters,
            other => {
                return Err(StoreError::Corrupt {
                    table: "bounces",
                    detail: format!("unknown kind {other:?}"),
                })
            }
        }
    }
    Ok(summary)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_of_delivered_letters_or_else_of_letters_built() {
        let s = BounceSummary {
            delivered: 200,
            letters_built: 400,
            hard: 3,
            soft: 2,
            policy: 1,
            complaints: 1,
        };
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["rate_base"], "delivered");
        assert_eq!(json["base"], 200);
        assert_eq!(json["hard_rate"], 0.015);
        assert_eq!(json["complaint_rate"], 0.005);
        let elsewhere = BounceSummary { delivered: 0, ..s };
        assert_eq!(elsewhere.base(), ("built", 400));
        assert_eq!(elsewhere.rate(4), 0.01);
        assert_eq!(BounceSummary::default().rate(0), 0.0);
    }
}
