//! The settle pass's memory of a partition's recent hits: the clicks and
//! opens of every letter, read once each by a primary-key range on the
//! `events` partition (the rows after the last ones read), kept while a
//! batch's verdict windows can still reach them.
//!
//! Why: the settle pass judges each letter of a batch with its hits around
//! the batch's ([`super::verdicts`]). Read from the table, a hot letter's
//! hits were read again for every batch that held one of its hits: the
//! work grew with its hits × hits. Held here, every hit is read once.
//!
//! What is held is exactly what the table's read would give, or it is not
//! used:
//! * the rows are read in id order, so the memory holds every qualifying
//!   row of the partition with an id in `(lo, high]` and a time from
//!   `floor` on; the rows outside that range a window may hold are read
//!   from the table (`id <= lo OR id > high`, on the letters' index); a
//!   window before `floor`, or reaching another partition, is read from
//!   the table whole. Ids become visible in id order: the rollup's
//!   watermark rests on the same (one event writer, or its `settle`);
//! * a verdict changes only when the settle pass of the batch that holds
//!   the event writes it: the ones this process writes are applied here,
//!   and kept once the transaction commits; when another process has
//!   rolled the partition in between (the watermark is not where this
//!   process left it), the verdicts of the events it rolled are read again
//!   by their id range; after a transaction that did not commit, or a
//!   watermark set back, the memory starts again;
//! * an erasure scrubs the reader's address and agent from `events`: for
//!   a while after one is recorded, nothing is held;
//! * the memory is bounded ([`MAX_HELD`] hits); past it, rows are read
//!   from the table as before.
//!
//! On starting (a new process, or a memory dropped), the rows before the
//! watermark are read in id ranges of [`BACKFILL_IDS`], one range a batch,
//! with the table read for them until they are all held.

use super::bot_reason::read_bot_reason;
use super::error::StoreError;
use super::rolled_batch::RolledBatch;
use crate::bots::letter_judgement::LetterHit;
use crate::kind::EventKind;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use sqlx::MySqlConnection;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Hits held at most, over all partitions: about 120 bytes each (a user
/// agent is held once however many hits send it).
pub const MAX_HELD: usize = 1_000_000;
/// Rows read past the last ones held per statement (a batch reads on
/// until it has them all, within [`MAX_HELD`]).
const TAIL_ROWS: u32 = 100_000;
/// Ids of the partition before the watermark read per batch on starting.
pub const BACKFILL_IDS: u64 = 200_000;
/// How long after an erasure nothing is held (every window is read from
/// the table): `erase` scrubs `events` after the servers have taken it in.
const ERASING_MINUTES: u32 = 10;
/// Distinct user agents held before the table of them starts again.
const MAX_AGENTS: usize = 100_000;

/// The memory, shared by the clones of one process's rollup options.
#[derive(Clone, Default)]
pub struct RecentHits {
    partitions: Arc<Mutex<HashMap<(NaiveDate, NaiveDate), Partition>>>,
    off: bool,
}

impl std::fmt::Debug for RecentHits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecentHits")
    }
}

/// A memory is no setting: options that differ only in it are the same.
impl PartialEq for RecentHits {
    fn eq(&self, _: &RecentHits) -> bool {
        true
    }
}

/// One held hit.
pub(crate) struct Held {
    pub id: u64,
    pub inserted: NaiveDate,
    pub hit: LetterHit,
}

/// The held hits of one `events` partition.
pub(crate) struct Partition {
    lower: NaiveDate,
    upper: NaiveDate,
    /// Every qualifying row with `lo < id <= high` and `occurred_at >=
    /// floor` is held (and no other).
    lo: u64,
    high: u64,
    /// The partition's first id: below it, nothing is missing.
    first_id: u64,
    /// The last read past `high` found every row there was.
    caught_up: bool,
    floor: DateTime<Utc>,
    /// The watermark the held verdicts are current for.
    rolled_to: u64,
    /// Verdicts of the batch ending here were applied, not yet committed.
    pending: Option<u64>,
    letters: HashMap<Arc<str>, HashMap<u64, Vec<Held>>>,
    agents: HashSet<Arc<str>>,
    held: usize,
}

type HeldLine = (
    u64,
    NaiveDate,
    String,
    u64,
    EventKind,
    NaiveDateTime,
    Option<u32>,
    Option<String>,
    Option<String>,
    Option<String>,
);

