//! The sender of one endpoint: claim due outbox rows, send them, settle.
//!
//! # Cost
//! A round is a fixed handful of statements whatever its size: one claim
//! (an `UPDATE … LIMIT` and a `SELECT`), one `DELETE` of everything
//! acknowledged, and one statement per failed request. A sender has a small
//! pool of its own ([`SENDER_CONNECTIONS`]) and runs on the low-priority
//! runtime of the workers (`Workers::spawn_low_priority`): under load it
//! falls behind and catches up afterwards, and never takes a connection or
//! CPU time from the request path.
//!
//! # Order
//! A claimed round is split into lanes by letter id (one lane per allowed
//! concurrent request); a lane sends its requests one after another, in the
//! order the rows were queued, so one letter's events arrive in order. When
//! a request fails, the rest of its lane is put back unsent, due at the same
//! time as the failed rows, so they are retried behind them, still in order.
//! Not ordered: events of different letters, and a letter's new event that
//! arrives while an older one waits for its retry (it is not held back).
//!
//! # Batches
//! With `batch = N > 1` a request carries up to N events of one lane
//! (`"type": "batch"`, `webhook-id` derived from the events' ids). A batch
//! that fails is stored as one (`outbox.batch`: id bits and row count), so
//! every retry carries the same events under the same `webhook-id`.

use super::amqp::AmqpSink;
use super::configured::Outbound;
use super::endpoints::{Endpoint, Target};
use super::retry_policy::RetryPolicy;
use super::webhook::{Outcome, WebhookSink};
use crate::payload;
use crate::store::outbox::{self, Claimed, RetryLater};
use crate::store::StoreError;
use crate::workers::Stopping;
use sqlx::MySqlPool;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinSet;

/// Requests each lane makes per round at most: a round's lease covers this
/// many timeouts in a row.
const REQUESTS_PER_LANE: usize = 8;
/// Rows claimed per round at most.
const MAX_ROWS_PER_ROUND: usize = 2_000;
/// The database connections of one sender: its own, never the server's.
pub(crate) const SENDER_CONNECTIONS: u32 = 2;
/// Log a permanent refusal at most this often per endpoint (each is counted).
const PERMANENT_LOG_EVERY: Duration = Duration::from_secs(60);
/// How often the lag gauge is refreshed (one index dive).
const LAG_EVERY: Duration = Duration::from_secs(1);
/// The queue and dead-letter counts read their whole index range: they are
/// refreshed every second while small, and then once per this many rows
/// counted last time, in seconds (a backlog of 200,000 is counted every 10 s).
const ROWS_COUNTED_PER_SECOND: u64 = 20_000;
/// ... and at least once a minute.
const COUNT_AT_LEAST_EVERY: Duration = Duration::from_secs(60);

/// Where a sender's rows go.
#[derive(Debug, Clone)]
enum Sink {
    Webhook(WebhookSink),
    Amqp(Arc<AmqpSink>),
    /// Not connectable (a client that could not be built): every attempt
    /// fails, and records why.
    Broken(Arc<reqwest::Error>),
}

impl Sink {
    fn of(endpoint: &Endpoint) -> Sink {
        match &endpoint.target {
            Target::Webhook { url, secret } => match WebhookSink::new(
                url.clone(),
                secret.clone(),
                endpoint.timeout,
                endpoint.concurrency,
                endpoint.destinations.clone(),
            ) {
                Ok(sink) => Sink::Webhook(sink),
                Err(err) => Sink::Broken(Arc::new(err)),
            },
            Target::Amqp { url, exchange } => Sink::Amqp(Arc::new(AmqpSink::new(
                url.clone(),
                exchange.clone(),
                endpoint.timeout,
            ))),
        }
    }

    /// Send one request: a single event, or a batch of them.
    async fn send(&self, request: &Request) -> Outcome {
        match (self, request.rows.as_slice()) {
            (Sink::Broken(err), _) => Outcome::Retry(format!(
                "HTTP client: {}",
                crate::error_report::chain(&**err)
            )),
            (Sink::Webhook(sink), [row]) if !request.batched => {
                sink.send(&hex::encode(&row.event_id), &row.payload).await
            }
            (Sink::Webhook(sink), rows) => {
                let newest = rows.iter().map(|r| r.occurred_at).max().unwrap_or_default();
                let body =
                    payload::batch_body(rows.iter().map(|r| r.payload.as_str()), newest.and_utc());
                sink.send(&request.id(), &body).await
            }
            // AMQP endpoints are never batched: one publish per event.
            (Sink::Amqp(sink), rows) => {
                for row in rows {
                    let id = hex::encode(&row.event_id);
                    let outcome = sink.send(&row.event_type, &id, &row.payload).await;
                    if outcome != Outcome::Delivered {
                        return outcome;
                    }
                }
                Outcome::Delivered
            }
        }
    }
}

