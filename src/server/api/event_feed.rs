//! [`EventFeed`]: what feeds every `GET /api/events/stream` of a server
//! (docs/api.md, "The event stream"). One poller per server reads what was
//! stored since its last read, every [`POLL`] while a stream is open: the
//! `events` the journal replay inserted (of every server, so a stream
//! sees the clicks other servers took) and the `bounces` the ingest
//! decided, each rendered once as the webhooks' JSON and handed to the
//! streams through a broadcast channel. A stream that resumes with
//! `Last-Event-ID` reads what it missed from the same tables
//! ([`EventFeed::catch_up`]), up to [`REPLAY_WINDOW`] and [`REPLAY_MAX`].
//!
//! Ids become visible out of order when several writers commit: an id a
//! poll skipped is looked for again for [`GAP_WAIT`]. Clicks, opens and
//! image loads go out with their first verdict; once the rollup has
//! settled them (its watermark passed their id) a `verdict` event follows.

use crate::locks::LockEvenPoisoned;
use crate::payload::{self, BounceEvent, LinkDetails};
use crate::store::event_feed::{self as stored, FeedBounce, FeedEvent};
use crate::store::StoreError;
use chrono::{NaiveDate, NaiveDateTime, Utc};
use sqlx::MySqlPool;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{broadcast, watch};

/// How often the poller reads new rows while a stream is open.
pub const POLL: Duration = Duration::from_millis(500);
/// How far back `Last-Event-ID` reaches.
pub const REPLAY_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// Most events and decisions a resumed stream is sent from the tables.
pub const REPLAY_MAX: u32 = 10_000;
/// Streams one key may hold open at once (on one server).
pub const MAX_STREAMS_PER_KEY: usize = 5;
/// How long an id a poll skipped is looked for again.
pub const GAP_WAIT: Duration = Duration::from_secs(5);
/// Rows per read: a poll that reads this many reads again at once.
const ROWS_PER_POLL: u32 = 2_000;
/// Skipped ids tracked at once.
const MAX_GAPS: usize = 1_000;
/// The days a poll reads: events stored for today and the day before
/// (a hit just after midnight replayed a moment later).
const LIVE_DAYS: i64 = 1;
/// Events waiting for their settled verdict, and for how long at most.
const MAX_PENDING_VERDICTS: usize = 100_000;
const PENDING_VERDICT_AGE: Duration = Duration::from_secs(3600);
/// Items the broadcast channel holds for a slow stream; one further
/// behind is ended (it resumes with `Last-Event-ID`).
const CHANNEL: usize = 4_096;

/// Where a stream is: the last `events.id` and `bounces.id` it was sent,
/// as an SSE `id:` (`EVENTS-BOUNCES`, e.g. `1234-56`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor {
    pub events: u64,
    pub bounces: u64,
}

impl fmt::Display for Cursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.events, self.bounces)
    }
}

/// A `Last-Event-ID` that is not a cursor this API sent.
#[derive(Debug, thiserror::Error)]
#[error("Last-Event-ID {0:?} is not an id this stream sent (EVENTS-BOUNCES, e.g. 1234-56)")]
pub struct BadCursor(String);

impl FromStr for Cursor {
    type Err = BadCursor;

    fn from_str(text: &str) -> Result<Cursor, BadCursor> {
        let bad = || BadCursor(text.chars().take(64).collect());
        let (events, bounces) = text.trim().split_once('-').ok_or_else(bad)?;
        Ok(Cursor {
            events: events.parse().map_err(|_| bad())?,
            bounces: bounces.parse().map_err(|_| bad())?,
        })
    }
}

/// What one item came from: its row (for a resumed stream's dedup).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    Event(u64),
    Bounce(u64),
    Verdict(u64),
}

/// One event as the streams send it.
#[derive(Debug)]
pub struct Item {
    /// The stream's position once this item is sent.
    pub cursor: Cursor,
    pub source: Source,
    /// The event's type (`email.clicked`, …); a verdict's, the type of the
    /// event it settles (the filter sends it with those).
    pub event_type: &'static str,
    pub mailing_id: Option<String>,
    /// The JSON body: the webhooks' own.
    pub data: String,
}

/// The server's feed of stored events to its streams. Cheap to clone.
#[derive(Clone)]
pub struct EventFeed {
    inner: Arc<Inner>,
}

struct Inner {
    pool: MySqlPool,
    live: broadcast::Sender<Arc<Item>>,
    /// Whether the poller runs (it stops when no stream listens).
    polling: Mutex<bool>,
    closing: watch::Sender<bool>,
    streams: Mutex<HashMap<String, usize>>,
}

