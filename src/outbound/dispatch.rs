//! The sender of one endpoint: claim due outbox rows, send them, settle.
//!
//! # Order
//! A claimed round is split into lanes by letter id (one lane per allowed
//! concurrent request); a lane sends its rows one after another, in the
//! order they were queued, so one letter's events arrive in order. When an
//! attempt fails, the rest of its lane is put back unsent, due at the same
//! time as the failed row, so they are retried behind it, still in order.
//! Not ordered: events of different letters, and a letter's new event that
//! arrives while an older one waits for its retry (it is not held back).

use super::amqp::AmqpSink;
use super::webhook::{Outcome, WebhookSink};
use super::{Endpoint, Outbound, Target};
use crate::server::workers::Stopping;
use crate::store::outbox::{self, Claimed};
use crate::store::StoreError;
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Rows claimed per lane and round: a round's lease covers this many
/// timeouts in a row.
const ROWS_PER_LANE: usize = 4;
/// Log a permanent refusal at most this often per endpoint (each is counted).
const PERMANENT_LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the backlog gauges are refreshed.
const METRICS_EVERY: Duration = Duration::from_secs(1);

/// Where a sender's rows go.
#[derive(Debug, Clone)]
enum Sink {
    Webhook(WebhookSink),
    Amqp(Arc<AmqpSink>),
    /// Not connectable (a client that could not be built): every attempt fails.
    Broken(String),
}

impl Sink {
    async fn send(&self, row: &Claimed) -> Outcome {
        match self {
            Sink::Webhook(sink) => sink.send(&hex::encode(&row.event_id), &row.payload).await,
            Sink::Amqp(sink) => {
                let id = hex::encode(&row.event_id);
                sink.send(&row.event_type, &id, &row.payload).await
            }
            Sink::Broken(why) => Outcome::Retry(why.clone()),
        }
    }
}

/// One endpoint's sender.
pub struct Sender {
    pool: MySqlPool,
    endpoint: Endpoint,
    outbound: Outbound,
    sink: Sink,
    last_permanent_log: Arc<Mutex<Option<Instant>>>,
}

impl Sender {
    pub fn new(pool: MySqlPool, endpoint: Endpoint, outbound: Outbound) -> Sender {
        let sink = match &endpoint.target {
            Target::Webhook { url, secret } => match WebhookSink::new(
                url.clone(),
                secret.clone(),
                endpoint.timeout,
                endpoint.concurrency,
            ) {
                Ok(sink) => Sink::Webhook(sink),
                Err(err) => Sink::Broken(format!("HTTP client: {err}")),
            },
            Target::Amqp { url, exchange } => Sink::Amqp(Arc::new(AmqpSink::new(
                url.clone(),
                exchange.clone(),
                endpoint.timeout,
            ))),
        };
        Sender {
            pool,
            endpoint,
            outbound,
            sink,
            last_permanent_log: Arc::new(Mutex::new(None)),
        }
    }

    /// Send until asked to stop; a round in flight is finished first (its
    /// rows are leased, so even an abort loses nothing).
    pub async fn run(self, mut stopping: Stopping) {
        let name = self.endpoint.name.clone();
        tracing::info!(endpoint = %name, "outbound sender started");
        let mut metrics_due = Instant::now();
        while !stopping.is_requested() {
            // Registered before the round, so an enqueue during it is not missed.
            let woken = self.outbound.wake.notified();
            let busy = match self.round().await {
                Ok(sent) => sent > 0,
                Err(err) => {
                    tracing::warn!(endpoint = %name, %err, "outbound round failed; will retry");
                    false
                }
            };
            if Instant::now() >= metrics_due {
                self.refresh_metrics().await;
                metrics_due = Instant::now() + METRICS_EVERY;
            }
            if !busy {
                tokio::select! {
                    () = woken => {}
                    () = tokio::time::sleep(self.outbound.policy.poll.min(METRICS_EVERY)) => {}
                    () = stopping.requested() => {}
                }
            }
        }
        self.refresh_metrics().await;
        tracing::debug!(endpoint = %name, "outbound sender stopped");
    }

