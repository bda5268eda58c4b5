//! Settings: command-line flags first, then environment variables, then
//! defaults that work on a development machine (MariaDB on 127.0.0.1:3306).

use crate::store::RowFormat;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

pub const DEFAULT_DATABASE_URL: &str = "mysql://root@127.0.0.1:3306/linktrack";
pub const DEFAULT_BASE_URL: &str = "http://127.0.0.1:8080";
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
/// Where `/metrics` and `/readyz` answer by default: loopback only.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9464";
/// How many days of links and events are kept. Shared by `rotate` (what to
/// drop) and the server (which tokens are expired without a database read).
pub const DEFAULT_KEEP_DAYS: u32 = 90;
pub const DEFAULT_AHEAD_DAYS: u32 = 7;

#[derive(Debug, Parser)]
#[command(
    name = "linktrack",
    version,
    about = "Email-newsletter link tracking: build tracked letters, serve redirects, rotate daily partitions",
    long_about = None,
    propagate_version = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line as `--help` shows it: every `[env: NAME]` without
    /// the variable's current value. clap would print `[env: NAME=]` for a
    /// variable that is unset, which reads as "set to empty", and the value
    /// of one that is set, which may be a secret.
    pub fn command_for_help() -> clap::Command {
        use clap::CommandFactory;
        hide_env_values(Cli::command())
    }

    /// Parse the process's arguments (exits with clap's message on an error).
    pub fn parse_args() -> Cli {
        use clap::FromArgMatches;
        let matches = Cli::command_for_help().get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|err| err.exit())
    }
}

fn hide_env_values(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| arg.hide_env_values(true))
        .mut_subcommands(hide_env_values)
}

