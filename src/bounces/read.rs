//! A message that came back, read whatever its form: a report or a
//! bounce's text (`parse.rs`), or an Amazon SES notification that SNS
//! delivered by mail (an email subscription to SES's topic: the body is
//! the notification's JSON, read as the webhook reads it, `providers.rs`).

use super::classify::StatusCode;
use super::parse::{self, ParseError};
use super::providers;
use super::reasons::{self, Class, Reason};
use super::report::{Failure, Kind, Report};
use super::vendors::{self, Seen};
use mail_parser::MessageParser;
use serde_json::Value;

/// Read one message.
pub fn read(raw: &[u8]) -> Result<Report, ParseError> {
    let mut report = parse::parse(raw)?;
    if !matches!(report.kind, Kind::NotABounce { .. }) {
        filtered_after_data(&mut report, raw);
        powermta_categories(&mut report, raw);
        in_vendors_words(&mut report, raw);
        return Ok(report);
    }
    Ok(ses_by_mail(raw).unwrap_or(report))
}

/// How a bounce's text names the SMTP command the remote MTA refused:
/// Postfix's "(in reply to RCPT TO command)", Exim's "after RCPT TO:" or
/// "after end of data", a Sendmail or Courier transcript's `>>> RCPT` and
/// `>>> DATA`. The last one named is the one refused.
const ENVELOPE_COMMANDS: &[&str] = &[
    "in reply to rcpt to command",
    "in reply to mail from command",
    "in reply to helo command",
    "in reply to ehlo command",
    "after rcpt to",
    "after mail from",
    "after helo",
    "after ehlo",
    "after initial connection",
    ">>> rcpt",
    ">>> mail from",
    ">>> helo",
    ">>> ehlo",
    "rcpt to:<",
    "smtp command: rcpt",
    "smtp:rcpt",
    "was rcpt to response",
    "after rcpt command",
    "[rcpt_to]",
    "did not like our rcpt to",
    "did not like our mail from",
];
const DATA_COMMANDS: &[&str] = &[
    "in reply to end of data command",
    "in reply to data command",
    "after end of data",
    "after data",
    ">>> data",
    ">>> .",
    "smtp command\ndata",
    "smtp command: data",
    "did not like our data",
];

/// How a bounce's text says the remote MTA refused the connection itself
/// (its greeting, or `HELO`): nothing the address or the message could
/// have changed.
const CONNECTION_COMMANDS: &[&str] = &[
    "after initial connection",
    "in reply to helo command",
    "in reply to ehlo command",
    "after helo",
    "after ehlo",
    ">>> helo",
    ">>> ehlo",
    "did not like our greeting",
    "did not like our helo",
    "did not like our ehlo",
];

/// Where the refusal came in the SMTP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// At the envelope (`HELO`, `MAIL FROM`, `RCPT TO`): the receiver
    /// judged the address itself.
    Envelope,
    /// After the data, or the bounce does not say: a filter may have
    /// spoken.
    DataOrUnsaid,
}

/// The stage the bounce's text (lowercased, whitespace folded) names
/// last.
fn stage(text: &str) -> Stage {
    let last = |markers: &[&str]| markers.iter().filter_map(|m| text.rfind(m)).max();
    match (last(ENVELOPE_COMMANDS), last(DATA_COMMANDS)) {
        (Some(envelope), Some(data)) if envelope > data => Stage::Envelope,
        (Some(_), None) => Stage::Envelope,
        _ => Stage::DataOrUnsaid,
    }
}

