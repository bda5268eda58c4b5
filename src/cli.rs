//! Runs the parsed command line. Each subcommand is a small function that
//! calls the library and prints what it did, one line per action.

use crate::config::{Cli, Command, EnsureArgs, MigrateArgs, PartitionsCommand, RotateArgs};
use crate::store::{self, partitions};
use anyhow::Context;
use chrono::Utc;
use std::time::Duration;

/// Set up logging and run one command.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    init_tracing(cli.global.log_json);
    let url = cli.global.database_url.as_str();
    match cli.command {
        Command::Migrate(args) => migrate(url, &args).await,
        Command::Partitions(PartitionsCommand::Ensure(args)) => ensure(url, &args).await,
        Command::Partitions(PartitionsCommand::Rotate(args)) => rotate(url, &args).await,
        Command::Partitions(PartitionsCommand::List) => list(url).await,
        Command::Serve(args) => serve(url, &args).await,
    }
}

fn init_tracing(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,sqlx=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second initialisation (tests calling `run` twice) is harmless.
    let _ = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}

async fn pool(url: &str) -> anyhow::Result<sqlx::MySqlPool> {
    store::connect(url, &store::PoolSettings::default())
        .await
        .context("connecting to DATABASE_URL (has `linktrack migrate` run?)")
}

async fn migrate(url: &str, args: &MigrateArgs) -> anyhow::Result<()> {
    let pool = store::migrate(url).await?;
    let applied: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM _sqlx_migrations WHERE success = 1")
            .fetch_one(&pool)
            .await?;
    println!("migrate: schema is current ({applied} migrations applied)");
    if let Some(format) = args.row_format {
        for line in store::set_row_format(&pool, format).await? {
            println!("migrate: {line}");
        }
    }
    Ok(())
}

async fn ensure(url: &str, args: &EnsureArgs) -> anyhow::Result<()> {
    let policy = partitions::Policy {
        today: Utc::now().date_naive(),
        ahead_days: args.ahead_days,
        keep_days: None,
    };
    apply(url, &policy, &partitions::RunOptions::default()).await
}

async fn rotate(url: &str, args: &RotateArgs) -> anyhow::Result<()> {
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
    apply(url, &policy, &options).await
}

async fn apply(
    url: &str,
    policy: &partitions::Policy,
    options: &partitions::RunOptions,
) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    for report in partitions::run(&pool, policy, options).await? {
        println!("{report}");
    }
    Ok(())
}

async fn list(url: &str) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    for table in partitions::PARTITIONED_TABLES {
        for p in partitions::list(&pool, table).await? {
            println!(
                "{table}\t{}\t{}\t~{} rows",
                p.name,
                p.last_day(),
                p.approx_rows
            );
        }
    }
    Ok(())
}

async fn serve(url: &str, args: &crate::config::ServeArgs) -> anyhow::Result<()> {
    use crate::events::journal::JournalSettings;
    use crate::server::{state::ServerSettings, Server};
    let pool_settings = store::PoolSettings {
        max_connections: args.db_connections,
        acquire_timeout: Duration::from_millis(args.db_timeout_ms),
    };
    // Connect lazily: the server starts (pixels, journal, health) even while
    // the database is down, and catches up once it is back.
    let pool = store::connect_lazy(url, &pool_settings)?;
    let settings = ServerSettings {
        keep_days: args.keep_days,
        base_url: args.tracking.base_url.clone(),
        db_timeout: pool_settings.acquire_timeout,
        trust_forwarded_for: args.trust_forwarded_for,
        ..ServerSettings::default()
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let server = Server::start(
        listener,
        pool,
        settings,
        JournalSettings::new(&args.journal),
    )
    .await
    .context("starting the server")?;
    tracing::info!(listen = %server.local_addr()?, base_url = %args.tracking.base_url, "serving");
    server.run(crate::server::shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}