/// Flags every subcommand accepts.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// MySQL or MariaDB URL (mysql:// or mariadb://; any other scheme is
    /// refused); the database in it is the one linktrack uses.
    // The URL may carry a password: never echo the environment's value in --help.
    #[arg(long, env = "DATABASE_URL", default_value = DEFAULT_DATABASE_URL, global = true, hide_env_values = true)]
    pub database_url: String,

    /// A Spider cluster's data nodes: comma-separated MySQL URLs (each with
    /// its database). DATABASE_URL is then the head, the one server every
    /// command talks to; unset is a single server. See docs/scaling.md.
    #[arg(
        long,
        env = "LINKTRACK_SHARDS",
        global = true,
        hide_env_values = true,
        value_name = "URL,URL,…"
    )]
    pub shards: Option<String>,

    /// Log as JSON lines instead of human-readable text (filter with RUST_LOG).
    #[arg(long, env = "LINKTRACK_LOG_JSON", global = true)]
    pub log_json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the schema (creates the database if it is missing).
    Migrate(MigrateArgs),
    /// Manage the daily partitions of `links` and `events`.
    #[command(subcommand)]
    Partitions(PartitionsCommand),
    /// Build tracked letters for one mailing. Every row is accounted for:
    /// read = built + suppressed + rejected (see --summary). Exit status:
    /// 0 all built (suppressed rows included), 2 some recipients rejected or
    /// refused by the MTA (see the rejects file), 1 failure or a refused
    /// file (an unterminated or row-swallowing quote, a binary file, a
    /// creative over --max-letter-bytes).
    Build(BuildArgs),
    /// Manage the suppression list (addresses never sent to).
    #[command(subcommand)]
    Suppressions(SuppressionsCommand),
    /// Manage the tracking opt-out list (addresses sent to, never tracked).
    #[command(subcommand, name = "tracking-optouts")]
    TrackingOptouts(TrackingOptoutsCommand),
    /// Run the tracking HTTP server: redirects, open pixel, image proxy, unsubscribe.
    Serve(ServeArgs),
    /// The whole loop on the fixtures: migrate, create partitions, build the
    /// fixture mailing, print tracked URLs to open, then serve them.
    Demo(DemoArgs),
    /// Erase an address: anonymise every `links` and `events` row naming it,
    /// in every partition. Its suppression entry is kept.
    Erase(EraseArgs),
    /// Print the addresses that clicked links with the given tags (needs REDIS_URL).
    Segment(SegmentArgs),
    /// Statistics maintenance.
    #[command(subcommand)]
    Stats(StatsCommand),
    /// Events out: the webhook and AMQP endpoints, their backlog and dead
    /// letters (the same settings as `serve`).
    #[command(subcommand)]
    Webhooks(WebhooksCommand),
    /// A Spider cluster's data tables: move them to another data node (how
    /// a cluster grows; docs/scaling.md "Adding a data node").
    #[command(subcommand)]
    Shards(ShardsCommand),
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
pub struct ShardsRebalanceArgs {
    /// Print the moves and make none.
    #[arg(long)]
    pub dry_run: bool,
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCommand {
    /// Each configured endpoint: target, filters, queued events, the age of
    /// the oldest (the lag) and dead letters.
    List(WebhooksListArgs),
    /// Send a signed `webhook.test` event to an endpoint now and print the answer.
    Test(WebhooksTestArgs),
    /// Queue an endpoint's dead letters again (events since --since); a
    /// running server sends them.
    Replay(WebhooksReplayArgs),
    /// Print a fresh random secret (`whsec_` + base64) for an endpoint.
    NewSecret,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksListArgs {
    #[command(flatten)]
    pub outbound: OutboundArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksTestArgs {
    /// The endpoint's name (`default` for LINKTRACK_WEBHOOK_URL).
    #[arg(long, default_value = "default")]
    pub endpoint: String,
    #[command(flatten)]
    pub outbound: OutboundArgs,
}

#[derive(Debug, Clone, Args)]
pub struct WebhooksReplayArgs {
    /// The endpoint's name (`default` for LINKTRACK_WEBHOOK_URL, `amqp` for LINKTRACK_AMQP_URL).
    #[arg(long)]
    pub endpoint: String,
    /// Only events that happened at or after this UTC time: RFC 3339
    /// (2026-11-23T10:00:00Z) or a date (2026-11-23).
    #[arg(long, value_name = "TIME")]
    pub since: String,
}

/// The default AMQP exchange events are published to.
pub const DEFAULT_AMQP_EXCHANGE: &str = "linktrack.events";

/// Where events go out (see docs/serve.md, "Events out").
#[derive(Debug, Clone, Args)]
pub struct OutboundArgs {
    /// POST every event to this http(s) URL, signed per Standard Webhooks
    /// (the endpoint named `default`).
    #[arg(long, env = "LINKTRACK_WEBHOOK_URL")]
    pub webhook_url: Option<String>,

    /// The signing secret of --webhook-url: `whsec_` + base64 of 24 to 64
    /// bytes (`linktrack webhooks new-secret` makes one).
    #[arg(long, env = "LINKTRACK_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,

    /// A TOML file of endpoints, each with its URL, secret and optional
    /// filters by event type and mailing (docs/serve.md).
    #[arg(long, env = "LINKTRACK_WEBHOOKS", value_name = "FILE")]
    pub webhooks: Option<PathBuf>,

    /// Publish every event to RabbitMQ, e.g.
    /// amqp://guest:guest@127.0.0.1:5672/%2f (the endpoint named `amqp`).
    #[arg(long, env = "LINKTRACK_AMQP_URL", hide_env_values = true)]
    pub amqp_url: Option<String>,

    /// The durable topic exchange of --amqp-url (routing key = event type).
    #[arg(long, env = "LINKTRACK_AMQP_EXCHANGE", default_value = DEFAULT_AMQP_EXCHANGE)]
    pub amqp_exchange: String,

    /// Longest wait for an endpoint's answer, in milliseconds.
    #[arg(long, env = "LINKTRACK_WEBHOOK_TIMEOUT_MS", default_value_t = 10_000)]
    pub webhook_timeout_ms: u64,

    /// Deliveries in flight at once per endpoint (and server).
    #[arg(long, env = "LINKTRACK_WEBHOOK_CONCURRENCY", default_value_t = 8)]
    pub webhook_concurrency: usize,

    /// Events per webhook request: 1 sends each event on its own; N from 2
    /// to 1000 sends up to N in one `"type": "batch"` body (docs/serve.md).
    #[arg(long, env = "LINKTRACK_WEBHOOK_BATCH", default_value_t = 1)]
    pub webhook_batch: usize,

    /// Delay before the first retry, in milliseconds; each further retry
    /// doubles it (with jitter) up to --outbound-retry-max-secs.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_RETRY_BASE_MS",
        default_value_t = 5_000
    )]
    pub outbound_retry_base_ms: u64,

    /// Longest delay between two attempts, in seconds.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_RETRY_MAX_SECS",
        default_value_t = 3_600
    )]
    pub outbound_retry_max_secs: u64,

    /// Give up on an event this many seconds after it was queued: it moves
    /// to the dead letters (`linktrack webhooks replay` sends them again).
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_GIVE_UP_SECS",
        default_value_t = 259_200
    )]
    pub outbound_give_up_secs: u64,

    /// The safety net of held events (docs/serve.md, "What is held, and for
    /// how long"): a click or open still waiting for its settled verdict
    /// --verdict-settle-secs + this many seconds after it was queued (no
    /// rollup settled it) is sent anyway, with its first verdict.
    #[arg(
        long,
        env = "LINKTRACK_OUTBOUND_HOLD_GRACE_SECS",
        default_value_t = 120
    )]
    pub outbound_hold_grace_secs: u64,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Where the demo writes its files: mailing, letters, rejects, journal.
    #[arg(long, default_value = "demo-out")]
    pub dir: PathBuf,

    /// Address the demo's server listens on.
    #[arg(long, env = "LINKTRACK_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,

    /// Address of the demo server's `/metrics` and `/readyz`.
    #[arg(long, env = "LINKTRACK_ADMIN_LISTEN", default_value = DEFAULT_ADMIN_LISTEN)]
    pub admin_listen: std::net::SocketAddr,

    /// Base URL in the built letters (default: http:// + --listen, with
    /// localhost for 0.0.0.0 or [::]).
    #[arg(long, env = "LINKTRACK_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,

    /// Build and print the URLs, then exit instead of serving.
    #[arg(long)]
    pub no_serve: bool,

    /// The dashboard's login token. Default: the one an earlier run saved
    /// in DIR/dashboard-token (made on the first run), so it stays the same.
    #[arg(long, env = "LINKTRACK_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Make a new dashboard token (and login cookie key) instead of reusing
    /// the saved ones.
    #[arg(long)]
    pub new_token: bool,
}

