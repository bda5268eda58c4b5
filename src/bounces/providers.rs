//! Providers' bounce and complaint events, read into the same [`Report`]
//! a returned message gives, so that `bounces ingest` and the server's
//! webhooks (`/hooks/ses`, `/hooks/mailgun`, src/server/hooks/) decide
//! through one path (`ingest.rs`). Only the event's JSON is read here;
//! who sent it (the SNS signature, Mailgun's HMAC) is checked by the
//! server before anything reaches this file.
//!
//! The provider's own verdict is combined with the classification table
//! (docs/bounces.md, "Provider webhooks"): the status code and the remote
//! MTA's words decide as for any bounce, and the provider's type bounds
//! them: a bounce the provider calls transient never suppresses at once,
//! one it calls permanent without a code is hard.

use super::classify::{self, Class};
use super::parse;
use super::report::{Failure, Kind, Report};
use crate::token::Token;
use serde_json::Value;

/// What a provider event came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The report to act on ([`Kind::NoFailure`] for events that are
    /// neither a bounce nor a complaint: deliveries, opens).
    pub report: Report,
    /// `ses:FEEDBACK-ID` or `mailgun:EVENT-ID`: the event's identity, the
    /// key that makes its second delivery change nothing.
    pub id: String,
}

/// Why an event's JSON cannot be read; each names the field.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("not JSON")]
    Json(#[source] serde_json::Error),
    #[error("the field `{0}` is missing or not of its type")]
    Field(&'static str),
}

fn text<'a>(value: &'a Value, field: &'static str) -> Result<&'a str, EventError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .ok_or(EventError::Field(field))
}

fn text_or_empty<'a>(value: &'a Value, field: &str) -> &'a str {
    value.get(field).and_then(Value::as_str).unwrap_or_default()
}

/// An Amazon SES notification: the `Message` of an SNS notification, as
/// SES's feedback notifications (`notificationType`) and event publishing
/// (`eventType`) write it.
pub fn ses(message: &str) -> Result<Event, EventError> {
    let value: Value = serde_json::from_str(message).map_err(EventError::Json)?;
    let kind = value
        .get("notificationType")
        .or_else(|| value.get("eventType"))
        .and_then(Value::as_str)
        .ok_or(EventError::Field("notificationType"))?;
    let mail = value.get("mail").ok_or(EventError::Field("mail"))?;
    let (kind, id) = match kind {
        "Bounce" => {
            let bounce = value.get("bounce").ok_or(EventError::Field("bounce"))?;
            (ses_bounce(bounce)?, text(bounce, "feedbackId")?.to_owned())
        }
        "Complaint" => {
            let complaint = value
                .get("complaint")
                .ok_or(EventError::Field("complaint"))?;
            (
                ses_complaint(complaint),
                text(complaint, "feedbackId")?.to_owned(),
            )
        }
        _ => (Kind::NoFailure, text(mail, "messageId")?.to_owned()),
    };
    Ok(Event {
        report: report(kind, ses_verp(mail), ses_message_id(mail), "ses", &id),
        id: format!("ses:{id}"),
    })
}

/// The bounced recipients, each classified with SES's `bounceType` and
/// `bounceSubType` as bounds (docs/bounces.md).
fn ses_bounce(bounce: &Value) -> Result<Kind, EventError> {
    let bounce_type = text(bounce, "bounceType")?;
    let sub_type = text_or_empty(bounce, "bounceSubType");
    let recipients = bounce
        .get("bouncedRecipients")
        .and_then(Value::as_array)
        .ok_or(EventError::Field("bouncedRecipients"))?;
    let mut failures = Vec::new();
    for recipient in recipients {
        let address = text(recipient, "emailAddress")?;
        let diagnostic = text_or_empty(recipient, "diagnosticCode");
        let status = Some(text_or_empty(recipient, "status"))
            .filter(|s| classify::StatusCode::parse(s).is_some())
            .map(str::to_owned)
            .or_else(|| classify::status_in_text(diagnostic).map(|c| c.to_string()));
        let words = format!("{diagnostic} {sub_type}");
        let class = classify::classify(status.as_deref(), &words);
        let reason = classify::reason(status.as_deref(), &words);
        failures.push(Failure {
            recipient: address.to_owned(),
            original_recipient: None,
            status,
            diagnostic: if diagnostic.is_empty() {
                format!("SES {bounce_type} {sub_type}")
            } else {
                diagnostic.to_owned()
            },
            class: ses_class(bounce_type, sub_type, class),
            reason,
        });
    }
    if failures.is_empty() {
        return Err(EventError::Field("bouncedRecipients"));
    }
    Ok(Kind::Bounce {
        format: "ses",
        failures,
    })
}