const HELD_COLUMNS: &str = concat!(
    "SELECT id, inserted, mailing_id, letter_id, kind, occurred_at, \
     position, ip, user_agent, ",
    read_bot_reason!(),
    " FROM events"
);

/// The rows the settle pass judges with: its context read's (`mailing_id`
/// set, a letter, clicks and opens).
const QUALIFYING: &str = "mailing_id IS NOT NULL AND letter_id > 0 \
     AND kind IN ('click', 'open', 'image')";

impl RecentHits {
    /// No memory: every window is read from the table, as before there was
    /// one (the comparison the tests and benchmarks make).
    pub fn off() -> RecentHits {
        RecentHits {
            off: true,
            ..RecentHits::default()
        }
    }

    /// The partition's memory for one batch (the batch's range holds its
    /// `inserted` bounds and the watermark it starts from), brought up to
    /// date: verdicts another process wrote, the rows recorded since the
    /// last batch, one more range of the rows before a start. Hits before
    /// `floor` are let go; rows past `visible` are not held (ids up to it
    /// have become visible in order). The memory is taken out until
    /// [`Self::put_back`].
    pub(crate) async fn take(
        &self,
        conn: &mut MySqlConnection,
        batch: &RolledBatch,
        floor: DateTime<Utc>,
        visible: u64,
    ) -> Result<Partition, StoreError> {
        if self.off || erasing(conn).await? {
            if !self.off {
                // Held addresses and agents of an erased reader go too.
                self.lock().clear();
            }
            // A floor no window starts after: none is covered.
            return Ok(Partition::empty(batch, DateTime::<Utc>::MAX_UTC, u64::MAX));
        }
        let (found, others): (Option<Partition>, usize) = {
            let mut partitions = self.lock();
            let found = partitions.remove(&(batch.lower, batch.upper));
            (found, partitions.values().map(|p| p.held).sum())
        };
        let mut part = match found {
            Some(part) if part.pending.is_none() && part.rolled_to == batch.after_id => part,
            Some(mut part) if part.pending.is_none() && part.rolled_to < batch.after_id => {
                part.reread_verdicts(conn, batch.after_id).await?;
                part
            }
            _ => Partition::start(conn, batch, floor).await?,
        };
        part.let_go_before(floor);
        // Read on until every recorded row is held (within the bound): a
        // window the memory has not caught up with is read from the table,
        // on the letters' index, and on hot letters that read walks every
        // hit of each letter in the window again, batch after batch. A
        // rollup that has fallen behind the intake (a settle time's worth
        // of events arrives before the first batch) would never catch up
        // with one chunk a batch, and each batch would pay that read.
        loop {
            if part.held + others >= MAX_HELD {
                part.caught_up = false;
                break;
            }
            if !part.read_on(conn, visible).await? {
                break;
            }
        }
        part.backfill(conn).await?;
        Ok(part)
    }

    /// Give the memory back after the batch's verdicts were applied to it;
    /// they hold once [`Self::committed`] says so.
    pub(crate) fn put_back(&self, mut part: Partition, batch: &RolledBatch) {
        if self.off {
            return;
        }
        part.pending = Some(batch.last_id);
        let mut partitions = self.lock();
        partitions.insert((part.lower, part.upper), part);
        // The partitions rolled most recently; an older day is rolled again
        // only for stragglers.
        while partitions.len() > 2 {
            let Some(oldest) = partitions.keys().min().copied() else {
                break;
            };
            partitions.remove(&oldest);
        }
    }

