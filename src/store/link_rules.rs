//! What a sender says about a mailing's links after (and while) building
//! it: each click position's name and UTM choice as the creative gives them
//! (`mailing_links`), the mailing's UTM tags (`mailing_utm`), and every
//! repoint of a sent link (`link_repoints`, history and current target in
//! one: the newest row of a position or letter wins). The servers read the
//! last two incrementally (`id` greater than the last seen).

use super::error::StoreError;
use crate::letter::utm::UtmTags;
use crate::mailing_id::MailingId;
use chrono::{DateTime, Utc};
use sqlx::{MySql, MySqlPool, QueryBuilder};

/// One click position of a mailing's creative.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MailingLink {
    pub position: u32,
    pub name: Option<String>,
    /// The mailing's UTM tags are added to this link at the redirect.
    pub utm: bool,
    /// The URL as the creative writes it (a personalised one with its
    /// `{{ field }}`s).
    pub source_url: String,
}

/// One repoint, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Repoint {
    pub id: u64,
    #[serde(skip)]
    pub mailing_id: String,
    pub position: u32,
    /// `None`: every letter of the mailing; else the one letter.
    pub letter_id: Option<u64>,
    pub version: u32,
    pub from: String,
    pub to: String,
    pub who: String,
    pub at: DateTime<Utc>,
}

/// A repoint to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRepoint {
    pub position: u32,
    /// 0: every letter.
    pub letter_id: u64,
    pub from: String,
    pub to: String,
}

/// Rows per multi-row insert of [`save_positions`]: 5 placeholders each.
const ROWS_PER_INSERT: usize = 1_000;

/// Store the creative's click positions (replacing what an earlier run of
/// the same mailing stored), in one transaction.
pub async fn save_positions(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    links: &[MailingLink],
) -> Result<(), StoreError> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM mailing_links WHERE mailing_id = ?")
        .bind(mailing_id.as_str())
        .execute(&mut *tx)
        .await?;
    for chunk in links.chunks(ROWS_PER_INSERT) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT INTO mailing_links (mailing_id, position, name, utm, source_url) ",
        );
        query.push_values(chunk, |mut row, link| {
            row.push_bind(mailing_id.as_str())
                .push_bind(link.position)
                .push_bind(&link.name)
                .push_bind(link.utm)
                .push_bind(&link.source_url);
        });
        query.build().execute(&mut *tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// The creative's click positions of a mailing, by position.
pub async fn positions(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Vec<MailingLink>, StoreError> {
    let rows: Vec<(u32, Option<String>, bool, String)> = sqlx::query_as(
        "SELECT position, name, utm, source_url FROM mailing_links \
         WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(position, name, utm, source_url)| MailingLink {
            position,
            name,
            utm,
            source_url,
        })
        .collect())
}

/// Store the mailing's UTM tags. `None` clears tags an earlier run stored
/// (written as a row without tags, so the servers see the change).
pub async fn save_utm(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    tags: Option<&UtmTags>,
) -> Result<(), StoreError> {
    if tags.is_none() {
        let stored: Option<u64> =
            sqlx::query_scalar("SELECT id FROM mailing_utm WHERE mailing_id = ?")
                .bind(mailing_id.as_str())
                .fetch_optional(pool)
                .await?;
        if stored.is_none() {
            return Ok(());
        }
    }
    let empty = UtmTags::default();
    let tags = tags.unwrap_or(&empty);
    sqlx::query(
        "REPLACE INTO mailing_utm (mailing_id, source, medium, campaign, term, content) \
         VALUES (?, ?, ?, ?, ?, ?)",
    )
    .bind(mailing_id.as_str())
    .bind(&tags.source)
    .bind(&tags.medium)
    .bind(&tags.campaign)
    .bind(&tags.term)
    .bind(&tags.content)
    .execute(pool)
    .await?;
    Ok(())
}

/// A mailing's UTM tags as a server reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredUtm {
    pub id: u64,
    pub mailing_id: String,
    pub tags: UtmTags,
}

type UtmRow = (
    u64,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// UTM rows written after `after` (an id), oldest first, at most `limit`.
pub async fn utm_since(
    pool: &MySqlPool,
    after: u64,
    limit: u32,
) -> Result<Vec<StoredUtm>, StoreError> {
    let rows: Vec<UtmRow> = sqlx::query_as(
        "SELECT id, mailing_id, source, medium, campaign, term, content FROM mailing_utm \
         WHERE id > ? ORDER BY id LIMIT ?",
    )
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, mailing_id, source, medium, campaign, term, content)| StoredUtm {
                id,
                mailing_id,
                tags: UtmTags {
                    source,
                    medium,
                    campaign,
                    term,
                    content,
                },
            },
        )
        .collect())
}