/// SES's verdict as a bound on the table's: `Transient` is never hard
/// (a message SES calls too large or rejected for its content is the
/// sender's problem); `Permanent` with nothing else to go on is hard, and
/// `Suppressed` (SES refuses the address after earlier hard bounces) is
/// hard; `Undetermined` leaves it to the table.
fn ses_class(bounce_type: &str, sub_type: &str, table: Option<Class>) -> Option<Class> {
    match bounce_type {
        "Transient" => match sub_type {
            "MessageTooLarge" | "ContentRejected" | "AttachmentRejected" => Some(Class::Policy),
            _ => match table {
                Some(Class::Policy) => Some(Class::Policy),
                _ => Some(Class::Soft),
            },
        },
        "Permanent" => match sub_type {
            "NoEmail" | "Suppressed" | "OnAccountSuppressionList" => Some(Class::Hard),
            _ => Some(table.unwrap_or(Class::Hard)),
        },
        _ => table,
    }
}

/// A complaint: the first complained recipient (SES sends one per
/// recipient of the letter, and our letters have one).
fn ses_complaint(complaint: &Value) -> Kind {
    let recipient = complaint
        .get("complainedRecipients")
        .and_then(Value::as_array)
        .and_then(|list| list.first())
        .and_then(|r| r.get("emailAddress"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let feedback_type = complaint
        .get("complaintFeedbackType")
        .and_then(Value::as_str)
        .unwrap_or("abuse");
    if feedback_type == "not-spam" {
        return Kind::NotABounce {
            why: "an SES complaint of feedback type not-spam",
        };
    }
    Kind::Complaint {
        feedback_type: feedback_type.to_owned(),
        recipient,
    }
}

/// VERP tokens in the letter's envelope sender (`mail.source`) and its
/// `Return-Path` header, when SES passed the headers on.
fn ses_verp(mail: &Value) -> Vec<Token> {
    let mut found = parse::tokens_in(text_or_empty(mail, "source"));
    for (name, value) in ses_headers(mail) {
        if name.eq_ignore_ascii_case("Return-Path") {
            found.extend(parse::tokens_in(value));
        }
    }
    found.dedup();
    found
}

fn ses_headers(mail: &Value) -> impl Iterator<Item = (&str, &str)> {
    mail.get("headers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|h| (text_or_empty(h, "name"), text_or_empty(h, "value")))
}

/// The letter's `Message-ID`: its header, else `commonHeaders.messageId`.
fn ses_message_id(mail: &Value) -> Option<String> {
    ses_headers(mail)
        .find(|(name, _)| name.eq_ignore_ascii_case("Message-ID"))
        .map(|(_, value)| value.trim().to_owned())
        .or_else(|| {
            mail.get("commonHeaders")
                .and_then(|h| h.get("messageId"))
                .and_then(Value::as_str)
                .map(|id| id.trim().to_owned())
        })
        .filter(|id| !id.is_empty())
}

/// A Mailgun webhook's `event-data`: `failed` (with `severity`
/// `permanent` or `temporary`) and `complained` are acted on; any other
/// event is nothing to decide.
pub fn mailgun(event: &Value) -> Result<Event, EventError> {
    let name = text(event, "event")?;
    let id = text(event, "id")?.to_owned();
    let headers = event.get("message").and_then(|m| m.get("headers"));
    let message_id = headers
        .and_then(|h| h.get("message-id"))
        .and_then(Value::as_str)
        .map(|id| {
            let id = id.trim();
            if id.starts_with('<') {
                id.to_owned()
            } else {
                format!("<{id}>")
            }
        });
    let mut verp = Vec::new();
    if let Some(sender) = event.get("envelope").and_then(|e| e.get("sender")) {
        verp.extend(parse::tokens_in(sender.as_str().unwrap_or_default()));
    }
    let kind = match name {
        "failed" => mailgun_failure(event)?,
        "complained" => Kind::Complaint {
            feedback_type: "abuse".into(),
            recipient: Some(text(event, "recipient")?.to_owned()),
        },
        _ => Kind::NoFailure,
    };
    Ok(Event {
        report: report(kind, verp, message_id, "mailgun", &id),
        id: format!("mailgun:{id}"),
    })
}

fn mailgun_failure(event: &Value) -> Result<Kind, EventError> {
    let recipient = text(event, "recipient")?;
    let severity = text(event, "severity")?;
    let reason = text_or_empty(event, "reason");
    let status = event.get("delivery-status");
    let field = |name: &str| status.map(|s| text_or_empty(s, name)).unwrap_or_default();
    let diagnostic = [field("message"), field("description")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let code = Some(field("enhanced-code"))
        .filter(|c| classify::StatusCode::parse(c).is_some())
        .map(str::to_owned)
        .or_else(|| classify::status_in_text(&diagnostic).map(|c| c.to_string()));
    let table = classify::classify(code.as_deref(), &diagnostic);
    let class = match severity {
        // Temporary: Mailgun retries; never the address's death.
        "temporary" => match table {
            Some(Class::Policy) => Some(Class::Policy),
            _ => Some(Class::Soft),
        },
        "permanent" => match reason {
            // Mailgun refuses an address that hard-bounced before.
            "suppress-bounce" => Some(Class::Hard),
            // Its own block of the sender (ESP block): not the address.
            "espblock" => Some(Class::Policy),
            "bounce" => Some(table.unwrap_or(Class::Hard)),
            _ => table,
        },
        _ => return Err(EventError::Field("severity")),
    };
    let why = classify::reason(code.as_deref(), &diagnostic);
    Ok(Kind::Bounce {
        format: "mailgun",
        failures: vec![Failure {
            recipient: recipient.to_owned(),
            original_recipient: None,
            status: code,
            diagnostic: if diagnostic.is_empty() {
                format!("Mailgun {severity} failure ({reason})")
            } else {
                diagnostic
            },
            class,
            reason: why,
        }],
    })
}

fn report(
    kind: Kind,
    verp: Vec<Token>,
    original_message_id: Option<String>,
    provider: &str,
    id: &str,
) -> Report {
    let stated_recipient = match &kind {
        Kind::Complaint { recipient, .. } => recipient.clone(),
        _ => None,
    };
    Report {
        kind,
        message_id: Some(format!("<{provider}:{id}>")),
        verp,
        original_message_id,
        stated_recipient,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ses_bounce_json(bounce_type: &str, sub_type: &str, status: &str, diag: &str) -> String {
        serde_json::json!({
            "notificationType": "Bounce",
            "bounce": {
                "bounceType": bounce_type, "bounceSubType": sub_type,
                "bouncedRecipients": [{"emailAddress": "a@example.org", "status": status,
                    "action": "failed", "diagnosticCode": diag}],
                "feedbackId": "0100-feedback", "timestamp": "2026-11-27T05:00:00.000Z"
            },
            "mail": {"messageId": "0100-mail", "source": "news@example.com",
                "commonHeaders": {"messageId": "<7.spring@news.example.com>"}}
        })
        .to_string()
    }

    fn class_of(event: &Event) -> Option<Class> {
        match &event.report.kind {
            Kind::Bounce { failures, .. } => failures[0].class,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ses_bounce_types_bound_the_table() {
        let rows = [
            (
                "Permanent",
                "General",
                "5.1.1",
                "smtp; 550 5.1.1 user unknown",
                Some(Class::Hard),
            ),
            ("Permanent", "NoEmail", "", "", Some(Class::Hard)),
            (
                "Permanent",
                "Suppressed",
                "5.1.1",
                "Amazon SES has suppressed",
                Some(Class::Hard),
            ),
            (
                "Permanent",
                "General",
                "5.7.1",
                "smtp; 550 5.7.1 rejected by DMARC policy",
                Some(Class::Policy),
            ),
            ("Permanent", "General", "", "", Some(Class::Hard)),
            (
                "Transient",
                "MailboxFull",
                "5.2.2",
                "smtp; 552 5.2.2 mailbox full",
                Some(Class::Soft),
            ),
            (
                "Transient",
                "General",
                "5.1.1",
                "smtp; 550 5.1.1 user unknown",
                Some(Class::Soft),
            ),
            (
                "Transient",
                "ContentRejected",
                "5.3.0",
                "",
                Some(Class::Policy),
            ),
            ("Undetermined", "Undetermined", "", "", None),
            (
                "Undetermined",
                "Undetermined",
                "",
                "smtp; 550 5.1.1 user unknown",
                Some(Class::Hard),
            ),
        ];
        for (bounce_type, sub, status, diag, class) in rows {
            let event = ses(&ses_bounce_json(bounce_type, sub, status, diag)).unwrap();
            assert_eq!(
                class_of(&event),
                class,
                "{bounce_type} {sub} {status} {diag}"
            );
            assert_eq!(event.id, "ses:0100-feedback");
            assert_eq!(
                event.report.original_message_id.as_deref(),
                Some("<7.spring@news.example.com>")
            );
        }
    }

    #[test]
    fn ses_complaints_deliveries_and_bad_json() {
        let complaint = serde_json::json!({
            "notificationType": "Complaint",
            "complaint": {"complainedRecipients": [{"emailAddress": "a@example.org"}],
                "complaintFeedbackType": "abuse", "feedbackId": "c-1"},
            "mail": {"messageId": "m", "source": "x@example.com"}
        });
        let event = ses(&complaint.to_string()).unwrap();
        assert_eq!(
            event.report.kind,
            Kind::Complaint {
                feedback_type: "abuse".into(),
                recipient: Some("a@example.org".into())
            }
        );
        let delivery = r#"{"eventType":"Delivery","mail":{"messageId":"m-9"}}"#;
        assert_eq!(ses(delivery).unwrap().report.kind, Kind::NoFailure);
        assert!(matches!(ses("{"), Err(EventError::Json(_))));
        assert!(matches!(
            ses(r#"{"notificationType":"Bounce","mail":{}}"#),
            Err(EventError::Field("bounce"))
        ));
    }

    #[test]
    fn mailgun_severity_and_reason_decide() {
        let failed = |severity: &str, reason: &str, enhanced: &str, message: &str| {
            serde_json::json!({
                "event": "failed", "id": "ev-1", "severity": severity, "reason": reason,
                "recipient": "a@example.org",
                "envelope": {"sender": "news@example.com"},
                "delivery-status": {"code": 550, "enhanced-code": enhanced, "message": message,
                    "description": ""},
                "message": {"headers": {"message-id": "7.spring@news.example.com"}}
            })
        };
        let rows = [
            (
                "permanent",
                "bounce",
                "5.1.1",
                "5.1.1 The email account does not exist",
                Some(Class::Hard),
            ),
            ("permanent", "suppress-bounce", "", "", Some(Class::Hard)),
            ("permanent", "espblock", "", "", Some(Class::Policy)),
            (
                "permanent",
                "generic",
                "5.7.1",
                "blocked by policy",
                Some(Class::Policy),
            ),
            (
                "temporary",
                "generic",
                "4.2.2",
                "mailbox full",
                Some(Class::Soft),
            ),
            (
                "temporary",
                "generic",
                "",
                "550 5.1.1 user unknown",
                Some(Class::Soft),
            ),
        ];
        for (severity, reason, enhanced, message, class) in rows {
            let event = mailgun(&failed(severity, reason, enhanced, message)).unwrap();
            assert_eq!(class_of(&event), class, "{severity} {reason} {message}");
            assert_eq!(event.id, "mailgun:ev-1");
            assert_eq!(
                event.report.original_message_id.as_deref(),
                Some("<7.spring@news.example.com>")
            );
        }
        let complained = serde_json::json!({"event": "complained", "id": "ev-2",
            "recipient": "a@example.org"});
        assert!(matches!(
            mailgun(&complained).unwrap().report.kind,
            Kind::Complaint { .. }
        ));
        let opened = serde_json::json!({"event": "opened", "id": "ev-3"});
        assert_eq!(mailgun(&opened).unwrap().report.kind, Kind::NoFailure);
        assert!(matches!(
            mailgun(&serde_json::json!({"event": "failed", "id": "x"})),
            Err(EventError::Field("recipient"))
        ));
    }
}
