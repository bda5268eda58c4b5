//! One accepted message made into the messages the relay forwards: one
//! per recipient, its HTML parts tracked as `build` tracks a letter
//! (`builder::tracked_parts`, the same rewriter and rules), its rows
//! stored before it is spooled, `List-Unsubscribe` and
//! `List-Unsubscribe-Post` added when absent, the envelope sender the
//! letter's VERP address when a bounce domain is set, the
//! `X-Linktrack-*` fields removed. A message without an HTML part goes on
//! untouched (but for those fields).

use super::headers::{edit_top_fields, field_value};
use super::mime::{html_parts, replace_parts, HtmlPart, MimeError};
use crate::builder::letter_tokens::ImageTokens;
use crate::builder::mailing::Mailing;
use crate::builder::mailing_context::{MailingContext, PrepareError};
use crate::builder::reject::Reject;
use crate::builder::track_mode::{TrackMode, UnknownMode};
use crate::builder::tracked_parts::{
    fixed_template_keys, store_letter_rows, track_parts, tracking_base_for,
};
use crate::builder::{BuildError, LETTER_SEQUENCE};
use crate::mailing_id::{MailingId, MailingIdError};
use crate::store::link_templates::{self, TemplateKey};
use crate::store::sequences::Sequence;
use crate::store::{partitions, stats, StoreError};
use crate::token::TokenSeal;
use sqlx::MySqlPool;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Mutex;

/// The fields a sender sets for the relay, removed before forwarding.
pub(crate) const MAILING_FIELD: &str = "x-linktrack-mailing";
pub(crate) const TAGS_FIELD: &str = "x-linktrack-tags";
pub(crate) const TRACK_FIELD: &str = "x-linktrack-track";
const OUR_FIELDS: [&str; 3] = [MAILING_FIELD, TAGS_FIELD, TRACK_FIELD];

/// One recipient of an accepted message.
#[derive(Debug, Clone)]
pub(crate) struct Recipient {
    pub email: String,
    /// Opted out of tracking: the message goes untracked.
    pub opted_out: bool,
}

/// One message to forward: its envelope and data.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Outgoing {
    pub from: String,
    pub to: String,
    #[serde(skip)]
    pub data: Vec<u8>,
}

