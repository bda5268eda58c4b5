//! One message that came back, read: an RFC 3464 delivery status
//! notification, an RFC 5965 ARF complaint, an RFC 3834 auto-reply, a
//! text bounce of an MTA that writes no DSN part (Exim, qmail, Sendmail,
//! Microsoft 365 / Exchange, Gmail, Yahoo, Amazon SES), or none of these.
//! MIME is mail-parser's; the report fields (`Final-Recipient`, `Status`,
//! `Feedback-Type`, …) are read here, as RFC 3464 and RFC 5965 define them.

use super::bare_address::plain_address;
use super::classify::{self, Reason, StatusCode};
use super::report::{Failure, Kind, Report};
use crate::token::{self, Token};
use mail_parser::{Message, MessageParser, MimeHeaders, PartType};

/// Why a message cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("no RFC 5322 headers (empty, or not a mail message)")]
    NotAMessage,
}

/// Read one message.
pub fn parse(raw: &[u8]) -> Result<Report, ParseError> {
    let message = MessageParser::default()
        .parse(raw)
        .filter(|m| !m.headers().is_empty())
        .ok_or(ParseError::NotAMessage)?;
    let mut verp = addressed_tokens(&message);
    let returned = returned_headers(&message);
    if let Some(headers) = &returned {
        for name in ["Return-Path", "Sender"] {
            if let Some(token) = header_field(headers, name).and_then(|v| token_in(&v)) {
                verp.push(token);
            }
        }
    }
    verp.dedup();
    let original_message_id = returned
        .as_deref()
        .and_then(|h| header_field(h, "Message-ID"))
        .map(|id| id.trim().to_owned())
        .or_else(|| text_original_message_id(&message));
    let kind = read_kind(&message, raw, returned.as_deref());
    Ok(Report {
        kind,
        message_id: message.message_id().map(|id| format!("<{id}>")),
        verp,
        original_message_id,
        stated_recipient: stated_rcpt_to(&message),
    })
}

/// The `Original-Rcpt-To` of a message's feedback report, if it has one.
fn stated_rcpt_to(message: &Message<'_>) -> Option<String> {
    let part = parts_of(message, "message", "feedback-report").next()?;
    let text = String::from_utf8_lossy(part.contents());
    let fields: Vec<(String, String)> = report_fields(&text).into_iter().flatten().collect();
    field(&fields, "Original-Rcpt-To").map(typed_address)
}

/// What the message is, the most specific reading first: a report
/// (feedback or delivery status), then an auto-reply, then a text bounce.
fn read_kind(message: &Message<'_>, raw: &[u8], returned: Option<&str>) -> Kind {
    let report_type = report_type(message);
    if report_type.as_deref() == Some("feedback-report") || is_provider_complaint(message) {
        return complaint(message, returned);
    }
    // Some MTAs (McAfee's, OpenSMTPD's) send the report part in a
    // multipart/mixed: read it all the same.
    let has_report_part = parts_of(message, "message", "delivery-status")
        .next()
        .is_some();
    let is_report = report_type.as_deref() == Some("delivery-status");
    if is_report || has_report_part {
        match delivery_status(message) {
            // In a multipart/mixed, the text is the notice: a report part
            // that names no failure does not overrule it.
            Some(kind) if is_report || matches!(kind, Kind::Bounce { .. }) => {
                return with_said_in_text(kind, message);
            }
            _ => {}
        }
        // A report whose MIME is broken (no boundary lines): its fields,
        // read in the raw text.
        if let Some(kind @ Kind::Bounce { .. }) = report_in_raw_text(raw) {
            return kind;
        }
    }
    if let Some(unsubscribe) = apple_unsubscribe(message) {
        return unsubscribe;
    }
    if is_auto_reply(message) && !looks_like_bounce(message) {
        return Kind::AutoReply;
    }
    if looks_like_bounce(message) {
        let returned_to = returned
            .and_then(|h| header_field(h, "To"))
            .or_else(|| returned.and_then(|h| header_field(h, "Delivered-To")));
        if let Some(kind) = super::text::read(message, false, None) {
            return kind;
        }
        // A notice that only forwards the report (a relay's notice to its
        // postmaster with the bounce attached): the attached report.
        if let Some(kind) = attached_report(message) {
            return kind;
        }
        if let Some(kind) = super::text::read(message, true, returned_to.as_deref()) {
            return kind;
        }
        return Kind::NotABounce {
            why: "a bounce without a recipient in it (truncated or malformed)",
        };
    }
    if report_type.is_some() {
        return Kind::NotABounce {
            why: "a multipart/report of another type",
        };
    }
    Kind::NotABounce {
        why: "neither a delivery report, a complaint nor a bounce's text",
    }
}

