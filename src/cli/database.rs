//! The storage commands: `migrate`, `partitions`, `shards`.

use super::args::database::{
    EnsureArgs, MigrateArgs, RotateArgs, ShardsMoveArgs, ShardsRebalanceArgs, ShardsStatusArgs,
};
use super::connect::pool;
use super::output::counted;
use crate::store::{self, partitions};
use anyhow::Context;
use chrono::Utc;
use std::time::Duration;

pub(super) async fn migrate(url: &str, args: &MigrateArgs) -> anyhow::Result<()> {
    let pool = store::migrate(url).await?;
    let applied = store::applied_migrations(&pool).await?;
    say!("migrate: schema is current ({applied} migrations applied)")?;
    // Without --row-format, new (empty) tables get the default format and
    // tables holding rows are left as they are, with a note.
    for line in store::set_row_format(&pool, &row_format_options(args)).await? {
        say!("migrate: {line}")?;
    }
    Ok(())
}

/// The row format `migrate` asks for (see [`migrate`]).
fn row_format_options(args: &MigrateArgs) -> store::RowFormatOptions {
    store::RowFormatOptions {
        format: args.row_format.unwrap_or(store::DEFAULT_ROW_FORMAT),
        level: args.page_compression_level,
        rebuild: args.rebuild,
    }
}

/// `migrate` with LINKTRACK_SHARDS: the head and its data nodes.
pub(super) async fn migrate_cluster(
    url: &str,
    shards: &str,
    args: &MigrateArgs,
) -> anyhow::Result<()> {
    let plan = store::cluster::ClusterMigrate {
        nodes: store::cluster::parse_shards(shards)?,
        virtual_shards: args.virtual_shards,
        row_format: row_format_options(args),
    };
    for line in store::cluster::migrate(url, &plan).await? {
        say!("migrate: {line}")?;
    }
    say!("migrate: the cluster's schema is current")?;
    Ok(())
}

pub(super) async fn ensure(url: &str, args: &EnsureArgs) -> anyhow::Result<()> {
    let policy = partitions::Policy {
        today: Utc::now().date_naive(),
        ahead_days: args.ahead_days,
        keep_days: None,
    };
    apply(url, &policy, &partitions::RunOptions::default()).await
}

pub(super) async fn rotate(url: &str, args: &RotateArgs) -> anyhow::Result<()> {
    let policy = partitions::Policy {
        today: Utc::now().date_naive(),
        ahead_days: args.ahead_days,
        keep_days: Some(args.keep_days),
    };
    let options = partitions::RunOptions {
        max_drop: args.max_drop,
        force: args.force,
        dry_run: args.dry_run,
        lock_wait: Duration::from_secs(args.lock_wait_secs),
        ..partitions::RunOptions::default()
    };
    apply(url, &policy, &options).await?;
    if !args.dry_run {
        // For the "rotate not run in 26 h" alert (docs/deploy.md).
        let pool = pool(url).await?;
        store::maintenance::record_success(&pool, store::maintenance::ROTATE).await?;
    }
    Ok(())
}

async fn apply(
    url: &str,
    policy: &partitions::Policy,
    options: &partitions::RunOptions,
) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    // On a cluster: what the reachable nodes did is said before the run
    // fails naming the others.
    let run = partitions::run_each_node(&pool, policy, options).await?;
    for report in &run.done {
        say!("{report}")?;
    }
    // A refusal to drop still added the days ahead; it fails the run.
    let refusal = partitions::refusals(&run.done);
    run.into_result()?;
    match refusal {
        Some(refusal) => Err(refusal.into()),
        None => Ok(()),
    }
}

pub(super) async fn list(url: &str) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    if is_head(&pool).await? {
        return list_cluster(&pool).await;
    }
    for table in partitions::PARTITIONED_TABLES {
        for p in partitions::list(&pool, table).await? {
            say!(
                "{table}\t{}\t{}\t~{}",
                p.name,
                p.last_day(),
                counted(p.approx_rows, "row", "rows")
            )?;
        }
    }
    Ok(())
}

async fn is_head(pool: &sqlx::MySqlPool) -> anyhow::Result<bool> {
    let mut conn = pool.acquire().await?;
    Ok(store::cluster::is_head(&mut conn).await?)
}

