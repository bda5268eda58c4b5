//! The spool worker: hands each queued letter to the downstream MTA
//! (`delivery::smtp`, the sessions and retries `build --smtp` uses), or
//! to its pool's MTAs (`--pools`), oldest first, over every connection
//! the MTAs take at once. Delivered: it leaves the spool. Refused for good (5xx):
//! kept in `rejected/` with the reply, logged and counted (a bounce the
//! sending platform learns of from the log; docs/relay.md). Still failing
//! temporarily after the lane's retries: it stays queued and the round
//! is tried again later, the wait doubling up to an hour; a letter queued
//! longer than [`MAX_QUEUE_AGE`] is refused as Postfix does. Each tracked
//! letter's answer is recorded in `deliveries` (and the mailing's
//! delivered count), as `build` records its own, a batch at a time; a
//! database away loses those rows, never a letter.

use super::spool::{Queued, Spool};
use crate::delivery::pools::{self, PoolsError};
use crate::delivery::smtp::{Deliverer, Envelope, Outcome, SmtpError, SmtpSettings};
use crate::delivery::DeliveryCounters;
use crate::retry::{Attempts, Backoff};
use crate::store::deliveries::{self, DeliveryStatus};
use sqlx::MySqlPool;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// Where letters go: `--smtp`'s MTA (pool `None`), or each pool's MTAs.
pub(crate) struct Downstream {
    by_pool: HashMap<Option<String>, Vec<Deliverer>>,
}

