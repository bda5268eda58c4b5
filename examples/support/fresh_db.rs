//! A fresh, migrated benchmark database with today's partitions (shared
//! by the benchmarks that build or relay letters into one).

use chrono::Utc;
use linktrack::store::{self, partitions};
use sqlx::MySqlPool;

/// Database `name` on `server`, dropped first when it exists, migrated,
/// with today's and tomorrow's partitions; its pool and URL.
pub async fn fresh_db(server: &str, name: &str) -> anyhow::Result<(MySqlPool, String)> {
    let url = format!("{server}/{name}");
    let admin = MySqlPool::connect(server).await?;
    sqlx::query(&format!("DROP DATABASE IF EXISTS `{name}`"))
        .execute(&admin)
        .await?;
    let pool = store::migrate(&url).await?;
    let policy = partitions::Policy {
        today: Utc::now().date_naive(),
        ahead_days: 1,
        keep_days: None,
    };
    partitions::run(&pool, &policy, &partitions::RunOptions::default()).await?;
    Ok((pool, url))
}
