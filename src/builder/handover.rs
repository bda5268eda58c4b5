//! Handing one mailing's letters to its sending pool over SMTP, each
//! outcome recorded (`delivery::ledger`) so a re-run delivers nothing twice;
//! the MTAs a mailing goes to, and the task that hands over each stored
//! batch in turn (one lane's worker is in `handover_lanes.rs`).

use super::compose::Letter;
use super::error::BuildError;
use super::handover_lanes::{lane_worker, HandedOver, LaneWork, Queued};
use super::mailing::Mailing;
use super::options::BuildOptions;
use crate::delivery::ledger;
use crate::delivery::log_file::{read_delivery_log, DeliveryLog};
use crate::delivery::smtp::{self, Deliverer, Outcome, SmtpSettings};
use crate::delivery::DeliveryCounters;
use crate::mailing_id::MailingId;
use crate::store::deliveries;
use sqlx::MySqlPool;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::task::JoinSet;

/// What delivery did in one run.
#[derive(Debug, Default)]
pub struct Delivered {
    pub delivered: u64,
    /// Skipped: an earlier run delivered them or had them refused.
    pub skipped: u64,
    /// Refused for good: (line, address, the MTA's reply).
    pub rejected: Vec<(u64, String, String)>,
    /// Sent again because a killed run handed them over without recording
    /// the reply: (letter id, address). They may have arrived twice.
    pub resent: Vec<(u64, String)>,
}

/// Letters are marked `sending` this many rounds of connections ahead.
const MARK_AHEAD: usize = 4;

/// SMTP delivery of one mailing's letters, recorded per letter.
pub struct Delivery {
    pool: MySqlPool,
    /// One per MTA of the mailing's pool; letters are spread over them.
    deliverers: Vec<Deliverer>,
    mailing_id: MailingId,
    sender: lettre::Address,
    connections: usize,
    counters: Arc<DeliveryCounters>,
    /// `--delivery-log`: outcomes recorded here first (see
    /// `delivery::log_file`); without it each is committed before the
    /// lane's next letter.
    delivery_log: Option<Arc<DeliveryLog>>,
}

