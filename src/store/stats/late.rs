//! Late events of a mailing (`stats_late`): hits on tokens whose
//! link row was dropped with its partition, counted apart from every
//! regular figure.

use super::counts::LateCounts;
use super::per_link::LinkStats;
use crate::kind::EventKind;
use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use sqlx::MySqlPool;

/// A mailing's late events by kind (positions are in [`LinkStats::late`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct LateSummary {
    pub clicks: LateCounts,
    pub images: LateCounts,
}

pub(super) async fn has_late(pool: &MySqlPool, mailing_id: &MailingId) -> Result<bool, StoreError> {
    let any: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM stats_late WHERE mailing_id = ? LIMIT 1")
            .bind(mailing_id.as_str())
            .fetch_optional(pool)
            .await?;
    Ok(any.is_some())
}

/// The mailing's late events: totals by kind, and late clicks added to
/// `links` by position (a position no regular click reached gets a line).
pub(super) async fn read_late(
    pool: &MySqlPool,
    links: &mut Vec<LinkStats>,
    mailing_id: &MailingId,
) -> Result<LateSummary, StoreError> {
    let rows: Vec<(u32, EventKind, i8, u64)> = sqlx::query_as(
        "SELECT position, kind, bot, n FROM stats_late WHERE mailing_id = ? ORDER BY position",
    )
    .bind(mailing_id.as_str())
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