#[derive(Debug, Clone, Args)]
pub struct EraseArgs {
    /// The address (normalised: trimmed, lowercased) to erase.
    #[arg(long, value_name = "ADDRESS")]
    pub email: String,
}

/// Where `demo` looks for Redis when `REDIS_URL` is not set.
pub const DEFAULT_DEMO_REDIS_URL: &str = "redis://127.0.0.1:6379";

/// How bot verdicts settle (docs/serve.md, "Verdicts"); used by `serve`
/// and `stats rollup`, which settle verdicts as they roll events up.
#[derive(Debug, Clone, Args)]
pub struct VerdictArgs {
    /// A hit's verdict is final this long after it happened: the statistics
    /// count it, and events out send it, only then (clicks and opens are
    /// held that long). 0 judges with what is known at the next rollup and
    /// sends events at once with their first verdict.
    #[arg(
        long,
        env = "LINKTRACK_VERDICT_SETTLE_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    pub verdict_settle_secs: u64,
    /// An operator's scanner-networks file (TOML, the format of the shipped
    /// src/events/networks.toml): its entries are added, its
    /// `remove = [...]` names or ranges are dropped from the shipped list.
    #[arg(long, env = "LINKTRACK_BOT_NETWORKS", value_name = "FILE")]
    pub bot_networks: Option<std::path::PathBuf>,
}

impl VerdictArgs {
    /// How long after it happened a hit's verdict is final.
    pub fn settle(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.verdict_settle_secs)
    }

    /// The verdict rules these settings name (the networks file is read and
    /// checked here: a bad entry is an error naming the file and entry).
    pub fn rules(
        &self,
    ) -> Result<crate::bots::verdicts::VerdictRules, crate::bots::networks::NetworksError> {
        let networks = match &self.bot_networks {
            Some(path) => crate::bots::networks::Networks::with_operator_file(path)?,
            None => crate::bots::networks::Networks::shipped(),
        };
        Ok(crate::bots::verdicts::VerdictRules {
            settle: self.settle(),
            networks,
            ..Default::default()
        })
    }
}

/// The optional Redis live layer.
#[derive(Debug, Clone, Args)]
pub struct LiveArgs {
    /// Redis URL, e.g. redis://127.0.0.1:6379; unset turns the live layer off.
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Prefix of every Redis key linktrack writes.
    #[arg(long, env = "LINKTRACK_REDIS_PREFIX", default_value = crate::live::DEFAULT_PREFIX)]
    pub redis_prefix: String,
}

