//! Runs the parsed command line. Each subcommand is a small function that
//! calls the library and prints what it did, one line per action.
//!
//! Its files are listed in the crate docs' Layout (`src/lib.rs`).

#[macro_use]
mod output;

pub mod args;
mod bounces;
mod connect;
mod database;
mod domains;
mod exit_status;
mod export;
mod keys;
mod links;
mod logging;
mod mailing;
mod relay;
mod secrets;
mod serve;
mod webhooks;

pub use exit_status::EXIT_REJECTED;
pub use output::{out_line, StdoutClosed};

use args::database::{PartitionsCommand, ShardsCommand};
use args::mailing::StatsCommand;
use args::webhooks::WebhooksCommand;
use args::{Cli, Command};
use logging::init_tracing;
use std::process::ExitCode;

/// Set up logging and run one command. A closed standard output (the
/// reader of a pipe has all it wanted) ends the command with success.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    init_tracing(cli.global.log_json);
    match run_command(cli).await {
        Err(err) if err.downcast_ref::<StdoutClosed>().is_some() => Ok(ExitCode::SUCCESS),
        other => other,
    }
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
        Command::Relay(args) => relay::relay(url, &args).await?,
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
        Command::Shards(ShardsCommand::Status(args)) => database::shards_status(url, &args).await?,
        Command::Shards(ShardsCommand::Rebalance(args)) => {
            database::shards_rebalance(url, cli.global.shards.as_deref(), &args).await?
        }
        Command::Secrets(command) => secrets::run(url, command).await?,
        Command::Domains(command) => domains::run(url, command).await?,
        Command::Links(args::links::LinksCommand::List(args)) => links::list(url, &args).await?,
        Command::Links(args::links::LinksCommand::Repoint(args)) => {
            links::repoint(url, &args).await?
        }
        Command::Keys(command) => keys::run(url, command).await?,
        Command::Webhooks(WebhooksCommand::NewSecret) => {
            say!("{}", crate::outbound::signature::Secret::generate())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
