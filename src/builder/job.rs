//! The job: the recipients file read a batch at a time, each batch
//! screened (unreadable lines, repeated and suppressed addresses), given
//! letter ids (an earlier run's when resuming), composed, and gathered into
//! the rows and lines the writer stores; the running summary and the
//! rejects file kept on the way.

use super::columns;
use super::compose::Built;
use super::compose_batch::{build_batch, BuiltEntry};
use super::error::BuildError;
use super::letter_tokens::{ImageTokens, StoredTokens};
use super::mailing_context::MailingContext;
use super::options::BuildOptions;
use super::output::RejectsFile;
use super::recipient_fields::{Entry, Recipient, Rejection};
use super::recipients::Recipients;
use super::reject::Reject;
use super::row_writer::StoredBatch;
use super::summary::Summary;
use super::track_mode::TrackMode;
use crate::mailing_id::MailingId;
use crate::store::links::{self, LinkKind};
use crate::store::sequences::Sequence;
use crate::store::{stats, suppressions, tracking_optouts, StoreError};
use sqlx::MySqlPool;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// The sequence letter IDs come from.
pub const LETTER_SEQUENCE: &str = "letters";

pub(super) fn open_recipients(
    options: &BuildOptions,
    columns: &columns::HeaderPlan,
) -> Result<Recipients, BuildError> {
    Recipients::open(&options.recipients, columns).map_err(|source| BuildError::Recipients {
        path: options.recipients.clone(),
        source,
    })
}

/// A build in progress: what earlier runs stored (to resume), the rejects
/// file, the id sequence and the running summary.
pub(super) struct Job<'a> {
    pool: &'a MySqlPool,
    pub(super) ctx: Arc<MailingContext>,
    /// Letter ids of addresses an earlier run already built.
    existing: HashMap<String, u64>,
    /// An earlier run stored rows or counted letters of this mailing: the
    /// count is made again from the rows at the end (see
    /// [`stats::recount_letters_built`]).
    pub(super) resumed: bool,
    images: Arc<ImageTokens>,
    pub(super) rejects: RejectsFile,
    sequence: Sequence,
    pub(super) summary: Summary,
    /// First line of each address seen, to reject duplicates.
    seen: HashMap<String, u64>,
    /// The letters are delivered: keep them beside their output lines.
    keep_letters: bool,
}