/// `partitions list` on a Spider head: node, data table, partition, day, rows.
async fn list_cluster(pool: &sqlx::MySqlPool) -> anyhow::Result<()> {
    let (tables, failed) = store::partitions::list_all(pool).await?;
    for table in tables {
        for p in table.days {
            say!(
                "{}\t{}\t{}\t{}\t~{}",
                table.server,
                table.data_table,
                p.name,
                p.last_day(),
                counted(p.approx_rows, "row", "rows")
            )?;
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    Err(store::StoreError::NodesFailed { failed }.into())
}

/// `shards move`: each table in turn; the first failure stops (the tables
/// moved before it stay moved, the failed one stays where it was).
pub(super) async fn shards_move(url: &str, args: &ShardsMoveArgs) -> anyhow::Result<()> {
    let pool = head_pool(url).await?;
    let mut conn = pool.acquire().await?;
    let (server, node) = store::shard_move::resolve_node(&mut conn, &args.to).await?;
    drop(conn);
    for table in &args.tables {
        let outcome = store::shard_move::move_table(&pool, table, &server, &node)
            .await
            .with_context(|| format!("moving {table} to {server}"))?;
        say!("shards: {outcome}")?;
    }
    Ok(())
}

/// `shards rebalance`: plan from the head's placements and LINKTRACK_SHARDS,
/// then move table by table.
pub(super) async fn shards_rebalance(
    url: &str,
    shards: Option<&str>,
    args: &ShardsRebalanceArgs,
) -> anyhow::Result<()> {
    let shards = shards.context(
        "shards rebalance spreads the data tables over the nodes of LINKTRACK_SHARDS \
         (--shards): set it",
    )?;
    let pool = head_pool(url).await?;
    let mut conn = pool.acquire().await?;
    let mut servers = Vec::new();
    for node in store::cluster::parse_shards(shards)? {
        servers.push(store::shard_move::resolve_node(&mut conn, &node.url()?).await?);
    }
    let placements = store::cluster::placements(&mut conn).await?;
    drop(conn);
    let names: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
    let plan = store::shard_move::rebalance_plan(&placements, &names);
    if plan.is_empty() {
        say!("shards: balanced, nothing to move")?;
    }
    for (table, to) in plan {
        if args.dry_run {
            say!("shards: would move {table} to {to}")?;
            continue;
        }
        let node = servers
            .iter()
            .find(|(name, _)| *name == to)
            .map(|(_, node)| node.clone())
            .context("a planned server vanished")?;
        let outcome = store::shard_move::move_table(&pool, &table, &to, &node)
            .await
            .with_context(|| format!("moving {table} to {to}"))?;
        say!("shards: {outcome}")?;
    }
    Ok(())
}

/// `shards status`: a line per data node; exits 1 naming the nodes that
/// could not be read, after every line.
pub(super) async fn shards_status(url: &str, args: &ShardsStatusArgs) -> anyhow::Result<()> {
    let pool = head_pool(url).await?;
    let mut conn = pool.acquire().await?;
    let nodes = store::cluster::node_status(&mut conn, args.exact).await?;
    drop(conn);
    let now = chrono::Utc::now();
    let mut unreachable = Vec::new();
    for status in &nodes {
        let tables = counted(status.tables.len() as u64, "data table", "data tables");
        let held = match &status.held {
            Ok(held) => format!("reachable\t{tables}\t{}", held_text(held, now)),
            Err(why) => {
                unreachable.push(format!("{} ({})", status.server, status.node));
                format!("unreachable: {why}\t{tables}")
            }
        };
        say!("{}\t{}\t{held}", status.server, status.node)?;
    }
    if unreachable.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "{} of {} data nodes could not be read: {}",
        unreachable.len(),
        nodes.len(),
        unreachable.join(", ")
    )
}

/// "links 813 rows\tevents 104 rows\t7 days 2026-11-26..2026-12-02\treplay lag 3 s (…)".
fn held_text(held: &store::cluster::Held, now: chrono::DateTime<chrono::Utc>) -> String {
    let about = if held.exact { "" } else { "~" };
    let days = match (held.days.first(), held.days.last()) {
        (Some(first), Some(last)) => format!(
            "{} {first}..{last}",
            counted(held.days.len() as u64, "day", "days")
        ),
        _ => "0 days".to_owned(),
    };
    let lag = match held.last_event {
        Some((id, at)) => format!(
            "replay lag {} s (last event stored: id {id}, at {})",
            (now - at).num_seconds().max(0),
            at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
        None => "replay lag: no event stored".to_owned(),
    };
    format!(
        "links {about}{}\tevents {about}{}\t{days}\t{lag}",
        counted(held.link_rows, "row", "rows"),
        counted(held.event_rows, "row", "rows"),
    )
}

/// A pool on a Spider head, or a clear refusal on a single server.
async fn head_pool(url: &str) -> anyhow::Result<sqlx::MySqlPool> {
    let pool = pool(url).await?;
    if !is_head(&pool).await? {
        anyhow::bail!(
            "DATABASE_URL is not a Spider head (its `links` is a plain table): `shards` \
             acts on a cluster (docs/scaling.md)"
        );
    }
    Ok(pool)
}
