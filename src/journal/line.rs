//! The journal line: the on-disk form of one event, a type of its own, versioned, that
//! converts to the database row ([`EventRow`]). The row may change with the
//! schema; a line journaled by an older release must still replay after an
//! upgrade, so the line's format changes only by adding a version.
//!
//! # Versions
//! * 0: the lines written before the format had a version (the row's
//!   fields, no `v`). Read as version 1.
//! * 1: `{"v":1, "event_id", "occurred_at", "kind", "token", "link_id",
//!   "mailing_id", "letter_id", "email", "position", "ip", "user_agent",
//!   "bot", "bot_reason"}`; ids as 32 lowercase hex digits.
//! * 2: the same fields. What changed is the meaning of a null `link_id`:
//!   the event was journaled with its token only (an open answers without
//!   reading the database), and the replay looks the link up and fills in
//!   the link's fields, dropping the event if the token names no link. In
//!   versions 0 and 1 a null `link_id` meant the link was unknown for good,
//!   and such a line is stored as it is.
//!
//! * 3: the same fields, and a line no longer carries the reader's address
//!   (an address erased before the replay must not be written
//!   back from the journal). A hit on one reader's letter (`letter_id` above 0) without an `email` has it read
//!   from the link's row at replay, by token; a row gone by then makes it
//!   a late event, nobody's (an unsubscribe too: the replay applies the
//!   suppression of one the server could not, from the row). A line whose
//!   token is all zeros was journaled for nobody (the reader withdrew from
//!   tracking, `EventRow::withhold`) and is stored as it is.
//! * 4: the fields of version 3 and `country`, the ISO 3166-1 code of the
//!   client address (`serve --geoip`), looked up before the
//!   address was truncated. Lines of versions 0 to 3 have no country and
//!   are stored without one (NULL, counted as "unknown").
//!
//! * 5: the fields of version 4, meaning the same, in a line of
//!   text of a fixed layout instead of JSON, written and read by hand
//!   (serde_json's generic machinery was a large share of what an open
//!   cost the server, written and read again; docs/benchmarks.md). See
//!   "The text line" below.
//!
//! In versions 0 to 4 (JSON) a null field may be left out of the line, and
//! readers take an absent optional field as null (serde's derive does so for
//! `Option` fields).
//!
//! A later version that adds a field gives it a default here (so older
//! lines still read) and says in [`JsonLine::into_row`] (or the text
//! reader) what an old line means for it.
//!
//! # The text line (version 5 on)
//!
//! A JSON line starts with `{`; a text line with its version and a tab.
//! Fifteen fields separated by one tab each, always all of them, in this
//! order ([`FIELDS`]), here an open's with its tabs shown as `|`:
//!
//! ```text
//! v|event_id|occurred_at|kind|token|link_id|mailing_id|letter_id|email|position|ip|user_agent|country|bot_reason|bot
//! 5|0192f5a0c0de7000800000000000abcd|2026-11-22T10:00:00.000000000Z|open|0192f5a0c0de7000800000000000beef|\N|\N|\N|\N|\N|192.0.2.0|Mozilla/5.0|SE|\N|0
//! ```
//!
//! * ids: 32 lowercase hex digits; `occurred_at`: RFC 3339 with
//!   nanoseconds, as version 4 wrote it; `kind`: the lowercase name;
//!   numbers in decimal; `bot`: `0` or `1`.
//! * `\N` is null (as in MariaDB's `LOAD DATA`), in any field but the
//!   version, ids, time, kind and `bot`, which are never null. An empty
//!   field is an empty text (and no number).
//! * In a text, a backslash, tab, newline and carriage return are written
//!   `\\`, `\t`, `\n` and `\r`; nothing else is escaped, and no other
//!   backslash sequence reads.
//! * `bot`, one byte, is last: a line cut short (the torn tail of a write a
//!   crash interrupted) has fewer fields or an empty last one, and never
//!   reads as a whole line.
//!
//! A line that does not read is an error naming the field and what is
//! wrong with it ([`JournalLineError`]); the replay adds the segment and the
//! line number.

