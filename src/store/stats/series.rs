//! A mailing's time series: opens and clicks per hour (`stats_hourly`) and,
//! for the first days after a send, per minute (`stats_minutes`).

use crate::kind::EventKind;
use crate::mailing_id::MailingId;
use crate::store::error::StoreError;
use chrono::NaiveDateTime;
use sqlx::MySqlPool;
use std::collections::BTreeMap;

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

/// Which time series to read.
#[derive(Clone, Copy)]
pub(super) enum Series {
    Hours,
    Minutes,
}

pub(super) async fn read_series(
    pool: &MySqlPool,
    mailing_id: &MailingId,
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
    let rows: Vec<(NaiveDateTime, EventKind, i8, u64)> = sqlx::query_as(sql)
        .bind(mailing_id.as_str())
        .fetch_all(pool)
        .await?;
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
