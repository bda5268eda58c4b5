//! The spool worker: hands each queued letter to the downstream MTA
//! (`delivery::smtp`, the sessions and retries `build --smtp` uses),
//! oldest first. Delivered: it leaves the spool. Refused for good (5xx):
//! kept in `rejected/` with the reply, logged and counted (a bounce the
//! sending platform learns of from the log; docs/relay.md). Still failing
//! temporarily after the lane's retries: it stays queued and the round
//! is tried again later, the wait doubling up to an hour; a letter queued
//! longer than [`MAX_QUEUE_AGE`] is refused as Postfix does.

use super::spool::{Queued, Spool};
use crate::delivery::smtp::{Deliverer, Envelope, Outcome};
use crate::retry::{Attempts, Backoff};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, Notify};

/// How long a letter may stay queued before it is given up.
const MAX_QUEUE_AGE: Duration = Duration::from_secs(5 * 24 * 3600);
/// The longest wait between rounds of a failing MTA.
const LONGEST_WAIT: Duration = Duration::from_secs(3600);

/// Run until `stop` turns true: a round over the spool whenever `wake`
/// is notified (a message was queued) or the wait after a failure ends.
pub(crate) async fn run(
    spool: Arc<Spool>,
    deliverer: Deliverer,
    wake: Arc<Notify>,
    retry_after: Duration,
    mut stop: watch::Receiver<bool>,
) {
    let schedule = Backoff::exponential(retry_after, 2)
        .with_cap(LONGEST_WAIT)
        .with_attempts(Attempts::Unlimited);
    let mut failures = 0u32;
    loop {
        let wait = match round(&spool, &deliverer).await {
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

async fn round(spool: &Arc<Spool>, deliverer: &Deliverer) -> Round {
    let listed = {
        let spool = Arc::clone(spool);
        tokio::task::spawn_blocking(move || spool.queued()).await
    };
    let queued = match listed {
        Ok(Ok(queued)) => queued,
        Ok(Err(e)) => {
            tracing::error!(error = %e, "cannot read the relay's spool");
            return Round::Failing;
        }
        Err(e) => {
            tracing::error!(error = %e, "the spool listing panicked");
            return Round::Failing;
        }
    };
    let mut lane = deliverer.lane();
    for letter in queued {
        match forward(spool, &mut lane, &letter).await {
            Ok(true) => {}
            Ok(false) => return Round::Failing,
            Err(e) => {
                tracing::error!(error = %e, file = %letter.path.display(), "the relay's spool");
                return Round::Failing;
            }
        }
    }
    Round::Done
}

/// Forward one letter; `Ok(false)`: a temporary failure, it stays queued.
async fn forward(
    spool: &Spool,
    lane: &mut crate::delivery::smtp::Lane,
    queued: &Queued,
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
        Outcome::Delivered(_) => {
            Spool::delivered(&sending)?;
            metrics::counter!("linktrack_relay_forwarded_total").increment(1);
            Ok(true)
        }
        Outcome::Rejected(reply) => {
            let kept = spool.rejected(&sending, &reply)?;
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
