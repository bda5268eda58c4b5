//! `GET /api/events/stream` (scope `events:read`): the live event stream,
//! server-sent events fed by the server's `EventFeed` (`event_feed.rs`). Each event's
//! `data:` is the JSON the webhooks carry and its `id:` a cursor a client
//! resumes from with `Last-Event-ID`; a comment line every
//! [`HEARTBEAT`] keeps proxies from closing a quiet stream (docs/api.md,
//! "The event stream").

use super::caller::ApiCaller;
use super::error::{ApiError, ErrorBody};
use super::event_feed::{Cursor, Item, Source, StreamSlot, MAX_STREAMS_PER_KEY};
use super::state::ApiState;
use crate::api_keys::Scope;
use crate::payload::EVENT_TYPES;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::collections::HashSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// How often a quiet stream sends a comment line.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(15);

/// The stream's filters.
#[derive(Debug, Default, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamParams {
    /// Only this mailing's events.
    #[serde(default)]
    pub mailing: Option<String>,
    /// Only these types, comma-separated: `email.clicked`, `email.opened`,
    /// `email.image_loaded`, `email.unsubscribed`, `email.bounced`,
    /// `email.complained` (a `verdict` goes with the type it settles).
    #[serde(default)]
    pub types: Option<String>,
}

/// One event of the stream, as its `data:` line holds it: the webhooks'
/// body (docs/serve.md), or a `verdict`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub(crate) struct StreamEvent {
    /// The event's JSON: `{"type", "timestamp", "data"}`.
    pub data: String,
    /// The cursor to resume from (`Last-Event-ID`), `EVENTS-BOUNCES`.
    pub id: Option<String>,
}

/// Which items a stream sends.
struct Filter {
    mailing: Option<String>,
    types: Option<Vec<&'static str>>,
}

impl Filter {
    fn read(params: StreamParams) -> Result<Filter, ApiError> {
        let types = match params.types.as_deref() {
            None => None,
            Some(list) => {
                let mut types = Vec::new();
                for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                    let known = EVENT_TYPES.iter().find(|t| **t == name).ok_or_else(|| {
                        ApiError::BadRequest(format!(
                            "types: unknown event type {name:?}; the types are {}",
                            EVENT_TYPES.join(", ")
                        ))
                    })?;
                    types.push(*known);
                }
                if types.is_empty() {
                    return Err(ApiError::BadRequest(
                        "types: name at least one event type, or leave it out for all".into(),
                    ));
                }
                Some(types)
            }
        };
        Ok(Filter {
            mailing: params.mailing,
            types,
        })
    }

    fn wants(&self, item: &Item) -> bool {
        let mailing = self
            .mailing
            .as_deref()
            .is_none_or(|m| item.mailing_id.as_deref() == Some(m));
        let kind = self
            .types
            .as_ref()
            .is_none_or(|types| types.contains(&item.event_type));
        mailing && kind
    }
}

/// `GET /api/events/stream`.
#[utoipa::path(
    get,
    path = "/api/events/stream",
    operation_id = "event_stream",
    tag = "events",
    params(
        StreamParams,
        ("Last-Event-ID" = Option<String>, Header,
         description = "The `id:` of the last event received: the stream first sends what was stored after it (24 hours, 10,000 events at most)"),
    ),
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Server-sent events (scope events:read): each `data:` is the webhooks' JSON of a click, open, image load, unsubscribe, bounce, complaint or settled verdict, each `id:` a cursor; a comment line every 15 s",
         content((StreamEvent = "text/event-stream"))),
        (status = 400, description = "An unknown type, or a Last-Event-ID this stream did not send", body = ErrorBody),
        (status = 401, description = "No valid key", body = ErrorBody),
        (status = 403, description = "The key lacks the scope", body = ErrorBody),
        (status = 429, description = "Too many wrong keys, or the key holds 5 streams already", body = ErrorBody),
        (status = 503, description = "The database is unavailable, or the server is stopping", body = ErrorBody),
    )
)]
pub(crate) async fn stream(
    caller: ApiCaller,
    State(state): State<ApiState>,
    Query(params): Query<StreamParams>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    caller.require(Scope::EventsRead)?;
    let filter = Filter::read(params)?;
    let resume = match headers.get("last-event-id") {
        None => None,
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                ApiError::BadRequest("Last-Event-ID: not an id this stream sent".into())
            })?;
            match text.trim() {
                "" => None,
                text => Some(
                    text.parse::<Cursor>()
                        .map_err(|err| ApiError::BadValue(err.into()))?,
                ),
            }
        }
    };
    let feed = state.events.clone();
    let closing = feed.closing();
    if *closing.borrow() {
        return Err(ApiError::Unavailable("the server is stopping".into()));
    }
    let slot = feed.open_stream(&caller.caller.name).ok_or_else(|| {
        ApiError::TooManyStreams(format!(
            "this key holds {MAX_STREAMS_PER_KEY} event streams already; close one first"
        ))
    })?;
    let live = feed.subscribe();
    let caught_up = match resume {
        Some(from) => feed.catch_up(from).await?,
        None => Vec::new(),
    };
    let (sender, receiver) = mpsc::channel(64);
    tokio::spawn(pump(slot, filter, caught_up, live, closing, sender));
    let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver
            .recv()
            .await
            .map(|event| (Ok::<_, Infallible>(event), receiver))
    });
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(HEARTBEAT).text("heartbeat"))
        .into_response();
    // Proxies that buffer answers (nginx) pass this one on at once.
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Send the stream its items until the client goes, the server stops or
/// the stream falls too far behind (then it ends: the client resumes
/// from its last id).
async fn pump(
    slot: StreamSlot,
    filter: Filter,
    caught_up: Vec<Item>,
    mut live: broadcast::Receiver<Arc<Item>>,
    mut closing: watch::Receiver<bool>,
    sender: mpsc::Sender<Event>,
) {
    let _slot = slot;
    // A first line at once: the client knows the stream is open.
    if sender
        .send(Event::default().comment("linktrack events"))
        .await
        .is_err()
    {
        return;
    }
    let sent: HashSet<Source> = caught_up.iter().map(|item| item.source).collect();
    for item in &caught_up {
        if filter.wants(item) && sender.send(event(item)).await.is_err() {
            return;
        }
    }
    drop(caught_up);
    loop {
        let item = tokio::select! {
            received = live.recv() => match received {
                Ok(item) => item,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::info!(missed, "event stream fell behind; ended, to resume from its last id");
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = closing.wait_for(|closing| *closing) => return,
            () = sender.closed() => return,
        };
        if sent.contains(&item.source) || !filter.wants(&item) {
            continue;
        }
        if sender.send(event(&item)).await.is_err() {
            return;
        }
    }
}

fn event(item: &Item) -> Event {
    Event::default()
        .id(item.cursor.to_string())
        .data(&item.data)
}
