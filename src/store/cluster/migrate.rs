//! `migrate --shards`: create or check a Spider cluster, safely again.

use super::{
    data_table, is_head, placements, server_name, servers, NodeAddress, Placement,
    DEFAULT_VIRTUAL_SHARDS, SHARDED_TABLES,
};
use crate::store::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

/// Where the Debian/Ubuntu package installs Spider.
const SPIDER_PACKAGE: &str = "mariadb-plugin-spider";

/// `migrate` with `--shards`.
#[derive(Debug, Clone)]
pub struct ClusterMigrate {
    pub nodes: Vec<NodeAddress>,
    pub virtual_shards: u32,
    pub row_format: crate::store::RowFormatOptions,
}

/// Create or check the cluster: each node's database and data tables, the
/// head's Spider plugin, settings, servers and Spider tables, then the
/// head's ordinary tables. Safe to run again; never drops anything. Returns
/// one line per thing it did or found.
pub async fn migrate(head_url: &str, plan: &ClusterMigrate) -> Result<Vec<String>, StoreError> {
    let mut said = Vec::new();
    let shards = plan.virtual_shards;
    if shards == 0 || shards.is_multiple_of(2) {
        return Err(StoreError::Refused(format!(
            "--virtual-shards {shards}: use an odd number (15, 31, …): Spider's KEY hashing \
             of UUIDv7 tokens puts a third of the rows on one side with 2 partitions and \
             is within ±5 % with odd counts"
        )));
    }
    let head = crate::store::create_database_and_connect(head_url).await?;
    let mut conn = head.acquire().await?;
    said.extend(install_spider(&mut conn).await?);
    said.extend(spider_settings(&mut conn).await?);
    let database: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&mut *conn)
        .await?;
    let existing = if is_head(&mut conn).await? {
        Some(placements(&mut conn).await?)
    } else {
        refuse_plain_tables(&mut conn).await?;
        None
    };
    let servers = define_servers(&mut conn, &database, &plan.nodes, existing.as_deref()).await?;
    said.extend(servers.lines.iter().cloned());
    // Placement: kept from the head when it has one, else round-robin.
    let layout: Vec<(String, u32, usize)> = match &existing {
        Some(current) => {
            let count = current.iter().filter(|p| p.table == "links").count() as u32;
            if count != shards && plan.virtual_shards != DEFAULT_VIRTUAL_SHARDS {
                said.push(format!(
                    "--virtual-shards {shards} ignored: the head already has {count} \
                     (fixed at the first migrate)"
                ));
            }
            current
                .iter()
                .filter_map(|p| {
                    let node = servers.names.iter().position(|s| *s == p.server)?;
                    let n = p.data_table.rsplit('_').next()?.parse().ok()?;
                    Some((p.table.clone(), n, node))
                })
                .collect()
        }
        None => SHARDED_TABLES
            .iter()
            .flat_map(|(table, _)| {
                (0..shards).map(|n| ((*table).to_owned(), n, n as usize % plan.nodes.len()))
            })
            .collect(),
    };
    let prepared: Vec<_> = plan
        .nodes
        .iter()
        .enumerate()
        .map(|(index, node)| {
            let mine: Vec<String> = layout
                .iter()
                .filter(|(_, _, at)| *at == index)
                .map(|(table, n, _)| data_table(table, *n))
                .collect();
            let (node, row_format) = (node.clone(), plan.row_format);
            let name = servers.names[index].clone();
            tokio::spawn(async move {
                prepare_node(&node, &mine, &row_format)
                    .await
                    .map_err(|err| StoreError::Node {
                        node: format!("{name} ({node})"),
                        source: Box::new(err),
                    })
            })
        })
        .collect();
    for node in prepared {
        let lines = node
            .await
            .map_err(|e| StoreError::Refused(format!("preparing a node failed: {e}")))??;
        said.extend(lines);
    }
    if existing.is_none() {
        for (table, key) in SHARDED_TABLES {
            create_sequence(&mut conn, table, &plan.nodes, &layout).await?;
            let ddl = head_table_ddl(&plan.nodes[0], table, key, &layout, &servers.names).await?;
            sqlx::query(&ddl).execute(&mut *conn).await?;
            said.push(format!(
                "head: `{table}` is a Spider table over {shards} data tables on {} nodes",
                plan.nodes.len()
            ));
        }
    } else {
        said.push(format!(
            "head: `links` and `events` already spread over {} data tables",
            layout.len() / 2
        ));
    }
    drop(conn);
    crate::store::MIGRATOR.run(&head).await?;
    Ok(said)
}

