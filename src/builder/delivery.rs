//! Handing one mailing's letters to its sending pool over SMTP, each
//! outcome recorded (`delivery::ledger`) so a re-run delivers nothing twice.

use super::compose::Letter;
use super::mailing::Mailing;
use super::BuildError;
use crate::address::Email;
use crate::delivery::ledger;
use crate::delivery::smtp::{self, Deliverer, Outcome, SmtpSettings};
use crate::delivery::DeliveryCounters;
use crate::store::deliveries::{self, DeliveryStatus};
use sqlx::MySqlPool;
use std::sync::atomic::Ordering;
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

/// Hand one letter (already marked `sending`) to the MTA and record the
/// outcome right after the reply, before its connection takes the next
/// letter: a kill can leave at most the messages in flight (one per
/// connection) handed over and unrecorded. The ledger commits the records
/// of parallel letters together. A letter that was not taken is forgotten
/// (nothing to doubt on the next run).
async fn hand_over(
    deliverer: &Deliverer,
    ledger: &ledger::Ledger,
    letter_id: u64,
    sender: &lettre::Address,
    email: &str,
    message: &str,
) -> Result<Outcome, crate::store::StoreError> {
    let outcome = deliverer.deliver(sender, email, message.as_bytes()).await;
    match &outcome {
        Outcome::Delivered(reply) => {
            ledger
                .outcome(letter_id, DeliveryStatus::Delivered, reply)
                .await?
        }
        Outcome::Rejected(reply) => {
            ledger
                .outcome(letter_id, DeliveryStatus::Rejected, reply)
                .await?
        }
        Outcome::Failed(_) => ledger.forget(letter_id).await?,
    }
    Ok(outcome)
}

/// SMTP delivery of one mailing's letters, recorded per letter.
pub struct Delivery {
    pool: MySqlPool,
    /// One per MTA of the mailing's pool; letters are spread over them.
    deliverers: Vec<Deliverer>,
    mailing_id: String,
    sender: lettre::Address,
    connections: usize,
    counters: Arc<DeliveryCounters>,
}

impl Delivery {
    /// One deliverer per MTA in `targets`. The envelope sender is
    /// `return_path`, or the mailing's From address.
    pub fn new(
        pool: MySqlPool,
        targets: Vec<SmtpSettings>,
        mailing: &Mailing,
        return_path: Option<&str>,
    ) -> Result<Delivery, smtp::SmtpError> {
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
        })
    }

    /// This run's counts so far, shared with whoever draws progress.
    pub fn counters(&self) -> Arc<DeliveryCounters> {
        Arc::clone(&self.counters)
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
        let tasks = self.hand_over_all(&to_send).await?;
        self.count_outcomes(tasks, delivered).await
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

    /// Start handing `to_send` over, `connections` at a time, each marked
    /// `sending` a wave ahead; the tasks answer with their outcomes.
    async fn hand_over_all(&self, to_send: &[&Letter]) -> Result<JoinSet<HandedOver>, BuildError> {
        let permits = Arc::new(tokio::sync::Semaphore::new(self.connections));
        let ledger = ledger::Ledger::start(self.pool.clone(), self.mailing_id.clone());
        let mut tasks = JoinSet::new();
        let wave_size = (self.connections * MARK_AHEAD).max(1);
        for (n, letter) in to_send.iter().copied().enumerate() {
            // Marked `sending` a wave ahead, in one statement per wave.
            if n % wave_size == 0 {
                let wave = to_send[n..].iter().take(wave_size);
                ledger.sending(wave.map(|l| l.letter_id).collect()).await?;
            }
            let permit = Arc::clone(&permits)
                .acquire_owned()
                .await
                .map_err(|e| BuildError::Internal(format!("delivery permits: {e}")))?;
            // Spread over the pool's MTAs by letter id (stable across runs).
            let Some(deliverer) = self
                .deliverers
                .get((letter.letter_id % self.deliverers.len().max(1) as u64) as usize)
                .cloned()
            else {
                return Err(BuildError::Internal("a delivery without an MTA".into()));
            };
            let sender = self.sender.clone();
            let ledger = ledger.clone();
            let (letter_id, line, email, message) = (
                letter.letter_id,
                letter.line,
                letter.email.clone(),
                letter.message.clone(),
            );
            tasks.spawn(async move {
                let host = deliverer.host().to_owned();
                let outcome = hand_over(
                    &deliverer,
                    &ledger,
                    letter_id,
                    &sender,
                    email.as_str(),
                    &message,
                )
                .await;
                drop(permit);
                HandedOver {
                    letter_id,
                    line,
                    email,
                    outcome,
                    host,
                }
            });
        }
        Ok(tasks)
    }

    /// Count each outcome as its task ends; the first temporary failure
    /// is the batch's error, once every letter in flight has finished.
    async fn count_outcomes(
        &self,
        mut tasks: JoinSet<HandedOver>,
        delivered: &mut Delivered,
    ) -> Result<(), BuildError> {
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            let HandedOver {
                letter_id,
                line,
                email,
                outcome,
                host,
            } = joined.map_err(|e| BuildError::Internal(format!("delivery task: {e}")))?;
            match outcome? {
                Outcome::Delivered(_) => {
                    metrics::counter!("linktrack_smtp_delivered_total").increment(1);
                    self.counters.delivered.fetch_add(1, Ordering::Relaxed);
                    delivered.delivered += 1;
                }
                Outcome::Rejected(reply) => {
                    metrics::counter!("linktrack_smtp_rejected_total").increment(1);
                    self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                    delivered.rejected.push((line, email.into_string(), reply));
                }
                Outcome::Failed(reply) => {
                    failure.get_or_insert(BuildError::Delivery {
                        host,
                        letter_id,
                        email: email.into_string(),
                        reply,
                    });
                }
            }
        }
        match failure {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

/// One letter's hand-over, as its task answers it.
struct HandedOver {
    letter_id: u64,
    line: u64,
    email: Email,
    outcome: Result<Outcome, crate::store::StoreError>,
    host: String,
}
