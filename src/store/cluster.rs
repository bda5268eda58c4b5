//! A MariaDB Spider cluster: `links` and `events` sharded over data nodes.
//!
//! `DATABASE_URL` is the head, `LINKTRACK_SHARDS` the data nodes. On the head
//! `links` and `events` are Spider tables `PARTITION BY KEY` on the token
//! (`uuid`) and on `event_id`, with an odd number of partitions ("virtual
//! shards"; KEY hashing of UUIDv7 values is skewed with even counts), each
//! pointing at a data table of its own (`links_00`, `events_00`, …) on one
//! node: several head partitions on the same data table return wrong results.
//! Every other table (stats, suppressions, sequences, …) is a plain InnoDB
//! table on the head. Each data table is today's single-server table (daily
//! RANGE partitions), made with `CREATE TABLE … LIKE` from the template the
//! ordinary migrations create in each node's database.
//!
//! Ids: `AUTO_INCREMENT` counters are per data table, so the head gives each
//! new row its id from a MariaDB SEQUENCE (`links_ids`, `events_ids`, as the
//! id column's DEFAULT): ids stay unique across the data tables and increase
//! in insertion order, so the rollup's per-day watermark on `events.id` and
//! every id-keyed statement work unchanged.
//!
//! The head knows the topology: its partition comments name a Spider server
//! and a data table, and `mysql.servers` holds each server's address. The
//! partition commands read it there ([`placements`]), so the builder, the
//! journal replay and `partitions ensure` need nothing but the head's URL.

use super::partitions::{self, Partition, Policy, RunOptions, TableReport};
use super::{connect_options, StoreError};
use sqlx::mysql::MySqlConnection;
use sqlx::{ConnectOptions, Connection, MySqlPool};
use std::fmt;

/// Virtual shards made by the first `migrate --shards` unless told otherwise.
pub const DEFAULT_VIRTUAL_SHARDS: u32 = 15;

/// The sharded tables and the key the head partitions each by.
pub const SHARDED_TABLES: [(&str, &str); 2] = [("links", "uuid"), ("events", "event_id")];

/// Where the Debian/Ubuntu package installs Spider.
const SPIDER_PACKAGE: &str = "mariadb-plugin-spider";

/// Errors a Spider head answers with when a data node is down: the remote
/// server has gone away (12701), cannot connect to the foreign data source
/// (1429), and the client-side lost-connection errors it passes on (2006,
/// 2013). The statement works again once the node is back.
pub const SPIDER_REMOTE_ERRORS: [u16; 4] = [12701, 1429, 2006, 2013];

/// One data node's address, as given in `LINKTRACK_SHARDS` or read from the
/// head's `mysql.servers`.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddress {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    pub database: String,
}

impl fmt::Debug for NodeAddress {
    // Never print the password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for NodeAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}@{}:{}/{}",
            self.user, self.host, self.port, self.database
        )
    }
}

impl NodeAddress {
    /// Parse one `mysql://user:password@host:port/database` URL; the error
    /// says what is wrong without repeating the password.
    pub fn parse(text: &str) -> Result<NodeAddress, String> {
        let url = url::Url::parse(text.trim()).map_err(|e| format!("not a URL: {e}"))?;
        if url.scheme() != "mysql" && url.scheme() != "mariadb" {
            return Err(format!("scheme {:?}, expected mysql://", url.scheme()));
        }
        let host = url
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or("no host")?
            .to_owned();
        let database = url.path().trim_start_matches('/').to_owned();
        if database.is_empty() || database.contains('/') {
            return Err("no database: give it as the URL's path, e.g. /linktrack".into());
        }
        let decode = |s: &str| {
            percent_decode(s).map_err(|_| "the user or password is not valid percent-encoding")
        };
        Ok(NodeAddress {
            host,
            port: url.port().unwrap_or(3306),
            user: decode(url.username())?,
            password: decode(url.password().unwrap_or(""))?,
            database: decode(&database)?,
        })
    }

    /// The URL to connect with (password included).
    pub fn url(&self) -> String {
        let mut url = url::Url::parse("mysql://localhost/").unwrap_or_else(|_| unreachable!());
        url.set_path(&self.database);
        let _ = url.set_host(Some(&self.host));
        let _ = url.set_port(Some(self.port));
        let _ = url.set_username(&self.user);
        if !self.password.is_empty() {
            let _ = url.set_password(Some(&self.password));
        }
        url.to_string()
    }

    /// The same server and database (credentials may differ).
    pub(crate) fn same_place(&self, other: &NodeAddress) -> bool {
        self.host == other.host && self.port == other.port && self.database == other.database
    }

    /// One connection (not a pool): the partition commands and `migrate`
    /// talk to each node briefly.
    pub async fn connect(&self) -> Result<MySqlConnection, StoreError> {
        let options = connect_options(&self.url())?;
        options
            .connect()
            .await
            .map_err(|err| super::connect_failed(&options, &err))
    }
}

