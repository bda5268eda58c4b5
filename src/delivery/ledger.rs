//! The delivery's writes to `deliveries`, coalesced: the marks (`sending`,
//! a wave of letters before they are handed over) and each letter's
//! outcome (after the MTA's reply); one task writes whatever was asked
//! meanwhile in one transaction. Each letter's order of events is
//! unchanged (marked before it is handed over, its outcome recorded before
//! its connection takes the next letter), so a kill still leaves at most
//! one handed-over letter per connection unrecorded.
//!
//! Recorded means committed to `deliveries`, or, with a delivery log
//! ([`super::log_file`]), appended to that local file: the lane then
//! goes on at once and the database write follows in a later group
//! (`Ledger::flush` waits for it). Marks and outcomes go to the
//! database in the order they were asked for, by one task.

use super::log_file::{DeliveryLog, DeliveryLogError, LogLine};
use crate::locks::LockEvenPoisoned;
use crate::store::deliveries::{self, DeliveryStatus, LedgerWrites};
use crate::store::StoreError;
use sqlx::pool::PoolConnection;
use sqlx::{MySql, MySqlPool};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

enum Write {
    Sending(Vec<u64>),
    Outcome(u64, DeliveryStatus, String),
    Forget(u64),
    /// Nothing to write: answered once everything asked before it is.
    Barrier,
}

struct Request {
    write: Write,
    /// `None`: nobody waits (an outcome already in the delivery log).
    done: Option<oneshot::Sender<Result<(), Arc<StoreError>>>>,
}

/// Why a delivery record was not made.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The database write failed; every request of that group (and, for a
    /// write nobody waited for, every later one) gets the same error.
    #[error("recording deliveries")]
    Write(#[source] Arc<StoreError>),
    #[error(transparent)]
    Log(#[from] DeliveryLogError),
    #[error("the delivery ledger stopped")]
    Stopped,
}

/// Requests waiting at most. With a delivery log this bounds the outcomes
/// written to the file but not yet to the database: lanes wait here when
/// the database falls behind.
const QUEUE: usize = 1024;

/// The writer of one mailing's delivery records; dropped, its task ends.
#[derive(Clone)]
pub(crate) struct Ledger {
    requests: mpsc::Sender<Request>,
    mailing_id: String,
    log: Option<Arc<DeliveryLog>>,
    /// The first write that failed with nobody waiting for it: every later
    /// record and [`Ledger::flush`] return it.
    failed: Arc<Mutex<Option<Arc<StoreError>>>>,
}

impl Ledger {
    /// The ledger of `mailing_id`; outcomes go to `log` first when given.
    pub(crate) fn start(
        pool: MySqlPool,
        mailing_id: String,
        log: Option<Arc<DeliveryLog>>,
    ) -> Ledger {
        let (requests, receiver) = mpsc::channel(QUEUE);
        let failed = Arc::new(Mutex::new(None));
        tokio::spawn(write_loop(
            pool,
            mailing_id.clone(),
            receiver,
            Arc::clone(&failed),
        ));
        Ledger {
            requests,
            mailing_id,
            log,
            failed,
        }
    }

    /// Mark letters `sending`; returns once they are committed, or, with a
    /// delivery log, once the marks are in the file.
    pub(crate) async fn sending(&self, letter_ids: Vec<u64>) -> Result<(), LedgerError> {
        let Some(log) = &self.log else {
            return self.ask(Write::Sending(letter_ids)).await;
        };
        let lines: Vec<LogLine> = letter_ids
            .iter()
            .map(|&letter_id| self.line(letter_id, DeliveryStatus::Sending, ""))
            .collect();
        self.logged(log, &lines, Write::Sending(letter_ids)).await
    }

    /// Record the MTA's answer; returns once it is committed, or, with a
    /// delivery log, once it is in the file (the database write follows).
    pub(crate) async fn outcome(
        &self,
        letter_id: u64,
        status: DeliveryStatus,
        reply: &str,
    ) -> Result<(), LedgerError> {
        let write = Write::Outcome(letter_id, status, reply.to_owned());
        let Some(log) = &self.log else {
            return self.ask(write).await;
        };
        let line = self.line(letter_id, status, reply);
        self.logged(log, &[line], write).await
    }

    fn line(&self, letter_id: u64, status: DeliveryStatus, reply: &str) -> LogLine {
        LogLine {
            mailing_id: self.mailing_id.clone(),
            letter_id,
            status,
            reply: reply.to_owned(),
        }
    }

    /// `lines` into the delivery log, then `write` queued for the database
    /// with nobody waiting for it (a failure comes back from a later call).
    async fn logged(
        &self,
        log: &DeliveryLog,
        lines: &[LogLine],
        write: Write,
    ) -> Result<(), LedgerError> {
        self.check_failed()?;
        log.append(lines)?;
        self.requests
            .send(Request { write, done: None })
            .await
            .map_err(|_| LedgerError::Stopped)
    }

    /// Drop the mark of a letter the MTA never took.
    pub(crate) async fn forget(&self, letter_id: u64) -> Result<(), LedgerError> {
        self.ask(Write::Forget(letter_id)).await
    }

    /// Wait until everything recorded so far is committed to `deliveries`;
    /// then the delivery log's lines are no longer needed and it is emptied.
    pub(crate) async fn flush(&self) -> Result<(), LedgerError> {
        self.ask(Write::Barrier).await?;
        self.check_failed()?;
        if let Some(log) = &self.log {
            log.clear()?;
        }
        Ok(())
    }

    fn check_failed(&self) -> Result<(), LedgerError> {
        let failed = self.failed.lock_even_poisoned();
        match failed.as_ref() {
            Some(e) => Err(LedgerError::Write(Arc::clone(e))),
            None => Ok(()),
        }
    }

    async fn ask(&self, write: Write) -> Result<(), LedgerError> {
        let (done, answer) = oneshot::channel();
        self.requests
            .send(Request {
                write,
                done: Some(done),
            })
            .await
            .map_err(|_| LedgerError::Stopped)?;
        answer
            .await
            .map_err(|_| LedgerError::Stopped)?
            .map_err(LedgerError::Write)
    }
}

/// Take one request, then every other one already waiting; write them
/// together; answer each (a failure nobody waits for goes to `failed`).
/// The writes go over one connection held for the whole run (sqlx pings a
/// connection each time it goes back to the pool: a second round trip per
/// write), replaced when a write fails.
async fn write_loop(
    pool: MySqlPool,
    mailing_id: String,
    mut receiver: mpsc::Receiver<Request>,
    failed: Arc<Mutex<Option<Arc<StoreError>>>>,
) {
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
                Write::Barrier => {}
            }
            answers.push(request.done);
        }
        metrics::histogram!("linktrack_delivery_ledger_writes_per_commit")
            .record(answers.len() as f64);
        let result = if writes.is_empty() {
            Ok(())
        } else {
            write_on_held(&pool, &mut held, &mailing_id, &writes)
                .await
                .map_err(Arc::new)
        };
        if let Err(e) = &result {
            if answers.iter().any(Option::is_none) {
                let mut first = failed.lock_even_poisoned();
                first.get_or_insert_with(|| Arc::clone(e));
            }
        }
        // A task that gave up waiting needs no answer.
        for answer in answers.into_iter().flatten() {
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
) -> Result<(), StoreError> {
    let mut conn = match held.take() {
        Some(conn) => conn,
        None => pool.acquire().await?,
    };
    deliveries::write_ledger(&mut conn, mailing_id, writes).await?;
    *held = Some(conn);
    Ok(())
}
