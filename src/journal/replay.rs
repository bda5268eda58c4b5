//! Moves sealed journal segments into the `events` table.
//!
//! A segment is read whole, inserted in multi-row statements that are
//! idempotent on `event_id`, and deleted only after every statement
//! succeeded. A failure leaves the segment for the next attempt; inserting
//! the same events again is a no-op, so the database ends up with each event
//! exactly once whatever crashes in between.
//!
//! On a Spider cluster each data node is written on its own: the events
//! whose link or data table lies on a node that fails are held (the
//! segment is rewritten with their lines only, the rest stored), and the
//! replay goes on with the later segments, so the other nodes' events are
//! stored meanwhile; the held lines are tried again on the retry schedule
//! and at each pass.

use super::line::{JournalLine, JournalLineError, Replayable, Resolve};
use super::outbox_sink::OutboxSink;
use super::readers::ReaderHandoff;
use super::segments::{sealed_segments, JournalError, JournalSettings};
use crate::event::EventRow;
use crate::kind::{EventKind, LinkKind};
use crate::privacy::{Privacy, Withheld};
use crate::store::address_list::SUPPRESSIONS;
use crate::store::cluster::NodesDown;
use crate::store::events::{insert_idempotent, suppress_unsubscribed};
use crate::store::links::{self, StoredLink};
use crate::store::{partitions, StoreError};
use crate::token::Token;
use chrono::{NaiveDate, Utc};
use sqlx::MySqlPool;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;
use tokio::sync::{watch, Notify};

#[derive(Debug, thiserror::Error)]
pub(crate) enum ReplayError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A line other than a torn last one could not be read: the segment's
    /// readable events are inserted, and the segment is kept whole in
    /// quarantine for an operator.
    #[error("{}: line {line}: {source}", segment.display())]
    BadLine {
        segment: std::path::PathBuf,
        line: usize,
        source: JournalLineError,
    },
}

impl ReplayError {
    /// True when the database rejected the segment's data itself, so trying
    /// again can never succeed; anything else (unreachable database, a
    /// missing partition, a lock, a file error) is worth retrying.
    fn is_rejected_data(&self) -> bool {
        matches!(self, ReplayError::Store(err) if err.is_rejected_data())
    }
}

/// Where replayed events go besides `events`: the outbox, and the
/// privacy view every event is screened with; and where their links are
/// read and the events written (on a Spider cluster, the data nodes, past
/// the head).
#[derive(Clone)]
pub(crate) struct Sinks {
    pub outbox: Arc<dyn OutboxSink>,
    pub privacy: Privacy,
    pub router: Option<crate::store::cluster::Router>,
    /// The rows the server's requests read, so their events' readers need
    /// no second read ([`super::readers`]).
    pub readers: Arc<super::readers::ReaderHandoff>,
}

/// Replay until told to stop, then make one final pass.
pub(crate) async fn run(
    pool: MySqlPool,
    settings: JournalSettings,
    sinks: Sinks,
    sealed: Arc<Notify>,
    mut stop: watch::Receiver<bool>,
) {
    let mut retries = settings.retry_schedule().start();
    let mut down = NodesDown::default();
    loop {
        down.forget_older_than(settings.retry_after);
        let outcome = replay_all(&pool, &settings.dir, &sinks, &mut down).await;
        let failed = outcome.is_err();
        let held = matches!(outcome, Ok(held) if held > 0);
        if *stop.borrow() {
            break;
        }
        // After a failure, wait by the schedule before retrying; otherwise
        // wait for work. Events held for a failed data node are tried
        // again by the schedule too, while new segments are replayed as
        // they are sealed.
        let pause = if failed || held {
            retries.wait_after_failure()
        } else {
            retries.succeeded();
            settings.retry_after * 5
        };
        tokio::select! {
            _ = sealed.notified(), if !failed => {}
            _ = tokio::time::sleep(pause) => {}
            // A dropped sender means the pipeline is gone: stop as well.
            changed = stop.changed() => if changed.is_err() { break },
        }
    }
    // The writer has sealed its last segment before we were told to stop
    // (see `EventPipeline::shutdown`), so this pass sees everything journaled.
    let _ = replay_all(&pool, &settings.dir, &sinks, &mut down).await;
}

