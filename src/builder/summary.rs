//! What a build did: the [`Summary`] printed at the end (and written as
//! JSON with `--summary`), and the check that every row read is accounted
//! for.

use super::error::BuildError;
use super::handover;
use super::options::BuildOptions;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

/// What the job did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Summary {
    /// Rows of the recipients file (empty lines are not rows). Always
    /// `letters_built + suppressed + rejected`: the build checks it.
    pub rows_read: u64,
    pub letters_built: u64,
    /// Letters whose rows an earlier, interrupted run had stored.
    pub letters_resumed: u64,
    pub suppressed: u64,
    /// Rows that got no letter for a reason other than suppression
    /// (duplicates included). MTA refusals are not counted here: those
    /// letters were built; see `delivery_rejected`.
    pub rejected: u64,
    /// Rejections by `Reject::group`.
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub links_stored: u64,
    pub seconds: f64,
    /// Letters the MTA accepted in this run (with `--smtp`).
    pub delivered: u64,
    /// Letters the MTA refused for good (5xx) in this run.
    pub delivery_rejected: u64,
    /// Letters an earlier run had already delivered or had refused.
    pub delivery_skipped: u64,
    /// Temporary failures (4xx, refused connection, timeout) retried.
    pub delivery_retried: u64,
    /// Letters built untracked (`track` none: the mailing's, the
    /// recipient's column, or the recipient's own opt-out).
    pub letters_untracked: u64,
    /// Letters built anonymously (shared rows, no address in any but the
    /// unsubscribe row).
    pub letters_anonymous: u64,
    /// Letters built in `last_open_day` mode (the pixel keeps the day of
    /// the address's last open, nothing else); counted as untracked in the
    /// statistics, since their opens and clicks are no events.
    pub letters_last_open_day: u64,
    /// Links left as written by the link-text rule (their text shows an
    /// address on another site than the tracking host; docs/domains.md),
    /// summed over the letters whose links are tracked.
    pub links_showing_address_untracked: u64,
    /// Those links' positions in the creative (1, 2, … in document order).
    pub positions_showing_address: Vec<u32>,
    /// Letters sent again because a killed run handed them over without
    /// recording the reply (letter id, address): they may arrive twice.
    pub delivery_resent: Vec<(u64, String)>,
    /// Letters that printed an empty merge field (an empty column of the
    /// recipient's row, no `default` to fill it): `', your update'`.
    pub letters_with_empty_fields: u64,
    /// Of those, how many had each field empty.
    pub empty_fields: BTreeMap<String, u64>,
}

impl Summary {
    /// Take in what delivery did: `retried` is the count of temporary
    /// failures tried again (the delivery's live counters have it).
    pub fn add_delivery(&mut self, delivered: handover::Delivered, retried: u64) {
        self.delivered = delivered.delivered;
        self.delivery_rejected = delivered.rejected.len() as u64;
        self.delivery_skipped = delivered.skipped;
        self.delivery_retried = retried;
        self.delivery_resent = delivered.resent;
    }

    /// Count a built letter's empty merge fields (none: it printed none).
    pub(super) fn count_empty_fields(&mut self, fields: &[String]) {
        if fields.is_empty() {
            return;
        }
        self.letters_with_empty_fields += 1;
        for field in fields {
            *self.empty_fields.entry(field.clone()).or_default() += 1;
        }
    }

    /// Every row read is built, suppressed or rejected: never left out.
    pub fn is_conserved(&self) -> bool {
        self.rows_read == self.letters_built + self.suppressed + self.rejected
    }

