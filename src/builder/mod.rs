//! `linktrack build`: one mailing and its recipients in, built letters out.
//!
//! The job reads recipients in batches. For each batch it drops suppressed
//! and duplicate addresses, reserves letter IDs, builds the letters on every
//! core, then hands the batch to a writer task that stores the batch's link
//! rows in one transaction and only then writes the letters out. The next
//! batch builds while the writer stores the previous one.
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

mod columns;
pub(crate) mod compose;
mod csv_records;
pub mod handover;
pub(crate) mod mailing;
mod output;
mod progress;
pub(crate) mod recipients;
pub(crate) mod reject;
pub mod track_mode;

pub use columns::ColumnMapping;
pub use output::partial_path;
use output::{LetterSink, RejectsFile};
use progress::{progress_bar, spawn_delivery_progress};

use crate::store::link_templates;
use crate::store::links::{self, LinkKind};
use crate::store::partitions;
use crate::store::seal_keys;
use crate::store::sequences::Sequence;
use crate::store::{stats, suppressions, tracking_domains, tracking_optouts, StoreError};
use compose::{build_letter, letter_mode, Built, ImageTokens, MailingContext, StoredTokens};
use mailing::Mailing;
use recipients::{Recipient, Recipients, Rejection};
use reject::Reject;
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;
use track_mode::TrackMode;

/// The sequence letter IDs come from.
pub const LETTER_SEQUENCE: &str = "letters";

/// Where built letters go.
#[derive(Debug, Clone)]
pub enum Output {
    Stdout,
    File(PathBuf),
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub mailing: PathBuf,
    pub recipients: PathBuf,
    pub out: Output,
    /// JSON Lines of rejected recipients: line, address, reason.
    pub rejects: PathBuf,
    pub base_url: String,
    /// Recipients per batch (one transaction of link rows each).
    pub batch_size: usize,
    /// Threads building letters.
    pub workers: usize,
    /// Letter IDs reserved per round trip to `sequences`.
    pub id_block: u64,
    /// Draw a progress bar (only ever on a terminal).
    pub progress: bool,
    /// Deliver every letter over SMTP (after its rows are stored). With
    /// `pools`, its retries and backoff apply to every MTA and its URL is
    /// not used.
    pub smtp: Option<crate::delivery::smtp::SmtpSettings>,
    /// The pools file: the mailing's `pool` picks its MTAs.
    pub pools: Option<PathBuf>,
    /// Envelope sender for bounces; default the mailing's From address.
    pub return_path: Option<String>,
    /// `--delivery-log`: each letter's SMTP outcome is appended here before
    /// its connection takes the next letter, and committed to `deliveries`
    /// in groups behind it (`delivery::log_file`). `None`: every outcome
    /// is committed before the next letter (one commit per letter per
    /// connection).
    pub delivery_log: Option<PathBuf>,
    /// `--bounce-domain`: every letter's envelope sender (and
    /// `Return-Path`) is its own VERP address `bounces+{token}@` this
    /// domain, in place of `return_path` (docs/bounces.md).
    pub bounce_domain: Option<String>,
    /// Where the summary goes as JSON (with the conservation counts).
    pub summary: Option<PathBuf>,
    /// The most bytes a letter's HTML may have (the creative before any
    /// letter, each letter after personalising).
    pub max_letter_bytes: usize,
    /// `LINKTRACK_SECRET`: part of the token seal key, as the server's
    /// (docs/token.md); the database must know its key (`seal_keys`).
    pub secret: Option<String>,
    /// `--new-secret`: `secret` is a new key; make it the current one.
    pub new_secret: bool,
    /// `--column FIELD=HEADER`: which recipients column gives a field.
    pub columns: Vec<ColumnMapping>,
    /// Build every letter the old way (no plan): the reference path.
    pub letter_by_letter: bool,
}

/// The default of `--max-letter-bytes`: 5 MiB of HTML is far beyond any
/// newsletter, and well under what one database statement can carry.
pub const DEFAULT_MAX_LETTER_BYTES: usize = 5 << 20;

