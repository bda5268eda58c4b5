//! `linktrack bounces`: mail that comes back (docs/bounces.md).

use clap::{Args, Subcommand};
use std::path::PathBuf;

// Parsed once per run: the size of its variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum BouncesCommand {
    /// Read bounces, complaints and auto-replies and act on them: a hard
    /// bounce or a complaint suppresses the letter's recipient at once,
    /// soft bounces after --soft-bounces in --soft-days, a policy block
    /// never (docs/bounces.md has the table). One line per message says
    /// what it was and for whom. Each stored decision is queued as an
    /// `email.bounced` or `email.complained` event for the endpoints of
    /// --webhook-url, --webhooks and --amqp-url (the servers send it).
    /// Exit status: 0 every message read and acted on (or nothing to act
    /// on: an auto-reply, a delay warning), 2 some message needs a look
    /// (not a bounce, unreadable, too big, a forged bounce address, a
    /// letter whose rows are gone), 75 (EX_TEMPFAIL: a pipe transport
    /// retries) the database could not be reached, 78 (EX_CONFIG: not
    /// retried) a setting is wrong, such as no LINKTRACK_SECRET, 1 the
    /// source could not be read.
    Ingest(IngestArgs),
    /// Read messages as `ingest` does and print what each is, acting on
    /// none and needing no database: one line per message with its kind
    /// (hard, soft, policy, complaint, auto-reply, delayed, not a bounce),
    /// the reason (docs/bounces.md, "Reasons"), the recipients, the status
    /// code, the format detected and the diagnostic's first words. Check
    /// how linktrack reads your MTA's bounces before pointing them at it.
    /// Exit status: 0 every message read, 1 the source could not be read.
    Classify(ClassifyArgs),
}

#[derive(Debug, Args)]
pub struct ClassifyArgs {
    /// Where the messages are, as for `ingest`: a file (one message, or
    /// an mbox), a maildir or a folder of message files; `-` or nothing:
    /// one message on standard input.
    #[arg(value_name = "FILE|DIR|-")]
    pub source: Option<PathBuf>,

    /// One JSON object per message (`source`, `kind`, `reason`,
    /// `recipients`, `status`, `format`, `diagnostic`) instead of lines.
    #[arg(long)]
    pub json: bool,

    /// A message larger than this is not read (said as such).
    #[arg(long, default_value_t = crate::bounces::ingest::DEFAULT_MAX_BYTES, value_name = "BYTES")]
    pub max_bytes: usize,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    /// Where the messages are: a file (one message, or an mbox), a
    /// maildir or a folder of message files; `-` or nothing: one message
    /// on standard input (a Postfix or Exim pipe transport).
    #[arg(value_name = "FILE|DIR|-")]
    pub source: Option<PathBuf>,

    /// Soft bounces (of distinct letters) that suppress an address...
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub soft_bounces: u32,

    /// ...within this many days.
    #[arg(long, default_value_t = 14, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(1..))]
    pub soft_days: u32,

    /// A message larger than this is not read (named, exit 2).
    #[arg(long, default_value_t = crate::bounces::ingest::DEFAULT_MAX_BYTES, value_name = "BYTES")]
    pub max_bytes: usize,

    /// Days a letter's rows are kept (as `serve --keep-days`): the seal
    /// keys of letters this old must be in the ring.
    #[arg(long, default_value_t = 90, value_name = "DAYS")]
    pub keep_days: u32,

    #[command(flatten)]
    pub seal: super::secrets::RingArgs,

    /// The endpoints that get `email.bounced` and `email.complained`: the
    /// same as the servers' (docs/bounces.md, "Events out"); queued here,
    /// sent by the running servers.
    #[command(flatten)]
    pub outbound: super::webhooks::OutboundArgs,
}