impl<'a> Job<'a> {
    pub(super) async fn start(
        pool: &'a MySqlPool,
        ctx: Arc<MailingContext>,
        options: &BuildOptions,
        keep_letters: bool,
    ) -> Result<Job<'a>, BuildError> {
        let mailing_id = &ctx.mailing.mailing_id;
        let existing = links::letters_of_mailing(pool, mailing_id).await?;
        let images = Arc::new(ImageTokens::with_known(
            links::shared_of_mailing(pool, mailing_id).await?,
        ));
        let resumed =
            !existing.is_empty() || stats::letters_counted(pool, mailing_id).await?.is_some();
        Ok(Job {
            pool,
            existing,
            resumed,
            images,
            rejects: RejectsFile::create(&options.rejects)?,
            sequence: Sequence::new(LETTER_SEQUENCE, options.id_block),
            summary: Summary {
                positions_showing_address: ctx.positions_left_as_written(),
                ..Summary::default()
            },
            seen: HashMap::new(),
            keep_letters,
            ctx,
        })
    }

    /// One batch of input lines to the rows and letters the writer stores.
    pub(super) async fn build(
        &mut self,
        entries: Vec<Entry>,
        workers: usize,
    ) -> Result<StoredBatch, BuildError> {
        let accepted = self.screen(entries)?;
        let accepted = self.drop_suppressed(accepted).await?;
        let opted_out = self.opted_out(&accepted).await?;
        let jobs = self.assign_ids(accepted).await?;
        let resumed_ids: Vec<u64> = jobs
            .iter()
            .filter(|(recipient, _)| self.existing.contains_key(recipient.email.as_str()))
            .map(|(_, id)| *id)
            .collect();
        let stored = stored_tokens(self.pool, &self.ctx.mailing.mailing_id, &resumed_ids).await?;
        self.summary.letters_resumed += resumed_ids.len() as u64;
        let built = build_batch(
            Arc::clone(&self.ctx),
            jobs,
            stored,
            Arc::clone(&self.images),
            opted_out,
            workers,
            self.keep_letters,
        )
        .await?;
        self.collect(built)
    }

    /// The addresses among `accepted` that withdrew from tracking: their
    /// letters are built and sent, untracked.
    async fn opted_out(&self, accepted: &[Recipient]) -> Result<HashSet<String>, BuildError> {
        let emails: Vec<&str> = accepted.iter().map(|r| r.email.as_str()).collect();
        Ok(tracking_optouts::opted_out_among(self.pool, &emails).await?)
    }

    /// Unreadable lines and repeated addresses become rejections.
    fn screen(&mut self, entries: Vec<Entry>) -> Result<Vec<Recipient>, BuildError> {
        let mut accepted = Vec::with_capacity(entries.len());
        self.summary.rows_read += entries.len() as u64;
        for entry in entries {
            match entry {
                Ok(recipient) => match self.seen.get(recipient.email.as_str()) {
                    Some(first) => self.rejects.write(
                        &mut self.summary,
                        &Rejection {
                            line: recipient.line,
                            email: Some(recipient.email.as_str().to_owned()),
                            reason: Reject::Duplicate { first: *first },
                        },
                    )?,
                    None => {
                        self.seen
                            .insert(recipient.email.as_str().to_owned(), recipient.line);
                        accepted.push(recipient);
                    }
                },
                Err(rejection) => self.rejects.write(&mut self.summary, &rejection)?,
            }
        }
        Ok(accepted)
    }

    /// Skip (and note) the addresses on the suppression list.
    async fn drop_suppressed(
        &mut self,
        mut accepted: Vec<Recipient>,
    ) -> Result<Vec<Recipient>, BuildError> {
        let emails: Vec<&str> = accepted.iter().map(|r| r.email.as_str()).collect();
        let suppressed = suppressions::suppressed_among(self.pool, &emails).await?;
        for recipient in accepted
            .iter()
            .filter(|r| suppressed.contains(r.email.as_str()))
        {
            self.rejects.skip(&mut self.summary, recipient)?;
        }
        accepted.retain(|r| !suppressed.contains(r.email.as_str()));
        Ok(accepted)
    }

    /// A letter id for each recipient: the earlier run's when resuming,
    /// else the next from the sequence.
    async fn assign_ids(
        &mut self,
        accepted: Vec<Recipient>,
    ) -> Result<Vec<(Recipient, u64)>, BuildError> {
        let mut jobs = Vec::with_capacity(accepted.len());
        for recipient in accepted {
            let letter_id = match self.existing.get(recipient.email.as_str()) {
                Some(id) => *id,
                None => self.sequence.next(self.pool).await?,
            };
            jobs.push((recipient, letter_id));
        }
        Ok(jobs)
    }

    /// Built letters and their new rows into one batch; failures to rejects.
    fn collect(&mut self, built: Vec<BuiltEntry>) -> Result<StoredBatch, BuildError> {
        let mut batch = StoredBatch {
            rows: self.images.take_new_rows(),
            lines: Vec::with_capacity(built.len()),
            letters: Vec::new(),
        };
        for (line, email, result) in built {
            match result {
                Ok((
                    Built {
                        letter,
                        new_links,
                        empty_fields,
                    },
                    encoded,
                )) => {
                    self.summary.count_empty_fields(&empty_fields);
                    self.summary.letters_untracked += u64::from(letter.track == TrackMode::None);
                    self.summary.letters_anonymous +=
                        u64::from(letter.track == TrackMode::Anonymous);
                    self.summary.letters_last_open_day +=
                        u64::from(letter.track == TrackMode::LastOpenDay);
                    if letter.track.tracks_clicks() {
                        self.summary.links_showing_address_untracked +=
                            self.summary.positions_showing_address.len() as u64;
                    }
                    batch.rows.extend(new_links);
                    batch.lines.push(encoded);
                    self.summary.letters_built += 1;
                    if self.keep_letters {
                        batch.letters.push(letter);
                    }
                }
                Err(reason) => self.rejects.write(
                    &mut self.summary,
                    &Rejection {
                        line,
                        email: Some(email),
                        reason,
                    },
                )?,
            }
        }
        self.summary.links_stored += batch.rows.len() as u64;
        Ok(batch)
    }
}

/// Read up to `size` entries on a blocking thread (the file reader is
/// synchronous); the reader comes back for the next batch.
pub(super) async fn read_batch(
    mut reader: Recipients,
    size: usize,
    path: &Path,
) -> Result<(Vec<Entry>, Recipients), BuildError> {
    tokio::task::spawn_blocking(move || {
        let mut entries = Vec::with_capacity(size);
        for entry in reader.by_ref().take(size) {
            entries.push(entry?);
        }
        Ok::<_, std::io::Error>((entries, reader))
    })
    .await
    .map_err(BuildError::task("reader thread"))?
    .map_err(|source| BuildError::Recipients {
        path: path.to_owned(),
        source,
    })
}

async fn stored_tokens(
    pool: &MySqlPool,
    mailing_id: &MailingId,
    letter_ids: &[u64],
) -> Result<HashMap<u64, StoredTokens>, StoreError> {
    let mut by_letter: HashMap<u64, StoredTokens> = HashMap::new();
    if letter_ids.is_empty() {
        return Ok(by_letter);
    }
    for link in links::of_letters(pool, mailing_id, letter_ids).await? {
        if link.kind == LinkKind::Image {
            continue;
        }
        by_letter
            .entry(link.letter_id)
            .or_default()
            .by_position
            .insert((link.kind, link.position), (link.token, link.url));
    }
    Ok(by_letter)
}
