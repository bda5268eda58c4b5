//! Flags of the mailing commands, the ones `cli/mailing.rs` runs: `build`,
//! `suppressions`, `tracking-optouts`, `erase`, `segment`, `stats rollup`;
//! and where tracked URLs point (`build`, `domains verify`).

use super::secrets::SecretArgs;
use super::serve::{LiveArgs, VerdictArgs};
use crate::mailing_id::MailingId;
use crate::server::state::DEFAULT_BASE_URL;
use crate::store::suppressions::SuppressionReason;
use clap::{Args, Subcommand};
use std::path::PathBuf;

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

    /// With SMTP delivery: each letter's outcome (the MTA's reply) is
    /// appended here before its connection takes the next letter and
    /// committed to the database behind it; a re-run after a kill first
    /// records what the file holds. Emptied as its lines are committed.
    /// Default: FILE.deliveries.jsonl beside --out, or deliveries.jsonl for
    /// stdout.
    #[arg(long, value_name = "FILE")]
    pub delivery_log: Option<PathBuf>,

    /// The most bytes a letter's HTML may have: a larger creative is refused
    /// before anything is stored, a recipient whose personalised letter
    /// grows past it is rejected.
    #[arg(long, value_name = "BYTES", default_value_t = crate::builder::DEFAULT_MAX_LETTER_BYTES)]
    pub max_letter_bytes: usize,

    /// Personalise and rewrite every letter from scratch instead of filling
    /// in the mailing's plan (compiled once; docs/build.md "The plan"). The letters
    /// are the same bytes either way; this is the slower reference path.
    #[arg(long)]
    pub letter_by_letter: bool,

    /// Recipients per batch; each batch's links are stored in one transaction.
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub batch_size: usize,

    /// Threads building letters (default: one per core).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,

    /// Letter IDs reserved per round trip to the `sequences` table.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub id_block: u64,

    /// Never draw the progress bar (it is only drawn on a terminal anyway).
    #[arg(long)]
    pub no_progress: bool,

    #[command(flatten)]
    pub tracking: TrackingArgs,

    /// Deliver every letter to this MTA over SMTP, once its links are stored:
    /// smtp://host:port, smtp://host:port?tls=required (STARTTLS), smtps://…
    /// (implicit TLS); user:password@ in the URL for AUTH. A re-run delivers
    /// nothing twice (see docs/build.md "Delivery over SMTP").
    #[arg(
        long,
        env = "LINKTRACK_SMTP_URL",
        hide_env_values = true,
        value_name = "URL"
    )]
    pub smtp: Option<String>,

    /// A pools file (TOML): each pool's SMTP URLs and connections per MTA;
    /// the mailing's `pool` picks its entry (see docs/build.md "Delivery over SMTP"). Checked
    /// before any letter is built. Takes the place of --smtp.
    #[arg(
        long,
        env = "LINKTRACK_POOLS",
        value_name = "FILE",
        conflicts_with = "smtp"
    )]
    pub pools: Option<PathBuf>,

    #[command(flatten)]
    pub smtp_sessions: SmtpSessionArgs,

    /// Envelope sender (Return-Path) for bounces; default the mailing's From.
    #[arg(long, value_name = "ADDRESS")]
    pub return_path: Option<String>,

    /// Give every letter its own envelope sender and Return-Path,
    /// bounces+TOKEN@NAME (VERP): a bounce names its letter, and
    /// `linktrack bounces ingest` reads it (docs/bounces.md). Takes the
    /// place of --return-path.
    #[arg(
        long,
        env = "LINKTRACK_BOUNCE_DOMAIN",
        value_name = "NAME",
        conflicts_with = "return_path"
    )]
    pub bounce_domain: Option<String>,

    #[command(flatten)]
    pub seal: SecretArgs,

    /// Which recipients column gives a field: FIELD=HEADER, repeatable
    /// (`--column email="Contact Email" --column first_name=FNAME`).
    /// Without it, headers match fields without case, padding or the
    /// difference between spaces, underscores and hyphens, and the address
    /// column of the common platforms' exports is found by its name
    /// (docs/build.md, "Recipients").
    #[arg(long, value_name = "FIELD=HEADER")]
    pub column: Vec<crate::builder::ColumnMapping>,
}