impl Delivery {
    /// One deliverer per MTA in `targets`. The envelope sender is
    /// `return_path`, or the mailing's From address. With `delivery_log`,
    /// outcomes are recorded in that file first; call
    /// [`Delivery::recover_delivery_log`] before the first batch.
    pub fn new(
        pool: MySqlPool,
        targets: Vec<SmtpSettings>,
        mailing: &Mailing,
        return_path: Option<&str>,
        delivery_log: Option<&Path>,
    ) -> Result<Delivery, BuildError> {
        let sender = match return_path {
            Some(address) => address
                .parse::<lettre::Address>()
                .map_err(|_| smtp::SmtpError::Sender(address.to_owned()))?,
            None => mailing
                .from
                .parse::<lettre::message::Mailbox>()
                .map(|mailbox| mailbox.email)
                .map_err(|_| smtp::SmtpError::Sender(mailing.from.clone()))?,
        };
        let delivery_log = delivery_log
            .map(DeliveryLog::open)
            .transpose()?
            .map(Arc::new);
        let connections = targets.iter().map(|t| t.connections.max(1) as usize).sum();
        let counters = Arc::new(DeliveryCounters::default());
        let deliverers = targets
            .into_iter()
            .map(|target| Deliverer::new(target, Arc::clone(&counters)))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Delivery {
            pool,
            deliverers,
            mailing_id: mailing.mailing_id.clone(),
            sender,
            connections,
            counters,
            delivery_log,
        })
    }

    /// Commit to `deliveries` the marks and outcomes a killed run left in
    /// the delivery log (a line there may not have reached the database),
    /// then empty it; returns how many lines there were. Applying one twice
    /// changes nothing.
    pub async fn recover_delivery_log(&self) -> Result<usize, BuildError> {
        let Some(log) = &self.delivery_log else {
            return Ok(0);
        };
        let lines = read_delivery_log(log.path())?;
        if lines.is_empty() {
            return Ok(0);
        }
        deliveries::apply_logged(
            &self.pool,
            lines.iter().map(|l| {
                (
                    l.mailing_id.as_str(),
                    l.letter_id,
                    l.status,
                    l.reply.as_str(),
                )
            }),
        )
        .await?;
        log.clear()?;
        tracing::info!(
            lines = lines.len(),
            log = %log.path().display(),
            "recorded what an interrupted run left in its delivery log"
        );
        Ok(lines.len())
    }

    /// This run's counts so far, shared with whoever draws progress.
    pub fn counters(&self) -> Arc<DeliveryCounters> {
        Arc::clone(&self.counters)
    }

    /// The run delivered every batch, each flushed to `deliveries`: the
    /// delivery log holds nothing needed and goes.
    pub fn remove_delivery_log(&self) -> Result<(), BuildError> {
        if let Some(log) = &self.delivery_log {
            log.remove()?;
        }
        Ok(())
    }

    /// Deliver the letters of one batch that no earlier run settled, up to
    /// `connections` at a time, recording each outcome as it comes. A letter
    /// that keeps failing temporarily stops the job (after the ones in
    /// flight finish); everything undelivered stays for a re-run.
    pub async fn deliver_batch(
        &self,
        letters: &[Letter],
        delivered: &mut Delivered,
    ) -> Result<(), BuildError> {
        let to_send = self.unsettled(letters, delivered).await?;
        let handed_over = self.hand_over_all(&to_send).await?;
        self.count_outcomes(handed_over, delivered).await
    }

    /// The letters no earlier run settled; the settled ones are counted as
    /// skipped, and those a killed run left in doubt are named as resent.
    async fn unsettled<'a>(
        &self,
        letters: &'a [Letter],
        delivered: &mut Delivered,
    ) -> Result<Vec<&'a Letter>, BuildError> {
        let ids: Vec<u64> = letters.iter().map(|l| l.letter_id).collect();
        let recorded = deliveries::recorded_among(&self.pool, &self.mailing_id, &ids).await?;
        let settled = recorded.settled;
        delivered.skipped += settled.len() as u64;
        for letter in letters
            .iter()
            .filter(|l| recorded.in_doubt.contains(&l.letter_id))
        {
            tracing::warn!(
                letter_id = letter.letter_id,
                email = %letter.email,
                "sending again a letter a killed run handed over without recording the reply; \
                 it may arrive twice (same Message-ID)"
            );
            delivered
                .resent
                .push((letter.letter_id, letter.email.to_string()));
        }
        Ok(letters
            .iter()
            .filter(|l| !settled.contains(&l.letter_id))
            .collect())
    }

    /// Hand `to_send` over: one worker per lane of each MTA, each letter
    /// queued for its MTA once it is marked `sending` (a wave of letters
    /// per statement, ahead of the lanes). Stops queueing once a letter
    /// keeps failing; returns every letter's result.
    async fn hand_over_all(&self, to_send: &[&Letter]) -> Result<Vec<HandedOver>, BuildError> {
        let ledger = ledger::Ledger::start(
            self.pool.clone(),
            self.mailing_id.to_string(),
            self.delivery_log.clone(),
        );
        let (results, mut answered) = tokio::sync::mpsc::unbounded_channel();
        let stop = Arc::new(AtomicBool::new(false));
        let mut queues = Vec::with_capacity(self.deliverers.len());
        let mut workers = JoinSet::new();
        for deliverer in &self.deliverers {
            let (queue, taken) = async_channel::bounded(deliverer.connections() * 2);
            let work = LaneWork {
                queue: taken,
                ledger: ledger.clone(),
                sender: self.sender.clone(),
                results: results.clone(),
                stop: Arc::clone(&stop),
            };
            for _ in 0..deliverer.connections() {
                workers.spawn(lane_worker(deliverer.lane(), work.clone()));
            }
            queues.push(queue);
        }
        drop(results);
        let wave_size = (self.connections * MARK_AHEAD).max(1);
        let mut queued = 0;
        for wave in to_send.chunks(wave_size) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            ledger
                .sending(wave.iter().map(|l| l.letter_id).collect())
                .await?;
            for letter in wave {
                // Spread over the pool's MTAs by letter id (stable across runs).
                let mta = (letter.letter_id % queues.len().max(1) as u64) as usize;
                let Some(queue) = queues.get(mta) else {
                    return Err(BuildError::Internal("a delivery without an MTA".into()));
                };
                let letter = Queued {
                    letter_id: letter.letter_id,
                    line: letter.line,
                    email: letter.email.clone(),
                    message: letter.message.clone(),
                    sender: own_sender(letter)?,
                };
                // Closed only if every lane of the MTA has ended, which
                // they do only once the queues close.
                if queue.send(letter).await.is_err() {
                    break;
                }
            }
            queued += wave.len();
        }
        drop(queues);
        // Marked but never queued (the lanes stopped): not handed over.
        for letter in to_send.iter().skip(queued) {
            ledger.forget(letter.letter_id).await?;
        }
        while let Some(joined) = workers.join_next().await {
            // A lane that panicked (a bug) ends without its letter's
            // outcome; the other lanes carry on with the queue.
            if let Err(ended) = joined {
                tracing::error!(
                    error = &ended as &dyn std::error::Error,
                    "a delivery lane ended without finishing"
                );
            }
        }
        // Every outcome of the batch in `deliveries` before it is counted.
        ledger.flush().await?;
        let mut handed_over = Vec::with_capacity(to_send.len());
        while let Some(result) = answered.recv().await {
            handed_over.push(result);
        }
        Ok(handed_over)
    }

    /// Count each outcome; the first temporary failure is the batch's
    /// error, once every letter in flight has finished. A letter no lane
    /// tried loses its `sending` mark.
    async fn count_outcomes(
        &self,
        handed_over: Vec<HandedOver>,
        delivered: &mut Delivered,
    ) -> Result<(), BuildError> {
        let mut failure = None;
        let mut not_attempted = Vec::new();
        for HandedOver {
            letter_id,
            line,
            email,
            outcome,
            host,
        } in handed_over
        {
            match outcome? {
                None => not_attempted.push(letter_id),
                Some(Outcome::Delivered(_)) => {
                    metrics::counter!("linktrack_smtp_delivered_total").increment(1);
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    delivered.delivered += 1;
                }
                Some(Outcome::Rejected(reply)) => {
                    metrics::counter!("linktrack_smtp_rejected_total").increment(1);
                    self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    delivered.rejected.push((line, email.into_string(), reply));
                }
                Some(Outcome::Failed(reply)) => {
                    failure.get_or_insert(BuildError::Delivery {
                        host,
                        letter_id,
                        email: email.into_string(),
                        reply,
                    });
                }
            }
        }
        if !not_attempted.is_empty() {
            let ledger =
                ledger::Ledger::start(self.pool.clone(), self.mailing_id.to_string(), None);
            for letter_id in not_attempted {
                ledger.forget(letter_id).await?;
            }
        }
        match failure {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

/// A letter's own envelope sender (`--bounce-domain`), as an address.
fn own_sender(letter: &Letter) -> Result<Option<lettre::Address>, BuildError> {
    letter
        .envelope_from
        .as_deref()
        .map(|address| {
            address
                .parse::<lettre::Address>()
                .map_err(|source| BuildError::BounceAddress {
                    address: address.to_owned(),
                    source,
                })
        })
        .transpose()
}

/// The mailing's SMTP delivery, when its pool names MTAs (else letters
/// are only written out).
pub(super) fn open_delivery(
    pool: &MySqlPool,
    options: &BuildOptions,
    mailing: &Mailing,
) -> Result<Option<Delivery>, BuildError> {
    match delivery_targets(options, &mailing.pool)? {
        targets if targets.is_empty() => Ok(None),
        targets => Ok(Some(Delivery::new(
            pool.clone(),
            targets,
            mailing,
            options.return_path.as_deref(),
            options.delivery_log.as_deref(),
        )?)),
    }
}

/// The MTAs of this mailing: the pools file's entry for its pool, or the
/// one `--smtp` URL; none without either. Checked before any letter.
fn delivery_targets(
    options: &BuildOptions,
    pool: &str,
) -> Result<Vec<crate::delivery::smtp::SmtpSettings>, BuildError> {
    use crate::delivery::{pools, smtp::SmtpSettings};
    match (&options.pools, &options.smtp) {
        (Some(file), template) => {
            let route = pools::route(file, pool)?;
            let (retries, backoff, messages_per_connection) = template
                .as_ref()
                .map_or((5, std::time::Duration::from_secs(1), None), |t| {
                    (t.retries, t.backoff, t.messages_per_connection)
                });
            Ok(route
                .urls
                .into_iter()
                .map(|url| SmtpSettings {
                    url,
                    connections: route.connections,
                    messages_per_connection: route
                        .messages_per_connection
                        .or(messages_per_connection),
                    retries,
                    backoff,
                })
                .collect())
        }
        (None, Some(settings)) => Ok(vec![settings.clone()]),
        (None, None) => Ok(Vec::new()),
    }
}

/// The delivery task: delivers each stored batch's letters in turn.
pub(super) fn spawn_delivery(
    delivery: Delivery,
) -> (
    tokio::sync::mpsc::Sender<Vec<Letter>>,
    tokio::task::JoinHandle<Result<Delivered, BuildError>>,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Vec<Letter>>(1);
    let handle = tokio::spawn(async move {
        let mut delivered = Delivered::default();
        delivery.recover_delivery_log().await?;
        while let Some(letters) = receiver.recv().await {
            delivery.deliver_batch(&letters, &mut delivered).await?;
        }
        delivery.remove_delivery_log()?;
        Ok(delivered)
    });
    (sender, handle)
}