/// A delivery report attached whole to a notice (a `message/rfc822`
/// part that is itself a `multipart/report`): its reading.
fn attached_report(message: &Message<'_>) -> Option<Kind> {
    message.parts.iter().find_map(|part| match &part.body {
        PartType::Message(inner) if report_type(inner).as_deref() == Some("delivery-status") => {
            match delivery_status(inner) {
                Some(kind @ Kind::Bounce { .. }) => Some(with_said_in_text(kind, inner)),
                _ => None,
            }
        }
        _ => None,
    })
}

/// Apple Mail's unsubscribe request (`X-Apple-Unsubscribe: true`, sent
/// to a letter's `List-Unsubscribe` address): the reader asks for no
/// more, as an ARF `opt-out` does; the reader is its sender.
fn apple_unsubscribe(message: &Message<'_>) -> Option<Kind> {
    let asked = message
        .header_raw("X-Apple-Unsubscribe")
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if !asked {
        return None;
    }
    Some(Kind::Complaint {
        feedback_type: "opt-out".into(),
        recipient: message.header_raw("From").and_then(plain_address),
    })
}

/// `report-type` of a `multipart/report` root, lowercased.
fn report_type(message: &Message<'_>) -> Option<String> {
    let ctype = message.content_type()?;
    let is_report = ctype.ctype().eq_ignore_ascii_case("multipart")
        && ctype
            .subtype()
            .is_some_and(|s| s.eq_ignore_ascii_case("report"));
    is_report.then(|| {
        ctype
            .attribute("report-type")
            .unwrap_or_default()
            .to_ascii_lowercase()
    })
}

/// The parts of `message` whose type is `ctype/subtype`.
fn parts_of<'a>(
    message: &'a Message<'a>,
    ctype: &'a str,
    subtype: &'a str,
) -> impl Iterator<Item = &'a mail_parser::MessagePart<'a>> + 'a {
    message.parts.iter().filter(move |part| {
        part.content_type().is_some_and(|t| {
            t.ctype().eq_ignore_ascii_case(ctype)
                && t.subtype().is_some_and(|s| s.eq_ignore_ascii_case(subtype))
        })
    })
}

/// The headers of the message that came back: a `message/rfc822` (or
/// `message/global`) part's, or a `text/rfc822-headers` part.
fn returned_headers(message: &Message<'_>) -> Option<String> {
    for part in &message.parts {
        match &part.body {
            PartType::Message(inner) => {
                let raw = inner.raw_message();
                let end = header_end(raw);
                return Some(String::from_utf8_lossy(&raw[..end]).into_owned());
            }
            _ if is_type(part, "text", "rfc822-headers")
                || is_type(part, "message", "rfc822-headers") =>
            {
                return Some(String::from_utf8_lossy(part.contents()).into_owned());
            }
            _ => {}
        }
    }
    None
}

fn is_type(part: &mail_parser::MessagePart<'_>, ctype: &str, subtype: &str) -> bool {
    part.content_type().is_some_and(|t| {
        t.ctype().eq_ignore_ascii_case(ctype)
            && t.subtype().is_some_and(|s| s.eq_ignore_ascii_case(subtype))
    })
}

/// Where a message's header section ends (after the first empty line).
fn header_end(raw: &[u8]) -> usize {
    for (at, window) in raw.windows(2).enumerate() {
        if window == b"\n\n" {
            return at + 1;
        }
        if window == b"\n\r" && raw.get(at + 2) == Some(&b'\n') {
            return at + 1;
        }
    }
    raw.len()
}

/// The VERP tokens in the headers that say where the message was sent.
fn addressed_tokens(message: &Message<'_>) -> Vec<Token> {
    let mut found = Vec::new();
    for (name, value) in message.headers_raw() {
        let addressed = [
            "to",
            "delivered-to",
            "x-original-to",
            "envelope-to",
            "x-envelope-to",
        ]
        .iter()
        .any(|n| name.eq_ignore_ascii_case(n));
        if addressed {
            found.extend(tokens_in(value));
        }
    }
    found
}

/// Every VERP token in a header value (`bounces+TOKEN@domain`, in angle
/// brackets or not, several addresses allowed).
pub(crate) fn tokens_in(value: &str) -> Vec<Token> {
    value
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | '<' | '>' | ';' | '"'))
        .filter_map(token::token_of_bounce_address)
        .collect()
}

fn token_in(value: &str) -> Option<Token> {
    tokens_in(value).into_iter().next()
}

