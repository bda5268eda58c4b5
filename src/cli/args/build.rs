//! Flags of `build`.

use super::secrets::SecretArgs;
use super::serve::TrackingArgs;
use clap::Args;
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

    /// SMTP connections used in parallel (per MTA with --pools).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub smtp_connections: u32,

    /// Messages sent over one SMTP connection before it is closed (QUIT)
    /// and a new one opened, for relays that cap messages per session
    /// (a pool's `messages_per_connection` takes precedence). Default: no limit.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub smtp_messages_per_connection: Option<u32>,

    /// Retries of a temporary failure (4xx, refused, timeout) per letter.
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub smtp_retries: u32,

    /// Wait before the first retry, in milliseconds; it doubles each time.
    #[arg(long, default_value_t = 1000, value_name = "MS")]
    pub smtp_backoff_ms: u64,

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