/// The rows one request carries, in queue order.
#[derive(Debug, Clone, PartialEq)]
struct Request {
    rows: Vec<Claimed>,
    /// Sent as a `"type": "batch"` body (the endpoint batches).
    batched: bool,
}

impl Request {
    /// The `webhook-id` of a batch (derived from its events' ids).
    fn id(&self) -> String {
        payload::batch_id(self.rows.iter().map(|r| r.event_id.as_slice()))
    }

    /// What `outbox.batch` keeps of a failed batch: 48 bits of its id's
    /// digest, then its row count.
    fn stored_key(&self) -> Option<u64> {
        if !self.batched {
            return None;
        }
        let digest = payload::batch_digest(self.rows.iter().map(|r| r.event_id.as_slice()));
        let mut bits = [0u8; 8];
        bits[2..].copy_from_slice(&digest[..6]);
        Some((u64::from_be_bytes(bits) << 16) | (self.rows.len() as u64 & 0xffff))
    }

    fn ids(&self) -> Vec<u64> {
        self.rows.iter().map(|r| r.id).collect()
    }

    /// The oldest row's age (the give-up age of the whole request).
    fn age(&self) -> Duration {
        let ms = self.rows.iter().map(|r| r.age_ms).max().unwrap_or(0);
        Duration::from_millis(u64::try_from(ms).unwrap_or(0))
    }

    fn attempts(&self) -> u32 {
        self.rows.iter().map(|r| r.attempts).max().unwrap_or(0)
    }
}

/// How a claimed round is sent: requests per lane, in order, and the rows
/// to put back first in line (part of a stored batch that the claim's limit
/// cut off).
#[derive(Debug, Default, PartialEq)]
struct Plan {
    lanes: BTreeMap<u64, Vec<Request>>,
    released: Vec<u64>,
}

/// Split `claimed` (in queue order) into lanes by letter and requests of at
/// most `batch` rows. Rows of a stored (failed) batch go together as they
/// were, first in their lane. `cut` says the claim hit its limit: then a
/// stored batch with fewer rows than it had is released, to be claimed
/// whole next round.
fn plan(claimed: Vec<Claimed>, lanes: usize, batch: usize, cut: bool) -> Plan {
    let lanes = lanes.max(1) as u64;
    let lane_of = |row: &Claimed| row.letter_id.unwrap_or(row.id) % lanes;
    let mut stored: BTreeMap<u64, Vec<Claimed>> = BTreeMap::new();
    let mut fresh: BTreeMap<u64, Vec<Claimed>> = BTreeMap::new();
    for row in claimed {
        match row.batch {
            Some(key) if batch > 1 => stored.entry(key).or_default().push(row),
            _ => fresh.entry(lane_of(&row)).or_default().push(row),
        }
    }
    let mut plan = Plan::default();
    for (key, rows) in stored {
        if cut && (rows.len() as u64) < key & 0xffff {
            plan.released.extend(rows.iter().map(|r| r.id));
            continue;
        }
        let lane = lane_of(&rows[0]);
        plan.lanes.entry(lane).or_default().push(Request {
            rows,
            batched: true,
        });
    }
    for (lane, rows) in fresh {
        let requests = plan.lanes.entry(lane).or_default();
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            let chunk: Vec<Claimed> = rows.by_ref().take(batch.max(1)).collect();
            requests.push(Request {
                rows: chunk,
                batched: batch > 1,
            });
        }
    }
    plan
}

/// What a round does to its rows once every lane is done.
#[derive(Debug, Default)]
struct Settlement {
    delivered: Vec<u64>,
    dead: Vec<(Vec<u64>, String)>,
    retry: Vec<(Vec<u64>, RetryLater)>,
}

impl Settlement {
    fn merge(&mut self, other: Settlement) {
        self.delivered.extend(other.delivered);
        self.dead.extend(other.dead);
        self.retry.extend(other.retry);
    }

