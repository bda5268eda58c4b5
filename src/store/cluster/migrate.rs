//! `migrate --shards`: create or check a Spider cluster, safely again.

use super::ids::{link_layout, LinkLayout, EVENT_IDS, LINK_IDS};
use super::node::NodeAddress;
use super::topology::{
    data_table, is_head, placements, server_name, servers, Placement, SHARDED_TABLES,
};
use crate::store::error::StoreError;
use crate::store::migrations::{self, after_migrations, create_database_and_connect, MIGRATOR};
use crate::store::row_format::{set_row_format, RowFormatOptions};
use sqlx::mysql::MySqlConnection;
use sqlx::Connection;

/// Virtual shards made by the first `migrate --shards` unless told otherwise.
pub const DEFAULT_VIRTUAL_SHARDS: u32 = 15;

/// Where the Debian/Ubuntu package installs Spider.
const SPIDER_PACKAGE: &str = "mariadb-plugin-spider";

/// `migrate` with `--shards`.
#[derive(Debug, Clone)]
pub struct ClusterMigrate {
    pub nodes: Vec<NodeAddress>,
    pub virtual_shards: u32,
    pub row_format: RowFormatOptions,
}

/// Create or check the cluster: each node's database and data tables, the
/// head's Spider plugin, settings, servers and Spider tables, then the
/// head's ordinary tables. Safe to run again; never drops anything. Returns
/// one line per thing it did or found.
pub async fn migrate(head_url: &str, plan: &ClusterMigrate) -> Result<Vec<String>, StoreError> {
    let mut said = Vec::new();
    check_virtual_shards(plan.virtual_shards)?;
    let head = create_database_and_connect(head_url).await?;
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
    // A new head takes the shard layout; a head made before it keeps KEY.
    let by_shard = match existing {
        Some(_) => link_layout(&mut conn).await? != LinkLayout::ByKey,
        None => true,
    };
    if !by_shard {
        said.push(
            "head: `links` is partitioned BY KEY (uuid), made before the shard layout: \
             lookups go through the head; docs/scaling.md (\"From the KEY layout\") says how \
             to rebuild the cluster in the shard layout"
                .into(),
        );
    }
    let servers = define_servers(&mut conn, &database, &plan.nodes, existing.as_deref()).await?;
    said.extend(servers.lines.iter().cloned());
    let layout = shard_layout(plan, existing.as_deref(), &servers, &mut said);
    said.extend(prepare_nodes(plan, &layout, &servers, by_shard).await?);
    match existing {
        None => said.extend(create_head_tables(&mut conn, plan, &layout, &servers).await?),
        Some(_) => {
            said.push(format!(
                "head: `links` and `events` already spread over {} data tables",
                layout.len() / 2
            ));
            said.extend(add_head_event_columns(&mut conn, plan, &layout, &servers).await?);
        }
    }
    drop(conn);
    MIGRATOR.run(&head).await?;
    after_migrations(&head).await?;
    for (table, _) in SHARDED_TABLES {
        said.push(seed_ids(&head, table, &plan.nodes, &layout).await?);
    }
    Ok(said)
}

fn check_virtual_shards(shards: u32) -> Result<(), StoreError> {
    if shards == 0 || shards.is_multiple_of(2) {
        return Err(StoreError::Refused(format!(
            "--virtual-shards {shards}: use an odd number (15, 31, …): Spider's KEY hashing \
             of UUIDv7 tokens puts a third of the rows on one side with 2 partitions and \
             is within ±5 % with odd counts"
        )));
    }
    Ok(())
}

