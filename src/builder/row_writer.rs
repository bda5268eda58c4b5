//! The writer: each batch's link rows inserted in one transaction (the
//! mailing's letter counts in the same one), and only once they are
//! committed its letters passed to the output thread and on to the
//! hand-over, so a tracked link in a letter always resolves.

use super::compose;
use super::error::BuildError;
use super::handover::{self, spawn_delivery};
use super::options::Output;
use super::output::{spawn_output, Committed, LetterSink};
use super::track_mode::TrackMode;
use crate::store::links::{self, LinkKind};
use crate::store::{partitions, stats, StoreError};
use sqlx::MySqlPool;
use std::collections::HashMap;

/// A batch ready for the writer: rows to commit, then letters to write.
pub(super) struct StoredBatch {
    pub(super) rows: Vec<links::NewLink>,
    /// The letters' output lines, encoded by the threads that built them.
    pub(super) lines: Vec<Vec<u8>>,
    /// The letters themselves, kept only for delivery (else empty: their
    /// lines are all the output needs).
    pub(super) letters: Vec<compose::Letter>,
}

/// The writer: commit a batch's rows, then hand its letters to the output
/// thread, which appends them and then passes them to the delivery task
/// (when delivering). Returns the sender for batches and the task's handle.
///
/// The three stages overlap, in order: batch N+1's rows are inserted while
/// batch N's letters are written out and while batch N+2 is built. A
/// letter reaches the output (and delivery) only after its rows are
/// committed: a tracked link in a letter always resolves.
pub(super) fn spawn_writer(
    pool: MySqlPool,
    out: Output,
    delivery: Option<handover::Delivery>,
) -> (
    tokio::sync::mpsc::Sender<StoredBatch>,
    tokio::task::JoinHandle<Result<handover::Delivered, BuildError>>,
) {
    // One batch waiting while the next builds: bounded, so a slow database
    // holds the builders back instead of filling memory.
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<StoredBatch>(1);
    let handle = tokio::spawn(async move {
        let sink = LetterSink::open(&out)?;
        let (to_deliver, delivering) = match delivery {
            Some(delivery) => {
                let (to_deliver, deliver) = spawn_delivery(delivery);
                (Some(to_deliver), Some(deliver))
            }
            None => (None, None),
        };
        let (to_output, output) = spawn_output(sink, to_deliver);
        let mut stored = Ok(());
        while let Some(batch) = receiver.recv().await {
            if let Err(e) = store_rows(&pool, &batch.rows).await {
                stored = Err(e);
                break;
            }
            let committed = Committed {
                lines: batch.lines,
                letters: batch.letters,
            };
            if to_output.send(committed).await.is_err() {
                break; // the output or delivery failed; its error is below
            }
        }
        drop(to_output);
        // The output thread writes what was committed before any failure,
        // and gives the sink back: it is finished (`FILE.partial` renamed)
        // only when every batch was stored.
        let written = output.await.map_err(BuildError::task("output thread"))?;
        stored?;
        written?.finish()?;
        match delivering {
            Some(handle) => handle.await.map_err(BuildError::task("delivery task"))?,
            None => Ok(handover::Delivered::default()),
        }
    });
    (sender, handle)
}

/// Insert a batch's rows in one transaction; if a day's partition is
/// missing (the job crossed midnight twice), create it and try once more.
pub(super) async fn store_rows(
    pool: &MySqlPool,
    rows: &[links::NewLink],
) -> Result<(), BuildError> {
    if rows.is_empty() {
        return Ok(());
    }
    // On a Spider head the ids come from blocks reserved ahead, outside the
    // batch's transaction (`store::cluster::ids`); none on one server.
    let head = links::HeadRows::for_rows(pool, rows.len()).await?;
    for attempt in 0..2 {
        let mut tx = pool.begin().await.map_err(StoreError::from)?;
        match links::insert_with(&mut tx, rows, head.as_ref()).await {
            Ok(_) => {
                count_new_letters(&mut tx, rows).await?;
                tx.commit().await.map_err(StoreError::from)?;
                return Ok(());
            }
            Err(StoreError::NoPartition { .. }) if attempt == 0 => {
                drop(tx);
                ensure_partitions(pool).await?;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(BuildError::Internal(
        "unreachable: the retry loop returns".into(),
    ))
}

/// Each new letter has exactly one unsubscribe row, in every tracking mode,
/// carrying the letter's mode; counting them in the batch's own transaction
/// keeps the mailing's "letters built" (and untracked, anonymous) exact
/// across crashes and resumed runs (a resumed letter stores no new
/// unsubscribe row).
async fn count_new_letters(
    conn: &mut sqlx::MySqlConnection,
    rows: &[links::NewLink],
) -> Result<(), StoreError> {
    let mut per_mailing: HashMap<&str, stats::LettersByMode> = HashMap::new();
    for row in rows.iter().filter(|r| r.kind == LinkKind::Unsubscribe) {
        let counts = per_mailing.entry(row.mailing_id.as_str()).or_default();
        counts.letters += 1;
        match compose::stored_mode(row.meta.as_ref()) {
            // A last-open-day letter's opens and clicks are no events:
            // rates must not count it either.
            Some(TrackMode::None | TrackMode::LastOpenDay) => counts.untracked += 1,
            Some(TrackMode::Anonymous) => counts.anonymous += 1,
            _ => {}
        }
    }
    for (mailing_id, counts) in per_mailing {
        stats::add_letters_built(conn, mailing_id, counts.letters).await?;
        stats::add_letters_by_mode(conn, mailing_id, &counts).await?;
    }
    Ok(())
}

/// Today's and tomorrow's partitions, in case the job runs past midnight.
pub(super) async fn ensure_partitions(pool: &MySqlPool) -> Result<(), StoreError> {
    partitions::ensure_ahead(pool, 1).await.map(drop)
}