#[derive(Debug, Clone, Args)]
pub struct SegmentArgs {
    /// The mailing id.
    #[arg(long)]
    pub mailing: String,
    /// A tag every selected recipient clicked (repeatable).
    #[arg(long, required = true, value_name = "T")]
    pub tag: Vec<String>,
    /// Another tag they must also have clicked (repeatable).
    #[arg(long, value_name = "T")]
    pub and: Vec<String>,
    /// A tag that selects recipients on its own (union; repeatable).
    #[arg(long, value_name = "T")]
    pub or: Vec<String>,
    /// A tag they must not have clicked (repeatable).
    #[arg(long, value_name = "T")]
    pub not: Vec<String>,
    #[command(flatten)]
    pub live: LiveArgs,
}

#[derive(Debug, Subcommand)]
pub enum StatsCommand {
    /// Roll pending events into the statistics tables (each event exactly
    /// once; safe to run beside other rollup workers), once or --every SECS.
    Rollup(RollupArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RollupArgs {
    /// Events per transaction.
    #[arg(long, default_value_t = 50_000)]
    pub batch: u32,
    /// Keep running: roll up again every SECS seconds (a worker process of
    /// its own, beside the server's event writer). Without it: once.
    #[arg(long, value_name = "SECS")]
    pub every: Option<u64>,
    /// 0 trusts a single event writer. With several, roll only events whose
    /// id was visible at least this long ago (longer than any writer's
    /// transaction); a one-shot run then only records a first observation.
    #[arg(long, env = "LINKTRACK_ROLLUP_SETTLE_MS", default_value_t = 0)]
    pub settle_ms: u64,
    #[command(flatten)]
    pub verdicts: VerdictArgs,
    #[command(flatten)]
    pub live: LiveArgs,
}

#[derive(Debug, Clone, Args)]
pub struct BuildArgs {
    /// The mailing file (JSON: mailing_id, subject, from, html or html_file, ...).
    #[arg(long, value_name = "FILE")]
    pub mailing: PathBuf,

    /// Recipients: JSON Lines or CSV with a header; `email` is required.
    #[arg(long, value_name = "FILE")]
    pub recipients: PathBuf,

    /// Where built letters go (JSON Lines); `-` is standard output. A file is
    /// written as FILE.partial and renamed when the job completes.
    #[arg(long, value_name = "FILE|-", default_value = "-")]
    pub out: PathBuf,

    /// Rejected and suppressed recipients with line and reason (JSON Lines).
    /// Default: FILE.rejects.jsonl beside --out, or rejects.jsonl for stdout.
    #[arg(long, value_name = "FILE")]
    pub rejects: Option<PathBuf>,

    /// The summary as JSON: rows read, letters built, suppressed, rejected
    /// (read = built + suppressed + rejected), reasons, delivery counts.
    /// Default: FILE.summary.json beside --out, or summary.json for stdout.
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,

    /// The most bytes a letter's HTML may have: a larger creative is refused
    /// before anything is stored, a recipient whose personalised letter
    /// grows past it is rejected.
    #[arg(long, value_name = "BYTES", default_value_t = crate::build::DEFAULT_MAX_LETTER_BYTES)]
    pub max_letter_bytes: usize,

    /// Personalise and rewrite every letter from scratch instead of filling
    /// in the mailing's plan (compiled once; README "Builder"). The letters
    /// are the same bytes either way; this is the slower reference path.
    #[arg(long)]
    pub letter_by_letter: bool,

    /// Recipients per batch; each batch's links are stored in one transaction.
    #[arg(long, default_value_t = 1000)]
    pub batch_size: usize,

    /// Threads building letters (default: one per core).
    #[arg(long)]
    pub workers: Option<usize>,

    /// Letter IDs reserved per round trip to the `sequences` table.
    #[arg(long, default_value_t = 10_000)]
    pub id_block: u64,

    /// Never draw the progress bar (it is only drawn on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    #[command(flatten)]
    pub tracking: TrackingArgs,

    /// Deliver every letter to this MTA over SMTP, once its links are stored:
    /// smtp://host:port, smtp://host:port?tls=required (STARTTLS), smtps://…
    /// (implicit TLS); user:password@ in the URL for AUTH. A re-run delivers
    /// nothing twice (see README "Delivery").
    #[arg(
        long,
        env = "LINKTRACK_SMTP_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub smtp: Option<String>,

    /// A pools file (TOML): each pool's SMTP URLs and connections per MTA;
    /// the mailing's `pool` picks its entry (see README "Delivery"). Checked
    /// before any letter is built. Takes the place of --smtp.
    #[arg(
        long,
        env = "LINKTRACK_POOLS",
        value_name = "FILE",
        conflicts_with = "smtp"
    )]
    pub pools: Option<PathBuf>,

