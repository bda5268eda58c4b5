//! Handing an accepted message's letters to the MTA while its client
//! waits for the reply to DATA (`--forward now`, the default), as
//! Postfix's before-queue proxy does: a letter the MTA took is durable
//! there, so it needs no spool and no fsync on the relay. A letter it did
//! not take at once (a temporary failure, a refusal, every session busy
//! for a moment) goes to the spool, fsync'd before the client hears 250,
//! and the spool worker goes on with it as with every queued letter.
//!
//! The one difference from spooling first: a relay killed after the MTA
//! took a letter but before its client heard 250 leaves the client to
//! send it again (it never heard 250), so that letter may arrive twice,
//! the duplicate RFC 5321 (6.1) accepts; a spooled letter's window is
//! the same (`.sending`). docs/relay.md "Forwarding".

use super::forward::Downstream;
use super::track::Outgoing;
use crate::delivery::smtp::{Deliverer, Envelope, Outcome};
use crate::store::deliveries::DeliveryStatus;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Semaphore};

/// How long a letter waits for one of its MTA's sessions before it goes
/// to the spool instead.
const WAIT_FOR_A_SESSION: Duration = Duration::from_secs(1);
/// Delivery answers waiting to be recorded; beyond this they are dropped
/// and counted (the letters went; only their rows are lost).
const ANSWERS_WAITING: usize = 20_000;
/// Answers recorded per statement.
const ANSWERS_PER_WRITE: usize = 500;
/// How long the recorder gathers answers before it writes them: letters
/// are answered one at a time, and a commit each (an fsync of the redo
/// log) would queue the sessions' own link-row commits behind it.
const GATHER: Duration = Duration::from_millis(100);

/// One MTA and the sessions it takes at once.
struct Mta {
    deliverer: Deliverer,
    sessions: Arc<Semaphore>,
}

/// The MTAs of each pool, shared by the SMTP sessions.
pub(crate) struct HandOver {
    by_pool: HashMap<Option<String>, Vec<Mta>>,
    turn: AtomicUsize,
    answers: mpsc::Sender<Answer>,
}

type Answer = (String, u64, DeliveryStatus, String);

impl HandOver {
    /// The hand-over to `downstream`'s MTAs (each as many sessions at once
    /// as its `connections`), and the task that records the answers in
    /// `deliveries` a batch at a time (it ends when the hand-over is
    /// dropped).
    pub(crate) fn new(
        downstream: &Downstream,
        db: MySqlPool,
    ) -> (HandOver, tokio::task::JoinHandle<()>) {
        let by_pool = downstream
            .deliverers()
            .map(|(pool, deliverers)| {
                let mtas = deliverers
                    .iter()
                    .map(|deliverer| Mta {
                        deliverer: deliverer.clone(),
                        sessions: Arc::new(Semaphore::new(deliverer.connections())),
                    })
                    .collect();
                (pool.clone(), mtas)
            })
            .collect();
        let (answers, waiting) = mpsc::channel(ANSWERS_WAITING);
        let recorder = tokio::spawn(record_answers(db, waiting));
        let hand_over = HandOver {
            by_pool,
            turn: AtomicUsize::new(0),
            answers,
        };
        (hand_over, recorder)
    }

    /// Hand each letter to its pool's MTA, once; returns the letters it
    /// did not take (for the spool), in order.
    pub(crate) async fn deliver(&self, letters: Vec<Outgoing>) -> Vec<Outgoing> {
        let mut left = Vec::new();
        for letter in letters {
            if !self.deliver_one(&letter).await {
                left.push(letter);
            }
        }
        left
    }

    /// `true`: the MTA took it.
    async fn deliver_one(&self, letter: &Outgoing) -> bool {
        let Some(mtas) = self.by_pool.get(&letter.pool).filter(|m| !m.is_empty()) else {
            return false;
        };
        let Ok(from) = letter.from.parse::<lettre::Address>() else {
            return false; // the spool worker refuses it, naming the address
        };
        let mta = &mtas[self.turn.fetch_add(1, Ordering::Relaxed) % mtas.len()];
        let permit = tokio::time::timeout(
            WAIT_FOR_A_SESSION,
            Arc::clone(&mta.sessions).acquire_owned(),
        )
        .await;
        let Ok(Ok(_permit)) = permit else {
            metrics::counter!("linktrack_relay_handed_to_spool_total", "why" => "busy")
                .increment(1);
            return false;
        };
        let envelope = Envelope {
            from: &from,
            to: &letter.to,
            message: &letter.data,
        };
        let mut lane = mta.deliverer.lane();
        match lane.deliver_once(envelope).await {
            Outcome::Delivered(reply) => {
                metrics::counter!("linktrack_relay_forwarded_total").increment(1);
                if let Some((mailing_id, letter_id)) = letter.letter.clone() {
                    self.answer((mailing_id, letter_id, DeliveryStatus::Delivered, reply));
                }
                true
            }
            // The spool worker tries again and settles it: a refusal is
            // kept in `rejected/` with its reply, as for any queued letter.
            Outcome::Rejected(_) | Outcome::Failed(_) => {
                metrics::counter!("linktrack_relay_handed_to_spool_total", "why" => "not taken")
                    .increment(1);
                false
            }
        }
    }

    fn answer(&self, answer: Answer) {
        if self.answers.try_send(answer).is_err() {
            metrics::counter!("linktrack_relay_deliveries_unrecorded_total").increment(1);
        }
    }
}

/// Record the answers as they come, a batch at a time (those of up to
/// [`GATHER`] after the first, at most [`ANSWERS_PER_WRITE`]); a database
/// away costs the rows (logged), never a letter.
async fn record_answers(db: MySqlPool, mut waiting: mpsc::Receiver<Answer>) {
    let mut batch = Vec::with_capacity(ANSWERS_PER_WRITE);
    while waiting.recv_many(&mut batch, ANSWERS_PER_WRITE).await > 0 {
        let until = tokio::time::Instant::now() + GATHER;
        while batch.len() < ANSWERS_PER_WRITE {
            let room = ANSWERS_PER_WRITE - batch.len();
            match tokio::time::timeout_at(until, waiting.recv_many(&mut batch, room)).await {
                Ok(0) | Err(_) => break, // closed, or the time is up
                Ok(_) => {}
            }
        }
        super::forward::record(&db, &mut batch).await;
    }
}
