//! The recipients export's reads: a mailing's letters a page at
//! a time, keyset-paged by letter id (never OFFSET: every page is an index
//! range that starts where the last one ended), each with its engagement
//! from `stats_letter_events` (one primary-key range per page), its
//! delivery outcome and its address, where the address may be shown.
//!
//! What never leaves with an address: anonymous letters (their tracked
//! rows are the shared letter-0 rows, so they are no letters here),
//! `last_open_day` letters (nothing but the day is kept), erased addresses
//! (`erase` blanks `links.email`) and whoever [`super::privacy::withheld_among`]
//! names (opted out of tracking, or erased). Such letters are left out of
//! the page and counted in [`EngagementPage::withheld`].

use super::error::StoreError;
use crate::kind::EventKind;
use crate::mailing_id::MailingId;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::MySqlPool;
use std::collections::{BTreeSet, HashMap, HashSet};

/// One letter's engagement. Opens and clicks are the humans' (settled
/// verdicts); the bots' are beside them.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct LetterEngagement {
    pub letter_id: u64,
    pub address: String,
    /// The first human open (UTC).
    pub first_open: Option<DateTime<Utc>>,
    pub opens: u64,
    pub clicks: u64,
    /// Positions of the links a human clicked, ascending.
    pub links_clicked: Vec<u32>,
    /// The URLs of those links as this letter has them (personalised
    /// ones filled in), one per position of `links_clicked`, in its order:
    /// what the person clicked. Where a repointed link sent them is
    /// `targets_clicked`'s.
    pub urls_clicked: Vec<String>,
    /// Where the clicks of `links_clicked` went: each (position, version)
    /// a human click reached, with how many, by position then version.
    /// Version 0 is the URL the letter was built with, 1, 2, … each
    /// repoint of the position (`links list`); a click counts for the
    /// version in force when it was recorded.
    pub targets_clicked: Vec<TargetClicked>,
    pub bot_opens: u64,
    pub bot_clicks: u64,
    /// The letter's unsubscribe link was used (whoever used it: an
    /// unsubscribe is honoured as an instruction).
    pub unsubscribed: bool,
    /// The letter bounced: the MTA refused it when linktrack handed it
    /// over, or a hard bounce about it came back (`bounces ingest`; the
    /// letters the stats API counts as `hard`). Soft bounces and policy
    /// blocks are no bounce of the address here.
    pub bounced: bool,
    /// The MTA accepted the letter when linktrack handed it over; `None`
    /// for letters linktrack did not send (unknown). The letters the stats
    /// API counts as `delivered`.
    pub delivered: Option<bool>,
    /// The recipient reported the letter as spam (a complaint `bounces
    /// ingest` took in; the letters the stats API counts as `complaints`).
    pub complained: bool,
}

/// Human clicks of one letter on one version of a link's target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct TargetClicked {
    pub position: u32,
    pub version: u32,
    pub clicks: u64,
}

/// One page of [`page`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngagementPage {
    pub rows: Vec<LetterEngagement>,
    /// Letters of this page left out: no address that may be shown.
    pub withheld: u64,
    /// Where the next page starts (after this letter id); `None` at the end.
    pub next_after: Option<u64>,
}

/// Letters per page: one `IN` list of the privacy check.
pub const PAGE_LETTERS: u32 = super::in_list::IN_LIST_CHUNK as u32;

/// Whether `mailing_id` names a mailing with anything to export: built
/// letters or a saved creative, under exactly this id (ids compare byte
/// for byte; see [`super::stats::named_exactly`]).
pub async fn mailing_known(pool: &MySqlPool, mailing_id: &MailingId) -> Result<bool, StoreError> {
    if !super::stats::named_exactly(pool, mailing_id).await? {
        return Ok(false);
    }
    let known: i64 = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM mailings WHERE mailing_id = ?) \
           OR EXISTS (SELECT 1 FROM stats_letters WHERE mailing_id = ?) \
           OR EXISTS (SELECT 1 FROM links WHERE mailing_id = ? AND letter_id > 0)",
    )
    .bind(mailing_id.as_str())
    .bind(mailing_id.as_str())
    .bind(mailing_id.as_str())
    .fetch_one(pool)
    .await?;
    Ok(known != 0)
}