/// Replay every sealed segment, oldest first; stop at the first failure so
/// the order of commits follows the order of the journal. A segment whose
/// data the database rejects is set aside (renamed `.failed`, for an
/// operator to inspect) so that it cannot block every later event. Events
/// held for a failed data node (`down`) do not stop the pass: the later
/// segments' other events are stored. Returns how many events are held.
pub(crate) async fn replay_all(
    pool: &MySqlPool,
    dir: &Path,
    sinks: &Sinks,
    down: &mut NodesDown,
) -> Result<usize, ReplayError> {
    let mut held = 0;
    for segment in sealed_segments(dir).await? {
        match replay_segment(pool, &segment, sinks, down).await {
            Ok(waiting) => held += waiting,
            Err(err) if err.is_rejected_data() => quarantine(&segment, &err, "rejected").await?,
            Err(err @ ReplayError::BadLine { .. }) => {
                quarantine(&segment, &err, "unreadable").await?;
            }
            Err(err) => {
                tracing::warn!(%err, segment = %segment.display(), "replay failed; will retry");
                metrics::counter!("linktrack_replay_failures_total").increment(1);
                // Apart from the passes that held a data node's events
                // (counted above as failures too): the database the pass
                // needs failed, the head or the one server.
                metrics::counter!("linktrack_replay_errors_total").increment(1);
                return Err(err);
            }
        }
    }
    if held > 0 {
        // The pass could not store everything: a failure, as a failed
        // pass's, for the alerts that watch this counter.
        metrics::counter!("linktrack_replay_failures_total").increment(1);
    }
    metrics::gauge!("linktrack_replay_held_events").set(held as f64);
    Ok(held)
}

/// Set a segment aside as `.failed`, whole, with a log line and a metric
/// labelled by why (`rejected` by the database, `unreadable` line).
async fn quarantine(
    segment: &Path,
    err: &ReplayError,
    reason: &'static str,
) -> Result<(), ReplayError> {
    let failed = segment.with_extension("failed");
    tracing::error!(
        %err,
        reason,
        segment = %failed.display(),
        "journal segment set aside for inspection"
    );
    metrics::counter!("linktrack_replay_quarantined_total", "reason" => reason).increment(1);
    tokio::fs::rename(segment, &failed)
        .await
        .map_err(|source| JournalError::Io {
            path: segment.to_owned(),
            source,
        })?;
    Ok(())
}

/// Store a segment's events and delete it; with events held for a failed
/// data node, keep their lines only (returning how many).
async fn replay_segment(
    pool: &MySqlPool,
    segment: &Path,
    sinks: &Sinks,
    down: &mut NodesDown,
) -> Result<usize, ReplayError> {
    let text = tokio::fs::read_to_string(segment)
        .await
        .map_err(|source| JournalError::Io {
            path: segment.to_owned(),
            source,
        })?;
    let Segment {
        events,
        lines,
        bad_line,
    } = parse_segment(&text);
    let journaled = events.len();
    let ids: Vec<[u8; 16]> = events.iter().map(|event| event.row.event_id).collect();
    let stored = store_events(pool, sinks, events, down).await?;
    if !stored.held.is_empty() {
        let held: Vec<&str> = lines
            .iter()
            .zip(&ids)
            .filter(|(_, id)| stored.held.contains(*id))
            .map(|(line, _)| *line)
            .collect();
        if bad_line.is_none() {
            // With an unreadable line the file stays whole, for the
            // quarantine once the held events are in.
            keep_only(segment, &held).await?;
            metrics::gauge!("linktrack_journal_backlog_events")
                .decrement((journaled - held.len()) as f64);
        }
        tracing::debug!(
            events = stored.rows,
            held = held.len(),
            segment = %segment.display(),
            "replayed but for the events of a failed data node"
        );
        return Ok(held.len());
    }
    if let Some((line, source)) = bad_line {
        // The readable events are in; the file stays whole for inspection
        // (replaying it again later is a no-op for those events).
        return Err(ReplayError::BadLine {
            segment: segment.to_owned(),
            line,
            source,
        });
    }
    tokio::fs::remove_file(segment)
        .await
        .map_err(|source| JournalError::Io {
            path: segment.to_owned(),
            source,
        })?;
    metrics::gauge!("linktrack_journal_backlog_events").decrement(journaled as f64);
    tracing::debug!(events = stored.rows, segment = %segment.display(), "replayed");
    Ok(0)
}