use crate::event::EventRow;
use crate::kind::EventKind;
use chrono::{DateTime, Utc};

/// The version this release writes.
pub(crate) const CURRENT_VERSION: u32 = 5;

/// The last version written as JSON; later ones are text lines.
const LAST_JSON_VERSION: u32 = 4;

/// The fields of a text line, in their order.
pub(crate) const FIELDS: [&str; 15] = [
    "v",
    "event_id",
    "occurred_at",
    "kind",
    "token",
    "link_id",
    "mailing_id",
    "letter_id",
    "email",
    "position",
    "ip",
    "user_agent",
    "country",
    "bot_reason",
    "bot",
];

/// A null field of a text line.
const NULL: &str = "\\N";

/// Reading and writing journal lines: [`JournalLine::encode`] writes the
/// current version, [`JournalLine::decode_replayable`] reads every version.
pub(crate) struct JournalLine;

/// A line that is not a journal record this release can read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalLineError {
    /// A JSON line (versions 0 to 4) that does not read.
    #[error("not a journal record: {0}")]
    Unreadable(#[from] serde_json::Error),
    #[error("journal record version {0} is newer than this release reads ({CURRENT_VERSION})")]
    NewerVersion(u32),
    /// A JSON line claiming a version that is written as text.
    #[error(
        "not a journal record: JSON claiming version {0}, which is written as text \
         (JSON lines are versions 0 to {LAST_JSON_VERSION})"
    )]
    JsonOfTextVersion(u32),
    /// A text line without all of its fields: cut short (torn) or garbled.
    #[error(
        "not a journal record: a version {CURRENT_VERSION} line has {expected} tab-separated \
         fields, this one {found} (torn or garbled)"
    )]
    FieldCount { found: usize, expected: usize },
    /// A text line with a field that does not read.
    #[error("not a journal record: field {field} {problem}: {text:?}")]
    BadField {
        field: &'static str,
        problem: &'static str,
        /// The field as written (its first 64 characters).
        text: String,
    },
}

impl JournalLine {
    /// The line for `row`, in the current version, with room for the
    /// newline the journal appends (not written here).
    pub(crate) fn encode(row: &EventRow) -> Vec<u8> {
        let texts = [
            &row.mailing_id,
            &row.email,
            &row.ip,
            &row.user_agent,
            &row.country,
            &row.bot_reason,
        ];
        // The fixed part: the version, two ids, the time, the longest kind,
        // six nulls or numbers, the flag and 14 tabs, with room to spare.
        let text_bytes: usize = texts
            .iter()
            .map(|t| t.as_ref().map_or(2, String::len))
            .sum();
        let mut line = Line(Vec::with_capacity(192 + text_bytes));
        line.0.extend_from_slice(b"5");
        line.id(&row.event_id);
        line.0.push(b'\t');
        crate::timestamp::with_rfc3339(&row.occurred_at, |text| {
            line.0.extend_from_slice(text.as_bytes())
        });
        line.0.push(b'\t');
        line.0.extend_from_slice(row.kind.as_str().as_bytes());
        line.id(&row.token);
        line.number(row.link_id);
        line.text(row.mailing_id.as_deref());
        line.number(row.letter_id);
        line.text(row.email.as_deref());
        line.number(row.position.map(u64::from));
        line.text(row.ip.as_deref());
        line.text(row.user_agent.as_deref());
        line.text(row.country.as_deref());
        line.text(row.bot_reason.as_deref());
        line.0
            .extend_from_slice(if row.bot { b"\t1" } else { b"\t0" });
        line.0
    }

    /// Read one line (without its newline).
    #[cfg(test)]
    pub(crate) fn decode(line: &str) -> Result<EventRow, JournalLineError> {
        Self::decode_replayable(line).map(|event| event.row)
    }

    /// Read one line (without its newline), of any version, saying what
    /// the replay must look up (see the module docs, versions 2 and 3).
    pub(crate) fn decode_replayable(line: &str) -> Result<Replayable, JournalLineError> {
        if line.starts_with('{') {
            let record: JsonLine = serde_json::from_str(line)?;
            let v = record.v;
            let row = record.into_row()?;
            return Ok(Replayable::of(row, v));
        }
        let (v, row) = read_text(line)?;
        Ok(Replayable::of(row, v))
    }
}

