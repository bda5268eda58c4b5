//! Events out: every recorded event reaches the platform as a signed
//! Standard Webhooks POST ([`webhook`]) and/or an AMQP publish ([`amqp`]),
//! at least once, across crashes.
//!
//! Deliveries come from what is durable, never from memory: the journal
//! replay calls [`enqueue`] in the same pass that inserts a segment's events
//! (before the segment is deleted), which renders each event's payload once
//! and inserts one `outbox` row per endpoint whose filter matches
//! (`store::outbox`, idempotent per endpoint and event). A sender per
//! endpoint (`dispatch`) claims due rows, sends them, and deletes them on
//! acknowledgement, backs off exponentially with jitter on failure, and
//! moves them to `outbox_dead` after the give-up age or a permanent refusal.

pub mod amqp;
mod configured;
pub(crate) mod dispatch;
pub mod endpoints;
mod hold;
pub(crate) mod registry;
mod retry_policy;
mod settings;
pub mod signature;
pub mod webhook;

use crate::event::EventRow;
use crate::journal::Enqueued;
use crate::payload::{self, LinkDetails};
use crate::store::{outbox, StoreError};
pub use configured::Outbound;
pub use endpoints::{Endpoint, EndpointError, Target};
pub use hold::{Hold, DEFAULT_HOLD_GRACE};
pub use retry_policy::RetryPolicy;
pub use settings::OutboundSettings;
use sqlx::MySqlPool;
use std::collections::BTreeMap;

/// The endpoints a bounce or complaint goes to (`bounces ingest`).
impl crate::bounces::EventsOut for Outbound {
    fn endpoints_for(&self, event_type: &str, mailing_id: &str) -> Vec<String> {
        self.endpoints
            .iter()
            .filter(|e| e.wants(event_type, Some(mailing_id)))
            .map(|e| e.name.clone())
            .collect()
    }
}

impl crate::journal::OutboxSink for Outbound {
    fn enqueue<'a>(&'a self, pool: &'a MySqlPool, rows: &'a [EventRow]) -> Enqueued<'a> {
        Box::pin(enqueue(pool, self, rows))
    }
}

/// Queue `rows` (events the replay is storing) for every endpoint whose
/// filter matches. Idempotent: replaying the same rows again queues nothing
/// twice while the first rows wait. Clicks, opens and image loads are
/// queued held when verdicts settle (`outbound.hold`), with their first
/// verdict and `"settled": false`; the rollup's settle pass releases them.
pub async fn enqueue(
    pool: &MySqlPool,
    outbound: &Outbound,
    rows: &[EventRow],
) -> Result<(), StoreError> {
    if outbound.is_empty() {
        return Ok(());
    }
    // An event kept for nobody (its reader withdrew from tracking) is
    // counted, never sent: a message per hit would say when one of the
    // readers who withdrew read the letter.
    let wanted: Vec<(&EventRow, Vec<&Endpoint>)> = rows
        .iter()
        .filter(|row| !row.is_withheld())
        .map(|row| {
            let event_type = payload::event_type(row.kind);
            let endpoints = outbound
                .endpoints
                .iter()
                .filter(|e| e.wants(event_type, row.mailing_id.as_deref()))
                .collect();
            (row, endpoints)
        })
        .filter(|(_, endpoints): &(_, Vec<_>)| !endpoints.is_empty())
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let links = link_details(pool, wanted.iter().map(|(row, _)| *row)).await?;
    let mut queued = Vec::new();
    for (row, endpoints) in wanted {
        let link = row
            .link_id
            .and_then(|id| links.get(&id))
            .cloned()
            .unwrap_or_default();
        let hold = outbound.hold.safety_net(row.kind);
        // Rendered with the first verdict, `"settled": false` (an
        // unsubscribe says true: nothing revises it); a held row is
        // rendered again when its verdict settles.
        let body = payload::render(row, &link, false).map_err(|err| StoreError::Corrupt {
            table: "outbox",
            detail: format!("an event's payload: {err}"),
        })?;
        for endpoint in endpoints {
            queued.push(outbox::NewOutboxRow {
                endpoint: endpoint.name.clone(),
                event_id: row.event_id,
                event_type: payload::event_type(row.kind),
                letter_id: row.letter_id,
                occurred_at: row.occurred_at,
                payload: body.clone(),
                hold,
            });
        }
    }
    outbox::enqueue(pool, &queued).await?;
    outbound.wake.notify_waiters();
    Ok(())
}