/// Replace `segment` by a file of `lines` (the held events'), written
/// beside it and renamed over it: a crash leaves either the old segment
/// whole (its stored events are no-ops when replayed again) or the new one.
async fn keep_only(segment: &Path, lines: &[&str]) -> Result<(), ReplayError> {
    let mut text = String::with_capacity(lines.iter().map(|line| line.len() + 1).sum());
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    let next = segment.with_extension("held");
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| JournalError::Io { path, source }
    };
    tokio::fs::write(&next, text).await.map_err(io(&next))?;
    tokio::fs::rename(&next, segment)
        .await
        .map_err(io(segment))?;
    Ok(())
}

/// What [`store_events`] did.
#[derive(Debug, Default)]
pub(crate) struct Stored {
    /// Rows stored.
    pub rows: usize,
    /// The `event_id`s of the events held for a failed data node (a
    /// Spider cluster's): not stored, to be tried again.
    pub held: HashSet<[u8; 16]>,
}

/// Store journaled (or fallback-queued) events: links resolved, screened
/// for people's choices ([`screen`]), unsubscribes applied, last open days
/// noted, rows inserted, outbound queued. Idempotent on the event ids. On
/// a Spider cluster, the events whose link or data table lies on a data
/// node that fails (or that `down` names) are held, not stored, and
/// the others stored.
pub(crate) async fn store_events(
    pool: &MySqlPool,
    sinks: &Sinks,
    events: Vec<Replayable>,
    down: &mut NodesDown,
) -> Result<Stored, StoreError> {
    // The view the whole batch is screened with; `erase` waits for
    // batches begun before its erasure (`Privacy::begin_store`).
    let view = sinks.privacy.begin_store(pool).await?;
    let (resolved, mut held) =
        resolve_links(pool, sinks.router.as_ref(), &sinks.readers, events, down).await?;
    let screened = screen(view.privacy(), resolved);
    // Suppressions first: they matter more than the statistics, and once
    // the events are visible the suppressions are too.
    apply_unsubscribes(pool, view.privacy(), &screened).await?;
    crate::store::privacy::note_last_opens(pool, &screened.last_opens).await?;
    let mut rows = screened.rows;
    if let Some(router) = &sinks.router {
        // Rows bound for a node known to be down wait, before they are
        // queued out.
        let (go, wait) = router.hold_for_nodes_down(rows, down);
        held.extend(wait.iter().map(|row| row.event_id));
        rows = go;
    }
    // Events out: queued before the segment goes, so none is lost; and
    // before the events are visible, so the rollup's settle pass, which
    // releases held rows of the events it rolls, never rolls an event
    // whose row is not queued yet (that row would wait for the safety net).
    sinks.outbox.enqueue(pool, &rows).await?;
    let failed = insert_with_partitions(pool, sinks.router.as_ref(), &rows, down).await?;
    drop(view);
    let stored = rows.len() - failed.len();
    held.extend(failed);
    metrics::counter!("linktrack_events_written_total").increment(stored as u64);
    Ok(Stored { rows: stored, held })
}

/// A batch's rows once screened.
#[derive(Debug, Default)]
struct Screened {
    /// What is stored (and sent, but for withheld rows).
    rows: Vec<EventRow>,
    /// `track: "last_open_day"` opens: (address, UTC day), no event.
    last_opens: Vec<(String, NaiveDate)>,
    /// Addresses to suppress (unsubscribes).
    suppress: Vec<String>,
    /// Erased addresses that unsubscribed: suppressed as their keyed hash.
    suppress_hashed: Vec<[u8; 32]>,
}

