//! The reads behind the stats API and dashboard: per-mailing totals, links,
//! hours and bot reasons from the rollup tables (written by
//! [`super::rollup`]), and the saved creative for the click map.

use super::StoreError;
use crate::bots::letter_judgement::OpenClass;
use crate::kind::EventKind;
use chrono::NaiveDateTime;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};
use std::collections::BTreeMap;

/// Counts for one kind of event, split by the bot flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub total: u64,
    /// Letters with at least one such event.
    pub unique: u64,
}

/// Human and bot counts of one kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Split {
    pub human: Counts,
    pub bot: Counts,
}

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

/// Late events (issue 27): hits on tokens whose link row was dropped with
/// its partition, counted per mailing and position and never in the
/// regular figures, so those do not change months after a send. They name
/// no letter, so there are no unique counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LateCounts {
    pub human: u64,
    pub bot: u64,
}

/// A mailing's late events by kind (positions are in [`LinkStats::late`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LateSummary {
    pub clicks: LateCounts,
    pub images: LateCounts,
}

/// One hour of the time series (human events only; bots are in the totals).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct HourStats {
    /// The start of the hour, UTC.
    pub hour: NaiveDateTime,
    pub opens: u64,
    pub clicks: u64,
    pub bot_opens: u64,
    pub bot_clicks: u64,
}

/// Everything the stats API and the dashboard show about one mailing.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MailingSummary {
    pub mailing_id: String,
    pub subject: Option<String>,
    /// Letters stored by the builder (the mailing's distinct letter ids).
    pub letters_built: u64,
    pub opens: Split,
    pub clicks: Split,
    /// Proxied image loads (letter-independent: images are shared per mailing).
    pub images: Split,
    /// Every unsubscribe, whatever its bot verdict, is in `human`: `total`
    /// requests, `unique` letters, that is the suppressions they caused
    /// (`bot` stays zero; the verdicts are in `bot_reasons`).
    pub unsubscribes: Split,
    /// Late events, kept apart from every figure above.
    pub late: LateSummary,
    /// Bot events by kind and the server's reason.
    pub bot_reasons: BTreeMap<String, BTreeMap<String, u64>>,
    pub links: Vec<LinkStats>,
    pub hours: Vec<HourStats>,
    /// The same per minute, for the last three days only (the chart of the
    /// first hours after a send).
    pub minutes: Vec<HourStats>,
    /// The mode the mailing ran in and its letters built untracked or
    /// anonymous: rates over `letters_built` count letters that could not
    /// be counted.
    pub tracking: TrackingSummary,
    /// Hard and soft bounces, policy blocks and complaints, in letters,
    /// with their rates (`bounces ingest`, issue 40).
    pub bounces: super::bounces::BounceSummary,
}

/// Opens and clicks by class (issue 24), derived from the rolled totals and
/// bot reasons, no column of their own: `opens` are real opens (human and
/// `proxy:*`, which are not bots), `machine_opens` prefetches (`machine:*`,
/// Apple MPP), `scanner_opens` every other bot open. `clicks` exclude bots;
/// `bot_share` is the bots' share of all clicks (0 to 1, 0 with none).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Classes {
    pub opens: Counts,
    pub machine_opens: u64,
    pub scanner_opens: u64,
    pub clicks: Counts,
    pub bot_clicks: u64,
    pub bot_share: f64,
}

impl MailingSummary {
    /// The summary's opens and clicks by class (see [`Classes`]).
    pub fn classes(&self) -> Classes {
        let open_reasons = self.bot_reasons.get(EventKind::Open.as_str());
        let machine_opens: u64 = open_reasons
            .into_iter()
            .flatten()
            .filter(|(reason, _)| OpenClass::of(true, Some(reason.as_str())) == OpenClass::Machine)
            .map(|(_, n)| n)
            .sum();
        let all_clicks = self.clicks.human.total + self.clicks.bot.total;
        Classes {
            opens: self.opens.human,
            machine_opens,
            scanner_opens: self.opens.bot.total.saturating_sub(machine_opens),
            clicks: self.clicks.human,
            bot_clicks: self.clicks.bot.total,
            bot_share: if all_clicks == 0 {
                0.0
            } else {
                self.clicks.bot.total as f64 / all_clicks as f64
            },
        }
    }
}