/// A "user unknown" the receiver gave other than at `RCPT TO` (after the
/// message's data, or where the bounce names no command) is the
/// receiver's filter speaking, not the address's death: `filtered`, a
/// policy block (as the reference parsers read it), unless its code says
/// the mailbox does not exist (5.1.0, 5.1.1, 5.1.3). Only the bounce's
/// text before the returned message is read.
fn filtered_after_data(report: &mut Report, raw: &[u8]) {
    let Kind::Bounce { failures, .. } = &mut report.kind else {
        return;
    };
    let unsaid = |f: &Failure| matches!(f.reason, None | Some(Reason::Undefined));
    let of_an_address = |f: &Failure| {
        matches!(
            f.reason,
            Some(Reason::UserUnknown | Reason::HostUnknown | Reason::Filtered)
        )
    };
    if !failures.iter().any(|f| of_an_address(f) || unsaid(f)) {
        return;
    }
    let head = &raw[..raw.len().min(64 << 10)];
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    // The returned message, when the bounce quotes it, may say anything.
    let text = text
        .split("content-type: message/rfc822")
        .next()
        .unwrap_or_default()
        .split("content-type: text/rfc822-headers")
        .next()
        .unwrap_or_default();
    // Lines fold anywhere ("end of DATA\n    command").
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let lined = text.lines().map(str::trim).collect::<Vec<_>>().join("\n");
    let stage = match stage(&folded) {
        Stage::Envelope => Stage::Envelope,
        Stage::DataOrUnsaid => stage(&lined),
    };
    // A refusal that says nothing, given at the connection or `HELO`:
    // the receiver refused the sending host, a block.
    let at_connection = CONNECTION_COMMANDS
        .iter()
        .any(|m| folded.contains(m) || lined.contains(m));
    if at_connection {
        for failure in failures.iter_mut().filter(|f| unsaid(f)) {
            failure.reason = Some(Reason::Blocked);
            failure.class = Some(Reason::Blocked.class());
        }
    }
    // Refused at `MAIL FROM`: the receiver refused the sender's address,
    // whatever it says of a mailbox or a domain (Exim's "553 5.1.0 …
    // does not exist" after `MAIL FROM`), not the recipient's.
    if at_sender(&folded) || at_sender(&lined) {
        for failure in failures.iter_mut() {
            if of_an_address(failure) {
                failure.reason = Some(Reason::Rejected);
                failure.class = Some(Reason::Rejected.class());
            }
        }
        return;
    }
    if stage == Stage::Envelope {
        return;
    }
    for failure in failures.iter_mut() {
        if failure.reason == Some(Reason::UserUnknown) && !says_no_mailbox(failure) {
            failure.reason = Some(Reason::Filtered);
            failure.class = Some(Class::Policy);
        }
    }
}

/// Whether the last SMTP command the bounce's text (lowercased,
/// whitespace folded) names is `MAIL FROM`.
fn at_sender(text: &str) -> bool {
    let last = |markers: &[&str]| markers.iter().filter_map(|m| text.rfind(m)).max();
    let sender = last(&[
        "in reply to mail from command",
        "after mail from",
        ">>> mail from",
        "did not like our mail from",
    ]);
    let other = last(
        &ENVELOPE_COMMANDS
            .iter()
            .chain(DATA_COMMANDS)
            .copied()
            .filter(|m| m.contains("rcpt") || m.contains("data") || m.contains(">>> ."))
            .collect::<Vec<_>>(),
    );
    match (sender, other) {
        (Some(sender), Some(other)) => sender > other,
        (Some(_), None) => true,
        _ => false,
    }
}

/// Whether a failure's code says the mailbox does not exist whatever
/// the stage: an address status (5.1.x: 5.1.1, Microsoft's 5.1.10 and
/// 5.1.351), a provider's own code for it (Orange's 416, Exchange 2003's
/// 000C05A6), or a vendor's own words for it. A 5.2.1 (a mailbox that
/// takes no mail) that says "user unknown" after the data is the
/// receiver's filter, as sisimai reads it.
fn says_no_mailbox(failure: &Failure) -> bool {
    let code = failure.status.as_deref().and_then(StatusCode::parse);
    let address = code.is_some_and(|code| code.subject == 1);
    let diagnostic = failure.diagnostic.to_ascii_lowercase();
    address
        || reasons::by_provider_code(&diagnostic) == Some(Reason::UserUnknown)
        || NO_MAILBOX_WORDS.iter().any(|w| diagnostic.contains(w))
        || au_says_no_mailbox(&failure.recipient, &diagnostic)
}

/// KDDI's au (ezweb.ne.jp, au.com) says "`<address>`: User unknown" of a
/// mailbox that does not exist, and "550 : User unknown" (no address)
/// of its reception filter ([`reasons::by_provider_code`]).
fn au_says_no_mailbox(recipient: &str, diagnostic: &str) -> bool {
    let domain = recipient
        .rsplit_once('@')
        .map(|(_, d)| d.to_ascii_lowercase())
        .unwrap_or_default();
    let au = domain == "ezweb.ne.jp" || domain == "au.com" || domain.ends_with(".au.com");
    au && diagnostic.contains(">: user unknown")
}

