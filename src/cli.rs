//! Runs the parsed command line. Each subcommand is a small function that
//! calls the library and prints what it did, one line per action.

use crate::address;
use crate::build::{self, BuildOptions, Output};
use crate::config::{
    BuildArgs, Cli, Command, DemoArgs, EnsureArgs, EraseArgs, LiveArgs, MigrateArgs, OutboundArgs,
    PartitionsCommand, RollupArgs, RotateArgs, SegmentArgs, ServeArgs, ShardsCommand,
    ShardsMoveArgs, ShardsRebalanceArgs, StatsCommand, SuppressionsCommand, WebhooksCommand,
    WebhooksReplayArgs, WebhooksTestArgs,
};
use crate::live::{Live, SegmentQuery};
use crate::outbound::Outbound;
use crate::store::{self, partitions, suppressions};
use anyhow::Context;
use chrono::Utc;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// Exit status of a build that rejected some recipients.
pub const EXIT_REJECTED: u8 = 2;

/// Set up logging and run one command.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    init_tracing(cli.global.log_json);
    let url = cli.global.database_url.as_str();
    match cli.command {
        Command::Migrate(args) => match cli.global.shards.as_deref() {
            Some(shards) => migrate_cluster(url, shards, &args).await?,
            None => migrate(url, &args).await?,
        },
        Command::Partitions(PartitionsCommand::Ensure(args)) => ensure(url, &args).await?,
        Command::Partitions(PartitionsCommand::Rotate(args)) => rotate(url, &args).await?,
        Command::Partitions(PartitionsCommand::List) => list(url).await?,
        Command::Build(args) => return build(url, &args).await,
        Command::Suppressions(command) => suppressions(url, command).await?,
        Command::Serve(args) => serve(url, &args).await?,
        Command::Demo(args) => demo(url, &args).await?,
        Command::Erase(args) => erase(url, &args).await?,
        Command::Segment(args) => segment(url, &args).await?,
        Command::Stats(StatsCommand::Rollup(args)) => rollup(url, &args).await?,
        Command::Webhooks(WebhooksCommand::List(args)) => {
            webhooks_list(url, &args.outbound).await?
        }
        Command::Webhooks(WebhooksCommand::Test(args)) => return webhooks_test(&args).await,
        Command::Webhooks(WebhooksCommand::Replay(args)) => webhooks_replay(url, &args).await?,
        Command::Shards(ShardsCommand::Move(args)) => shards_move(url, &args).await?,
        Command::Shards(ShardsCommand::Rebalance(args)) => {
            shards_rebalance(url, cli.global.shards.as_deref(), &args).await?
        }
        Command::Webhooks(WebhooksCommand::NewSecret) => {
            println!("{}", crate::outbound::signature::Secret::generate());
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

async fn migrate(url: &str, args: &MigrateArgs) -> anyhow::Result<()> {
    let pool = store::migrate(url).await?;
    let applied = store::applied_migrations(&pool).await?;
    println!("migrate: schema is current ({applied} migrations applied)");
    // Without --row-format, new (empty) tables get the default format and
    // tables holding rows are left as they are, with a note.
    for line in store::set_row_format(&pool, &row_format_options(args)).await? {
        println!("migrate: {line}");
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
async fn migrate_cluster(url: &str, shards: &str, args: &MigrateArgs) -> anyhow::Result<()> {
    let plan = store::cluster::ClusterMigrate {
        nodes: store::cluster::parse_shards(shards)?,
        virtual_shards: args.virtual_shards,
        row_format: row_format_options(args),
    };
    for line in store::cluster::migrate(url, &plan).await? {
        println!("migrate: {line}");
    }
    println!("migrate: the cluster's schema is current");
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
    match partitions::run(&pool, policy, options).await {
        Ok(reports) => {
            for report in reports {
                println!("{report}");
            }
            Ok(())
        }
        // On a cluster: say what the reachable nodes did, then fail naming the others.
        Err(store::StoreError::NodesFailed { done, failed }) => {
            for report in done {
                println!("{report}");
            }
            Err(store::StoreError::NodesFailed {
                done: Vec::new(),
                failed,
            }
            .into())
        }
        Err(err) => Err(err.into()),
    }
}

async fn list(url: &str) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    if is_head(&pool).await? {
        return list_cluster(&pool).await;
    }
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

async fn is_head(pool: &sqlx::MySqlPool) -> anyhow::Result<bool> {
    let mut conn = pool.acquire().await?;
    Ok(store::cluster::is_head(&mut conn).await?)
}

/// `partitions list` on a Spider head: node, data table, partition, day, rows.
async fn list_cluster(pool: &sqlx::MySqlPool) -> anyhow::Result<()> {
    let (tables, failed) = store::cluster::list_all(pool).await?;
    for table in tables {
        for p in table.days {
            println!(
                "{}\t{}\t{}\t{}\t~{} rows",
                table.server,
                table.data_table,
                p.name,
                p.last_day(),
                p.approx_rows
            );
        }
    }
    if failed.is_empty() {
        return Ok(());
    }
    Err(store::StoreError::NodesFailed {
        done: Vec::new(),
        failed,
    }
    .into())
}

/// `shards move`: each table in turn; the first failure stops (the tables
/// moved before it stay moved, the failed one stays where it was).
async fn shards_move(url: &str, args: &ShardsMoveArgs) -> anyhow::Result<()> {
    let pool = head_pool(url).await?;
    let mut conn = pool.acquire().await?;
    let (server, node) = store::shard_move::resolve_node(&mut conn, &args.to).await?;
    drop(conn);
    for table in &args.tables {
        let outcome = store::shard_move::move_table(&pool, table, &server, &node)
            .await
            .with_context(|| format!("moving {table} to {server}"))?;
        println!("shards: {outcome}");
    }
    Ok(())
}

/// `shards rebalance`: plan from the head's placements and LINKTRACK_SHARDS,
/// then move table by table.
async fn shards_rebalance(
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
        servers.push(store::shard_move::resolve_node(&mut conn, &node.url()).await?);
    }
    let placements = store::cluster::placements(&mut conn).await?;
    drop(conn);
    let names: Vec<String> = servers.iter().map(|(name, _)| name.clone()).collect();
    let plan = store::shard_move::rebalance_plan(&placements, &names);
    if plan.is_empty() {
        println!("shards: balanced, nothing to move");
    }
    for (table, to) in plan {
        if args.dry_run {
            println!("shards: would move {table} to {to}");
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
        println!("shards: {outcome}");
    }
    Ok(())
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

async fn build(url: &str, args: &BuildArgs) -> anyhow::Result<ExitCode> {
    let pool = pool(url).await?;
    let out = if args.out.as_os_str() == "-" {
        Output::Stdout
    } else {
        Output::File(args.out.clone())
    };
    let rejects = args
        .rejects
        .clone()
        .unwrap_or_else(|| default_rejects_path(&out));
    let workers = args
        .workers
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let options = BuildOptions {
        mailing: args.mailing.clone(),
        recipients: args.recipients.clone(),
        out,
        rejects: rejects.clone(),
        base_url: args.tracking.base_url.clone(),
        batch_size: args.batch_size.max(1),
        workers,
        id_block: args.id_block.max(1),
        progress: !args.no_progress,
        // With --pools these settings are the template for each pool's MTAs.
        smtp: (args.smtp.is_some() || args.pools.is_some()).then(|| {
            crate::delivery::smtp::SmtpSettings {
                url: args.smtp.clone().unwrap_or_default(),
                connections: args.smtp_connections,
                messages_per_connection: args.smtp_messages_per_connection,
                retries: args.smtp_retries,
                backoff: std::time::Duration::from_millis(args.smtp_backoff_ms),
            }
        }),
        pools: args.pools.clone(),
        return_path: args.return_path.clone(),
    };
    let summary = build::run(&pool, &options).await?;
    eprintln!("{summary}");
    if summary.rejected > 0 || summary.suppressed > 0 {
        eprintln!(
            "rejected and suppressed recipients, with line and reason: {}",
            rejects.display()
        );
    }
    Ok(if summary.rejected > 0 {
        ExitCode::from(EXIT_REJECTED)
    } else {
        ExitCode::SUCCESS
    })
}

fn default_rejects_path(out: &Output) -> PathBuf {
    match out {
        Output::Stdout => PathBuf::from("rejects.jsonl"),
        Output::File(path) => {
            let mut name = path.as_os_str().to_owned();
            name.push(".rejects.jsonl");
            PathBuf::from(name)
        }
    }
}

async fn suppressions(url: &str, command: SuppressionsCommand) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    match command {
        SuppressionsCommand::Add { addresses, reason } => {
            let addresses =
                valid_addresses(addresses.iter().map(String::as_str).enumerate(), None)?;
            let added = suppressions::add(&pool, &addresses, &reason).await?;
            println!(
                "suppressions: added {added} ({} already listed)",
                addresses.len() as u64 - added
            );
        }
        SuppressionsCommand::Remove { addresses } => {
            let addresses: Vec<String> = addresses.iter().map(|a| address::normalize(a)).collect();
            let removed = suppressions::remove(&pool, &addresses).await?;
            println!(
                "suppressions: removed {removed} ({} were not listed)",
                addresses.len() as u64 - removed
            );
        }
        SuppressionsCommand::Import { file, reason } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let lines = text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
            let addresses = valid_addresses(lines, Some(&file))?;
            let added = suppressions::add(&pool, &addresses, &reason).await?;
            println!(
                "suppressions: imported {} addresses from {}: {added} new, {} already listed",
                addresses.len(),
                file.display(),
                addresses.len() as u64 - added
            );
        }
        SuppressionsCommand::List { limit } => {
            let mut after: Option<String> = None;
            let mut left = limit.unwrap_or(u64::MAX);
            while left > 0 {
                let page =
                    suppressions::list(&pool, after.as_deref(), left.min(1000) as u32).await?;
                let Some(last) = page.last() else { break };
                after = Some(last.email.clone());
                for entry in &page {
                    println!("{}\t{}\t{}", entry.email, entry.reason, entry.created_at);
                }
                left = left.saturating_sub(page.len() as u64);
            }
        }
    }
    Ok(())
}

async fn erase(url: &str, args: &EraseArgs) -> anyhow::Result<()> {
    let pool = pool(url).await?;
    let email = address::normalize(&args.email);
    let report = store::erase::erase(&pool, &email).await?;
    println!("{report}");
    Ok(())
}

/// The live layer the flags ask for, if any.
fn live_layer(args: &LiveArgs) -> anyhow::Result<Option<Live>> {
    args.redis_url
        .as_deref()
        .filter(|u| !u.is_empty())
        .map(|url| Live::new(url, &args.redis_prefix).context("REDIS_URL"))
        .transpose()
}

async fn segment(url: &str, args: &SegmentArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?.context("segments need the live layer: set REDIS_URL")?;
    let pool = pool(url).await?;
    let mut all = args.tag.clone();
    all.extend(args.and.iter().cloned());
    let query = SegmentQuery {
        all,
        any: args.or.clone(),
        none: args.not.clone(),
    };
    let letters = live.segment(&args.mailing, &query).await?;
    for email in store::segments::addresses_of_letters(&pool, &args.mailing, &letters).await? {
        println!("{email}");
    }
    Ok(())
}

async fn rollup(url: &str, args: &RollupArgs) -> anyhow::Result<()> {
    let live = live_layer(&args.live)?;
    let pool = pool(url).await?;
    let options = store::rollup::RollupOptions {
        limit: args.batch,
        settle: Duration::from_millis(args.settle_ms),
    };
    if let Some(secs) = args.every {
        let every = Duration::from_secs(secs.max(1));
        let mut workers = crate::server::workers::Workers::new();
        workers.spawn("rollup", move |stopping| {
            crate::rollup::run_worker(pool, live, options, every, stopping)
        });
        crate::server::shutdown_signal().await;
        // The pass in progress commits or rolls back; a minute is plenty.
        workers.shutdown(Duration::from_secs(60)).await;
        return Ok(());
    }
    let report = crate::rollup::roll_and_publish(&pool, live.as_ref(), &options).await?;
    println!("{report}");
    Ok(())
}

/// Normalise and check addresses; any invalid one fails the command, naming
/// its position (argument number, or file and line).
fn valid_addresses<'a>(
    items: impl Iterator<Item = (usize, &'a str)>,
    file: Option<&Path>,
) -> anyhow::Result<Vec<String>> {
    let mut valid = Vec::new();
    let mut errors = Vec::new();
    for (index, raw) in items {
        let normalised = address::normalize(raw);
        match address::validate(&normalised) {
            Ok(()) => valid.push(normalised),
            Err(e) => errors.push(match file {
                Some(path) => format!("{}: line {}: {raw:?}: {e}", path.display(), index + 1),
                None => format!("argument {}: {raw:?}: {e}", index + 1),
            }),
        }
    }
    if errors.is_empty() {
        Ok(valid)
    } else {
        anyhow::bail!(
            "nothing was changed; fix these addresses first:\n{}",
            errors.join("\n")
        )
    }
}

async fn serve(url: &str, args: &ServeArgs) -> anyhow::Result<()> {
    use crate::events::journal::JournalSettings;
    use crate::server::{state::ServerSettings, App, AppSettings};
    let pool_settings = store::PoolSettings {
        max_connections: args.db_connections,
        acquire_timeout: Duration::from_millis(args.db_timeout_ms),
    };
    // Connect lazily: the server starts (pixels, journal, health) even while
    // the database is down, and catches up once it is back.
    let pool = store::connect_lazy(url, &pool_settings)?;
    let settings = AppSettings {
        server: ServerSettings {
            keep_days: args.keep_days,
            base_url: args.tracking.base_url.clone(),
            db_timeout: pool_settings.acquire_timeout,
            trust_forwarded_for: args.trust_forwarded_for,
            lookups_in_flight: args.lookups_in_flight as usize,
            ..ServerSettings::default()
        },
        api_token: args.api_token.clone(),
        secret: args.secret.clone(),
        live: live_layer(&args.live)?,
        rollup_every: (args.rollup_every > 0).then(|| Duration::from_secs(args.rollup_every)),
        admin_listen: Some(args.admin_listen),
        connections: crate::server::listen::ConnectionLimits {
            header_timeout: Duration::from_secs(args.header_timeout),
            max_connections: args.max_connections,
            ..Default::default()
        },
        outbound: Outbound::from_args(&args.outbound)?,
        ..AppSettings::new(pool, JournalSettings::new(&args.journal))
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let app = App::build(settings, listener)
        .await
        .context("starting the server")?;
    tracing::info!(
        listen = %app.local_addr()?,
        admin = %args.admin_listen,
        base_url = %args.tracking.base_url,
        workers = ?app.worker_names(),
        "serving"
    );
    app.run(crate::server::shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

async fn demo(url: &str, args: &DemoArgs) -> anyhow::Result<()> {
    let base_url = args
        .base_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", args.listen));
    let outcome = crate::demo::prepare(url, &base_url, &args.dir).await?;
    println!("{}", outcome.summary);
    println!("letters: {}", outcome.letters.display());
    if let Some(dir) = outcome.letters.parent() {
        println!(
            "rejected and suppressed recipients, with line and reason: {}",
            dir.join("rejects.jsonl").display()
        );
    }
    if args.no_serve {
        for (label, link) in &outcome.sample_urls {
            println!("{label}: {link}");
        }
        return Ok(());
    }
    println!(
        "serving on http://{} (Ctrl-C to stop); open these:",
        args.listen
    );
    for (label, link) in &outcome.sample_urls {
        println!("  {label}: {link}");
    }
    // The dashboard needs a token; the demo makes one unless one is set.
    let api_token = std::env::var("LINKTRACK_API_TOKEN").unwrap_or_else(|_| random_hex());
    println!(
        "  the dashboard: http://{}/login (token {api_token}), then /mailings",
        args.listen
    );
    let serve_args = ServeArgs {
        listen: args.listen,
        admin_listen: args.admin_listen,
        tracking: crate::config::TrackingArgs { base_url },
        keep_days: crate::config::DEFAULT_KEEP_DAYS,
        journal: args.dir.join("journal"),
        db_timeout_ms: 1500,
        db_connections: 16,
        lookups_in_flight: crate::server::lookups::DEFAULT_IN_FLIGHT as u32,
        header_timeout: crate::server::listen::DEFAULT_HEADER_TIMEOUT.as_secs(),
        max_connections: crate::server::listen::DEFAULT_MAX_CONNECTIONS,
        trust_forwarded_for: false,
        api_token: Some(api_token),
        secret: Some(random_hex()),
        rollup_every: 2,
        live: crate::config::LiveArgs {
            redis_url: demo_redis_url().await,
            redis_prefix: crate::live::DEFAULT_PREFIX.to_owned(),
        },
        outbound: outbound_from_env()?,
    };
    serve(url, &serve_args).await
}

/// The demo shows everything: the live layer is on when `REDIS_URL` is set
/// or a Redis on the default port answers, and it says which.
async fn demo_redis_url() -> Option<String> {
    if let Ok(url) = std::env::var("REDIS_URL") {
        println!("  live layer (latest clicks, live counters): Redis at REDIS_URL");
        return Some(url);
    }
    let url = crate::config::DEFAULT_DEMO_REDIS_URL;
    let answers = match crate::live::Live::new(url, crate::live::DEFAULT_PREFIX) {
        Ok(live) => tokio::time::timeout(std::time::Duration::from_secs(1), live.ping())
            .await
            .unwrap_or(false),
        Err(_) => false,
    };
    if answers {
        println!("  live layer (latest clicks, live counters): Redis at {url}");
        Some(url.to_owned())
    } else {
        println!("  live layer off: no Redis answered at {url} (set REDIS_URL to use one)");
        None
    }
}

/// The outbound settings of the environment alone (the demo has no flags
/// for them): LINKTRACK_WEBHOOK_URL and the rest, with their defaults.
fn outbound_from_env() -> anyhow::Result<OutboundArgs> {
    use clap::{Args, FromArgMatches};
    let command = OutboundArgs::augment_args(clap::Command::new("linktrack"));
    let matches = command.try_get_matches_from(["linktrack"])?;
    Ok(OutboundArgs::from_arg_matches(&matches)?)
}

/// `webhooks list`: every endpoint with its backlog.
async fn webhooks_list(url: &str, args: &OutboundArgs) -> anyhow::Result<()> {
    let outbound = Outbound::from_args(args)?;
    let pool = pool(url).await?;
    let backlog = store::outbox::backlog(&pool).await?;
    let now = Utc::now().naive_utc();
    println!("endpoint\ttarget\tfilter\tqueued\tlag_secs\tdead");
    for line in crate::outbound::list_lines(&outbound, &backlog, now) {
        println!("{line}");
    }
    Ok(())
}

/// `webhooks test`: one signed `webhook.test` delivery, now; exit status 1
/// unless the endpoint acknowledged it.
async fn webhooks_test(args: &WebhooksTestArgs) -> anyhow::Result<ExitCode> {
    let outbound = Outbound::from_args(&args.outbound)?;
    let Some(endpoint) = outbound.endpoint(&args.endpoint) else {
        anyhow::bail!(
            "--endpoint {:?}: no such endpoint (configured: {})",
            args.endpoint,
            crate::outbound::names(&outbound)
        );
    };
    let outcome = crate::outbound::send_test(endpoint).await?;
    println!("{}: {outcome:?}", endpoint.name);
    Ok(if outcome == crate::outbound::webhook::Outcome::Delivered {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `webhooks replay`: dead letters back into the outbox.
async fn webhooks_replay(url: &str, args: &WebhooksReplayArgs) -> anyhow::Result<()> {
    let since = parse_since(&args.since)?;
    let pool = pool(url).await?;
    let queued = store::outbox::replay_dead(&pool, &args.endpoint, since).await?;
    println!(
        "{queued} dead letters of endpoint {:?} since {since} queued again",
        args.endpoint
    );
    Ok(())
}

/// `--since`: RFC 3339, or a date (its midnight UTC).
fn parse_since(text: &str) -> anyhow::Result<chrono::NaiveDateTime> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&Utc).naive_utc());
    }
    chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .map(|day| day.and_time(chrono::NaiveTime::MIN))
        .with_context(|| {
            format!("--since {text:?}: not an RFC 3339 time (2026-11-23T10:00:00Z) or a date")
        })
}

/// 128 random bits as hex: the demo's API token and cookie key.
fn random_hex() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 16];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}
