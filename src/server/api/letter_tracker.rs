//! [`LetterTracking`]: the one [`LetterTracker`] of `POST /api/letters`,
//! made on the first call (not at start: a server that never tracks a
//! letter never opens its seal key ring for sealing) and made again on the
//! first call of each UTC day. Making it opens the seal key ring as `build`
//! and the relay do (`seal_keys::Purpose::Build`): the server's
//! `LINKTRACK_SECRET` must be the database's current key, and the day is
//! recorded as one its key sealed on, which `secrets rotate` and `serve`
//! read to know which keys' links are live. A ring the database refuses is
//! a 503 naming the reason; the next call tries again.

use super::error::ApiError;
use crate::builder::tracked_letters::{LetterTracker, LetterTrackerSettings};
use crate::store::seal_keys::{self, Purpose, RingSecrets};
use crate::store::StoreError;
use chrono::NaiveDate;
use sqlx::MySqlPool;
use std::sync::Arc;
use tokio::sync::Mutex;

/// What the API's letters are tracked with. Cheap to clone.
#[derive(Clone)]
pub(crate) struct LetterTracking(Arc<Inner>);

struct Inner {
    pool: MySqlPool,
    /// `LINKTRACK_SECRET` (unset is a key too: the database's own).
    secret: Option<String>,
    settings: LetterTrackerSettings,
    /// Today's tracker and its UTC day.
    today: Mutex<Option<(NaiveDate, Arc<LetterTracker>)>>,
}

impl LetterTracking {
    /// Letters tracked with links under `base_url` (a sender's tracking
    /// domain instead, when it has one) and, with a `bounce_domain`, each
    /// its VERP envelope sender.
    pub(crate) fn new(
        pool: MySqlPool,
        secret: Option<String>,
        base_url: String,
        bounce_domain: Option<String>,
    ) -> LetterTracking {
        LetterTracking(Arc::new(Inner {
            pool,
            secret,
            settings: LetterTrackerSettings {
                base_url,
                bounce_domain,
                max_letter_bytes: crate::builder::DEFAULT_MAX_LETTER_BYTES,
            },
            today: Mutex::new(None),
        }))
    }

    /// Today's tracker, made (the ring opened) on the day's first call.
    pub(crate) async fn tracker(&self) -> Result<Arc<LetterTracker>, ApiError> {
        let today = chrono::Utc::now().date_naive();
        let mut held = self.0.today.lock().await;
        if let Some((day, tracker)) = held.as_ref() {
            if *day == today {
                return Ok(Arc::clone(tracker));
            }
        }
        let secrets = RingSecrets {
            current: self.0.secret.clone(),
            previous: Vec::new(),
            new_secret: false,
        };
        let opened = seal_keys::open_ring(&self.0.pool, &secrets, Purpose::Build)
            .await
            .map_err(|err| match err {
                StoreError::SealKey(refusal) => ApiError::CannotSeal(format!(
                    "this server cannot seal letters' tokens: {refusal} (docs/token.md, \
                     \"Rotating the secret\"); restart it with the database's current \
                     LINKTRACK_SECRET"
                )),
                other => ApiError::Store(other),
            })?;
        let tracker = Arc::new(LetterTracker::new(
            self.0.pool.clone(),
            opened.ring.current().clone(),
            self.0.settings.clone(),
        ));
        *held = Some((today, Arc::clone(&tracker)));
        Ok(tracker)
    }
}
