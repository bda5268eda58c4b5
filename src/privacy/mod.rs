//! What every server knows, in memory, about people's choices
//! (docs/privacy.md): which addresses withdrew from tracking and which were
//! erased, so that a hit on a letter already sent is stored anonymously
//! without a database read, and so that the journal replay never stores
//! an erased address again.
//!
//! # The view and how it stays current
//!
//! [`Privacy`] holds the opt-out list and the erasures as
//! [`Fingerprint`]s (8 bytes of the address's keyed hash, whatever its
//! length): a full load at start (and every hour), then, every
//! [`PrivacySettings::refresh_every`], the rows the change log
//! (`privacy_changes`) gained since. Rows younger than
//! [`PrivacySettings::settle`] are read again at the next refresh, so one
//! whose transaction committed after a later one was read is not missed
//! (applying a row twice, in order, changes nothing).
//!
//! # Acknowledgements (what `erase` waits for)
//!
//! Every event the replay (or the fallback drain) stores is screened with
//! the view current when its batch began ([`Privacy::begin_store`]). The
//! refresh worker writes to `privacy_servers` the newest change that every
//! batch from now on honours: the oldest view a batch still in flight
//! uses. `erase` waits until each live server's acknowledgement reaches
//! its erasure, then scrubs the tables: whatever is stored after that was
//! screened with the erasure in view.

pub mod erase;
mod settings;

pub use erase::{erase, ErasureReport, LiveOutcome};
pub use settings::{PrivacySettings, ALIVE_WITHIN};

use crate::address::{AddressKey, Fingerprint};
use crate::locks::{LockEvenPoisoned, ReadWriteEvenPoisoned};
use crate::store::privacy::{self as store, Change, ChangeLog, ChangeRow};
use crate::store::StoreError;
use chrono::{DateTime, Utc};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

/// Why a hit must not be stored as the person's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withheld {
    /// Nothing stops it.
    No,
    /// The address withdrew from tracking: the hit is answered and
    /// counted per mailing and link, nobody's.
    OptedOut,
    /// The address was erased after the letter was made.
    Erased,
}

/// A hasher that takes a fingerprint as its own hash: fingerprints are
/// keyed-hash output, already uniform, and unforgeable without the key, so
/// SipHash on every lookup of the hot path would buy nothing.
#[derive(Default)]
pub struct FingerprintHasher(u64);

impl Hasher for FingerprintHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used for fingerprints; anything else still hashes.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A set of fingerprints.
pub type FingerprintSet = HashSet<Fingerprint, BuildHasherDefault<FingerprintHasher>>;

/// What a server holds.
#[derive(Default)]
struct View {
    opted_out: FingerprintSet,
    erased: HashMap<Fingerprint, DateTime<Utc>, BuildHasherDefault<FingerprintHasher>>,
    /// The newest change row applied.
    seen_id: u64,
    loaded: bool,
}

/// How far the refreshes got.
#[derive(Default)]
struct Progress {
    /// Every change up to this id is applied and old enough not to be
    /// followed by a late-committing one: the next read starts after it.
    settled_id: u64,
    last_full: Option<Instant>,
    last_refresh: Option<Instant>,
    last_prune: Option<Instant>,
    acknowledged: Option<(u64, Instant)>,
}

/// What a refresh found new.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Refreshed {
    pub seen_id: u64,
    /// Erasures this server had not known: their cached links go.
    pub newly_erased: Vec<Fingerprint>,
    pub full: bool,
}

type ErasureListener = Box<dyn Fn(&[Fingerprint]) + Send + Sync>;

struct Inner {
    server: String,
    settings: PrivacySettings,
    key: OnceLock<AddressKey>,
    view: RwLock<View>,
    refresh: tokio::sync::Mutex<Progress>,
    /// The views batches in flight screen with, by ticket.
    in_flight: Mutex<BTreeMap<u64, u64>>,
    next_ticket: AtomicU64,
    on_erasure: Mutex<Vec<ErasureListener>>,
}