    /// One DELETE for everything acknowledged; one statement per failed
    /// request.
    async fn store(&self, pool: &MySqlPool) -> Result<(), StoreError> {
        outbox::delivered(pool, &self.delivered).await?;
        for (ids, reason) in &self.dead {
            outbox::give_up(pool, ids, reason).await?;
        }
        for (ids, retry) in &self.retry {
            outbox::retry_later(pool, ids, retry).await?;
        }
        Ok(())
    }
}

/// One endpoint's sender.
pub(crate) struct Sender {
    /// The server's pool: only its connect options are used, for the
    /// sender's own small pool.
    server_pool: MySqlPool,
    endpoint: Endpoint,
    outbound: Outbound,
    last_permanent_log: Arc<Mutex<Option<Instant>>>,
}

/// What a running sender holds (made on the runtime it runs on).
struct Running {
    pool: MySqlPool,
    sink: Sink,
}

impl Sender {
    pub(crate) fn new(server_pool: MySqlPool, endpoint: Endpoint, outbound: Outbound) -> Sender {
        Sender {
            server_pool,
            endpoint,
            outbound,
            last_permanent_log: Arc::new(Mutex::new(None)),
        }
    }

    /// Send until asked to stop; a round in flight is finished first (its
    /// rows are leased, so even an abort loses nothing).
    pub(crate) async fn run(self, mut stopping: Stopping) {
        let name = self.endpoint.name.clone();
        let running = Running {
            pool: crate::store::side_pool(&self.server_pool, SENDER_CONNECTIONS),
            sink: Sink::of(&self.endpoint),
        };
        tracing::info!(endpoint = %name, "outbound sender started");
        let mut gauges = Gauges::new(&name);
        while !stopping.is_requested() {
            // Registered before the round, so an enqueue during it is not missed.
            let woken = self.outbound.wake.notified();
            let busy = match self.round(&running).await {
                Ok(sent) => sent > 0,
                Err(err) => {
                    tracing::warn!(endpoint = %name, %err, "outbound round failed; will retry");
                    false
                }
            };
            gauges.refresh(&running.pool, false).await;
            if !busy {
                tokio::select! {
                    () = woken => {}
                    () = tokio::time::sleep(self.outbound.policy.poll.min(LAG_EVERY)) => {}
                    () = stopping.requested() => {}
                }
            }
        }
        gauges.refresh(&running.pool, true).await;
        running.pool.close().await;
        tracing::debug!(endpoint = %name, "outbound sender stopped");
    }

    /// Claim, send and settle one round; returns how many rows it claimed.
    async fn round(&self, running: &Running) -> Result<usize, StoreError> {
        let lanes = self.endpoint.concurrency.max(1);
        let batch = self.endpoint.batch.max(1);
        let limit = (lanes * REQUESTS_PER_LANE * batch)
            .min(MAX_ROWS_PER_ROUND)
            .max(batch);
        let lease = self.endpoint.timeout * REQUESTS_PER_LANE as u32 + Duration::from_secs(5);
        let claimed = outbox::claim(
            &running.pool,
            &self.endpoint.name,
            u32::try_from(limit).unwrap_or(u32::MAX),
            lease,
        )
        .await?;
        let count = claimed.len();
        // Held rows come due only at their safety net: the rollup never
        // settled them, and they go with their first verdict. (A row whose
        // first attempt a crashed sender left behind is counted again.)
        let unsettled = claimed
            .iter()
            .filter(|row| row.held != 0 && row.attempts == 0)
            .count();
        if unsettled > 0 {
            metrics::counter!("linktrack_outbound_unsettled_total", "endpoint" => self.endpoint.name.clone())
                .increment(unsettled as u64);
            tracing::warn!(
                endpoint = %self.endpoint.name,
                events = unsettled,
                "held events sent unsettled: no rollup settled their verdicts in time"
            );
        }
        let plan = plan(claimed, lanes, batch, count >= limit);
        outbox::release_first(&running.pool, &plan.released).await?;
        let mut tasks = JoinSet::new();
        for requests in plan.lanes.into_values() {
            let lane = Lane {
                name: self.endpoint.name.clone(),
                sink: running.sink.clone(),
                policy: self.outbound.policy,
                last_permanent_log: self.last_permanent_log.clone(),
            };
            tasks.spawn(async move { lane.send_in_order(requests).await });
        }
        let mut settlement = Settlement::default();
        while let Some(done) = tasks.join_next().await {
            match done {
                Ok(lane) => settlement.merge(lane),
                // A lane that panicked: its rows come back when the lease ends.
                Err(err) => tracing::error!(%err, "outbound lane failed"),
            }
        }
        settlement.store(&running.pool).await?;
        Ok(count)
    }
}

