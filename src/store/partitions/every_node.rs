//! Partitions on every node of a Spider cluster. A head holds no
//! partitions of its own: the day partitions live on the data nodes'
//! tables, which `cluster` names; each node's DDL is the one-server run
//! (`one_server::run_on`), each under that node's own lock.

use super::days::{Partition, Policy};
use super::one_server::{list_on, run_on, RunOptions};
use super::report::{PartitionRun, TableReport};
use crate::store::cluster::{by_node, placements, NodeAddress, NodeFailure};
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};

/// Apply `policy` to every data table of every node. Each node is locked
/// with `GET_LOCK` on that node (a lock is per server, so runners from
/// several heads or machines still take turns per node). A node that fails
/// does not stop the others: the run names it beside what they did.
pub(crate) async fn run_partitions(
    head: &mut MySqlConnection,
    policy: &Policy,
    options: &RunOptions,
) -> Result<PartitionRun, StoreError> {
    let placements = placements(head).await?;
    // The nodes work at the same time: the DDL of one is independent of
    // the others', and a cluster's run then takes as long as one node's.
    let runs: Vec<_> = by_node(&placements)
        .into_iter()
        .map(|(node, server, tables)| {
            let (policy, options) = (*policy, options.clone());
            tokio::spawn(async move {
                let result = run_on_node(&node, &server, &tables, &policy, &options).await;
                (node, server, result)
            })
        })
        .collect();
    let mut done = Vec::new();
    let mut failed = Vec::new();
    for run in runs {
        let (node, server, result) = run.await.map_err(|source| StoreError::Task {
            what: "a partition task",
            source,
        })?;
        match result {
            Ok(reports) => done.extend(reports),
            Err(err) => failed.push(NodeFailure {
                server,
                node,
                error: err.to_string(),
            }),
        }
    }
    Ok(PartitionRun { done, failed })
}

async fn run_on_node(
    node: &NodeAddress,
    server: &str,
    tables: &[String],
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let mut conn = node.connect().await?;
    let result = run_on(&mut conn, tables, policy, options).await;
    let _ = conn.close().await;
    let mut reports = result?;
    for report in &mut reports {
        report.node = Some(server.to_owned());
    }
    Ok(reports)
}

/// The day partitions of one sharded table, as its first data table has
/// them (`partitions` keeps every data table's days the same).
pub(crate) async fn list_days(
    head: &mut MySqlConnection,
    table: &str,
) -> Result<Vec<Partition>, StoreError> {
    let placements = placements(head).await?;
    let first = placements
        .iter()
        .find(|p| p.table == table)
        .ok_or_else(|| StoreError::Corrupt {
            table: "links",
            detail: format!("the head's `{table}` has no Spider partitions"),
        })?;
    let mut conn = first.node.connect().await.map_err(|err| StoreError::Node {
        node: format!("{} ({})", first.server, first.node),
        source: Box::new(err),
    })?;
    let days = list_on(&mut conn, &first.data_table).await;
    let _ = conn.close().await;
    days
}

/// One data table's partitions, for `partitions list`.
#[derive(Debug, Clone)]
pub struct DataTableDays {
    pub server: String,
    pub data_table: String,
    pub days: Vec<Partition>,
}

/// The partitions of every data table on every node; nodes that cannot be
/// read are returned apart.
pub async fn list_all(
    pool: &MySqlPool,
) -> Result<(Vec<DataTableDays>, Vec<NodeFailure>), StoreError> {
    let mut head = pool.acquire().await?;
    let placements = placements(&mut head).await?;
    let mut listed = Vec::new();
    let mut failed = Vec::new();
    for (node, server, tables) in by_node(&placements) {
        let read = async {
            let mut conn = node.connect().await?;
            let mut out = Vec::new();
            for table in &tables {
                out.push(DataTableDays {
                    server: server.clone(),
                    data_table: table.clone(),
                    days: list_on(&mut conn, table).await?,
                });
            }
            let _ = conn.close().await;
            Ok::<_, StoreError>(out)
        };
        match read.await {
            Ok(tables) => listed.extend(tables),
            Err(err) => failed.push(NodeFailure {
                server,
                node,
                error: err.to_string(),
            }),
        }
    }
    Ok((listed, failed))
}