/// PowerMTA's own verdict on each recipient of its report
/// (`X-PowerMTA-BounceCategory`), which it gives from its own table of
/// the remote replies: where it names a reason, that reason.
fn powermta_categories(report: &mut Report, raw: &[u8]) {
    let Kind::Bounce { failures, .. } = &mut report.kind else {
        return;
    };
    let head = &raw[..raw.len().min(64 << 10)];
    let text = String::from_utf8_lossy(head).to_ascii_lowercase();
    if !text.contains("x-powermta-bouncecategory:") {
        return;
    }
    for group in text.split("\n\n").chain(text.split("\r\n\r\n")) {
        let field = |name: &str| {
            group.lines().find_map(|line| {
                let (n, v) = line.split_once(':')?;
                n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
            })
        };
        let (Some(recipient), Some(category)) =
            (field("final-recipient"), field("x-powermta-bouncecategory"))
        else {
            continue;
        };
        let reason = match category {
            "bad-domain" => Reason::HostUnknown,
            "bad-mailbox" => Reason::UserUnknown,
            "inactive-mailbox" => Reason::Suspend,
            "message-expired" => Reason::Expired,
            "no-answer-from-host" => Reason::NetworkError,
            "policy-related" => Reason::PolicyViolation,
            "quota-issues" => Reason::MailboxFull,
            "routing-errors" => Reason::SystemError,
            "spam-related" => Reason::SpamDetected,
            _ => continue,
        };
        let address = recipient.rsplit(';').next().unwrap_or_default().trim();
        for failure in failures
            .iter_mut()
            .filter(|f| f.recipient.eq_ignore_ascii_case(address))
        {
            failure.reason = Some(reason);
            failure.class = Some(reason.class());
        }
    }
}

/// A vendor's own words (`vendors.rs`), in a failure's diagnostic or in
/// the bounce's text (where the vendor writes them as a headline, not on
/// the recipient's line), decide its reason.
fn in_vendors_words(report: &mut Report, raw: &[u8]) {
    let Kind::Bounce { failures, .. } = &mut report.kind else {
        return;
    };
    let Some(message) = MessageParser::default().parse(raw) else {
        return;
    };
    let seen = Seen::of(&message);
    let Some(vendor) = vendors::vendor_of(&seen) else {
        return;
    };
    let text = &seen.text;
    for failure in failures.iter_mut() {
        let said = vendors::reason_in(vendor, &failure.diagnostic.to_lowercase())
            .or_else(|| vendors::reason_in(vendor, text));
        if let Some(reason) = said {
            failure.reason = Some(reason);
            failure.class = Some(reason.class());
        }
    }
}

/// Vendors' words for a mailbox that does not exist, whatever the
/// command: Yahoo's "dd" notice, Lotus Notes' and Domino's directories,
/// IMail's, Microsoft's reply to `RCPT TO`.
const NO_MAILBOX_WORDS: &[&str] = &[
    "delivery error: dd this user doesn't have",
    "not listed in domino directory",
    "not listed in public name & address book",
    "invalid final delivery userid",
];