/// A text line being written: each field after the version starts with
/// its tab.
struct Line(Vec<u8>);

impl Line {
    fn id(&mut self, id: &[u8; 16]) {
        self.0.push(b'\t');
        self.0
            .extend_from_slice(hex::Buffer::<16>::new().format(id).as_bytes());
    }

    fn number(&mut self, number: Option<u64>) {
        self.0.push(b'\t');
        match number {
            Some(number) => self
                .0
                .extend_from_slice(itoa::Buffer::new().format(number).as_bytes()),
            None => self.0.extend_from_slice(NULL.as_bytes()),
        }
    }

    fn text(&mut self, text: Option<&str>) {
        self.0.push(b'\t');
        let Some(text) = text else {
            self.0.extend_from_slice(NULL.as_bytes());
            return;
        };
        let bytes = text.as_bytes();
        // One pass without a branch per byte (the compiler vectorises it):
        // any control character below 14 or backslash sends the text the
        // slow way, which escapes only the four that need it.
        let needs_escape = bytes
            .iter()
            .fold(false, |found, &byte| found | (byte < 14) | (byte == b'\\'));
        if !needs_escape {
            self.0.extend_from_slice(bytes);
            return;
        }
        for &byte in bytes {
            match byte {
                b'\\' => self.0.extend_from_slice(b"\\\\"),
                b'\t' => self.0.extend_from_slice(b"\\t"),
                b'\n' => self.0.extend_from_slice(b"\\n"),
                b'\r' => self.0.extend_from_slice(b"\\r"),
                other => self.0.push(other),
            }
        }
    }
}

/// A text line's version and row.
fn read_text(line: &str) -> Result<(u32, EventRow), JournalLineError> {
    // The tabs found in one pass (`str::split` searched anew for each).
    let mut fields = [""; FIELDS.len()];
    let mut tabs = memchr::memchr_iter(b'\t', line.as_bytes());
    let (mut start, mut found, mut ended) = (0, 0, false);
    for slot in fields.iter_mut() {
        let end = tabs.next().unwrap_or(line.len());
        // A tab is ASCII: every `start` and `end` is a character boundary.
        *slot = line.get(start..end).unwrap_or_default();
        found += 1;
        if end == line.len() {
            ended = true;
            break;
        }
        start = end + 1;
    }
    let v = version(fields[0])?;
    if !ended {
        // The fields past the last one read: one after each tab left.
        found += 1 + tabs.count();
    }
    if found != FIELDS.len() {
        return Err(JournalLineError::FieldCount {
            found,
            expected: FIELDS.len(),
        });
    }
    let field = Fields(&fields);
    let row = EventRow {
        event_id: field.id(1)?,
        occurred_at: field.time(2)?,
        kind: field.kind(3)?,
        token: field.id(4)?,
        link_id: field.number(5)?,
        mailing_id: field.text(6)?,
        letter_id: field.number(7)?,
        email: field.text(8)?,
        position: field.number(9)?,
        ip: field.text(10)?,
        user_agent: field.text(11)?,
        country: field.text(12)?,
        bot_reason: field.text(13)?,
        bot: field.flag(14)?,
    };
    Ok((v, row))
}

/// The version of a text line: one this release writes as text, or newer.
fn version(text: &str) -> Result<u32, JournalLineError> {
    let v: u32 = text
        .parse()
        .map_err(|_| bad_field(0, "is not a version number", text))?;
    if v > CURRENT_VERSION {
        return Err(JournalLineError::NewerVersion(v));
    }
    if v <= LAST_JSON_VERSION {
        return Err(bad_field(
            0,
            "is a version written as JSON, not as text",
            text,
        ));
    }
    Ok(v)
}

fn bad_field(index: usize, problem: &'static str, text: &str) -> JournalLineError {
    let shown = text
        .char_indices()
        .nth(64)
        .map_or(text, |(end, _)| &text[..end]);
    JournalLineError::BadField {
        field: FIELDS.get(index).copied().unwrap_or("?"),
        problem,
        text: shown.to_owned(),
    }
}