fn percent_decode(text: &str) -> Result<String, std::string::FromUtf8Error> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out)
}

/// Parse `LINKTRACK_SHARDS`: comma-separated node URLs. A bad entry is named
/// by its position (the password is never echoed).
pub fn parse_shards(list: &str) -> Result<Vec<NodeAddress>, StoreError> {
    let mut nodes: Vec<NodeAddress> = Vec::new();
    for (index, entry) in list.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let node = NodeAddress::parse(entry).map_err(|why| {
            StoreError::BadUrl(format!(
                "LINKTRACK_SHARDS entry {} ({}): {why}",
                index + 1,
                without_password(entry.trim())
            ))
        })?;
        if let Some(twice) = nodes.iter().find(|n| n.same_place(&node)) {
            return Err(StoreError::BadUrl(format!(
                "LINKTRACK_SHARDS names {twice} twice: each data node once"
            )));
        }
        nodes.push(node);
    }
    if nodes.is_empty() {
        return Err(StoreError::BadUrl(
            "LINKTRACK_SHARDS is set but names no data node".into(),
        ));
    }
    Ok(nodes)
}

/// `scheme://user:***@rest` for error messages.
fn without_password(entry: &str) -> String {
    match (entry.find("://"), entry.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let credentials = &entry[scheme + 3..at];
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{}{user}:***{}", &entry[..scheme + 3], &entry[at..])
        }
        _ => entry.to_owned(),
    }
}

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
fn by_node(placements: &[Placement]) -> Vec<(NodeAddress, String, Vec<String>)> {
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

/// Apply `policy` to every data table of every node. Each node is locked
/// with `GET_LOCK` on that node (a lock is per server, so runners from
/// several heads or machines still take turns per node). A node that fails
/// does not stop the others: the result names it after they are done.
pub(crate) async fn run_partitions(
    head: &mut MySqlConnection,
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
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
        let (node, server, result) = run
            .await
            .map_err(|e| StoreError::Refused(format!("a partition task failed: {e}")))?;
        match result {
            Ok(reports) => done.extend(reports),
            Err(err) => failed.push(NodeFailure {
                server,
                node,
                error: err.to_string(),
            }),
        }
    }
    if failed.is_empty() {
        Ok(done)
    } else {
        Err(StoreError::NodesFailed { done, failed })
    }
}

async fn run_on_node(
    node: &NodeAddress,
    server: &str,
    tables: &[String],
    policy: &Policy,
    options: &RunOptions,
) -> Result<Vec<TableReport>, StoreError> {
    let mut conn = node.connect().await?;
    let result = partitions::run_on(&mut conn, tables, policy, options).await;
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
    let days = partitions::list_on(&mut conn, &first.data_table).await;
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
                    days: partitions::list_on(&mut conn, table).await?,
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

/// `migrate` with `--shards`.
#[derive(Debug, Clone)]
pub struct ClusterMigrate {
    pub nodes: Vec<NodeAddress>,
    pub virtual_shards: u32,
    pub row_format: super::RowFormatOptions,
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
    let head = super::create_database_and_connect(head_url).await?;
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
    super::MIGRATOR.run(&head).await?;
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
    row_format: &super::RowFormatOptions,
) -> Result<Vec<String>, StoreError> {
    let pool = super::migrate(&node.url()).await?;
    let mut said = Vec::new();
    for line in super::set_row_format(&pool, row_format).await? {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shard_list_parses_and_names_a_bad_entry_without_its_password() {
        let nodes =
            parse_shards("mysql://root@127.0.0.1:3307/lt, mysql://u:p%40ss@db2/lt2").unwrap();
        assert_eq!(nodes.len(), 2);
        assert_eq!((nodes[0].port, nodes[0].database.as_str()), (3307, "lt"));
        assert_eq!((nodes[1].password.as_str(), nodes[1].port), ("p@ss", 3306));
        let err = parse_shards("mysql://root@a/lt,mysql://me:secret@b:3306")
            .unwrap_err()
            .to_string();
        assert!(err.contains("entry 2"), "{err}");
        assert!(err.contains("no database"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        assert!(parse_shards("http://a/b").is_err());
        assert!(parse_shards(" , ").is_err());
        assert!(parse_shards("mysql://a/x,mysql://a:3306/x").is_err());
    }

    #[test]
    fn a_node_url_round_trips() {
        let node = NodeAddress::parse("mysql://u:p%40ss@h:3310/db").unwrap();
        assert_eq!(NodeAddress::parse(&node.url()).unwrap(), node);
        assert_eq!(node.to_string(), "u@h:3310/db");
    }

    #[test]
    fn spider_comments_are_read() {
        let comment = r#"srv "lt_x_0", table "links_03""#;
        assert_eq!(spider_param(comment, "srv").as_deref(), Some("lt_x_0"));
        assert_eq!(spider_param(comment, "table").as_deref(), Some("links_03"));
        assert_eq!(spider_param(comment, "aim"), None);
        assert_eq!(data_table("events", 7), "events_07");
    }
}
