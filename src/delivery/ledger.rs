//! The delivery's writes to `deliveries`, coalesced: the marks (`sending`,
//! a wave of letters before they are handed over) and each letter's
//! outcome (after the MTA's reply), each waited for until committed; one
//! task writes whatever was asked meanwhile in one transaction. Each
//! letter's order of events is unchanged (marked before it is handed over,
//! recorded before its connection takes the next letter), so a kill still
//! leaves at most one handed-over letter per connection unrecorded; the
//! database sees a commit per few letters instead of two per message.

use crate::store::deliveries::{self, DeliveryStatus, LedgerWrites};
use crate::store::StoreError;
use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlPool};
use tokio::sync::{mpsc, oneshot};

enum Write {
    Sending(Vec<u64>),
    Outcome(u64, DeliveryStatus, String),
    Forget(u64),
}

struct Request {
    write: Write,
    done: oneshot::Sender<Result<(), String>>,
}

/// Requests waiting at most: one per connection is the usual depth.
const QUEUE: usize = 1024;

/// The writer of one mailing's delivery records; dropped, its task ends.
#[derive(Clone)]
pub(crate) struct Ledger {
    requests: mpsc::Sender<Request>,
}

impl Ledger {
    pub(crate) fn start(pool: MySqlPool, mailing_id: String) -> Ledger {
        let (requests, receiver) = mpsc::channel(QUEUE);
        tokio::spawn(write_loop(pool, mailing_id, receiver));
        Ledger { requests }
    }

    /// Mark letters `sending`; returns once they are committed.
    pub(crate) async fn sending(&self, letter_ids: Vec<u64>) -> Result<(), StoreError> {
        self.ask(Write::Sending(letter_ids)).await
    }

    /// Record the MTA's answer; returns once it is committed.
    pub(crate) async fn outcome(
        &self,
        letter_id: u64,
        status: DeliveryStatus,
        reply: &str,
    ) -> Result<(), StoreError> {
        self.ask(Write::Outcome(letter_id, status, reply.to_owned()))
            .await
    }

    /// Drop the mark of a letter the MTA never took.
    pub(crate) async fn forget(&self, letter_id: u64) -> Result<(), StoreError> {
        self.ask(Write::Forget(letter_id)).await
    }

    async fn ask(&self, write: Write) -> Result<(), StoreError> {
        let (done, answer) = oneshot::channel();
        let stopped = || StoreError::Refused("the delivery ledger stopped".into());
        self.requests
            .send(Request { write, done })
            .await
            .map_err(|_| stopped())?;
        answer
            .await
            .map_err(|_| stopped())?
            .map_err(|e| StoreError::Refused(format!("recording deliveries: {e}")))
    }
}

/// Take one request, then every other one already waiting; write them
/// together; answer each. The writes go over one connection held for the
/// whole run (sqlx pings a connection each time it goes back to the pool:
/// a second round trip per write), replaced when a write fails.
async fn write_loop(pool: MySqlPool, mailing_id: String, mut receiver: mpsc::Receiver<Request>) {
    let mut held: Option<PoolConnection<MySql>> = None;
    while let Some(first) = receiver.recv().await {
        let mut waiting = vec![first];
        while let Ok(more) = receiver.try_recv() {
            waiting.push(more);
        }
        let mut writes = LedgerWrites::default();
        let mut answers = Vec::with_capacity(waiting.len());
        for request in waiting {
            match request.write {
                Write::Sending(ids) => writes.sending.extend(ids),
                Write::Outcome(id, status, reply) => writes.outcomes.push((id, status, reply)),
                Write::Forget(id) => writes.forgotten.push(id),
            }
            answers.push(request.done);
        }
        metrics::histogram!("linktrack_delivery_ledger_writes_per_commit")
            .record(answers.len() as f64);
        let result = write_on_held(&pool, &mut held, &mailing_id, &writes).await;
        for answer in answers {
            // A task that gave up waiting needs no answer.
            let _ = answer.send(result.clone());
        }
    }
}

/// `writes` on the held connection (taken from the pool when there is
/// none); a connection whose write failed is dropped, not kept.
async fn write_on_held(
    pool: &MySqlPool,
    held: &mut Option<PoolConnection<MySql>>,
    mailing_id: &str,
    writes: &LedgerWrites,
) -> Result<(), String> {
    let mut conn = match held.take() {
        Some(conn) => conn,
        None => pool.acquire().await.map_err(|e| e.to_string())?,
    };
    deliveries::write_ledger(&mut conn, mailing_id, writes)
        .await
        .map_err(|e| e.to_string())?;
    *held = Some(conn);
    Ok(())
}