/// The fields of a text line, read by their index in [`FIELDS`].
struct Fields<'a>(&'a [&'a str; FIELDS.len()]);

impl Fields<'_> {
    fn get(&self, index: usize) -> &str {
        self.0.get(index).copied().unwrap_or_default()
    }

    fn id(&self, index: usize) -> Result<[u8; 16], JournalLineError> {
        let text = self.get(index);
        if text.len() != 32 {
            return Err(bad_field(index, "is not 32 hex digits", text));
        }
        hex::decode_to_array(text).map_err(|_| bad_field(index, "is not 32 hex digits", text))
    }

    fn time(&self, index: usize) -> Result<DateTime<Utc>, JournalLineError> {
        let text = self.get(index);
        crate::timestamp::parse_rfc3339(text)
            .ok_or_else(|| bad_field(index, "is not an RFC 3339 time", text))
    }

    fn kind(&self, index: usize) -> Result<EventKind, JournalLineError> {
        let text = self.get(index);
        text.parse()
            .map_err(|_| bad_field(index, "is not an event kind", text))
    }

    fn number<N: std::str::FromStr>(&self, index: usize) -> Result<Option<N>, JournalLineError> {
        match self.get(index) {
            NULL => Ok(None),
            // `parse` takes a leading `+`, which is never written.
            text if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text
                .parse()
                .map(Some)
                .map_err(|_| bad_field(index, "is no number in range", text)),
            text => Err(bad_field(index, "is not a decimal number or \\N", text)),
        }
    }

    fn text(&self, index: usize) -> Result<Option<String>, JournalLineError> {
        let text = self.get(index);
        if text == NULL {
            return Ok(None);
        }
        if memchr::memchr(b'\\', text.as_bytes()).is_none() {
            return Ok(Some(text.to_owned()));
        }
        let mut out = String::with_capacity(text.len());
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                out.push(c);
                continue;
            }
            out.push(match chars.next() {
                Some('\\') => '\\',
                Some('t') => '\t',
                Some('n') => '\n',
                Some('r') => '\r',
                _ => {
                    return Err(bad_field(
                        index,
                        "has a backslash escape that does not read",
                        text,
                    ))
                }
            });
        }
        Ok(Some(out))
    }

    fn flag(&self, index: usize) -> Result<bool, JournalLineError> {
        match self.get(index) {
            "0" => Ok(false),
            "1" => Ok(true),
            text => Err(bad_field(index, "is neither 0 nor 1", text)),
        }
    }
}

/// One JSON line (versions 0 to 4), as read.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct JsonLine {
    /// Absent (0) in lines from before versioning.
    #[serde(default)]
    v: u32,
    #[serde(with = "hex::serde")]
    event_id: [u8; 16],
    occurred_at: DateTime<Utc>,
    kind: EventKind,
    #[serde(with = "hex::serde")]
    token: [u8; 16],
    #[serde(default)]
    link_id: Option<u64>,
    #[serde(default)]
    mailing_id: Option<String>,
    #[serde(default)]
    letter_id: Option<u64>,
    #[serde(default)]
    email: Option<String>,
    #[serde(default)]
    position: Option<u32>,
    #[serde(default)]
    ip: Option<String>,
    #[serde(default)]
    user_agent: Option<String>,
    /// Version 4; absent (null) before.
    #[serde(default)]
    country: Option<String>,
    bot: bool,
    #[serde(default)]
    bot_reason: Option<String>,
}

impl JsonLine {
    /// The row this record stands for. Versions 0 to 3 have the same
    /// fields; version 4 adds `country`, which older lines read as null.
    fn into_row(self) -> Result<EventRow, JournalLineError> {
        if self.v > CURRENT_VERSION {
            return Err(JournalLineError::NewerVersion(self.v));
        }
        if self.v > LAST_JSON_VERSION {
            return Err(JournalLineError::JsonOfTextVersion(self.v));
        }
        Ok(EventRow {
            event_id: self.event_id,
            occurred_at: self.occurred_at,
            kind: self.kind,
            token: self.token,
            link_id: self.link_id,
            mailing_id: self.mailing_id,
            letter_id: self.letter_id,
            email: self.email,
            position: self.position,
            ip: self.ip,
            user_agent: self.user_agent,
            country: self.country,
            bot: self.bot,
            bot_reason: self.bot_reason,
        })
    }
}

