//! The partition commands: `list`, `ensure` and `rotate` (`run`), each on
//! one server or, on a Spider head, on every data node; and the refusals
//! `rotate` exits with.

use super::days::{Partition, Policy, PARTITIONED_TABLES};
use super::every_node::{list_days, run_partitions};
use super::one_server::{list_on, run_on, RunOptions};
use super::report::{PartitionRun, TableReport};
use crate::store::cluster;
use crate::store::error::StoreError;
use sqlx::{Connection, MySqlPool};

/// The partitions of `table` in the current database, ascending.
/// On a Spider head: the days of the table's first data table (every data
/// table has the same days).
pub async fn list(pool: &MySqlPool, table: &'static str) -> Result<Vec<Partition>, StoreError> {
    let mut conn = pool.acquire().await?;
    if cluster::is_head(&mut conn).await? {
        return list_days(&mut conn, table).await;
    }
    list_on(&mut conn, table).await
}

/// Make sure partitions exist from today through `today + ahead_days`
/// (UTC), dropping nothing: the one helper the builder, the replay, the demo
/// and `partitions ensure` use.
pub async fn ensure_ahead(
    pool: &MySqlPool,
    ahead_days: u32,
) -> Result<Vec<TableReport>, StoreError> {
    let policy = Policy {
        today: chrono::Utc::now().date_naive(),
        ahead_days,
        keep_days: None,
    };
    run(pool, &policy, &RunOptions::default()).await
}

/// Plan and apply `policy` to every partitioned table, holding the
/// partition lock so that concurrent runners take turns: the second one
/// re-reads the partitions after the first has finished and finds nothing
/// left to do. On a Spider head: every data table of every data node, each
/// node under its own lock ([`cluster`]); a node that failed fails the
/// run ([`run_each_node`] says what the others did).
pub async fn run(
    pool: &MySqlPool,
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    run_each_node(pool, policy, options).await?.into_result()
}

/// [`run`], with what was done on the nodes reached even when others
/// failed: what `partitions ensure` and `rotate` print.
pub async fn run_each_node(
    pool: &MySqlPool,
    policy: &Policy,
    options: &RunOptions,
) -> Result<PartitionRun, StoreError> {
    let mut conn = pool.acquire().await?.detach();
    let result = if cluster::is_head(&mut conn).await? {
        run_partitions(&mut conn, policy, options).await
    } else {
        let tables = PARTITIONED_TABLES.map(str::to_owned);
        run_on(&mut conn, &tables, policy, options)
            .await
            .map(|done| PartitionRun {
                done,
                failed: Vec::new(),
            })
    };
    let _ = conn.close().await;
    result
}

/// The refusals among `reports`, as one error naming the tables, or
/// `None` when nothing was refused. What `partitions rotate` exits with
/// after printing the reports.
pub fn refusals(reports: &[TableReport]) -> Option<StoreError> {
    let tables: Vec<String> = reports
        .iter()
        .filter(|r| r.refused.is_some())
        .map(|r| match &r.node {
            Some(node) => format!("{node} {}", r.plan.table),
            None => r.plan.table.clone(),
        })
        .collect();
    (!tables.is_empty()).then(|| {
        StoreError::Refused(format!(
            "refused to drop partitions of {} (more than --max-drop, see above); \
             the days ahead were created. Check --keep-days, then re-run with --force \
             if this is intended",
            tables.join(", ")
        ))
    })
}