/// Where each data table lives, `(table, shard, node index)`: kept from
/// the head when it has a placement, else round-robin over the nodes.
fn shard_layout(
    plan: &ClusterMigrate,
    existing: Option<&[Placement]>,
    servers: &Servers,
    said: &mut Vec<String>,
) -> Vec<(String, u32, usize)> {
    let shards = plan.virtual_shards;
    let Some(current) = existing else {
        return SHARDED_TABLES
            .iter()
            .flat_map(|(table, _)| {
                (0..shards).map(|n| ((*table).to_owned(), n, n as usize % plan.nodes.len()))
            })
            .collect();
    };
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

/// Every node made ready for its data tables, the nodes at the same time.
async fn prepare_nodes(
    plan: &ClusterMigrate,
    layout: &[(String, u32, usize)],
    servers: &Servers,
    by_shard: bool,
) -> Result<Vec<String>, StoreError> {
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
                prepare_node(&node, &mine, &row_format, by_shard)
                    .await
                    .map_err(|err| StoreError::Node {
                        node: format!("{name} ({node})"),
                        source: Box::new(err),
                    })
            })
        })
        .collect();
    let mut said = Vec::new();
    for node in prepared {
        let lines = node.await.map_err(|source| StoreError::Task {
            what: "preparing a node",
            source,
        })??;
        said.extend(lines);
    }
    Ok(said)
}

/// A new head's Spider tables over the data tables of `layout`.
async fn create_head_tables(
    conn: &mut MySqlConnection,
    plan: &ClusterMigrate,
    layout: &[(String, u32, usize)],
    servers: &Servers,
) -> Result<Vec<String>, StoreError> {
    let mut said = Vec::new();
    for (table, key) in SHARDED_TABLES {
        let ddl = head_table_ddl(&plan.nodes[0], table, key, layout, &servers.names).await?;
        let ddl = match table {
            "links" => by_shard_ddl(&ddl)?,
            _ => ddl,
        };
        sqlx::query(&ddl).execute(&mut *conn).await?;
        said.push(format!(
            "head: `{table}` is a Spider table over {} data tables on {} nodes",
            plan.virtual_shards,
            plan.nodes.len()
        ));
    }
    Ok(said)
}

/// `events.country` as migration 20261210000001 adds it.
const EVENTS_COUNTRY_COLUMN: &str = "`country` CHAR(2) NULL \
    COMMENT 'ISO 3166-1 alpha-2 of the client address (serve --geoip)'";

/// `events.bot_reason` as migration 20261230000001 makes it: fixed
/// length, so a verdict update keeps a compressed row in place
/// (`store::bot_reason`).
const EVENTS_BOT_REASON_COLUMN: &str = "`bot_reason` CHAR(32) CHARACTER SET ascii \
    COLLATE ascii_general_ci NOT NULL DEFAULT '' \
    COMMENT 'a bot verdict reason, empty for none (store/bot_reason.rs)'";