/// A server's view of opt-outs and erasures; cheap to clone.
#[derive(Clone)]
pub struct Privacy(Arc<Inner>);

impl std::fmt::Debug for Privacy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Privacy")
            .field("server", &self.0.server)
            .field("opted_out", &self.opted_out_len())
            .finish()
    }
}

impl Privacy {
    /// An empty view for `server` (its name in `privacy_servers`), loaded
    /// by the first [`Privacy::refresh`].
    pub fn new(server: impl Into<String>, settings: PrivacySettings) -> Privacy {
        Privacy(Arc::new(Inner {
            server: server.into(),
            settings,
            key: OnceLock::new(),
            view: RwLock::new(View::default()),
            refresh: tokio::sync::Mutex::new(Progress::default()),
            in_flight: Mutex::new(BTreeMap::new()),
            next_ticket: AtomicU64::new(0),
            on_erasure: Mutex::new(Vec::new()),
        }))
    }

    pub fn settings(&self) -> &PrivacySettings {
        &self.0.settings
    }

    /// The address key, once read from the database.
    pub fn key(&self) -> Option<&AddressKey> {
        self.0.key.get()
    }

    /// The fingerprint of `email`, once the key is read.
    pub fn fingerprint(&self, email: &str) -> Option<Fingerprint> {
        self.key().map(|key| key.fingerprint(email))
    }

    /// Whether a hit on a letter made at `made_at` to the address of
    /// `fingerprint` must not be stored as the person's. No database read:
    /// one lookup in each set.
    pub fn withholds(&self, fingerprint: Fingerprint, made_at: DateTime<Utc>) -> Withheld {
        let view = self.read();
        if view.opted_out.contains(&fingerprint) {
            return Withheld::OptedOut;
        }
        match view.erased.get(&fingerprint) {
            Some(erased_at) if made_at < *erased_at => Withheld::Erased,
            _ => Withheld::No,
        }
    }

    /// [`Privacy::withholds`] for an address (normalised or not); before
    /// the key is read nothing is withheld here (the replay, which waits
    /// for the view, checks again).
    pub fn withholds_address(&self, email: &str, made_at: DateTime<Utc>) -> Withheld {
        match self.fingerprint(email) {
            Some(fingerprint) => self.withholds(fingerprint, made_at),
            None => Withheld::No,
        }
    }

    /// Whether the address of `fingerprint` opted out of tracking.
    pub fn is_opted_out(&self, fingerprint: Fingerprint) -> bool {
        self.read().opted_out.contains(&fingerprint)
    }

    /// Whether the address of `fingerprint` was ever erased (whenever its
    /// letters were made: the relay refuses to mail it again).
    pub fn is_erased(&self, fingerprint: Fingerprint) -> bool {
        self.read().erased.contains_key(&fingerprint)
    }

    /// This server recorded an opt-out itself (`POST /t/`): its own hits
    /// honour it at once, before the change log comes round.
    pub fn note_opt_out(&self, email: &str) {
        if let Some(fingerprint) = self.fingerprint(email) {
            self.write().opted_out.insert(fingerprint);
        }
    }

    /// How many opted-out addresses the view holds.
    pub fn opted_out_len(&self) -> usize {
        self.read().opted_out.len()
    }

    /// The heap the view's sets take: a hashbrown table of `buckets` slots
    /// (a power of two, 7/8 of it usable) of the entry and one control byte.
    pub fn heap_bytes(&self) -> usize {
        fn table(capacity: usize, entry: usize) -> usize {
            if capacity == 0 {
                return 0;
            }
            let buckets = (capacity * 8 / 7).next_power_of_two();
            buckets * (entry + 1) + 16
        }
        let view = self.read();
        table(
            view.opted_out.capacity(),
            std::mem::size_of::<Fingerprint>(),
        ) + table(
            view.erased.capacity(),
            std::mem::size_of::<(Fingerprint, DateTime<Utc>)>(),
        )
    }

