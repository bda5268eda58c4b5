//! `shards status`: each data node of the head, whether it answers, the
//! rows and days its data tables hold, and the last event stored on it
//! (how far the journal replay is behind for that node).

use super::node::NodeAddress;
use super::topology::{placements, server_name, servers, Placement};
use crate::store::error::StoreError;
use chrono::{DateTime, Datelike, NaiveDate, NaiveDateTime, Utc};
use sqlx::mysql::MySqlConnection;
use sqlx::Connection;
use std::time::Duration;

/// How long a node gets to answer before it counts as unreachable.
const NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// One data node as the head names it.
#[derive(Debug)]
pub struct NodeStatus {
    /// Its Spider server name.
    pub server: String,
    pub node: NodeAddress,
    /// The data tables the head places on it (`links_00`, `events_00`, …).
    pub tables: Vec<String>,
    /// What it holds, or why it could not be read.
    pub held: Result<Held, String>,
}

/// What one node's data tables hold.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Held {
    pub link_rows: u64,
    pub event_rows: u64,
    /// Counted (`COUNT(*)`), or InnoDB's estimate.
    pub exact: bool,
    /// The days its data tables have partitions for, oldest first.
    pub days: Vec<NaiveDate>,
    /// The event stored last on this node (the highest id: ids increase in
    /// insertion order): its id and when it happened (UTC).
    pub last_event: Option<(u64, DateTime<Utc>)>,
}

/// Every data node of the head: the servers its partitions name, and the
/// servers `migrate` made for its database that hold nothing yet (a node
/// just added). Each node is read at once, `NODE_TIMEOUT` each; `exact`
/// counts rows instead of reading InnoDB's estimates.
pub async fn node_status(
    head: &mut MySqlConnection,
    exact: bool,
) -> Result<Vec<NodeStatus>, StoreError> {
    let placed = placements(head).await?;
    let database: Option<String> = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut *head)
        .await?;
    let ours = server_name(&database.unwrap_or_default(), 0);
    let prefix = ours.trim_end_matches('0');
    let mut nodes: Vec<(String, NodeAddress, Vec<String>)> = Vec::new();
    for (server, node) in servers(head).await? {
        let tables = tables_on(&placed, &server);
        let made_for_us = server
            .strip_prefix(prefix)
            .is_some_and(|index| index.parse::<usize>().is_ok());
        if !tables.is_empty() || made_for_us {
            nodes.push((server, node, tables));
        }
    }
    let reads: Vec<_> = nodes
        .into_iter()
        .map(|(server, node, tables)| {
            tokio::spawn(async move {
                let read = tokio::time::timeout(NODE_TIMEOUT, read_node(&node, &tables, exact));
                let held = match read.await {
                    Ok(Ok(held)) => Ok(held),
                    Ok(Err(err)) => Err(one_line(&err.to_string())),
                    Err(_) => Err(format!("no answer within {} s", NODE_TIMEOUT.as_secs())),
                };
                NodeStatus {
                    server,
                    node,
                    tables,
                    held,
                }
            })
        })
        .collect();
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        out.push(read.await.map_err(|source| StoreError::Task {
            what: "a node status task",
            source,
        })?);
    }
    Ok(out)
}

/// An error's text on one line (a connection error adds a hint line).
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

fn tables_on(placed: &[Placement], server: &str) -> Vec<String> {
    placed
        .iter()
        .filter(|p| p.server == server)
        .map(|p| p.data_table.clone())
        .collect()
}

async fn read_node(node: &NodeAddress, tables: &[String], exact: bool) -> Result<Held, StoreError> {
    let mut conn = node.connect().await?;
    let held = read_tables(&mut conn, tables, exact).await;
    let _ = conn.close().await;
    held
}

async fn read_tables(
    conn: &mut MySqlConnection,
    tables: &[String],
    exact: bool,
) -> Result<Held, StoreError> {
    let mut held = Held {
        exact,
        ..Held::default()
    };
    for table in tables {
        let rows = if exact {
            sqlx::query_scalar::<_, i64>(&format!("SELECT COUNT(*) FROM `{table}`"))
                .fetch_one(&mut *conn)
                .await? as u64
        } else {
            estimated_rows(conn, table).await?
        };
        if table.starts_with("links_") {
            held.link_rows += rows;
        } else {
            held.event_rows += rows;
            if let Some(last) = last_event(conn, table).await? {
                if held.last_event.is_none_or(|(id, _)| last.0 > id) {
                    held.last_event = Some(last);
                }
            }
        }
        for day in days_of(conn, table).await? {
            if !held.days.contains(&day) {
                held.days.push(day);
            }
        }
    }
    held.days.sort_unstable();
    Ok(held)
}

async fn estimated_rows(conn: &mut MySqlConnection, table: &str) -> Result<u64, StoreError> {
    let rows: Option<u64> = sqlx::query_scalar(
        "SELECT CAST(SUM(COALESCE(TABLE_ROWS, 0)) AS UNSIGNED) FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_one(&mut *conn)
    .await?;
    Ok(rows.unwrap_or(0))
}

/// The event with the highest id in `table` (read down the primary key).
async fn last_event(
    conn: &mut MySqlConnection,
    table: &str,
) -> Result<Option<(u64, DateTime<Utc>)>, StoreError> {
    let row: Option<(u64, NaiveDateTime)> = sqlx::query_as(&format!(
        "SELECT id, occurred_at FROM `{table}` ORDER BY id DESC LIMIT 1"
    ))
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|(id, at)| (id, at.and_utc())))
}

/// The days `table` has partitions for (`pYYYYMMDD`; the template's
/// `p19700101` placeholder is no day).
async fn days_of(conn: &mut MySqlConnection, table: &str) -> Result<Vec<NaiveDate>, StoreError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(PARTITION_NAME AS CHAR) FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND PARTITION_NAME IS NOT NULL",
    )
    .bind(table)
    .fetch_all(&mut *conn)
    .await?;
    Ok(names.iter().filter_map(|name| day_of(name)).collect())
}

fn day_of(partition: &str) -> Option<NaiveDate> {
    let day = NaiveDate::parse_from_str(partition.strip_prefix('p')?, "%Y%m%d").ok()?;
    (day.year_ce().1 > 1970).then_some(day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_give_their_days_but_the_placeholder() {
        assert_eq!(day_of("p20261129"), NaiveDate::from_ymd_opt(2026, 11, 29));
        assert_eq!(day_of("p19700101"), None);
        assert_eq!(day_of("pmax"), None);
        assert_eq!(day_of("s01"), None);
    }
}
