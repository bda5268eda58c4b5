//! The JSON every endpoint receives for one event (docs/serve.md has the
//! schema): `{"type", "timestamp", "data"}`, as Standard Webhooks suggests.
//! Rendered once when the event is enqueued, so retries send the same bytes.

use crate::event::EventRow;
use crate::kind::EventKind;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

/// The `type` of an event kind.
pub fn event_type(kind: EventKind) -> &'static str {
    match kind {
        EventKind::Click => "email.clicked",
        EventKind::Open => "email.opened",
        EventKind::Image => "email.image_loaded",
        EventKind::Unsubscribe => "email.unsubscribed",
    }
}

/// The type of a bounce (hard, soft or policy) of a letter.
pub const BOUNCED: &str = "email.bounced";

/// The type of a complaint (an ARF report) about a letter.
pub const COMPLAINED: &str = "email.complained";

/// Every type an endpoint may filter on.
pub const EVENT_TYPES: [&str; 6] = [
    "email.clicked",
    "email.opened",
    "email.image_loaded",
    "email.unsubscribed",
    BOUNCED,
    COMPLAINED,
];

/// A bounce or complaint decision, as it goes out (`email.bounced`,
/// `email.complained`; docs/bounces.md, "Events out"). Made by
/// `linktrack bounces ingest` when it stores a decision, never for a
/// second delivery of the same message.
#[derive(Debug, Clone, PartialEq)]
pub struct BounceEvent<'a> {
    pub event_id: [u8; 16],
    /// When linktrack read the bounce.
    pub occurred_at: DateTime<Utc>,
    pub mailing_id: &'a str,
    pub letter_id: u64,
    pub email: &'a str,
    /// `hard`, `soft`, `policy` or `complaint`.
    pub kind: &'a str,
    /// The enhanced status code (`5.1.1`), or a complaint's feedback type.
    pub status: &'a str,
    /// The remote MTA's words (bounces only).
    pub diagnostic: &'a str,
    /// `suppressed`, `counted`, `reported` or `listed`.
    pub action: &'a str,
    /// The bounce's or complaint's own Message-ID.
    pub source_message_id: &'a str,
}

impl BounceEvent<'_> {
    /// `email.complained` for a complaint, else `email.bounced`.
    pub fn event_type(&self) -> &'static str {
        if self.kind == "complaint" {
            COMPLAINED
        } else {
            BOUNCED
        }
    }
}

// The body of a bounce or complaint, in the order its fields are sent.
#[derive(Serialize)]
struct BouncePayload<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: BounceData<'a>,
}

#[derive(Serialize)]
struct BounceData<'a> {
    event_id: String,
    mailing_id: &'a str,
    letter_id: u64,
    email: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    bounce_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    diagnostic: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    feedback_type: Option<&'a str>,
    suppressed: bool,
    action: &'a str,
    source_message_id: &'a str,
    occurred_at: String,
}

/// The body of a bounce or complaint: `{"type", "timestamp", "data"}` like
/// every event; `data` has `bounce_type`, `status` and `diagnostic` for a
/// bounce, `feedback_type` for a complaint.
pub fn render_bounce(event: &BounceEvent<'_>) -> Result<String, serde_json::Error> {
    let occurred_at = rfc3339(event.occurred_at);
    let complaint = event.kind == "complaint";
    let bounce = |value| (!complaint).then_some(value);
    let data = BounceData {
        event_id: hex::encode(event.event_id),
        mailing_id: event.mailing_id,
        letter_id: event.letter_id,
        email: event.email,
        bounce_type: bounce(event.kind),
        status: bounce(event.status),
        diagnostic: bounce(event.diagnostic),
        feedback_type: complaint.then_some(event.status),
        suppressed: matches!(event.action, "suppressed" | "listed"),
        action: event.action,
        source_message_id: event.source_message_id,
        occurred_at: occurred_at.clone(),
    };
    serde_json::to_string(&BouncePayload {
        kind: event.event_type(),
        timestamp: occurred_at,
        data,
    })
}