    /// SMTP connections used in parallel (per MTA with --pools).
    #[arg(long, default_value_t = 4)]
    pub smtp_connections: u32,

    /// Messages sent over one SMTP connection before it is closed (QUIT)
    /// and a new one opened, for relays that cap messages per session
    /// (a pool's `messages_per_connection` takes precedence). Default: no limit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub smtp_messages_per_connection: Option<u32>,

    /// Retries of a temporary failure (4xx, refused, timeout) per letter.
    #[arg(long, default_value_t = 5)]
    pub smtp_retries: u32,

    /// Wait before the first retry, in milliseconds; it doubles each time.
    #[arg(long, default_value_t = 1000)]
    pub smtp_backoff_ms: u64,

    /// Envelope sender (Return-Path) for bounces; default the mailing's From.
    #[arg(long, value_name = "ADDRESS")]
    pub return_path: Option<String>,

    /// Part of the key that seals tokens (docs/token.md): set it to the
    /// server's LINKTRACK_SECRET, or the server cannot read the tokens'
    /// kinds and templates. Unset on both is fine (the database's own
    /// random key then seals alone).
    #[arg(long, env = "LINKTRACK_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum SuppressionsCommand {
    /// Add addresses (normalised: Unicode white space and invisible
    /// characters such as a BOM trimmed, lowercased). What is not an
    /// address is refused by argument number, the rest added; exit 2.
    Add {
        /// The addresses to suppress; one that is not an address is refused
        /// (named by its argument number), the others are added.
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        /// Why they are suppressed.
        #[arg(long, default_value = "manual")]
        reason: String,
    },
    /// Remove addresses.
    Remove {
        /// The addresses to take off the list (normalised as for `add`).
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
    },
    /// Import a file with one address per line (blank lines and # comments skipped).
    Import {
        /// The file: one address per line; a line that is not an address is
        /// refused (named by file and line), the others are imported.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The reason stored with every imported address (`list` shows it).
        #[arg(long, default_value = "import")]
        reason: String,
    },
    /// Print the list: address, reason, time added (tab-separated).
    List {
        /// Print at most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
}

/// `linktrack tracking-optouts`: recipients who withdrew from tracking
/// without unsubscribing (their letters are still built and sent, untracked).
#[derive(Debug, Subcommand)]
pub enum TrackingOptoutsCommand {
    /// Add addresses (normalised as suppressions are).
    Add {
        /// The addresses to send untracked; one that is not an address is
        /// refused (named by its argument number), the others are added.
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
        /// Where the choice came from (the "stop tracking me" page records `link`).
        #[arg(long, default_value = "manual")]
        source: String,
    },
    /// Remove addresses (their letters are tracked again as the mailing says).
    Remove {
        /// The addresses to take off the list (normalised as for `add`).
        #[arg(required = true, value_name = "ADDRESS")]
        addresses: Vec<String>,
    },
    /// Import a file with one address per line (blank lines and # comments
    /// skipped; a BOM or CRLF is fine). Lines that are not addresses are
    /// refused by line number, the rest imported; exit 2.
    Import {
        /// The file: one address per line.
        #[arg(value_name = "FILE")]
        file: PathBuf,
        /// The source stored with every imported address (`list` shows it).
        #[arg(long, default_value = "import")]
        source: String,
    },
    /// Print the list: address, source, time added (tab-separated).
    List {
        /// Print at most this many.
        #[arg(long)]
        limit: Option<u64>,
    },
}

/// `--row-format`: the storage layer names the formats; clap lists them.
fn row_format_parser() -> impl clap::builder::TypedValueParser<Value = RowFormat> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(RowFormat::NAMES)
        .try_map(|name| name.parse::<RowFormat>())
}

#[derive(Debug, Clone, Args)]
pub struct MigrateArgs {
    /// Row format of `links` and `events`: page-compressed (least disk, fast
    /// inserts; needs a filesystem that punches holes, checked), compressed
    /// (half of dynamic's disk, slowest inserts), dynamic (fastest, largest).
    /// See README "Storage". Empty tables switch at once; tables with rows
    /// only with --rebuild. Default: page-compressed for new tables.
    #[arg(long, value_parser = row_format_parser())]
    pub row_format: Option<RowFormat>,

    /// zlib level (1-9) of page-compressed tables on MariaDB (default: the
    /// server's innodb_compression_level).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=9))]
    pub page_compression_level: Option<u8>,