    pub fn letters_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.letters_built as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural =
            |n: u64, one: &'static str, many: &'static str| if n == 1 { one } else { many };
        writeln!(
            f,
            "read {} {} = {} built + {} suppressed + {} rejected",
            self.rows_read,
            plural(self.rows_read, "row", "rows"),
            self.letters_built,
            self.suppressed,
            self.rejected
        )?;
        writeln!(
            f,
            "built {} {} ({} resumed from an earlier run), stored {} {}, in {:.1}s ({:.0} letters/s)",
            self.letters_built,
            plural(self.letters_built, "letter", "letters"),
            self.letters_resumed,
            self.links_stored,
            plural(self.links_stored, "link", "links"),
            self.seconds,
            self.letters_per_second()
        )?;
        write!(
            f,
            "skipped {} suppressed {}; rejected {} {}",
            self.suppressed,
            plural(self.suppressed, "address", "addresses"),
            self.rejected,
            plural(self.rejected, "recipient", "recipients")
        )?;
        if self.delivered + self.delivery_rejected + self.delivery_skipped > 0 {
            write!(
                f,
                "\ndelivered {} over SMTP ({:.0} messages/s), {} refused by the MTA, {} settled by an earlier run, {} temporary {} retried",
                self.delivered,
                if self.seconds > 0.0 { self.delivered as f64 / self.seconds } else { 0.0 },
                self.delivery_rejected,
                self.delivery_skipped,
                self.delivery_retried,
                plural(self.delivery_retried, "failure", "failures")
            )?;
        }
        if self.letters_untracked + self.letters_anonymous > 0 {
            write!(
                f,
                "\n{} letters built untracked, {} anonymous",
                self.letters_untracked, self.letters_anonymous
            )?;
        }
        if self.links_showing_address_untracked > 0 {
            write!(
                f,
                "\n{} links left as written because their text shows an address on another site \
                 than the tracking host (positions {:?} of the creative; docs/domains.md, \
                 `filter_safe`)",
                self.links_showing_address_untracked, self.positions_showing_address
            )?;
        }
        if self.letters_last_open_day > 0 {
            write!(
                f,
                "\n{} letters built keeping only the day of the last open (last_open_day)",
                self.letters_last_open_day
            )?;
        }
        if self.letters_with_empty_fields > 0 {
            let fields: Vec<String> = self
                .empty_fields
                .iter()
                .map(|(field, count)| format!("{field} {count}"))
                .collect();
            write!(
                f,
                "\nwarning: {} {} printed an empty merge field (empty in those rows: {}); give \
                 it a default, e.g. {{{{ first_name | default(\"there\") }}}} (docs/build.md)",
                self.letters_with_empty_fields,
                plural(self.letters_with_empty_fields, "letter", "letters"),
                fields.join(", ")
            )?;
        }
        for (letter_id, email) in &self.delivery_resent {
            write!(
                f,
                "\nsent again, may arrive twice (a killed run handed it over unrecorded): letter {letter_id} to {email}"
            )?;
        }
        for (reason, count) in &self.rejected_by_reason {
            write!(f, "\n  {count:>8}  {reason}")?;
        }
        Ok(())
    }
}

/// The run's time, the summary file when asked for, and the conservation
/// check: a summary whose rows do not add up is an error, never printed.
pub(super) fn finish_summary(
    mut summary: Summary,
    started: Instant,
    options: &BuildOptions,
) -> Result<Summary, BuildError> {
    summary.seconds = started.elapsed().as_secs_f64();
    if let Some(path) = &options.summary {
        write_summary(path, &summary)?;
    }
    if !summary.is_conserved() {
        return Err(BuildError::Internal(format!(
            "rows do not add up: read {} but built {} + suppressed {} + rejected {}",
            summary.rows_read, summary.letters_built, summary.suppressed, summary.rejected
        )));
    }
    Ok(summary)
}

/// The summary as one JSON object, `conserved` included, for scripts.
fn write_summary(path: &Path, summary: &Summary) -> Result<(), BuildError> {
    let mut value = serde_json::to_value(summary).map_err(BuildError::SummaryJson)?;
    value["conserved"] = serde_json::Value::Bool(summary.is_conserved());
    let text = format!("{value:#}\n");
    std::fs::write(path, text).map_err(|source| BuildError::Output {
        path: path.to_owned(),
        source,
    })
}
