//! The summary of one mailing, as the stats API and the dashboard show it:
//! totals and bot reasons read here, the rest from the files that read
//! each part (links, late events, series, letters, bounces).

use super::counts::{Counts, Split};
use super::late::{has_late, read_late, LateSummary};
use super::letters::{letters_built, tracking_summary, TrackingSummary};
use super::mailings::named_exactly;
use super::per_link::{read_links, LinkStats};
use super::series::{read_series, HourStats, Series};
use crate::bots::letter_judgement::OpenClass;
use crate::kind::EventKind;
use crate::mailing_id::MailingId;
use crate::store::bounces::{self, BounceSummary};
use crate::store::error::StoreError;
use sqlx::MySqlPool;
use std::collections::BTreeMap;

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
    /// with their rates (`bounces ingest`).
    pub bounces: BounceSummary,
}

/// Opens and clicks by class, derived from the rolled totals and
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
    mailing_id: &MailingId,
) -> Result<Option<MailingSummary>, StoreError> {
    if !named_exactly(pool, mailing_id).await? {
        return Ok(None);
    }
    let mut s = MailingSummary {
        mailing_id: mailing_id.to_string(),
        ..MailingSummary::default()
    };
    s.subject = sqlx::query_scalar("SELECT subject FROM mailings WHERE mailing_id = ?")
        .bind(mailing_id.as_str())
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
    s.bounces = bounces::mailing_summary(pool, mailing_id, s.letters_built).await?;
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

async fn read_bot_reasons(
    pool: &MySqlPool,
    mailing_id: &MailingId,
) -> Result<BTreeMap<String, BTreeMap<String, u64>>, StoreError> {
    let rows: Vec<(String, String, u64)> = sqlx::query_as(
        "SELECT CAST(kind AS CHAR), reason, n FROM stats_bot_reasons WHERE mailing_id = ?",
    )
    .bind(mailing_id.as_str())
    .fetch_all(pool)
    .await?;
    let mut out: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
    for (kind, reason, n) in rows {
        out.entry(kind).or_default().insert(reason, n);
    }
    Ok(out)
}