/// What the job did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Summary {
    /// Rows of the recipients file (empty lines are not rows). Always
    /// `letters_built + suppressed + rejected`: the build checks it.
    pub rows_read: u64,
    pub letters_built: u64,
    /// Letters whose rows an earlier, interrupted run had stored.
    pub letters_resumed: u64,
    pub suppressed: u64,
    /// Rows that got no letter for a reason other than suppression
    /// (duplicates included). MTA refusals are not counted here: those
    /// letters were built; see `delivery_rejected`.
    pub rejected: u64,
    /// Rejections by `Reject::group`.
    pub rejected_by_reason: BTreeMap<String, u64>,
    pub links_stored: u64,
    pub seconds: f64,
    /// Letters the MTA accepted in this run (with `--smtp`).
    pub delivered: u64,
    /// Letters the MTA refused for good (5xx) in this run.
    pub delivery_rejected: u64,
    /// Letters an earlier run had already delivered or had refused.
    pub delivery_skipped: u64,
    /// Temporary failures (4xx, refused connection, timeout) retried.
    pub delivery_retried: u64,
    /// Letters built untracked (`track` none: the mailing's, the
    /// recipient's column, or the recipient's own opt-out).
    pub letters_untracked: u64,
    /// Letters built anonymously (shared rows, no address in any but the
    /// unsubscribe row).
    pub letters_anonymous: u64,
    /// Letters built in `last_open_day` mode (the pixel keeps the day of
    /// the address's last open, nothing else); counted as untracked in the
    /// statistics, since their opens and clicks are no events.
    pub letters_last_open_day: u64,
    /// Links left as written by the link-text rule (their text shows an
    /// address on another site than the tracking host; docs/domains.md),
    /// summed over the letters whose links are tracked.
    pub links_showing_address_untracked: u64,
    /// Those links' positions in the creative (1, 2, … in document order).
    pub positions_showing_address: Vec<u32>,
    /// Letters sent again because a killed run handed them over without
    /// recording the reply (letter id, address): they may arrive twice.
    pub delivery_resent: Vec<(u64, String)>,
}

impl Summary {
    /// Take in what delivery did: `retried` is the count of temporary
    /// failures tried again (the delivery's live counters have it).
    pub fn add_delivery(&mut self, delivered: handover::Delivered, retried: u64) {
        self.delivered = delivered.delivered;
        self.delivery_rejected = delivered.rejected.len() as u64;
        self.delivery_skipped = delivered.skipped;
        self.delivery_retried = retried;
        self.delivery_resent = delivered.resent;
    }

    /// Every row read is built, suppressed or rejected: never left out.
    pub fn is_conserved(&self) -> bool {
        self.rows_read == self.letters_built + self.suppressed + self.rejected
    }

