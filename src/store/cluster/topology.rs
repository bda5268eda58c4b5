//! The topology of a Spider cluster, as the head records it: which data
//! node and data table hold each head partition ([`placements`], read from
//! the partition comments and `mysql.servers`), the names linktrack gives
//! data tables and Spider servers, and whether a server is a head at all.

use super::node::NodeAddress;
use crate::store::error::StoreError;
use sqlx::mysql::MySqlConnection;

/// The sharded tables and the key the head partitions each by.
pub const SHARDED_TABLES: [(&str, &str); 2] = [("links", "uuid"), ("events", "event_id")];

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

pub use crate::store::big_tables::is_head;

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
