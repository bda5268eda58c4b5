//! The mailings the database knows (`mailings`): which stored id a request
//! means (ids compare byte for byte, the columns do not), the creative and
//! list-management URL the builder saves, and the dashboard's index.

use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use sqlx::MySqlPool;

/// The stored mailing ids the database takes for `mailing_id`. The columns
/// compare under a case- and pad-insensitive collation (`A`, `a` and `a `
/// are equal there, and NUL is ignored), so every caller that needs one
/// mailing compares the bytes of these itself: ids are byte for byte.
pub async fn ids_equal_in_collation(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT mailing_id FROM mailings WHERE mailing_id = ? \
         UNION SELECT DISTINCT mailing_id FROM stats_totals WHERE mailing_id = ?",
    )
    .bind(mailing_id.as_str())
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?)
}

/// False when the database knows mailings that its collation takes for
/// `mailing_id` but none is `mailing_id` byte for byte (`RT-A` when only
/// `rt-a` exists): the request names no mailing. True otherwise.
pub async fn named_exactly(pool: &MySqlPool, mailing_id: &MailingId) -> Result<bool, StoreError> {
    let ids = ids_equal_in_collation(pool, mailing_id).await?;
    Ok(ids.is_empty()
        || ids
            .iter()
            .any(|id| id.as_bytes() == mailing_id.as_str().as_bytes()))
}

/// A stored mailing whose id the database takes for `mailing_id` although
/// the bytes differ (`a` when building `A`): building would merge the two.
pub async fn colliding_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Option<String>, StoreError> {
    let ids = ids_equal_in_collation(pool, mailing_id).await?;
    Ok(ids
        .into_iter()
        .find(|id| id.as_bytes() != mailing_id.as_str().as_bytes()))
}

/// Store (or replace) a mailing's creative for the click map. Called by the
/// builder once per mailing.
pub async fn save_mailing(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    subject: &str,
    html: &str,
) -> Result<(), StoreError> {
    // Each value is sent once (a derived table names the new row portably;
    // MariaDB lacks MySQL 8's `AS new`, MySQL 8 deprecates VALUES()): bound
    // twice, a 9 MB creative made an 18 MB statement, over the default
    // 16 MB max_allowed_packet.
    sqlx::query(
        "INSERT INTO mailings (mailing_id, subject, html) \
         SELECT * FROM (SELECT ? AS m, ? AS s, ? AS h) AS n \
         ON DUPLICATE KEY UPDATE subject = n.s, html = n.h",
    )
    .bind(mailing_id.as_str())
    .bind(subject)
    .bind(html)
    .execute(pool)
    .await?;
    Ok(())
}

/// Save the domain of a mailing's `from` (lowercase; `None` when it has
/// none): the sender whose tracking hosts serve its links.
pub async fn save_sender_domain(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    sender_domain: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE mailings SET sender_domain = ? WHERE mailing_id = ?")
        .bind(sender_domain)
        .bind(mailing_id.as_str())
        .execute(pool)
        .await?;
    Ok(())
}

