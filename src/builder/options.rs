//! What `linktrack build` is asked to do: its options, where the letters
//! go, and the default size limit of a letter.

use super::columns::ColumnMapping;
use std::path::PathBuf;

/// Where built letters go.
#[derive(Debug, Clone)]
pub enum Output {
    Stdout,
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub mailing: PathBuf,
    pub recipients: PathBuf,
    pub out: Output,
    /// JSON Lines of rejected recipients: line, address, reason.
    pub rejects: PathBuf,
    pub base_url: String,
    /// Recipients per batch (its link rows stored before its letters are
    /// written: two transactions of whole letters at once).
    pub batch_size: usize,
    /// Threads building letters.
    pub workers: usize,
    /// Letter IDs reserved per round trip to `sequences`.
    pub id_block: u64,
    /// Draw a progress bar (only ever on a terminal).
    pub progress: bool,
    /// Deliver every letter over SMTP (after its rows are stored). With
    /// `pools`, its retries and backoff apply to every MTA and its URL is
    /// not used.
    pub smtp: Option<crate::delivery::smtp::SmtpSettings>,
    /// The pools file: the mailing's `pool` picks its MTAs.
    pub pools: Option<PathBuf>,
    /// Envelope sender for bounces; default the mailing's From address.
    pub return_path: Option<String>,
    /// `--delivery-log`: each letter's SMTP outcome is appended here before
    /// its connection takes the next letter, and committed to `deliveries`
    /// in groups behind it (`delivery::log_file`). `None`: every outcome
    /// is committed before the next letter (one commit per letter per
    /// connection).
    pub delivery_log: Option<PathBuf>,
    /// `--bounce-domain`: every letter's envelope sender (and
    /// `Return-Path`) is its own VERP address `bounces+{token}@` this
    /// domain, in place of `return_path` (docs/bounces.md).
    pub bounce_domain: Option<String>,
    /// Where the summary goes as JSON (with the conservation counts).
    pub summary: Option<PathBuf>,
    /// The most bytes a letter's HTML may have (the creative before any
    /// letter, each letter after personalising).
    pub max_letter_bytes: usize,
    /// `LINKTRACK_SECRET`: part of the token seal key, as the server's
    /// (docs/token.md); the database must know its key (`seal_keys`).
    pub secret: Option<String>,
    /// `--new-secret`: `secret` is a new key; make it the current one.
    pub new_secret: bool,
    /// `--column FIELD=HEADER`: which recipients column gives a field.
    pub columns: Vec<ColumnMapping>,
    /// Build every letter the old way (no plan): the reference path.
    pub letter_by_letter: bool,
}

/// The default of `--max-letter-bytes`: 5 MiB of HTML is far beyond any
/// newsletter, and well under what one database statement can carry.
pub const DEFAULT_MAX_LETTER_BYTES: usize = 5 << 20;
