//! `linktrack build`: one mailing and its recipients in, built letters out.
//!
//! The job reads recipients in batches. For each batch it drops suppressed
//! and duplicate addresses, reserves letter IDs, builds the letters on every
//! core, then hands the batch to a writer task that stores the batch's link
//! rows (two transactions of whole letters at once) and only then writes
//! the letters out. The next batch builds while the writer stores the
//! previous one.
//!
//! **Interrupted runs.** Output goes to `FILE.partial` and is renamed to
//! `FILE` only when the job is complete, so a killed run leaves no truncated
//! output behind. Running the same command again rebuilds every letter: a
//! letter whose rows were committed before the kill reuses its letter ID and
//! tokens (found through any of its rows), so the final output holds every
//! accepted recipient once, every link in it resolves, and no row is stored
//! twice. On a Spider cluster a failed commit can keep part of a batch (the
//! nodes commit one by one): a letter with some rows kept gets only its
//! missing rows, and a resumed run recounts the mailing's letters from the
//! rows at the end (`tests/it/spider_grow.rs` makes such a commit happen).
//!
//! A letter's stages, one file each: the options (`options.rs`), the
//! mailing made ready (`mailing_setup.rs`), the job reading recipients in
//! batches (`job.rs`), the batch composed on every core
//! (`compose_batch.rs`, one letter in `compose.rs`), its rows written
//! (`row_writer.rs`), its letters written out (`output.rs`) and handed
//! over (`handover.rs`), and the summary (`summary.rs`). This file only
//! wires them.

mod columns;
pub(crate) mod compose;
mod compose_batch;
mod composer;
mod csv_records;
mod error;
pub mod handover;
mod handover_lanes;
mod job;
mod letter_shape;
pub(crate) mod letter_tokens;
pub(crate) mod mailing;
pub(crate) mod mailing_context;
mod mailing_setup;
mod options;
mod output;
mod progress;
mod recipient_fields;
mod recipient_lines;
pub(crate) mod recipients;
pub(crate) mod reject;
mod row_writer;
mod summary;
pub mod track_mode;
pub(crate) mod tracked_letters;
pub(crate) mod tracked_parts;
mod tracked_urls;

pub use columns::ColumnMapping;
pub use composer::Composer;
pub use error::BuildError;
pub use job::LETTER_SEQUENCE;
pub use options::{BuildOptions, Output, DEFAULT_MAX_LETTER_BYTES};
pub use output::partial_path;
pub use summary::Summary;

use crate::store::{seal_keys, stats};
use handover::open_delivery;
use job::{open_recipients, read_batch, Job};
use mailing_setup::{load_mailing, store_mailing};
use progress::{progress_bar, spawn_delivery_progress};
use row_writer::spawn_writer;
use sqlx::MySqlPool;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use summary::finish_summary;

/// Transparent huge pages off for this process while the build runs, and
/// back as they were when it ends. mimalloc asks for them (`madvise`) on
/// the memory it maps, so each letter's buffers, freed and taken again
/// letter after letter, kept landing on fresh 2 MB pages the kernel zeroed
/// first: half of the builder's CPU per link row (12-15 µs a row without
/// them against 26-29 with, docs/benchmarks.md). The switch is
/// process-wide, so it is put back for what the process does next (`demo`
/// serves after its build). Failing to switch costs speed only.
struct WithoutHugePages {
    /// They were on before, and are turned on again on drop.
    turned_off: bool,
}

impl WithoutHugePages {
    fn start() -> WithoutHugePages {
        #[cfg(target_os = "linux")]
        {
            let were_off = rustix::thread::transparent_huge_pages_are_disabled().unwrap_or(true);
            if were_off {
                return WithoutHugePages { turned_off: false };
            }
            match rustix::thread::disable_transparent_huge_pages(true) {
                Ok(()) => WithoutHugePages { turned_off: true },
                Err(err) => {
                    tracing::debug!(%err, "transparent huge pages left on");
                    WithoutHugePages { turned_off: false }
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        WithoutHugePages { turned_off: false }
    }
}

impl Drop for WithoutHugePages {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.turned_off {
            if let Err(err) = rustix::thread::disable_transparent_huge_pages(false) {
                tracing::debug!(%err, "transparent huge pages left off");
            }
        }
    }
}

/// Run the job.
pub async fn run(pool: &MySqlPool, options: &BuildOptions) -> Result<Summary, BuildError> {
    let started = Instant::now();
    let _huge_pages = WithoutHugePages::start();
    let ctx = load_mailing(pool, options).await?;
    // The header is checked against what the creative reads before
    // anything of the mailing is stored.
    let plan = columns::HeaderPlan {
        mappings: options.columns.clone(),
        needed: ctx.recipient_fields(),
    };
    let mut reader = open_recipients(options, &plan)?;
    let ctx = store_mailing(pool, options, ctx).await?;
    let progress = progress_bar(options.progress, reader.total_bytes);
    let bytes_read = Arc::clone(&reader.bytes_read);
    let delivery = open_delivery(pool, options, &ctx.mailing)?;
    let mut job = Job::start(pool, ctx, options, delivery.is_some()).await?;
    let delivery_counters = delivery.as_ref().map(|d| d.counters());
    let ticker = delivery_counters
        .clone()
        .map(|counters| spawn_delivery_progress(progress.clone(), counters));
    let (batches, writer) = spawn_writer(pool.clone(), options.out.clone(), delivery);
    loop {
        let (entries, recipients_left) =
            read_batch(reader, options.batch_size, &options.recipients).await?;
        reader = recipients_left;
        if entries.is_empty() {
            break;
        }
        let batch = job.build(entries, options.workers).await?;
        if batches.send(batch).await.is_err() {
            break; // the writer failed; its error is returned below
        }
        progress.set_position(bytes_read.load(Ordering::Relaxed));
    }
    drop(batches);
    let delivered = writer.await.map_err(BuildError::task("writer task"))??;
    if job.resumed {
        stats::recount_letters_built(pool, &job.ctx.mailing.mailing_id).await?;
    }
    // A build that ran past midnight sealed tokens on this day too.
    let today = chrono::Utc::now().date_naive();
    seal_keys::sealed_on(pool, job.ctx.seal(), today).await?;
    job.rejects.refused_by_mta(&delivered.rejected)?;
    let retried = delivery_counters.map_or(0, |c| c.retried.load(Ordering::Relaxed));
    job.summary.add_delivery(delivered, retried);
    job.rejects.finish()?;
    if let Some(ticker) = ticker {
        ticker.abort();
    }
    progress.finish_and_clear();
    finish_summary(job.summary, started, options)
}

#[cfg(all(test, target_os = "linux"))]
mod huge_page_tests {
    use rustix::thread::transparent_huge_pages_are_disabled as huge_pages_off;

    /// nextest runs each test in a process of its own, so the
    /// process-wide switch is this test's alone.
    #[test]
    fn huge_pages_are_off_while_a_build_runs_and_as_before_after_it() {
        let before = huge_pages_off().unwrap();
        {
            let _build = super::WithoutHugePages::start();
            assert!(huge_pages_off().unwrap(), "off during the build");
        }
        assert_eq!(huge_pages_off().unwrap(), before, "as before after it");
    }
}