/// A single-server database cannot become a head in place: its rows would
/// have to move. Refuse before changing anything.
async fn refuse_plain_tables(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(TABLE_NAME AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('links', 'events')",
    )
    .fetch_all(&mut *conn)
    .await?;
    if tables.is_empty() {
        return Ok(());
    }
    Err(StoreError::Refused(format!(
        "the head database already has plain (non-Spider) tables {}: it is a single-server \
         database. Give the head an empty database (DATABASE_URL), or unset LINKTRACK_SHARDS \
         to keep the single server; docs/scaling.md says how to move rows",
        tables.join(", ")
    )))
}

/// `INSTALL SONAME 'ha_spider'` when the plugin is not loaded.
async fn install_spider(conn: &mut MySqlConnection) -> Result<Vec<String>, StoreError> {
    let active: Option<String> = sqlx::query_scalar(
        "SELECT CAST(PLUGIN_STATUS AS CHAR) FROM information_schema.PLUGINS \
         WHERE PLUGIN_NAME = 'SPIDER'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    if active.as_deref() == Some("ACTIVE") {
        return Ok(vec!["head: Spider is loaded".into()]);
    }
    sqlx::query("INSTALL SONAME 'ha_spider'")
        .execute(&mut *conn)
        .await
        .map_err(|err| {
            StoreError::Refused(format!(
                "the head has no Spider engine and INSTALL SONAME 'ha_spider' failed ({err}): \
                 install the package {SPIDER_PACKAGE} on the head's machine (apt-get install \
                 {SPIDER_PACKAGE}) and run migrate again"
            ))
        })?;
    Ok(vec![
        "head: installed Spider (INSTALL SONAME 'ha_spider')".into()
    ])
}

/// The Spider settings linktrack needs, with why.
const SETTINGS: [(&str, i64, &str); 4] = [
    (
        "spider_conn_recycle_mode",
        1,
        "keep connections to the nodes (0 opens one per statement)",
    ),
    (
        "spider_direct_dup_insert",
        1,
        "INSERT … ON DUPLICATE KEY UPDATE on the nodes (error 1022 otherwise)",
    ),
    (
        "spider_connect_retry_count",
        0,
        "a dead node's rows fail at once (503) instead of after a second per retry",
    ),
    (
        "spider_selupd_lock_mode",
        0,
        "INSERT … SELECT from `events` (the rollup, READ COMMITTED) reads the nodes without \
         LOCK IN SHARE MODE, as on one server (1 makes it wait on any open event insert)",
    ),
];

/// Check the settings; set the ones that are off for this run of the server
/// and say they belong in its configuration.
async fn spider_settings(conn: &mut MySqlConnection) -> Result<Vec<String>, StoreError> {
    let mut said = Vec::new();
    for (name, want, why) in SETTINGS {
        let value: i64 = sqlx::query_scalar(&format!("SELECT CAST(@@GLOBAL.{name} AS SIGNED)"))
            .fetch_one(&mut *conn)
            .await?;
        if value == want {
            said.push(format!("head: {name} = {want}"));
            continue;
        }
        sqlx::query(&format!("SET GLOBAL {name} = {want}"))
            .execute(&mut *conn)
            .await?;
        said.push(format!(
            "head: set {name} = {want} (was {value}): {why}; add `{name} = {want}` to the \
             head's server configuration so it survives a restart"
        ));
    }
    Ok(said)
}

struct Servers {
    /// Server name of each node, in LINKTRACK_SHARDS order.
    names: Vec<String>,
    lines: Vec<String>,
}

/// One Spider server per node. A node's server keeps its name; a head whose
/// tables use servers not in LINKTRACK_SHARDS is refused with the fix.
async fn define_servers(
    conn: &mut MySqlConnection,
    database: &str,
    nodes: &[NodeAddress],
    existing: Option<&[Placement]>,
) -> Result<Servers, StoreError> {
    let known = servers(conn).await?;
    if let Some(current) = existing {
        let missing: Vec<String> = current
            .iter()
            .filter(|p| !nodes.iter().any(|n| n.same_place(&p.node)))
            .map(|p| format!("{} ({}, {})", p.server, p.node, p.data_table))
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        if !missing.is_empty() {
            return Err(StoreError::Refused(format!(
                "the head's Spider tables use data nodes that LINKTRACK_SHARDS does not name: {}. \
                 Add them to LINKTRACK_SHARDS (every node, in any order); to retire a node, \
                 move its tables away first: `linktrack shards rebalance` with LINKTRACK_SHARDS \
                 naming the nodes to keep (docs/scaling.md, \"Adding a data node\")",
                missing.join("; ")
            )));
        }
    }
    let mut names = Vec::new();
    let mut lines = Vec::new();
    for (index, node) in nodes.iter().enumerate() {
        if let Some((name, _)) = known
            .iter()
            .find(|(name, at)| at.same_place(node) && name.starts_with("lt_"))
        {
            names.push(name.clone());
            continue;
        }
        let mut name = server_name(database, index);
        let mut suffix = index;
        while known.iter().any(|(n, _)| *n == name) || names.contains(&name) {
            suffix += nodes.len();
            name = server_name(database, suffix);
        }
        // CREATE SERVER takes no placeholders: the values are quoted.
        let ddl = format!(
            "CREATE SERVER `{name}` FOREIGN DATA WRAPPER mysql OPTIONS \
             (HOST {}, DATABASE {}, USER {}, PASSWORD {}, PORT {})",
            quote(&node.host),
            quote(&node.database),
            quote(&node.user),
            quote(&node.password),
            node.port
        );
        sqlx::query(&ddl).execute(&mut *conn).await?;
        lines.push(format!("head: Spider server {name} for data node {node}"));
        names.push(name);
    }
    Ok(Servers { names, lines })
}

