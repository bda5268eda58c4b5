//! Letters another platform composed, tracked as `build` tracks its own,
//! one call per message: the mailing stored the first time this process
//! meets it (its partitions, subject, first creative, mode, sender and
//! fixed link templates), a letter id per recipient, each recipient's HTML parts
//! tracked ([`super::tracked_parts`]), and every row stored before the
//! letters are handed back: in one transaction with the rows of the
//! letters other callers tracked at the same moment (one writer task
//! takes whatever is waiting: a group commit, so concurrent SMTP sessions
//! share a commit instead of queueing for one each). The relay
//! (`relay/track.rs`, for messages over SMTP) and `POST /api/letters`
//! (`server/api/letters.rs`) both track through one [`LetterTracker`].

use super::error::BuildError;
use super::job::LETTER_SEQUENCE;
use super::letter_tokens::ImageTokens;
use super::mailing::Mailing;
use super::mailing_context::{MailingContext, PrepareError};
use super::reject::Reject;
use super::track_mode::TrackMode;
use super::tracked_parts::{
    fixed_template_keys, store_letter_rows, track_parts, tracking_base_for,
};
use crate::store::link_templates::{self, TemplateKey};
use crate::store::links::NewLink;
use crate::store::sequences::Sequence;
use crate::store::{partitions, stats, StoreError};
use crate::token::TokenSeal;
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex};

/// What the tracker is given once.
#[derive(Debug, Clone)]
pub(crate) struct LetterTrackerSettings {
    /// Where tracked URLs point (`LINKTRACK_BASE_URL`), unless the sender
    /// has a tracking domain.
    pub(crate) base_url: String,
    /// `LINKTRACK_BOUNCE_DOMAIN`: each letter gets its VERP address there.
    pub(crate) bounce_domain: Option<String>,
    /// The largest tracked letter.
    pub(crate) max_letter_bytes: usize,
}

/// One recipient of a letter.
#[derive(Debug, Clone)]
pub(crate) struct LetterRecipient {
    pub(crate) email: String,
    /// Opted out of tracking: the letter goes untracked.
    pub(crate) opted_out: bool,
}

/// One recipient's tracked letter.
#[derive(Debug, Clone)]
pub(crate) struct TrackedLetter {
    pub(crate) letter_id: u64,
    pub(crate) email: String,
    /// The HTML parts, tracked, in the order given.
    pub(crate) html_parts: Vec<String>,
    /// `List-Unsubscribe` and `List-Unsubscribe-Post`.
    pub(crate) headers: BTreeMap<String, String>,
    /// The letter's VERP envelope sender, with a bounce domain.
    pub(crate) envelope_from: Option<String>,
    /// The mode it was tracked in (`none` for a reader who opted out).
    pub(crate) mode: TrackMode,
    /// The rows stored for it alone (a mailing's shared rows aside).
    pub(crate) rows: usize,
    /// Each tracked click link, as written and as tracked.
    pub(crate) links: Vec<(String, String)>,
}

/// One letter of [`LetterTracker::track_each`]: its own mailing, one
/// recipient, its HTML parts.
#[derive(Debug, Clone)]
pub(crate) struct OneLetter<'a> {
    pub(crate) mailing: Mailing,
    pub(crate) recipient: LetterRecipient,
    pub(crate) html: Vec<&'a str>,
}

/// What makes two letters' contexts the same: the mailing and what of
/// it their tracking reads (sender, mode, tags).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ContextKey {
    mailing_id: String,
    from: String,
    track: TrackMode,
    tags: Vec<String>,
}

impl ContextKey {
    fn of(mailing: &Mailing) -> ContextKey {
        ContextKey {
            mailing_id: mailing.mailing_id.as_str().to_owned(),
            from: mailing.from.clone(),
            track: mailing.track,
            tags: mailing.tags.clone(),
        }
    }
}