/// Why a message is refused after DATA: permanent (5xx) or not (4xx).
#[derive(Debug, thiserror::Error)]
pub(crate) enum TrackError {
    #[error("{0}")]
    Mime(#[from] MimeError),
    #[error("X-Linktrack-Mailing: {0}")]
    MailingId(#[from] MailingIdError),
    #[error("X-Linktrack-Track: {0}")]
    Mode(#[from] UnknownMode),
    #[error("the message cannot be tracked: {0}")]
    Prepare(#[from] PrepareError),
    #[error("the message cannot be tracked: {0}")]
    Letter(#[from] Reject),
    #[error("the database: {0}")]
    Store(#[from] StoreError),
    #[error("storing the links: {0}")]
    Rows(#[from] BuildError),
}

impl TrackError {
    /// A fault of the message (5xx) rather than of the relay's database (4xx).
    pub(crate) fn is_permanent(&self) -> bool {
        !matches!(self, TrackError::Store(_) | TrackError::Rows(_))
    }
}

/// What the tracker is given once.
pub(crate) struct TrackerSettings {
    pub base_url: String,
    pub bounce_domain: Option<String>,
    pub default_mailing: Option<String>,
    pub max_letter_bytes: usize,
}

/// Tracks accepted messages; one per relay, shared by its sessions.
pub(crate) struct Tracker {
    pool: MySqlPool,
    seal: TokenSeal,
    settings: TrackerSettings,
    sequence: Mutex<Sequence>,
    /// Mailings this process has stored, with what their letters share.
    mailings: Mutex<HashMap<String, Arc<KnownMailing>>>,
}

/// A mailing stored once per process: its fixed link templates' ids and
/// the image tokens its letters share.
struct KnownMailing {
    templates: HashMap<TemplateKey, u32>,
    images: ImageTokens,
}

/// Letter ids reserved per round trip (a relay takes them one by one).
const ID_BLOCK: u64 = 100;

impl Tracker {
    pub(crate) fn new(pool: MySqlPool, seal: TokenSeal, settings: TrackerSettings) -> Tracker {
        Tracker {
            pool,
            seal,
            settings,
            sequence: Mutex::new(Sequence::new(LETTER_SEQUENCE, ID_BLOCK)),
            mailings: Mutex::new(HashMap::new()),
        }
    }

    /// The messages to forward for `raw` sent by `from` to `recipients`;
    /// their rows are committed when this returns.
    pub(crate) async fn track(
        &self,
        from: &str,
        recipients: &[Recipient],
        raw: &[u8],
    ) -> Result<Vec<Outgoing>, TrackError> {
        let parts = html_parts(raw)?;
        let mailing = self.mailing_of(raw, from)?;
        if parts.is_empty() {
            let data = edit_top_fields(raw, &OUR_FIELDS, &[]);
            return Ok(recipients
                .iter()
                .map(|r| Outgoing {
                    from: from.to_owned(),
                    to: r.email.clone(),
                    data: data.clone(),
                })
                .collect());
        }
        let known = self.known_mailing(&mailing, &parts[0].html).await?;
        let base_url =
            tracking_base_for(&self.pool, &self.settings.base_url, &mailing.from).await?;
        let mut ctx = MailingContext::prepare_unplanned(
            mailing,
            &base_url,
            self.settings.max_letter_bytes,
            self.seal.clone(),
        )?;
        ctx.set_templates(known.templates.clone());
        ctx.set_bounce_domain(self.settings.bounce_domain.clone());
        let has_unsubscribe = field_value(raw, "list-unsubscribe").is_some();
        let mut rows = Vec::new();
        let mut out = Vec::with_capacity(recipients.len());
        let html: Vec<&str> = parts.iter().map(|p| p.html.as_str()).collect();
        for recipient in recipients {
            let letter_id = self.sequence.lock().await.next(&self.pool).await?;
            let mode = if recipient.opted_out {
                TrackMode::None
            } else {
                ctx.mailing.track
            };
            let now = chrono::Utc::now();
            let tracked = track_parts(
                &ctx,
                &known.images,
                &recipient.email,
                letter_id,
                mode,
                now,
                &html,
            )?;
            rows.extend(tracked.rows);
            let added: Vec<String> = if has_unsubscribe {
                Vec::new()
            } else {
                tracked
                    .headers
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect()
            };
            let data = letter_message(raw, &parts, &tracked.html_parts, &added);
            out.push(Outgoing {
                from: tracked.envelope_from.unwrap_or_else(|| from.to_owned()),
                to: recipient.email.clone(),
                data,
            });
        }
        rows.extend(known.images.take_new_rows());
        store_letter_rows(&self.pool, &rows).await?;
        Ok(out)
    }

    /// The mailing a message belongs to, from its `X-Linktrack-*` fields
    /// and the relay's defaults.
    fn mailing_of(&self, raw: &[u8], envelope_from: &str) -> Result<Mailing, TrackError> {
        let id = match field_value(raw, MAILING_FIELD) {
            Some(id) => id,
            None => self.settings.default_mailing.clone().unwrap_or_else(|| {
                format!(
                    "relay-{}",
                    chrono::Utc::now().date_naive().format("%Y-%m-%d")
                )
            }),
        };
        let track = match field_value(raw, TRACK_FIELD) {
            Some(mode) => TrackMode::parse(&mode)?,
            None => TrackMode::default(),
        };
        let tags = field_value(raw, TAGS_FIELD)
            .map(|tags| {
                tags.split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let from = field_value(raw, "from")
            .filter(|from| from.parse::<lettre::message::Mailbox>().is_ok())
            .unwrap_or_else(|| envelope_from.to_owned());
        Ok(Mailing {
            mailing_id: MailingId::parse(&id)?,
            subject: field_value(raw, "subject").unwrap_or_default(),
            from,
            html: String::new(),
            html_source: PathBuf::from("relay"),
            pool: "default".to_owned(),
            tags,
            personalize: false,
            proxy_images: true,
            track,
            stop_tracking_footer: false,
            honeypot: true,
            filter_safe: true,
            list_manage_url: None,
            utm: None,
        })
    }

    /// The mailing as this process stored it, storing it the first time:
    /// today's partitions, its subject and (first) creative for the
    /// dashboard, its mode, its fixed link templates.
    async fn known_mailing(
        &self,
        mailing: &Mailing,
        first_html: &str,
    ) -> Result<Arc<KnownMailing>, TrackError> {
        let key = mailing.mailing_id.as_str().to_owned();
        let mut known = self.mailings.lock().await;
        if let Some(found) = known.get(&key) {
            return Ok(Arc::clone(found));
        }
        partitions::ensure_ahead(&self.pool, 1).await?;
        let id = &mailing.mailing_id;
        stats::save_mailing(&self.pool, id, &mailing.subject, first_html).await?;
        stats::save_track_mode(&self.pool, id, mailing.track.as_str()).await?;
        let sender = crate::builder::tracked_parts::sender_domain(&mailing.from);
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

/// One recipient's message: the tracked parts in place, our fields out,
/// the unsubscribe fields in when `added`.
fn letter_message(raw: &[u8], parts: &[HtmlPart], html: &[String], added: &[String]) -> Vec<u8> {
    let with_parts = replace_parts(raw, parts, html);
    edit_top_fields(&with_parts, &OUR_FIELDS, added)
}