/// A SQL string literal.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The node's database with the ordinary schema (the templates `links` and
/// `events`, in the asked row format), then its data tables made LIKE them.
async fn prepare_node(
    node: &NodeAddress,
    tables: &[String],
    row_format: &crate::store::RowFormatOptions,
) -> Result<Vec<String>, StoreError> {
    let pool = crate::store::migrate(&node.url()).await?;
    let mut said = Vec::new();
    for line in crate::store::set_row_format(&pool, row_format).await? {
        said.push(format!("node {node}: template {line}"));
    }
    let mut created = Vec::new();
    for table in tables {
        let template = table.rsplit_once('_').map_or("links", |(t, _)| t);
        let exists: Option<i32> = sqlx::query_scalar(
            "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
        )
        .bind(table)
        .fetch_optional(&pool)
        .await?;
        if exists.is_none() {
            sqlx::query(&format!("CREATE TABLE `{table}` LIKE `{template}`"))
                .execute(&pool)
                .await?;
            created.push(table.clone());
        }
    }
    said.push(if created.is_empty() {
        format!("node {node}: its {} data tables are there", tables.len())
    } else {
        format!("node {node}: created {}", created.join(", "))
    });
    pool.close().await;
    Ok(said)
}

/// The head's id sequence for `table`, starting above every id already in
/// its data tables (a head made again over existing nodes).
async fn create_sequence(
    conn: &mut MySqlConnection,
    table: &str,
    nodes: &[NodeAddress],
    layout: &[(String, u32, usize)],
) -> Result<(), StoreError> {
    let mut start: u64 = 1;
    for (t, n, at) in layout.iter().filter(|(t, _, _)| t == table) {
        let mut node = nodes[*at].connect().await?;
        let max: Option<u64> =
            sqlx::query_scalar(&format!("SELECT MAX(id) FROM `{}`", data_table(t, *n)))
                .fetch_one(&mut node)
                .await?;
        start = start.max(max.unwrap_or(0) + 1);
        let _ = node.close().await;
    }
    sqlx::query(&format!(
        "CREATE SEQUENCE IF NOT EXISTS `{table}_ids` START WITH {start} CACHE 1000"
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The head's Spider table: the node template's columns (the id's default
/// from the sequence instead of AUTO_INCREMENT), its unique and secondary
/// keys, the primary key as a plain key on `id` (a primary key must contain
/// the KEY partitioning column), one partition per data table.
async fn head_table_ddl(
    template_node: &NodeAddress,
    table: &str,
    key: &str,
    layout: &[(String, u32, usize)],
    servers: &[String],
) -> Result<String, StoreError> {
    let mut node = template_node.connect().await?;
    let (_, create): (String, String) = sqlx::query_as(&format!("SHOW CREATE TABLE `{table}`"))
        .fetch_one(&mut node)
        .await?;
    let _ = node.close().await;
    let mut lines = Vec::new();
    for line in create.lines().skip(1) {
        let line = line.trim().trim_end_matches(',');
        if line.starts_with(')') {
            break;
        }
        if line.starts_with("`id`") {
            lines.push(line.replace(
                "AUTO_INCREMENT",
                &format!("DEFAULT (NEXT VALUE FOR `{table}_ids`)"),
            ));
        } else if line.starts_with("PRIMARY KEY") {
            lines.push("KEY `id` (`id`)".to_owned());
        } else {
            lines.push(line.to_owned());
        }
    }
    let parts: Vec<String> = layout
        .iter()
        .filter(|(t, _, _)| t == table)
        .map(|(t, n, at)| {
            format!(
                "PARTITION s{n:02} COMMENT = 'srv \"{}\", table \"{}\"'",
                servers[*at],
                data_table(t, *n)
            )
        })
        .collect();
    Ok(format!(
        "CREATE TABLE IF NOT EXISTS `{table}` (\n  {}\n) ENGINE=SPIDER DEFAULT CHARSET=utf8mb4 \
         COLLATE=utf8mb4_unicode_ci COMMENT='wrapper \"mysql\"' \
         PARTITION BY KEY (`{key}`) ({})",
        lines.join(",\n  "),
        parts.join(", ")
    ))
}