/// The summary of one mailing, or `None` when nothing is known about it.
pub async fn summary(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<MailingSummary>, StoreError> {
    if !named_exactly(pool, mailing_id).await? {
        return Ok(None);
    }
    let mut s = MailingSummary {
        mailing_id: mailing_id.to_owned(),
        ..MailingSummary::default()
    };
    s.subject = sqlx::query_scalar("SELECT subject FROM mailings WHERE mailing_id = ?")
        .bind(mailing_id)
        .fetch_optional(pool)
        .await?;
    let has_events = read_totals(pool, &mut s).await?;
    s.letters_built = letters_built(pool, mailing_id).await?;
    if s.subject.is_none()
        && !has_events
        && s.letters_built == 0
        && !has_late(pool, mailing_id).await?
    {
        return Ok(None);
    }
    s.links = read_links(pool, mailing_id).await?;
    s.late = read_late(pool, &mut s.links, mailing_id).await?;
    s.hours = read_series(pool, mailing_id, Series::Hours).await?;
    s.minutes = read_series(pool, mailing_id, Series::Minutes).await?;
    s.bot_reasons = read_bot_reasons(pool, mailing_id).await?;
    s.tracking = tracking_summary(pool, mailing_id).await?;
    s.bounces = super::bounces::mailing_summary(pool, mailing_id, s.letters_built).await?;
    Ok(Some(s))
}

/// Fill the per-kind counts; true when the mailing has any.
async fn read_totals(pool: &MySqlPool, s: &mut MailingSummary) -> Result<bool, StoreError> {
    let rows: Vec<(EventKind, i8, u64, u64)> =
        sqlx::query_as("SELECT kind, bot, total, uniq FROM stats_totals WHERE mailing_id = ?")
            .bind(&s.mailing_id)
            .fetch_all(pool)
            .await?;
    for (kind, bot, total, unique) in &rows {
        let split = match kind {
            EventKind::Open => &mut s.opens,
            EventKind::Click => &mut s.clicks,
            EventKind::Image => &mut s.images,
            EventKind::Unsubscribe => &mut s.unsubscribes,
        };
        // Unsubscribes count whatever their bot verdict (the rollup puts
        // them with the humans); a bot row of them is from a rollup before
        // that rule, folded in here.
        let counts = if *bot != 0 && *kind != EventKind::Unsubscribe {
            &mut split.bot
        } else {
            &mut split.human
        };
        counts.total += total;
        counts.unique += unique;
    }
    Ok(!rows.is_empty())
}

/// Letters built: the builder's own count (`stats_letters`, one key read)
/// when it keeps one, otherwise the distinct letter ids of the mailing's
/// link rows (letter 0 holds shared image rows). That fallback reads only
/// the `mailing_letter` index, but every entry of the mailing in it (about
/// 0.5 ms per 100 letters here); `examples/bench_stats.rs` measures both.
pub async fn letters_built(pool: &MySqlPool, mailing_id: &str) -> Result<u64, StoreError> {
    match letters_counted(pool, mailing_id).await? {
        Some(n) => Ok(n),
        None => count_letters(pool, mailing_id).await,
    }
}

/// The builder's own count of a mailing's letters, if it keeps one.
pub async fn letters_counted(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<u64>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT letters FROM stats_letters WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?,
    )
}

/// Count the mailing's letters from the `mailing_letter` index.
pub async fn count_letters(pool: &MySqlPool, mailing_id: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(DISTINCT letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id)
    .fetch_one(pool)
    .await?;
    Ok(n as u64)
}