/// The letters of `mailing_id` after letter id `after`, at most `limit`
/// (1 to [`PAGE_LETTERS`]), with their engagement.
pub async fn page(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    after: u64,
    limit: u32,
) -> Result<EngagementPage, StoreError> {
    let limit = limit.clamp(1, PAGE_LETTERS);
    let letters = letters_after(pool, mailing_id, after, limit).await?;
    let (Some(first), Some(last)) = (letters.first(), letters.last()) else {
        return Ok(EngagementPage::default());
    };
    let range = (first.letter_id, last.letter_id);
    let next_after = (letters.len() as u32 == limit).then_some(range.1);
    let shown = shown_addresses(pool, &letters).await?;
    let mut engagement = engagement_of(pool, mailing_id, range).await?;
    add_clicked_urls(pool, mailing_id, &mut engagement).await?;
    add_targets(pool, mailing_id, range, &mut engagement).await?;
    let handover = handover_among(pool, mailing_id, range).await?;
    let came_back = came_back_among(pool, mailing_id, range).await?;
    let read = letters.len();
    let mut rows = Vec::with_capacity(read);
    for letter in letters {
        if !shown.contains(&letter.letter_id) {
            continue;
        }
        let mut row = engagement.remove(&letter.letter_id).unwrap_or_default();
        row.letter_id = letter.letter_id;
        row.address = letter.email;
        let handed_over = handover.get(&letter.letter_id).copied();
        row.delivered = handed_over.map(|status| status == HandOver::Delivered);
        row.bounced =
            handed_over == Some(HandOver::Rejected) || came_back.hard.contains(&letter.letter_id);
        row.complained = came_back.complained.contains(&letter.letter_id);
        rows.push(row);
    }
    Ok(EngagementPage {
        withheld: (read - rows.len()) as u64,
        rows,
        next_after,
    })
}

/// A letter as `links` has it.
struct PagedLetter {
    letter_id: u64,
    email: String,
    /// A `last_open_day` letter: no engagement is kept, nor shown.
    day_only: bool,
}

/// The next `limit` letters by id: those with a click or pixel row of
/// their own (the `mailing_letter` index, read in order from `after`).
/// The index is forced: on the partitioned table MariaDB 10.11 otherwise
/// picks `ref` on the mailing alone and reads every page from the
/// mailing's first letter (EXPLAIN: `ref`, key_len 258; forced: `range`,
/// 266), which makes the export quadratic.
async fn letters_after(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    after: u64,
    limit: u32,
) -> Result<Vec<PagedLetter>, StoreError> {
    let rows: Vec<(u64, String, i64)> = sqlx::query_as(
        "SELECT letter_id, MAX(email), CAST(MAX(kind = 'pixel' AND url = ?) AS SIGNED) \
         FROM links FORCE INDEX (mailing_letter) \
         WHERE mailing_id = ? AND letter_id > ? AND kind IN ('click', 'pixel') \
         GROUP BY letter_id ORDER BY letter_id LIMIT ?",
    )
    .bind(super::links::LAST_OPEN_DAY_PIXEL)
    .bind(mailing_id.as_str())
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(letter_id, email, day_only)| PagedLetter {
            letter_id,
            email,
            day_only: day_only != 0,
        })
        .collect())
}

/// The letters of the page whose address may be shown.
async fn shown_addresses(
    pool: &MySqlPool,
    letters: &[PagedLetter],
) -> Result<HashSet<u64>, StoreError> {
    let candidates: Vec<(&PagedLetter, String)> = letters
        .iter()
        .filter(|l| !l.day_only && !l.email.is_empty())
        .map(|l| (l, crate::address::normalize(&l.email)))
        .collect();
    let listed: Vec<&str> = candidates.iter().map(|(_, e)| e.as_str()).collect();
    let withheld = super::privacy::withheld_among(pool, &listed).await?;
    Ok(candidates
        .iter()
        .filter(|(_, normalised)| !withheld.contains(normalised))
        .map(|(letter, _)| letter.letter_id)
        .collect())
}