/// A journaled event on its way into the database.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Replayable {
    pub row: EventRow,
    /// What the replay must read from the link's row, by token.
    pub resolve: Resolve,
}

impl Replayable {
    /// A row as a line of version `v` means it (see the module docs).
    pub(crate) fn of(row: EventRow, v: u32) -> Replayable {
        let resolve = if row.is_withheld() && v >= 3 {
            Resolve::Nothing
        } else if v >= 2 && row.link_id.is_none() {
            Resolve::Link
        } else if v >= 3 && row.has_letter() && row.email.is_none() && row.link_id != Some(0) {
            Resolve::Reader
        } else {
            Resolve::Nothing
        };
        Replayable { row, resolve }
    }

    /// A row this release made (the fallback queue's, never journaled).
    pub(crate) fn current(row: EventRow) -> Replayable {
        Replayable::of(row, CURRENT_VERSION)
    }
}

/// What the replay reads from a journaled event's link row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resolve {
    /// Nothing: the line is stored as it is.
    Nothing,
    /// Every link field (an open journaled with its token only, version
    /// 2): no row means no event (a forged pixel URL is no open).
    Link,
    /// The reader's address (version 3): no row means a late event.
    Reader,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A line exactly as the release before versioning wrote it.
    const VERSION_0_LINE: &str = r#"{"event_id":"0192f5a0c0de7000800000000000abcd","occurred_at":"2026-11-22T10:00:00Z","kind":"click","token":"0192f5a0c0de7000800000000000beef","link_id":42,"mailing_id":"m-1","letter_id":7,"email":"ann@example.com","position":3,"ip":"192.0.2.0/24","user_agent":"Mozilla/5.0","bot":false,"bot_reason":null}"#;

    /// An open exactly as version 4 (the last JSON version) wrote it.
    const VERSION_4_OPEN: &str = r#"{"v":4,"event_id":"0192f5a0c0de7000800000000000abcd","occurred_at":"2026-11-22T10:00:00.123456789Z","kind":"open","token":"0192f5a0c0de7000800000000000beef","ip":"192.0.2.0","user_agent":"Mozilla/5.0 (X11)","country":"SE","bot":true,"bot_reason":"machine:apple_mpp"}"#;

    fn text(row: &EventRow) -> String {
        String::from_utf8(JournalLine::encode(row)).unwrap()
    }

    #[test]
    fn a_line_from_before_versioning_reads_as_the_same_row() {
        let row = JournalLine::decode(VERSION_0_LINE).unwrap();
        assert_eq!(row.kind, EventKind::Click);
        assert_eq!(
            hex::encode(row.event_id),
            "0192f5a0c0de7000800000000000abcd"
        );
        assert_eq!(hex::encode(row.token), "0192f5a0c0de7000800000000000beef");
        assert_eq!(
            (row.link_id, row.letter_id, row.position),
            (Some(42), Some(7), Some(3))
        );
        assert_eq!(row.email.as_deref(), Some("ann@example.com"));
        // Written again, it is the current version with the same fields.
        let line = text(&row);
        assert!(
            line.starts_with("5\t0192f5a0c0de7000800000000000abcd\t"),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    /// The layout of version 5, byte for byte: a change to it is a new
    /// version, and this test says so.
    #[test]
    fn version_5_is_the_documented_layout() {
        let open = JournalLine::decode(VERSION_4_OPEN).unwrap();
        assert_eq!(
            text(&open),
            "5\t0192f5a0c0de7000800000000000abcd\t2026-11-22T10:00:00.123456789Z\topen\t\
             0192f5a0c0de7000800000000000beef\t\\N\t\\N\t\\N\t\\N\t\\N\t192.0.2.0\t\
             Mozilla/5.0 (X11)\tSE\tmachine:apple_mpp\t1"
        );
        let click = JournalLine::decode(VERSION_0_LINE).unwrap();
        assert_eq!(
            text(&click),
            "5\t0192f5a0c0de7000800000000000abcd\t2026-11-22T10:00:00.000000000Z\tclick\t\
             0192f5a0c0de7000800000000000beef\t42\tm-1\t7\tann@example.com\t3\t192.0.2.0/24\t\
             Mozilla/5.0\t\\N\t\\N\t0"
        );
        assert_eq!(text(&open).split('\t').count(), FIELDS.len());
    }

    #[test]
    fn the_time_is_written_to_the_nanosecond_and_read_back_exactly() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        row.occurred_at += chrono::Duration::nanoseconds(123_456_789);
        let line = text(&row);
        assert!(
            line.contains("\t2026-11-22T10:00:00.123456789Z\t"),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
        // A year fixed widths cannot hold is written by chrono, and read back.
        row.occurred_at = chrono::DateTime::from_timestamp(253_402_300_800, 5).unwrap();
        let line = text(&row);
        assert!(
            line.contains("\t+10000-01-01T00:00:00.000000005Z\t"),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    #[test]
    fn null_fields_are_written_as_null_and_read_back_as_null() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        (row.link_id, row.mailing_id, row.letter_id) = (None, None, None);
        (row.email, row.position, row.bot_reason) = (None, None, None);
        let line = text(&row);
        assert_eq!(line.matches("\t\\N").count(), 7, "{line}");
        let event = JournalLine::decode_replayable(&line).unwrap();
        assert_eq!(event.row, row);
        assert_eq!(event.resolve, Resolve::Link, "a null link_id");
        // Null and empty are two things.
        row.user_agent = Some(String::new());
        row.mailing_id = Some("\\N".to_owned());
        let line = text(&row);
        assert!(line.contains("\t\\\\N\t"), "{line}");
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    #[test]
    fn only_current_lines_without_a_link_are_resolved_at_replay() {
        let unlinked = VERSION_0_LINE.replace(r#""link_id":42"#, r#""link_id":null"#);
        let no_address = VERSION_0_LINE.replace(r#""email":"ann@example.com","#, "");
        let withheld = no_address
            .replace("0192f5a0c0de7000800000000000beef", &"0".repeat(32))
            .replace(r#""link_id":42"#, r#""link_id":null"#)
            .replace(r#""letter_id":7"#, r#""letter_id":0"#);
        let current = |line: &str| text(&JournalLine::decode(line).unwrap());
        for (line, resolve) in [
            (VERSION_0_LINE.to_owned(), Resolve::Nothing),
            (unlinked.clone(), Resolve::Nothing),
            (unlinked.replacen('{', r#"{"v":1,"#, 1), Resolve::Nothing),
            (unlinked.replacen('{', r#"{"v":2,"#, 1), Resolve::Link),
            (
                VERSION_0_LINE.replacen('{', r#"{"v":2,"#, 1),
                Resolve::Nothing,
            ),
            (no_address.replacen('{', r#"{"v":2,"#, 1), Resolve::Nothing),
            (no_address.replacen('{', r#"{"v":3,"#, 1), Resolve::Reader),
            (
                VERSION_0_LINE.replacen('{', r#"{"v":3,"#, 1),
                Resolve::Nothing,
            ),
            (withheld.replacen('{', r#"{"v":3,"#, 1), Resolve::Nothing),
            (VERSION_4_OPEN.to_owned(), Resolve::Link),
            // Version 5 means what version 4 did.
            (current(&unlinked), Resolve::Link),
            (current(&no_address), Resolve::Reader),
            (current(VERSION_0_LINE), Resolve::Nothing),
            (current(&withheld), Resolve::Nothing),
            (current(VERSION_4_OPEN), Resolve::Link),
        ] {
            let event = JournalLine::decode_replayable(&line).unwrap();
            assert_eq!(event.resolve, resolve, "{line}");
        }
    }

    #[test]
    fn version_4_carries_the_country_and_older_versions_read_without_one() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        assert_eq!(row.country, None, "version 0 has no country");
        for v in 1..=3 {
            let old = VERSION_0_LINE.replacen('{', &format!(r#"{{"v":{v},"#), 1);
            assert_eq!(JournalLine::decode(&old).unwrap().country, None, "v{v}");
        }
        let open = JournalLine::decode(VERSION_4_OPEN).unwrap();
        assert_eq!(open.country.as_deref(), Some("SE"));
        assert_eq!(open.bot_reason.as_deref(), Some("machine:apple_mpp"));
        assert!(open.bot);
        assert_eq!(open.link_id, None);
        row.country = Some("SE".to_owned());
        let line = text(&row);
        assert!(line.contains("\tSE\t"), "{line}");
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    #[test]
    fn a_newer_version_and_a_foreign_kind_are_errors_not_guesses() {
        let newer = VERSION_0_LINE.replacen('{', r#"{"v":6,"#, 1);
        assert!(matches!(
            JournalLine::decode(&newer),
            Err(JournalLineError::NewerVersion(6))
        ));
        let json_5 = VERSION_0_LINE.replacen('{', r#"{"v":5,"#, 1);
        assert!(matches!(
            JournalLine::decode(&json_5),
            Err(JournalLineError::JsonOfTextVersion(5))
        ));
        let foreign = VERSION_0_LINE.replace(r#""kind":"click""#, r#""kind":"bogus""#);
        assert!(matches!(
            JournalLine::decode(&foreign),
            Err(JournalLineError::Unreadable(_))
        ));
        let line = text(&JournalLine::decode(VERSION_0_LINE).unwrap());
        // A later text version may have more fields: its number says why
        // it does not read, not its field count.
        let text_6 = format!("6{}\textra", &line[1..]);
        assert!(matches!(
            JournalLine::decode(&text_6),
            Err(JournalLineError::NewerVersion(6))
        ));
        let foreign = line.replace("\tclick\t", "\tbogus\t");
        let err = JournalLine::decode(&foreign).unwrap_err();
        assert_eq!(
            err.to_string(),
            r#"not a journal record: field kind is not an event kind: "bogus""#
        );
        let text_4 = format!("4{}", &line[1..]);
        assert!(
            matches!(
                JournalLine::decode(&text_4),
                Err(JournalLineError::BadField { field: "v", .. })
            ),
            "version 4 is JSON only"
        );
    }

    /// Every field that does not read is named, with what is wrong and
    /// the text found.
    #[test]
    fn a_garbled_field_is_named_in_the_error() {
        let line = text(&JournalLine::decode(VERSION_0_LINE).unwrap());
        let garble = |index: usize, with: &str| {
            let mut fields: Vec<&str> = line.split('\t').collect();
            fields[index] = with;
            JournalLine::decode(&fields.join("\t"))
                .unwrap_err()
                .to_string()
        };
        for (index, with, problem) in [
            (0, "five", "v is not a version number"),
            (
                1,
                "0192f5a0c0de7000800000000000abc",
                "event_id is not 32 hex digits",
            ),
            (
                2,
                "2026-11-22 10:00:00",
                "occurred_at is not an RFC 3339 time",
            ),
            (
                4,
                "0192f5a0c0de7000800000000000beeg",
                "token is not 32 hex digits",
            ),
            (5, "-1", "link_id is not a decimal number or \\N"),
            (5, "", "link_id is not a decimal number or \\N"),
            (7, "18446744073709551616", "letter_id is no number in range"),
            (9, "4294967296", "position is no number in range"),
            (
                11,
                "Mozilla\\x",
                "user_agent has a backslash escape that does not read",
            ),
            (
                11,
                "Mozilla\\",
                "user_agent has a backslash escape that does not read",
            ),
            (14, "true", "bot is neither 0 nor 1"),
            (14, "", "bot is neither 0 nor 1"),
        ] {
            let err = garble(index, with);
            assert_eq!(
                err,
                format!("not a journal record: field {problem}: {with:?}"),
                "field {index}"
            );
        }
        for (extra, found) in [("\textra", 16), ("\t", 16), ("\t\t", 17)] {
            assert!(
                matches!(
                    JournalLine::decode(&format!("{line}{extra}")),
                    Err(JournalLineError::FieldCount { found: f, expected: 15 }) if f == found
                ),
                "{extra:?}"
            );
        }
        let long = "x".repeat(100);
        assert!(garble(2, &long).ends_with(&format!("{:?}", &long[..64])));
    }

    /// A line cut short anywhere (the torn tail of an interrupted write)
    /// is an error, never a shorter event.
    #[test]
    fn every_torn_line_is_an_error() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        row.bot_reason = Some("ua:curl".to_owned());
        row.bot = true;
        let line = text(&row);
        for end in 1..line.len() {
            let torn = &line[..end];
            match JournalLine::decode(torn) {
                Err(JournalLineError::FieldCount {
                    found,
                    expected: 15,
                }) => {
                    assert!(found < 15, "{torn}")
                }
                Err(JournalLineError::BadField { .. }) => {}
                other => panic!("{torn:?} read as {other:?}"),
            }
        }
        let err = JournalLine::decode(&line[..line.len() / 2]).unwrap_err();
        assert!(
            err.to_string()
                .contains("tab-separated fields, this one 5 (torn or garbled)"),
            "{err}"
        );
    }

    fn odd_text() -> impl Strategy<Value = Option<String>> {
        let pieces = prop_oneof![
            Just("\\".to_owned()),
            Just("\t".to_owned()),
            Just("\n".to_owned()),
            Just("\r".to_owned()),
            Just("\\N".to_owned()),
            Just("\\t".to_owned()),
            Just("{".to_owned()),
            Just("\"".to_owned()),
            Just("\u{2028}".to_owned()),
            Just("\u{0}".to_owned()),
            any::<String>(),
            "[a-zA-Z0-9 /;().]{0,20}",
        ];
        proptest::option::of(proptest::collection::vec(pieces, 0..6).prop_map(|p| p.concat()))
    }

    prop_compose! {
        fn odd_row()(
            event_id in any::<[u8; 16]>(),
            seconds in -62_000_000_000i64..300_000_000_000,
            nanos in 0u32..1_000_000_000,
            kind in proptest::sample::select(EventKind::ALL.to_vec()),
            token in any::<[u8; 16]>(),
            link_id in any::<Option<u64>>(),
            mailing_id in odd_text(),
            letter_id in any::<Option<u64>>(),
            email in odd_text(),
            position in any::<Option<u32>>(),
            ip in odd_text(),
            user_agent in odd_text(),
            country in odd_text(),
            bot in any::<bool>(),
            bot_reason in odd_text(),
        ) -> EventRow {
            EventRow {
                event_id,
                occurred_at: DateTime::from_timestamp(seconds, nanos).unwrap(),
                kind,
                token,
                link_id,
                mailing_id,
                letter_id,
                email,
                position,
                ip,
                user_agent,
                country,
                bot,
                bot_reason,
            }
        }
    }

    proptest! {
        /// Whatever an event holds, its line is one line of the journal
        /// (as the replay splits it) and reads back as the same event.
        #[test]
        fn every_row_round_trips_through_one_line(row in odd_row()) {
            let line = text(&row);
            prop_assert!(!line.contains('\n') && !line.contains('\r'), "{:?}", line);
            let journal = format!("{line}\n");
            prop_assert_eq!(journal.lines().collect::<Vec<_>>(), vec![line.as_str()]);
            prop_assert_eq!(JournalLine::decode(&line).unwrap(), row);
        }

        /// A line with a byte changed or cut off reads as an error or as an
        /// event, never as a panic.
        #[test]
        fn a_garbled_line_never_panics(row in odd_row(), at in any::<proptest::sample::Index>(), byte in any::<u8>()) {
            let mut line = JournalLine::encode(&row);
            let at = at.index(line.len());
            line[at] = byte;
            if let Ok(garbled) = std::str::from_utf8(&line) {
                let _ = JournalLine::decode(garbled);
                if let Some(cut) = garbled.get(..at) {
                    let _ = JournalLine::decode(cut);
                }
            }
        }
    }
}