    /// Rebuild tables that already hold rows to --row-format (every
    /// partition is copied; migrate prints an estimate first).
    #[arg(long, requires = "row_format")]
    pub rebuild: bool,

    /// With --shards: how many data tables (`links_NN`, `events_NN`) the
    /// head's Spider tables spread over the data nodes. Odd (KEY hashing of
    /// UUIDv7 is skewed with even counts); fixed at the first migrate.
    #[arg(long, default_value_t = crate::store::cluster::DEFAULT_VIRTUAL_SHARDS)]
    pub virtual_shards: u32,
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
    #[arg(long, env = "LINKTRACK_AHEAD_DAYS", default_value_t = DEFAULT_AHEAD_DAYS)]
    pub ahead_days: u32,
}

#[derive(Debug, Clone, Args)]
pub struct RotateArgs {
    /// Keep this many days before today; partitions whose every day is older are dropped.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", default_value_t = DEFAULT_KEEP_DAYS)]
    pub keep_days: u32,

    /// Days after today to create partitions for.
    #[arg(long, env = "LINKTRACK_AHEAD_DAYS", default_value_t = DEFAULT_AHEAD_DAYS)]
    pub ahead_days: u32,

    /// Print the DDL that would run and change nothing.
    #[arg(long)]
    pub dry_run: bool,

    /// Refuse to drop more than this many partitions of one table in one run
    /// (the days ahead are still created; the run exits 1).
    #[arg(long, default_value_t = 7)]
    pub max_drop: usize,

    /// Drop even when the plan exceeds --max-drop.
    #[arg(long)]
    pub force: bool,

    /// Seconds to wait for another runner to finish before giving up.
    #[arg(long, default_value_t = 30)]
    pub lock_wait_secs: u64,
}

/// Flags of `linktrack serve` (see docs/serve.md).
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "LINKTRACK_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,

    /// Address of the operators' listener: `/metrics` and `/readyz` answer
    /// there only (the public listener keeps `/healthz`).
    #[arg(long, env = "LINKTRACK_ADMIN_LISTEN", default_value = DEFAULT_ADMIN_LISTEN)]
    pub admin_listen: std::net::SocketAddr,

    /// Bearer token `/metrics` and `/readyz` require on the admin listener
    /// (`Authorization: Bearer TOKEN`); unset leaves them open, and the
    /// server warns at start when the admin listener is not on loopback.
    #[arg(long, env = "LINKTRACK_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Public base URL of the tracking server, e.g. https://t.example.com
    /// (default: http:// + --listen, with localhost for 0.0.0.0 or [::]).
    #[arg(long, env = "LINKTRACK_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,

    /// Days of links kept (as `partitions rotate --keep-days`); older tokens
    /// answer 410 Gone without a database read.
    #[arg(long, env = "LINKTRACK_KEEP_DAYS", default_value_t = DEFAULT_KEEP_DAYS)]
    pub keep_days: u32,

    /// Directory of the event journal: events wait here until they are in
    /// the database, and are replayed from here after a restart.
    #[arg(long, env = "LINKTRACK_JOURNAL", default_value = "journal")]
    pub journal: std::path::PathBuf,

    /// Longest wait for the database (connection, then statement) before a
    /// request answers 503.
    #[arg(long, env = "LINKTRACK_DB_TIMEOUT_MS", default_value_t = 1500)]
    pub db_timeout_ms: u64,

    /// Database connections.
    #[arg(long, env = "LINKTRACK_DB_CONNECTIONS", default_value_t = 16)]
    pub db_connections: u32,

    /// Link lookups (link cache misses) sent to the database at once; the
    /// misses that arrive while all are busy share the next statement, so
    /// fewer makes larger batches, which cost the database less per click
    /// (`bench_serve` measured 2 against 8: less database CPU per click and
    /// a lower p99, with a warm buffer pool and with a cold one).
    #[arg(long, env = "LINKTRACK_LOOKUPS_IN_FLIGHT", value_name = "N",
          default_value_t = crate::server::lookups::DEFAULT_IN_FLIGHT as u32,
          value_parser = clap::value_parser!(u32).range(1..=256))]
    pub lookups_in_flight: u32,

    /// Close a connection that has not sent a request's complete headers
    /// within SECS seconds; an idle keep-alive connection is closed after
    /// the same time (it is waiting for the next request's headers).
    #[arg(long, env = "LINKTRACK_HEADER_TIMEOUT", default_value_t = 10, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_timeout: u64,

    /// Most client connections open at once (each listener); beyond it new
    /// connections wait in the listen backlog, and the server logs that the
    /// cap was reached. Keep it below the process's file descriptor limit.
    #[arg(long, env = "LINKTRACK_MAX_CONNECTIONS", default_value_t = crate::server::listen::DEFAULT_MAX_CONNECTIONS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub max_connections: usize,

    /// Record the client network from the last X-Forwarded-For entry. Set it
    /// only behind a reverse proxy or load balancer that appends that header.
    #[arg(long, env = "LINKTRACK_TRUST_FORWARDED_FOR")]
    pub trust_forwarded_for: bool,

    /// Bearer token of the stats API and dashboard; unset turns them off (404).
    #[arg(long, env = "LINKTRACK_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,

    /// Key that signs dashboard login cookies; unset turns the login form off
    /// (the API and dashboard then take `Authorization: Bearer` only).
    #[arg(long, env = "LINKTRACK_SECRET", hide_env_values = true)]
    pub secret: Option<String>,

    /// Roll events up into the statistics tables every SECS seconds; 0 leaves
    /// it to a separate `linktrack stats rollup --every` process.
    #[arg(
        long,
        env = "LINKTRACK_ROLLUP_EVERY",
        default_value_t = 5,
        value_name = "SECS"
    )]
    pub rollup_every: u64,

    #[command(flatten)]
    pub verdicts: VerdictArgs,

    #[command(flatten)]
    pub live: LiveArgs,

    #[command(flatten)]
    pub outbound: OutboundArgs,
}

