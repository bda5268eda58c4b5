//! Shared lookups: link cache misses of concurrent requests go to the
//! database together.
//!
//! One task takes the misses from a channel. While a slot is free (at most
//! `in_flight` statements run at once), it takes whatever has queued up as
//! one batch and runs it on a task of its own; a batch of one is the
//! single-partition point select ([`links::lookup`]), a larger one
//! [`links::lookup_many`] (one prepared `(uuid, inserted) IN ((?, ?), …)`,
//! one partition per day named). At low load every miss is its own batch and waits for
//! nothing; under load, the misses that arrive while every slot is busy
//! share the next statement, so the database sees fewer, larger queries.

use super::error::within;
use super::error::ServerError;
use crate::retry::{Attempts, Backoff};
use crate::store::cluster::Router;
use crate::store::links::{self, StoredLink};
use crate::store::StoreError;
use crate::token::Token;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// What a waiting request is told.
type Answer = Result<Option<Arc<StoredLink>>, Arc<ServerError>>;

struct Waiting {
    token: Token,
    reply: oneshot::Sender<Answer>,
    /// When the request stops waiting: its arrival plus `db_timeout`, so
    /// time spent queued for a slot counts against the same budget (it
    /// used to come on top of the statement's: two timeouts under load
    /// with the database away).
    deadline: Instant,
}

/// Lookup statements at once unless configured (`--lookups-in-flight`):
/// fewer statements in flight spend less database CPU per click at the
/// same req/s (docs/benchmarks.md).
pub(crate) const DEFAULT_IN_FLIGHT: usize = 2;

/// How lookups are shared.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LookupSettings {
    /// Statements running at once; fewer makes larger batches.
    pub in_flight: usize,
    /// Most tokens in one statement.
    pub max_batch: usize,
    /// The longest a statement may take (as [`super::state::ServerSettings::db_timeout`]).
    pub db_timeout: Duration,
}

impl Default for LookupSettings {
    fn default() -> Self {
        LookupSettings {
            in_flight: DEFAULT_IN_FLIGHT,
            max_batch: 256,
            db_timeout: Duration::from_secs(2),
        }
    }
}

/// The handle requests look links up with. Cheap to clone; the task stops
/// when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct LinkLookups {
    tx: mpsc::Sender<Waiting>,
}

impl LinkLookups {
    /// Start the batching task on the current runtime; it reads on the data
    /// nodes through `router` when there is one (a Spider head in the shard
    /// layout), past the head.
    pub(crate) fn start(
        pool: MySqlPool,
        router: Option<Router>,
        settings: LookupSettings,
    ) -> LinkLookups {
        let (tx, rx) = mpsc::channel(settings.max_batch.max(1) * 16);
        tokio::spawn(batch_misses(Lookup { pool, router }, rx, settings));
        LinkLookups { tx }
    }

    /// The link `token` names; `Ok(None)` if it names none. Waits no
    /// longer than `db_timeout` from now in all: queued for a slot and in
    /// the statement together.
    pub(crate) async fn lookup(
        &self,
        token: Token,
        db_timeout: Duration,
    ) -> Result<Option<Arc<StoredLink>>, ServerError> {
        let deadline = Instant::now() + db_timeout;
        let (reply, answer) = oneshot::channel();
        let stopped = || ServerError::Unavailable("link lookups have stopped".to_owned());
        let waited = async {
            self.tx
                .send(Waiting {
                    token,
                    reply,
                    deadline,
                })
                .await
                .map_err(|_| stopped())?;
            answer
                .await
                .map_err(|_| stopped())?
                .map_err(ServerError::from_shared)
        };
        match tokio::time::timeout_at(deadline, waited).await {
            Ok(answer) => answer,
            Err(_) => Err(ServerError::Unavailable(format!(
                "no answer within {db_timeout:?}"
            ))),
        }
    }
}

/// Where a batch is read: the pool, or the data nodes a router names.
#[derive(Clone)]
struct Lookup {
    pool: MySqlPool,
    router: Option<Router>,
}

