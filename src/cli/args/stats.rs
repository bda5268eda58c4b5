//! Flags of `stats`.

use super::serve::{LiveArgs, VerdictArgs};
use clap::{Args, Subcommand};

#[derive(Debug, Subcommand)]
pub enum StatsCommand {
    /// Roll pending events into the statistics tables (each event exactly
    /// once; safe to run beside other rollup workers), once or --every SECS.
    Rollup(RollupArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RollupArgs {
    /// Events per transaction.
    #[arg(long, default_value_t = 50_000, value_name = "N")]
    pub batch: u32,
    /// Keep running: roll up again every SECS seconds (a worker process of
    /// its own, beside the server's event writer). Without it: once.
    #[arg(long, value_name = "SECS")]
    pub every: Option<u64>,
    /// 0 trusts a single event writer. With several, roll only events whose
    /// id was visible at least this long ago (longer than any writer's
    /// transaction); a one-shot run then only records a first observation.
    #[arg(
        long,
        env = "LINKTRACK_ROLLUP_SETTLE_MS",
        default_value_t = 0,
        value_name = "MS"
    )]
    pub settle_ms: u64,
    #[command(flatten)]
    pub verdicts: VerdictArgs,
    #[command(flatten)]
    pub live: LiveArgs,
}
