//! A MariaDB Spider cluster: `links` and `events` sharded over data nodes.
//!
//! `DATABASE_URL` is the head, `LINKTRACK_SHARDS` the data nodes. On the head
//! `links` and `events` are Spider tables with an odd number of partitions
//! ("virtual shards"), each pointing at a data table of its own (`links_00`,
//! `events_00`, …) on one node: several head partitions on the same data
//! table return wrong results. `links` is `PARTITION BY LIST (shard)`, the
//! shard written by linktrack from the token ([`shard_of`]), so linktrack can
//! route a lookup by itself ([`Router`]); heads made before that keep
//! `PARTITION BY KEY (uuid)`. `events` is `PARTITION BY KEY (event_id)`.
//! Every other table (stats, suppressions, sequences, …) is a plain InnoDB
//! table on the head. Each data table is today's single-server table (daily
//! RANGE partitions), made with `CREATE TABLE … LIKE` from the template the
//! ordinary migrations create in each node's database.
//!
//! Ids: linktrack gives every row its id from the head's `sequences` table
//! (`ids`), never the column default (a MariaDB SEQUENCE default crashed the
//! head): unique across the data tables, increasing in insertion order, so
//! the rollup's per-day watermark on `events.id` works unchanged.
//!
//! The head knows the topology: its partition comments name a Spider server
//! and a data table, and `mysql.servers` holds each server's address. The
//! partition commands read it there ([`placements`]), so the builder, the
//! journal replay and `partitions ensure` need nothing but the head's URL.
//!
//! # Layout
//!
//! * this file: the topology (which node and data table hold each head
//!   partition) and the partition commands run on every node;
//! * `node`: a data node's address (`LINKTRACK_SHARDS` entries);
//! * `migrate`: `migrate --shards`, which creates or checks the cluster;
//! * `ids`: ids (and shards) of the rows written through the head;
//! * `shard`: the shard function; `routing`: lookups past the head.

mod ids;
mod migrate;
mod node;
mod routing;
mod shard;

pub use ids::{event_ids, head_writes, HeadWrites, IdBlocks, LinkLayout, EVENT_IDS, LINK_IDS};
pub use migrate::{migrate, ClusterMigrate};
pub use node::{parse_shards, NodeAddress};
pub use routing::{Router, REFRESH_EVERY};
pub use shard::shard_of;

use super::StoreError;
use sqlx::mysql::MySqlConnection;

use std::fmt;

/// Virtual shards made by the first `migrate --shards` unless told otherwise.
pub const DEFAULT_VIRTUAL_SHARDS: u32 = 15;

/// The sharded tables and the key the head partitions each by.
pub const SHARDED_TABLES: [(&str, &str); 2] = [("links", "uuid"), ("events", "event_id")];

/// Errors a Spider head answers with when a data node is down: the remote
/// server has gone away (12701), cannot connect to the foreign data source
/// (1429), and the client-side lost-connection errors it passes on (2006,
/// 2013). The statement works again once the node is back.
pub const SPIDER_REMOTE_ERRORS: [u16; 4] = [12701, 1429, 2006, 2013];

/// The data table of virtual shard `n` of `table`.
pub fn data_table(table: &str, n: u32) -> String {
    format!("{table}_{n:02}")
}

/// The Spider server name of node `index` for the head database `database`:
/// server names are global on the head, so they carry the database's.
pub fn server_name(database: &str, index: usize) -> String {
    let mut name = format!("lt_{database}_{index}");
    name.truncate(64);
    name
}

/// One head partition: which node and data table hold its rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// `links` or `events`.
    pub table: String,
    /// The head partition (`s00`, …).
    pub partition: String,
    pub server: String,
    pub data_table: String,
    pub node: NodeAddress,
}

