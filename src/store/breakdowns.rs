//! Breakdowns of opens and clicks by mail client, client type, OS, device,
//! mailbox provider and country: the API's reads (one
//! primary-key range per mailing, or the sum over mailings). The rollup
//! adds each batch to `stats_breakdowns` with the other statistics
//! (`store::tally`).

use super::error::StoreError;
use crate::kind::EventKind;
use sqlx::MySqlPool;
use std::collections::BTreeMap;

/// The dimensions, as `stats_breakdowns.dimension` spells them.
pub const DIMENSIONS: [&str; 6] = [
    "client",
    "client_type",
    "os",
    "device",
    "provider",
    "country",
];

/// One value of a dimension: the humans' events and the bots' beside.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Share {
    pub value: String,
    pub n: u64,
    pub bots: u64,
}

/// Per dimension (`client`, `client_type`, `os`, `device`, `provider`,
/// `country`),
/// its values, most events (humans') first.
pub type ByDimension = BTreeMap<String, Vec<Share>>;

/// The breakdowns of opens and of clicks.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Breakdowns {
    pub opens: ByDimension,
    pub clicks: ByDimension,
}

/// One mailing's breakdowns (`Some`), or every mailing's together (`None`).
pub async fn read(pool: &MySqlPool, mailing_id: Option<&str>) -> Result<Breakdowns, StoreError> {
    type Row = (String, String, EventKind, i8, u64);
    let rows: Vec<Row> = match mailing_id {
        Some(id) => {
            sqlx::query_as(
                "SELECT CAST(dimension AS CHAR), value, kind, bot, n FROM stats_breakdowns \
                 WHERE mailing_id = ?",
            )
            .bind(id)
            .fetch_all(pool)
            .await?
        }
        None => {
            sqlx::query_as(
                "SELECT CAST(dimension AS CHAR), value, kind, bot, \
                   CAST(SUM(n) AS UNSIGNED) FROM stats_breakdowns \
                 GROUP BY dimension, value, kind, bot",
            )
            .fetch_all(pool)
            .await?
        }
    };
    let mut opens: BTreeMap<String, BTreeMap<String, Share>> = BTreeMap::new();
    let mut clicks: BTreeMap<String, BTreeMap<String, Share>> = BTreeMap::new();
    for (dimension, value, kind, bot, n) in rows {
        let side = match kind {
            EventKind::Open => &mut opens,
            EventKind::Click => &mut clicks,
            _ => continue,
        };
        let share = side
            .entry(dimension)
            .or_default()
            .entry(value.clone())
            .or_insert_with(|| Share {
                value,
                ..Share::default()
            });
        if bot != 0 {
            share.bots += n;
        } else {
            share.n += n;
        }
    }
    Ok(Breakdowns {
        opens: ranked(opens),
        clicks: ranked(clicks),
    })
}

/// Values by humans' events, then bots', then name.
fn ranked(side: BTreeMap<String, BTreeMap<String, Share>>) -> ByDimension {
    let mut out: ByDimension = DIMENSIONS
        .iter()
        .map(|d| ((*d).to_owned(), Vec::new()))
        .collect();
    for (dimension, values) in side {
        let mut list: Vec<Share> = values.into_values().collect();
        list.sort_by(|a, b| {
            b.n.cmp(&a.n)
                .then(b.bots.cmp(&a.bots))
                .then(a.value.cmp(&b.value))
        });
        out.insert(dimension, list);
    }
    out
}