/// An SES notification in a message's text: the notification itself
/// (SNS's "email" protocol) or SNS's envelope with it as `Message`
/// ("email-json"). `None`: the text is no SES notification.
fn ses_by_mail(raw: &[u8]) -> Option<Report> {
    let message = MessageParser::default().parse(raw)?;
    let body = message.body_text(0)?;
    let json = &body[body.find('{')?..];
    let first_value = |json: &str| {
        serde_json::Deserializer::from_str(json)
            .into_iter::<Value>()
            .next()
            .and_then(Result::ok)
    };
    // An MTA that folds lines longer than SMTP allows (RFC 5321: 998
    // characters) ends the piece with `!` and a line break.
    let value = first_value(json).or_else(|| {
        first_value(
            &json
                .replace("!\r\n", "")
                .replace("!\n", "")
                .replace(['\r', '\n'], ""),
        )
    })?;
    let notification = match value.get("Message").and_then(Value::as_str) {
        Some(inner) => inner.to_owned(),
        None => value.to_string(),
    };
    providers::ses(&notification).ok().map(|event| event.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notification_mail(body: &str) -> Vec<u8> {
        format!(
            "From: AWS Notifications <no-reply@sns.amazonaws.com>\r\nTo: ops@example.com\r\n\
             Subject: AWS Notification Message\r\nMessage-ID: <n1@sns.amazonaws.com>\r\n\
             Content-Type: text/plain; charset=UTF-8\r\n\r\n{body}\r\n\r\n--\r\n\
             If you wish to stop receiving notifications from this topic, ...\r\n"
        )
        .into_bytes()
    }

    const BOUNCE: &str = r#"{"notificationType":"Bounce","bounce":{"bounceType":"Permanent","bounceSubType":"General","bouncedRecipients":[{"emailAddress":"gone@example.org","action":"failed","status":"5.1.1","diagnosticCode":"smtp; 550 5.1.1 user unknown"}],"timestamp":"2026-11-20T10:00:00.000Z","feedbackId":"0100-abc"},"mail":{"timestamp":"2026-11-20T09:59:59.000Z","source":"news@example.com","messageId":"0100-def","destination":["gone@example.org"]}}"#;

    #[test]
    fn an_ses_notification_by_mail_is_a_bounce() {
        let report = read(&notification_mail(BOUNCE)).unwrap();
        let Kind::Bounce { format, failures } = report.kind else {
            panic!("{:?}", report.kind);
        };
        assert_eq!(format, "ses");
        assert_eq!(failures[0].recipient, "gone@example.org");
        assert_eq!(failures[0].class, Some(super::super::Class::Hard));
    }

    #[test]
    fn a_user_unknown_after_the_data_is_filtered_and_at_rcpt_stays_hard() {
        let bounce = |code: &str, said: &str| {
            format!(
                "From: MAILER-DAEMON@mta.example.com\r\nTo: news@example.com\r\n\
                 Subject: Undelivered Mail Returned to Sender\r\nMessage-ID: <b1@mta.example.com>\r\n\
                 Content-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\r\n\r\n\
                 --B\r\nContent-Type: text/plain\r\n\r\n<gone@example.org>: host mx.example.org said: \
                 550 {code} <gone@example.org>: User unknown ({said})\r\n\r\n\
                 --B\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mta.example.com\r\n\r\n\
                 Final-Recipient: rfc822; gone@example.org\r\nAction: failed\r\nStatus: {code}\r\n\
                 Diagnostic-Code: smtp; 550 {code} <gone@example.org>: User unknown\r\n\r\n--B--\r\n"
            )
            .into_bytes()
        };
        let reading = |code: &str, said: &str| match read(&bounce(code, said)).unwrap().kind {
            Kind::Bounce { failures, .. } => (failures[0].reason, failures[0].class),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            reading("5.0.0", "in reply to end of DATA command"),
            (Some(Reason::Filtered), Some(Class::Policy))
        );
        assert_eq!(
            reading("5.0.0", "in reply to RCPT TO command"),
            (Some(Reason::UserUnknown), Some(Class::Hard))
        );
        assert_eq!(
            reading("5.1.1", "in reply to end of DATA command"),
            (Some(Reason::UserUnknown), Some(Class::Hard))
        );
        // The fold of a long line does not hide the command.
        assert_eq!(
            reading("5.0.0", "in reply to end of DATA\r\n    command"),
            (Some(Reason::Filtered), Some(Class::Policy))
        );
        // No command named: not known to be the address's death.
        assert_eq!(
            reading("5.0.0", "no command named"),
            (Some(Reason::Filtered), Some(Class::Policy))
        );
    }

    #[test]
    fn a_refusal_at_the_connection_that_says_nothing_is_a_block() {
        let raw = "From: Mail Delivery System <Mailer-Daemon@mta.example.com>\r\n\
                   To: news@example.com\r\nSubject: Mail delivery failed\r\n\
                   Message-ID: <b2@mta.example.com>\r\n\r\n\
                   This message was created automatically by mail delivery software.\r\n\r\n\
                   A message that you sent could not be delivered to one or more of its\r\n\
                   recipients. This is a permanent error. The following address(es) failed:\r\n\r\n\
                   \x20 reader@example.org\r\n\
                   \x20   host mx.example.org [192.0.2.9]\r\n\
                   \x20   SMTP error from remote mail server after initial connection:\r\n\
                   \x20   554 mx.example.org :\r\n";
        let Kind::Bounce { failures, .. } = read(raw.as_bytes()).unwrap().kind else {
            panic!("not read as a bounce");
        };
        assert_eq!(
            (failures[0].reason, failures[0].class),
            (Some(Reason::Blocked), Some(Class::Policy))
        );
    }

    #[test]
    fn in_sns_envelope_too() {
        let envelope = serde_json::json!({"Type": "Notification", "Message": BOUNCE});
        let report = read(&notification_mail(&envelope.to_string())).unwrap();
        assert!(matches!(report.kind, Kind::Bounce { format: "ses", .. }));
        let other = read(&notification_mail("{\"hello\": 1}")).unwrap();
        assert!(matches!(other.kind, Kind::NotABounce { .. }));
    }
}