/// The first value of `name` in a header section (continuation lines
/// unfolded).
pub(crate) fn header_field(headers: &str, name: &str) -> Option<String> {
    report_fields(headers)
        .into_iter()
        .next()?
        .into_iter()
        .find(|(field, _)| field.eq_ignore_ascii_case(name))
        .map(|(_, value)| value)
}

/// The groups of `Name: value` fields of a report part (RFC 3464: the
/// per-message group, then one per recipient, separated by empty lines);
/// continuation lines are unfolded.
pub(crate) fn report_fields(text: &str) -> Vec<Vec<(String, String)>> {
    let mut groups: Vec<Vec<(String, String)>> = Vec::new();
    let mut group: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            if !group.is_empty() {
                groups.push(std::mem::take(&mut group));
            }
            continue;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = group.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        if let Some((name, value)) = line.split_once(':') {
            group.push((name.trim().to_owned(), value.trim().to_owned()));
        }
    }
    if !group.is_empty() {
        groups.push(group);
    }
    groups
}

/// The value of `name` in one group of fields.
fn field<'a>(group: &'a [(String, String)], name: &str) -> Option<&'a str> {
    group
        .iter()
        .find(|(field, _)| field.eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_str())
}

/// `rfc822; a@example.com` -> `a@example.com` (the address type dropped).
fn typed_address(value: &str) -> String {
    let address = match value.split_once(';') {
        Some((_, address)) => address,
        None => value,
    };
    address
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_owned()
}

/// An RFC 3464 report: one failure per recipient group whose `Action` is
/// `failed` (or absent with a 4/5 status). `None`: no
/// `message/delivery-status` part to read (then the text is tried).
fn delivery_status(message: &Message<'_>) -> Option<Kind> {
    let part = parts_of(message, "message", "delivery-status")
        .chain(parts_of(message, "message", "global-delivery-status"))
        .next()?;
    delivery_fields(&report_text(part.contents()))
}

/// A report part's text. Lotus Domino writes a Japanese
/// `Diagnostic-Code` in ISO-2022-JP (escape sequences in a 7-bit part
/// that declares no charset): decoded, so that its words can be read.
fn report_text(contents: &[u8]) -> String {
    if contents.windows(3).any(|w| w == b"\x1b$B") {
        let (text, _, _) = encoding_rs::ISO_2022_JP.decode(contents);
        return text.into_owned();
    }
    String::from_utf8_lossy(contents).into_owned()
}

/// A report's failures that carry no `Diagnostic-Code` (OpenSMTPD writes
/// none; Sendmail's may be empty): the remote MTA's words are in the
/// human-readable part, on the recipient's line and the next two.
fn with_said_in_text(kind: Kind, message: &Message<'_>) -> Kind {
    let Kind::Bounce {
        format,
        mut failures,
    } = kind
    else {
        return kind;
    };
    let Some(text) = message.body_text(0) else {
        return Kind::Bounce { format, failures };
    };
    for failure in failures.iter_mut() {
        if !failure.diagnostic.is_empty() {
            continue;
        }
        let recipient = failure.recipient.to_ascii_lowercase();
        let lines: Vec<&str> = text.lines().collect();
        // The recipient's lines (a Sendmail notice names it in its list
        // of failed addresses, then in the transcript with the reply),
        // each with its indented continuations.
        let mentions: Vec<usize> = lines
            .iter()
            .enumerate()
            .filter(|(_, line)| line.to_ascii_lowercase().contains(&recipient))
            .map(|(at, _)| at)
            .take(4)
            .collect();
        if mentions.is_empty() {
            continue;
        }
        let said: String = mentions
            .iter()
            .flat_map(|&at| {
                let continued = lines[at + 1..]
                    .iter()
                    .take(2)
                    .take_while(|line| line.starts_with([' ', '\t']) && !line.trim().is_empty());
                std::iter::once(&lines[at]).chain(continued)
            })
            .map(|line| line.trim())
            .collect::<Vec<_>>()
            .join(" ");
        let code_in_words = classify::failure_status_in_text(&said).map(|c| c.to_string());
        let status = code_in_words.as_deref().or(failure.status.as_deref());
        let (reason, class) = classify::failed(status, &said);
        // The text names a reason, or the report's own code said nothing.
        let better = reason != Some(Reason::Undefined)
            || matches!(failure.reason, None | Some(Reason::Undefined));
        if better {
            if code_in_words.is_some() {
                failure.status = code_in_words.clone();
            }
            failure.reason = reason;
            failure.class = class;
            failure.diagnostic = said.chars().take(1000).collect();
        }
    }
    Kind::Bounce { format, failures }
}

