//! Gauges for alerting on what no request shows (docs/deploy.md, "Alerts";
//! deploy/prometheus/alerts.yml): whether the database answers, how many
//! days of partitions lie ahead, when `partitions rotate` last succeeded
//! and when the schema was installed. A worker reads them at start and every [`EVERY`];
//! the last day's complaints and delivered letters (the complaint rate
//! alert) every 20th time.

use crate::store::{self, maintenance, partitions};
use crate::workers::Stopping;
use chrono::Utc;
use sqlx::MySqlPool;
use std::time::Duration;

/// How often the gauges are read: cheap reads (a ping, two
/// information_schema queries, one row), well inside a scrape interval.
pub const EVERY: Duration = Duration::from_secs(15);

pub const DATABASE_UP: &str = "linktrack_database_up";
pub const DAYS_AHEAD: &str = "linktrack_partitions_days_ahead";
pub const ROTATE_LAST_SUCCESS: &str = "linktrack_partitions_rotate_last_success_timestamp_seconds";
pub const SCHEMA_INSTALLED: &str = "linktrack_schema_installed_timestamp_seconds";
/// Complaints received and letters delivered in the last 24 hours, from
/// the database (both intake paths, `bounces ingest` and the webhooks,
/// and every builder's deliveries): the complaint rate alert's sides.
pub const COMPLAINTS_LAST_DAY: &str = "linktrack_complaints_last_day";
pub const DELIVERED_LAST_DAY: &str = "linktrack_letters_delivered_last_day";

/// The last day's counts are read every this many rounds (5 minutes):
/// a day's rate moves slowly, and each read is a day's index range.
const RATE_EVERY_ROUNDS: u32 = 20;

/// Read the gauges until stopping is asked for.
pub async fn run(pool: MySqlPool, mut stopping: Stopping) {
    // Rounds until the next read of the last day's counts: the first
    // round the database answers, then every RATE_EVERY_ROUNDS.
    let mut rate_in = 0u32;
    loop {
        if update(&pool).await {
            if rate_in == 0 {
                complaint_rate(&pool).await;
                rate_in = RATE_EVERY_ROUNDS;
            }
            rate_in -= 1;
        }
        tokio::select! {
            _ = stopping.requested() => return,
            _ = tokio::time::sleep(EVERY) => {}
        }
    }
}

/// The gauges of each round; whether the database answered.
async fn update(pool: &MySqlPool) -> bool {
    let up = tokio::time::timeout(Duration::from_secs(2), store::ping(pool)).await;
    let up = matches!(up, Ok(Ok(())));
    metrics::gauge!(DATABASE_UP).set(if up { 1.0 } else { 0.0 });
    if !up {
        return false;
    }
    match days_ahead(pool).await {
        Ok(days) => metrics::gauge!(DAYS_AHEAD).set(days as f64),
        Err(err) => tracing::warn!(%err, "partitions ahead not read"),
    }
    match maintenance::last_success(pool, maintenance::ROTATE).await {
        Ok(Some(at)) => {
            metrics::gauge!(ROTATE_LAST_SUCCESS).set(at.timestamp_millis() as f64 / 1000.0)
        }
        // Never run: 0; the alert then counts from the schema's install.
        Ok(None) => metrics::gauge!(ROTATE_LAST_SUCCESS).set(0.0),
        Err(err) => tracing::warn!(%err, "last rotate not read"),
    }
    match maintenance::schema_installed(pool).await {
        Ok(Some(at)) => {
            metrics::gauge!(SCHEMA_INSTALLED).set(at.timestamp_millis() as f64 / 1000.0)
        }
        Ok(None) => {}
        Err(err) => tracing::warn!(%err, "schema install time not read"),
    }
    true
}

async fn complaint_rate(pool: &MySqlPool) {
    match crate::store::bounces::last_day(pool).await {
        Ok((complaints, delivered)) => {
            metrics::gauge!(COMPLAINTS_LAST_DAY).set(complaints as f64);
            metrics::gauge!(DELIVERED_LAST_DAY).set(delivered as f64);
        }
        Err(err) => tracing::warn!(%err, "the last day's complaints and deliveries not read"),
    }
}

/// Days after today (UTC) covered by every partitioned table: the smallest
/// over the tables of (last partition's day − today); negative when even
/// today has no partition.
async fn days_ahead(pool: &MySqlPool) -> Result<i64, store::StoreError> {
    let today = Utc::now().date_naive();
    let mut fewest = i64::MAX;
    for table in partitions::PARTITIONED_TABLES {
        let last = partitions::list(pool, table)
            .await?
            .last()
            .map(partitions::Partition::last_day);
        let ahead = last.map_or(-1, |day| (day - today).num_days());
        fewest = fewest.min(ahead);
    }
    Ok(fewest)
}