/// The link rows' URLs and tags, by link id.
async fn link_details<'a>(
    pool: &MySqlPool,
    rows: impl Iterator<Item = &'a EventRow>,
) -> Result<BTreeMap<u64, LinkDetails>, StoreError> {
    let links = rows.filter_map(|row| row.link_id.map(|id| (id, &row.token[..])));
    Ok(crate::store::links::urls_and_tags(pool, links)
        .await?
        .into_iter()
        .map(|(id, (url, tags))| {
            let url = Some(url);
            (id, LinkDetails { url, tags })
        })
        .collect())
}

/// Start one sender per endpoint on `workers`, at low priority: a sender
/// falls behind under load rather than slow the request path.
pub(crate) fn start_senders(
    pool: &MySqlPool,
    outbound: &Outbound,
    server: String,
    workers: &mut crate::workers::Workers,
) {
    if outbound.is_empty() {
        return;
    }
    let registry = registry::Registry::new(pool.clone(), outbound.clone(), server);
    workers.spawn_low_priority("outbound-registry", move |stopping| registry.run(stopping));
    for endpoint in outbound.endpoints.iter() {
        let sender = dispatch::Sender::new(pool.clone(), endpoint.clone(), outbound.clone());
        workers.spawn_low_priority("outbound", move |stopping| sender.run(stopping));
    }
}

/// The configured endpoints' names, for error messages.
pub fn names(outbound: &Outbound) -> String {
    let names: Vec<&str> = outbound.endpoints.iter().map(|e| e.name.as_str()).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// `webhooks list`: one tab-separated line per endpoint, then one per
/// endpoint that has rows but is no longer configured.
pub fn list_lines(
    outbound: &Outbound,
    backlog: &BTreeMap<String, outbox::Backlog>,
    now: chrono::NaiveDateTime,
) -> Vec<String> {
    let line = |name: &str, target: String, filter: String| {
        let b = backlog.get(name).cloned().unwrap_or_default();
        let lag = b
            .oldest
            .map_or(0, |oldest| (now - oldest).num_seconds().max(0));
        format!(
            "{}\t{}\t{}\t{}\t{lag}\t{}",
            crate::address::csv_safe(name),
            crate::address::csv_safe(&target),
            crate::address::csv_safe(&filter),
            b.queued,
            b.dead
        )
    };
    let mut lines: Vec<String> = outbound
        .endpoints
        .iter()
        .map(|e| line(&e.name, e.target_text(), e.filter_text()))
        .collect();
    for name in backlog.keys() {
        if outbound.endpoint(name).is_none() {
            lines.push(line(name, "(not configured)".into(), "-".into()));
        }
    }
    lines
}

/// Send a `webhook.test` event to `endpoint` now.
pub async fn send_test(endpoint: &Endpoint) -> anyhow::Result<webhook::Outcome> {
    let body = payload::test_body(&endpoint.name);
    let id = format!("test_{}", hex::encode(rand::random::<[u8; 8]>()));
    match &endpoint.target {
        Target::Webhook { url, secret } => {
            let sink = webhook::WebhookSink::new(
                url.clone(),
                secret.clone(),
                endpoint.timeout,
                1,
                endpoint.destinations.clone(),
            )?;
            Ok(sink.send(&id, &body).await)
        }
        Target::Amqp { url, exchange } => {
            let sink = amqp::AmqpSink::new(url.clone(), exchange.clone(), endpoint.timeout);
            Ok(sink.send("webhook.test", &id, &body).await)
        }
    }
}
