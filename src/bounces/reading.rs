//! What linktrack reads a message as, said without acting on it: its kind
//! (`hard`, `soft`, `policy`, `complaint`, `auto-reply`, `delayed`,
//! `not a bounce`), the reason, the recipients, the status code, the
//! format detected and the first words of the diagnostic. `bounces
//! classify` prints it for every message; `bounces ingest` for a message
//! it does not act on.

use super::report::{Kind, Report};
use std::fmt;

/// Words of the diagnostic kept in a line.
const DIAGNOSTIC_WORDS: usize = 14;

/// A message's reading.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Reading {
    /// `hard`, `soft`, `policy`, `complaint`, `auto-reply`, `delayed` or
    /// `not a bounce`.
    pub kind: &'static str,
    /// The reason (docs/bounces.md, "Reasons"): `userunknown`,
    /// `mailboxfull`, …, `feedback` for a complaint, `vacation` for an
    /// auto-reply.
    pub reason: Option<&'static str>,
    /// The recipients the message names (a bounce's failed recipients, a
    /// complaint's reported address).
    pub recipients: Vec<String>,
    /// The enhanced status code of the first failure, `5.1.1`.
    pub status: Option<String>,
    /// `dsn` (RFC 3464), the MTA of a text bounce (`exim`, `qmail`, …),
    /// `arf` (RFC 5965), `rfc3834`; `None` for no bounce.
    pub format: Option<&'static str>,
    /// The first words of the remote MTA's diagnostic (of a message that
    /// is no bounce: why not).
    pub diagnostic: String,
}

impl Reading {
    /// The reading of a report.
    pub fn of(report: &Report) -> Reading {
        match &report.kind {
            Kind::Bounce { format, failures } => {
                let first = failures.first();
                Reading {
                    kind: first
                        .and_then(|f| f.class)
                        .map_or("not a bounce", |c| c.as_str()),
                    reason: first.and_then(|f| f.reason).map(|r| r.as_str()),
                    recipients: failures.iter().map(|f| f.recipient.clone()).collect(),
                    status: first.and_then(|f| f.status.clone()),
                    format: Some(format),
                    diagnostic: first_words(first.map_or("", |f| f.diagnostic.as_str())),
                }
            }
            Kind::Complaint {
                feedback_type,
                recipient,
            } => Reading {
                kind: "complaint",
                reason: Some("feedback"),
                recipients: recipient.iter().cloned().collect(),
                status: None,
                format: Some("arf"),
                diagnostic: format!("feedback-type {feedback_type}"),
            },
            Kind::AutoReply => Reading {
                kind: "auto-reply",
                reason: Some("vacation"),
                recipients: Vec::new(),
                status: None,
                format: Some("rfc3834"),
                diagnostic: String::new(),
            },
            Kind::NoFailure => Reading {
                kind: "delayed",
                reason: None,
                recipients: Vec::new(),
                status: None,
                format: Some("dsn"),
                diagnostic: "a delivery report without a failure (delayed, relayed or delivered)"
                    .into(),
            },
            Kind::NotABounce { why } => Reading::not_a_bounce(why),
        }
    }

    /// The reading of a message that cannot be read as any report.
    pub fn not_a_bounce(why: &str) -> Reading {
        Reading {
            kind: "not a bounce",
            reason: None,
            recipients: Vec::new(),
            status: None,
            format: None,
            diagnostic: why.to_owned(),
        }
    }
}

/// `hard (userunknown) nobody@example.org, status 5.1.1, dsn: "550 5.1.1 …"`.
impl fmt::Display for Reading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind)?;
        if let Some(reason) = self.reason {
            write!(f, " ({reason})")?;
        }
        if !self.recipients.is_empty() {
            write!(f, " {}", self.recipients.join(" "))?;
        }
        if let Some(status) = &self.status {
            write!(f, ", status {status}")?;
        }
        if let Some(format) = self.format {
            write!(f, ", {format}")?;
        }
        if !self.diagnostic.is_empty() {
            write!(f, ": {:?}", self.diagnostic)?;
        }
        Ok(())
    }
}

/// The first words of a diagnostic, on one line.
fn first_words(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut kept = words
        .iter()
        .take(DIAGNOSTIC_WORDS)
        .copied()
        .collect::<Vec<_>>()
        .join(" ");
    if words.len() > DIAGNOSTIC_WORDS {
        kept.push_str(" …");
    }
    kept.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounces::classify::{Class, Reason};
    use crate::bounces::report::Failure;

    #[test]
    fn a_bounce_reads_as_its_first_failure() {
        let report = Report {
            kind: Kind::Bounce {
                format: "dsn",
                failures: vec![Failure {
                    recipient: "nobody@example.org".into(),
                    original_recipient: None,
                    status: Some("5.1.1".into()),
                    diagnostic: "550 5.1.1 <nobody@example.org>: Recipient address rejected: \
                                 User unknown in virtual mailbox table here and there"
                        .into(),
                    class: Some(Class::Hard),
                    reason: Some(Reason::UserUnknown),
                }],
            },
            message_id: None,
            stated_recipient: None,
            verp: Vec::new(),
            original_message_id: None,
        };
        let reading = Reading::of(&report);
        assert_eq!(
            reading.to_string(),
            "hard (userunknown) nobody@example.org, status 5.1.1, dsn: \"550 5.1.1 \
             <nobody@example.org>: Recipient address rejected: User unknown in virtual \
             mailbox table here and …\""
        );
        let json = serde_json::to_value(&reading).unwrap();
        assert_eq!(json["kind"], "hard");
        assert_eq!(json["reason"], "userunknown");
        assert_eq!(json["recipients"][0], "nobody@example.org");
    }

    #[test]
    fn what_is_no_bounce_says_why() {
        let reading = Reading::not_a_bounce("no headers");
        assert_eq!(reading.to_string(), "not a bounce: \"no headers\"");
    }
}
