//! A message that came back, read whatever its form: a report or a
//! bounce's text (`parse.rs`), or an Amazon SES notification that SNS
//! delivered by mail (an email subscription to SES's topic: the body is
//! the notification's JSON, read as the webhook reads it, `providers.rs`).

use super::classify::StatusCode;
use super::parse::{self, ParseError};
use super::providers;
use super::reasons::{Class, Reason};
use super::report::{Kind, Report};
use mail_parser::MessageParser;
use serde_json::Value;

/// Read one message.
pub fn read(raw: &[u8]) -> Result<Report, ParseError> {
    let mut report = parse::parse(raw)?;
    if !matches!(report.kind, Kind::NotABounce { .. }) {
        filtered_after_data(&mut report, raw);
        return Ok(report);
    }
    Ok(ses_by_mail(raw).unwrap_or(report))
}

/// How a bounce's text says the remote MTA refused the message after its
/// data, not at `RCPT TO`: Postfix's "(in reply to end of DATA command)",
/// Exim's "after end of data", a Sendmail or Courier transcript's `>>>
/// DATA` (with no `>>> RCPT` refused before it).
const AFTER_DATA: &[&str] = &[
    "in reply to end of data command",
    "in reply to data command",
    "after end of data",
];

/// A "user unknown" given after the message's data, once the receiver
/// had accepted the recipient at `RCPT TO`, is the receiver's filter
/// speaking, not the address's death: `filtered`, a policy block (as the
/// reference parsers read it), unless its code is 5.1.1. Only the
/// bounce's text before the returned message is read.
fn filtered_after_data(report: &mut Report, raw: &[u8]) {
    let Kind::Bounce { failures, .. } = &mut report.kind else {
        return;
    };
    if !failures
        .iter()
        .any(|f| f.reason == Some(Reason::UserUnknown))
    {
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
    let transcript_data = text.contains(">>> data") && !text.contains(">>> rcpt");
    if !transcript_data && !AFTER_DATA.iter().any(|marker| text.contains(marker)) {
        return;
    }
    for failure in failures.iter_mut() {
        // 5.1.1 is the code of a mailbox that does not exist, whenever
        // it is said (a pipelining client reads RCPT's refusal after
        // sending DATA); the loose codes (5.0.0, 5.2.0, 5.7.1) are not.
        let mailbox_code = failure
            .status
            .as_deref()
            .and_then(StatusCode::parse)
            .is_some_and(|code| code.subject == 1 && code.detail == 1);
        if failure.reason == Some(Reason::UserUnknown) && !mailbox_code {
            failure.reason = Some(Reason::Filtered);
            failure.class = Some(Class::Policy);
        }
    }
}

/// An SES notification in a message's text: the notification itself
/// (SNS's "email" protocol) or SNS's envelope with it as `Message`
/// ("email-json"). `None`: the text is no SES notification.
fn ses_by_mail(raw: &[u8]) -> Option<Report> {
    let message = MessageParser::default().parse(raw)?;
    let body = message.body_text(0)?;
    let json = &body[body.find('{')?..];
    let value = serde_json::Deserializer::from_str(json)
        .into_iter::<Value>()
        .next()?
        .ok()?;
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
