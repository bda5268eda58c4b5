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
pub(crate) mod dispatch;
pub mod endpoints;
pub(crate) mod registry;
pub mod signature;
pub mod webhook;

use crate::event::EventRow;
use crate::events::Enqueued;
use crate::payload::{self, LinkDetails};
use crate::retry::{Backoff, Jitter};
use crate::store::{outbox, StoreError};
pub use endpoints::{Endpoint, EndpointError, Target};
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// When to try again and when to give up (shared by every endpoint).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// The first retry's delay; each further one doubles it, with jitter.
    pub base: Duration,
    /// The longest delay between two attempts.
    pub max: Duration,
    /// An event still undelivered this long after it was queued is given up
    /// (moved to the dead letters).
    pub give_up_after: Duration,
    /// How often an idle sender looks for due rows (it is also woken as soon
    /// as the replay enqueues).
    pub poll: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(5),
            max: Duration::from_secs(3_600),
            give_up_after: Duration::from_secs(3 * 24 * 3_600),
            poll: Duration::from_secs(1),
        }
    }
}

impl RetryPolicy {
    /// The delay before the attempt after `failures` failed ones: base ×
    /// 2^(failures-1), at most `max`, times a jitter in [0.75, 1.25) so
    /// that rows that failed together do not come back together.
    pub fn delay(&self, failures: u32) -> Duration {
        self.backoff().delay(failures.saturating_sub(1))
    }

    /// The schedule of [`RetryPolicy::delay`], with `give_up_after` as its
    /// deadline (counted from when the event was queued): attempts
    /// unlimited, the doubling stopping after 30 steps.
    pub fn backoff(&self) -> Backoff {
        Backoff::exponential(self.base, 2)
            .with_growth_stopping_after(30)
            .with_cap(self.max)
            .with_jitter(Jitter::Spread(0.25))
            .with_deadline(self.give_up_after)
    }
}

/// How long the safety net waits, past the settle time, before a held event
/// goes out unsettled (see [`Hold`]): rollup passes run every few seconds,
/// so two minutes cover a slow or briefly failing one.
pub const DEFAULT_HOLD_GRACE: Duration = Duration::from_secs(120);

/// Clicks, opens and image loads wait for their settled verdict
/// (docs/serve.md, "What is held, and for how long"): they are queued held,
/// and the rollup's settle pass renders them again with the final verdict
/// and releases them. `settle` zero holds nothing: events go at once with
/// their first verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hold {
    /// `--verdict-settle-secs`: how long after it happened a hit's verdict
    /// is final.
    pub settle: Duration,
    /// The safety net: a held event still not released `settle + grace`
    /// after it was queued (no rollup is running, or it is far behind) is
    /// sent anyway, with its first verdict and `"settled": false`.
    pub grace: Duration,
}

impl Default for Hold {
    /// Nothing held.
    fn default() -> Self {
        Hold {
            settle: Duration::ZERO,
            grace: DEFAULT_HOLD_GRACE,
        }
    }
}

impl Hold {
    /// Hold events of `kind` until their verdicts settle, `settle` after
    /// they happened.
    pub fn until_settled(settle: Duration) -> Hold {
        Hold {
            settle,
            ..Hold::default()
        }
    }

    /// When an event of `kind` queued now goes out at the latest (`None`:
    /// at once, not held).
    pub fn safety_net(&self, kind: crate::kind::EventKind) -> Option<Duration> {
        (!self.settle.is_zero() && payload::waits_for_verdict(kind))
            .then(|| self.settle.saturating_add(self.grace))
    }
}

/// Where events go out and how (docs/serve.md, "Events out"), as the
/// command line gives it: the environment variable names in the errors are
/// the settings' names.
#[derive(Debug, Clone)]
pub struct OutboundSettings {
    /// The endpoint named `default`: POST every event here, signed.
    pub webhook_url: Option<String>,
    /// The signing secret of `webhook_url` (`whsec_` + base64).
    pub webhook_secret: Option<String>,
    /// A TOML file of endpoints.
    pub webhooks: Option<std::path::PathBuf>,
    /// The endpoint named `amqp`: publish every event to RabbitMQ.
    pub amqp_url: Option<String>,
    /// The durable topic exchange of `amqp_url`.
    pub amqp_exchange: String,
    pub webhook_timeout_ms: u64,
    /// Deliveries in flight at once per endpoint.
    pub webhook_concurrency: usize,
    /// Events per webhook request (1 to 1000).
    pub webhook_batch: usize,
    pub outbound_retry_base_ms: u64,
    pub outbound_retry_max_secs: u64,
    /// Give up on an event this long after it was queued (dead letters).
    pub outbound_give_up_secs: u64,
    /// The safety net of held events.
    pub outbound_hold_grace_secs: u64,
    /// Private networks webhooks may go to besides public addresses
    /// (`10.0.0.0/8`, `fd00::/8`, one address), as given.
    pub outbound_allow_private: Vec<String>,
}
/// The configured endpoints and the policy, shared by the replay (which
/// enqueues) and the senders. Cheap to clone; empty means off.
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    endpoints: Arc<[Endpoint]>,
    pub policy: RetryPolicy,
    /// Which events wait for their settled verdict, and how long at most.
    pub hold: Hold,
    /// Woken after every enqueue, so idle senders start at once.
    wake: Arc<Notify>,
}

