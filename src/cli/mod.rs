//! Runs the parsed command line. Each subcommand is a small function that
//! calls the library and prints what it did, one line per action.
//!
//! Its files are listed in the crate docs' Layout (`src/lib.rs`).

/// `println!` for commands: one line to standard output, as an
/// `anyhow::Result` to `?` (see [`out_line`]), so that a reader closing
/// the pipe (`linktrack suppressions list | head -1`) ends the command
/// quietly instead of panicking.
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::out_line(format_args!($($arg)*))
    };
}

pub mod args;
mod bounces;
mod database;
mod domains;
mod export;
mod mailing;
mod secrets;
mod serve;
mod webhooks;

use crate::live::Live;
use crate::store;
use anyhow::Context;
use args::database::{PartitionsCommand, ShardsCommand};
use args::serve::LiveArgs;
use args::stats::StatsCommand;
use args::webhooks::WebhooksCommand;
use args::{Cli, Command};
use std::process::ExitCode;

/// Exit status of a build that rejected some recipients.
pub const EXIT_REJECTED: u8 = 2;

/// Set up logging and run one command. A closed standard output (the
/// reader of a pipe has all it wanted) ends the command with success.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    init_tracing(cli.global.log_json);
    match run_command(cli).await {
        Err(err) if err.downcast_ref::<StdoutClosed>().is_some() => Ok(ExitCode::SUCCESS),
        other => other,
    }
}

/// Standard output's reader went away (`EPIPE`): nobody wants the rest.
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Write one line to standard output. A broken pipe is [`StdoutClosed`],
/// which [`run`] turns into a quiet exit 0; only the command's own output
/// goes through here, so a broken pipe to the database or an MTA is never
/// mistaken for it.
pub fn out_line(line: std::fmt::Arguments<'_>) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_fmt(line)
        .and_then(|()| stdout.write_all(b"\n"))
    {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::BrokenPipe => Err(StdoutClosed.into()),
        Err(err) => Err(anyhow::Error::new(err).context("writing to standard output")),
    }
}

/// "1 address", "2 addresses": a count with its noun in the right number.
pub(crate) fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

async fn run_command(cli: Cli) -> anyhow::Result<ExitCode> {
    let url = cli.global.database_url.as_str();
    match cli.command {
        Command::Migrate(args) => match cli.global.shards.as_deref() {
            Some(shards) => database::migrate_cluster(url, shards, &args).await?,
            None => database::migrate(url, &args).await?,
        },
        Command::Partitions(PartitionsCommand::Ensure(args)) => {
            database::ensure(url, &args).await?
        }
        Command::Partitions(PartitionsCommand::Rotate(args)) => {
            database::rotate(url, &args).await?
        }
        Command::Partitions(PartitionsCommand::List) => database::list(url).await?,
        Command::Build(args) => return mailing::build(url, &args).await,
        Command::Suppressions(command) => return mailing::suppressions(url, command).await,
        Command::Bounces(command) => return bounces::run(url, command).await,
        Command::TrackingOptouts(command) => return mailing::tracking_optouts(url, command).await,
        Command::Serve(args) => serve::serve(url, &args).await?,
        Command::Demo(args) => serve::demo(url, &args).await?,
        Command::Erase(args) => mailing::erase(url, &args).await?,
        Command::Segment(args) => mailing::segment(url, &args).await?,
        Command::Stats(StatsCommand::Rollup(args)) => mailing::rollup(url, &args).await?,
        Command::Export(args::export::ExportCommand::Recipients(args)) => {
            export::recipients(url, &args).await?
        }
        Command::Webhooks(WebhooksCommand::List(args)) => {
            webhooks::webhooks_list(url, &args.outbound).await?
        }
        Command::Webhooks(WebhooksCommand::Test(args)) => {
            return webhooks::webhooks_test(&args).await
        }
        Command::Webhooks(WebhooksCommand::Replay(args)) => {
            webhooks::webhooks_replay(url, &args).await?
        }
        Command::Shards(ShardsCommand::Move(args)) => database::shards_move(url, &args).await?,
        Command::Shards(ShardsCommand::Rebalance(args)) => {
            database::shards_rebalance(url, cli.global.shards.as_deref(), &args).await?
        }
        Command::Secrets(command) => secrets::run(url, command).await?,
        Command::Domains(command) => domains::run(url, command).await?,
        Command::Webhooks(WebhooksCommand::NewSecret) => {
            say!("{}", crate::outbound::signature::Secret::generate())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(log_colour(
            std::io::IsTerminal::is_terminal(&std::io::stderr()),
            std::env::var_os("NO_COLOR"),
        ))
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling `run` twice) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

/// Colour codes only on a terminal, and never when `NO_COLOR` is set to
/// anything (<https://no-color.org>): a log file or a pipe gets plain text.
fn log_colour(stderr_is_terminal: bool, no_color: Option<std::ffi::OsString>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|value| value.is_empty())
}

async fn pool(url: &str) -> anyhow::Result<sqlx::MySqlPool> {
    // The error names host, port, user and database, and how to fix it.
    Ok(store::connect(url, &store::PoolSettings::default()).await?)
}

/// The live layer the flags ask for, if any.
fn live_layer(args: &LiveArgs) -> anyhow::Result<Option<Live>> {
    args.redis_url
        .as_deref()
        .filter(|u| !u.is_empty())
        .map(|url| Live::new(url, &args.redis_prefix).context("REDIS_URL"))
        .transpose()
}