/// What the replay keeps of each resolved event, by whose letter it is
/// (docs/privacy.md):
/// * no letter (a shared row, a late hit) or an erased letter's row (its
///   address blanked): no network or user agent;
/// * the reader withdrew from tracking: the event is kept for nobody
///   ([`EventRow::withhold`]) and not sent out; an unsubscribe still
///   names whom it unsubscribes, without the request's details;
/// * the reader was erased after the letter was made (the erase ran while
///   the event waited): stored without address, network or user agent;
/// * a `last_open_day` letter's open: only the day, as the address's last
///   open; no event.
fn screen(privacy: &Privacy, resolved: Vec<(EventRow, bool)>) -> Screened {
    let mut out = Screened::default();
    for (mut row, last_open_pixel) in resolved {
        let last_open = last_open_pixel && row.kind == EventKind::Open;
        if row.is_withheld() {
            out.rows.push(row);
            continue;
        }
        let email = match row.email.take() {
            Some(email) if !email.is_empty() && row.has_letter() => email,
            kept => {
                // Nobody's letter: a shared row, a late hit, an erased letter.
                row.email = kept.filter(|email| !email.is_empty());
                row.forget_request();
                if !last_open {
                    out.rows.push(row);
                }
                continue;
            }
        };
        let made_at = Token::from_bytes(&row.token).map_or(row.occurred_at, |t| t.created_at());
        let unsubscribe = row.kind == EventKind::Unsubscribe;
        match privacy.withholds_address(&email, made_at) {
            Withheld::No if last_open => {
                let day = row.occurred_at.date_naive();
                out.last_opens
                    .push((crate::address::normalize(&email), day));
                continue;
            }
            Withheld::No => {
                if unsubscribe {
                    out.suppress.push(email.clone());
                }
                row.email = Some(email);
            }
            Withheld::OptedOut if unsubscribe => {
                row.forget_request();
                out.suppress.push(email.clone());
                row.email = Some(email);
            }
            Withheld::OptedOut => row.withhold(),
            Withheld::Erased => {
                row.forget_request();
                if unsubscribe {
                    if let Some(key) = privacy.key() {
                        out.suppress_hashed.push(key.digest(&email));
                    }
                }
            }
        }
        if !last_open {
            out.rows.push(row);
        }
    }
    out
}

/// What a segment file holds.
#[derive(Debug)]
struct Segment<'a> {
    events: Vec<Replayable>,
    /// Each event's line, as written (kept for events held back).
    lines: Vec<&'a str>,
    /// The first unreadable line (1-based) that is not a torn tail.
    bad_line: Option<(usize, JournalLineError)>,
}

/// The events of a segment. Every line the writer finished ends with a
/// newline; a last line without one is the torn tail of a write a crash
/// interrupted, never acknowledged, and the only line that may be skipped.
fn parse_segment(text: &str) -> Segment<'_> {
    let torn_tail = !text.is_empty() && !text.ends_with('\n');
    let lines = lines(text);
    let mut segment = Segment {
        events: Vec::with_capacity(lines.len()),
        lines: Vec::with_capacity(lines.len()),
        bad_line: None,
    };
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match JournalLine::decode_replayable(line) {
            Ok(event) => {
                segment.events.push(event);
                segment.lines.push(line);
            }
            Err(_) if torn_tail && index + 1 == lines.len() => {
                tracing::warn!("skipping the torn last line of a journal segment");
            }
            Err(err) => {
                if segment.bad_line.is_none() {
                    segment.bad_line = Some((index + 1, err));
                }
            }
        }
    }
    segment
}

/// `text`'s lines as `str::lines` gives them (split at `\n`, a `\r`
/// before it dropped, no empty line after a last newline), the newlines
/// found by `memchr` (`str::lines` searches a byte-wise word at a time).
fn lines(text: &str) -> Vec<&str> {
    let mut lines = Vec::with_capacity(text.len() / 128 + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
        // A newline is ASCII: `start` and `end` are character boundaries.
        let line = text.get(start..end).unwrap_or_default();
        lines.push(line.strip_suffix('\r').unwrap_or(line));
        start = end + 1;
    }
    if start < text.len() {
        // A last line without its newline keeps a `\r` (as `str::lines`).
        lines.push(text.get(start..).unwrap_or_default());
    }
    lines
}