/// Whether `table`'s `bot_reason` is still the `VARCHAR … NULL` of the
/// releases before migration 20261230000001.
async fn varying_bot_reason(conn: &mut MySqlConnection, table: &str) -> Result<bool, StoreError> {
    let kind: Option<String> = sqlx::query_scalar(
        "SELECT CAST(DATA_TYPE AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'bot_reason'",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(kind.is_some_and(|kind| !kind.eq_ignore_ascii_case("char")))
}

/// A head made before its nodes' `events` gained a column (`country`) or
/// changed one (`bot_reason` of fixed length):
/// the Spider table is defined again from the node's template, under a
/// new name, and swapped in by one `RENAME`. A Spider table holds no rows
/// (dropping the old definition leaves the data tables alone), and an
/// `ALTER` of it would copy every row through the head.
async fn add_head_event_columns(
    conn: &mut MySqlConnection,
    plan: &ClusterMigrate,
    layout: &[(String, u32, usize)],
    servers: &Servers,
) -> Result<Vec<String>, StoreError> {
    let has_country: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
         AND TABLE_NAME = 'events' AND COLUMN_NAME = 'country'",
    )
    .fetch_optional(&mut *conn)
    .await?;
    let old_reason = varying_bot_reason(conn, "events").await?;
    if has_country.is_some() && !old_reason {
        return Ok(Vec::new());
    }
    let key = SHARDED_TABLES
        .iter()
        .find(|(table, _)| *table == "events")
        .map_or("event_id", |(_, key)| key);
    let ddl = head_table_ddl(&plan.nodes[0], "events", key, layout, &servers.names)
        .await?
        .replacen(
            "CREATE TABLE IF NOT EXISTS `events`",
            "CREATE TABLE `events_lt_redefined`",
            1,
        );
    sqlx::query("DROP TABLE IF EXISTS `events_lt_redefined`, `events_lt_previous`")
        .execute(&mut *conn)
        .await?;
    sqlx::query(&ddl).execute(&mut *conn).await?;
    sqlx::query("RENAME TABLE `events` TO `events_lt_previous`, `events_lt_redefined` TO `events`")
        .execute(&mut *conn)
        .await?;
    sqlx::query("DROP TABLE `events_lt_previous`")
        .execute(&mut *conn)
        .await?;
    let mut changes = Vec::new();
    if has_country.is_none() {
        changes.push("their new column `country`");
    }
    if old_reason {
        changes.push("`bot_reason` of fixed length");
    }
    Ok(vec![format!(
        "head: `events` defined again over its data tables with {}",
        changes.join(" and ")
    )])
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
    row_format: &RowFormatOptions,
    by_shard: bool,
) -> Result<Vec<String>, StoreError> {
    let pool = migrations::migrate(&node.url()?).await?;
    let mut said = Vec::new();
    for line in set_row_format(&pool, row_format).await? {
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
        if template == "events" {
            // The settle pass's index (migration 20261207000001), which
            // that migration leaves to this step on a cluster: data tables
            // made LIKE an older template still have `mailing_kind`.
            sqlx::query(&format!(
                "ALTER TABLE `{table}` DROP INDEX IF EXISTS mailing_kind, \
                 ADD INDEX IF NOT EXISTS mailing_letter (mailing_id, letter_id, kind, occurred_at)"
            ))
            .execute(&pool)
            .await?;
            // The reader's country (migration 20261210000001), likewise
            // left to this step; instant on InnoDB (a last column).
            sqlx::query(&format!(
                "ALTER TABLE `{table}` ADD COLUMN IF NOT EXISTS {EVENTS_COUNTRY_COLUMN}"
            ))
            .execute(&pool)
            .await?;
            // The verdict reason of fixed length (migration
            // 20261230000001), likewise left to this step: a copy of the
            // table, once. Its NULLs become '' as the column turns NOT
            // NULL, which strict mode refuses, hence the statement's own
            // sql_mode (MariaDB: a Spider node is one).
            let mut conn = pool.acquire().await?;
            if varying_bot_reason(&mut conn, table).await? {
                sqlx::query(&format!(
                    "SET STATEMENT sql_mode = '' FOR \
                     ALTER TABLE `{table}` MODIFY {EVENTS_BOT_REASON_COLUMN}"
                ))
                .execute(&mut *conn)
                .await?;
            }
        }
        if by_shard && template == "links" {
            // The head partitions on it; instant on InnoDB (a last column).
            sqlx::query(&format!(
                "ALTER TABLE `{table}` ADD COLUMN IF NOT EXISTS `shard` SMALLINT UNSIGNED \
                 NOT NULL DEFAULT 0 COMMENT 'virtual shard of uuid (docs/token.md)'"
            ))
            .execute(&pool)
            .await?;
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

/// The head's `sequences` row that `table`'s ids are reserved from
/// (`cluster::ids`), set above every id already in its data tables: a head
/// made again over existing nodes, or one whose ids came from the column
/// default before (a MariaDB SEQUENCE, which crashed the head).
async fn seed_ids(
    head: &sqlx::MySqlPool,
    table: &str,
    nodes: &[NodeAddress],
    layout: &[(String, u32, usize)],
) -> Result<String, StoreError> {
    let mut highest: u64 = 0;
    for (t, n, at) in layout.iter().filter(|(t, _, _)| t == table) {
        let mut node = nodes[*at].connect().await?;
        let max: Option<u64> =
            sqlx::query_scalar(&format!("SELECT MAX(id) FROM `{}`", data_table(t, *n)))
                .fetch_one(&mut node)
                .await?;
        highest = highest.max(max.unwrap_or(0));
        let _ = node.close().await;
    }
    let name = if table == "links" {
        LINK_IDS
    } else {
        EVENT_IDS
    };
    sqlx::query(
        "INSERT INTO sequences (name, id) VALUES (?, ?) \
         ON DUPLICATE KEY UPDATE id = GREATEST(id, VALUES(id))",
    )
    .bind(name)
    .bind(highest)
    .execute(head)
    .await?;
    Ok(format!(
        "head: `{table}` ids from linktrack (sequences row {name:?}, above {highest})"
    ))
}

/// The head's Spider table: the node template's columns (the id without
/// AUTO_INCREMENT or default), its unique and secondary
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
            // No default: linktrack gives every row its id (`cluster::ids`);
            // an insert without one fails (1364) instead of counting on the
            // head's own numbering.
            lines.push(line.replace(" AUTO_INCREMENT", ""));
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

/// The head's `links` in the shard layout: a `shard` column (linktrack
/// writes [`super::shard_of`] of the token) and `PARTITION BY LIST (shard)`,
/// partition `sNN` holding shard NN, so linktrack knows from a token alone
/// which data table holds it. The token's unique key is a plain key here
/// (a unique key must contain the partitioning column); each data table
/// keeps its `UNIQUE (uuid, inserted)`, which is where it is enforced.
fn by_shard_ddl(ddl: &str) -> Result<String, StoreError> {
    let refuse = |what: &str| StoreError::Corrupt {
        table: "links",
        detail: format!("the head's links definition has no {what}; cannot make the shard layout"),
    };
    let id_line_end = ddl
        .find("`id` ")
        .and_then(|at| ddl[at..].find(",\n").map(|end| at + end + 2))
        .ok_or_else(|| refuse("id column"))?;
    let mut out = String::with_capacity(ddl.len() + 512);
    out.push_str(&ddl[..id_line_end]);
    out.push_str("  `shard` smallint(5) unsigned NOT NULL,\n");
    out.push_str(&ddl[id_line_end..]);
    let out = out.replacen("UNIQUE KEY `uuid`", "KEY `uuid`", 1);
    let key = "PARTITION BY KEY (`uuid`) (";
    let at = out.find(key).ok_or_else(|| refuse("KEY partitioning"))?;
    let mut parts = Vec::new();
    for part in out[at + key.len()..]
        .trim_end_matches(')')
        .split(", PARTITION ")
    {
        let part = part.trim_start_matches("PARTITION ");
        let (name, rest) = part
            .split_once(' ')
            .ok_or_else(|| refuse("partition name"))?;
        let shard: u32 = name
            .trim_start_matches('s')
            .parse()
            .map_err(|_| refuse("sNN partition names"))?;
        parts.push(format!("PARTITION {name} VALUES IN ({shard}) {rest}"));
    }
    Ok(format!(
        "{}PARTITION BY LIST (`shard`) ({})",
        &out[..at],
        parts.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_layout_lists_each_shard_in_its_own_partition() {
        let key = "CREATE TABLE IF NOT EXISTS `links` (\n  `id` bigint(20) unsigned NOT NULL,\n  \
                   `uuid` binary(16) NOT NULL,\n  UNIQUE KEY `uuid` (`uuid`,`inserted`),\n  KEY `id` (`id`)\n\
                   ) ENGINE=SPIDER COMMENT='wrapper \"mysql\"' PARTITION BY KEY (`uuid`) \
                   (PARTITION s00 COMMENT = 'srv \"a\", table \"links_00\"', \
                   PARTITION s01 COMMENT = 'srv \"b\", table \"links_01\"')";
        let list = by_shard_ddl(key).unwrap();
        assert!(
            list.contains("`id` bigint(20) unsigned NOT NULL,\n  `shard` smallint(5) unsigned NOT NULL,\n  `uuid`"),
            "{list}"
        );
        assert!(list.contains("  KEY `uuid` (`uuid`,`inserted`)"), "{list}");
        assert!(!list.contains("UNIQUE"), "{list}");
        assert!(
            list.ends_with(
                "PARTITION BY LIST (`shard`) (PARTITION s00 VALUES IN (0) COMMENT = 'srv \"a\", \
                 table \"links_00\"', PARTITION s01 VALUES IN (1) COMMENT = 'srv \"b\", table \"links_01\"')"
            ),
            "{list}"
        );
        assert!(by_shard_ddl("CREATE TABLE x (a int)").is_err());
    }
}