    /// Call `listener` with the fingerprints of erasures this server learns
    /// of (the server drops their cached links).
    pub fn on_erasure(&self, listener: impl Fn(&[Fingerprint]) + Send + Sync + 'static) {
        self.lock_listeners().push(Box::new(listener));
    }

    /// Bring the view up to date: the change log since the last read, or
    /// the lists whole at the first call and every `full_every`.
    pub async fn refresh(&self, pool: &MySqlPool) -> Result<Refreshed, StoreError> {
        let mut progress = self.0.refresh.lock().await;
        let key = match self.key() {
            Some(key) => key.clone(),
            None => {
                let key = store::load_key(pool).await?;
                let _ = self.0.key.set(key.clone());
                key
            }
        };
        let settings = self.0.settings;
        let stale = |at: Option<Instant>, after: Duration| at.is_none_or(|at| at.elapsed() > after);
        let full = !self.read().loaded
            || stale(progress.last_full, settings.full_every)
            || stale(progress.last_refresh, settings.keep_changes / 2);
        let mut newly_erased = Vec::new();
        if full {
            newly_erased = self.load_whole(pool, &key, &mut progress).await?;
        }
        newly_erased.extend(self.follow_log(pool, &mut progress).await?);
        progress.last_refresh = Some(Instant::now());
        if stale(progress.last_prune, Duration::from_secs(3_600)) {
            progress.last_prune = Some(Instant::now());
            let pruned =
                store::prune_changes(pool, ChangeLog::Privacy, settings.keep_changes, 100_000)
                    .await?;
            if pruned > 0 {
                tracing::debug!(pruned, "old privacy change rows deleted");
            }
        }
        drop(progress);
        if !newly_erased.is_empty() {
            for listener in self.lock_listeners().iter() {
                listener(&newly_erased);
            }
        }
        Ok(Refreshed {
            seen_id: self.read().seen_id,
            newly_erased,
            full,
        })
    }

    /// Load the opt-out list and the erasures whole, then swap them in.
    /// Returns the erasures the old view lacked.
    async fn load_whole(
        &self,
        pool: &MySqlPool,
        key: &AddressKey,
        progress: &mut Progress,
    ) -> Result<Vec<Fingerprint>, StoreError> {
        let started = Instant::now();
        // Changes logged from here on are applied after the load.
        let start = store::last_change_id(pool, ChangeLog::Privacy).await?;
        let mut opted_out = FingerprintSet::default();
        store::for_each_opted_out(pool, key, |fingerprint| {
            opted_out.insert(fingerprint);
        })
        .await?;
        opted_out.shrink_to_fit();
        let erased: HashMap<_, _, BuildHasherDefault<FingerprintHasher>> =
            store::erasures(pool).await?.into_iter().collect();
        let mut view = self.write();
        let newly_erased = erased
            .keys()
            .filter(|fingerprint| !view.erased.contains_key(fingerprint))
            .copied()
            .collect();
        *view = View {
            opted_out,
            erased,
            seen_id: start,
            loaded: true,
        };
        let entries = view.opted_out.len();
        drop(view);
        progress.settled_id = start;
        progress.last_full = Some(Instant::now());
        tracing::info!(
            opted_out = entries,
            took_ms = started.elapsed().as_millis() as u64,
            "privacy view loaded"
        );
        Ok(newly_erased)
    }

    /// Apply the change log past the settled row; returns new erasures.
    async fn follow_log(
        &self,
        pool: &MySqlPool,
        progress: &mut Progress,
    ) -> Result<Vec<Fingerprint>, StoreError> {
        let settle = self.0.settings.settle;
        let mut newly_erased = Vec::new();
        let mut after = progress.settled_id;
        loop {
            let rows =
                store::changes_since(pool, ChangeLog::Privacy, after, store::CHANGES_PER_READ)
                    .await?;
            let Some(last) = rows.last().map(|row| row.id) else {
                break;
            };
            newly_erased.extend(self.apply(&rows));
            // The settled point moves past old rows only, and only up to
            // the first young one.
            let settled = rows.iter().take_while(|row| row.age >= settle).last();
            if let Some(row) = settled {
                progress.settled_id = progress.settled_id.max(row.id);
            }
            after = last;
            if rows.len() < store::CHANGES_PER_READ as usize {
                break;
            }
        }
        Ok(newly_erased)
    }