/// Where tracked URLs point; used by `build` and `serve`.
#[derive(Debug, Clone, Args)]
pub struct TrackingArgs {
    /// Public base URL of the tracking server, e.g. https://t.example.com.
    #[arg(long, env = "LINKTRACK_BASE_URL", default_value = DEFAULT_BASE_URL)]
    pub base_url: String,
}

impl ServeArgs {
    /// The base URL tracked links are served under: --base-url, else derived
    /// from --listen as `demo` does ([`base_url_for_listen`]).
    pub fn base_url(&self) -> String {
        self.base_url
            .clone()
            .unwrap_or_else(|| base_url_for_listen(self.listen))
    }
}

/// `http://` + the listen address; an unspecified address (0.0.0.0, [::])
/// is not one a browser can open, so it becomes `localhost`.
pub fn base_url_for_listen(listen: std::net::SocketAddr) -> String {
    if listen.ip().is_unspecified() {
        format!("http://localhost:{}", listen.port())
    } else {
        format!("http://{listen}")
    }
}

/// Shortest `LINKTRACK_SECRET` / `LINKTRACK_API_TOKEN` the server accepts:
/// `openssl rand -hex 32` (the documented one-liner) gives 64 characters.
pub const MIN_SECRET_LEN: usize = 16;

/// Values people leave in a config file meaning "fill this in".
const PLACEHOLDERS: &[&str] = &[
    "change-me",
    "changeme",
    "change_me",
    "changeit",
    "replace-me",
    "replaceme",
    "secret",
    "password",
    "token",
    "example",
    "xxx",
    "todo",
    "test",
];