    pub fn letters_per_second(&self) -> f64 {
        if self.seconds > 0.0 {
            self.letters_built as f64 / self.seconds
        } else {
            0.0
        }
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let plural =
            |n: u64, one: &'static str, many: &'static str| if n == 1 { one } else { many };
        writeln!(
            f,
            "read {} {} = {} built + {} suppressed + {} rejected",
            self.rows_read,
            plural(self.rows_read, "row", "rows"),
            self.letters_built,
            self.suppressed,
            self.rejected
        )?;
        writeln!(
            f,
            "built {} {} ({} resumed from an earlier run), stored {} {}, in {:.1}s ({:.0} letters/s)",
            self.letters_built,
            plural(self.letters_built, "letter", "letters"),
            self.letters_resumed,
            self.links_stored,
            plural(self.links_stored, "link", "links"),
            self.seconds,
            self.letters_per_second()
        )?;
        write!(
            f,
            "skipped {} suppressed {}; rejected {} {}",
            self.suppressed,
            plural(self.suppressed, "address", "addresses"),
            self.rejected,
            plural(self.rejected, "recipient", "recipients")
        )?;
        if self.delivered + self.delivery_rejected + self.delivery_skipped > 0 {
            write!(
                f,
                "\ndelivered {} over SMTP ({:.0} messages/s), {} refused by the MTA, {} settled by an earlier run, {} temporary {} retried",
                self.delivered,
                if self.seconds > 0.0 { self.delivered as f64 / self.seconds } else { 0.0 },
                self.delivery_rejected,
                self.delivery_skipped,
                self.delivery_retried,
                plural(self.delivery_retried, "failure", "failures")
            )?;
        }
        if self.letters_untracked + self.letters_anonymous > 0 {
            write!(
                f,
                "\n{} letters built untracked, {} anonymous",
                self.letters_untracked, self.letters_anonymous
            )?;
        }
        if self.links_showing_address_untracked > 0 {
            write!(
                f,
                "\n{} links left as written because their text shows an address on another site \
                 than the tracking host (positions {:?} of the creative; docs/domains.md, \
                 `filter_safe`)",
                self.links_showing_address_untracked, self.positions_showing_address
            )?;
        }
        if self.letters_last_open_day > 0 {
            write!(
                f,
                "\n{} letters built keeping only the day of the last open (last_open_day)",
                self.letters_last_open_day
            )?;
        }
        for (letter_id, email) in &self.delivery_resent {
            write!(
                f,
                "\nsent again, may arrive twice (a killed run handed it over unrecorded): letter {letter_id} to {email}"
            )?;
        }
        for (reason, count) in &self.rejected_by_reason {
            write!(f, "\n  {count:>8}  {reason}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(transparent)]
    Mailing(#[from] mailing::MailingError),
    #[error("--bounce-domain: {0}")]
    BounceDomain(String),
    #[error("{path}: {source}")]
    Template {
        path: PathBuf,
        source: compose::PrepareError,
    },
    #[error("{path}: {size} bytes of HTML, over the limit of {limit} bytes; nothing was built: {reason}")]
    TooBig {
        path: PathBuf,
        size: usize,
        limit: usize,
        reason: &'static str,
    },
    #[error(
        "{path}: field `mailing_id`: {id:?} is taken for the existing mailing {existing:?} by the \
         database (ids compare without case or trailing spaces there), so the two would be one \
         mailing; nothing was built: give this mailing another id"
    )]
    MailingIdCollides {
        path: PathBuf,
        id: String,
        existing: String,
    },
    #[error("{path}: cannot read recipients: {source}")]
    Recipients {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: cannot write: {source}")]
    Output {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Smtp(#[from] crate::delivery::smtp::SmtpError),
    #[error(transparent)]
    Pools(#[from] crate::delivery::pools::PoolsError),
    #[error(transparent)]
    DeliveryLog(#[from] crate::delivery::log_file::DeliveryLogError),
    #[error(
        "the MTA at {host} kept failing for letter {letter_id} ({email}): {reply}; every letter \
         not yet delivered is left for a re-run of the same command"
    )]
    Delivery {
        host: String,
        letter_id: u64,
        email: String,
        reply: String,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// A batch ready for the writer: rows to commit, then letters to write.
struct StoredBatch {
    rows: Vec<links::NewLink>,
    /// The letters' output lines, encoded by the threads that built them.
    lines: Vec<Vec<u8>>,
    /// The letters themselves, kept only for delivery (else empty: their
    /// lines are all the output needs).
    letters: Vec<compose::Letter>,
}

/// A stored batch on its way out: written, then delivered.
struct Committed {
    lines: Vec<Vec<u8>>,
    letters: Vec<compose::Letter>,
}

/// Run the job.
pub async fn run(pool: &MySqlPool, options: &BuildOptions) -> Result<Summary, BuildError> {
    let started = Instant::now();
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
    let delivered = writer
        .await
        .map_err(|e| BuildError::Internal(format!("writer task: {e}")))??;
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

fn open_recipients(
    options: &BuildOptions,
    columns: &columns::HeaderPlan,
) -> Result<Recipients, BuildError> {
    Recipients::open(&options.recipients, columns).map_err(|source| BuildError::Recipients {
        path: options.recipients.clone(),
        source,
    })
}

/// The mailing's SMTP delivery, when its pool names MTAs (else letters
/// are only written out).
fn open_delivery(
    pool: &MySqlPool,
    options: &BuildOptions,
    mailing: &Mailing,
) -> Result<Option<handover::Delivery>, BuildError> {
    match delivery_targets(options, &mailing.pool)? {
        targets if targets.is_empty() => Ok(None),
        targets => Ok(Some(handover::Delivery::new(
            pool.clone(),
            targets,
            mailing,
            options.return_path.as_deref(),
            options.delivery_log.as_deref(),
        )?)),
    }
}

/// The run's time, the summary file when asked for, and the conservation
/// check: a summary whose rows do not add up is an error, never printed.
fn finish_summary(
    mut summary: Summary,
    started: Instant,
    options: &BuildOptions,
) -> Result<Summary, BuildError> {
    summary.seconds = started.elapsed().as_secs_f64();
    if let Some(path) = &options.summary {
        write_summary(path, &summary)?;
    }
    if !summary.is_conserved() {
        return Err(BuildError::Internal(format!(
            "rows do not add up: read {} but built {} + suppressed {} + rejected {}",
            summary.rows_read, summary.letters_built, summary.suppressed, summary.rejected
        )));
    }
    Ok(summary)
}

/// The summary as one JSON object, `conserved` included, for scripts.
fn write_summary(path: &Path, summary: &Summary) -> Result<(), BuildError> {
    let mut value =
        serde_json::to_value(summary).map_err(|e| BuildError::Internal(format!("summary: {e}")))?;
    value["conserved"] = serde_json::Value::Bool(summary.is_conserved());
    let text = format!("{value:#}\n");
    std::fs::write(path, text).map_err(|source| BuildError::Output {
        path: path.to_owned(),
        source,
    })
}

/// The MTAs of this mailing: the pools file's entry for its pool, or the
/// one `--smtp` URL; none without either. Checked before any letter.
fn delivery_targets(
    options: &BuildOptions,
    pool: &str,
) -> Result<Vec<crate::delivery::smtp::SmtpSettings>, BuildError> {
    use crate::delivery::{pools, smtp::SmtpSettings};
    match (&options.pools, &options.smtp) {
        (Some(file), template) => {
            let route = pools::route(file, pool)?;
            let (retries, backoff, messages_per_connection) = template
                .as_ref()
                .map_or((5, std::time::Duration::from_secs(1), None), |t| {
                    (t.retries, t.backoff, t.messages_per_connection)
                });
            Ok(route
                .urls
                .into_iter()
                .map(|url| SmtpSettings {
                    url,
                    connections: route.connections,
                    messages_per_connection: route
                        .messages_per_connection
                        .or(messages_per_connection),
                    retries,
                    backoff,
                })
                .collect())
        }
        (None, Some(settings)) => Ok(vec![settings.clone()]),
        (None, None) => Ok(Vec::new()),
    }
}

/// The base URL of a mailing's tracked links: the verified tracking domain
/// of its `from` domain (or of that domain's registrable domain), with the
/// scheme, port and path of `base_url`; else `base_url` itself
/// (docs/domains.md, "Tracking domains").
async fn tracking_base(pool: &MySqlPool, base_url: &str, from: &str) -> Result<String, BuildError> {
    let Some(domain) = from_domain(from) else {
        return Ok(base_url.to_owned());
    };
    let mut host = tracking_domains::host_for_sender(pool, &domain).await?;
    let site = crate::letter::registrable_domain(&domain);
    if host.is_none() && site != domain {
        host = tracking_domains::host_for_sender(pool, &site).await?;
    }
    let Some(host) = host else {
        return Ok(base_url.to_owned());
    };
    let Ok(mut url) = url::Url::parse(base_url) else {
        return Ok(base_url.to_owned());
    };
    if url.set_host(Some(&host)).is_err() {
        return Ok(base_url.to_owned());
    }
    let text = url.as_str();
    // `Url` adds a `/` to an empty path; the base URL is written without one.
    Ok(if base_url.ends_with('/') {
        text.to_owned()
    } else {
        text.trim_end_matches('/').to_owned()
    })
}

/// The lowercase domain of a `from` mailbox (`News <news@Brand.example>`).
fn from_domain(from: &str) -> Option<String> {
    let mailbox: lettre::message::Mailbox = from.parse().ok()?;
    Some(
        mailbox
            .email
            .domain()
            .trim_end_matches('.')
            .to_ascii_lowercase(),
    )
}

/// Load and check the mailing, and the seal key it is built with: a key
/// the database does not know, or not its current one, is refused here,
/// before anything is written (`store::seal_keys`).
async fn load_mailing(
    pool: &MySqlPool,
    options: &BuildOptions,
) -> Result<MailingContext, BuildError> {
    let mailing = Mailing::load(&options.mailing)?;
    let secrets = seal_keys::RingSecrets {
        current: options.secret.clone(),
        previous: Vec::new(),
        new_secret: options.new_secret,
    };
    let ring = seal_keys::open_ring(pool, &secrets, seal_keys::Purpose::Build).await?;
    let seal = ring.ring.current().clone();
    let creative = mailing.html_source.clone();
    let base_url = tracking_base(pool, &options.base_url, &mailing.from).await?;
    let mut ctx = MailingContext::prepare(mailing, &base_url, options.max_letter_bytes, seal)
        .map_err(|source| match source {
            compose::PrepareError::TooBig { size, limit } => BuildError::TooBig {
                path: creative.clone(),
                size,
                limit,
                reason: "raise the limit with --max-letter-bytes",
            },
            source => BuildError::Template {
                path: options.mailing.clone(),
                source,
            },
        })?;
    if options.letter_by_letter {
        ctx = ctx.without_plans();
    }
    if let Some(domain) = &options.bounce_domain {
        compose::check_bounce_domain(domain).map_err(BuildError::BounceDomain)?;
    }
    ctx.set_bounce_domain(options.bounce_domain.clone());
    Ok(ctx)
}

/// Make sure today's partitions exist (every mode stores at least the
/// unsubscribe rows) and save the creative (the dashboard's click map),
/// the mailing's tracking mode and its link templates.
async fn store_mailing(
    pool: &MySqlPool,
    options: &BuildOptions,
    mut ctx: MailingContext,
) -> Result<Arc<MailingContext>, BuildError> {
    let creative = ctx.mailing.html_source.clone();
    // Every mode stores rows (at least the unsubscribe link), so the
    // creative must fit one statement and today's partitions must exist.
    let room = stats::largest_creative(pool).await?;
    if ctx.mailing.html.len() > room {
        return Err(BuildError::TooBig {
            path: creative,
            size: ctx.mailing.html.len(),
            limit: room,
            reason: "the database cannot store a larger creative in one statement \
                     (max_allowed_packet, or the mailings.html column's 16 MB)",
        });
    }
    ensure_partitions(pool).await?;
    let mailing = &ctx.mailing;
    if let Some(existing) = stats::colliding_mailing(pool, &mailing.mailing_id).await? {
        return Err(BuildError::MailingIdCollides {
            path: options.mailing.clone(),
            id: mailing.mailing_id.clone(),
            existing,
        });
    }
    stats::save_mailing(pool, &mailing.mailing_id, &mailing.subject, &mailing.html).await?;
    stats::save_track_mode(pool, &mailing.mailing_id, mailing.track.as_str()).await?;
    let list_manage = mailing.list_manage_url.as_deref();
    stats::save_list_manage_url(pool, &mailing.mailing_id, list_manage).await?;
    // Stored before any letter: a resumed build gets the same ids back.
    let keys = ctx.template_keys();
    let today = chrono::Utc::now().date_naive();
    let ids = link_templates::intern(pool, &ctx.mailing.mailing_id, &keys, today).await?;
    ctx.set_templates(ids);
    Ok(Arc::new(ctx))
}

/// A build in progress: what earlier runs stored (to resume), the rejects
/// file, the id sequence and the running summary.
struct Job<'a> {
    pool: &'a MySqlPool,
    ctx: Arc<MailingContext>,
    /// Letter ids of addresses an earlier run already built.
    existing: HashMap<String, u64>,
    /// An earlier run stored rows or counted letters of this mailing: the
    /// count is made again from the rows at the end (see
    /// [`stats::recount_letters_built`]).
    resumed: bool,
    images: Arc<ImageTokens>,
    rejects: RejectsFile,
    sequence: Sequence,
    summary: Summary,
    /// First line of each address seen, to reject duplicates.
    seen: HashMap<String, u64>,
    /// The letters are delivered: keep them beside their output lines.
    keep_letters: bool,
}

impl<'a> Job<'a> {
    async fn start(
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
    async fn build(
        &mut self,
        entries: Vec<recipients::Entry>,
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
    fn screen(&mut self, entries: Vec<recipients::Entry>) -> Result<Vec<Recipient>, BuildError> {
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
                Ok((Built { letter, new_links }, encoded)) => {
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

/// Today's and tomorrow's partitions, in case the job runs past midnight.
async fn ensure_partitions(pool: &MySqlPool) -> Result<(), StoreError> {
    partitions::ensure_ahead(pool, 1).await.map(drop)
}

/// Read up to `size` entries on a blocking thread (the file reader is
/// synchronous); the reader comes back for the next batch.
async fn read_batch(
    mut reader: Recipients,
    size: usize,
    path: &Path,
) -> Result<(Vec<recipients::Entry>, Recipients), BuildError> {
    tokio::task::spawn_blocking(move || {
        let mut entries = Vec::with_capacity(size);
        for entry in reader.by_ref().take(size) {
            entries.push(entry?);
        }
        Ok::<_, std::io::Error>((entries, reader))
    })
    .await
    .map_err(|e| BuildError::Internal(format!("reader thread: {e}")))?
    .map_err(|source| BuildError::Recipients {
        path: path.to_owned(),
        source,
    })
}

async fn stored_tokens(
    pool: &MySqlPool,
    mailing_id: &str,
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

/// A recipient's line and address, and its letter with the letter's output
/// line, or why it has none.
type BuiltEntry = (u64, String, Result<(Built, Vec<u8>), Reject>);

/// Build a batch of letters on `workers` threads, in input order, each
/// with its output line: the JSON line is half a planned letter's CPU, so
/// it is made here on every core rather than by the one thread that
/// writes the output.
async fn build_batch(
    ctx: Arc<MailingContext>,
    jobs: Vec<(Recipient, u64)>,
    stored: HashMap<u64, StoredTokens>,
    images: Arc<ImageTokens>,
    opted_out: HashSet<String>,
    workers: usize,
    keep_letters: bool,
) -> Result<Vec<BuiltEntry>, BuildError> {
    let made_at = chrono::Utc::now();
    tokio::task::spawn_blocking(move || {
        let chunk = jobs.len().div_ceil(workers.max(1)).max(1);
        std::thread::scope(|scope| {
            let handles: Vec<_> = jobs
                .chunks(chunk)
                .map(|part| {
                    let (ctx, stored, images, opted_out) = (&ctx, &stored, &images, &opted_out);
                    scope.spawn(move || {
                        part.iter()
                            .map(|(recipient, letter_id)| {
                                let opted_out = opted_out.contains(recipient.email.as_str());
                                let result = build_one(
                                    ctx,
                                    recipient,
                                    *letter_id,
                                    stored.get(letter_id),
                                    images,
                                    made_at,
                                    letter_mode(&ctx.mailing, recipient, opted_out),
                                )
                                .map(|mut built| {
                                    let line = output::encoded_line(&built.letter);
                                    if !keep_letters {
                                        // Only the line is written out: free
                                        // the letter's text now.
                                        built.letter.html = String::new();
                                        built.letter.message = String::new();
                                    }
                                    (built, line)
                                });
                                (recipient.line, recipient.email.as_str().to_owned(), result)
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut out = Vec::with_capacity(jobs.len());
            for handle in handles {
                match handle.join() {
                    Ok(part) => out.extend(part),
                    Err(_) => {
                        return Err(BuildError::Internal(
                            "a letter-building thread panicked".into(),
                        ))
                    }
                }
            }
            Ok(out)
        })
    })
    .await
    .map_err(|e| BuildError::Internal(format!("builder thread: {e}")))?
}

/// One letter, a panic included as its rejection. Every field of the input
/// is checked before it reaches the HTML rewriter, the text renderer and
/// the MIME builder, so no input is known to panic them; but they are
/// third-party code fed arbitrary text, and one letter's bug must cost that
/// letter, named in the rejects file, not the mailing of every other row.
/// The shared image-token map survives a panic (see [`ImageTokens`]).
fn build_one(
    ctx: &MailingContext,
    recipient: &Recipient,
    letter_id: u64,
    stored: Option<&StoredTokens>,
    images: &ImageTokens,
    made_at: chrono::DateTime<chrono::Utc>,
    mode: TrackMode,
) -> Result<Built, Reject> {
    let build = || build_letter(ctx, recipient, letter_id, stored, images, made_at, mode);
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(build)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(line = recipient.line, %message, "building a letter panicked");
        Err(Reject::Panicked(message))
    })
}

/// The writer: commit a batch's rows, then hand its letters to the output
/// thread, which appends them and then passes them to the delivery task
/// (when delivering). Returns the sender for batches and the task's handle.
///
/// The three stages overlap, in order: batch N+1's rows are inserted while
/// batch N's letters are written out and while batch N+2 is built. A
/// letter reaches the output (and delivery) only after its rows are
/// committed: a tracked link in a letter always resolves.
fn spawn_writer(
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
        let written = output
            .await
            .map_err(|e| BuildError::Internal(format!("output thread: {e}")))?;
        stored?;
        written?.finish()?;
        match delivering {
            Some(handle) => handle
                .await
                .map_err(|e| BuildError::Internal(format!("delivery task: {e}")))?,
            None => Ok(handover::Delivered::default()),
        }
    });
    (sender, handle)
}

/// The output thread: appends each committed batch's lines (blocking file
/// or terminal writes, off the runtime's workers and off the inserts'
/// path), then hands the letters to delivery. Returns the sink when every
/// batch sent was written and handed on.
fn spawn_output(
    mut sink: LetterSink,
    to_deliver: Option<tokio::sync::mpsc::Sender<Vec<compose::Letter>>>,
) -> (
    tokio::sync::mpsc::Sender<Committed>,
    tokio::task::JoinHandle<Result<LetterSink, BuildError>>,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Committed>(1);
    let handle = tokio::task::spawn_blocking(move || {
        while let Some(batch) = receiver.blocking_recv() {
            sink.write(&batch.lines)?;
            drop(batch.lines);
            if let Some(to_deliver) = &to_deliver {
                if to_deliver.blocking_send(batch.letters).is_err() {
                    // Delivery failed; the writer returns its error.
                    return Ok(sink);
                }
            }
        }
        Ok(sink)
    });
    (sender, handle)
}

/// The delivery task: delivers each stored batch's letters in turn.
fn spawn_delivery(
    delivery: handover::Delivery,
) -> (
    tokio::sync::mpsc::Sender<Vec<compose::Letter>>,
    tokio::task::JoinHandle<Result<handover::Delivered, BuildError>>,
) {
    let (sender, mut receiver) = tokio::sync::mpsc::channel::<Vec<compose::Letter>>(1);
    let handle = tokio::spawn(async move {
        let mut delivered = handover::Delivered::default();
        delivery.recover_delivery_log().await?;
        while let Some(letters) = receiver.recv().await {
            delivery.deliver_batch(&letters, &mut delivered).await?;
        }
        delivery.remove_delivery_log()?;
        Ok(delivered)
    });
    (sender, handle)
}

/// Insert a batch's rows in one transaction; if a day's partition is
/// missing (the job crossed midnight twice), create it and try once more.
async fn store_rows(pool: &MySqlPool, rows: &[links::NewLink]) -> Result<(), BuildError> {
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

/// Letters composed on the CPU alone: no database, no recipients file, no
/// delivery. What the builder's CPU side can do (`bench_build`'s part 0,
/// both paths in one run); tokens are sealed with a throwaway key.
pub struct Composer {
    ctx: MailingContext,
    images: ImageTokens,
}

impl Composer {
    /// The mailing file as `build` reads it; `letter_by_letter` turns the
    /// mailing's plan off.
    pub fn load(
        mailing: &Path,
        base_url: &str,
        letter_by_letter: bool,
    ) -> Result<Composer, BuildError> {
        let loaded = Mailing::load(mailing).map_err(BuildError::Mailing)?;
        let seal = crate::token::TokenSeal::derive(None, &rand::random::<[u8; 16]>(), 0);
        let ctx = MailingContext::prepare(loaded, base_url, DEFAULT_MAX_LETTER_BYTES, seal)
            .map_err(|source| BuildError::Template {
                path: mailing.to_owned(),
                source,
            })?;
        let ctx = if letter_by_letter {
            ctx.without_plans()
        } else {
            ctx
        };
        Ok(Composer {
            ctx,
            images: ImageTokens::default(),
        })
    }

    /// Whether the mailing's tracked letters are filled in from its plan.
    pub fn is_planned(&self) -> bool {
        self.ctx.is_planned(TrackMode::All)
    }

    /// Why its tracked letters are not planned (`None`: they are).
    pub fn plan_reason(&self) -> Option<String> {
        self.ctx.plan_reason(TrackMode::All)
    }

    /// One recipient's letter (`fields` as a recipients file's line, with
    /// `email`), as the output's JSON line; `Err` is the rejection.
    pub fn letter_line(
        &self,
        fields: serde_json::Map<String, serde_json::Value>,
        letter_id: u64,
    ) -> Result<String, String> {
        let raw = fields
            .get("email")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let email = crate::address::Email::parse(raw).map_err(|e| e.to_string())?;
        let recipient = Recipient {
            line: letter_id,
            email,
            fields,
        };
        let mode = letter_mode(&self.ctx.mailing, &recipient, false);
        let built = build_letter(
            &self.ctx,
            &recipient,
            letter_id,
            None,
            &self.images,
            chrono::Utc::now(),
            mode,
        )
        .map_err(|e| e.to_string())?;
        let mut line = Vec::new();
        output::letter_line(&built.letter, &mut line);
        String::from_utf8(line).map_err(|e| e.to_string())
    }
}