/// What the link row adds to an event: its URL (clicks) and tags.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LinkDetails {
    pub url: Option<String>,
    pub tags: Vec<String>,
}

// The body's shape, in the order its fields are sent. Deserialisable too,
// so the settle pass can render a held body again with its settled verdict
// ([`settled`]): every field but `bot` comes back as it was stored.
#[derive(Serialize, Deserialize)]
struct Payload<'a> {
    #[serde(rename = "type")]
    kind: Cow<'a, str>,
    timestamp: String,
    data: Data<'a>,
}

#[derive(Serialize, Deserialize)]
struct Data<'a> {
    event_id: String,
    token: String,
    mailing_id: Option<Cow<'a, str>>,
    letter_id: Option<u64>,
    email: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    url: Option<Cow<'a, str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    position: Option<u32>,
    tags: Cow<'a, [String]>,
    occurred_at: String,
    ip: Option<Cow<'a, str>>,
    user_agent: Option<Cow<'a, str>>,
    /// The client address's country (ISO 3166-1 alpha-2), only when known
    /// (`serve --geoip`): absent otherwise, so bodies without it keep
    /// their bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    country: Option<Cow<'a, str>>,
    bot: Bot<'a>,
}

/// The bot verdict: bots are delivered too, flagged, so the receiver decides.
#[derive(Serialize, Deserialize)]
struct Bot<'a> {
    verdict: bool,
    reasons: Vec<Cow<'a, str>>,
    /// The verdict is final: a click or open held until the rollup settled
    /// it, or an unsubscribe (nothing revises those). `false`: the first
    /// verdict, sent at once (`--verdict-settle-secs 0`, or the safety net
    /// of a held event whose settle pass never came); it may differ from
    /// what the statistics count.
    #[serde(default)]
    settled: bool,
}

impl<'a> Bot<'a> {
    fn of(verdict: bool, reason: Option<&'a str>, settled: bool) -> Bot<'a> {
        Bot {
            verdict,
            reasons: reason
                .map(|r| {
                    r.split(',')
                        .filter(|s| !s.is_empty())
                        .map(Cow::Borrowed)
                        .collect()
                })
                .unwrap_or_default(),
            settled,
        }
    }
}

/// Whether an event of `kind` waits for its settled verdict before it goes
/// out (when verdicts settle at all): clicks, opens and image loads do.
/// An unsubscribe is a person's instruction, honoured whoever sends it, and
/// goes at once.
pub fn waits_for_verdict(kind: EventKind) -> bool {
    kind != EventKind::Unsubscribe
}

/// The body for `row`. `settled`: its verdict is final (see `Bot`); an
/// unsubscribe always says so.
///
/// # Examples
///
/// A human's click, as a webhook endpoint receives it:
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use linktrack::event::EventRow;
/// use linktrack::kind::EventKind;
/// use linktrack::payload::{render, LinkDetails};
///
/// let click = EventRow {
///     event_id: [1; 16],
///     occurred_at: Utc.with_ymd_and_hms(2026, 11, 27, 9, 30, 0).unwrap(),
///     kind: EventKind::Click,
///     token: [2; 16],
///     link_id: Some(7),
///     mailing_id: Some("2026-11-news".into()),
///     letter_id: Some(42),
///     email: Some("ann@example.com".into()),
///     position: Some(3),
///     ip: Some("203.0.113.9".into()),
///     user_agent: Some("Mozilla/5.0".into()),
///     country: None,
///     bot: false,
///     bot_reason: None,
/// };
/// let link = LinkDetails {
///     url: Some("https://example.com/sale".into()),
///     tags: vec!["sale".into()],
/// };
/// let body: serde_json::Value = serde_json::from_str(&render(&click, &link, true).unwrap()).unwrap();
/// assert_eq!(body["type"], "email.clicked");
/// assert_eq!(body["timestamp"], "2026-11-27T09:30:00.000Z");
/// assert_eq!(body["data"]["mailing_id"], "2026-11-news");
/// assert_eq!(body["data"]["url"], "https://example.com/sale");
/// assert_eq!(body["data"]["bot"]["verdict"], false);
/// assert_eq!(body["data"]["bot"]["settled"], true);
/// ```
pub fn render(
    row: &EventRow,
    link: &LinkDetails,
    settled: bool,
) -> Result<String, serde_json::Error> {
    let occurred_at = rfc3339(row.occurred_at);
    let clicked = row.kind == EventKind::Click;
    let payload = Payload {
        kind: Cow::Borrowed(event_type(row.kind)),
        timestamp: occurred_at.clone(),
        data: Data {
            event_id: hex::encode(row.event_id),
            token: hex::encode(row.token),
            mailing_id: borrowed(&row.mailing_id),
            letter_id: row.letter_id,
            email: borrowed(&row.email),
            url: link.url.as_deref().filter(|_| clicked).map(Cow::Borrowed),
            position: row.position.filter(|_| clicked),
            tags: Cow::Borrowed(&link.tags),
            occurred_at,
            ip: borrowed(&row.ip),
            user_agent: borrowed(&row.user_agent),
            country: borrowed(&row.country),
            bot: Bot::of(
                row.bot,
                row.bot_reason.as_deref(),
                settled || !waits_for_verdict(row.kind),
            ),
        },
    };
    serde_json::to_string(&payload)
}

/// The type of the event stream's verdict event: a click, open or image
/// load sent with its first verdict has settled (docs/api.md, "The event
/// stream").
pub const VERDICT: &str = "verdict";

#[derive(Serialize)]
struct VerdictPayload<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    timestamp: String,
    data: VerdictData<'a>,
}