/// A secret setting the server refuses to start with.
#[derive(Debug, thiserror::Error)]
pub enum WeakSecret {
    #[error("{name} is a placeholder ({value:?}): generate one with `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")")]
    Placeholder { name: &'static str, value: String },
    #[error("{name} has {len} characters, fewer than {MIN_SECRET_LEN}: generate one with `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")")]
    TooShort { name: &'static str, len: usize },
}

/// Check one secret setting (`name` is its environment variable, for the
/// message). Unset is fine (the feature it enables is off); a placeholder
/// such as `change-me`, or anything shorter than [`MIN_SECRET_LEN`], is not:
/// a server started with one would sign cookies anybody can forge.
pub fn check_secret(name: &'static str, value: Option<&str>) -> Result<(), WeakSecret> {
    let Some(value) = value else {
        return Ok(());
    };
    let lowered = value.trim().to_ascii_lowercase();
    let is_placeholder = PLACEHOLDERS.contains(&lowered.as_str())
        || (lowered.starts_with('<') && lowered.ends_with('>'))
        || lowered.contains("change-me")
        || lowered.contains("changeme");
    if is_placeholder {
        return Err(WeakSecret::Placeholder {
            name,
            value: value.to_owned(),
        });
    }
    if value.chars().count() < MIN_SECRET_LEN {
        return Err(WeakSecret::TooShort {
            name,
            len: value.chars().count(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn placeholder_and_short_secrets_are_refused_by_name() {
        for placeholder in [
            "change-me",
            "CHANGE-ME",
            "changeme",
            "<secret>",
            "please-change-me-now",
        ] {
            let err = check_secret("LINKTRACK_SECRET", Some(placeholder)).unwrap_err();
            assert!(
                matches!(err, WeakSecret::Placeholder { .. }),
                "{placeholder}: {err}"
            );
            assert!(
                err.to_string()
                    .starts_with("LINKTRACK_SECRET is a placeholder"),
                "{err}"
            );
        }
        let err = check_secret("LINKTRACK_API_TOKEN", Some("abc123")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "LINKTRACK_API_TOKEN has 6 characters, fewer than 16: generate one with \
             `openssl rand -hex 32` (docs/deploy.md, \"Secrets\")"
        );
        assert!(check_secret("LINKTRACK_SECRET", None).is_ok());
        assert!(check_secret("LINKTRACK_SECRET", Some(&"ab12".repeat(16))).is_ok());
    }

    #[test]
    fn serve_derives_its_base_url_from_listen_when_none_is_given() {
        let parse = |args: &[&str]| match Cli::try_parse_from(args).unwrap().command {
            Command::Serve(serve) => serve.base_url(),
            other => panic!("parsed as {other:?}"),
        };
        assert_eq!(
            parse(&["linktrack", "serve", "--listen", "127.0.0.1:9000"]),
            "http://127.0.0.1:9000"
        );
        assert_eq!(
            parse(&["linktrack", "serve", "--listen", "0.0.0.0:8080"]),
            "http://localhost:8080"
        );
        assert_eq!(
            parse(&[
                "linktrack",
                "serve",
                "--listen",
                "[::]:80",
                "--base-url",
                "https://t.example.com"
            ]),
            "https://t.example.com"
        );
    }

    /// Every argument of every subcommand has a help line, and no
    /// `[env: NAME=]` reads as "set to empty".
    #[test]
    fn every_argument_has_help_and_env_names_show_no_value() {
        fn check(command: &mut clap::Command, path: &str) {
            let help = command.render_long_help().to_string();
            assert!(
                !help.contains("=]"),
                "{path}: an env value shown in\n{help}"
            );
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") {
                    continue;
                }
                assert!(
                    arg.get_help().is_some() || arg.get_long_help().is_some(),
                    "{path}: argument {id} has no help line"
                );
            }
            for sub in command.get_subcommands_mut() {
                let sub_path = format!("{path} {}", sub.get_name());
                check(sub, &sub_path);
            }
        }
        let mut command = Cli::command_for_help();
        command.build();
        check(&mut command, "linktrack");
    }

    #[test]
    fn rotate_flags_parse() {
        let cli = Cli::try_parse_from([
            "linktrack",
            "partitions",
            "rotate",
            "--keep-days",
            "30",
            "--ahead-days",
            "3",
            "--dry-run",
        ])
        .unwrap();
        match cli.command {
            Command::Partitions(PartitionsCommand::Rotate(args)) => {
                assert_eq!(
                    (args.keep_days, args.ahead_days, args.dry_run),
                    (30, 3, true)
                );
            }
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn segment_flags_parse_and_need_a_tag() {
        let cli = Cli::try_parse_from([
            "linktrack",
            "segment",
            "--mailing",
            "m1",
            "--tag",
            "ruby",
            "--and",
            "web",
            "--not",
            "erlang",
            "--not",
            "go",
        ])
        .unwrap();
        match cli.command {
            Command::Segment(args) => {
                assert_eq!(args.mailing, "m1");
                assert_eq!(
                    (args.tag, args.and),
                    (vec!["ruby".into()], vec!["web".into()])
                );
                assert_eq!(args.not, ["erlang", "go"]);
            }
            other => panic!("parsed as {other:?}"),
        }
        assert!(Cli::try_parse_from(["linktrack", "segment", "--mailing", "m1"]).is_err());
    }
}

/// A TOML settings file (the pools file, the webhook endpoints file) that
/// could not be read or parsed; the message names the file, and toml's own
/// message names the line, column and key.
#[derive(Debug, thiserror::Error)]
pub enum SettingsFileError {
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
}

/// Read and parse one TOML settings file into `T`.
pub fn read_toml_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
) -> Result<T, SettingsFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| SettingsFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|e| SettingsFileError::Parse {
        path: path.to_owned(),
        message: e.to_string().trim().to_owned(),
    })
}
