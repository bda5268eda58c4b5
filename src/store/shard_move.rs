//! Moving a data table of a Spider cluster to another node (`linktrack
//! shards move`, `linktrack shards rebalance`): how a cluster grows.
//!
//! One move, of `links_07` from node A to node B:
//!
//! 1. B gets an empty `links_07` made from A's `SHOW CREATE TABLE` (the same
//!    columns, row format and day partitions), and the head a spare Spider
//!    table `links_moving`: the head's `links` with that one partition's
//!    comment naming B.
//! 2. **Writes pause**: `FLUSH TABLES links WITH READ LOCK` on the head. It
//!    blocks every write to the head's `links` (all its data tables, not
//!    only the moving one) at the head's metadata lock; lookups and
//!    redirects go on. Writers wait, they do not fail: the builder's batch
//!    and the event writer's insert continue when the pause ends.
//! 3. The rows are copied from A to B in primary-key order, then checked:
//!    row count and `CHECKSUM TABLE` must be equal on both.
//! 4. A second head connection queues `RENAME TABLE links TO links_retired,
//!    links_moving TO links`; once it waits on the lock, the pause ends. A
//!    queued exclusive lock is granted before the writers that waited
//!    behind the pause, so no write reaches A's copy after it was copied
//!    (checked: A's row count is compared again afterwards).
//! 5. The retired Spider table is dropped (a Spider table holds no rows;
//!    dropping it drops nothing on the nodes) and A's copy is renamed to
//!    `moved_links_07`: kept, outside the cluster, until the operator drops
//!    it. Nothing is ever dropped on a data node.
//!
//! A failure before step 4 leaves the head reading A, as before; B's
//! partial copy is named in the error (drop it, run again).

use super::cluster::{self, NodeAddress, Placement};
use super::error::StoreError;
use sqlx::mysql::MySqlConnection;
use sqlx::{Connection, MySqlPool};
use std::time::{Duration, Instant};

/// Rows per copy statement: 500 rows of a few hundred bytes each, small
/// enough for the packet limit even with long URLs.
const COPY_CHUNK: usize = 500;

/// How long the pause waits for running transactions on the head, and the
/// rename for its lock, before the move gives up (nothing changed then).
const LOCK_WAIT: Duration = Duration::from_secs(60);

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
        let node =
            NodeAddress::parse(to).map_err(|why| StoreError::BadUrl(format!("--to: {why}")))?;
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

    let pause_started = Instant::now();
    let mut pause = pool.acquire().await?.detach();
    lock_wait(&mut pause).await?;
    sqlx::query(&format!("FLUSH TABLES `{}` WITH READ LOCK", from.table))
        .execute(&mut pause)
        .await?;
    let rows = copy_rows(&mut source, &mut target, data_table).await?;
    check_copy(&mut source, &mut target, data_table, to_server, to_node).await?;
    swap_in(pool, &mut pause, &from.table, &spare).await?;
    let paused = pause_started.elapsed();
    let _ = pause.close().await;

    sqlx::query(&format!("DROP TABLE `{}`", retired_name(&from.table)))
        .execute(&mut head)
        .await?;
    retire_old_copy(&mut source, data_table, &old_copy, rows).await?;
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

async fn table_exists(conn: &mut MySqlConnection, table: &str) -> Result<bool, StoreError> {
    let found: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(found.is_some())
}

async fn engine_of(conn: &mut MySqlConnection, table: &str) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT CAST(ENGINE AS CHAR) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await?)
}

