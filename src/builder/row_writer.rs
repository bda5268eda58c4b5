//! The writer: each batch's link rows inserted in two transactions at once,
//! each of whole letters with their letters' counts, and only once both
//! are committed its letters passed to the output thread and on to the
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
            if let Err(e) = store_rows(&pool, &batch.rows, INSERT_PARTS).await {
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

/// A batch's rows go over this many connections at once, each part whole
/// letters in a transaction of its own: on one connection mariadbd works
/// one row after another on one core (17 µs a row on this machine's kind,
/// against `LOAD DATA`'s 15), while the builder's own part is a third of
/// that; two parts let the database use the second core too.
const INSERT_PARTS: usize = 2;
/// A batch smaller than this goes in one part: a letter or a few (the
/// relay, the per-letter API) gain nothing from a second connection.
const MIN_ROWS_PER_PART: usize = 1_000;

/// Insert a batch's rows, in up to `parts` transactions of whole letters
/// at once, each counting its own letters; if a day's partition is
/// missing (the job crossed midnight twice), create it and try the parts
/// that failed once more. The batch is stored when every part committed;
/// if one fails the build stops before any of the batch's letters is
/// written, and a resumed run finds the committed part's letters stored.
/// `parts` 1: all or nothing (a caller that cannot resume).
pub(super) async fn store_rows(
    pool: &MySqlPool,
    rows: &[links::NewLink],
    parts: usize,
) -> Result<(), BuildError> {
    if rows.is_empty() {
        return Ok(());
    }
    let mut pending = split_at_letters(rows, parts, MIN_ROWS_PER_PART);
    for attempt in 0..2 {
        let outcomes =
            futures_util::future::join_all(pending.iter().map(|part| store_part(pool, part))).await;
        let mut without_partition = Vec::new();
        for (part, outcome) in pending.iter().zip(outcomes) {
            match outcome {
                Ok(()) => {}
                Err(StoreError::NoPartition { .. }) if attempt == 0 => {
                    without_partition.push(*part)
                }
                Err(e) => return Err(e.into()),
            }
        }
        if without_partition.is_empty() {
            return Ok(());
        }
        ensure_partitions(pool).await?;
        pending = without_partition;
    }
    Err(BuildError::Internal(
        "unreachable: the retry loop returns".into(),
    ))
}

/// One part of a batch in one transaction, with its letters' counts.
async fn store_part(pool: &MySqlPool, rows: &[links::NewLink]) -> Result<(), StoreError> {
    // On a Spider head the ids come from blocks reserved ahead, outside the
    // part's transaction (`store::cluster::ids`); none on one server.
    let head = links::HeadRows::for_rows(pool, rows.len()).await?;
    let mut tx = pool.begin().await?;
    links::insert_with(&mut tx, rows, head.as_ref()).await?;
    count_new_letters(&mut tx, rows).await?;
    tx.commit().await?;
    Ok(())
}

/// `rows` in at most `parts` runs of about equal length, each of at least
/// `min_rows` rows, cut only where the letter changes: a letter's rows
/// (its unsubscribe row, which counts it, among them) commit together.
fn split_at_letters(
    rows: &[links::NewLink],
    parts: usize,
    min_rows: usize,
) -> Vec<&[links::NewLink]> {
    let parts = parts.min(rows.len() / min_rows.max(1)).max(1);
    let mut split = Vec::with_capacity(parts);
    let mut rest = rows;
    for left in (2..=parts).rev() {
        let mut cut = rest.len() / left;
        while cut < rest.len() && cut > 0 && rest[cut].letter_id == rest[cut - 1].letter_id {
            cut += 1;
        }
        if cut == 0 || cut == rest.len() {
            break;
        }
        let (part, after) = rest.split_at(cut);
        split.push(part);
        rest = after;
    }
    split.push(rest);
    split
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::Token;
    use proptest::prelude::*;

    fn rows_of_letters(sizes: &[usize]) -> Vec<links::NewLink> {
        let mut rows = Vec::new();
        for (n, size) in sizes.iter().enumerate() {
            for position in 0..*size {
                rows.push(links::NewLink {
                    token: Token::new(),
                    kind: LinkKind::Click,
                    mailing_id: "m".into(),
                    letter_id: n as u64 + 1,
                    email: format!("{n}@example.com"),
                    position: position as u32,
                    url: String::new(),
                    meta: None,
                });
            }
        }
        rows
    }

    #[test]
    fn a_small_batch_stays_one_part() {
        let rows = rows_of_letters(&[30; 10]);
        assert_eq!(split_at_letters(&rows, 2, 1_000).len(), 1);
    }

    #[test]
    fn a_large_batch_is_cut_between_letters_near_its_middle() {
        let rows = rows_of_letters(&[30; 100]);
        let parts = split_at_letters(&rows, 2, 1_000);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].len(), 1_500);
        let rows = rows_of_letters(&[32; 99]);
        let parts = split_at_letters(&rows, 2, 1_000);
        // 3,168 rows: the middle (1,584) falls inside the 50th letter,
        // which goes whole into the first part.
        assert_eq!(parts[0].len(), 32 * 50);
    }

    proptest! {
        #[test]
        fn parts_keep_every_row_in_order_and_never_split_a_letter(
            sizes in proptest::collection::vec(1usize..80, 0..120),
            parts in 1usize..4,
            min_rows in 1usize..500,
        ) {
            let rows = rows_of_letters(&sizes);
            let split = split_at_letters(&rows, parts, min_rows);
            prop_assert!(!split.is_empty() && split.len() <= parts);
            let joined: Vec<_> = split.iter().flat_map(|p| p.iter()).cloned().collect();
            prop_assert_eq!(&joined, &rows);
            for pair in split.windows(2) {
                prop_assert!(!pair[0].is_empty() && !pair[1].is_empty());
                let last = pair[0].last().map(|r| r.letter_id);
                let first = pair[1].first().map(|r| r.letter_id);
                prop_assert_ne!(last, first);
            }
        }
    }
}