/// Link reads one replay runs at once: with the buffer pool cold, one
/// statement reads page after page from disk, one after another; a few at
/// once keep the disk busy.
const RESOLVE_STATEMENTS: usize = 4;

/// The rows of a segment's events, with the link's fields filled in where
/// the event was journaled with its token only (opens: see
/// `record`'s version 2). The links are read [`links::MOST_SLOTS`] tokens
/// a statement, one partition per day, [`RESOLVE_STATEMENTS`] statements at
/// once (a segment may name thousands of links). An event
/// whose token names no link is dropped and counted: a forged or mistyped
/// pixel URL is no open.
/// Each row comes back with whether its link is a `last_open_day` letter's
/// pixel (its row's URL says so, [`links::LAST_OPEN_DAY_PIXEL`]).
/// A row journaled without its reader's address (version 3) gets it from
/// the link's row; when that row is gone (its day dropped since the hit, or
/// deleted), the event is a late one, nobody's.
/// A reader's row a request or an earlier replay read and held
/// ([`ReaderHandoff`]) is taken from memory, not read again; the rows
/// read here are held for the next hits.
/// On a Spider cluster the links are read on their data nodes, each on
/// its own: the events whose link lies on a node that fails are held
/// (their `event_id`s, second).
async fn resolve_links(
    pool: &MySqlPool,
    router: Option<&crate::store::cluster::Router>,
    readers: &ReaderHandoff,
    events: Vec<Replayable>,
    down: &mut NodesDown,
) -> Result<(Vec<(EventRow, bool)>, HashSet<[u8; 16]>), StoreError> {
    let mut tokens: Vec<Token> = events
        .iter()
        .filter(|event| event.resolve != Resolve::Nothing)
        .filter_map(|event| Token::from_bytes(&event.row.token).ok())
        .collect();
    let mut held = HashSet::new();
    if tokens.is_empty() {
        let rows = events.into_iter().map(|event| (event.row, false)).collect();
        return Ok((rows, held));
    }
    // A held row is the row a read would return, whatever the event's kind
    // (opens read nothing on their way, so theirs are not held).
    let handed = readers.find(&tokens);
    metrics::counter!("linktrack_replay_rows_handed_over_total").increment(handed.len() as u64);
    tokens.retain(|token| !handed.contains_key(token));
    tokens.sort_unstable();
    tokens.dedup();
    let epoch = readers.epoch();
    let (found, unread) = match (router, tokens.is_empty()) {
        (_, true) => (HashMap::new(), HashSet::new()),
        (Some(router), false) => router.lookup_held(&tokens, down).await?,
        (None, false) => (
            links::lookup_many_concurrently(pool, &tokens, RESOLVE_STATEMENTS).await?,
            HashSet::new(),
        ),
    };
    // Held for the next hits of the same links (a hot letter's).
    let found: HashMap<Token, Arc<StoredLink>> = found
        .into_iter()
        .map(|(token, link)| (token, Arc::new(link)))
        .collect();
    readers.hold_all(epoch, found.iter().map(|(token, link)| (*token, link)));
    let mut rows = Vec::with_capacity(events.len());
    let mut unknown = 0u64;
    for Replayable { mut row, resolve } in events {
        let link = match resolve {
            Resolve::Nothing => {
                rows.push((row, false));
                continue;
            }
            Resolve::Link | Resolve::Reader => {
                let token = Token::from_bytes(&row.token).ok();
                if token.is_some_and(|token| unread.contains(&token)) {
                    held.insert(row.event_id);
                    continue;
                }
                token.and_then(|token| {
                    handed
                        .get(&token)
                        .or_else(|| found.get(&token))
                        .map(|link| &**link)
                })
            }
        };
        match (link, resolve) {
            (Some(link), _) => {
                fill_link(&mut row, link);
                let last_open_pixel =
                    link.kind == LinkKind::Pixel && link.url == links::LAST_OPEN_DAY_PIXEL;
                rows.push((row, last_open_pixel));
            }
            (None, Resolve::Reader) => {
                make_late(&mut row);
                rows.push((row, false));
            }
            (None, _) => unknown += 1,
        }
    }
    if unknown > 0 {
        tracing::debug!(unknown, "dropped events whose token names no link");
        metrics::counter!("linktrack_replay_unknown_tokens_total").increment(unknown);
    }
    Ok((rows, held))
}

