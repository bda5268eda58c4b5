//! The settle pass's SQL: the rollup, inside the transaction that counts a
//! batch, judges the batch's clicks and opens again with their letters in
//! view ([`crate::bots::letter_judgement`]) and writes the final verdicts to
//! `events`, so the rollup tables only ever see settled verdicts. An event
//! is rolled exactly once, so a verdict changed here is counted once, with
//! its final value; a crash before COMMIT leaves both verdict and counts
//! as they were, and the batch is judged again.

use super::bot_reason::{self, read_bot_reason};
use super::error::StoreError;
use super::recent_hits::{stored_ip, RecentHits};
use super::rolled_batch::RolledBatch;
use crate::bots::letter_judgement::{judge_first, Judged, LetterHit, VerdictRules};
use crate::kind::EventKind;
use crate::token::Token;
use chrono::{DateTime, NaiveDateTime, SubsecRound, Utc};
use sqlx::{MySqlConnection, QueryBuilder};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// Letters (or events) per statement with an id list: under MariaDB's
/// `in_predicate_conversion_threshold` (1,000), like the context read.
const LETTERS_PER_STATEMENT: usize = 500;
/// Letters per context read: under MariaDB's `in_predicate_conversion_threshold`
/// (1,000), so the list stays a range on all four parts of `mailing_letter`.
pub const LETTERS_PER_CONTEXT_READ: usize = 500;

type EventLine = (
    u64,
    String,
    u64,
    EventKind,
    NaiveDateTime,
    Option<u32>,
    Option<String>,
    Option<String>,
    i8,
    Option<String>,
    Vec<u8>,
);

/// One stored hit with what the judge needs and what it may change.
struct Stored {
    id: u64,
    hit: LetterHit,
    bot: bool,
    token: Vec<u8>,
}

fn stored((id, _, _, kind, at, position, ip, agent, bot, reason, token): EventLine) -> Stored {
    Stored {
        id,
        hit: LetterHit {
            kind,
            at: at.and_utc(),
            position,
            ip: stored_ip(ip.as_deref()),
            user_agent: agent.map(Arc::from),
            reason,
        },
        bot: bot != 0,
        token,
    }
}

/// How far a settling hit's judgement looks around it.
fn reach(rules: &VerdictRules) -> chrono::Duration {
    chrono::Duration::from_std(
        rules
            .honeypot_window
            .max(rules.burst_window)
            .max(rules.check_window)
            .max(rules.min_click_delay),
    )
    .unwrap_or_default()
}

/// How much earlier than a batch's windows the memory of recent hits keeps
/// them, for the next batch's stragglers.
const KEPT_BEFORE: chrono::Duration = chrono::Duration::seconds(5);

/// The window the context read of a mailing's settling `letters` covers:
/// the first and last hit, widened by `reach` (to the microsecond, as the
/// read's statement writes them).
fn window(
    letters: &BTreeMap<u64, Vec<Stored>>,
    reach: chrono::Duration,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let times = letters.values().flatten().map(|s| s.hit.at);
    let (first, last) = (times.clone().min()?, times.max()?);
    let from = first.checked_sub_signed(reach)?.trunc_subsecs(6);
    let to = last.checked_add_signed(reach)?.trunc_subsecs(6);
    Some((from, to))
}