    /// Claim, send and settle one round; returns how many rows it claimed.
    async fn round(&self) -> Result<usize, StoreError> {
        let lanes = self.endpoint.concurrency;
        let lease = self.endpoint.timeout * ROWS_PER_LANE as u32 + Duration::from_secs(5);
        let claimed = outbox::claim(
            &self.pool,
            &self.endpoint.name,
            u32::try_from(lanes * ROWS_PER_LANE).unwrap_or(u32::MAX),
            lease,
        )
        .await?;
        let count = claimed.len();
        let mut by_lane: BTreeMap<u64, Vec<Claimed>> = BTreeMap::new();
        for row in claimed {
            let key = row.letter_id.unwrap_or(row.id) % lanes as u64;
            by_lane.entry(key).or_default().push(row);
        }
        let mut tasks = JoinSet::new();
        for rows in by_lane.into_values() {
            let lane = Lane {
                pool: self.pool.clone(),
                name: self.endpoint.name.clone(),
                sink: self.sink.clone(),
                policy: self.outbound.policy,
                last_permanent_log: self.last_permanent_log.clone(),
            };
            tasks.spawn(async move { lane.send_in_order(rows).await });
        }
        let mut first_error = None;
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(err)) => first_error = first_error.or(Some(err)),
                Err(err) => tracing::error!(%err, "outbound lane failed"),
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(count),
        }
    }

    /// Queue depth, lag (age of the oldest undelivered event) and dead letters.
    async fn refresh_metrics(&self) {
        let name = self.endpoint.name.clone();
        match outbox::backlog_of(&self.pool, &name).await {
            Ok(backlog) => {
                let lag = backlog.oldest.map_or(0.0, |oldest| {
                    (chrono::Utc::now().naive_utc() - oldest)
                        .num_milliseconds()
                        .max(0) as f64
                        / 1000.0
                });
                metrics::gauge!("linktrack_outbound_queued", "endpoint" => name.clone())
                    .set(backlog.queued as f64);
                metrics::gauge!("linktrack_outbound_lag_seconds", "endpoint" => name.clone())
                    .set(lag);
                metrics::gauge!("linktrack_outbound_dead_letters", "endpoint" => name)
                    .set(backlog.dead as f64);
            }
            Err(err) => tracing::debug!(endpoint = %name, %err, "outbound backlog not read"),
        }
    }
}

/// One lane of a round: its rows, sent one after another.
struct Lane {
    pool: MySqlPool,
    name: String,
    sink: Sink,
    policy: super::RetryPolicy,
    last_permanent_log: Arc<Mutex<Option<Instant>>>,
}

impl Lane {
    async fn send_in_order(self, rows: Vec<Claimed>) -> Result<(), StoreError> {
        let mut delivered = Vec::with_capacity(rows.len());
        let mut rows = rows.into_iter();
        // After a failed attempt: how long the rest of the lane waits.
        let mut held_back = None;
        for row in rows.by_ref() {
            match self.sink.send(&row).await {
                Outcome::Delivered => {
                    self.count("delivered");
                    delivered.push(row.id);
                }
                Outcome::Permanent(why) => {
                    self.count("dead");
                    self.log_permanent(&row, &why);
                    outbox::give_up(&self.pool, row.id, &why).await?;
                }
                Outcome::Retry(why) => {
                    held_back = Some(self.failed(&row, &why).await?);
                    break;
                }
            }
        }
        outbox::delivered(&self.pool, &delivered).await?;
        // The rest goes back unsent, due just after the failed row (so it is
        // retried behind it, in order), its attempts not counted.
        if let Some(delay) = held_back {
            for row in rows {
                outbox::retry_later(
                    &self.pool,
                    row.id,
                    delay,
                    false,
                    "held behind a failed event",
                )
                .await?;
            }
        }
        Ok(())
    }

    /// A failed attempt: retry later with backoff (returns the delay), or
    /// give up once the event is too old (returns no delay).
    async fn failed(&self, row: &Claimed, why: &str) -> Result<Duration, StoreError> {
        let attempts = row.attempts + 1;
        let age = Duration::from_millis(u64::try_from(row.age_ms).unwrap_or(0));
        if age >= self.policy.give_up_after {
            self.count("dead");
            tracing::warn!(
                endpoint = %self.name,
                event_id = %hex::encode(&row.event_id),
                error = why,
                attempts,
                "giving up on an event: moved to the dead letters"
            );
            let reason = format!("gave up after {attempts} attempts: {why}");
            outbox::give_up(&self.pool, row.id, &reason).await?;
            return Ok(Duration::ZERO);
        }
        self.count("retry");
        let delay = self.policy.delay(attempts);
        tracing::debug!(endpoint = %self.name, error = why, ?delay, "delivery failed; will retry");
        outbox::retry_later(&self.pool, row.id, delay, true, why).await?;
        Ok(delay)
    }

    fn count(&self, outcome: &'static str) {
        metrics::counter!("linktrack_outbound_deliveries_total", "endpoint" => self.name.clone(), "outcome" => outcome).increment(1);
    }

    /// Once a minute per endpoint at most: a receiver refusing everything
    /// must not flood the log (every refusal is counted).
    fn log_permanent(&self, row: &Claimed, why: &str) {
        let Ok(mut last) = self.last_permanent_log.lock() else {
            return;
        };
        if last.is_some_and(|at| at.elapsed() < PERMANENT_LOG_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            endpoint = %self.name,
            event_id = %hex::encode(&row.event_id),
            error = why,
            "the receiver refused an event for good: moved to the dead letters \
             (further refusals are counted in linktrack_outbound_deliveries_total, \
             logged at most once a minute)"
        );
    }
}
