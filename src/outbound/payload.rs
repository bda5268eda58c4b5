//! The JSON every endpoint receives for one event (docs/serve.md has the
//! schema): `{"type", "timestamp", "data"}`, as Standard Webhooks suggests.
//! Rendered once when the event is enqueued, so retries send the same bytes.

use crate::kind::EventKind;
use crate::store::events::EventRow;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

/// The `type` of an event kind.
pub fn event_type(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Click => "email.clicked",
        EventKind::Open => "email.opened",
        EventKind::Image => "email.image_loaded",
        EventKind::Unsubscribe => "email.unsubscribed",
    }
}

/// Every type an endpoint may filter on.
pub const EVENT_TYPES: [&str; 4] = [
    "email.clicked",
    "email.opened",
    "email.image_loaded",
    "email.unsubscribed",
];

/// What the link row adds to an event: its URL (clicks) and tags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkDetails {
    pub url: Option<String>,
    pub tags: Vec<String>,
}

#[derive(Serialize)]
struct Payload<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize)]
struct Data<'a> {
    event_id: String,
    token: String,
    mailing_id: Option<&'a str>,
    letter_id: Option<u64>,
    email: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<u32>,
    tags: &'a [String],
    occurred_at: String,
    ip: Option<&'a str>,
    user_agent: Option<&'a str>,
    bot: Bot<'a>,
}

/// The bot verdict: bots are delivered too, flagged, so the receiver decides.
#[derive(Serialize)]
struct Bot<'a> {
    verdict: bool,
    reasons: Vec<&'a str>,
}

/// The body for `row`.
pub fn render(row: &EventRow, link: &LinkDetails) -> String {
    let occurred_at = rfc3339(row.occurred_at);
    let clicked = row.kind == EventKind::Click;
    let payload = Payload {
        kind: event_type(row.kind),
        timestamp: occurred_at.clone(),
        data: Data {
            event_id: hex::encode(row.event_id),
            token: hex::encode(row.token),
            mailing_id: row.mailing_id.as_deref(),
            letter_id: row.letter_id,
            email: row.email.as_deref(),
            url: link.url.as_deref().filter(|_| clicked),
            position: row.position.filter(|_| clicked),
            tags: &link.tags,
            occurred_at,
            ip: row.ip.as_deref(),
            user_agent: row.user_agent.as_deref(),
            bot: Bot {
                verdict: row.bot,
                reasons: row
                    .bot_reason
                    .as_deref()
                    .map(|r| r.split(',').filter(|s| !s.is_empty()).collect())
                    .unwrap_or_default(),
            },
        },
    };
    // Strings, numbers and booleans only: serialising cannot fail.
    serde_json::to_string(&payload).unwrap_or_else(|_| unreachable!("plain data serialises"))
}

/// A `webhook.test` body for `linktrack webhooks test`.
pub fn test_body(endpoint: &str) -> String {
    serde_json::json!({
        "type": "webhook.test",
        "timestamp": rfc3339(Utc::now()),
        "data": { "endpoint": endpoint },
    })
    .to_string()
}

fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn click() -> EventRow {
        EventRow {
            event_id: [0xab; 16],
            occurred_at: "2026-11-23T10:00:00.250Z".parse().unwrap(),
            kind: EventKind::Click,
            token: [0x01; 16],
            link_id: Some(9),
            mailing_id: Some("spring".into()),
            letter_id: Some(7),
            email: Some("ann@example.com".into()),
            position: Some(3),
            ip: Some("192.0.2.0/24".into()),
            user_agent: Some("Mozilla/5.0".into()),
            bot: true,
            bot_reason: Some("ua:bot".into()),
        }
    }

    #[test]
    fn a_click_carries_everything_a_trigger_needs() {
        let link = LinkDetails {
            url: Some("https://example.com/a?b=1&c=2".into()),
            tags: vec!["ruby".into()],
        };
        let body: serde_json::Value = serde_json::from_str(&render(&click(), &link)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "type": "email.clicked",
                "timestamp": "2026-11-23T10:00:00.250Z",
                "data": {
                    "event_id": "abababababababababababababababab",
                    "token": "01010101010101010101010101010101",
                    "mailing_id": "spring",
                    "letter_id": 7,
                    "email": "ann@example.com",
                    "url": "https://example.com/a?b=1&c=2",
                    "position": 3,
                    "tags": ["ruby"],
                    "occurred_at": "2026-11-23T10:00:00.250Z",
                    "ip": "192.0.2.0/24",
                    "user_agent": "Mozilla/5.0",
                    "bot": {"verdict": true, "reasons": ["ua:bot"]}
                }
            })
        );
    }

    #[test]
    fn an_open_has_no_url_or_position() {
        let open = EventRow {
            kind: EventKind::Open,
            bot: false,
            bot_reason: None,
            ..click()
        };
        let link = LinkDetails {
            url: Some("https://t.example.com/o.gif".into()),
            tags: vec![],
        };
        let body: serde_json::Value = serde_json::from_str(&render(&open, &link)).unwrap();
        assert_eq!(body["type"], "email.opened");
        assert!(body["data"].get("url").is_none());
        assert!(body["data"].get("position").is_none());
        assert_eq!(
            body["data"]["bot"],
            serde_json::json!({"verdict": false, "reasons": []})
        );
    }
}
