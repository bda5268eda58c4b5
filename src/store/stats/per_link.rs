//! Per-link figures of a mailing: clicks by link position (`stats_links`)
//! with each position's URL, kept in `stats_link_urls` from the mailing's
//! first stored letter.

use super::counts::{Counts, LateCounts};
use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::BTreeMap;

/// One link position of a mailing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LinkStats {
    pub position: u32,
    /// The first letter's URL for this position (personalised URLs differ
    /// per letter); `None` when no letter of the mailing is stored.
    pub url: Option<String>,
    pub human: Counts,
    pub bot: Counts,
    /// Late clicks on this position (issue 27), apart from the counts above.
    pub late: LateCounts,
}

pub(super) async fn read_links(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Vec<LinkStats>, StoreError> {
    let rows: Vec<(u32, i8, u64, u64)> = sqlx::query_as(
        "SELECT position, bot, clicks, uniq FROM stats_links WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id.as_str())
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
    mailing_id: &MailingId,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let kept: Vec<(u32, String)> =
        sqlx::query_as("SELECT position, url FROM stats_link_urls WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
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
            row.push_bind(mailing_id.as_str())
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
    mailing_id: &MailingId,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let first: Option<u64> = sqlx::query_scalar(
        "SELECT MIN(letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id.as_str())
    .fetch_one(pool)
    .await?;
    let Some(letter) = first else {
        return Ok(BTreeMap::new());
    };
    let rows: Vec<(u32, String)> = sqlx::query_as(
        "SELECT position, url FROM links WHERE mailing_id = ? AND letter_id = ? AND kind = 'click'",
    )
    .bind(mailing_id.as_str())
    .bind(letter)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}
