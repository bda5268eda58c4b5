//! One accepted message made into the messages the relay forwards: one
//! per recipient, its HTML parts tracked as `build` tracks a letter
//! (`builder::tracked_parts`, the same rewriter and rules), its rows
//! stored before it is spooled, `List-Unsubscribe` and
//! `List-Unsubscribe-Post` added when absent, the envelope sender the
//! letter's VERP address when a bounce domain is set, the
//! `X-Linktrack-*` fields removed. A message without an HTML part goes on
//! untouched (but for those fields). Upstream DKIM signatures that this
//! breaks are removed, and the letters signed again where the relay has
//! the domain's key (`dkim.rs`).

use super::dkim::{Dkim, Plan};
use super::headers::{edit_top_fields, field_value};
use super::mime::{html_parts, replace_parts, HtmlPart, MimeError};
use crate::builder::mailing::Mailing;
use crate::builder::track_mode::{TrackMode, UnknownMode};
use crate::builder::tracked_letters::{LetterRecipient, LetterTracker, TrackLetterError};
use crate::mailing_id::{MailingId, MailingIdError};
use std::path::PathBuf;
use std::sync::Arc;

/// The fields a sender sets for the relay, removed before forwarding.
pub(crate) const MAILING_FIELD: &str = "x-linktrack-mailing";
pub(crate) const TAGS_FIELD: &str = "x-linktrack-tags";
pub(crate) const TRACK_FIELD: &str = "x-linktrack-track";
pub(crate) const POOL_FIELD: &str = "x-linktrack-pool";
const OUR_FIELDS: [&str; 4] = [MAILING_FIELD, TAGS_FIELD, TRACK_FIELD, POOL_FIELD];

/// One recipient of an accepted message.
pub(crate) type Recipient = LetterRecipient;

/// One message to forward: its envelope and data.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Outgoing {
    pub from: String,
    pub to: String,
    /// The sending pool (`--pools`) it goes out through; `None`: `--smtp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The tracked letter it is (its mailing and letter id), for its
    /// `deliveries` row; `None`: untracked (no HTML part).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub letter: Option<(String, u64)>,
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
    #[error("X-Linktrack-Pool: no pool {pool:?} in the pools file (pools: {known})")]
    UnknownPool { pool: String, known: String },
    #[error(transparent)]
    Letters(#[from] TrackLetterError),
    #[error("DKIM signing stopped short: {0}")]
    Signing(#[from] tokio::task::JoinError),
}

impl TrackError {
    /// A fault of the message (5xx) rather than of the relay's database (4xx).
    pub(crate) fn is_permanent(&self) -> bool {
        match self {
            TrackError::Letters(err) => err.is_permanent(),
            TrackError::Signing(_) => false,
            _ => true,
        }
    }
}

/// What the relay's tracker is given once, besides the letter tracker.
pub(crate) struct TrackerSettings {
    pub default_mailing: Option<String>,
    /// The pools of `--pools` (`None`: one downstream, `--smtp`).
    pub pools: Option<Vec<String>>,
    /// The pool of a message without `X-Linktrack-Pool`.
    pub default_pool: String,
}

/// Tracks accepted messages; one per relay, shared by its sessions.
pub(crate) struct Tracker {
    letters: Arc<LetterTracker>,
    settings: TrackerSettings,
    dkim: Arc<Dkim>,
}

impl Tracker {
    pub(crate) fn new(
        letters: Arc<LetterTracker>,
        settings: TrackerSettings,
        dkim: Arc<Dkim>,
    ) -> Tracker {
        Tracker {
            letters,
            settings,
            dkim,
        }
    }

    /// The messages to forward for `raw` sent by `from` to `recipients`,
    /// DKIM seen to; their rows are committed when this returns.
    pub(crate) async fn track(
        &self,
        from: &str,
        recipients: &[Recipient],
        raw: &[u8],
    ) -> Result<Vec<Outgoing>, TrackError> {
        let (letters, rewritten) = self.letters_of(from, recipients, raw).await?;
        let removed: Vec<&str> = OUR_FIELDS
            .into_iter()
            .filter(|name| field_value(raw, name).is_some())
            .collect();
        let plan = self.dkim.plan(raw, rewritten, &removed);
        if plan == Plan::AsIs {
            return Ok(letters);
        }
        let dkim = Arc::clone(&self.dkim);
        let sealed = tokio::task::spawn_blocking(move || {
            let mut letters = letters;
            dkim.seal(&plan, letters.iter_mut().map(|l| &mut l.data));
            letters
        });
        Ok(sealed.await?)
    }

    /// The letters of `raw`, and whether tracking rewrote their bodies.
    async fn letters_of(
        &self,
        from: &str,
        recipients: &[Recipient],
        raw: &[u8],
    ) -> Result<(Vec<Outgoing>, bool), TrackError> {
        let parts = html_parts(raw)?;
        let mailing = self.mailing_of(raw, from)?;
        let pool = self.pool_of(raw)?;
        if parts.is_empty() {
            let data = edit_top_fields(raw, &OUR_FIELDS, &[]);
            let letters = recipients
                .iter()
                .map(|r| Outgoing {
                    from: from.to_owned(),
                    to: r.email.clone(),
                    pool: pool.clone(),
                    letter: None,
                    data: data.clone(),
                })
                .collect();
            return Ok((letters, false));
        }
        let has_unsubscribe = field_value(raw, "list-unsubscribe").is_some();
        let html: Vec<&str> = parts.iter().map(|p| p.html.as_str()).collect();
        let mailing_id = mailing.mailing_id.as_str().to_owned();
        let tracked = self.letters.track(mailing, recipients, &html).await?;
        let letters = tracked
            .into_iter()
            .map(|letter| {
                let added: Vec<String> = if has_unsubscribe {
                    Vec::new()
                } else {
                    letter
                        .headers
                        .iter()
                        .map(|(k, v)| format!("{k}: {v}"))
                        .collect()
                };
                Outgoing {
                    from: letter.envelope_from.unwrap_or_else(|| from.to_owned()),
                    to: letter.email,
                    pool: pool.clone(),
                    letter: Some((mailing_id.clone(), letter.letter_id)),
                    data: letter_message(raw, &parts, &letter.html_parts, &added),
                }
            })
            .collect();
        Ok((letters, true))
    }

    /// The pool a message goes out through: `X-Linktrack-Pool`, else the
    /// relay's default; `None` without `--pools`.
    fn pool_of(&self, raw: &[u8]) -> Result<Option<String>, TrackError> {
        let Some(pools) = &self.settings.pools else {
            return Ok(None);
        };
        let pool =
            field_value(raw, POOL_FIELD).unwrap_or_else(|| self.settings.default_pool.clone());
        if !pools.contains(&pool) {
            return Err(TrackError::UnknownPool {
                pool,
                known: pools.join(", "),
            });
        }
        Ok(Some(pool))
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
}

/// One recipient's message: the tracked parts in place, our fields out,
/// the unsubscribe fields in when `added`.
fn letter_message(raw: &[u8], parts: &[HtmlPart], html: &[String], added: &[String]) -> Vec<u8> {
    let with_parts = replace_parts(raw, parts, html);
    edit_top_fields(&with_parts, &OUR_FIELDS, added)
}
