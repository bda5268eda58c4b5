//! One lane of the hand-over: a worker per connection to an MTA that takes
//! the next queued letter, hands it over and records the outcome before it
//! takes another.

use crate::address::Email;
use crate::delivery::ledger;
use crate::delivery::smtp::{Envelope, Lane, Outcome};
use crate::store::deliveries::DeliveryStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// One letter waiting for a lane.
pub(super) struct Queued {
    pub(super) letter_id: u64,
    pub(super) line: u64,
    pub(super) email: Email,
    pub(super) message: String,
    /// The letter's own envelope sender (its VERP address), else the
    /// mailing's.
    pub(super) sender: Option<lettre::Address>,
}

impl Queued {
    fn envelope<'a>(&'a self, sender: &'a lettre::Address) -> Envelope<'a> {
        Envelope {
            from: self.sender.as_ref().unwrap_or(sender),
            to: self.email.as_str(),
            message: self.message.as_bytes(),
        }
    }
}

/// What a lane worker needs besides its lane.
#[derive(Clone)]
pub(super) struct LaneWork {
    pub(super) queue: async_channel::Receiver<Queued>,
    pub(super) ledger: ledger::Ledger,
    pub(super) sender: lettre::Address,
    pub(super) results: tokio::sync::mpsc::UnboundedSender<HandedOver>,
    /// Set by the first letter that keeps failing: every lane stops taking
    /// letters.
    pub(super) stop: Arc<AtomicBool>,
}

/// One lane's worker: take a letter from its MTA's queue, hand it over and
/// record the outcome right after the reply, before the lane hands over
/// the next letter: a kill can leave at most one handed-over letter per
/// lane unrecorded. Recorded is a line in the delivery log when there is
/// one (the database write follows), else a commit, which the ledger
/// shares between parallel lanes. The next letter, when already queued, is
/// announced to the lane so its envelope travels with this letter's data. A letter that was
/// not taken is forgotten (nothing to doubt on the next run); so is every
/// letter left queued once the lanes stop.
pub(super) async fn lane_worker(mut lane: Lane, work: LaneWork) {
    let mut next = work.queue.recv().await.ok();
    while let Some(letter) = next.take() {
        if work.stop.load(Ordering::Relaxed) {
            report_not_attempted(&work, letter);
            continue;
        }
        next = work.queue.try_recv().ok();
        let outcome = lane
            .deliver(
                letter.envelope(&work.sender),
                next.as_ref().map(|next| next.envelope(&work.sender)),
            )
            .await;
        let recorded = record(&work.ledger, letter.letter_id, &outcome).await;
        if matches!(outcome, Outcome::Failed(_)) || recorded.is_err() {
            work.stop.store(true, Ordering::Relaxed);
        }
        let _ = work.results.send(HandedOver {
            letter_id: letter.letter_id,
            line: letter.line,
            email: letter.email,
            outcome: recorded.map(|()| Some(outcome)),
            host: lane.host().to_owned(),
        });
        if next.is_none() {
            next = work.queue.recv().await.ok();
        }
    }
}

/// A letter no lane tried: its `sending` mark goes, and its result says so.
fn report_not_attempted(work: &LaneWork, letter: Queued) {
    let _ = work.results.send(HandedOver {
        letter_id: letter.letter_id,
        line: letter.line,
        email: letter.email,
        outcome: Ok(None),
        host: String::new(),
    });
}

/// The ledger's record of one outcome, made before the lane moves on.
async fn record(
    ledger: &ledger::Ledger,
    letter_id: u64,
    outcome: &Outcome,
) -> Result<(), ledger::LedgerError> {
    match outcome {
        Outcome::Delivered(reply) => {
            ledger
                .outcome(letter_id, DeliveryStatus::Delivered, reply)
                .await
        }
        Outcome::Rejected(reply) => {
            ledger
                .outcome(letter_id, DeliveryStatus::Rejected, reply)
                .await
        }
        Outcome::Failed(_) => ledger.forget(letter_id).await,
    }
}

/// One letter's hand-over, as its lane answers it: `Ok(None)`, no lane
/// tried it (the lanes had stopped).
pub(super) struct HandedOver {
    pub(super) letter_id: u64,
    pub(super) line: u64,
    pub(super) email: Email,
    pub(super) outcome: Result<Option<Outcome>, ledger::LedgerError>,
    pub(super) host: String,
}
