//! A message that came back, read whatever its form: a report or a
//! bounce's text (`parse.rs`), or an Amazon SES notification that SNS
//! delivered by mail (an email subscription to SES's topic: the body is
//! the notification's JSON, read as the webhook reads it, `providers.rs`).

use super::parse::{self, ParseError};
use super::providers;
use super::report::{Kind, Report};
use mail_parser::MessageParser;
use serde_json::Value;

/// Read one message.
pub fn read(raw: &[u8]) -> Result<Report, ParseError> {
    let report = parse::parse(raw)?;
    if !matches!(report.kind, Kind::NotABounce { .. }) {
        return Ok(report);
    }
    Ok(ses_by_mail(raw).unwrap_or(report))
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
    fn in_sns_envelope_too() {
        let envelope = serde_json::json!({"Type": "Notification", "Message": BOUNCE});
        let report = read(&notification_mail(&envelope.to_string())).unwrap();
        assert!(matches!(report.kind, Kind::Bounce { format: "ses", .. }));
        let other = read(&notification_mail("{\"hello\": 1}")).unwrap();
        assert!(matches!(other.kind, Kind::NotABounce { .. }));
    }
}
