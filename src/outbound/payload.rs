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

/// The type of a body that carries several events.
pub const BATCH_TYPE: &str = "batch";

/// A batch's body: `{"type": "batch", "timestamp": <its newest event's
/// time>, "data": [<each event's own body>, ...]}`. The stored bodies are
/// spliced in byte for byte, so the same events make the same bytes.
pub fn batch_body<'a>(bodies: impl IntoIterator<Item = &'a str>, newest: DateTime<Utc>) -> String {
    let mut out = format!(
        r#"{{"type":"{BATCH_TYPE}","timestamp":"{}","data":["#,
        rfc3339(newest)
    );
    for (n, body) in bodies.into_iter().enumerate() {
        if n > 0 {
            out.push(',');
        }
        out.push_str(body);
    }
    out.push_str("]}");
    out
}

/// The `webhook-id` of a batch: `batch_` and 32 hex digits of SHA-256 over
/// the ids of the events it carries (16 bytes each, in order). The same
/// events make the same id, so a retry of a batch has its id.
pub fn batch_id<'a>(event_ids: impl IntoIterator<Item = &'a [u8]>) -> String {
    format!("batch_{}", hex::encode(&batch_digest(event_ids)[..16]))
}

/// SHA-256 over the event ids, in order.
pub fn batch_digest<'a>(event_ids: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    use sha2::Digest;
    let mut hash = sha2::Sha256::new();
    for id in event_ids {
        hash.update(id);
    }
    hash.finalize().into()
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

    /// Issue 27: a click on a letter whose row retention dropped is sent
    /// with the mailing and position it belongs to, and `email: null`.
    #[test]
    fn a_late_click_names_its_mailing_and_position_and_nobody() {
        let late = EventRow {
            link_id: Some(0),
            letter_id: None,
            email: None,
            ..click()
        };
        let body: serde_json::Value =
            serde_json::from_str(&render(&late, &LinkDetails::default())).unwrap();
        let data = &body["data"];
        assert_eq!(body["type"], "email.clicked");
        assert_eq!(data["email"], serde_json::Value::Null);
        assert!(data.as_object().unwrap().contains_key("email"), "{body}");
        assert_eq!(data["letter_id"], serde_json::Value::Null);
        assert_eq!(
            (&data["mailing_id"], &data["position"]),
            (&"spring".into(), &3.into())
        );
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

    #[test]
    fn a_batch_splices_the_bodies_and_is_named_by_its_events() {
        let first = render(&click(), &LinkDetails::default());
        let second = render(
            &EventRow {
                event_id: [0xcd; 16],
                ..click()
            },
            &LinkDetails::default(),
        );
        let newest = "2026-11-23T10:00:01.500Z".parse().unwrap();
        let body = batch_body([first.as_str(), second.as_str()], newest);
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["type"], "batch");
        assert_eq!(parsed["timestamp"], "2026-11-23T10:00:01.500Z");
        assert_eq!(
            parsed["data"][0],
            serde_json::from_str::<serde_json::Value>(&first).unwrap()
        );
        assert_eq!(parsed["data"][1]["data"]["event_id"], "cd".repeat(16));
        let ids = [[0xab; 16], [0xcd; 16]];
        let id = batch_id(ids.iter().map(|i| &i[..]));
        assert_eq!(id.len(), "batch_".len() + 32);
        assert_eq!(id, batch_id(ids.iter().map(|i| &i[..])), "stable");
        assert_ne!(
            id,
            batch_id(ids.iter().rev().map(|i| &i[..])),
            "order counts"
        );
        assert_ne!(id, batch_id(ids[..1].iter().map(|i| &i[..])));
    }
}