/// Settle the verdicts of `batch`'s clicks and opens; returns how many
/// changed. The letters' hits around them come from `recent` where it
/// holds them, else from the table; `visible` is the largest id known to
/// have no row committed after it with a smaller one (`u64::MAX`: ids
/// become visible in order).
pub async fn settle_batch(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
    rules: &VerdictRules,
    recent: &RecentHits,
    visible: u64,
) -> Result<u64, StoreError> {
    let lines: Vec<EventLine> = batch
        .bind_range(sqlx::query_as(concat!(
            "SELECT id, mailing_id, letter_id, kind, occurred_at, position, ip, user_agent, \
                 bot, ",
            read_bot_reason!(),
            ", uuid FROM events \
                 WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? \
                 AND mailing_id IS NOT NULL AND letter_id > 0 \
                 AND kind IN ('click', 'open', 'image')"
        )))
        .fetch_all(&mut *conn)
        .await?;
    // mailing -> letter -> hits being settled
    let mut letters: BTreeMap<String, BTreeMap<u64, Vec<Stored>>> = BTreeMap::new();
    for line in lines {
        let (mailing, letter) = (line.1.clone(), line.2);
        letters
            .entry(mailing)
            .or_default()
            .entry(letter)
            .or_default()
            .push(stored(line));
    }
    let reach = reach(rules);
    let windows: BTreeMap<&str, (DateTime<Utc>, DateTime<Utc>)> = letters
        .iter()
        .filter_map(|(mailing, by_letter)| Some((mailing.as_str(), window(by_letter, reach)?)))
        .collect();
    let Some(floor) = windows.values().map(|(from, _)| *from).min() else {
        return Ok(0);
    };
    let mut held = recent
        .take(
            conn,
            batch,
            floor.checked_sub_signed(KEPT_BEFORE).unwrap_or(floor),
            visible,
        )
        .await?;
    let mut changes: HashMap<Judged, Vec<u64>> = HashMap::new();
    let mut revised: Vec<(&str, u64, u64, Option<String>)> = Vec::new();
    for (mailing, by_letter) in &letters {
        let Some(&(from, to)) = windows.get(mailing.as_str()) else {
            continue;
        };
        let covered = held.covers(from, to);
        let read = match (covered, held.outside()) {
            (true, None) => HashMap::new(),
            (true, Some(outside)) => {
                letter_clicks(conn, mailing, by_letter, (from, to), Some(outside)).await?
            }
            (false, _) => letter_clicks(conn, mailing, by_letter, (from, to), None).await?,
        };
        let delivered = deliveries(conn, mailing, by_letter.keys().copied()).await?;
        for (letter, settling) in by_letter {
            // A set, not a scan per hit: a hot letter has hundreds of hits.
            let settling_ids: HashSet<u64> = settling.iter().map(|s| s.id).collect();
            let mut hits: Vec<&LetterHit> = settling.iter().map(|s| &s.hit).collect();
            if covered {
                hits.extend(
                    held.window(mailing, *letter, from, to)
                        .filter(|h| !settling_ids.contains(&h.id))
                        .map(|h| &h.hit),
                );
            }
            hits.extend(
                read.get(letter)
                    .into_iter()
                    .flatten()
                    .filter(|c| !settling_ids.contains(&c.id))
                    .map(|c| &c.hit),
            );
            for (id, judged) in judge(rules, settling, &hits, delivered.get(letter)) {
                revised.push((mailing.as_str(), *letter, id, judged.reason.clone()));
                changes.entry(judged).or_default().push(id);
            }
        }
    }
    let mut changed = 0;
    for (judged, mut ids) in changes {
        // In id order, each statement's rows share pages (the batch's ids
        // are a range of the partition): gathered letter by letter, every
        // statement of a hot mailing's batch reached across all of them.
        ids.sort_unstable();
        changed += write(conn, batch, &judged, &ids).await?;
    }
    held.revise(revised);
    recent.put_back(held, batch);
    Ok(changed)
}

/// Judge one letter's settling hits, the first of `hits`, with its hits
/// around them; the verdicts that differ from the stored ones.
fn judge(
    rules: &VerdictRules,
    settling: &[Stored],
    hits: &[&LetterHit],
    delivered: Option<&DateTime<Utc>>,
) -> Vec<(u64, Judged)> {
    // Linktrack did not deliver it: the token's time is the build time.
    let delivered_at = delivered.copied().unwrap_or_else(|| {
        settling
            .first()
            .and_then(|s| Token::from_bytes(&s.token).ok())
            .map(|t| t.created_at())
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    });
    let verdicts = judge_first(rules, delivered_at, hits, settling.len());
    settling
        .iter()
        .zip(verdicts)
        .filter(|(stored, judged)| judged.bot != stored.bot || judged.reason != stored.hit.reason)
        .map(|(stored, judged)| (stored.id, judged))
        .collect()
}