/// Why letters could not be tracked.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrackLetterError {
    #[error("the letter cannot be tracked: {0}")]
    Prepare(#[from] PrepareError),
    #[error("the letter cannot be tracked: {0}")]
    Letter(#[from] Reject),
    #[error("the database: {0}")]
    Store(#[from] StoreError),
    #[error("storing the links: {0}")]
    Rows(#[from] BuildError),
    /// The shared writer's transaction failed; every caller in it gets
    /// the one error.
    #[error("storing the links: {0}")]
    SharedRows(#[source] Arc<BuildError>),
    #[error("storing the links: the row writer stopped")]
    WriterStopped,
}

impl TrackLetterError {
    /// A fault of the letter (refuse it) rather than of the database (try
    /// again later).
    pub(crate) fn is_permanent(&self) -> bool {
        !matches!(
            self,
            TrackLetterError::Store(_)
                | TrackLetterError::Rows(_)
                | TrackLetterError::SharedRows(_)
                | TrackLetterError::WriterStopped
        )
    }
}

/// Tracks letters; one per process, shared by its callers.
pub(crate) struct LetterTracker {
    pool: MySqlPool,
    seal: TokenSeal,
    settings: LetterTrackerSettings,
    sequence: Mutex<Sequence>,
    /// Mailings this process has stored, with what their letters share.
    mailings: Mutex<HashMap<String, Arc<KnownMailing>>>,
    /// Each `From`'s tracking base URL (its sender's tracking domain),
    /// read again after [`BASE_URL_TTL`].
    base_urls: moka::future::Cache<String, String>,
    /// The row writer's queue (`None` outside a Tokio runtime: each call
    /// stores its own rows).
    rows: Option<mpsc::Sender<WaitingRows>>,
}

/// One caller's rows and where the writer says they are stored.
type WaitingRows = (Vec<NewLink>, oneshot::Sender<Result<(), Arc<BuildError>>>);

/// The most rows one shared transaction takes.
const ROWS_PER_COMMIT: usize = 5_000;

/// How long a sender's tracking base URL is used before it is read again:
/// a tracking domain added for a sender reaches its letters within this.
const BASE_URL_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// A mailing stored once per process: its fixed link templates' ids and
/// the image tokens its letters share.
struct KnownMailing {
    templates: HashMap<TemplateKey, u32>,
    images: ImageTokens,
}

/// Letter ids reserved per round trip (letters come one message at a time).
const ID_BLOCK: u64 = 100;

impl LetterTracker {
    pub(crate) fn new(
        pool: MySqlPool,
        seal: TokenSeal,
        settings: LetterTrackerSettings,
    ) -> LetterTracker {
        let rows = tokio::runtime::Handle::try_current().ok().map(|runtime| {
            let (sender, waiting) = mpsc::channel(1024);
            runtime.spawn(write_rows(pool.clone(), waiting));
            sender
        });
        LetterTracker {
            pool,
            seal,
            settings,
            sequence: Mutex::new(Sequence::new(LETTER_SEQUENCE, ID_BLOCK)),
            mailings: Mutex::new(HashMap::new()),
            base_urls: moka::future::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(BASE_URL_TTL)
                .build(),
            rows,
        }
    }

    /// Store one call's rows, in the writer's next transaction.
    async fn store(&self, rows: Vec<NewLink>) -> Result<(), TrackLetterError> {
        let Some(writer) = &self.rows else {
            return Ok(store_letter_rows(&self.pool, &rows).await?);
        };
        let (stored, answer) = oneshot::channel();
        if let Err(mpsc::error::SendError((rows, _))) = writer.send((rows, stored)).await {
            return Ok(store_letter_rows(&self.pool, &rows).await?);
        }
        match answer.await {
            Ok(result) => result.map_err(TrackLetterError::SharedRows),
            Err(_) => Err(TrackLetterError::WriterStopped),
        }
    }

    /// [`tracking_base_for`] the letter's `From`, read once per
    /// [`BASE_URL_TTL`] (the relay and the letters API track one message
    /// at a time: two statements a message otherwise).
    async fn base_url_for(&self, from: &str) -> Result<String, TrackLetterError> {
        if let Some(found) = self.base_urls.get(from).await {
            return Ok(found);
        }
        let base_url = tracking_base_for(&self.pool, &self.settings.base_url, from).await?;
        self.base_urls
            .insert(from.to_owned(), base_url.clone())
            .await;
        Ok(base_url)
    }

    /// Track `html` (a letter's HTML parts; at least one) of `mailing` for
    /// each of `recipients`; their rows are committed when this returns.
    pub(crate) async fn track(
        &self,
        mailing: Mailing,
        recipients: &[LetterRecipient],
        html: &[&str],
    ) -> Result<Vec<TrackedLetter>, TrackLetterError> {
        let known = self
            .known_mailing(&mailing, html.first().copied().unwrap_or_default())
            .await?;
        let base_url = self.base_url_for(&mailing.from).await?;
        let ctx = self.context(mailing, &base_url, &known)?;
        let mut rows = Vec::new();
        let mut letters = Vec::with_capacity(recipients.len());
        for recipient in recipients {
            let (letter, letter_rows) = self.track_one(&ctx, &known, recipient, html).await??;
            rows.extend(letter_rows);
            letters.push(letter);
        }
        rows.extend(known.images.take_new_rows());
        self.store(rows).await?;
        Ok(letters)
    }

    /// Track letters that each have their own mailing and recipient (`POST
    /// /api/letters`): a letter the rules refuse (its mailing's `from`, its
    /// HTML) gets its error in its place and the others go on; the rows of
    /// all the others are committed in one transaction when this returns.
    /// The database failing fails the call (nothing is committed).
    pub(crate) async fn track_each(
        &self,
        letters: Vec<OneLetter<'_>>,
    ) -> Result<Vec<Result<TrackedLetter, TrackLetterError>>, TrackLetterError> {
        let mut contexts: HashMap<ContextKey, (MailingContext, Arc<KnownMailing>)> = HashMap::new();
        let mut rows = Vec::new();
        let mut results = Vec::with_capacity(letters.len());
        for letter in letters {
            let key = ContextKey::of(&letter.mailing);
            if !contexts.contains_key(&key) {
                let first_html = letter.html.first().copied().unwrap_or_default();
                let known = self.known_mailing(&letter.mailing, first_html).await?;
                let base_url = self.base_url_for(&letter.mailing.from).await?;
                match self.context(letter.mailing, &base_url, &known) {
                    Ok(ctx) => contexts.insert(key.clone(), (ctx, known)),
                    Err(refused) => {
                        results.push(Err(refused));
                        continue;
                    }
                };
            }
            let Some((ctx, known)) = contexts.get(&key) else {
                continue; // inserted just above
            };
            match self
                .track_one(ctx, known, &letter.recipient, &letter.html)
                .await?
            {
                Ok((tracked, letter_rows)) => {
                    rows.extend(letter_rows);
                    results.push(Ok(tracked));
                }
                Err(refused) => results.push(Err(refused.into())),
            }
        }
        for (_, known) in contexts.values() {
            rows.extend(known.images.take_new_rows());
        }
        self.store(rows).await?;
        Ok(results)
    }

    /// The context a mailing's letters are tracked in.
    fn context(
        &self,
        mailing: Mailing,
        base_url: &str,
        known: &KnownMailing,
    ) -> Result<MailingContext, TrackLetterError> {
        let mut ctx = MailingContext::prepare_unplanned(
            mailing,
            base_url,
            self.settings.max_letter_bytes,
            self.seal.clone(),
        )?;
        ctx.set_templates(known.templates.clone());
        ctx.set_bounce_domain(self.settings.bounce_domain.clone());
        Ok(ctx)
    }

    /// One recipient's letter and its rows (not stored yet); `Err` inside:
    /// the rules refuse the letter.
    async fn track_one(
        &self,
        ctx: &MailingContext,
        known: &KnownMailing,
        recipient: &LetterRecipient,
        html: &[&str],
    ) -> Result<Result<(TrackedLetter, Vec<NewLink>), Reject>, StoreError> {
        let letter_id = self.sequence.lock().await.next(&self.pool).await?;
        let mode = if recipient.opted_out {
            TrackMode::None
        } else {
            ctx.mailing.track
        };
        let now = chrono::Utc::now();
        let tracked = match track_parts(
            ctx,
            &known.images,
            &recipient.email,
            letter_id,
            mode,
            now,
            html,
        ) {
            Ok(tracked) => tracked,
            Err(refused) => return Ok(Err(refused)),
        };
        let letter = TrackedLetter {
            letter_id,
            email: recipient.email.clone(),
            html_parts: tracked.html_parts,
            headers: tracked.headers,
            envelope_from: tracked.envelope_from,
            mode,
            rows: tracked.rows.len(),
            links: tracked.links,
        };
        Ok(Ok((letter, tracked.rows)))
    }

    /// The mailing as this process stored it, storing it the first time:
    /// today's partitions, its subject and (first) creative for the
    /// dashboard, its mode, its fixed link templates.
    async fn known_mailing(
        &self,
        mailing: &Mailing,
        first_html: &str,
    ) -> Result<Arc<KnownMailing>, TrackLetterError> {
        let key = mailing.mailing_id.as_str().to_owned();
        let mut known = self.mailings.lock().await;
        if let Some(found) = known.get(&key) {
            return Ok(Arc::clone(found));
        }
        partitions::ensure_ahead(&self.pool, 1).await?;
        let id = &mailing.mailing_id;
        stats::save_mailing(&self.pool, id, &mailing.subject, first_html).await?;
        stats::save_track_mode(&self.pool, id, mailing.track.as_str()).await?;
        let sender = super::tracked_parts::sender_domain(&mailing.from);
        stats::save_sender_domain(&self.pool, id, sender.as_deref()).await?;
        let today = chrono::Utc::now().date_naive();
        let templates =
            link_templates::intern(&self.pool, id, &fixed_template_keys(), today).await?;
        let entry = Arc::new(KnownMailing {
            templates,
            images: ImageTokens::default(),
        });
        known.insert(key, Arc::clone(&entry));
        Ok(entry)
    }
}

/// The row writer: each round takes every caller waiting (up to
/// [`ROWS_PER_COMMIT`] rows), stores their rows in one transaction and
/// answers each. Ends when the tracker is dropped.
async fn write_rows(pool: MySqlPool, mut waiting: mpsc::Receiver<WaitingRows>) {
    while let Some(first) = waiting.recv().await {
        let mut count = first.0.len();
        let mut round = vec![first];
        while count < ROWS_PER_COMMIT {
            match waiting.try_recv() {
                Ok(next) => {
                    count += next.0.len();
                    round.push(next);
                }
                Err(_) => break,
            }
        }
        let (rows, answers): (Vec<Vec<NewLink>>, Vec<_>) = round.into_iter().unzip();
        let result = store_letter_rows(&pool, &rows.concat())
            .await
            .map_err(Arc::new);
        metrics::histogram!("linktrack_tracked_letters_per_commit").record(answers.len() as f64);
        for answer in answers {
            let _ = answer.send(result.clone());
        }
    }
}