/// Form batches from what has queued while the slots were busy.
async fn batch_misses(pool: Lookup, mut rx: mpsc::Receiver<Waiting>, settings: LookupSettings) {
    let slots = Arc::new(Semaphore::new(settings.in_flight.max(1)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            break;
        };
        let Some(first) = rx.recv().await else {
            break;
        };
        let mut batch = vec![first];
        while batch.len() < settings.max_batch {
            match rx.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        tokio::spawn(answer_batch(pool.clone(), batch, slot, settings.db_timeout));
    }
}

/// Run one batch's statement and hand every request its link. Requests
/// that stopped waiting are left out; the statement gets until the latest
/// deadline of those left (never more than `db_timeout`): each request
/// stops waiting at its own deadline, so the earliest one must not cut the
/// statement short for the others.
async fn answer_batch(
    lookup: Lookup,
    mut batch: Vec<Waiting>,
    _slot: OwnedSemaphorePermit,
    db_timeout: Duration,
) {
    batch.retain(|waiting| !waiting.reply.is_closed());
    let Some(latest) = batch.iter().map(|w| w.deadline).max() else {
        return;
    };
    let limit = latest
        .saturating_duration_since(Instant::now())
        .min(db_timeout);
    metrics::histogram!("linktrack_link_lookup_batch_size").record(batch.len() as f64);
    metrics::counter!("linktrack_link_lookup_statements_total").increment(1);
    let Lookup { pool, router } = lookup;
    if let Some(router) = router {
        let tokens: Vec<Token> = batch.iter().map(|w| w.token).collect();
        let found = bounded(limit, router.lookup_many(&tokens)).await;
        return answer_all(batch, found);
    }
    if let [only] = batch.as_slice() {
        let token = only.token;
        let found = bounded(
            limit,
            on_a_live_connection(&pool, || links::lookup(&pool, &token)),
        )
        .await
        .map(|link| link.map(Arc::new));
        for waiting in batch {
            let _ = waiting.reply.send(found.clone());
        }
        return;
    }
    let tokens: Vec<Token> = batch.iter().map(|w| w.token).collect();
    let lookup = on_a_live_connection(&pool, || links::lookup_many(&pool, &tokens));
    answer_all(batch, bounded(limit, lookup).await);
}

/// Hand every request of a batch its link (or the batch's error).
fn answer_all(batch: Vec<Waiting>, found: Result<HashMap<Token, StoredLink>, Arc<ServerError>>) {
    match found {
        Ok(found) => {
            let found: HashMap<Token, Arc<StoredLink>> =
                found.into_iter().map(|(t, l)| (t, Arc::new(l))).collect();
            for waiting in batch {
                let _ = waiting.reply.send(Ok(found.get(&waiting.token).cloned()));
            }
        }
        Err(err) => {
            for waiting in batch {
                let _ = waiting.reply.send(Err(err.clone()));
            }
        }
    }
}

/// Run `lookup`, and again while the connection it got turns out dead.
///
/// A pooled connection used within the last second is handed out without a
/// ping (`store::connect`), so after a database restart in a busy second a
/// lookup can meet a dead one. A read can safely run again, and each failed
/// attempt uses up its connection (sqlx closes a connection whose release
/// ping fails), so at most the pool's connections plus one attempts are
/// made; the caller's time limit bounds them all.
async fn on_a_live_connection<T, Lookup, Attempt>(
    pool: &MySqlPool,
    lookup: Lookup,
) -> Result<T, StoreError>
where
    Lookup: Fn() -> Attempt,
    Attempt: std::future::Future<Output = Result<T, StoreError>>,
{
    let on_retry = |err: &StoreError, _, _| {
        metrics::counter!("linktrack_link_lookup_retries_total").increment(1);
        tracing::debug!(%err, "link lookup met a dead connection; trying another");
    };
    live_connection_retries(pool.size())
        .retry(lookup, StoreError::is_broken_connection, on_retry)
        .await
}

/// A pool of `pool_size` connections: at most that many attempts plus
/// one, each at once.
fn live_connection_retries(pool_size: u32) -> Backoff {
    Backoff::constant(Duration::ZERO).with_attempts(Attempts::Limited(pool_size.saturating_add(1)))
}

/// A statement within `limit` (see [`within`]), its error shared by the batch.
async fn bounded<T>(
    limit: Duration,
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, Arc<ServerError>> {
    within(limit, call).await.map_err(Arc::new)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::Stop;

    /// The rule before `crate::retry`: a pool of 4 gave a lookup 5
    /// attempts, the next at once, and only after a broken connection.
    #[test]
    fn lookups_retry_dead_connections_as_before() {
        let retries = live_connection_retries(4);
        for failures in 1..=4 {
            assert_eq!(
                retries.next(failures, Duration::ZERO, true),
                Ok(Duration::ZERO)
            );
        }
        assert_eq!(retries.next(5, Duration::ZERO, true), Err(Stop::Exhausted));
        assert_eq!(
            retries.next(1, Duration::ZERO, false),
            Err(Stop::NotRetryable)
        );
        assert_eq!(
            live_connection_retries(0).next(1, Duration::ZERO, true),
            Err(Stop::Exhausted)
        );
    }
}
