//! Flags of `export`.

use crate::mailing_id::MailingId;
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// One row per letter of a mailing with its engagement: address, letter,
    /// first open, opens, clicks, the links clicked (positions), the bots'
    /// opens and clicks beside, unsubscribed and bounced; to standard
    /// output, streamed. Letters whose address may not be shown
    /// (anonymous, `last_open_day`, opted out of tracking, erased) are left
    /// out and counted on standard error. See docs/operate.md, "Exports".
    Recipients(RecipientsArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RecipientsArgs {
    /// The mailing id.
    #[arg(long, value_name = "ID")]
    pub mailing: MailingId,
    /// csv (a header line, values safe to open in a spreadsheet) or jsonl
    /// (one JSON object per line).
    #[arg(long, value_enum, default_value_t = ExportFormat::Csv)]
    pub format: ExportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Csv,
    Jsonl,
}