    /// Apply change rows, in order; returns erasures the view lacked.
    fn apply(&self, rows: &[ChangeRow]) -> Vec<Fingerprint> {
        let mut view = self.write();
        let mut newly_erased = Vec::new();
        for row in rows {
            match row.change {
                Change::OptOut => {
                    view.opted_out.insert(row.fingerprint);
                }
                Change::OptIn => {
                    view.opted_out.remove(&row.fingerprint);
                }
                Change::Erase => {
                    if let std::collections::hash_map::Entry::Vacant(entry) =
                        view.erased.entry(row.fingerprint)
                    {
                        entry.insert(row.at);
                        newly_erased.push(row.fingerprint);
                    }
                }
                // Logged in `suppression_changes`, which this view does
                // not read (the relay's `Suppressions` does).
                Change::Suppress | Change::Unsuppress => {}
            }
            view.seen_id = view.seen_id.max(row.id);
        }
        newly_erased
    }

    /// Start storing a batch of events: the view is loaded (read now if
    /// it never was) and the batch's view is registered until the returned
    /// guard is dropped, so acknowledgements never run ahead of it.
    pub async fn begin_store(&self, pool: &MySqlPool) -> Result<StoreGuard, StoreError> {
        if !self.read().loaded {
            self.refresh(pool).await?;
        }
        let ticket = self.0.next_ticket.fetch_add(1, Ordering::Relaxed);
        let seen = self.read().seen_id;
        self.lock_in_flight().insert(ticket, seen);
        Ok(StoreGuard {
            privacy: self.clone(),
            ticket,
        })
    }

    /// The newest change every batch stored from now on honours.
    pub fn acknowledgeable(&self) -> u64 {
        let seen = self.read().seen_id;
        let in_flight = self.lock_in_flight();
        in_flight.values().copied().min().unwrap_or(seen).min(seen)
    }

    /// Write this server's acknowledgement when it moved or the heartbeat
    /// is due.
    pub async fn acknowledge(&self, pool: &MySqlPool) -> Result<(), StoreError> {
        let applied = self.acknowledgeable();
        let mut progress = self.0.refresh.lock().await;
        let due = match progress.acknowledged {
            Some((id, at)) => id < applied || at.elapsed() >= self.0.settings.heartbeat,
            None => true,
        };
        if due {
            store::acknowledge(pool, &self.0.server, applied).await?;
            progress.acknowledged = Some((applied, Instant::now()));
        }
        Ok(())
    }