/// The backlog gauges of one endpoint: the lag every second (cheap), the
/// counts as often as their size allows (see [`ROWS_COUNTED_PER_SECOND`]).
struct Gauges {
    name: String,
    lag_due: Instant,
    counts_due: Instant,
}

impl Gauges {
    fn new(name: &str) -> Gauges {
        let now = Instant::now();
        Gauges {
            name: name.to_owned(),
            lag_due: now,
            counts_due: now,
        }
    }

    /// Refresh what is due (everything when `all`).
    async fn refresh(&mut self, pool: &MySqlPool, all: bool) {
        let now = Instant::now();
        if all || now >= self.lag_due {
            self.lag_due = now + LAG_EVERY;
            match outbox::oldest_of(pool, &self.name).await {
                Ok(oldest) => {
                    let lag = oldest.map_or(0.0, |oldest| {
                        (chrono::Utc::now().naive_utc() - oldest)
                            .num_milliseconds()
                            .max(0) as f64
                            / 1000.0
                    });
                    metrics::gauge!("linktrack_outbound_lag_seconds", "endpoint" => self.name.clone())
                        .set(lag);
                }
                Err(err) => tracing::debug!(endpoint = %self.name, %err, "outbound lag not read"),
            }
        }
        if all || now >= self.counts_due {
            match outbox::counts_of(pool, &self.name).await {
                Ok((queued, dead)) => {
                    let wait = Duration::from_secs(queued.max(dead) / ROWS_COUNTED_PER_SECOND);
                    self.counts_due = now + wait.clamp(LAG_EVERY, COUNT_AT_LEAST_EVERY);
                    metrics::gauge!("linktrack_outbound_queued", "endpoint" => self.name.clone())
                        .set(queued as f64);
                    metrics::gauge!("linktrack_outbound_dead_letters", "endpoint" => self.name.clone())
                        .set(dead as f64);
                }
                Err(err) => {
                    self.counts_due = now + LAG_EVERY;
                    tracing::debug!(endpoint = %self.name, %err, "outbound backlog not read");
                }
            }
        }
    }
}

/// One lane of a round: its requests, sent one after another.
struct Lane {
    name: String,
    sink: Sink,
    policy: RetryPolicy,
    last_permanent_log: Arc<Mutex<Option<Instant>>>,
}

impl Lane {
    /// Send in order; stop at the first failure and put the rest back
    /// behind it. Touches no database: the round settles.
    async fn send_in_order(self, requests: Vec<Request>) -> Settlement {
        let mut settlement = Settlement::default();
        let mut requests = requests.into_iter();
        // After a failed attempt: how long the rest of the lane waits.
        let mut held_back = None;
        for request in requests.by_ref() {
            match self.sink.send(&request).await {
                Outcome::Delivered => {
                    self.count("delivered", &request);
                    settlement.delivered.extend(request.ids());
                }
                Outcome::Permanent(why) => {
                    self.count("dead", &request);
                    self.log_permanent(&request, &why);
                    settlement.dead.push((request.ids(), why));
                }
                Outcome::Retry(why) => {
                    held_back = Some(self.failed(&request, &why, &mut settlement));
                    break;
                }
            }
        }
        // The rest goes back unsent, due just after the failed rows (so it
        // is retried behind them, in order), its attempts not counted.
        if let Some(delay) = held_back {
            let rest: Vec<u64> = requests.flat_map(|r| r.ids()).collect();
            if !rest.is_empty() {
                let retry = RetryLater {
                    delay,
                    attempted: false,
                    error: "held behind a failed event".into(),
                    batch: None,
                };
                settlement.retry.push((rest, retry));
            }
        }
        settlement
    }