/// A mailing's UTM tags, if it has any stored.
pub async fn utm_of(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Option<UtmTags>, StoreError> {
    let row: Option<UtmRow> = sqlx::query_as(
        "SELECT id, mailing_id, source, medium, campaign, term, content FROM mailing_utm \
         WHERE mailing_id = ?",
    )
    .bind(mailing_id.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(
        row.map(|(_, _, source, medium, campaign, term, content)| UtmTags {
            source,
            medium,
            campaign,
            term,
            content,
        }),
    )
}

/// Whether the mailing was built (its creative stored), its id compared
/// byte for byte.
pub async fn mailing_exists(pool: &MySqlPool, mailing_id: &MailingId) -> Result<bool, StoreError> {
    let ids: Vec<String> =
        sqlx::query_scalar("SELECT mailing_id FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_all(pool)
            .await?;
    Ok(ids
        .iter()
        .any(|id| id.as_bytes() == mailing_id.as_str().as_bytes()))
}

/// The URL a shared click link of an older mailing (built before
/// `mailing_links`) was stored with: its link template's.
pub async fn template_url(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    position: u32,
) -> Result<Option<String>, StoreError> {
    let url = sqlx::query_scalar(
        "SELECT url FROM link_templates WHERE mailing_id = ? AND kind = 'click' AND position = ? \
         ORDER BY id LIMIT 1",
    )
    .bind(mailing_id.as_str())
    .bind(position)
    .fetch_optional(pool)
    .await?;
    Ok(url)
}

/// The letter of `email` in a mailing (its address as stored).
pub async fn letter_of(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    email: &str,
) -> Result<Option<u64>, StoreError> {
    let letter: Option<u64> = sqlx::query_scalar(
        "SELECT MIN(letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0 AND email = ?",
    )
    .bind(mailing_id.as_str())
    .bind(email)
    .fetch_one(pool)
    .await?;
    Ok(letter)
}

/// The stored URLs of one letter's click links, by position.
pub async fn letter_urls(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letter_id: u64,
) -> Result<std::collections::BTreeMap<u32, String>, StoreError> {
    let rows: Vec<(u32, String)> = sqlx::query_as(
        "SELECT position, url FROM links WHERE mailing_id = ? AND letter_id = ? AND kind = 'click'",
    )
    .bind(mailing_id.as_str())
    .bind(letter_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The letters whose stored click link at some position is `url`:
/// (position, letter) pairs, for a repoint `--from` a personalised URL.
pub async fn letters_with_url(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    url: &str,
) -> Result<Vec<(u32, u64)>, StoreError> {
    let rows: Vec<(u32, u64)> = sqlx::query_as(
        "SELECT DISTINCT position, letter_id FROM links \
         WHERE mailing_id = ? AND letter_id > 0 AND kind = 'click' AND url = ? \
         ORDER BY position, letter_id",
    )
    .bind(mailing_id.as_str())
    .bind(url)
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// Record repoints of a mailing, each with the next version of its
/// position, in one transaction (the versions of a position are read
/// under lock, so two repoints at once get two versions).
pub async fn record(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    who: &str,
    repoints: &[NewRepoint],
) -> Result<Vec<Repoint>, StoreError> {
    let mut tx = pool.begin().await?;
    let at = Utc::now();
    let mut recorded = Vec::with_capacity(repoints.len());
    let mut versions: std::collections::HashMap<u32, u32> = Default::default();
    for repoint in repoints {
        let version = match versions.get(&repoint.position) {
            Some(version) => version + 1,
            None => {
                let newest: u64 = sqlx::query_scalar(
                    "SELECT CAST(COALESCE(MAX(version), 0) AS UNSIGNED) FROM link_repoints \
                     WHERE mailing_id = ? AND position = ? FOR UPDATE",
                )
                .bind(mailing_id.as_str())
                .bind(repoint.position)
                .fetch_one(&mut *tx)
                .await?;
                u32::try_from(newest).unwrap_or(u32::MAX - 1) + 1
            }
        };
        versions.insert(repoint.position, version);
        let done = sqlx::query(
            "INSERT INTO link_repoints \
             (mailing_id, position, letter_id, version, from_url, to_url, who, at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(mailing_id.as_str())
        .bind(repoint.position)
        .bind(repoint.letter_id)
        .bind(version)
        .bind(&repoint.from)
        .bind(&repoint.to)
        .bind(who)
        .bind(at.naive_utc())
        .execute(&mut *tx)
        .await?;
        recorded.push(Repoint {
            id: done.last_insert_id(),
            mailing_id: mailing_id.as_str().to_owned(),
            position: repoint.position,
            letter_id: (repoint.letter_id != 0).then_some(repoint.letter_id),
            version,
            from: repoint.from.clone(),
            to: repoint.to.clone(),
            who: who.to_owned(),
            at,
        });
    }
    tx.commit().await?;
    Ok(recorded)
}

type RepointRow = (
    u64,
    String,
    u32,
    u64,
    u32,
    String,
    String,
    String,
    chrono::NaiveDateTime,
);

const REPOINT_COLUMNS: &str =
    "SELECT id, mailing_id, position, letter_id, version, from_url, to_url, who, at FROM link_repoints ";

fn repoint(
    (id, mailing_id, position, letter_id, version, from, to, who, at): RepointRow,
) -> Repoint {
    Repoint {
        id,
        mailing_id,
        position,
        letter_id: (letter_id != 0).then_some(letter_id),
        version,
        from,
        to,
        who,
        at: at.and_utc(),
    }
}

/// Repoints recorded after `after` (an id), oldest first, at most `limit`.
pub async fn repoints_since(
    pool: &MySqlPool,
    after: u64,
    limit: u32,
) -> Result<Vec<Repoint>, StoreError> {
    let sql = format!("{REPOINT_COLUMNS} WHERE id > ? ORDER BY id LIMIT ?");
    let rows: Vec<RepointRow> = sqlx::query_as(&sql)
        .bind(after)
        .bind(limit)
        .fetch_all(pool)
        .await?;
    Ok(rows.into_iter().map(repoint).collect())
}

/// Where a mailing's repointed links lead now: the newest repoint of each
/// position (every letter) and of each letter's link, as (position, letter
/// or 0) -> (the repoint's id, target). Reads one row per link repointed,
/// however often.
pub async fn current_targets(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<std::collections::HashMap<(u32, u64), (u64, String)>, StoreError> {
    let rows: Vec<(u32, u64, u64, String)> = sqlx::query_as(
        "SELECT r.position, r.letter_id, r.id, r.to_url FROM link_repoints r \
         JOIN (SELECT MAX(id) AS id FROM link_repoints WHERE mailing_id = ? \
               GROUP BY position, letter_id) newest ON newest.id = r.id",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(position, letter, id, to)| ((position, letter), (id, to)))
        .collect())
}

/// Every repoint of a mailing, oldest first.
pub async fn history(pool: &MySqlPool, mailing_id: &MailingId) -> Result<Vec<Repoint>, StoreError> {
    let sql = format!("{REPOINT_COLUMNS} WHERE mailing_id = ? ORDER BY id");
    let rows: Vec<RepointRow> = sqlx::query_as(&sql)
        .bind(mailing_id.as_str())
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(repoint)
        .filter(|r| r.mailing_id.as_bytes() == mailing_id.as_str().as_bytes())
        .collect())
}

/// Human clicks of a mailing's position between two moments (`until`
/// `None`: up to now), from `events` (its `mailing_kind` index): how many
/// clicks each version of a repointed link got.
pub async fn clicks_between(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    position: u32,
    since: Option<DateTime<Utc>>,
    until: Option<DateTime<Utc>>,
) -> Result<u64, StoreError> {
    let epoch = DateTime::<Utc>::UNIX_EPOCH.naive_utc();
    // DATETIME's last moment: MySQL takes no later one.
    let far = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|day| day.and_hms_opt(23, 59, 59))
        .unwrap_or(epoch);
    let count: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM events WHERE mailing_id = ? AND kind = 'click' \
         AND occurred_at >= ? AND occurred_at < ? AND position = ? AND bot = 0",
    )
    .bind(mailing_id.as_str())
    .bind(since.map_or(epoch, |at| at.naive_utc()))
    .bind(until.map_or(far, |at| at.naive_utc()))
    .bind(position)
    .fetch_one(pool)
    .await?;
    Ok(u64::try_from(count).unwrap_or(0))
}
