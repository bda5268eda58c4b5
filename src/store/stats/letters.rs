//! How many letters a mailing has, and how it was tracked: the builder's
//! own count (`stats_letters`), written on the transaction that stores a
//! batch, the fallback count from the link rows, and the tracking mode.

use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use sqlx::{MySqlConnection, MySqlPool};

/// Letters built: the builder's own count (`stats_letters`, one key read)
/// when it keeps one, otherwise the distinct letter ids of the mailing's
/// link rows (letter 0 holds shared image rows). That fallback reads only
/// the `mailing_letter` index, but every entry of the mailing in it (its
/// cost grows with the letters); `examples/bench_stats.rs` measures both.
pub async fn letters_built(pool: &MySqlPool, mailing_id: &MailingId) -> Result<u64, StoreError> {
    match letters_counted(pool, mailing_id).await? {
        Some(n) => Ok(n),
        None => count_letters(pool, mailing_id).await,
    }
}

/// The builder's own count of a mailing's letters, if it keeps one.
pub async fn letters_counted(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Option<u64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT letters FROM stats_letters WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?,
    )
}

/// Count the mailing's letters from the `mailing_letter` index.
pub async fn count_letters(pool: &MySqlPool, mailing_id: &MailingId) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id.as_str())
    .fetch_one(pool)
    .await?;
    Ok(n as u64)
}

/// Set a mailing's letters count from its stored rows ([`count_letters`]).
/// For a resumed build: on a Spider cluster the earlier run's failed commit
/// may have kept the count on the head and lost letters' rows on a node,
/// or kept rows and lost the count (nodes commit one by one, no XA).
pub async fn recount_letters_built(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<u64, StoreError> {
    let letters = count_letters(pool, mailing_id).await?;
    sqlx::query(
        "INSERT INTO stats_letters (mailing_id, letters) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE letters = ?",
    )
    .bind(mailing_id.as_str())
    .bind(letters)
    .bind(letters)
    .execute(pool)
    .await?;
    Ok(letters)
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

/// New letters of one mailing, and how many of them went out untracked or
/// anonymous (the builder's per-batch count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LettersByMode {
    pub letters: u64,
    pub untracked: u64,
    pub anonymous: u64,
}

/// Add a batch's untracked and anonymous letters to the mailing's counts,
/// on the transaction that stores the batch's rows (as [`add_letters_built`]).
pub async fn add_letters_by_mode(
    conn: &mut MySqlConnection,
    mailing_id: &str,
    counts: &LettersByMode,
) -> Result<(), StoreError> {
    if counts.untracked + counts.anonymous == 0 {
        return Ok(());
    }
    sqlx::query(
        "UPDATE stats_letters SET untracked = untracked + ?, anonymous = anonymous + ? \
         WHERE mailing_id = ?",
    )
    .bind(counts.untracked)
    .bind(counts.anonymous)
    .bind(mailing_id)
    .execute(conn)
    .await?;
    Ok(())
}

/// The mailing's tracking mode as its mailing file gave it (the last build's).
pub async fn save_track_mode(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    mode: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE mailings SET track_mode = ? WHERE mailing_id = ?")
        .bind(mode)
        .bind(mailing_id.as_str())
        .execute(pool)
        .await?;
    Ok(())
}

/// How the mailing was tracked: its mode (`None` for mailings built before
/// modes existed) and its letters built untracked and anonymous.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TrackingSummary {
    pub mode: Option<String>,
    pub untracked: u64,
    pub anonymous: u64,
}

pub async fn tracking_summary(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<TrackingSummary, StoreError> {
    let mode: Option<Option<String>> =
        sqlx::query_scalar("SELECT track_mode FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?;
    let counts: Option<(u64, u64)> =
        sqlx::query_as("SELECT untracked, anonymous FROM stats_letters WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?;
    let (untracked, anonymous) = counts.unwrap_or_default();
    Ok(TrackingSummary {
        mode: mode.flatten(),
        untracked,
        anonymous,
    })
}