    /// A failed attempt: retry later with backoff (returns the delay), or
    /// give up once the events are too old (returns no delay).
    fn failed(&self, request: &Request, why: &str, settlement: &mut Settlement) -> Duration {
        let attempts = request.attempts() + 1;
        let Ok(delay) = self.policy.backoff().next(attempts, request.age(), true) else {
            self.count("dead", request);
            tracing::warn!(
                endpoint = %self.name,
                event_id = %hex::encode(&request.rows[0].event_id),
                events = request.rows.len(),
                error = why,
                attempts,
                "giving up on an event: moved to the dead letters"
            );
            let reason = format!("gave up after {attempts} attempts: {why}");
            settlement.dead.push((request.ids(), reason));
            return Duration::ZERO;
        };
        self.count("retry", request);
        tracing::debug!(endpoint = %self.name, error = why, ?delay, "delivery failed; will retry");
        let retry = RetryLater {
            delay,
            attempted: true,
            error: why.to_owned(),
            batch: request.stored_key(),
        };
        settlement.retry.push((request.ids(), retry));
        delay
    }

    /// Counted per event (a batch of 100 delivered is 100 deliveries).
    fn count(&self, outcome: &'static str, request: &Request) {
        metrics::counter!("linktrack_outbound_deliveries_total", "endpoint" => self.name.clone(), "outcome" => outcome)
            .increment(request.rows.len() as u64);
    }

    /// Once a minute per endpoint at most: a receiver refusing everything
    /// must not flood the log (every refusal is counted).
    fn log_permanent(&self, request: &Request, why: &str) {
        let Ok(mut last) = self.last_permanent_log.lock() else {
            return;
        };
        if last.is_some_and(|at| at.elapsed() < PERMANENT_LOG_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(
            endpoint = %self.name,
            event_id = %hex::encode(&request.rows[0].event_id),
            events = request.rows.len(),
            error = why,
            "the receiver refused an event for good: moved to the dead letters \
             (further refusals are counted in linktrack_outbound_deliveries_total, \
             logged at most once a minute)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: u64, letter: u64, batch: Option<u64>) -> Claimed {
        Claimed {
            id,
            event_id: id.to_be_bytes().repeat(2),
            event_type: "email.clicked".into(),
            letter_id: Some(letter),
            occurred_at: chrono::NaiveDateTime::default(),
            payload: format!("{{\"n\":{id}}}"),
            attempts: 0,
            age_ms: 0,
            batch,
            held: 0,
        }
    }

    fn ids(plan: &Plan) -> Vec<(u64, Vec<Vec<u64>>)> {
        plan.lanes
            .iter()
            .map(|(lane, requests)| (*lane, requests.iter().map(Request::ids).collect()))
            .collect()
    }

    #[test]
    fn lanes_keep_each_letter_in_order_and_batches_fill_up() {
        let claimed = (1..=7).map(|id| row(id, id % 3, None)).collect();
        let plan = plan(claimed, 2, 2, false);
        // Letters 0 and 2 share lane 0; letter 1 is lane 1.
        assert_eq!(
            ids(&plan),
            [
                (0, vec![vec![2, 3], vec![5, 6]]),
                (1, vec![vec![1, 4], vec![7]])
            ]
        );
        assert!(plan.lanes.values().flatten().all(|r| r.batched));
        let single = super::plan((1..=3).map(|id| row(id, 0, None)).collect(), 4, 1, false);
        assert_eq!(ids(&single), [(0, vec![vec![1], vec![2], vec![3]])]);
        assert!(!single.lanes[&0][0].batched);
    }

    #[test]
    fn a_failed_batch_comes_back_whole_with_its_id_or_is_released() {
        let failed = Request {
            rows: vec![row(1, 0, None), row(2, 1, None), row(3, 0, None)],
            batched: true,
        };
        let key = failed.stored_key().unwrap();
        assert_eq!(key & 0xffff, 3);
        // Retried with a new row claimed beside it: the stored batch is sent
        // as it was (same id), first in its lane; the new row on its own.
        let mut claimed: Vec<Claimed> = [1, 2, 3].map(|id| row(id, 0, Some(key))).into();
        claimed.insert(1, row(9, 0, None));
        let plan = plan(claimed.clone(), 2, 10, false);
        let lane = &plan.lanes[&0];
        assert_eq!(lane[0].ids(), [1, 2, 3]);
        assert_eq!(lane[0].id(), failed.id());
        assert_eq!(lane[1].ids(), [9]);
        // A claim cut by its limit got two of the three rows: released.
        claimed.retain(|r| r.id != 3);
        let cut = super::plan(claimed, 2, 10, true);
        assert_eq!(cut.released, [1, 2]);
        assert_eq!(ids(&cut), [(0, vec![vec![9]])]);
    }
}
