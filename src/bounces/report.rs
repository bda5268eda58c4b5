//! What a message that came back is, once read: a bounce with its failed
//! recipients, a complaint, an auto-reply or nothing. The readers
//! (`parse.rs` for reports, `text.rs` for text bounces, `providers.rs`
//! for providers' events) all produce it and the ingest acts on it.

use super::classify::{Class, Reason};
use crate::token::Token;

/// What a message is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A delivery failure report, with the recipients it names.
    Bounce {
        /// `dsn` (RFC 3464) or the text bounce's MTA (`exim`, `qmail`, …).
        format: &'static str,
        failures: Vec<Failure>,
    },
    /// An abuse report (ARF, `feedback-type: abuse` or `fraud`, or a
    /// provider's own complaint).
    Complaint {
        feedback_type: String,
        /// The address the report names (`Original-Rcpt-To`, else the
        /// reported message's `To`); providers often redact it.
        recipient: Option<String>,
    },
    /// An automatic reply (vacation, out of office): never a bounce.
    AutoReply,
    /// A report about a delivery that did not fail (`Action: delayed`,
    /// `relayed`, `delivered`): nothing to decide.
    NoFailure,
    /// None of the above.
    NotABounce { why: &'static str },
}

/// One recipient a bounce says failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The recipient as reported (`Final-Recipient`, or the address in the
    /// text), lowercased domain not assumed.
    pub recipient: String,
    /// `Original-Recipient`, when the report gives one (an alias that was
    /// forwarded).
    pub original_recipient: Option<String>,
    /// The enhanced status code, `5.1.1`.
    pub status: Option<String>,
    /// The remote MTA's words (`Diagnostic-Code`, or the text's line).
    pub diagnostic: String,
    /// What it means for the address; `None`: the report says too little.
    pub class: Option<Class>,
    /// Why it failed (docs/bounces.md, "Reasons"); `None` as for `class`.
    pub reason: Option<Reason>,
}

/// A message that came back, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub kind: Kind,
    /// The bounce's own `Message-ID` (the key that makes a second delivery
    /// of the same bounce change nothing).
    pub message_id: Option<String>,
    /// VERP tokens found where the message was addressed (`To`,
    /// `Delivered-To`, `X-Original-To`) and in the returned message's
    /// `Return-Path`: they name our letter.
    pub verp: Vec<Token>,
    /// The `Message-ID` of the letter that failed, from the returned
    /// message or its headers.
    pub original_message_id: Option<String>,
    /// The address a complaint states it is about: an ARF report's
    /// `Original-Rcpt-To`, a provider's complained recipient; not the
    /// returned message's `To`, which providers redact. A complaint
    /// stating another address than its letter's recipient is refused.
    pub stated_recipient: Option<String>,
}
