//! Breakdowns of opens and clicks by mail client, client type, OS, device,
//! mailbox provider and country (issue 42): the rollup's part (classify the batch's
//! new user agents, then add the batch to `stats_breakdowns` in one
//! `INSERT … SELECT … GROUP BY`) and the API's reads (one primary-key range
//! per mailing, or the sum over mailings).

use super::rolled_batch::RolledBatch;
use super::StoreError;
use crate::bots::clients::Classifier;
use crate::kind::EventKind;
use sqlx::{MySql, MySqlConnection, MySqlPool, QueryBuilder};
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

/// User agents classified per statement.
const CLASSIFY_CHUNK: usize = 500;

/// Classify the user agents of the batch's opens and clicks that
/// `user_agent_classes` does not know yet. Returns how many were new.
pub(crate) async fn classify_new_agents(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
) -> Result<u64, StoreError> {
    let agents: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT e.user_agent FROM events e \
         WHERE e.inserted >= ? AND e.inserted < ? AND e.id > ? AND e.id <= ? \
           AND e.user_agent IS NOT NULL AND e.mailing_id IS NOT NULL \
           AND e.kind IN ('open', 'click') \
           AND NOT EXISTS (SELECT 1 FROM user_agent_classes c \
                           WHERE c.ua_hash = UNHEX(SHA2(e.user_agent, 256)))",
    )
    .bind(batch.lower)
    .bind(batch.upper)
    .bind(batch.after_id)
    .bind(batch.last_id)
    .fetch_all(&mut *conn)
    .await?;
    if agents.is_empty() {
        return Ok(0);
    }
    let classifier = Classifier::default();
    for chunk in agents.chunks(CLASSIFY_CHUNK) {
        let classes: Vec<_> = chunk
            .iter()
            .map(|agent| (agent, classifier.classify(Some(agent))))
            .collect();
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO user_agent_classes (ua_hash, client, client_type, os, device) ",
        );
        query.push_values(&classes, |mut row, (agent, class)| {
            row.push("UNHEX(SHA2(")
                .push_bind_unseparated(agent.as_str())
                .push_unseparated(", 256))")
                .push_bind(class.client.as_str())
                .push_bind(class.client_type.as_str())
                .push_bind(class.os.as_str())
                .push_bind(class.device.as_str());
        });
        query.build().execute(&mut *conn).await?;
    }
    Ok(agents.len() as u64)
}

/// The SQL expression of an event's mailbox provider (`e.email`'s domain
/// in [`crate::address::MAILBOX_PROVIDERS`]); the domains are our own
/// constants, written into the statement.
fn provider_sql() -> String {
    let mut sql = String::from(
        "CASE WHEN e.email IS NULL OR e.email NOT LIKE '%@%' THEN 'unknown' \
         ELSE CASE LOWER(SUBSTRING_INDEX(e.email, '@', -1))",
    );
    for (provider, domains) in crate::address::MAILBOX_PROVIDERS {
        for domain in *domains {
            sql.push_str(&format!(" WHEN '{domain}' THEN '{provider}'"));
        }
    }
    sql.push_str(" ELSE 'other' END END");
    sql
}

/// Add the batch's opens and clicks to `stats_breakdowns`, every dimension
/// in one pass over the batch. `bot` and `regular` are the rollup's
/// expressions (counted as a bot; a mailing's own events, not late ones).
pub(crate) async fn add_batch(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
    bot: &str,
    regular: &str,
) -> Result<(), StoreError> {
    let sql = format!(
        "INSERT INTO stats_breakdowns (mailing_id, dimension, value, kind, bot, n) \
         SELECT * FROM (SELECT e.mailing_id AS m, d.dim AS dm, \
           CASE d.dim WHEN 'client' THEN COALESCE(c.client, 'unknown') \
             WHEN 'client_type' THEN COALESCE(c.client_type, 'unknown') \
             WHEN 'os' THEN COALESCE(c.os, 'unknown') \
             WHEN 'device' THEN COALESCE(c.device, 'unknown') \
             WHEN 'country' THEN COALESCE(e.country, 'unknown') \
             ELSE {provider} END AS v, \
           e.kind AS k, {bot} AS b, COUNT(*) AS cnt \
           FROM events e \
           LEFT JOIN user_agent_classes c ON c.ua_hash = UNHEX(SHA2(e.user_agent, 256)) \
           CROSS JOIN (SELECT 'client' AS dim UNION ALL SELECT 'client_type' \
             UNION ALL SELECT 'os' UNION ALL SELECT 'device' UNION ALL SELECT 'provider' \
             UNION ALL SELECT 'country') AS d \
           WHERE e.inserted >= ? AND e.inserted < ? AND e.id > ? AND e.id <= ? \
             AND e.mailing_id IS NOT NULL AND {regular} AND e.kind IN ('open', 'click') \
           GROUP BY m, dm, v, k, b) AS s \
         ON DUPLICATE KEY UPDATE n = n + s.cnt",
        provider = provider_sql(),
    );
    sqlx::query(&sql)
        .bind(batch.lower)
        .bind(batch.upper)
        .bind(batch.after_id)
        .bind(batch.last_id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

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

#[cfg(test)]
mod tests {
    #[test]
    fn provider_sql_names_every_provider() {
        let sql = super::provider_sql();
        for (provider, domains) in crate::address::MAILBOX_PROVIDERS {
            assert!(sql.contains(&format!("'{provider}'")));
            assert!(domains.iter().all(|d| sql.contains(&format!("'{d}'"))));
        }
    }
}
