//! What the relay knows of a recipient at `RCPT TO`, held in memory so
//! that the answer needs no database round trip: the opt-outs and
//! erasures (the [`Privacy`] view every server keeps) and the suppression
//! list, followed from its own change log (`suppression_changes`) the way
//! [`Privacy`] follows `privacy_changes`: a full load at start and every
//! hour, then every [`PrivacySettings::refresh_every`] the rows logged
//! since, reading again those younger than [`PrivacySettings::settle`] so
//! that one committed late is not missed.
//!
//! The relay counts as a server for `erase`: it acknowledges the erasures
//! it holds, and a transaction holds its view ([`Privacy::begin_store`])
//! from `MAIL FROM` until its letters are stored, so `erase` scrubs only
//! once no recipient checked against an older view can still be written.

use crate::address::{AddressKey, Fingerprint};
use crate::locks::ReadWriteEvenPoisoned;
use crate::privacy::{FingerprintSet, Privacy, PrivacySettings, StoreGuard};
use crate::store::privacy::{self as store, Change, ChangeLog};
use crate::store::StoreError;
use crate::workers::Stopping;
use sqlx::MySqlPool;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Where one recipient stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    /// On the suppression list (in clear or, erased, by keyed hash).
    pub suppressed: bool,
    /// Erased (`linktrack erase`).
    pub erased: bool,
    /// Opted out of tracking.
    pub opted_out: bool,
}

/// The relay's view of its recipients; cheap to clone.
#[derive(Clone)]
pub(crate) struct Recipients {
    privacy: Privacy,
    suppressed: Arc<Suppressed>,
    key: AddressKey,
}

/// The suppression list as fingerprints, and how far its log was read.
struct Suppressed {
    settings: PrivacySettings,
    set: RwLock<FingerprintSet>,
    progress: tokio::sync::Mutex<Progress>,
}

#[derive(Default)]
struct Progress {
    /// Every change up to this id is applied and old enough not to be
    /// followed by a late-committing one.
    settled_id: u64,
    last_full: Option<Instant>,
    last_refresh: Option<Instant>,
    last_prune: Option<Instant>,
}

impl Recipients {
    /// Both views loaded (a database that cannot be read stops the start:
    /// the relay answers no `RCPT TO` without them).
    pub(crate) async fn load(
        pool: &MySqlPool,
        server: String,
        key: AddressKey,
        settings: PrivacySettings,
    ) -> Result<Recipients, StoreError> {
        let privacy = Privacy::new(server, settings);
        privacy.refresh(pool).await?;
        let recipients = Recipients {
            privacy,
            suppressed: Arc::new(Suppressed {
                settings,
                set: RwLock::new(FingerprintSet::default()),
                progress: tokio::sync::Mutex::new(Progress::default()),
            }),
            key,
        };
        recipients.suppressed.refresh(pool, &recipients.key).await?;
        Ok(recipients)
    }

    /// Where `email` stands: three lookups in memory.
    pub(crate) fn standing(&self, email: &str) -> Standing {
        let fingerprint = self.key.fingerprint(email);
        Standing {
            suppressed: self.suppressed.contains(fingerprint),
            erased: self.privacy.is_erased(fingerprint),
            opted_out: self.privacy.is_opted_out(fingerprint),
        }
    }

    /// Hold the current view until the guard is dropped: `erase` waits
    /// for it (see the module's text).
    pub(crate) async fn hold(&self, pool: &MySqlPool) -> Result<StoreGuard, StoreError> {
        self.privacy.begin_store(pool).await
    }

    /// Follow the opt-outs and erasures (and acknowledge them) until stopped.
    pub(crate) async fn follow_privacy(self, pool: MySqlPool, stopping: Stopping) {
        self.privacy.run(pool, stopping).await
    }

    /// Follow the suppression list until stopped; failures are logged and
    /// retried at the next tick.
    pub(crate) async fn follow_suppressions(self, pool: MySqlPool, mut stopping: Stopping) {
        let mut tick = tokio::time::interval(self.suppressed.settings.refresh_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = stopping.requested() => return,
                _ = tick.tick() => {}
            }
            match self.suppressed.refresh(&pool, &self.key).await {
                Ok(()) => metrics::gauge!("linktrack_relay_suppressed_addresses")
                    .set(self.suppressed.len() as f64),
                Err(err) => tracing::warn!(%err, "suppression list not refreshed; retrying"),
            }
        }
    }
}

impl Suppressed {
    fn contains(&self, fingerprint: Fingerprint) -> bool {
        self.set.read_even_poisoned().contains(&fingerprint)
    }

    fn len(&self) -> usize {
        self.set.read_even_poisoned().len()
    }

    /// The log since the last read, or the list whole at the first call,
    /// every `full_every`, and when the log may have been pruned past
    /// what was read.
    async fn refresh(&self, pool: &MySqlPool, key: &AddressKey) -> Result<(), StoreError> {
        let mut progress = self.progress.lock().await;
        let settings = self.settings;
        let stale = |at: Option<Instant>, after: Duration| at.is_none_or(|at| at.elapsed() > after);
        if stale(progress.last_full, settings.full_every)
            || stale(progress.last_refresh, settings.keep_changes / 2)
        {
            // Changes logged from here on are applied after the load.
            let start = store::last_change_id(pool, ChangeLog::Suppressions).await?;
            let mut set = FingerprintSet::default();
            let entries = store::for_each_suppressed(pool, key, |fingerprint| {
                set.insert(fingerprint);
            })
            .await?;
            set.shrink_to_fit();
            *self.set.write_even_poisoned() = set;
            progress.settled_id = start;
            progress.last_full = Some(Instant::now());
            tracing::info!(entries, "suppression list loaded");
        }
        let mut after = progress.settled_id;
        loop {
            let rows = store::changes_since(
                pool,
                ChangeLog::Suppressions,
                after,
                store::CHANGES_PER_READ,
            )
            .await?;
            let Some(last) = rows.last().map(|row| row.id) else {
                break;
            };
            {
                let mut set = self.set.write_even_poisoned();
                for row in &rows {
                    match row.change {
                        Change::Suppress => {
                            set.insert(row.fingerprint);
                        }
                        Change::Unsuppress => {
                            set.remove(&row.fingerprint);
                        }
                        // Logged in `privacy_changes`, never here.
                        Change::OptOut | Change::OptIn | Change::Erase => {}
                    }
                }
            }
            // The settled point moves past old rows only, and only up to
            // the first young one: a young row is read (and applied, in
            // order, to the same end) again next time.
            if let Some(row) = rows
                .iter()
                .take_while(|row| row.age >= settings.settle)
                .last()
            {
                progress.settled_id = progress.settled_id.max(row.id);
            }
            after = last;
            if rows.len() < store::CHANGES_PER_READ as usize {
                break;
            }
        }
        progress.last_refresh = Some(Instant::now());
        if stale(progress.last_prune, Duration::from_secs(3_600)) {
            progress.last_prune = Some(Instant::now());
            store::prune_changes(
                pool,
                ChangeLog::Suppressions,
                settings.keep_changes,
                100_000,
            )
            .await?;
        }
        Ok(())
    }
}
