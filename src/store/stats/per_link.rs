//! Per-link figures of a mailing: clicks by link position (`stats_links`)
//! with each position's URL, kept in `stats_link_urls` from the mailing's
//! first stored letter.

use super::counts::{Counts, LateCounts};
use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use crate::store::link_rules;
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
    /// Late clicks on this position, apart from the counts above.
    pub late: LateCounts,
    /// The link's `data-linktrack-name`, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Where the position led, version by version, once it was repointed
    /// (empty until then): the clicks each target got.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<TargetClicks>,
}

/// One target a repointed position led every letter to, and its clicks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct TargetClicks {
    /// 0: the URL it was built with; 1, 2, …: each repoint.
    pub version: u32,
    pub url: String,
    /// When it became the target (`None`: from the start).
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// People's clicks on the position while this was the target (from
    /// the recorded events; bots apart, as in `human`).
    pub clicks: u64,
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
    add_names_and_targets(pool, mailing_id, &mut by_position).await?;
    Ok(by_position.into_values().collect())
}

/// The most repoints of a position whose clicks the stats count apart;
/// clicks before the oldest of them count for the target it replaced.
const MOST_TARGETS: usize = 20;

/// Each position's name, and for a repointed one its targets with the
/// clicks each got (counted from `events` between the repoints' times).
async fn add_names_and_targets(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    by_position: &mut BTreeMap<u32, LinkStats>,
) -> Result<(), StoreError> {
    for link in link_rules::positions(pool, mailing_id).await? {
        if let Some(stats) = by_position.get_mut(&link.position) {
            stats.name = link.name;
        }
    }
    let mut history: BTreeMap<u32, Vec<link_rules::Repoint>> = BTreeMap::new();
    for repoint in link_rules::history(pool, mailing_id).await? {
        if repoint.letter_id.is_none() {
            history.entry(repoint.position).or_default().push(repoint);
        }
    }
    for (position, repoints) in history {
        let Some(stats) = by_position.get_mut(&position) else {
            continue;
        };
        // The newest ones only: each target is one count over `events`.
        let repoints = &repoints[repoints.len().saturating_sub(MOST_TARGETS)..];
        let Some(oldest) = repoints.first() else {
            continue;
        };
        let first = oldest.from.clone();
        let mut targets = vec![TargetClicks {
            version: oldest.version.saturating_sub(1),
            url: first,
            since: None,
            clicks: 0,
        }];
        targets.extend(repoints.iter().map(|r| TargetClicks {
            version: r.version,
            url: r.to.clone(),
            since: Some(r.at),
            clicks: 0,
        }));
        for n in 0..targets.len() {
            let until = targets.get(n + 1).and_then(|next| next.since);
            let since = targets[n].since;
            targets[n].clicks =
                link_rules::clicks_between(pool, mailing_id, position, since, until).await?;
        }
        stats.targets = targets;
    }
    Ok(())
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
