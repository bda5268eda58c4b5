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
//!   (issue 38: an address erased before the replay must not be written
//!   back from the journal). A hit on one reader's letter (`letter_id` above 0) without an `email` has it read
//!   from the link's row at replay, by token; a row gone by then makes it
//!   a late event, nobody's (an unsubscribe too: the replay applies the
//!   suppression of one the server could not, from the row). A line whose
//!   token is all zeros was journaled for nobody (the reader withdrew from
//!   tracking, `EventRow::withhold`) and is stored as it is.
//! * 4: the fields of version 3 and `country`, the ISO 3166-1 code of the
//!   client address (`serve --geoip`, issue 42), looked up before the
//!   address was truncated. Lines of versions 0 to 3 have no country and
//!   are stored without one (NULL, counted as "unknown").
//!
//! In every version a null field may be left out of the line, and this
//! release leaves out each one: an open, journaled before its link is
//! known, has five fewer fields to write, read and store. (Readers of every
//! version take an absent optional field as null: serde's derive does so
//! for `Option` fields.)
//!
//! A later version that adds a field gives it a default here (so versions 0
//! and 1 still read) and says in [`JournalLine::into_row`] what an old
//! line means for it.

use crate::event::EventRow;
use crate::kind::EventKind;
use chrono::{DateTime, Utc};
use std::borrow::Cow;

/// The version this release writes.
pub(crate) const CURRENT_VERSION: u32 = 4;

/// One journal line. The text fields borrow from the row when a line is
/// written (encoding an event copies nothing) and own their text when a
/// line is read.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct JournalLine<'a> {
    /// Absent (0) in lines from before versioning.
    #[serde(default)]
    pub v: u32,
    #[serde(with = "hex_id")]
    pub event_id: [u8; 16],
    #[serde(with = "rfc3339")]
    pub occurred_at: DateTime<Utc>,
    pub kind: EventKind,
    #[serde(with = "hex_id")]
    pub token: [u8; 16],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mailing_id: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub letter_id: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<Cow<'a, str>>,
    /// Version 4 on; absent (null) before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<Cow<'a, str>>,
    pub bot: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bot_reason: Option<Cow<'a, str>>,
}

/// The ids as 32 lowercase hex digits, as `hex::serde` writes and reads
/// them, but written from a buffer on the stack: `hex::serde` made a String
/// per id, two per event on the request path.
mod hex_id {
    pub(super) use hex::serde::deserialize;

    pub(super) fn serialize<S: serde::Serializer>(id: &[u8; 16], to: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut digits = [0u8; 32];
        // Neither can fail: the buffer is twice the id, and hex digits are ASCII.
        hex::encode_to_slice(id, &mut digits).map_err(S::Error::custom)?;
        to.serialize_str(std::str::from_utf8(&digits).map_err(S::Error::custom)?)
    }
}

/// The time as RFC 3339 with nanoseconds (`2026-11-22T10:00:00.000000000Z`),
/// written from a buffer on the stack (`crate::timestamp`); read by chrono,
/// which also reads the shorter forms older lines have.
mod rfc3339 {
    use chrono::{DateTime, Utc};
    use serde::Deserialize;