/// Engagement of the letters in `range` (inclusive), by letter id.
async fn engagement_of(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    (first, last): (u64, u64),
) -> Result<HashMap<u64, LetterEngagement>, StoreError> {
    let rows: Vec<(u64, EventKind, u32, i8, u64, NaiveDateTime)> = sqlx::query_as(
        "SELECT letter_id, kind, position, bot, n, first_at FROM stats_letter_events \
         WHERE mailing_id = ? AND letter_id BETWEEN ? AND ?",
    )
    .bind(mailing_id.as_str())
    .bind(first)
    .bind(last)
    .fetch_all(pool)
    .await?;
    let mut by_letter: HashMap<u64, LetterEngagement> = HashMap::new();
    let mut clicked: HashMap<u64, BTreeSet<u32>> = HashMap::new();
    for (letter_id, kind, position, bot, n, first_at) in rows {
        let row = by_letter.entry(letter_id).or_default();
        let bot = bot != 0;
        match (kind, bot) {
            (EventKind::Open, false) => {
                row.opens += n;
                let at = first_at.and_utc();
                row.first_open = Some(row.first_open.map_or(at, |seen| seen.min(at)));
            }
            (EventKind::Open, true) => row.bot_opens += n,
            (EventKind::Click, false) => {
                row.clicks += n;
                if position > 0 {
                    clicked.entry(letter_id).or_default().insert(position);
                }
            }
            (EventKind::Click, true) => row.bot_clicks += n,
            (EventKind::Unsubscribe, _) => row.unsubscribed = true,
            (EventKind::Image, _) => {}
        }
    }
    for (letter_id, positions) in clicked {
        if let Some(row) = by_letter.get_mut(&letter_id) {
            row.links_clicked = positions.into_iter().collect();
        }
    }
    Ok(by_letter)
}

/// Fill in `urls_clicked` of the letters that have clicks: their click
/// links' stored URLs (the `mailing_letter` index of `links`, one `IN`
/// list of the page's clicking letters).
async fn add_clicked_urls(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    engagement: &mut HashMap<u64, LetterEngagement>,
) -> Result<(), StoreError> {
    let clicking: Vec<u64> = engagement
        .iter()
        .filter(|(_, row)| !row.links_clicked.is_empty())
        .map(|(&letter_id, _)| letter_id)
        .collect();
    for chunk in clicking.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = sqlx::QueryBuilder::<sqlx::MySql>::new(
            "SELECT letter_id, position, url FROM links FORCE INDEX (mailing_letter) \
             WHERE mailing_id = ",
        );
        query.push_bind(mailing_id.as_str());
        query.push(" AND kind = 'click' AND letter_id IN ");
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        let rows: Vec<(u64, u32, String)> = query.build_query_as().fetch_all(pool).await?;
        let mut urls: HashMap<(u64, u32), String> = HashMap::with_capacity(rows.len());
        for (letter_id, position, url) in rows {
            urls.entry((letter_id, position)).or_insert(url);
        }
        for letter_id in chunk {
            if let Some(row) = engagement.get_mut(letter_id) {
                row.urls_clicked = row
                    .links_clicked
                    .iter()
                    .map(|&position| urls.remove(&(*letter_id, position)).unwrap_or_default())
                    .collect();
            }
        }
    }
    Ok(())
}