/// A hit whose link row is gone by the replay: a late event, as an
/// uncached hit on it would have been (mailing and position, nobody).
fn make_late(row: &mut EventRow) {
    row.link_id = Some(0);
    row.letter_id = None;
    row.email = None;
    row.forget_request();
}

/// The event's copy of its link's fields (`events` is denormalised so the
/// statistics never join `links`).
fn fill_link(row: &mut EventRow, link: &StoredLink) {
    row.link_id = Some(link.id);
    row.mailing_id = Some(link.mailing_id.clone());
    row.letter_id = Some(link.letter_id);
    row.email = Some(link.email.clone());
    row.position = Some(link.position);
}

/// Suppress the addresses of unsubscribe events. Usually the handler did it
/// already (this is then a no-op); while the database was away, this is
/// where the suppression happens. An address erased meanwhile is
/// suppressed as its keyed hash.
async fn apply_unsubscribes(
    pool: &MySqlPool,
    privacy: &Privacy,
    screened: &Screened,
) -> Result<(), StoreError> {
    if !screened.suppress.is_empty() {
        let emails: Vec<&str> = screened.suppress.iter().map(String::as_str).collect();
        suppress_unsubscribed(pool, &emails).await?;
    }
    if !screened.suppress_hashed.is_empty() && privacy.key().is_some() {
        let reason = crate::store::suppressions::SuppressionReason::Unsubscribe;
        SUPPRESSIONS
            .add_hashed(pool, &screened.suppress_hashed, reason.as_str())
            .await?;
    }
    Ok(())
}