    /// Keep the view current and acknowledge, every `refresh_every`, until
    /// stopped (`serve` runs it as a worker). Failures are logged and
    /// retried at the next tick.
    pub async fn run(self, pool: MySqlPool, mut stopping: crate::workers::Stopping) {
        let mut tick = tokio::time::interval(self.0.settings.refresh_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                () = stopping.requested() => return,
                _ = tick.tick() => {}
            }
            match self.refresh(&pool).await {
                Ok(refreshed) => {
                    metrics::gauge!("linktrack_privacy_opted_out").set(self.opted_out_len() as f64);
                    if !refreshed.newly_erased.is_empty() {
                        tracing::info!(
                            erasures = refreshed.newly_erased.len(),
                            "erasures taken in; their cached links dropped"
                        );
                    }
                    if let Err(err) = self.acknowledge(&pool).await {
                        tracing::warn!(%err, "privacy acknowledgement not written; retrying");
                    }
                }
                Err(err) => tracing::warn!(%err, "privacy view not refreshed; retrying"),
            }
        }
    }

    /// A loaded view of these opt-outs and erasures, for tests of what
    /// uses it (no database).
    #[cfg(test)]
    pub(crate) fn in_memory(
        key: AddressKey,
        opted_out: &[&str],
        erased: &[(&str, DateTime<Utc>)],
    ) -> Privacy {
        let privacy = Privacy::new("test", PrivacySettings::default());
        {
            let mut view = privacy.write();
            view.opted_out = opted_out.iter().map(|e| key.fingerprint(e)).collect();
            view.erased = erased
                .iter()
                .map(|(e, at)| (key.fingerprint(e), *at))
                .collect();
            view.loaded = true;
        }
        let _ = privacy.0.key.set(key);
        privacy
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, View> {
        // A panic while writing (none is known) leaves whole entries only.
        self.0.view.read_even_poisoned()
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, View> {
        self.0.view.write_even_poisoned()
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, u64>> {
        self.0.in_flight.lock_even_poisoned()
    }

    fn lock_listeners(&self) -> std::sync::MutexGuard<'_, Vec<ErasureListener>> {
        self.0.on_erasure.lock_even_poisoned()
    }
}

/// A batch being stored with the view it began with ([`Privacy::begin_store`]).
pub struct StoreGuard {
    privacy: Privacy,
    ticket: u64,
}

impl StoreGuard {
    pub fn privacy(&self) -> &Privacy {
        &self.privacy
    }
}

impl Drop for StoreGuard {
    fn drop(&mut self) {
        self.privacy.lock_in_flight().remove(&self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn privacy_with(key: &AddressKey) -> Privacy {
        let privacy = Privacy::new("test", PrivacySettings::default());
        let _ = privacy.0.key.set(key.clone());
        privacy
    }

    fn row(id: u64, fingerprint: Fingerprint, change: Change, at: DateTime<Utc>) -> ChangeRow {
        ChangeRow {
            id,
            fingerprint,
            change,
            at,
            age: Duration::ZERO,
        }
    }

    #[test]
    fn opt_outs_and_erasures_follow_the_log_in_order() {
        let key = AddressKey::new(&[1; 32]);
        let privacy = privacy_with(&key);
        let ann = key.fingerprint("ann@example.com");
        let now = Utc::now();
        let before = now - chrono::Duration::days(1);
        privacy.apply(&[row(1, ann, Change::OptOut, now)]);
        assert_eq!(privacy.withholds(ann, now), Withheld::OptedOut);
        assert_eq!(
            privacy.withholds_address(" ANN@example.com", now),
            Withheld::OptedOut
        );
        // Read again (a young row), in order: the opt-in still wins.
        let rows = [
            row(1, ann, Change::OptOut, now),
            row(2, ann, Change::OptIn, now),
        ];
        privacy.apply(&rows);
        privacy.apply(&rows);
        assert_eq!(privacy.withholds(ann, now), Withheld::No);
        // An erasure withholds letters made before it, not later ones.
        let erased = privacy.apply(&[row(3, ann, Change::Erase, now)]);
        assert_eq!(erased, vec![ann]);
        assert_eq!(privacy.withholds(ann, before), Withheld::Erased);
        assert_eq!(
            privacy.withholds(ann, now + chrono::Duration::seconds(1)),
            Withheld::No
        );
        assert!(privacy.apply(&[row(4, ann, Change::Erase, now)]).is_empty());
        assert_eq!(privacy.read().seen_id, 4);
    }

    #[tokio::test]
    async fn acknowledgements_wait_for_the_batches_in_flight() {
        let privacy = privacy_with(&AddressKey::new(&[1; 32]));
        privacy.apply(&[row(5, 1, Change::OptOut, Utc::now())]);
        privacy.write().loaded = true;
        // No database is read: the view is loaded.
        let pool = sqlx::MySqlPool::connect_lazy("mysql://nobody@127.0.0.1:1/none").unwrap();
        let guard = privacy.begin_store(&pool).await.unwrap();
        privacy.apply(&[row(9, 2, Change::Erase, Utc::now())]);
        assert_eq!(privacy.acknowledgeable(), 5, "a batch still uses view 5");
        drop(guard);
        assert_eq!(privacy.acknowledgeable(), 9);
    }
}
