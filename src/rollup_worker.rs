//! The rollup worker: every few seconds, roll new `events` into the
//! statistics tables (exactly once, in MySQL: [`crate::store::rollup`]) and
//! publish each committed batch to the Redis live layer ([`crate::live`]).
//! `linktrack serve` runs it as a background worker
//! (`crate::workers`); `linktrack stats rollup` runs it alone.

use crate::live::{Live, LiveError};
use crate::store::rolled_batch::RolledBatch;
use crate::store::rollup::{self, RollupOptions, RollupReport};
use crate::store::StoreError;
use sqlx::MySqlPool;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// One pass of the rollup worker: roll every pending event into MySQL, then
/// publish each committed batch to Redis when a live layer is configured.
/// A Redis failure is logged and does not fail the pass.
pub async fn roll_and_publish(
    pool: &MySqlPool,
    live: Option<&Live>,
    options: &RollupOptions,
) -> Result<RollupReport, StoreError> {
    let report = rollup::rollup_with(pool, options).await?;
    if let Some(live) = live {
        for batch in &report.batches {
            if let Err(err) = publish(pool, live, batch).await {
                tracing::warn!(%err, last_id = batch.last_id, "live stats not updated for a batch");
            }
        }
    }
    Ok(report)
}

async fn publish(pool: &MySqlPool, live: &Live, batch: &RolledBatch) -> Result<(), LiveError> {
    let counts = rollup::batch_counts(pool, batch).await?;
    let clicks = rollup::batch_clicks(pool, batch).await?;
    live.apply(&counts, &clicks).await
}

/// Run [`roll_and_publish`] every `every` until `stopping` says stop;
/// errors are logged and retried on the next tick. A stop never interrupts
/// a pass midway: each rollup batch is one transaction, and the pass in
/// progress finishes first. `senders`, the outbound senders of the same
/// process, are woken after a pass that released held events (other
/// processes' senders find them at their next poll).
pub async fn run_worker(
    pool: MySqlPool,
    live: Option<Live>,
    options: RollupOptions,
    every: Duration,
    senders: Option<Arc<Notify>>,
    mut stopping: crate::workers::Stopping,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stopping.requested() => return,
            _ = tick.tick() => {}
        }
        match roll_and_publish(&pool, live.as_ref(), &options).await {
            Ok(report) if report.events() > 0 => {
                if let Some(senders) = senders.as_ref().filter(|_| report.released > 0) {
                    senders.notify_waiters();
                }
                tracing::debug!("{report}")
            }
            Ok(_) => {}
            Err(err) => tracing::warn!(%err, "stats rollup failed; retrying"),
        }
    }
}
