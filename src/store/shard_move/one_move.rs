//! One move of a data table to another node, step by step (the steps are
//! in the folder's documentation), and what it did ([`Moved`]).

use super::copy::{check_copy, copy_rows};
use super::prepare::{make_target_table, prepare_spare_table};
use super::swap::{pause_writes, retire_old_copy, swap_in};
use super::tables::{retired_name, table_exists};
use crate::store::cluster::{self, NodeAddress, Placement};
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};
use std::time::{Duration, Instant};

/// What one move did.
#[derive(Debug, Clone)]
pub struct Moved {
    pub data_table: String,
    /// Spider server names.
    pub from: String,
    pub to: String,
    pub rows: u64,
    /// How long writes to the head's table were paused.
    pub paused: Duration,
    /// The old copy's name on the old node (kept; nothing is dropped).
    pub old_copy: String,
    pub old_node: NodeAddress,
}

impl std::fmt::Display for Moved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "moved {} from {} to {}: {} rows copied and checked, writes paused {:.1}s; \
             the old copy is kept on {} as `{}` (drop it there when satisfied)",
            self.data_table,
            self.from,
            self.to,
            self.rows,
            self.paused.as_secs_f64(),
            self.old_node,
            self.old_copy
        )
    }
}

/// The outcome of asking for one table's move.
#[derive(Debug, Clone)]
pub enum MoveOutcome {
    Moved(Moved),
    /// The table already is on the asked node.
    AlreadyThere {
        data_table: String,
        server: String,
    },
}

impl std::fmt::Display for MoveOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoveOutcome::Moved(moved) => moved.fmt(f),
            MoveOutcome::AlreadyThere { data_table, server } => {
                write!(f, "{data_table} is already on {server}: nothing to do")
            }
        }
    }
}

/// The Spider server named `to` (a server name, or a node URL whose server
/// `migrate` made), with its address.
pub async fn resolve_node(
    head: &mut MySqlConnection,
    to: &str,
) -> Result<(String, NodeAddress), StoreError> {
    let servers = cluster::servers(head).await?;
    if to.contains("://") {
        let node = NodeAddress::parse(to).map_err(|source| StoreError::BadNodeUrl {
            flag: "--to",
            source,
        })?;
        return servers
            .into_iter()
            .find(|(name, at)| at.same_place(&node) && name.starts_with("lt_"))
            .ok_or_else(|| {
                StoreError::Refused(format!(
                    "the head has no Spider server for {node}: add it to LINKTRACK_SHARDS and \
                     run `linktrack migrate` first (it makes the server and the node's database)"
                ))
            });
    }
    let known: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
    servers
        .into_iter()
        .find(|(name, _)| name == to)
        .ok_or_else(|| {
            StoreError::Refused(format!(
                "--to {to:?}: the head has no such Spider server (it has {}); give a server \
                 name or a node URL",
                known.join(", ")
            ))
        })
}

/// Move one data table (`links_07`, `events_07`) to the node of Spider
/// server `to_server`; see the module documentation for the steps.
pub async fn move_table(
    pool: &MySqlPool,
    data_table: &str,
    to_server: &str,
    to_node: &NodeAddress,
) -> Result<MoveOutcome, StoreError> {
    let mut head = pool.acquire().await?.detach();
    let placements = cluster::placements(&mut head).await?;
    let from = placements
        .iter()
        .find(|p| p.data_table == data_table)
        .ok_or_else(|| unknown_table(data_table, &placements))?
        .clone();
    if from.server == to_server {
        return Ok(MoveOutcome::AlreadyThere {
            data_table: data_table.to_owned(),
            server: to_server.to_owned(),
        });
    }
    let node_error = |place: &str, node: &NodeAddress| {
        let name = format!("{place} ({node})");
        move |err: StoreError| StoreError::Node {
            node: name,
            source: Box::new(err),
        }
    };
    let mut source = from
        .node
        .connect()
        .await
        .map_err(node_error(&from.server, &from.node))?;
    let mut target = to_node
        .connect()
        .await
        .map_err(node_error(to_server, to_node))?;
    let old_copy = format!("moved_{data_table}");
    if table_exists(&mut source, &old_copy).await? {
        return Err(StoreError::Refused(format!(
            "{} ({}) already has `{old_copy}` from an earlier move of {data_table}: drop or \
             rename it there first",
            from.server, from.node
        )));
    }
    make_target_table(&mut source, &mut target, data_table, to_server, to_node).await?;
    let spare = prepare_spare_table(&mut head, &from, to_server).await?;

    // Events are written straight to the data nodes (the journal replay,
    // past the head), which the head's pause does not stop: the old copy
    // is locked on its node until it is renamed, so those writers wait,
    // then find it gone (1146) and follow the head's new topology.
    let locked = from.table == "events";
    if locked {
        sqlx::query(&format!("LOCK TABLES `{data_table}` WRITE"))
            .execute(&mut source)
            .await
            .map_err(|err| node_error(&from.server, &from.node)(err.into()))?;
    }
    let pause_started = Instant::now();
    let mut pause = pause_writes(pool, &from.table).await?;
    let rows = copy_rows(&mut source, &mut target, data_table).await?;
    check_copy(&mut source, &mut target, data_table, to_server, to_node).await?;
    swap_in(pool, &mut pause, &from.table, &spare).await?;
    let paused = pause_started.elapsed();
    let _ = pause.close().await;

    sqlx::query(&format!("DROP TABLE `{}`", retired_name(&from.table)))
        .execute(&mut head)
        .await?;
    retire_old_copy(&mut source, data_table, &old_copy, rows, locked).await?;
    let _ = head.close().await;
    let _ = source.close().await;
    let _ = target.close().await;
    Ok(MoveOutcome::Moved(Moved {
        data_table: data_table.to_owned(),
        from: from.server,
        to: to_server.to_owned(),
        rows,
        paused,
        old_copy,
        old_node: from.node,
    }))
}

fn unknown_table(data_table: &str, placements: &[Placement]) -> StoreError {
    let first = placements
        .first()
        .map_or("links_00", |p| p.data_table.as_str());
    let last = placements
        .last()
        .map_or("events_14", |p| p.data_table.as_str());
    StoreError::Refused(format!(
        "{data_table:?} is not a data table of this head (they are {first} … {last}; \
         `linktrack partitions list` shows where each is)"
    ))
}