    pub(super) fn serialize<S: serde::Serializer>(
        at: &DateTime<Utc>,
        to: S,
    ) -> Result<S::Ok, S::Error> {
        crate::timestamp::with_rfc3339(at, |text| to.serialize_str(text))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        from: D,
    ) -> Result<DateTime<Utc>, D::Error> {
        DateTime::<Utc>::deserialize(from)
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

/// A line that is not a journal record this release can read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalLineError {
    #[error("not a journal record: {0}")]
    Unreadable(#[from] serde_json::Error),
    #[error("journal record version {0} is newer than this release reads ({CURRENT_VERSION})")]
    NewerVersion(u32),
}

impl JournalLine<'_> {
    /// The line for `row`, in the current version (no trailing newline).
    pub(crate) fn encode(row: &EventRow) -> Result<Vec<u8>, serde_json::Error> {
        serde_json::to_vec(&JournalLine::from_row(row))
    }

    /// Read one line (without its newline).
    #[cfg(test)]
    pub(crate) fn decode(line: &str) -> Result<EventRow, JournalLineError> {
        Self::decode_replayable(line).map(|event| event.row)
    }

    /// Read one line (without its newline), saying what the replay must
    /// look up (see the module docs, versions 2 and 3).
    pub(crate) fn decode_replayable(line: &str) -> Result<Replayable, JournalLineError> {
        let record: JournalLine<'static> = serde_json::from_str(line)?;
        let v = record.v;
        let row = record.into_row()?;
        Ok(Replayable::of(row, v))
    }

    fn from_row(row: &EventRow) -> JournalLine<'_> {
        fn text(field: &Option<String>) -> Option<Cow<'_, str>> {
            field.as_deref().map(Cow::Borrowed)
        }
        JournalLine {
            v: CURRENT_VERSION,
            event_id: row.event_id,
            occurred_at: row.occurred_at,
            kind: row.kind,
            token: row.token,
            link_id: row.link_id,
            mailing_id: text(&row.mailing_id),
            letter_id: row.letter_id,
            email: text(&row.email),
            position: row.position,
            ip: text(&row.ip),
            user_agent: text(&row.user_agent),
            country: text(&row.country),
            bot: row.bot,
            bot_reason: text(&row.bot_reason),
        }
    }

    /// The row this record stands for. Versions 0 to 3 have the same
    /// fields; version 4 adds `country`, which older lines read as null.
    pub(crate) fn into_row(self) -> Result<EventRow, JournalLineError> {
        if self.v > CURRENT_VERSION {
            return Err(JournalLineError::NewerVersion(self.v));
        }
        let text = |field: Option<Cow<'_, str>>| field.map(Cow::into_owned);
        Ok(EventRow {
            event_id: self.event_id,
            occurred_at: self.occurred_at,
            kind: self.kind,
            token: self.token,
            link_id: self.link_id,
            mailing_id: text(self.mailing_id),
            letter_id: self.letter_id,
            email: text(self.email),
            position: self.position,
            ip: text(self.ip),
            user_agent: text(self.user_agent),
            country: text(self.country),
            bot: self.bot,
            bot_reason: text(self.bot_reason),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A line exactly as the release before versioning wrote it.
    const VERSION_0_LINE: &str = r#"{"event_id":"0192f5a0c0de7000800000000000abcd","occurred_at":"2026-11-22T10:00:00Z","kind":"click","token":"0192f5a0c0de7000800000000000beef","link_id":42,"mailing_id":"m-1","letter_id":7,"email":"ann@example.com","position":3,"ip":"192.0.2.0/24","user_agent":"Mozilla/5.0","bot":false,"bot_reason":null}"#;

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
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        assert!(line.starts_with(r#"{"v":4,"#), "{line}");
        assert!(
            line.contains(r#""event_id":"0192f5a0c0de7000800000000000abcd","#)
                && line.contains(r#""token":"0192f5a0c0de7000800000000000beef","#),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    #[test]
    fn the_time_is_written_to_the_nanosecond_and_read_back_exactly() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        row.occurred_at += chrono::Duration::nanoseconds(123_456_789);
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        assert!(
            line.contains(r#""occurred_at":"2026-11-22T10:00:00.123456789Z""#),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
        // A year fixed widths cannot hold is written by chrono, and read back.
        row.occurred_at = chrono::DateTime::from_timestamp(253_402_300_800, 5).unwrap();
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        assert!(
            line.contains(r#""occurred_at":"+10000-01-01T00:00:00.000000005Z""#),
            "{line}"
        );
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
    }

    #[test]
    fn null_fields_are_left_out_and_read_back_as_null() {
        let mut row = JournalLine::decode(VERSION_0_LINE).unwrap();
        (row.link_id, row.mailing_id, row.letter_id) = (None, None, None);
        (row.email, row.position, row.bot_reason) = (None, None, None);
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        for absent in [
            "link_id",
            "mailing_id",
            "letter_id",
            "email",
            "position",
            "bot_reason",
        ] {
            assert!(!line.contains(absent), "{absent}: {line}");
        }
        let event = JournalLine::decode_replayable(&line).unwrap();
        assert_eq!(event.row, row);
        assert_eq!(
            event.resolve,
            Resolve::Link,
            "an absent link_id is a null one"
        );
    }

    #[test]
    fn only_current_lines_without_a_link_are_resolved_at_replay() {
        let unlinked = VERSION_0_LINE.replace(r#""link_id":42"#, r#""link_id":null"#);
        let no_address = VERSION_0_LINE.replace(r#""email":"ann@example.com","#, "");
        let withheld = no_address
            .replace("0192f5a0c0de7000800000000000beef", &"0".repeat(32))
            .replace(r#""link_id":42"#, r#""link_id":null"#)
            .replace(r#""letter_id":7"#, r#""letter_id":0"#);
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
        row.country = Some("SE".to_owned());
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        assert!(line.starts_with(r#"{"v":4,"#), "{line}");
        assert!(line.contains(r#""country":"SE""#), "{line}");
        assert_eq!(JournalLine::decode(&line).unwrap(), row);
        // Kept out when unknown, like every null field.
        row.country = None;
        let line = String::from_utf8(JournalLine::encode(&row).unwrap()).unwrap();
        assert!(!line.contains("country"), "{line}");
    }

    #[test]
    fn a_newer_version_and_a_foreign_kind_are_errors_not_guesses() {
        let newer = VERSION_0_LINE.replacen('{', r#"{"v":5,"#, 1);
        assert!(matches!(
            JournalLine::decode(&newer),
            Err(JournalLineError::NewerVersion(5))
        ));
        let foreign = VERSION_0_LINE.replace(r#""kind":"click""#, r#""kind":"bogus""#);
        assert!(matches!(
            JournalLine::decode(&foreign),
            Err(JournalLineError::Unreadable(_))
        ));
    }
}