#[derive(Serialize)]
struct VerdictData<'a> {
    event_id: String,
    event_type: &'static str,
    mailing_id: Option<&'a str>,
    bot: Bot<'a>,
    /// The settled verdict differs from the first one.
    changed: bool,
}

/// The body of a `verdict` event: the settled verdict of the event
/// `event_id` (of type `event_type`), `{"type": "verdict", "timestamp",
/// "data": {"event_id", "event_type", "mailing_id", "bot", "changed"}}`.
pub fn render_verdict(
    event_id: &[u8; 16],
    event_type: &'static str,
    mailing_id: Option<&str>,
    verdict: bool,
    reason: Option<&str>,
    changed: bool,
    at: DateTime<Utc>,
) -> Result<String, serde_json::Error> {
    serde_json::to_string(&VerdictPayload {
        kind: VERDICT,
        timestamp: rfc3339(at),
        data: VerdictData {
            event_id: hex::encode(event_id),
            event_type,
            mailing_id,
            bot: Bot::of(verdict, reason, true),
            changed,
        },
    })
}

fn borrowed(text: &Option<String>) -> Option<Cow<'_, str>> {
    text.as_deref().map(Cow::Borrowed)
}

/// A held body rendered again with its settled verdict: `bot` becomes
/// `{verdict, reasons, "settled": true}`, every other field stays as it was
/// stored (same fields, same order, same values). An error when `stored`
/// is not a body [`render`] made.
pub fn settled(
    stored: &str,
    verdict: bool,
    reason: Option<&str>,
) -> Result<String, serde_json::Error> {
    let mut payload: Payload<'_> = serde_json::from_str(stored)?;
    payload.data.bot = Bot::of(verdict, reason, true);
    serde_json::to_string(&payload)
}