/// A stream's place among its key's [`MAX_STREAMS_PER_KEY`]; given back
/// when dropped.
pub struct StreamSlot {
    inner: Arc<Inner>,
    key: String,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut streams = self.inner.streams.lock_even_poisoned();
        if let Some(open) = streams.get_mut(&self.key) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                streams.remove(&self.key);
            }
        }
    }
}

impl EventFeed {
    pub fn new(pool: MySqlPool) -> EventFeed {
        let (live, _) = broadcast::channel(CHANNEL);
        let (closing, _) = watch::channel(false);
        EventFeed {
            inner: Arc::new(Inner {
                pool,
                live,
                polling: Mutex::new(false),
                closing,
                streams: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// End every stream (the server is stopping: a stream never ends by
    /// itself, and the listener waits for its responses).
    pub fn close(&self) {
        let _ = self.inner.closing.send(true);
    }

    /// Becomes true when the streams are to end.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.inner.closing.subscribe()
    }

    /// A place for one more stream of `key`; `None` when it holds
    /// [`MAX_STREAMS_PER_KEY`] already.
    pub fn open_stream(&self, key: &str) -> Option<StreamSlot> {
        let mut streams = self.inner.streams.lock_even_poisoned();
        let open = streams.entry(key.to_owned()).or_insert(0);
        if *open >= MAX_STREAMS_PER_KEY {
            return None;
        }
        *open += 1;
        Some(StreamSlot {
            inner: Arc::clone(&self.inner),
            key: key.to_owned(),
        })
    }

    /// Every item stored from now on; starts the poller if it is not running.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Item>> {
        let mut polling = self.inner.polling.lock_even_poisoned();
        let receiver = self.inner.live.subscribe();
        if !*polling {
            *polling = true;
            let inner = Arc::clone(&self.inner);
            tokio::spawn(async move { Poller::new(inner).run().await });
        }
        receiver
    }

    /// What was stored after `from` (within [`REPLAY_WINDOW`], at most
    /// [`REPLAY_MAX`] rows of each table): events in id order, then
    /// decisions.
    pub async fn catch_up(&self, from: Cursor) -> Result<Vec<Item>, StoreError> {
        let pool = &self.inner.pool;
        let window = chrono::Duration::from_std(REPLAY_WINDOW).unwrap_or_default();
        let since = Utc::now().naive_utc() - window;
        let events = stored::events_after(pool, from.events, since, REPLAY_MAX).await?;
        let bounces = stored::bounces_after(pool, from.bounces, since, REPLAY_MAX).await?;
        let mut cursor = from;
        let (mut items, _) = render_events(pool, &events, &mut cursor).await?;
        items.extend(render_bounces(&bounces, &mut cursor));
        Ok(items)
    }
}

/// Ids seen by the poller of one table: the highest, and those below it
/// not seen yet (looked for again until [`GAP_WAIT`] passes).
#[derive(Debug, Default)]
struct Track {
    high: u64,
    gaps: BTreeMap<u64, Instant>,
}

impl Track {
    /// An id read: past the highest (the ids between become gaps), or a gap filled.
    fn saw(&mut self, id: u64, now: Instant) {
        if id > self.high {
            let from = self.high + 1;
            for gap in from..id {
                if self.gaps.len() >= MAX_GAPS {
                    break;
                }
                self.gaps.insert(gap, now);
            }
            self.high = id;
        } else {
            self.gaps.remove(&id);
        }
    }

    fn expire(&mut self, now: Instant) {
        self.gaps
            .retain(|_, since| now.duration_since(*since) < GAP_WAIT);
    }

    fn gap_ids(&self) -> Vec<u64> {
        self.gaps.keys().copied().collect()
    }
}

/// An event sent with its first verdict, waiting for the settled one.
struct Pending {
    id: u64,
    day: NaiveDate,
    event_id: [u8; 16],
    event_type: &'static str,
    mailing_id: Option<String>,
    bot: bool,
    reason: Option<String>,
    since: Instant,
}

struct Poller {
    inner: Arc<Inner>,
    events: Track,
    bounces: Track,
    pending: VecDeque<Pending>,
}

impl Poller {
    fn new(inner: Arc<Inner>) -> Poller {
        Poller {
            inner,
            events: Track::default(),
            bounces: Track::default(),
            pending: VecDeque::new(),
        }
    }

    /// Read until no stream listens or the feed closes. A failed read is
    /// logged and tried again at the next tick.
    async fn run(mut self) {
        let mut closing = self.inner.closing.subscribe();
        let mut started = false;
        loop {
            if *closing.borrow() || self.nobody_listens() {
                return;
            }
            let result = if started {
                self.poll().await
            } else {
                self.start().await
            };
            let more = match result {
                Ok(more) => {
                    started = true;
                    more
                }
                Err(err) => {
                    tracing::warn!(kind = err.kind(), error = %err, "event stream: reading events failed");
                    false
                }
            };
            if !more {
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    _ = closing.changed() => {}
                }
            }
        }
    }

    /// Whether the last stream went; then the poller is marked stopped
    /// under the lock `subscribe` takes, so a new stream starts another.
    fn nobody_listens(&self) -> bool {
        let mut polling = self.inner.polling.lock_even_poisoned();
        if self.inner.live.receiver_count() == 0 {
            *polling = false;
            return true;
        }
        false
    }

    /// Start after what is stored now.
    async fn start(&mut self) -> Result<bool, StoreError> {
        let (events, bounces) = stored::latest_ids(&self.inner.pool).await?;
        self.events.high = events;
        self.bounces.high = bounces;
        Ok(false)
    }

    /// One read of each table; `true` when there may be more right away.
    async fn poll(&mut self) -> Result<bool, StoreError> {
        let pool = &self.inner.pool;
        let now = Instant::now();
        let today = Utc::now().date_naive();
        let first_day = today - chrono::Duration::days(LIVE_DAYS);
        let since: NaiveDateTime = first_day.and_time(chrono::NaiveTime::MIN);
        let mut events = Vec::new();
        let gaps = self.events.gap_ids();
        if !gaps.is_empty() {
            events = stored::events_with_ids(pool, &gaps, first_day).await?;
        }
        let new_events = stored::events_after(pool, self.events.high, since, ROWS_PER_POLL).await?;
        let more = new_events.len() == ROWS_PER_POLL as usize;
        events.extend(new_events);
        let mut bounces = Vec::new();
        let gaps = self.bounces.gap_ids();
        if !gaps.is_empty() {
            bounces = stored::bounces_with_ids(pool, &gaps).await?;
        }
        let new_bounces =
            stored::bounces_after(pool, self.bounces.high, since, ROWS_PER_POLL).await?;
        let more = more || new_bounces.len() == ROWS_PER_POLL as usize;
        bounces.extend(new_bounces);

        let mut cursor = Cursor {
            events: self.events.high,
            bounces: self.bounces.high,
        };
        let (mut items, pending) = render_events(pool, &events, &mut cursor).await?;
        items.extend(render_bounces(&bounces, &mut cursor));
        for event in &events {
            self.events.saw(event.id, now);
        }
        for bounce in &bounces {
            self.bounces.saw(bounce.id, now);
        }
        self.events.expire(now);
        self.bounces.expire(now);
        self.pending.extend(pending);
        while self.pending.len() > MAX_PENDING_VERDICTS {
            self.pending.pop_front();
        }
        items.extend(self.settled(cursor, now).await?);
        for item in items {
            // No receiver: the streams went; the next tick stops.
            let _ = self.inner.live.send(Arc::new(item));
        }
        Ok(more)
    }

    /// `verdict` items for the pending events the rollup has settled.
    async fn settled(&mut self, cursor: Cursor, now: Instant) -> Result<Vec<Item>, StoreError> {
        self.pending
            .retain(|p| now.duration_since(p.since) < PENDING_VERDICT_AGE);
        if self.pending.is_empty() {
            return Ok(Vec::new());
        }
        let pool = &self.inner.pool;
        let mut days: Vec<NaiveDate> = self.pending.iter().map(|p| p.day).collect();
        days.sort_unstable();
        days.dedup();
        let rolled = stored::rolled_up_to(pool, &days).await?;
        let (done, waiting): (Vec<Pending>, Vec<Pending>) = self
            .pending
            .drain(..)
            .partition(|p| rolled.get(&p.day).is_some_and(|last| p.id <= *last));
        self.pending = waiting.into();
        let mut by_day: BTreeMap<NaiveDate, Vec<u64>> = BTreeMap::new();
        for p in &done {
            by_day.entry(p.day).or_default().push(p.id);
        }
        let mut verdicts = BTreeMap::new();
        for (day, ids) in by_day {
            verdicts.extend(stored::verdicts(pool, day, &ids).await?);
        }
        let at = Utc::now();
        let mut items = Vec::new();
        for p in done {
            let Some((bot, reason)) = verdicts.get(&p.id) else {
                continue;
            };
            let changed = *bot != p.bot || *reason != p.reason;
            let data = payload::render_verdict(
                &p.event_id,
                p.event_type,
                p.mailing_id.as_deref(),
                *bot,
                reason.as_deref(),
                changed,
                at,
            )
            .map_err(corrupt)?;
            items.push(Item {
                cursor,
                source: Source::Verdict(p.id),
                event_type: p.event_type,
                mailing_id: p.mailing_id,
                data,
            });
        }
        Ok(items)
    }
}

fn corrupt(err: serde_json::Error) -> StoreError {
    StoreError::Corrupt {
        table: "events",
        detail: format!("an event's payload: {err}"),
    }
}

/// The events as the webhooks carry them (an event stored for nobody is
/// never sent), each with the cursor after it, and those that wait for
/// their settled verdict.
async fn render_events(
    pool: &MySqlPool,
    events: &[FeedEvent],
    cursor: &mut Cursor,
) -> Result<(Vec<Item>, Vec<Pending>), StoreError> {
    let sent: Vec<&FeedEvent> = events.iter().filter(|e| !e.row.is_withheld()).collect();
    let links = crate::store::links::urls_and_tags(
        pool,
        sent.iter()
            .filter_map(|e| e.row.link_id.map(|id| (id, &e.row.token[..]))),
    )
    .await?;
    let mut days: Vec<NaiveDate> = sent.iter().map(|e| e.row.inserted()).collect();
    days.sort_unstable();
    days.dedup();
    let rolled = stored::rolled_up_to(pool, &days).await?;
    let now = Instant::now();
    let mut items = Vec::new();
    let mut pending = Vec::new();
    for event in events {
        cursor.events = cursor.events.max(event.id);
        if event.row.is_withheld() {
            continue;
        }
        let row = &event.row;
        let link = row
            .link_id
            .and_then(|id| links.get(&id))
            .map(|(url, tags)| LinkDetails {
                url: Some(url.clone()),
                tags: tags.clone(),
            })
            .unwrap_or_default();
        let settled = rolled
            .get(&row.inserted())
            .is_some_and(|last| event.id <= *last);
        let event_type = payload::event_type(row.kind);
        if !settled && payload::waits_for_verdict(row.kind) {
            pending.push(Pending {
                id: event.id,
                day: row.inserted(),
                event_id: row.event_id,
                event_type,
                mailing_id: row.mailing_id.clone(),
                bot: row.bot,
                reason: row.bot_reason.clone(),
                since: now,
            });
        }
        items.push(Item {
            cursor: *cursor,
            source: Source::Event(event.id),
            event_type,
            mailing_id: row.mailing_id.clone(),
            data: payload::render(row, &link, settled).map_err(corrupt)?,
        });
    }
    Ok((items, pending))
}

/// The decisions as the webhooks carry them, each with the cursor after it.
fn render_bounces(bounces: &[FeedBounce], cursor: &mut Cursor) -> Vec<Item> {
    let mut items = Vec::new();
    for bounce in bounces {
        cursor.bounces = cursor.bounces.max(bounce.id);
        let event = BounceEvent {
            event_id: crate::bounces::ingest::decision_event_id(&bounce.source_key, &bounce.email),
            occurred_at: bounce.received_at.and_utc(),
            mailing_id: &bounce.mailing_id,
            letter_id: bounce.letter_id,
            email: &bounce.email,
            kind: &bounce.kind,
            status: &bounce.status,
            diagnostic: &bounce.diagnostic,
            action: &bounce.action,
            source_message_id: &bounce.source_message_id,
        };
        // Rendering plain strings and numbers cannot fail; a failure is logged.
        match payload::render_bounce(&event) {
            Ok(data) => items.push(Item {
                cursor: *cursor,
                source: Source::Bounce(bounce.id),
                event_type: event.event_type(),
                mailing_id: Some(bounce.mailing_id.clone()),
                data,
            }),
            Err(err) => {
                tracing::warn!(error = %err, id = bounce.id, "event stream: a decision's body")
            }
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_refuses_anything_else() {
        let cursor = Cursor {
            events: 1234,
            bounces: 56,
        };
        assert_eq!(cursor.to_string(), "1234-56");
        assert_eq!("1234-56".parse::<Cursor>().unwrap(), cursor);
        for bad in [
            "",
            "12",
            "a-1",
            "1-",
            "-1",
            "1-2-3",
            "18446744073709551616-0",
        ] {
            let err = bad.parse::<Cursor>().unwrap_err().to_string();
            assert!(err.contains("Last-Event-ID"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_skipped_id_is_a_gap_until_seen_or_old() {
        let start = Instant::now();
        let mut track = Track {
            high: 10,
            gaps: BTreeMap::new(),
        };
        track.saw(11, start);
        track.saw(14, start);
        assert_eq!(track.high, 14);
        assert_eq!(track.gap_ids(), [12, 13]);
        track.saw(12, start);
        assert_eq!(track.gap_ids(), [13]);
        track.expire(start + GAP_WAIT);
        assert!(track.gap_ids().is_empty());
        track.saw(10_000, start);
        assert_eq!(track.gaps.len(), MAX_GAPS, "bounded");
    }
}