/// The RFC 3464 fields of a bounce whose `message/delivery-status` part
/// MIME did not find (a report without its boundary lines): only the
/// text before the returned message is read.
fn report_in_raw_text(raw: &[u8]) -> Option<Kind> {
    let head = &raw[..raw.len().min(128 << 10)];
    let text = String::from_utf8_lossy(head);
    let lower = text.to_ascii_lowercase();
    let end = [
        "content-type: message/rfc822",
        "content-type: text/rfc822-headers",
    ]
    .iter()
    .filter_map(|marker| lower.find(marker))
    .min()
    .unwrap_or(text.len());
    let text = text.get(..end)?;
    if !lower[..end].contains("final-recipient:") {
        return None;
    }
    delivery_fields(text)
}

/// The failures of a delivery-status text: one per recipient group (a
/// group with `Final-Recipient`, or `Original-Recipient` only, as some
/// MTAs write) whose `Action` is `failed` (or absent with a 4/5 status).
fn delivery_fields(text: &str) -> Option<Kind> {
    let groups = report_fields(text);
    let mut failures = Vec::new();
    let mut other_actions = false;
    for group in &groups {
        let Some(recipient) =
            field(group, "Final-Recipient").or_else(|| field(group, "Original-Recipient"))
        else {
            continue;
        };
        if typed_address(recipient).is_empty() {
            continue;
        }
        let action = field(group, "Action")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let said = field(group, "Diagnostic-Code").unwrap_or_default();
        // No `Status` (McAfee's reports): the code the words give.
        let status = field(group, "Status")
            .map(str::to_owned)
            .or_else(|| classify::failure_status_in_text(said).map(|code| code.to_string()));
        let status_class = status
            .as_deref()
            .and_then(StatusCode::parse)
            .map(|c| c.class);
        // `expired` is no RFC 3464 action, but SendGrid and others write
        // it for a message they gave up on: a failure.
        let expired = action.starts_with("expired");
        let failed = action.starts_with("failed")
            || expired
            || (action.is_empty() && matches!(status_class, Some(4 | 5)));
        if !failed {
            other_actions = true;
            continue;
        }
        let (diagnostic_type, diagnostic) = match said.split_once(';') {
            Some((kind, text)) if !kind.contains(' ') => (kind.trim(), text.trim()),
            _ => ("", said.trim()),
        };
        let diagnostic = diagnostic.to_owned();
        // `X-Unix`: the local delivery program (procmail, a pipe) failed.
        let mailer = diagnostic_type.eq_ignore_ascii_case("x-unix");
        let (reason, class) = match classify::failed(status.as_deref(), &diagnostic) {
            _ if mailer => (Some(Reason::MailerError), Some(Reason::MailerError.class())),
            (Some(Reason::Undefined), _) if expired => {
                (Some(Reason::Expired), Some(Reason::Expired.class()))
            }
            said => said,
        };
        failures.push(Failure {
            recipient: typed_address(recipient),
            original_recipient: field(group, "Original-Recipient").map(typed_address),
            class,
            reason,
            status,
            diagnostic,
        });
    }
    if failures.is_empty() {
        return other_actions.then_some(Kind::NoFailure);
    }
    Some(Kind::Bounce {
        format: "dsn",
        failures,
    })
}

/// An ARF report (RFC 5965): its `Feedback-Type` and the address it
/// names. A report whose type is not a complaint (`not-spam`, `virus`,
/// `other`) is no complaint.
fn complaint(message: &Message<'_>, returned: Option<&str>) -> Kind {
    let Some(part) = parts_of(message, "message", "feedback-report").next() else {
        return provider_complaint(message, returned);
    };
    let text = String::from_utf8_lossy(part.contents());
    let groups = report_fields(&text);
    let fields: Vec<(String, String)> = groups.into_iter().flatten().collect();
    let feedback_type = field(&fields, "Feedback-Type")
        .unwrap_or_default()
        .to_ascii_lowercase();
    // `opt-out` (MAAWG's ARF type for a reader's unsubscribe request,
    // `opt-out-list` its list form) is a reader saying "no more": acted
    // on as a complaint. `auth-failure` (a DMARC forensic report),
    // `not-spam`, `virus` and `other` say nothing of the reader's wish.
    if !matches!(
        feedback_type.as_str(),
        "abuse" | "fraud" | "opt-out" | "opt-out-list"
    ) {
        return Kind::NotABounce {
            why: "a feedback report that is not a complaint (feedback-type not abuse, fraud \
                  or opt-out)",
        };
    }
    let recipient = field(&fields, "Original-Rcpt-To")
        .map(typed_address)
        .or_else(|| {
            returned
                .and_then(|h| header_field(h, "To"))
                .and_then(|to| plain_address(&to))
        });
    Kind::Complaint {
        feedback_type,
        recipient,
    }
}

