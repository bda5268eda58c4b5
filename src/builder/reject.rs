//! Why a recipient gets no letter. Each reason is a variant, so the build
//! summary groups rejections by what went wrong ([`Reject::group`]) rather
//! than by parsing their text; `rejects.jsonl` carries the full message.

/// Fields that become header text: a control character there (CR and LF
/// above all) could add a header or break the message.
use std::fmt;
use std::sync::Arc;

pub(crate) const HEADER_FIELDS: [&str; 2] = ["email", "name"];

/// One reason a recipient is rejected (or skipped, when suppressed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    #[error("not valid UTF-8")]
    NotUtf8,
    #[error("not a JSON object")]
    NotJsonObject,
    #[error("bad JSON: {0}")]
    BadJson(#[source] Cause),
    #[error("bad JSON: the line is longer than {max} bytes")]
    LineTooLong { max: usize },
    #[error(
        "bad CSV: {found} {} where the header has {expected}",
        if *found == 1 { "field" } else { "fields" }
    )]
    CsvFieldCount { found: u64, expected: u64 },
    #[error("bad CSV: {0}")]
    BadCsv(#[source] super::csv_records::CsvRefusal),
    #[error("bad CSV: text after a closing quote (write a quote inside a quoted field as \"\")")]
    CsvTextAfterQuote,
    #[error("field `email` is not a string")]
    EmailNotString,
    #[error("no `email` field")]
    NoEmail,
    #[error(
        "control character U+{:04X} in field `{field}`: {}",
        u32::from(*found),
        if HEADER_FIELDS.contains(&field.as_str()) || field.starts_with("subject") {
            "it goes into a header, which cannot carry one"
        } else {
            "no field may hold a NUL"
        }
    )]
    ControlCharacter { field: String, found: char },
    #[error("letter of {size} bytes is over the limit of {limit} (--max-letter-bytes)")]
    TooBig { size: usize, limit: usize },
    #[error("internal error building this letter (a bug; the other letters were built): {0}")]
    Panicked(String),
    #[error("invalid address: {0}")]
    InvalidAddress(#[source] crate::address::AddressError),
    #[error("field `linktrack_track`: unknown tracking mode {0:?} (expected clicks, opens, all, none, anonymous, last_open_day, true or false)")]
    TrackMode(String),
    #[error("duplicate address: first at line {first}")]
    Duplicate { first: u64 },
    #[error("suppressed: the address is on the suppression list")]
    Suppressed,
    #[error("personalising the letter: {0}")]
    PersonaliseLetter(#[source] Cause),
    #[error("personalising the subject: {0}")]
    PersonaliseSubject(#[source] Cause),
    #[error("rewriting links: {0}")]
    Rewrite(#[source] Cause),
    #[error("assembling the message: {0}")]
    Message(#[source] Cause),
    #[error("refused by the MTA: {0}")]
    Delivery(String),
    #[error(
        "{kind} link {position} was stored as {stored:?} by an earlier run and is now {now:?}; \
         build changed content under a new mailing_id"
    )]
    ChangedContent {
        kind: crate::kind::LinkKind,
        position: u32,
        stored: String,
        now: String,
    },
}

impl Reject {
    /// The summary line this reason is counted under.
    pub fn group(&self) -> &'static str {
        match self {
            Reject::NotUtf8 => "not valid UTF-8",
            Reject::NotJsonObject => "not a JSON object",
            Reject::BadJson(_) | Reject::LineTooLong { .. } => "bad JSON",
            Reject::CsvFieldCount { .. } | Reject::BadCsv(_) | Reject::CsvTextAfterQuote => {
                "bad CSV"
            }
            Reject::EmailNotString => "field `email` is not a string",
            Reject::NoEmail => "no `email` field",
            Reject::InvalidAddress(_) => "invalid address",
            Reject::ControlCharacter { .. } => "control character",
            Reject::TooBig { .. } => "letter over the size limit",
            Reject::Panicked(_) => "internal error building this letter",
            Reject::Message(_) => "assembling the message",
            Reject::Delivery(_) => "refused by the MTA",
            Reject::Duplicate { .. } => "duplicate address",
            Reject::TrackMode(_) => "field `linktrack_track`",
            Reject::Suppressed => "suppressed",
            Reject::PersonaliseLetter(_) => "personalising the letter",
            Reject::PersonaliseSubject(_) => "personalising the subject",
            Reject::Rewrite(_) => "rewriting links",
            Reject::ChangedContent { .. } => "changed content under the same mailing_id",
        }
    }
}

/// The error behind a rejection (a parser's, the template engine's...),
/// shared: a [`Reject`] is cloned and compared, which those errors are
/// not. Its text is the error's with its causes, so `rejects.jsonl` reads as before;
/// two causes are equal when they say the same.
#[derive(Debug, Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync>);

impl Cause {
    pub(crate) fn new(error: impl std::error::Error + Send + Sync + 'static) -> Cause {
        Cause(Arc::new(error))
    }
}

/// The error with its causes, each said once: a typed error's own text
/// names what failed, its sources say why, and `rejects.jsonl` needs both.
impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::error_report::chain(&*self.0))
    }
}

/// Stands for the error it holds: its source is that error's.
impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for Cause {}

/// `rejects.jsonl` keeps its `reason` string: the full message.
impl serde::Serialize for Reject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_the_start_of_the_message_except_for_changed_content() {
        let samples = [
            Reject::BadJson(Cause::new(
                serde_json::from_str::<serde_json::Value>("{").unwrap_err(),
            )),
            Reject::LineTooLong { max: 10 },
            Reject::CsvTextAfterQuote,
            Reject::CsvFieldCount {
                found: 3,
                expected: 4,
            },
            Reject::InvalidAddress(crate::address::Email::parse("no at").unwrap_err()),
            Reject::Duplicate { first: 2 },
            Reject::Suppressed,
            Reject::Message(Cause::new(std::io::Error::other("x"))),
        ];
        for reject in samples {
            assert!(reject.to_string().starts_with(reject.group()), "{reject}");
        }
        // A URL's colon no longer splits the group (it did with text parsing).
        let changed = Reject::ChangedContent {
            kind: crate::kind::LinkKind::Click,
            position: 3,
            stored: "https://a.example/".into(),
            now: "https://b.example/".into(),
        };
        assert_eq!(changed.group(), "changed content under the same mailing_id");
        assert_eq!(
            serde_json::to_value(&changed).unwrap(),
            serde_json::Value::String(changed.to_string())
        );
    }
}