/// The sender domain saved for a mailing: `None` when there is no such
/// mailing, `Some(None)` when it was built before senders were kept.
pub async fn sender_domain(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<Option<String>>, StoreError> {
    let found: Option<(Option<String>,)> =
        sqlx::query_as("SELECT sender_domain FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    Ok(found.map(|(domain,)| domain))
}

/// The largest creative [`save_mailing`] can store: one statement must fit
/// the server's `max_allowed_packet` (less room for the rest of it), and
/// `mailings.html` is a MEDIUMTEXT.
pub async fn largest_creative(pool: &MySqlPool) -> Result<usize, StoreError> {
    const MEDIUMTEXT: usize = (1 << 24) - 1;
    const STATEMENT_AND_SUBJECT: usize = 16 << 10;
    let packet: u64 = sqlx::query_scalar("SELECT @@max_allowed_packet")
        .fetch_one(pool)
        .await?;
    let packet = usize::try_from(packet).unwrap_or(usize::MAX);
    Ok(packet.saturating_sub(STATEMENT_AND_SUBJECT).min(MEDIUMTEXT))
}

/// Save a mailing's list-management URL (`None` clears it).
pub async fn save_list_manage_url(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    url: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE mailings SET list_manage_url = ? WHERE mailing_id = ?")
        .bind(url)
        .bind(mailing_id.as_str())
        .execute(pool)
        .await?;
    Ok(())
}

/// Where a mailing's readers manage their subscription, if it says.
pub async fn list_management(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<String>, StoreError> {
    let url: Option<(Option<String>,)> =
        sqlx::query_as("SELECT list_manage_url FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    Ok(url.and_then(|(url,)| url))
}

/// A mailing's saved creative, if the builder saved one.
pub async fn mailing_html(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT html FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?,
    )
}

/// The subject an earlier build saved for `mailing_id`, when letters were
/// built under it: a build that resumes the mailing must send the same.
pub async fn built_subject(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<Option<String>, StoreError> {
    let saved: Option<String> =
        sqlx::query_scalar("SELECT subject FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?;
    let Some(saved) = saved else {
        return Ok(None);
    };
    let built: i64 = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM stats_letters WHERE mailing_id = ?) \
           OR EXISTS (SELECT 1 FROM links WHERE mailing_id = ? AND letter_id > 0)",
    )
    .bind(mailing_id.as_str())
    .bind(mailing_id.as_str())
    .fetch_one(pool)
    .await?;
    Ok((built != 0).then_some(saved))
}

/// One line of the dashboard's index.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MailingListing {
    pub mailing_id: String,
    pub subject: Option<String>,
    /// When its first letters were built (RFC 3339, UTC); `None` for a
    /// mailing known only by its events.
    pub built_at: Option<String>,
    pub opens: u64,
    pub clicks: u64,
}

/// Mailings with a saved creative or any rolled event, at most `limit`,
/// the most recently built first (those known only by events last, by id).
pub async fn list_mailings(
    pool: &MySqlPool,
    limit: u32,
) -> Result<Vec<MailingListing>, StoreError> {
    type Row = (
        String,
        Option<String>,
        Option<chrono::NaiveDateTime>,
        i64,
        i64,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT ids.mailing_id, m.subject, m.created_at, \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'open' AND t.bot = 0), 0) AS SIGNED), \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'click' AND t.bot = 0), 0) AS SIGNED) \
         FROM (SELECT mailing_id FROM mailings UNION SELECT DISTINCT mailing_id FROM stats_totals) AS ids \
         LEFT JOIN mailings m ON m.mailing_id = ids.mailing_id \
         ORDER BY m.created_at IS NULL, m.created_at DESC, ids.mailing_id LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(mailing_id, subject, built_at, opens, clicks)| MailingListing {
                mailing_id,
                subject,
                built_at: built_at.map(|at| at.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                opens: opens.max(0) as u64,
                clicks: clicks.max(0) as u64,
            },
        )
        .collect())
}

/// One mailing of the API's list (`GET /api/mailings`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MailingPageRow {
    pub mailing_id: String,
    pub subject: Option<String>,
    /// When its first letters were built (RFC 3339, UTC).
    pub built_at: Option<String>,
    /// The mailing's `utm.campaign`, `{{ mailing_id }}` filled in.
    pub utm_campaign: Option<String>,
    /// Letters the MTAs accepted.
    pub delivered: u64,
    /// People's opens and clicks (bots left out), as rolled up.
    pub opens: u64,
    pub clicks: u64,
}

/// Mailings in id order after `after`, at most `limit`; with `utm_campaign`
/// only those whose campaign tag (its `{{ mailing_id }}` filled in) is it.
pub async fn mailings_page(
    pool: &MySqlPool,
    after: &str,
    limit: u32,
    utm_campaign: Option<&str>,
) -> Result<Vec<MailingPageRow>, StoreError> {
    type Row = (
        String,
        Option<String>,
        Option<chrono::NaiveDateTime>,
        Option<String>,
        i64,
        i64,
        i64,
    );
    // The campaign as the redirect renders it for this mailing; position
    // and name vary per link and are left as written.
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT m.mailing_id, m.subject, m.created_at, c.campaign, \
           CAST(COALESCE((SELECT d.delivered FROM stats_deliveries d \
             WHERE d.mailing_id = m.mailing_id), 0) AS SIGNED), \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = m.mailing_id \
             AND t.kind = 'open' AND t.bot = 0), 0) AS SIGNED), \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = m.mailing_id \
             AND t.kind = 'click' AND t.bot = 0), 0) AS SIGNED) \
         FROM mailings m \
         LEFT JOIN (SELECT u.mailing_id, REPLACE(REPLACE(u.campaign, '{{ mailing_id }}', u.mailing_id), \
             '{{mailing_id}}', u.mailing_id) AS campaign FROM mailing_utm u) AS c \
           ON c.mailing_id = m.mailing_id \
         WHERE m.mailing_id > ? AND (? IS NULL OR c.campaign = ?) \
         ORDER BY m.mailing_id LIMIT ?",
    )
    .bind(after)
    .bind(utm_campaign)
    .bind(utm_campaign)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(mailing_id, subject, built_at, utm_campaign, delivered, opens, clicks)| {
                MailingPageRow {
                    mailing_id,
                    subject,
                    built_at: built_at
                        .map(|at| at.and_utc().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
                    utm_campaign,
                    delivered: delivered.max(0) as u64,
                    opens: opens.max(0) as u64,
                    clicks: clicks.max(0) as u64,
                }
            },
        )
        .collect())
}