/// A complaint some providers send without an ARF part (say, a forwarded
/// message with `X-Feedback-Type: abuse` set by their relay).
fn is_provider_complaint(message: &Message<'_>) -> bool {
    let tagged = message
        .header_raw("X-Feedback-Type")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("abuse"));
    // Outlook.com's (Hotmail's) junk mail reporting program (JMRP): the
    // reported message attached, under this subject, without an ARF part.
    let jmrp = message.subject().is_some_and(|s| {
        s.trim()
            .to_ascii_lowercase()
            .starts_with("complaint about message from")
    }) && message
        .parts
        .iter()
        .any(|part| matches!(part.body, PartType::Message(_)));
    tagged || jmrp
}

fn provider_complaint(message: &Message<'_>, returned: Option<&str>) -> Kind {
    if !is_provider_complaint(message) {
        return Kind::NotABounce {
            why: "a feedback report without its message/feedback-report part (truncated?)",
        };
    }
    Kind::Complaint {
        feedback_type: "abuse".into(),
        recipient: returned
            .and_then(|h| header_field(h, "To"))
            .and_then(|to| plain_address(&to)),
    }
}

/// An automatic reply (RFC 3834 `Auto-Submitted: auto-replied`, the
/// vacation programs' headers and subjects).
fn is_auto_reply(message: &Message<'_>) -> bool {
    let header = |name: &str| {
        message
            .header_raw(name)
            .map(|v| v.trim().to_ascii_lowercase())
    };
    let auto_submitted = header("Auto-Submitted").is_some_and(|v| v.starts_with("auto-replied"));
    let vacation_header = ["X-Autoreply", "X-Autorespond", "X-Vacation"]
        .iter()
        .any(|name| header(name).is_some())
        || header("Precedence").is_some_and(|v| v == "auto_reply")
        || header("X-Auto-Response-Suppress").is_some_and(|v| v.contains("oof"));
    let subject = message.subject().unwrap_or_default().to_ascii_lowercase();
    let vacation_subject = [
        "out of office",
        "out of the office",
        "automatic reply",
        "auto reply",
        "autoreply",
        "auto-reply",
        "vacation",
        "abwesenheit",
        "away from",
    ]
    .iter()
    .any(|word| subject.contains(word));
    auto_submitted || vacation_header || vacation_subject
}

/// A message that reads as a non-delivery notice: from the mailer daemon
/// or postmaster, or with a bounce's subject or Exim's
/// `X-Failed-Recipients`.
pub(crate) fn looks_like_bounce(message: &Message<'_>) -> bool {
    if message.header_raw("X-Failed-Recipients").is_some() {
        return true;
    }
    let from = message
        .header_raw("From")
        .unwrap_or_default()
        .to_ascii_lowercase();
    let daemon = [
        "mailer-daemon",
        "postmaster",
        "post_master",
        "mail delivery",
        "mail-daemon",
    ]
    .iter()
    .any(|who| from.contains(who));
    // Writers known by headers they put only on their notices (fml's
    // list notices, KDDI's, Verizon's), not on all their mail as
    // Zoho's or Outlook.com's are.
    let vendor = super::vendors::vendor_of(&super::vendors::Seen::of(message));
    if matches!(vendor, Some("fml" | "kddi" | "verizon")) {
        return true;
    }
    let subject = message.subject().unwrap_or_default().to_ascii_lowercase();
    let bounce_subject = [
        "undeliver",
        "delivery status notification",
        "delivery failure",
        "delivery has failed",
        "failure notice",
        "mail delivery failed",
        "returned mail",
        "delivery failed",
        "non remis",
        "unzustellbar",
        "address not found",
        // KDDI's au one net ("mail error notice").
        "メールエラー通知",
    ]
    .iter()
    .any(|word| subject.contains(word));
    daemon || bounce_subject
}

/// A text bounce's copy of the letter: its `Message-ID` line.
fn text_original_message_id(message: &Message<'_>) -> Option<String> {
    for part in &message.parts {
        let Some(text) = part.text_contents() else {
            continue;
        };
        for line in text.lines() {
            let line = line.trim();
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            if name.eq_ignore_ascii_case("Message-ID") && value.contains('@') {
                return Some(value.trim().to_owned());
            }
        }
    }
    None
}