impl Outbound {
    pub fn new(endpoints: Vec<Endpoint>, policy: RetryPolicy) -> Outbound {
        Outbound {
            endpoints: endpoints.into(),
            policy,
            hold: Hold::default(),
            wake: Arc::new(Notify::new()),
        }
    }

    /// The same endpoints, holding clicks and opens as `hold` says.
    pub fn holding(self, hold: Hold) -> Outbound {
        Outbound { hold, ..self }
    }

    /// What wakes idle senders: the rollup worker of the same process
    /// notifies it after a pass that may have released held rows.
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// The endpoints, policy and safety net the settings name, checked (a bad URL,
    /// secret or file entry is an error naming the setting).
    pub fn from_settings(args: &OutboundSettings) -> Result<Outbound, EndpointError> {
        let policy = RetryPolicy {
            base: Duration::from_millis(args.outbound_retry_base_ms.max(1)),
            max: Duration::from_secs(args.outbound_retry_max_secs.max(1)),
            give_up_after: Duration::from_secs(args.outbound_give_up_secs),
            ..RetryPolicy::default()
        };
        // The settle time is the verdicts' setting: `serve` adds it.
        let hold = Hold {
            grace: Duration::from_secs(args.outbound_hold_grace_secs),
            ..Hold::default()
        };
        Ok(Outbound::new(endpoints::from_settings(args)?, policy).holding(hold))
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn is_empty(&self) -> bool {
        self.endpoints.is_empty()
    }

    /// The endpoint named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.endpoints.iter().find(|e| e.name == name)
    }

    /// Resolve every webhook endpoint's host now and refuse one that
    /// leads to an address its policy does not allow (at start and in the
    /// `webhooks` commands; the senders' resolver checks again at each
    /// connection). A name that does not resolve now is left to send time.
    pub async fn check_destinations(&self) -> Result<(), EndpointError> {
        for endpoint in self.endpoints.iter() {
            if let Target::Webhook { url, .. } = &endpoint.target {
                match endpoint.destinations.check_url(url).await {
                    Ok(true) => {}
                    Ok(false) => tracing::warn!(
                        endpoint = %endpoint.name,
                        "the endpoint's host does not resolve now; its addresses are checked at send"
                    ),
                    Err(refused) => {
                        return Err(EndpointError::Destination {
                            endpoint: endpoint.name.clone(),
                            target: endpoint.target_text(),
                            refused,
                        })
                    }
                }
            }
        }
        Ok(())
    }
}

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

impl crate::events::OutboxSink for Outbound {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The delays before `crate::retry`, jitter aside (a draw of 0.5 is
    /// ×1): 5 s doubling to the hour, ×0.75 to ×1.25 around that; dead
    /// letters at three days.
    #[test]
    fn the_retry_policy_keeps_its_old_schedule() {
        let policy = RetryPolicy::default();
        let backoff = policy.backoff();
        let secs: Vec<u64> = (1..=13)
            .map(|failures| backoff.delay_drawn(failures - 1, || 0.5).as_secs())
            .collect();
        assert_eq!(
            secs,
            [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600, 3600]
        );
        assert_eq!(backoff.delay_drawn(0, || 0.0), Duration::from_millis(3_750));
        assert_eq!(backoff.delay_drawn(11, || 0.0), Duration::from_secs(2_700));
        for failures in 1..=40 {
            let delay = policy.delay(failures);
            assert!(delay >= Duration::from_millis(3_750) && delay < Duration::from_secs(4_500));
        }
        let three_days = Duration::from_secs(3 * 24 * 3_600);
        assert!(backoff
            .next(7, three_days - Duration::from_millis(1), true)
            .is_ok());
        assert_eq!(
            backoff.next(7, three_days, true),
            Err(crate::retry::Stop::PastDeadline)
        );
        // The doubling stopped at 2^30, whatever the cap.
        let uncapped = RetryPolicy {
            base: Duration::from_millis(1),
            max: Duration::from_secs(1 << 40),
            ..policy
        };
        let held = uncapped.backoff().delay_drawn(45, || 0.5);
        assert_eq!(held, Duration::from_millis(1 << 30));
    }
}