/// True when `links` on this server is a Spider table: the server is a head.
pub async fn is_head(conn: &mut MySqlConnection) -> Result<bool, StoreError> {
    let engine: Option<String> = sqlx::query_scalar(
        "SELECT CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'links'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(engine.is_some_and(|e| e.eq_ignore_ascii_case("spider")))
}

/// Every head partition of `links` and `events` with its node, from the
/// partition comments and `mysql.servers` (which needs SELECT on it).
pub async fn placements(conn: &mut MySqlConnection) -> Result<Vec<Placement>, StoreError> {
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT CAST(TABLE_NAME AS CHAR), CAST(PARTITION_NAME AS CHAR), \
                CAST(PARTITION_COMMENT AS CHAR) \
         FROM information_schema.PARTITIONS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('links', 'events') \
           AND PARTITION_NAME IS NOT NULL \
         ORDER BY TABLE_NAME DESC, PARTITION_ORDINAL_POSITION",
    )
    .fetch_all(&mut *conn)
    .await?;
    let servers = servers(conn).await?;
    let mut out = Vec::new();
    for (table, partition, comment) in rows {
        let param = |key: &str| spider_param(&comment, key);
        let (Some(server), Some(data_table)) = (param("srv"), param("table")) else {
            return Err(StoreError::Corrupt {
                table: "links",
                detail: format!(
                    "head partition {table}.{partition} has comment {comment:?}, \
                     expected srv \"…\", table \"…\""
                ),
            });
        };
        let node = servers
            .iter()
            .find(|(name, _)| *name == server)
            .map(|(_, node)| node.clone())
            .ok_or_else(|| {
                StoreError::Refused(format!(
                    "head partition {table}.{partition} names Spider server {server:?}, \
                     which the head does not have (mysql.servers): run `linktrack migrate` \
                     with LINKTRACK_SHARDS naming every data node"
                ))
            })?;
        out.push(Placement {
            table,
            partition,
            server,
            data_table,
            node,
        });
    }
    Ok(out)
}

/// The head's Spider servers: name and address.
pub(crate) async fn servers(
    conn: &mut MySqlConnection,
) -> Result<Vec<(String, NodeAddress)>, StoreError> {
    type Row = (String, String, String, String, String, i64);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT CAST(Server_name AS CHAR), CAST(Host AS CHAR), CAST(Db AS CHAR), \
                CAST(Username AS CHAR), CAST(Password AS CHAR), Port FROM mysql.servers",
    )
    .fetch_all(&mut *conn)
    .await
    .map_err(|err| {
        StoreError::Refused(format!(
            "reading the head's Spider servers (mysql.servers) failed: {err}; \
             the linktrack user needs SELECT on mysql.servers on the head"
        ))
    })?;
    Ok(rows
        .into_iter()
        .map(|(name, host, database, user, password, port)| {
            let node = NodeAddress {
                host,
                port: u16::try_from(port).unwrap_or(3306),
                user,
                password,
                database,
            };
            (name, node)
        })
        .collect())
}

/// The value of `key "value"` in a Spider comment.
fn spider_param(comment: &str, key: &str) -> Option<String> {
    comment.split(',').find_map(|part| {
        let part = part.trim();
        let rest = part.strip_prefix(key)?.trim_start();
        let value = rest.strip_prefix('"')?.strip_suffix('"')?;
        Some(value.to_owned())
    })
}

/// The data tables of each node, grouped: (node, server, [(kind, data table)]).
pub(crate) fn by_node(placements: &[Placement]) -> Vec<(NodeAddress, String, Vec<String>)> {
    let mut nodes: Vec<(NodeAddress, String, Vec<String>)> = Vec::new();
    for p in placements {
        match nodes.iter_mut().find(|(_, server, _)| *server == p.server) {
            Some((_, _, tables)) => tables.push(p.data_table.clone()),
            None => nodes.push((p.node.clone(), p.server.clone(), vec![p.data_table.clone()])),
        }
    }
    nodes
}

/// A node that failed while the others were done.
#[derive(Debug, Clone)]
pub struct NodeFailure {
    pub server: String,
    pub node: NodeAddress,
    pub error: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "data node {} ({}): {}",
            self.server, self.node, self.error
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spider_comments_are_read() {
        let comment = r#"srv "lt_x_0", table "links_03""#;
        assert_eq!(spider_param(comment, "srv").as_deref(), Some("lt_x_0"));
        assert_eq!(spider_param(comment, "table").as_deref(), Some("links_03"));
        assert_eq!(spider_param(comment, "aim"), None);
        assert_eq!(data_table("events", 7), "events_07");
    }
}