/// The clicks and opens of the mailing's `letters` within the windows
/// around their settling hits (the honeypot clicks, bursts, walks and
/// time-of-click checks they may belong to; the opens that show a person
/// read the letter before a fast click), by
/// the `mailing_letter` index: one short range per letter, in the one or
/// two day partitions the window touches (`inserted` is the UTC day of
/// `occurred_at`). With `outside` (`lo`, `high`), only the rows with an id
/// outside `lo < id <= high`, the ones [`RecentHits`] does not hold.
async fn letter_clicks(
    conn: &mut MySqlConnection,
    mailing: &str,
    letters: &BTreeMap<u64, Vec<Stored>>,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    outside: Option<(u64, u64)>,
) -> Result<HashMap<u64, Vec<Stored>>, StoreError> {
    let ids: Vec<u64> = letters.keys().copied().collect();
    let mut found: HashMap<u64, Vec<Stored>> = HashMap::new();
    for chunk in ids.chunks(LETTERS_PER_CONTEXT_READ) {
        let mut sql = context_read_sql(mailing, from.naive_utc(), to.naive_utc(), chunk);
        if let Some((lo, high)) = outside {
            // Only the rows the memory of recent hits does not hold: on
            // the index, the entries of the others are passed over
            // without reading their rows.
            sql.push_str(&format!(" AND (id <= {lo} OR id > {high})"));
        }
        // Not kept in the connection's statement cache: each list is new.
        let lines: Vec<EventLine> = sqlx::query_as(&sql)
            .persistent(false)
            .fetch_all(&mut *conn)
            .await?;
        for line in lines {
            found.entry(line.2).or_default().push(stored(line));
        }
    }
    Ok(found)
}

/// The settle pass's read of `letters`' clicks and opens from `from` to `to`, the
/// values written in. A list of bound ids made a prepared statement per
/// list whose plan was made at each execution (far slower than
/// the values written in); MariaDB
/// turns an IN list of 1,000 or more values into a join on a derived table
/// that reads every click of each letter (`in_predicate_conversion_threshold`),
/// hence [`LETTERS_PER_CONTEXT_READ`]. The index is forced: with three
/// kinds a letter (clicks and opens) the ranges are three times as many,
/// and on small partitions the optimiser chose to scan them whole, which
/// on a hot mailing is every event of the day. Text goes as a hex literal, so no
/// value can change the statement. Public for the test that EXPLAINs it.
#[doc(hidden)]
pub fn context_read_sql(
    mailing: &str,
    from: NaiveDateTime,
    to: NaiveDateTime,
    letters: &[u64],
) -> String {
    let mut sql = String::with_capacity(400 + letters.len() * 8);
    sql.push_str(concat!(
        "SELECT id, mailing_id, letter_id, kind, occurred_at, position, ip, user_agent, bot, ",
        read_bot_reason!(),
        ", uuid FROM events FORCE INDEX (mailing_letter) WHERE mailing_id = ",
    ));
    super::event_sql::push_text(&mut sql, Some(mailing));
    // Dates and times formatted by chrono: digits, dashes, colons, a dot.
    sql.push_str(&format!(
        " AND inserted >= '{}' AND inserted <= '{}' AND kind IN ('click', 'open', 'image') \
         AND occurred_at >= '{}' AND occurred_at <= '{}' AND letter_id IN (",
        from.date(),
        to.date(),
        from.format("%Y-%m-%d %H:%M:%S%.6f"),
        to.format("%Y-%m-%d %H:%M:%S%.6f"),
    ));
    for (n, letter) in letters.iter().enumerate() {
        if n > 0 {
            sql.push_str(", ");
        }
        super::event_sql::push_number(&mut sql, Some(*letter));
    }
    if letters.is_empty() {
        sql.push_str("NULL");
    }
    sql.push(')');
    sql
}