/// Fill in `targets_clicked`. A mailing never repointed sent every click
/// to version 0: nothing more is read. Otherwise the page's human clicks
/// are read from `events` (the `mailing_letter` index: mailing, letter,
/// kind, time) and each is given the version in force at its time: the
/// newest repoint, of the position or of that letter's link, recorded
/// at or before it.
async fn add_targets(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    (first, last): (u64, u64),
    engagement: &mut HashMap<u64, LetterEngagement>,
) -> Result<(), StoreError> {
    let history = super::link_rules::history(pool, mailing_id).await?;
    if history.is_empty() {
        for row in engagement.values_mut() {
            row.targets_clicked = row
                .links_clicked
                .iter()
                .map(|&position| TargetClicked {
                    position,
                    version: 0,
                    clicks: 0,
                })
                .collect();
        }
        let counts: Vec<(u64, u32, u64)> = sqlx::query_as(
            "SELECT letter_id, position, n FROM stats_letter_events \
             WHERE mailing_id = ? AND letter_id BETWEEN ? AND ? AND kind = 'click' AND bot = 0",
        )
        .bind(mailing_id.as_str())
        .bind(first)
        .bind(last)
        .fetch_all(pool)
        .await?;
        for (letter_id, position, n) in counts {
            if let Some(target) = engagement.get_mut(&letter_id).and_then(|row| {
                row.targets_clicked
                    .iter_mut()
                    .find(|t| t.position == position)
            }) {
                target.clicks += n;
            }
        }
        return Ok(());
    }
    let clicks: Vec<(u64, u32, NaiveDateTime)> = sqlx::query_as(
        "SELECT letter_id, position, occurred_at FROM events \
         WHERE mailing_id = ? AND letter_id BETWEEN ? AND ? AND kind = 'click' AND bot = 0 \
           AND COALESCE(link_id, 1) <> 0 AND position IS NOT NULL",
    )
    .bind(mailing_id.as_str())
    .bind(first)
    .bind(last)
    .fetch_all(pool)
    .await?;
    let mut by_position: HashMap<u32, Vec<&super::link_rules::Repoint>> = HashMap::new();
    for repoint in &history {
        by_position
            .entry(repoint.position)
            .or_default()
            .push(repoint);
    }
    let mut counted: HashMap<u64, std::collections::BTreeMap<(u32, u32), u64>> = HashMap::new();
    for (letter_id, position, at) in clicks {
        let Some(row) = engagement.get(&letter_id) else {
            continue;
        };
        if !row.links_clicked.contains(&position) {
            continue;
        }
        let at = at.and_utc();
        let version = by_position
            .get(&position)
            .and_then(|repoints| {
                repoints
                    .iter()
                    .rev()
                    .find(|r| r.letter_id.is_none_or(|letter| letter == letter_id) && r.at <= at)
            })
            .map_or(0, |r| r.version);
        *counted
            .entry(letter_id)
            .or_default()
            .entry((position, version))
            .or_default() += 1;
    }
    for (letter_id, targets) in counted {
        if let Some(row) = engagement.get_mut(&letter_id) {
            row.targets_clicked = targets
                .into_iter()
                .map(|((position, version), clicks)| TargetClicked {
                    position,
                    version,
                    clicks,
                })
                .collect();
        }
    }
    Ok(())
}

/// What the MTA answered when linktrack handed a letter over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HandOver {
    Delivered,
    Rejected,
}

/// The answers of the SMTP hand-over to the letters in `range` that have
/// one (`deliveries`; a letter still `sending` has none yet).
async fn handover_among(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    (first, last): (u64, u64),
) -> Result<HashMap<u64, HandOver>, StoreError> {
    let rows: Vec<(u64, String)> = sqlx::query_as(
        "SELECT letter_id, CAST(status AS CHAR) FROM deliveries WHERE mailing_id = ? \
           AND letter_id BETWEEN ? AND ? AND status IN ('delivered', 'rejected')",
    )
    .bind(mailing_id.as_str())
    .bind(first)
    .bind(last)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(letter_id, status)| {
            let answer = match status.as_str() {
                "delivered" => HandOver::Delivered,
                _ => HandOver::Rejected,
            };
            (letter_id, answer)
        })
        .collect())
}

/// The letters of a range that hard-bounced or were complained about.
#[derive(Debug, Default)]
struct CameBack {
    hard: HashSet<u64>,
    complained: HashSet<u64>,
}

/// The hard bounces and complaints `bounces ingest` recorded about the
/// letters in `range`: the same `bounces` rows the stats API counts
/// ([`super::bounces::mailing_summary`]), read on its index
/// (`bounces_mailing`: mailing, kind, letter).
async fn came_back_among(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    (first, last): (u64, u64),
) -> Result<CameBack, StoreError> {
    let rows: Vec<(u64, String)> = sqlx::query_as(
        "SELECT DISTINCT letter_id, CAST(kind AS CHAR) FROM bounces WHERE mailing_id = ? \
           AND kind IN ('hard', 'complaint') AND letter_id BETWEEN ? AND ?",
    )
    .bind(mailing_id.as_str())
    .bind(first)
    .bind(last)
    .fetch_all(pool)
    .await?;
    let mut came_back = CameBack::default();
    for (letter_id, kind) in rows {
        match kind.as_str() {
            "hard" => came_back.hard.insert(letter_id),
            _ => came_back.complained.insert(letter_id),
        };
    }
    Ok(came_back)
}