/// A stored body with a person taken out (`linktrack erase`): `email`,
/// `ip` and `user_agent` null when the event was theirs (it names the
/// address in any spelling, or one of `letters`), and every form of the
/// address taken out of the URL and tags (a personalised link). Every
/// other field stays as stored. `None`: the body did not name them.
pub fn without_person(
    stored: &str,
    email: &str,
    letters: &std::collections::HashSet<u64>,
) -> Result<Option<String>, serde_json::Error> {
    let mut payload: Payload<'_> = serde_json::from_str(stored)?;
    let data = &mut payload.data;
    let named = data
        .email
        .as_deref()
        .is_some_and(|named| crate::address::normalize(named) == crate::address::normalize(email));
    let theirs = named || data.letter_id.is_some_and(|id| letters.contains(&id));
    if theirs {
        data.email = None;
        data.ip = None;
        data.user_agent = None;
        data.country = None;
    }
    if let Some(url) = data
        .url
        .as_deref()
        .and_then(|u| crate::address::scrub(u, email))
    {
        data.url = Some(Cow::Owned(url));
    }
    if data
        .tags
        .iter()
        .any(|tag| crate::address::scrub(tag, email).is_some())
    {
        let tags: Vec<String> = data
            .tags
            .iter()
            .map(|tag| crate::address::scrub(tag, email).unwrap_or_else(|| tag.clone()))
            .collect();
        data.tags = Cow::Owned(tags);
    }
    let rendered = serde_json::to_string(&payload)?;
    Ok((rendered != stored).then_some(rendered))
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
            country: None,
            bot: true,
            bot_reason: Some("ua:bot".into()),
        }
    }

    /// A click on a letter whose row retention dropped is sent
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
            serde_json::from_str(&render(&late, &LinkDetails::default(), false).unwrap()).unwrap();
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
        let body: serde_json::Value =
            serde_json::from_str(&render(&click(), &link, true).unwrap()).unwrap();
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
                    "bot": {"verdict": true, "reasons": ["ua:bot"], "settled": true}
                }
            })
        );
    }

    /// The country goes out when `serve --geoip` knew it, right
    /// after the user agent; without it the body has no `country` at all
    /// (the bytes of before). Settling keeps it; erasing the person drops
    /// it with the address, network and user agent.
    #[test]
    fn the_country_goes_out_when_known_and_leaves_with_the_person() {
        let link = LinkDetails::default();
        let unknown = render(&click(), &link, false).unwrap();
        assert!(!unknown.contains("country"), "{unknown}");
        let known = EventRow {
            country: Some("SE".into()),
            ..click()
        };
        let body = render(&known, &link, false).unwrap();
        assert!(
            body.contains(r#""user_agent":"Mozilla/5.0","country":"SE","bot":"#),
            "{body}"
        );
        assert_eq!(body.replace(r#","country":"SE""#, ""), unknown);
        let settled_body = settled(&body, false, None).unwrap();
        let value: serde_json::Value = serde_json::from_str(&settled_body).unwrap();
        assert_eq!(value["data"]["country"], "SE");
        assert_eq!(value["data"]["bot"]["settled"], true);
        // An older stored body (no country) settles without one.
        assert!(!settled(&unknown, false, None).unwrap().contains("country"));
        let erased = without_person(&body, "Ann@Example.com", &Default::default())
            .unwrap()
            .expect("the body named her");
        let value: serde_json::Value = serde_json::from_str(&erased).unwrap();
        assert!(value["data"].get("country").is_none(), "{erased}");
        assert!(value["data"]["email"].is_null() && value["data"]["ip"].is_null());
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
        let body: serde_json::Value =
            serde_json::from_str(&render(&open, &link, false).unwrap()).unwrap();
        assert_eq!(body["type"], "email.opened");
        assert!(body["data"].get("url").is_none());
        assert!(body["data"].get("position").is_none());
        assert_eq!(
            body["data"]["bot"],
            serde_json::json!({"verdict": false, "reasons": [], "settled": false})
        );
    }

    /// A held body rendered again with its settled verdict is
    /// the body the settled event renders to, byte for byte: only `bot`
    /// changed, every other field kept its value and its place.
    #[test]
    fn a_held_body_settles_to_the_bytes_of_the_settled_event() {
        let link = LinkDetails {
            url: Some("https://example.com/a?b=1&c=\"2\"".into()),
            tags: vec!["ruby".into(), "é".into()],
        };
        let first = EventRow {
            bot: false,
            bot_reason: None,
            user_agent: Some("Mozilla/5.0 \"quoted\" \\ ,\"bot\":{}".into()),
            country: None,
            ..click()
        };
        let held = render(&first, &link, false).unwrap();
        assert!(
            held.ends_with(r#""bot":{"verdict":false,"reasons":[],"settled":false}}}"#),
            "{held}"
        );
        let again = settled(&held, true, Some("honeypot_window")).unwrap();
        let settled_row = EventRow {
            bot: true,
            bot_reason: Some("honeypot_window".into()),
            ..first.clone()
        };
        assert_eq!(again, render(&settled_row, &link, true).unwrap());
        // A late event (no letter, no address) and an open (no url) too.
        for row in [
            EventRow {
                letter_id: None,
                email: None,
                ip: None,
                user_agent: None,
                country: None,
                ..first.clone()
            },
            EventRow {
                kind: EventKind::Open,
                ..first.clone()
            },
        ] {
            let again = settled(
                &render(&row, &link, false).unwrap(),
                false,
                Some("proxy:gmail"),
            )
            .unwrap();
            let want = EventRow {
                bot: false,
                bot_reason: Some("proxy:gmail".into()),
                ..row
            };
            assert_eq!(again, render(&want, &link, true).unwrap());
        }
        assert!(settled("not json", true, None).is_err());
    }

    #[test]
    fn an_unsubscribe_is_always_settled_and_never_waits() {
        let unsubscribe = EventRow {
            kind: EventKind::Unsubscribe,
            ..click()
        };
        let body: serde_json::Value =
            serde_json::from_str(&render(&unsubscribe, &LinkDetails::default(), false).unwrap())
                .unwrap();
        assert_eq!(body["data"]["bot"]["settled"], true);
        assert!(!waits_for_verdict(EventKind::Unsubscribe));
        for kind in [EventKind::Click, EventKind::Open, EventKind::Image] {
            assert!(waits_for_verdict(kind));
        }
    }

    #[test]
    fn a_bounce_and_a_complaint_say_what_came_back_and_what_was_done() {
        let bounce = BounceEvent {
            event_id: [0x0b; 16],
            occurred_at: "2026-11-23T10:00:00.250Z".parse().unwrap(),
            mailing_id: "spring",
            letter_id: 7,
            email: "ann@example.com",
            kind: "hard",
            status: "5.1.1",
            diagnostic: "550 5.1.1 <ann@example.com>: Recipient address rejected",
            action: "suppressed",
            source_message_id: "<dsn-1@mx.example.net>",
        };
        let body = render_bounce(&bounce).unwrap();
        assert!(
            body.starts_with(r#"{"type":"email.bounced","timestamp":"#),
            "{body}"
        );
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            body["data"],
            serde_json::json!({
                "event_id": "0b".repeat(16),
                "mailing_id": "spring",
                "letter_id": 7,
                "email": "ann@example.com",
                "bounce_type": "hard",
                "status": "5.1.1",
                "diagnostic": "550 5.1.1 <ann@example.com>: Recipient address rejected",
                "suppressed": true,
                "action": "suppressed",
                "source_message_id": "<dsn-1@mx.example.net>",
                "occurred_at": "2026-11-23T10:00:00.250Z"
            })
        );
        let soft = BounceEvent {
            kind: "soft",
            action: "counted",
            ..bounce.clone()
        };
        let body: serde_json::Value = serde_json::from_str(&render_bounce(&soft).unwrap()).unwrap();
        assert_eq!(
            (&body["data"]["bounce_type"], &body["data"]["suppressed"]),
            (&"soft".into(), &false.into())
        );
        let complaint = BounceEvent {
            kind: "complaint",
            status: "abuse",
            diagnostic: "",
            ..bounce
        };
        assert_eq!(complaint.event_type(), COMPLAINED);
        let body: serde_json::Value =
            serde_json::from_str(&render_bounce(&complaint).unwrap()).unwrap();
        assert_eq!(body["type"], "email.complained");
        assert_eq!(body["data"]["feedback_type"], "abuse");
        for bounce_only in ["bounce_type", "status", "diagnostic"] {
            assert!(body["data"].get(bounce_only).is_none(), "{body}");
        }
    }

    #[test]
    fn a_batch_splices_the_bodies_and_is_named_by_its_events() {
        let first = render(&click(), &LinkDetails::default(), true).unwrap();
        let second = render(
            &EventRow {
                event_id: [0xcd; 16],
                ..click()
            },
            &LinkDetails::default(),
            true,
        )
        .unwrap();
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
