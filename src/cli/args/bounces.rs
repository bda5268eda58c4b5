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
    /// Read the bounce mailbox where it lives, over IMAP or POP3 with TLS
    /// (imaps://, pop3s://) or STARTTLS (imap://, pop3://): each message
    /// is acted on as `ingest` acts on a file, and only once its decision
    /// is stored is it moved (--after move, the default), marked seen or
    /// deleted, so a cut connection or a crash loses nothing and a re-run
    /// reads nothing twice. A message that needs a look goes to
    /// --look-folder (or is flagged) and the rest are read. The password
    /// is LINKTRACK_MAILBOX_PASSWORD or --password-file, never in the URL.
    /// One pass, or with --watch one every --poll seconds until stopped
    /// (docs/bounces.md, "The bounce mailbox"). Exit status (one pass): 0
    /// every message read and acted on, 2 some message needs a look, 75
    /// the mailbox or the database could not be reached or failed (what
    /// was read is stored; try again), 78 a setting is wrong (the URL,
    /// the password, the folder, a certificate not trusted, the secrets).
    Fetch(FetchArgs),
}

#[derive(Debug, Args)]
pub struct FetchArgs {
    /// The mailbox: imaps://USER@HOST[:PORT]/FOLDER (TLS, port 993;
    /// FOLDER defaults to INBOX), imap://… (STARTTLS, 143),
    /// pop3s://USER@HOST[:PORT] (995) or pop3://… (STLS, 110). The user
    /// percent-encoded (bounces%40example.com).
    #[arg(value_name = "URL")]
    pub mailbox: String,

    /// A file whose first line is the mailbox password (else the
    /// variable LINKTRACK_MAILBOX_PASSWORD).
    #[arg(long, value_name = "FILE")]
    pub password_file: Option<PathBuf>,

    /// What becomes of a message once read and acted on: `move` to
    /// --done-folder, mark it `seen` (only unseen messages are read), or
    /// `delete` it (the only choice for POP3, its default).
    #[arg(long, value_enum, value_name = "ACTION")]
    pub after: Option<AfterArg>,

    /// Where --after move puts messages read (made if missing).
    #[arg(long, default_value = "linktrack-done", value_name = "NAME")]
    pub done_folder: String,

    /// Where messages that need a look go (IMAP, --after move or delete;
    /// made if missing); with --after seen they are flagged instead, and
    /// over POP3 they stay in the mailbox.
    #[arg(long, default_value = "linktrack-look", value_name = "NAME")]
    pub look_folder: String,

    /// Keep reading: a pass every --poll seconds until SIGTERM or
    /// Ctrl-C; a failed pass is said and the next one tries again.
    #[arg(long)]
    pub watch: bool,

    /// Seconds between passes with --watch.
    #[arg(long, default_value_t = 60, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub poll: u64,

    #[command(flatten)]
    pub intake: IntakeArgs,
}

/// `--after`'s choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AfterArg {
    Move,
    Seen,
    Delete,
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

    #[command(flatten)]
    pub intake: IntakeArgs,
}

/// What `ingest` and `fetch` decide with: the soft bounce limit, the
/// largest message read, the seal keys and the endpoints of the events.
#[derive(Debug, Args)]
pub struct IntakeArgs {
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