/// Set a mailing's letters count from its stored rows ([`count_letters`]).
/// For a resumed build: on a Spider cluster the earlier run's failed commit
/// may have kept the count on the head and lost letters' rows on a node,
/// or kept rows and lost the count (nodes commit one by one, no XA).
pub async fn recount_letters_built(pool: &MySqlPool, mailing_id: &str) -> Result<u64, StoreError> {
    let letters = count_letters(pool, mailing_id).await?;
    sqlx::query(
        "INSERT INTO stats_letters (mailing_id, letters) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE letters = ?",
    )
    .bind(mailing_id)
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
    mailing_id: &str,
    mode: &str,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE mailings SET track_mode = ? WHERE mailing_id = ?")
        .bind(mode)
        .bind(mailing_id)
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
    mailing_id: &str,
) -> Result<TrackingSummary, StoreError> {
    let mode: Option<Option<String>> =
        sqlx::query_scalar("SELECT track_mode FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    let counts: Option<(u64, u64)> =
        sqlx::query_as("SELECT untracked, anonymous FROM stats_letters WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    let (untracked, anonymous) = counts.unwrap_or_default();
    Ok(TrackingSummary {
        mode: mode.flatten(),
        untracked,
        anonymous,
    })
}

async fn read_links(pool: &MySqlPool, mailing_id: &str) -> Result<Vec<LinkStats>, StoreError> {
    let rows: Vec<(u32, i8, u64, u64)> = sqlx::query_as(
        "SELECT position, bot, clicks, uniq FROM stats_links WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id)
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

async fn has_late(pool: &MySqlPool, mailing_id: &str) -> Result<bool, StoreError> {
    let any: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM stats_late WHERE mailing_id = ? LIMIT 1")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?;
    Ok(any.is_some())
}

/// The mailing's late events: totals by kind, and late clicks added to
/// `links` by position (a position no regular click reached gets a line).
async fn read_late(
    pool: &MySqlPool,
    links: &mut Vec<LinkStats>,
    mailing_id: &str,
) -> Result<LateSummary, StoreError> {
    let rows: Vec<(u32, EventKind, i8, u64)> = sqlx::query_as(
        "SELECT position, kind, bot, n FROM stats_late WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id)
    .fetch_all(pool)
    .await?;
    let mut late = LateSummary::default();
    for (position, kind, bot, n) in rows {
        let counts = match kind {
            EventKind::Click => &mut late.clicks,
            EventKind::Image => &mut late.images,
            // Late pixels and unsubscribes record nothing.
            EventKind::Open | EventKind::Unsubscribe => continue,
        };
        add_late(counts, bot != 0, n);
        if kind == EventKind::Click && position > 0 {
            let at = match links.binary_search_by_key(&position, |l| l.position) {
                Ok(at) => at,
                Err(at) => {
                    let link = LinkStats {
                        position,
                        ..LinkStats::default()
                    };
                    links.insert(at, link);
                    at
                }
            };
            add_late(&mut links[at].late, bot != 0, n);
        }
    }
    Ok(late)
}

fn add_late(counts: &mut LateCounts, bot: bool, n: u64) {
    if bot {
        counts.bot += n;
    } else {
        counts.human += n;
    }
}

/// Click URLs by position: from `stats_link_urls`, filled from the
/// mailing's first stored letter on the first call that finds one.
pub async fn link_urls(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let kept: Vec<(u32, String)> =
        sqlx::query_as("SELECT position, url FROM stats_link_urls WHERE mailing_id = ?")
            .bind(mailing_id)
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
            row.push_bind(mailing_id)
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
    mailing_id: &str,
) -> Result<BTreeMap<u32, String>, StoreError> {
    let first: Option<u64> = sqlx::query_scalar(
        "SELECT MIN(letter_id) FROM links WHERE mailing_id = ? AND letter_id > 0",
    )
    .bind(mailing_id)
    .fetch_one(pool)
    .await?;
    let Some(letter) = first else {
        return Ok(BTreeMap::new());
    };
    let rows: Vec<(u32, String)> = sqlx::query_as(
        "SELECT position, url FROM links WHERE mailing_id = ? AND letter_id = ? AND kind = 'click'",
    )
    .bind(mailing_id)
    .bind(letter)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Which time series to read.
#[derive(Clone, Copy)]
enum Series {
    Hours,
    Minutes,
}

async fn read_series(
    pool: &MySqlPool,
    mailing_id: &str,
    series: Series,
) -> Result<Vec<HourStats>, StoreError> {
    let sql = match series {
        Series::Hours => {
            "SELECT hour, kind, bot, n FROM stats_hourly \
             WHERE mailing_id = ? AND kind IN ('open', 'click') ORDER BY hour"
        }
        Series::Minutes => {
            "SELECT minute, kind, bot, n FROM stats_minutes \
             WHERE mailing_id = ? AND kind IN ('open', 'click') ORDER BY minute"
        }
    };
    let rows: Vec<(NaiveDateTime, EventKind, i8, u64)> =
        sqlx::query_as(sql).bind(mailing_id).fetch_all(pool).await?;
    let mut hours: BTreeMap<NaiveDateTime, HourStats> = BTreeMap::new();
    for (hour, kind, bot, n) in rows {
        let h = hours.entry(hour).or_insert_with(|| HourStats {
            hour,
            ..HourStats::default()
        });
        match (kind, bot != 0) {
            (EventKind::Open, false) => h.opens += n,
            (EventKind::Open, true) => h.bot_opens += n,
            (EventKind::Click, false) => h.clicks += n,
            (EventKind::Click, true) => h.bot_clicks += n,
            // The query reads opens and clicks only.
            (EventKind::Image | EventKind::Unsubscribe, _) => {}
        }
    }
    Ok(hours.into_values().collect())
}

async fn read_bot_reasons(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, StoreError> {
    let rows: Vec<(String, String, u64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), reason, n FROM stats_bot_reasons WHERE mailing_id = ?",
    )
    .bind(mailing_id)
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (kind, reason, n) in rows {
        out.entry(kind).or_default().insert(reason, n);
    }
    Ok(out)
}

/// The stored mailing ids the database takes for `mailing_id`. The columns
/// compare under a case- and pad-insensitive collation (`A`, `a` and `a `
/// are equal there, and NUL is ignored), so every caller that needs one
/// mailing compares the bytes of these itself: ids are byte for byte.
pub async fn ids_equal_in_collation(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT mailing_id FROM mailings WHERE mailing_id = ? \
         UNION SELECT DISTINCT mailing_id FROM stats_totals WHERE mailing_id = ?",
    )
    .bind(mailing_id)
    .bind(mailing_id)
    .fetch_all(pool)
    .await?)
}

/// False when the database knows mailings that its collation takes for
/// `mailing_id` but none is `mailing_id` byte for byte (`RT-A` when only
/// `rt-a` exists): the request names no mailing. True otherwise.
pub async fn named_exactly(pool: &MySqlPool, mailing_id: &str) -> Result<bool, StoreError> {
    let ids = ids_equal_in_collation(pool, mailing_id).await?;
    Ok(ids.is_empty() || ids.iter().any(|id| id.as_bytes() == mailing_id.as_bytes()))
}

/// A stored mailing whose id the database takes for `mailing_id` although
/// the bytes differ (`a` when building `A`): building would merge the two.
pub async fn colliding_mailing(
    pool: &MySqlPool,
    mailing_id: &str,
) -> Result<Option<String>, StoreError> {
    let ids = ids_equal_in_collation(pool, mailing_id).await?;
    Ok(ids
        .into_iter()
        .find(|id| id.as_bytes() != mailing_id.as_bytes()))
}

/// Store (or replace) a mailing's creative for the click map. Called by the
/// builder once per mailing.
pub async fn save_mailing(
    pool: &MySqlPool,
    mailing_id: &str,
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
    .bind(mailing_id)
    .bind(subject)
    .bind(html)
    .execute(pool)
    .await?;
    Ok(())
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
    mailing_id: &str,
    url: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE mailings SET list_manage_url = ? WHERE mailing_id = ?")
        .bind(url)
        .bind(mailing_id)
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
    mailing_id: &str,
) -> Result<Option<String>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT html FROM mailings WHERE mailing_id = ?")
            .bind(mailing_id)
            .fetch_optional(pool)
            .await?,
    )
}

/// One line of the dashboard's index.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MailingListing {
    pub mailing_id: String,
    pub subject: Option<String>,
    pub opens: u64,
    pub clicks: u64,
}

/// Mailings with a saved creative or any rolled event, at most `limit`,
/// ordered by id.
pub async fn list_mailings(
    pool: &MySqlPool,
    limit: u32,
) -> Result<Vec<MailingListing>, StoreError> {
    let rows: Vec<(String, Option<String>, i64, i64)> = sqlx::query_as(
        "SELECT ids.mailing_id, m.subject, \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'open' AND t.bot = 0), 0) AS SIGNED), \
           CAST(COALESCE((SELECT SUM(total) FROM stats_totals t WHERE t.mailing_id = ids.mailing_id \
             AND t.kind = 'click' AND t.bot = 0), 0) AS SIGNED) \
         FROM (SELECT mailing_id FROM mailings UNION SELECT DISTINCT mailing_id FROM stats_totals) AS ids \
         LEFT JOIN mailings m ON m.mailing_id = ids.mailing_id \
         ORDER BY ids.mailing_id LIMIT ?",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(mailing_id, subject, opens, clicks)| MailingListing {
            mailing_id,
            subject,
            opens: opens.max(0) as u64,
            clicks: clicks.max(0) as u64,
        })
        .collect())
}