/// Insert `rows`; when a day has no partition yet, create the partitions
/// through that day and try once more. On a Spider cluster in the shard
/// layout the rows go straight to the data nodes (the router), so they
/// are stored while the head is down, each node on its own: returns the
/// `event_id`s of the rows held for a node that failed.
async fn insert_with_partitions(
    pool: &MySqlPool,
    router: Option<&crate::store::cluster::Router>,
    rows: &[EventRow],
    down: &mut NodesDown,
) -> Result<HashSet<[u8; 16]>, StoreError> {
    let mut made_days = false;
    loop {
        let inserted = match router {
            Some(router) => router
                .insert_events_held(rows, down)
                .await
                .map(|written| written.held),
            None => insert_idempotent(pool, rows).await.map(|_| HashSet::new()),
        };
        match inserted {
            Err(StoreError::NoPartition { date, .. }) if !made_days => {
                let ahead = (date - Utc::now().date_naive()).num_days().clamp(1, 30) as u32;
                tracing::warn!(%date, "events has no partition for the day; creating it");
                partitions::ensure_ahead(pool, ahead).await?;
                made_days = true;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Texts of lines, carriage returns and other characters split as
        /// `str::lines` splits them.
        #[test]
        fn segments_split_into_lines_as_str_lines_splits_them(text in "[a\\t\r\né\\\\]{0,40}") {
            proptest::prop_assert_eq!(lines(&text), text.lines().collect::<Vec<_>>());
        }
    }

    fn row() -> EventRow {
        EventRow {
            event_id: [1; 16],
            occurred_at: Utc::now(),
            kind: EventKind::Open,
            token: [2; 16],
            link_id: None,
            mailing_id: None,
            letter_id: None,
            email: None,
            position: None,
            ip: None,
            user_agent: Some("ua".into()),
            country: None,
            bot: false,
            bot_reason: None,
        }
    }

    fn line(row: &EventRow) -> String {
        String::from_utf8(JournalLine::encode(row)).unwrap()
    }

    #[test]
    fn a_bad_line_with_its_newline_is_not_a_torn_tail() {
        let good = line(&row());
        for text in [
            format!("{good}\n{{\"kind\":\n{good}\n"),
            format!("{good}\n{good}\n{}\n", &good[..good.len() / 2]),
        ] {
            let segment = parse_segment(&text);
            assert_eq!(segment.events.len(), 2, "every readable line is kept");
            assert!(
                matches!(
                    segment.bad_line,
                    Some((_, JournalLineError::Unreadable(_)))
                        | Some((_, JournalLineError::FieldCount { .. }))
                ),
                "{segment:?}"
            );
        }
        // A torn last line (no newline) is skipped, not a bad line.
        let torn_text = format!("{good}\n{}", &good[..good.len() - 1]);
        let torn = parse_segment(&torn_text);
        assert_eq!(torn.events.len(), 1);
        assert!(torn.bad_line.is_none(), "{torn:?}");
        assert_eq!(
            parse_segment(&format!("{good}\nx\n{good}\n"))
                .bad_line
                .unwrap()
                .0,
            2
        );
    }

    #[test]
    fn the_screen_keeps_of_each_event_what_its_readers_choices_allow() {
        use crate::address::AddressKey;
        let key = AddressKey::new(&[3; 32]);
        let made = Utc::now() - chrono::Duration::hours(1);
        let privacy = Privacy::in_memory(
            key.clone(),
            &["out@example.com"],
            &[("gone@example.com", Utc::now())],
        );
        let token = *crate::token::Token::at(made).as_bytes();
        let hit = |kind, letter: u64, email: &str| EventRow {
            kind,
            token,
            link_id: Some(9),
            mailing_id: Some("m".into()),
            letter_id: Some(letter),
            email: Some(email.into()),
            ip: Some("192.0.2.0".into()),
            ..row()
        };
        let screened = screen(
            &privacy,
            vec![
                (hit(EventKind::Click, 5, "in@example.com"), false),
                (hit(EventKind::Click, 6, "out@example.com"), false),
                (hit(EventKind::Unsubscribe, 6, "OUT@example.com"), false),
                (hit(EventKind::Click, 7, "gone@example.com"), false),
                (hit(EventKind::Unsubscribe, 7, "gone@example.com"), false),
                (hit(EventKind::Image, 0, ""), false),
                (hit(EventKind::Open, 5, "in@example.com"), true),
                (hit(EventKind::Open, 6, "out@example.com"), true),
            ],
        );
        /// Kind, letter, address, request details kept, withheld.
        type Kept<'a> = (EventKind, Option<u64>, Option<&'a str>, bool, bool);
        let kept: Vec<Kept<'_>> = screened
            .rows
            .iter()
            .map(|r| {
                let request = r.ip.is_some() || r.user_agent.is_some();
                (
                    r.kind,
                    r.letter_id,
                    r.email.as_deref(),
                    request,
                    r.is_withheld(),
                )
            })
            .collect();
        assert_eq!(
            kept,
            [
                (
                    EventKind::Click,
                    Some(5),
                    Some("in@example.com"),
                    true,
                    false
                ),
                (EventKind::Click, Some(0), None, false, true),
                (
                    EventKind::Unsubscribe,
                    Some(6),
                    Some("OUT@example.com"),
                    false,
                    false
                ),
                (EventKind::Click, Some(7), None, false, false),
                (EventKind::Unsubscribe, Some(7), None, false, false),
                (EventKind::Image, Some(0), None, false, false),
            ]
        );
        assert_eq!(screened.suppress, ["OUT@example.com"]);
        assert_eq!(screened.suppress_hashed, [key.digest("gone@example.com")]);
        let today = Utc::now().date_naive();
        assert_eq!(screened.last_opens, [("in@example.com".to_owned(), today)]);
    }

    #[test]
    fn a_torn_tail_line_is_skipped() {
        let row = row();
        let line = line(&row);
        let text = format!("{line}\n{line}\n{}", &line[..line.len() / 2]);
        let segment = parse_segment(&text);
        let rows: Vec<EventRow> = segment.events.into_iter().map(|e| e.row).collect();
        assert_eq!(rows, vec![row.clone(), row]);
        assert!(segment.bad_line.is_none());
    }
}