/// When each of the mailing's `letters` that linktrack sent was delivered.
async fn deliveries(
    conn: &mut MySqlConnection,
    mailing: &str,
    letters: impl Iterator<Item = u64>,
) -> Result<HashMap<u64, DateTime<Utc>>, StoreError> {
    let ids: Vec<u64> = letters.collect();
    let mut found = HashMap::new();
    for chunk in ids.chunks(LETTERS_PER_STATEMENT) {
        let mut sql = QueryBuilder::new(
            "SELECT letter_id, at FROM deliveries WHERE status <> 'rejected' AND mailing_id = ",
        );
        sql.push_bind(mailing).push(" AND letter_id IN (");
        let mut list = sql.separated(", ");
        for id in chunk {
            list.push_bind(*id);
        }
        sql.push(")");
        let rows: Vec<(u64, NaiveDateTime)> = sql.build_query_as().fetch_all(&mut *conn).await?;
        found.extend(rows.into_iter().map(|(id, at)| (id, at.and_utc())));
    }
    Ok(found)
}

/// Write one verdict to the events `ids` (sorted) of the batch's partition.
///
/// Runs of consecutive ids go as `id BETWEEN first AND last`, the rest as
/// an `IN` list. On a hot mailing most of a batch's hits take the same
/// verdict (a scanner's walk, a burst), so its ids are long runs: a range
/// costs the server half of what the same rows cost as listed ids (one
/// range to set up instead of one per id; measured on 100,000 rows: 2.6
/// against 5.1 µs a row).
async fn write(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
    judged: &Judged,
    ids: &[u64],
) -> Result<u64, StoreError> {
    let mut changed = 0;
    let runs = id_runs(ids);
    for chunk in runs.chunks(LETTERS_PER_STATEMENT) {
        let mut sql = QueryBuilder::new("UPDATE events SET bot = ");
        sql.push_bind(judged.bot)
            .push(", bot_reason = ")
            .push_bind(bot_reason::stored(judged.reason.as_deref()).into_owned())
            .push(" WHERE inserted >= ")
            .push_bind(batch.lower)
            .push(" AND inserted < ")
            .push_bind(batch.upper)
            .push(" AND (id IN (");
        let singles = chunk.iter().filter(|(first, last)| first == last);
        let mut list = sql.separated(", ");
        // `IN (NULL)` matches nothing, so the spans can all follow `OR`.
        list.push("NULL");
        for (id, _) in singles {
            list.push_bind(*id);
        }
        sql.push(")");
        for (first, last) in chunk.iter().filter(|(first, last)| first < last) {
            sql.push(" OR id BETWEEN ")
                .push_bind(*first)
                .push(" AND ")
                .push_bind(*last);
        }
        sql.push(")");
        changed += sql.build().execute(&mut *conn).await?.rows_affected();
    }
    Ok(changed)
}

/// Sorted `ids` as runs of consecutive ids, `(first, last)` each (a
/// repeated id joins its run).
fn id_runs(ids: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, last)) if id <= last.saturating_add(1) => *last = (*last).max(id),
            _ => runs.push((id, id)),
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::id_runs;
    use proptest::prelude::*;

    #[test]
    fn consecutive_ids_make_one_run_and_gaps_start_another() {
        assert_eq!(
            id_runs(&[3, 4, 5, 9, 11, 12]),
            vec![(3, 5), (9, 9), (11, 12)]
        );
        assert_eq!(id_runs(&[]), Vec::<(u64, u64)>::new());
        assert_eq!(
            id_runs(&[u64::MAX - 1, u64::MAX]),
            vec![(u64::MAX - 1, u64::MAX)]
        );
    }

    proptest! {
        /// The runs cover exactly the ids given, in order, and two runs
        /// never touch (else they would be one).
        #[test]
        fn runs_cover_exactly_the_ids(mut ids in proptest::collection::vec(0u64..200, 0..120)) {
            ids.sort_unstable();
            let runs = id_runs(&ids);
            let covered: Vec<u64> = runs.iter().flat_map(|&(first, last)| first..=last).collect();
            ids.dedup();
            prop_assert_eq!(covered, ids);
            for pair in runs.windows(2) {
                prop_assert!(pair[0].1 + 1 < pair[1].0);
            }
        }
    }
}