/// A downstream the relay cannot use, named.
#[derive(Debug, thiserror::Error)]
pub enum DownstreamError {
    #[error(transparent)]
    Smtp(#[from] SmtpError),
    #[error(transparent)]
    Pools(#[from] PoolsError),
}

impl Downstream {
    /// `smtp` alone, or (with a pools file) every pool of the file, with
    /// `smtp`'s retries, backoff and messages per connection where the
    /// file does not say (as `build --pools`).
    pub(crate) fn open(
        smtp: &SmtpSettings,
        pools_file: Option<&Path>,
    ) -> Result<Downstream, DownstreamError> {
        let counters = Arc::new(DeliveryCounters::default());
        let mut by_pool = HashMap::new();
        let Some(file) = pools_file else {
            by_pool.insert(None, vec![Deliverer::new(smtp.clone(), counters)?]);
            return Ok(Downstream { by_pool });
        };
        for (pool, route) in pools::all(file)? {
            let deliverers = route
                .urls
                .iter()
                .map(|url| {
                    let settings = SmtpSettings {
                        url: url.clone(),
                        connections: route.connections,
                        messages_per_connection: route
                            .messages_per_connection
                            .or(smtp.messages_per_connection),
                        retries: smtp.retries,
                        backoff: smtp.backoff,
                    };
                    Deliverer::new(settings, Arc::clone(&counters))
                })
                .collect::<Result<Vec<_>, _>>()?;
            by_pool.insert(Some(pool), deliverers);
        }
        Ok(Downstream { by_pool })
    }

    /// The pools' names (`None` without a pools file).
    pub(crate) fn pools(&self) -> Option<Vec<String>> {
        let names: Vec<String> = self.by_pool.keys().flatten().cloned().collect();
        (!names.is_empty()).then(|| {
            let mut names = names;
            names.sort();
            names
        })
    }

    /// Each pool's MTAs (pool `None`: `--smtp`'s).
    pub(crate) fn deliverers(&self) -> impl Iterator<Item = (&Option<String>, &[Deliverer])> {
        self.by_pool
            .iter()
            .map(|(pool, deliverers)| (pool, deliverers.as_slice()))
    }

    /// The MTAs' `host:port`s, for the start-up line.
    pub(crate) fn hosts(&self) -> String {
        let mut hosts: Vec<&str> = self.by_pool.values().flatten().map(|d| d.host()).collect();
        hosts.sort_unstable();
        hosts.join(",")
    }
}

/// How long a letter may stay queued before it is given up.
const MAX_QUEUE_AGE: Duration = Duration::from_secs(5 * 24 * 3600);
/// Answers recorded per statement batch.
const ANSWERS_PER_WRITE: usize = 200;

/// The longest wait between rounds of a failing MTA.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// Run until `stop` turns true: a round over the spool whenever `wake`
/// is notified (a message was queued) or the wait after a failure ends.
pub(crate) async fn run(
    pool: MySqlPool,
    spool: Arc<Spool>,
    downstream: Arc<Downstream>,
    wake: Arc<Notify>,
    retry_after: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let schedule = Backoff::exponential(retry_after, 2)
        .with_cap(LONGEST_WAIT)
        .with_attempts(Attempts::Unlimited);
    let mut failures = 0u32;
    loop {
        let wait = match round(&pool, &spool, &downstream).await {
            Round::Done => {
                failures = 0;
                None
            }
            Round::Failing => {
                failures = failures.saturating_add(1);
                Some(
                    schedule
                        .next(failures, Duration::MAX, true)
                        .unwrap_or(LONGEST_WAIT),
                )
            }
        };
        let waited = async {
            match wait {
                Some(wait) => {
                    let _ = tokio::time::timeout(wait, wake.notified()).await;
                }
                None => wake.notified().await,
            }
        };
        tokio::select! {
            _ = waited => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
    }
}

/// How a round over the spool ended.
enum Round {
    /// Everything queued was settled.
    Done,
    /// The MTA kept failing; the rest waits.
    Failing,
}

/// Every queued letter, grouped by pool, each pool's letters shared by
/// its MTAs' lanes (one session each, all at once). A lane whose MTA keeps
/// failing stops; the other lanes go on with the rest.
async fn round(db: &MySqlPool, spool: &Arc<Spool>, downstream: &Downstream) -> Round {
    let listed = {
        let spool = Arc::clone(spool);
        tokio::task::spawn_blocking(move || spool.queued_by_pool()).await
    };
    let by_pool = match listed {
        Ok(Ok(by_pool)) => by_pool,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the relay's spool");
            return Round::Failing;
        }
        Err(e) => {
            tracing::error!(error = %e, "the spool listing panicked");
            return Round::Failing;
        }
    };
    let mut lanes = tokio::task::JoinSet::new();
    let mut failing = false;
    for (pool_name, letters) in by_pool {
        let Some(deliverers) = downstream.by_pool.get(&pool_name) else {
            tracing::error!(
                pool = ?pool_name,
                letters = letters.len(),
                "queued letters of a pool the pools file no longer has; they wait"
            );
            failing = true;
            continue;
        };
        let queue = Arc::new(Mutex::new(VecDeque::from(letters)));
        for deliverer in deliverers {
            for _ in 0..deliverer.connections() {
                let (spool, queue, lane) =
                    (Arc::clone(spool), Arc::clone(&queue), deliverer.lane());
                lanes.spawn(drain(db.clone(), spool, lane, queue));
            }
        }
    }
    while let Some(done) = lanes.join_next().await {
        failing |= !matches!(done, Ok(true));
    }
    if failing {
        Round::Failing
    } else {
        Round::Done
    }
}

/// One lane's share of a pool's letters: the next one until none is left
/// (`true`) or the MTA keeps failing (`false`: the rest waits for others).
async fn drain(
    pool: MySqlPool,
    spool: Arc<Spool>,
    mut lane: crate::delivery::smtp::Lane,
    queue: Arc<Mutex<VecDeque<Queued>>>,
) -> bool {
    let mut answers = Vec::new();
    let going_on = loop {
        let next = queue.lock().ok().and_then(|mut queue| queue.pop_front());
        let Some(letter) = next else {
            break true;
        };
        match forward(&spool, &mut lane, &letter, &mut answers).await {
            Ok(true) => {}
            Ok(false) => break false,
            Err(e) => {
                tracing::error!(error = %e, file = %letter.path.display(), "the relay's spool");
                break false;
            }
        }
        if answers.len() >= ANSWERS_PER_WRITE {
            record(&pool, &mut answers).await;
        }
    };
    record(&pool, &mut answers).await;
    going_on
}

/// Write the answers gathered so far to `deliveries` (the spool worker's,
/// and the hand-over's). The letters are already settled, in the spool or
/// by the MTA: a failure here costs their rows, logged, never a letter
/// sent twice.
pub(super) async fn record(
    pool: &MySqlPool,
    answers: &mut Vec<(String, u64, DeliveryStatus, String)>,
) {
    if answers.is_empty() {
        return;
    }
    if let Err(err) = deliveries::record_answers(pool, answers).await {
        tracing::warn!(%err, letters = answers.len(), "relayed letters' deliveries not recorded");
    }
    answers.clear();
}

/// Forward one letter; `Ok(false)`: a temporary failure, it stays queued.
async fn forward(
    spool: &Spool,
    lane: &mut crate::delivery::smtp::Lane,
    queued: &Queued,
    answers: &mut Vec<(String, u64, DeliveryStatus, String)>,
) -> std::io::Result<bool> {
    let letter = Spool::load(&queued.path)?;
    if queued.in_doubt {
        tracing::warn!(
            to = %letter.to,
            file = %queued.path.display(),
            "sending again a letter a killed relay handed over without recording the reply; \
             it may arrive twice (same Message-ID)"
        );
    }
    let from: lettre::Address = match letter.from.parse() {
        Ok(from) => from,
        Err(e) => {
            let sending = Spool::mark_sending(queued)?;
            spool.rejected(&sending, &format!("envelope sender {:?}: {e}", letter.from))?;
            return Ok(true);
        }
    };
    if too_old(&queued.path) {
        let sending = Spool::mark_sending(queued)?;
        let reply = "given up: still failing temporarily after 5 days in the spool";
        spool.rejected(&sending, reply)?;
        tracing::warn!(to = %letter.to, "{reply}");
        metrics::counter!("linktrack_relay_rejected_total").increment(1);
        return Ok(true);
    }
    let sending = Spool::mark_sending(queued)?;
    let envelope = Envelope {
        from: &from,
        to: &letter.to,
        message: &letter.data,
    };
    match lane.deliver(envelope, None).await {
        Outcome::Delivered(reply) => {
            Spool::delivered(&sending)?;
            if let Some((mailing_id, letter_id)) = letter.letter {
                answers.push((mailing_id, letter_id, DeliveryStatus::Delivered, reply));
            }
            metrics::counter!("linktrack_relay_forwarded_total").increment(1);
            Ok(true)
        }
        Outcome::Rejected(reply) => {
            let kept = spool.rejected(&sending, &reply)?;
            if let Some((mailing_id, letter_id)) = letter.letter.clone() {
                answers.push((
                    mailing_id,
                    letter_id,
                    DeliveryStatus::Rejected,
                    reply.clone(),
                ));
            }
            tracing::warn!(
                to = %letter.to,
                %reply,
                kept = %kept.display(),
                "the MTA refused a relayed letter for good"
            );
            metrics::counter!("linktrack_relay_rejected_total").increment(1);
            Ok(true)
        }
        Outcome::Failed(reply) => {
            Spool::unmark(&sending)?;
            tracing::warn!(to = %letter.to, %reply, host = lane.host(), "the MTA keeps failing; the spool waits");
            Ok(false)
        }
    }
}

fn too_old(path: &std::path::Path) -> bool {
    let age = path
        .parent()
        .and_then(|dir| std::fs::metadata(dir).ok())
        .and_then(|meta| meta.modified().ok())
        .and_then(|at| at.elapsed().ok());
    age.is_some_and(|age| age > MAX_QUEUE_AGE)
}