async fn show_create(conn: &mut MySqlConnection, table: &str) -> Result<String, StoreError> {
    let (_, ddl): (String, String) = sqlx::query_as(&format!("SHOW CREATE TABLE `{table}`"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(ddl)
}

async fn count_rows(conn: &mut MySqlConnection, table: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM `{table}`"))
        .fetch_one(&mut *conn)
        .await?;
    Ok(n as u64)
}

/// The empty table on the new node, made as the old node has it. An empty
/// table of that name there is a leftover of an interrupted move (the head
/// never read it) and is made again; one holding rows is refused.
async fn make_target_table(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    data_table: &str,
    to_server: &str,
    to_node: &NodeAddress,
) -> Result<(), StoreError> {
    if table_exists(target, data_table).await? {
        let rows = count_rows(target, data_table).await?;
        if rows > 0 {
            return Err(StoreError::Refused(format!(
                "{to_server} ({to_node}) already has a `{data_table}` holding {rows} rows, which \
                 the head does not read (a copy left by an interrupted move?): check it and drop \
                 it there, then run the move again"
            )));
        }
        sqlx::query(&format!("DROP TABLE `{data_table}`"))
            .execute(&mut *target)
            .await?;
    }
    let ddl = show_create(source, data_table).await?;
    sqlx::query(&ddl).execute(&mut *target).await?;
    Ok(())
}

/// `links_moving`: the head's table with `from`'s partition pointing at
/// the new server. Leftover spare or retired Spider tables of an
/// interrupted move are dropped first (they hold no rows).
async fn prepare_spare_table(
    head: &mut MySqlConnection,
    from: &Placement,
    to_server: &str,
) -> Result<String, StoreError> {
    let spare = format!("{}_moving", from.table);
    for leftover in [spare.clone(), retired_name(&from.table)] {
        match engine_of(head, &leftover).await? {
            None => {}
            Some(engine) if engine.eq_ignore_ascii_case("spider") => {
                sqlx::query(&format!("DROP TABLE `{leftover}`"))
                    .execute(&mut *head)
                    .await?;
            }
            Some(engine) => {
                return Err(StoreError::Refused(format!(
                    "the head has a table `{leftover}` ({engine}) in the way of the move: \
                     rename it"
                )))
            }
        }
    }
    let ddl = show_create(head, &from.table).await?;
    let ddl = spare_ddl(
        &ddl,
        &from.table,
        &spare,
        &from.server,
        to_server,
        &from.data_table,
    )?;
    sqlx::query(&ddl).execute(&mut *head).await?;
    Ok(spare)
}

/// The head's `CREATE TABLE` renamed to `spare`, with the one partition
/// comment naming `data_table` on `from_server` now naming `to_server`.
fn spare_ddl(
    ddl: &str,
    table: &str,
    spare: &str,
    from_server: &str,
    to_server: &str,
    data_table: &str,
) -> Result<String, StoreError> {
    let create = format!("CREATE TABLE `{table}`");
    let old = format!("srv \"{from_server}\", table \"{data_table}\"");
    if !ddl.starts_with(&create) || ddl.matches(&old).count() != 1 {
        return Err(StoreError::Corrupt {
            table: "links",
            detail: format!(
                "the head's `{table}` definition does not have exactly one partition comment \
                 {old:?}; move refused"
            ),
        });
    }
    let new = format!("srv \"{to_server}\", table \"{data_table}\"");
    Ok(ddl
        .replacen(&create, &format!("CREATE TABLE `{spare}`"), 1)
        .replacen(&old, &new, 1))
}

fn retired_name(table: &str) -> String {
    format!("{table}_retired")
}

async fn lock_wait(conn: &mut MySqlConnection) -> Result<(), StoreError> {
    sqlx::query(&format!(
        "SET SESSION lock_wait_timeout = {}",
        LOCK_WAIT.as_secs()
    ))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Copy every row in primary-key order `(id, inserted)`. Each value goes
/// as its hexadecimal text and comes back through `UNHEX`, so every column
/// type is carried byte for byte without this code knowing the columns.
async fn copy_rows(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    table: &str,
) -> Result<u64, StoreError> {
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(table)
    .fetch_all(&mut *source)
    .await?;
    let hex: Vec<String> = columns
        .iter()
        .map(|c| format!("HEX(CAST(`{c}` AS BINARY))"))
        .collect();
    let select = format!(
        "SELECT id, CAST(inserted AS CHAR), {} FROM `{table}` \
         WHERE id > ? OR (id = ? AND inserted > ?) ORDER BY id, inserted LIMIT {COPY_CHUNK}",
        hex.join(", ")
    );
    let names: Vec<String> = columns.iter().map(|c| format!("`{c}`")).collect();
    let row_values = format!("({})", vec!["UNHEX(?)"; columns.len()].join(", "));
    let mut after: (u64, String) = (0, "0000-00-00".to_owned());
    let mut copied = 0u64;
    loop {
        let rows: Vec<sqlx::mysql::MySqlRow> = sqlx::query(&select)
            .bind(after.0)
            .bind(after.0)
            .bind(&after.1)
            .fetch_all(&mut *source)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(copied);
        };
        use sqlx::Row;
        after = (last.try_get(0)?, last.try_get(1)?);
        let insert = format!(
            "INSERT INTO `{table}` ({}) VALUES {}",
            names.join(", "),
            vec![row_values.as_str(); rows.len()].join(", ")
        );
        let mut query = sqlx::query(&insert);
        for row in &rows {
            for n in 0..columns.len() {
                query = query.bind(row.try_get::<Option<String>, _>(n + 2)?);
            }
        }
        copied += query.execute(&mut *target).await?.rows_affected();
    }
}

/// The copy must have the old node's row count and `CHECKSUM TABLE`.
async fn check_copy(
    source: &mut MySqlConnection,
    target: &mut MySqlConnection,
    table: &str,
    to_server: &str,
    to_node: &NodeAddress,
) -> Result<(), StoreError> {
    let old = (
        count_rows(source, table).await?,
        checksum(source, table).await?,
    );
    let new = (
        count_rows(target, table).await?,
        checksum(target, table).await?,
    );
    if old == new {
        return Ok(());
    }
    Err(StoreError::Refused(format!(
        "the copy of {table} on {to_server} ({to_node}) differs from the original: {} rows, \
         checksum {:?} against {} rows, checksum {:?}. The head still reads the original; \
         drop `{table}` on {to_server} and run the move again",
        new.0, new.1, old.0, old.1
    )))
}

async fn checksum(conn: &mut MySqlConnection, table: &str) -> Result<Option<i64>, StoreError> {
    let (_, sum): (String, Option<i64>) =
        sqlx::query_as(&format!("CHECKSUM TABLE `{table}` EXTENDED"))
            .fetch_one(&mut *conn)
            .await?;
    Ok(sum)
}

/// Swap the spare table in while writes are paused: the rename is queued
/// behind the pause on another connection, then the pause ends, and the
/// rename (a waiting exclusive lock goes before waiting writers) runs
/// before any writer.
async fn swap_in(
    pool: &MySqlPool,
    pause: &mut MySqlConnection,
    table: &str,
    spare: &str,
) -> Result<(), StoreError> {
    let mut renamer = pool.acquire().await?.detach();
    lock_wait(&mut renamer).await?;
    let id: u64 = sqlx::query_scalar("SELECT CONNECTION_ID()")
        .fetch_one(&mut renamer)
        .await?;
    let rename = format!(
        "RENAME TABLE `{table}` TO `{}`, `{spare}` TO `{table}`",
        retired_name(table)
    );
    let renaming = tokio::spawn(async move {
        let done = sqlx::query(&rename).execute(&mut renamer).await;
        let _ = renamer.close().await;
        done
    });
    let queued = wait_until_queued(pause, id, &renaming).await;
    if queued.is_err() && !renaming.is_finished() {
        let _ = sqlx::query(&format!("KILL QUERY {id}"))
            .execute(&mut *pause)
            .await;
    }
    sqlx::query("UNLOCK TABLES").execute(&mut *pause).await?;
    queued?;
    renaming
        .await
        .map_err(|e| StoreError::Refused(format!("the rename task failed: {e}")))??;
    Ok(())
}

/// Wait until connection `id` waits for a metadata lock.
async fn wait_until_queued(
    conn: &mut MySqlConnection,
    id: u64,
    renaming: &tokio::task::JoinHandle<Result<sqlx::mysql::MySqlQueryResult, sqlx::Error>>,
) -> Result<(), StoreError> {
    let deadline = Instant::now() + LOCK_WAIT;
    while Instant::now() < deadline {
        let state: Option<String> = sqlx::query_scalar(
            "SELECT CAST(STATE AS CHAR) FROM information_schema.PROCESSLIST WHERE ID = ?",
        )
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
        if state.is_some_and(|s| s.contains("metadata lock")) {
            return Ok(());
        }
        if renaming.is_finished() {
            return Err(StoreError::Refused(
                "the head's rename ended before the pause did: move abandoned".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(StoreError::Refused(format!(
        "the head's rename did not queue within {LOCK_WAIT:?}: move abandoned"
    )))
}

/// Rename the old node's copy out of the cluster's names, after checking
/// nothing was written to it since it was copied.
async fn retire_old_copy(
    source: &mut MySqlConnection,
    table: &str,
    old_copy: &str,
    copied: u64,
) -> Result<(), StoreError> {
    sqlx::query(&format!("RENAME TABLE `{table}` TO `{old_copy}`"))
        .execute(&mut *source)
        .await?;
    let now = count_rows(source, old_copy).await?;
    if now != copied {
        return Err(StoreError::Refused(format!(
            "`{old_copy}` (the old copy) has {now} rows, {copied} were copied: rows were written \
             to it during the move; copy the difference to the new node by hand"
        )));
    }
    Ok(())
}

/// A plan that evens out the data tables of each kind over `servers`:
/// tables on servers not in the list move first (draining a node), then
/// the highest-numbered table of the fullest node goes to the emptiest
/// until no two nodes differ by more than one. Links and events plan alike,
/// so `links_NN` and `events_NN` stay together.
pub fn rebalance_plan(placements: &[Placement], servers: &[String]) -> Vec<(String, String)> {
    let mut moves = Vec::new();
    if servers.is_empty() {
        return moves;
    }
    for (kind, _) in cluster::SHARDED_TABLES {
        let mut held: Vec<Vec<String>> = vec![Vec::new(); servers.len()];
        let mut homeless = Vec::new();
        for p in placements.iter().filter(|p| p.table == kind) {
            match servers.iter().position(|s| *s == p.server) {
                Some(at) => held[at].push(p.data_table.clone()),
                None => homeless.push(p.data_table.clone()),
            }
        }
        let emptiest =
            |held: &Vec<Vec<String>>| (0..held.len()).min_by_key(|&n| held[n].len()).unwrap_or(0);
        for table in homeless {
            let to = emptiest(&held);
            held[to].push(table.clone());
            moves.push((table, servers[to].clone()));
        }
        loop {
            let to = emptiest(&held);
            let from = (0..held.len())
                .rev()
                .max_by_key(|&n| held[n].len())
                .unwrap_or(0);
            if held[from].len() <= held[to].len() + 1 {
                break;
            }
            held[from].sort();
            let Some(table) = held[from].pop() else { break };
            held[to].push(table.clone());
            moves.push((table, servers[to].clone()));
        }
    }
    moves
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(table: &str, n: u32, server: &str) -> Placement {
        Placement {
            table: table.into(),
            partition: format!("s{n:02}"),
            server: server.into(),
            data_table: cluster::data_table(table, n),
            node: NodeAddress::parse("mysql://root@h/db").unwrap(),
        }
    }

    #[test]
    fn a_third_node_gets_a_third_of_the_tables_links_and_events_alike() {
        let mut placements = Vec::new();
        for kind in ["links", "events"] {
            for n in 0..15 {
                placements.push(at(kind, n, ["a", "b"][n as usize % 2]));
            }
        }
        let servers: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let plan = rebalance_plan(&placements, &servers);
        assert_eq!(plan.len(), 10, "{plan:?}");
        assert!(plan.iter().all(|(_, to)| to == "c"), "{plan:?}");
        let links: Vec<&str> = plan
            .iter()
            .filter_map(|(t, _)| t.strip_prefix("links_"))
            .collect();
        let events: Vec<&str> = plan
            .iter()
            .filter_map(|(t, _)| t.strip_prefix("events_"))
            .collect();
        assert_eq!(links, events);
        assert!(rebalance_plan(&[at("links", 0, "a"), at("links", 1, "b")], &servers).is_empty());
    }

    #[test]
    fn a_node_left_out_is_drained() {
        let placements = [
            at("links", 0, "a"),
            at("links", 1, "gone"),
            at("links", 2, "b"),
        ];
        let plan = rebalance_plan(&placements, &["a".into(), "b".into()]);
        assert_eq!(plan, [("links_01".to_owned(), "a".to_owned())]);
    }

    #[test]
    fn the_spare_table_changes_one_partition_comment() {
        let ddl =
            "CREATE TABLE `links` (\n  `id` bigint\n) ENGINE=SPIDER PARTITION BY KEY (`uuid`)\n\
                   (PARTITION `s00` COMMENT = 'srv \"a\", table \"links_00\"' ENGINE = SPIDER,\n \
                   PARTITION `s01` COMMENT = 'srv \"b\", table \"links_01\"' ENGINE = SPIDER)";
        let spare = spare_ddl(ddl, "links", "links_moving", "b", "c", "links_01").unwrap();
        assert!(spare.starts_with("CREATE TABLE `links_moving`"), "{spare}");
        assert!(spare.contains("srv \"a\", table \"links_00\""), "{spare}");
        assert!(spare.contains("srv \"c\", table \"links_01\""), "{spare}");
        assert!(spare_ddl(ddl, "links", "links_moving", "a", "c", "links_01").is_err());
    }
}