    /// The batch's transaction committed: the verdicts applied to the memory
    /// are the table's.
    pub(crate) fn committed(&self, batch: &RolledBatch) {
        let mut partitions = self.lock();
        if let Some(part) = partitions.get_mut(&(batch.lower, batch.upper)) {
            match part.pending {
                Some(last) if last == batch.last_id => {
                    part.pending = None;
                    part.rolled_to = batch.last_id;
                }
                // A batch with nothing to settle changed no verdict.
                None if part.rolled_to == batch.after_id => part.rolled_to = batch.last_id,
                _ => {}
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(NaiveDate, NaiveDate), Partition>> {
        // The map is only replaced whole under the lock: a panic elsewhere
        // leaves it consistent.
        self.partitions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether an erasure was recorded in the last [`ERASING_MINUTES`]: its
/// scrub of `events` may still be under way, and what is held may name
/// the reader the table no longer does.
async fn erasing(conn: &mut MySqlConnection) -> Result<bool, StoreError> {
    let recent: Option<u64> = sqlx::query_scalar(
        "SELECT id FROM privacy_changes WHERE at > NOW(3) - INTERVAL ? MINUTE \
         AND change_kind = 'erase' LIMIT 1",
    )
    .bind(ERASING_MINUTES)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(recent.is_some())
}

impl Partition {
    async fn start(
        conn: &mut MySqlConnection,
        batch: &RolledBatch,
        floor: DateTime<Utc>,
    ) -> Result<Partition, StoreError> {
        // The first entry of the partition's primary key: one index dive.
        let first_id: Option<u64> = sqlx::query_scalar(
            "SELECT id FROM events WHERE inserted >= ? AND inserted < ? ORDER BY id LIMIT 1",
        )
        .bind(batch.lower)
        .bind(batch.upper)
        .fetch_optional(&mut *conn)
        .await?;
        // None: an empty partition, nothing below.
        Ok(Partition::empty(batch, floor, first_id.unwrap_or(u64::MAX)))
    }

    fn empty(batch: &RolledBatch, floor: DateTime<Utc>, first_id: u64) -> Partition {
        Partition {
            lower: batch.lower,
            upper: batch.upper,
            lo: batch.after_id,
            high: batch.after_id,
            first_id,
            caught_up: false,
            floor,
            rolled_to: batch.after_id,
            pending: None,
            letters: HashMap::new(),
            agents: HashSet::new(),
            held: 0,
        }
    }

    /// Whether every row below `lo` is held (none is missing there).
    fn complete_below(&self) -> bool {
        self.lo < self.first_id
    }

    /// Whether the rows a window's read would give are all held, so only
    /// `(id <= lo OR id > high)` is to be read (see [`Self::outside`]).
    pub(crate) fn covers(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        from >= self.floor && from.date_naive() >= self.lower && to.date_naive() < self.upper
    }

    /// The ids a covered window's rows may have that are not held: `None`
    /// when every one is held.
    pub(crate) fn outside(&self) -> Option<(u64, u64)> {
        let lo = if self.complete_below() { 0 } else { self.lo };
        (lo > 0 || !self.caught_up).then_some((lo, self.high))
    }

    /// The held hits of a letter within `from..=to` (a window [`Self::covers`]),
    /// as the table's read selects them.
    pub(crate) fn window<'a>(
        &'a self,
        mailing: &str,
        letter: u64,
        from: DateTime<Utc>,
        to: DateTime<Utc>,
    ) -> impl Iterator<Item = &'a Held> + 'a {
        let (first_day, last_day) = (from.date_naive(), to.date_naive());
        self.letters
            .get(mailing)
            .and_then(|letters| letters.get(&letter))
            .into_iter()
            .flatten()
            .filter(move |held| {
                held.hit.at >= from
                    && held.hit.at <= to
                    && held.inserted >= first_day
                    && held.inserted <= last_day
            })
    }

    /// Verdicts the settle pass wrote, `(mailing, letter, id, reason)`
    /// (applied when its transaction commits). Gathered by letter and
    /// applied in one pass over each letter's held hits: a search per
    /// verdict walked a hot letter's hits once for each of them, its hits
    /// × hits over its life.
    pub(crate) fn revise<'r>(
        &mut self,
        verdicts: impl IntoIterator<Item = (&'r str, u64, u64, Option<String>)>,
    ) {
        let mut by_letter: HashMap<(&str, u64), HashMap<u64, Option<String>>> = HashMap::new();
        for (mailing, letter, id, reason) in verdicts {
            by_letter
                .entry((mailing, letter))
                .or_default()
                .insert(id, reason);
        }
        for ((mailing, letter), mut reasons) in by_letter {
            let Some(hits) = self
                .letters
                .get_mut(mailing)
                .and_then(|letters| letters.get_mut(&letter))
            else {
                continue;
            };
            for held in hits.iter_mut() {
                if let Some(reason) = reasons.remove(&held.id) {
                    held.hit.reason = reason;
                }
            }
        }
    }

    fn let_go_before(&mut self, floor: DateTime<Utc>) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        let mut held = 0;
        self.letters.retain(|_, letters| {
            letters.retain(|_, hits| {
                hits.retain(|h| h.hit.at >= floor);
                held += hits.len();
                !hits.is_empty()
            });
            !letters.is_empty()
        });
        self.held = held;
    }

    /// The rows recorded after `high`, up to [`TAIL_ROWS`] and to id
    /// `visible`; whether there may be more (the read was full).
    async fn read_on(
        &mut self,
        conn: &mut MySqlConnection,
        visible: u64,
    ) -> Result<bool, StoreError> {
        let sql = format!(
            "{HELD_COLUMNS} WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? \
             AND {QUALIFYING} AND occurred_at >= ? ORDER BY id LIMIT ?"
        );
        let lines: Vec<HeldLine> = sqlx::query_as(&sql)
            .bind(self.lower)
            .bind(self.upper)
            .bind(self.high)
            .bind(visible)
            .bind(self.floor.naive_utc())
            .bind(TAIL_ROWS)
            .fetch_all(&mut *conn)
            .await?;
        // Past `visible`, rows may still appear below others: read from
        // the table every time.
        let full = lines.len() >= TAIL_ROWS as usize;
        self.caught_up = !full && visible == u64::MAX;
        if let Some(last) = lines.last() {
            self.high = last.0;
        }
        for line in lines {
            self.hold(line);
        }
        Ok(full)
    }

    /// One more range of the rows before `lo`, until none is missing.
    async fn backfill(&mut self, conn: &mut MySqlConnection) -> Result<(), StoreError> {
        if self.complete_below() {
            return Ok(());
        }
        let from = self
            .lo
            .saturating_sub(BACKFILL_IDS)
            .max(self.first_id.saturating_sub(1));
        let sql = format!(
            "{HELD_COLUMNS} WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? \
             AND {QUALIFYING} AND occurred_at >= ?"
        );
        let lines: Vec<HeldLine> = sqlx::query_as(&sql)
            .bind(self.lower)
            .bind(self.upper)
            .bind(from)
            .bind(self.lo)
            .bind(self.floor.naive_utc())
            .fetch_all(&mut *conn)
            .await?;
        for line in lines {
            self.hold(line);
        }
        self.lo = from;
        Ok(())
    }

    /// The verdicts of the held rows another process rolled, `rolled_to`
    /// to `to`.
    async fn reread_verdicts(
        &mut self,
        conn: &mut MySqlConnection,
        to: u64,
    ) -> Result<(), StoreError> {
        let sql = format!(
            "SELECT id, mailing_id, letter_id, {} FROM events \
             WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? AND {QUALIFYING}",
            read_bot_reason!()
        );
        let lines: Vec<(u64, String, u64, Option<String>)> = sqlx::query_as(&sql)
            .bind(self.lower)
            .bind(self.upper)
            .bind(self.rolled_to)
            .bind(to)
            .fetch_all(&mut *conn)
            .await?;
        self.revise(
            lines.iter().map(|(id, mailing, letter, reason)| {
                (mailing.as_str(), *letter, *id, reason.clone())
            }),
        );
        self.rolled_to = to;
        Ok(())
    }

    fn hold(
        &mut self,
        (id, inserted, mailing, letter, kind, at, position, ip, agent, reason): HeldLine,
    ) {
        if self.agents.len() > MAX_AGENTS {
            self.agents.clear();
        }
        let user_agent = agent.map(|agent| match self.agents.get(agent.as_str()) {
            Some(known) => known.clone(),
            None => {
                let agent: Arc<str> = Arc::from(agent);
                self.agents.insert(agent.clone());
                agent
            }
        });
        let hit = LetterHit {
            kind,
            at: at.and_utc(),
            position,
            ip: stored_ip(ip.as_deref()),
            user_agent,
            reason,
        };
        if !self.letters.contains_key(mailing.as_str()) {
            self.letters
                .insert(Arc::from(mailing.as_str()), HashMap::new());
        }
        if let Some(letters) = self.letters.get_mut(mailing.as_str()) {
            letters
                .entry(letter)
                .or_default()
                .push(Held { id, inserted, hit });
            self.held += 1;
        }
    }
}

/// A stored address: the truncated address, possibly with a prefix.
pub(crate) fn stored_ip(ip: Option<&str>) -> Option<std::net::IpAddr> {
    ip.and_then(|ip| ip.split('/').next().and_then(|a| a.parse().ok()))
}