/// Where tracked URLs point; used by `build` and `serve`.
#[derive(Debug, Clone, Args)]
pub struct TrackingArgs {
    /// Public base URL of the tracking server, e.g. https://t.example.com.
    #[arg(long, env = "LINKTRACK_BASE_URL", default_value = DEFAULT_BASE_URL, value_name = "URL")]
    pub base_url: String,
}

#[derive(Debug, Clone, Args)]
pub struct EraseArgs {
    /// The addresses to erase (normalised: trimmed, lowercased, an
    /// international domain in either spelling).
    #[arg(value_name = "ADDRESS", required_unless_present = "email")]
    pub addresses: Vec<String>,

    /// The same as an address argument (`erase --email ADDRESS`, kept for
    /// scripts that use it).
    #[arg(long, hide = true, value_name = "ADDRESS")]
    pub email: Vec<String>,

    /// Wait at most this long for every running server (seen in the last
    /// minute) to take the erasure in before the tables are scrubbed;
    /// servers that did not are named, and erase can be run again.
    #[arg(
        long,
        env = "LINKTRACK_ERASE_WAIT_SECS",
        default_value_t = 30,
        value_name = "SECS"
    )]
    pub wait_secs: u64,

    /// The Redis live layer to clear the address's letters from (segments,
    /// latest clicks): the servers'. Unset leaves Redis as it is and keeps
    /// the letters as pending work, finished by the next erase with it.
    #[command(flatten)]
    pub live: LiveArgs,
}

impl EraseArgs {
    /// Every address given, as arguments or with `--email`.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.addresses.iter().chain(&self.email).map(String::as_str)
    }
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
        reason: SuppressionReason,
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
        reason: SuppressionReason,
    },
    /// Print the list: address, reason, time added (tab-separated).
    List {
        /// Print at most this many.
        #[arg(long, value_name = "N")]
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
        #[arg(long, value_name = "N")]
        limit: Option<u64>,
    },
}

#[derive(Debug, Clone, Args)]
pub struct SegmentArgs {
    /// The mailing id.
    #[arg(long, value_name = "ID")]
    pub mailing: MailingId,
    /// A tag every selected recipient clicked; repeat it for each further
    /// tag they must all have clicked (`--and TAG` is the same flag).
    #[arg(long, alias = "and", required = true, value_name = "TAG")]
    pub tag: Vec<String>,
    /// A tag that selects recipients on its own (union; repeatable).
    #[arg(long, value_name = "TAG")]
    pub or: Vec<String>,
    /// A tag they must not have clicked (repeatable).
    #[arg(long, value_name = "TAG")]
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

/// How SMTP sessions to an MTA are held and retried: `build --smtp` and
/// `relay` hand letters over with the same ones.
#[derive(Debug, Clone, Args)]
pub struct SmtpSessionArgs {
    /// SMTP connections used in parallel (with --pools, each pool's
    /// `connections` per MTA instead, 4 when it does not say).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub smtp_connections: u32,

    /// Messages sent over one SMTP connection before it is closed (QUIT)
    /// and a new one opened, for relays that cap messages per session
    /// (a pool's `messages_per_connection` takes precedence). Default: no limit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub smtp_messages_per_connection: Option<u32>,

    /// Retries of a temporary failure (4xx, refused, timeout) per letter
    /// (the relay's letter then waits in its spool for the next round).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub smtp_retries: u32,

    /// Wait before the first retry, in milliseconds; it doubles each time
    /// (the relay's spool rounds after a failure start at it too, doubling
    /// up to an hour).
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub smtp_backoff_ms: u64,
}

impl SmtpSessionArgs {
    /// The delivery settings for the MTA at `url`.
    pub fn settings(&self, url: String) -> crate::delivery::smtp::SmtpSettings {
        crate::delivery::smtp::SmtpSettings {
            url,
            connections: self.smtp_connections,
            messages_per_connection: self.smtp_messages_per_connection,
            retries: self.smtp_retries,
            backoff: std::time::Duration::from_millis(self.smtp_backoff_ms),
        }
    }
}
