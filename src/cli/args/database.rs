//! Flags of the database commands, the ones `cli/database.rs` runs:
//! `migrate`, `partitions`, `shards`.

use crate::store::partitions::{DEFAULT_AHEAD_DAYS, DEFAULT_KEEP_DAYS};
use crate::store::RowFormat;
use clap::{Args, Subcommand};

#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Row format of `links` and `events`: page-compressed (least disk, fast
    /// inserts; needs a filesystem that punches holes, checked), compressed
    /// (half of dynamic's disk, slowest inserts), dynamic (fastest, largest).
    /// See docs/design.md "Storage". Empty tables switch at once; tables with rows
    /// only with --rebuild. Default: page-compressed for new tables.
    #[arg(long, value_parser = row_format_parser(), value_name = "FORMAT")]
    pub row_format: Option<RowFormat>,

    /// zlib level (1-9) of page-compressed tables on MariaDB (default: the
    /// server's innodb_compression_level).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9), value_name = "N")]
    pub page_compression_level: Option<u8>,

    /// Rebuild tables that already hold rows to --row-format (every
    /// partition is copied; migrate prints an estimate first).
    #[arg(long, requires = "row_format")]
    pub rebuild: bool,

    /// With --shards: how many data tables (`links_NN`, `events_NN`) the
    /// head's Spider tables spread over the data nodes. Odd (KEY hashing of
    /// UUIDv7 is skewed with even counts); fixed at the first migrate.
    #[arg(long, default_value_t = crate::store::cluster::DEFAULT_VIRTUAL_SHARDS, value_name = "N")]
    pub virtual_shards: u32,
}

/// `--row-format`: the storage layer names the formats; clap lists them.
fn row_format_parser() -> impl clap::builder::TypedValueParser<Value = RowFormat> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(RowFormat::NAMES)
        .try_map(|name| name.parse::<RowFormat>())
}

#[derive(Debug, Subcommand)]
pub enum PartitionsCommand {
    /// Create every missing daily partition from today (UTC) to today + N.
    Ensure(EnsureArgs),
    /// Drop partitions older than the retention window, then ensure ahead.
    /// Meant for a daily cron; safe to run concurrently and repeatedly.
    Rotate(RotateArgs),
    /// Show each table's partitions: day and approximate row count.
    List,
}

#[derive(Debug, Clone, Args)]
pub struct EnsureArgs {
    /// Days after today to create partitions for.
    #[arg(long, env = "LINKTRACK_AHEAD_DAYS", default_value_t = DEFAULT_AHEAD_DAYS, value_name = "DAYS")]
    pub ahead_days: u32,
}

#[derive(Debug, Clone, Args)]
pub struct RotateArgs {
    /// Keep this many days before today; partitions whose every day is older are dropped.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", default_value_t = DEFAULT_KEEP_DAYS, value_name = "DAYS")]
    pub keep_days: u32,

    /// Days after today to create partitions for.
    #[arg(long, env = "LINKTRACK_AHEAD_DAYS", default_value_t = DEFAULT_AHEAD_DAYS, value_name = "DAYS")]
    pub ahead_days: u32,

    /// Print the DDL that would run and change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Refuse to drop more than this many partitions of one table in one run
    /// (the days ahead are still created; the run exits 1).
    #[arg(long, default_value_t = 7, value_name = "N")]
    pub max_drop: usize,

    /// Drop even when the plan exceeds --max-drop.
    #[arg(long)]
    pub force: bool,

    /// Seconds to wait for another runner to finish before giving up.
    #[arg(long, default_value_t = 30, value_name = "SECS")]
    pub lock_wait_secs: u64,
}

#[derive(Debug, Subcommand)]
pub enum ShardsCommand {
    /// Move data tables (`links_07`, `events_07`, …) to another data node:
    /// copy, check count and checksum, repoint the head, keep the old copy
    /// renamed `moved_…`. Writes to the head's table wait while a table is
    /// copied; lookups go on.
    Move(ShardsMoveArgs),
    /// Move data tables until every node of LINKTRACK_SHARDS holds an even
    /// share (after adding a node to LINKTRACK_SHARDS and running migrate);
    /// tables on nodes left out of LINKTRACK_SHARDS move away.
    Rebalance(ShardsRebalanceArgs),
    /// One line per data node: its Spider server and address, reachable or
    /// not (and why), its data tables, the link and event rows and the days
    /// they hold, and the replay's lag there (how long ago the last event
    /// stored on it happened). Exits 1 when a node cannot be read, after
    /// the others' lines (docs/scaling.md, "Watching the nodes").
    Status(ShardsStatusArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ShardsMoveArgs {
    /// The data tables to move, e.g. links_07 events_07.
    #[arg(required = true, value_name = "DATA_TABLE")]
    pub tables: Vec<String>,

    /// The node to move them to: its Spider server name (`partitions list`
    /// shows them) or its URL as in LINKTRACK_SHARDS.
    #[arg(long, value_name = "SERVER|URL")]
    pub to: String,
}

#[derive(Debug, Clone, Args)]
pub struct ShardsStatusArgs {
    /// Count the rows (`COUNT(*)` of every data table: a scan) instead of
    /// printing InnoDB's estimates (`~`).
    #[arg(long)]
    pub exact: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ShardsRebalanceArgs {
    /// Print the moves and make none.
    #[arg(long)]
    pub dry_run: bool,
}
