//! Flags of `export`.

use crate::mailing_id::MailingId;
use clap::{Args, Subcommand, ValueEnum};

#[derive(Debug, Subcommand)]
pub enum ExportCommand {
    /// One row per letter of a mailing with its engagement: address, letter,
    /// first open, opens, clicks, the links clicked (positions), the bots'
    /// opens and clicks beside, unsubscribed, bounced, delivered,
    /// complained, the clicked links' URLs and which version of a repointed
    /// link each click reached; to standard output,
    /// streamed. `--with FILE` appends the recipients file's other columns
    /// (names and the like, which linktrack does not keep). Letters whose address may not be shown
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
    /// The recipients file the mailing was built from (CSV or JSON Lines,
    /// read as `build` reads it): its other columns (first_name, …) are
    /// appended to each row, matched by address. linktrack keeps no
    /// recipient's fields, so they come from this file; its rows that are
    /// no letter of the mailing are ignored (docs/operate.md, "Exports").
    #[arg(long = "with", value_name = "FILE")]
    pub with: Option<std::path::PathBuf>,
    /// With `--with`: which column of the file is the address, as for
    /// `build` (`--column email="Contact Email"`); other mappings rename a
    /// column.
    #[arg(long, value_name = "FIELD=HEADER", requires = "with")]
    pub column: Vec<crate::builder::ColumnMapping>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Csv,
    Jsonl,
}
