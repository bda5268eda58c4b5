//! The rollup's counting: one batch of events read ONCE, counted here, and
//! added to every statistics table with one upsert per table (a few for
//! the tables with a row per letter).
//!
//! Why here and not in `INSERT … SELECT … GROUP BY`: the database did the
//! counting before (issue 45), one statement per table, and each statement
//! read the batch's 50,000 events again and grouped them in a temporary
//! table: eleven reads of the batch, the user agent hashed once per
//! dimension, `stats_first_seen` grouped through a temporary table per
//! batch. Counting a batch here costs the database one read of it and the
//! writes of the counted rows: 20 µs of MariaDB CPU per rolled event
//! against 40 before, in the same session on the same events with a 2 GB
//! buffer pool (docs/benchmarks.md); a click is recorded in 27.
//!
//! Unique letters cost no rows of their own: a letter's first open (first
//! click on a position, …) is a new row of `stats_letter_events`, so the
//! rows an upsert added are the new unique letters. Only "clicked any
//! link" needs a row apart (`stats_first_seen`, position 0). Before, every
//! event also wrote one or two `stats_first_seen` rows and its `rolled_by`
//! index, and the counters were grown by a `GROUP BY` over them.
//!
//! The rows go to the database as one JSON document per statement, read
//! with `JSON_TABLE` (MariaDB 10.6+, MySQL 8.0.4+): one bound parameter
//! whatever the number of rows, and a derived table that `ON DUPLICATE KEY
//! UPDATE` can name on both servers (MariaDB has no `AS new` row alias and
//! MySQL 8 deprecates `VALUES()` there). Numbers travel as JSON strings so
//! a `BIGINT UNSIGNED` never passes through a double.
//!
//! The rules are the ones the statements had: what counts as a bot
//! ([`counted_as_bot`]), a mailing's own events against late ones
//! ([`is_regular`]), letter 0 (shared rows) never a letter. The tests in
//! `tests/it/stats.rs` and `tests/it/export.rs` check the tables against
//! a brute-force `GROUP BY` over `events`.

use super::error::StoreError;
use super::rolled_batch::RolledBatch;
use crate::bots::clients::{Classifier, ClientClass};
use crate::kind::EventKind;
use chrono::{NaiveDateTime, Timelike};
use sha2::{Digest, Sha256};
use sqlx::MySqlConnection;
use std::collections::{BTreeSet, HashMap};

/// Rows per upsert statement: a JSON document of a few hundred kB.
const ROWS_PER_STATEMENT: usize = 5_000;

/// One event of a batch, the columns the statistics need.
#[derive(Debug, Clone)]
pub(super) struct BatchEvent {
    pub mailing_id: String,
    pub letter_id: Option<u64>,
    pub kind: EventKind,
    pub occurred_at: NaiveDateTime,
    pub position: Option<u32>,
    pub link_id: Option<u64>,
    pub bot: bool,
    pub bot_reason: Option<String>,
    pub user_agent: Option<String>,
    pub country: Option<String>,
    pub email: Option<String>,
}

type EventRow = (
    String,
    Option<u64>,
    EventKind,
    NaiveDateTime,
    Option<u32>,
    Option<u64>,
    i8,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
);

/// The batch's events of a mailing (one primary-key range in one partition),
/// with the verdicts the settle pass wrote in this transaction.
pub(super) async fn read(
    conn: &mut MySqlConnection,
    batch: &RolledBatch,
) -> Result<Vec<BatchEvent>, StoreError> {
    let rows: Vec<EventRow> = batch
        .bind_range(sqlx::query_as(
            "SELECT mailing_id, letter_id, kind, occurred_at, position, link_id, bot, \
               bot_reason, user_agent, country, email FROM events \
             WHERE inserted >= ? AND inserted < ? AND id > ? AND id <= ? \
               AND mailing_id IS NOT NULL",
        ))
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                mailing_id,
                letter_id,
                kind,
                occurred_at,
                position,
                link_id,
                bot,
                bot_reason,
                user_agent,
                country,
                email,
            )| BatchEvent {
                mailing_id,
                letter_id,
                kind,
                occurred_at,
                position,
                link_id,
                bot: bot != 0,
                bot_reason,
                user_agent,
                country,
                email,
            },
        )
        .collect())
}

/// The bot flag an event is counted under. An unsubscribe is an
/// instruction, not engagement: it is honoured whoever sends it (Gmail and
/// Yahoo send RFC 8058 one-click POSTs from their servers), so it is always
/// counted with the humans. Its verdict stays in `events` and in
/// `stats_bot_reasons`, for information only.
pub(super) fn counted_as_bot(event: &BatchEvent) -> bool {
    event.bot && event.kind != EventKind::Unsubscribe
}

/// A mailing's own event, not a late one: a late event has `link_id` 0 (its
/// row was gone) and is counted in `stats_late` only. (`link_id` is NULL
/// only for events journaled before their link was known.)
pub(super) fn is_regular(event: &BatchEvent) -> bool {
    event.link_id != Some(0)
}

/// A mailing, by its index in [`Tally::mailings`].
type M = u32;

/// A letter's row of `stats_letter_events`: mailing, letter, kind, clicked
/// position (0 for other kinds) and bot flag.
type LetterKey = (M, u64, EventKind, u32, bool);

/// A batch, counted: the rows to add to each statistics table.
#[derive(Debug, Default)]
pub(super) struct Tally {
    mailings: Vec<String>,
    mailing_index: HashMap<String, M>,
    hourly: HashMap<(M, NaiveDateTime, EventKind, bool), u64>,
    minutes: HashMap<(M, NaiveDateTime, EventKind, bool), u64>,
    totals: HashMap<(M, EventKind, bool), u64>,
    links: HashMap<(M, u32, bool), u64>,
    bot_reasons: HashMap<(M, EventKind, String), u64>,
    late: HashMap<(M, u32, EventKind, bool), u64>,
    /// Per letter: count and first time, by kind and clicked position.
    letters: HashMap<LetterKey, (u64, NaiveDateTime)>,
    /// Per letter that clicked (any link): the first click's time.
    first_clicks: HashMap<(M, bool, u64), NaiveDateTime>,
    breakdowns: HashMap<(M, &'static str, String, EventKind, bool), u64>,
    /// The user agents of the batch's opens and clicks, classified.
    agents: HashMap<String, ClientClass>,
}

impl Tally {
    /// Count `events`; minutes only from `minutes_since` on (the chart of
    /// the first hours keeps three days).
    pub(super) fn of(events: &[BatchEvent], minutes_since: NaiveDateTime) -> Tally {
        let classifier = Classifier::default();
        let mut tally = Tally::default();
        for event in events {
            tally.add(event, &classifier, minutes_since);
        }
        tally
    }

    fn mailing(&mut self, id: &str) -> M {
        if let Some(m) = self.mailing_index.get(id) {
            return *m;
        }
        let m = self.mailings.len() as M;
        self.mailings.push(id.to_owned());
        self.mailing_index.insert(id.to_owned(), m);
        m
    }

    fn add(&mut self, event: &BatchEvent, classifier: &Classifier, minutes_since: NaiveDateTime) {
        let m = self.mailing(&event.mailing_id);
        let (kind, at, bot) = (event.kind, event.occurred_at, counted_as_bot(event));
        let engagement = matches!(kind, EventKind::Open | EventKind::Click);
        let class = match (engagement, event.user_agent.as_deref()) {
            (true, Some(agent)) => Some(self.class_of(agent, classifier)),
            (true, None) => Some(classifier.classify(None)),
            (false, _) => None,
        };
        if event.link_id == Some(0) {
            let key = (m, event.position.unwrap_or(0), kind, bot);
            *self.late.entry(key).or_default() += 1;
        }
        if !is_regular(event) {
            return;
        }
        *self.hourly.entry((m, hour(at), kind, bot)).or_default() += 1;
        if engagement && at >= minutes_since {
            *self.minutes.entry((m, minute(at), kind, bot)).or_default() += 1;
        }
        *self.totals.entry((m, kind, bot)).or_default() += 1;
        let clicked = match (kind, event.position) {
            (EventKind::Click, Some(position)) if position > 0 => Some(position),
            _ => None,
        };
        if let Some(position) = clicked {
            *self.links.entry((m, position, bot)).or_default() += 1;
        }
        if event.bot {
            let reason = event.bot_reason.as_deref().unwrap_or("unknown");
            *self
                .bot_reasons
                .entry((m, kind, reason.to_owned()))
                .or_default() += 1;
        }
        if let Some(letter) = event.letter_id.filter(|l| *l > 0) {
            self.add_letter(m, letter, event, bot);
        }
        if let Some(class) = class {
            self.add_breakdowns(m, event, bot, &class);
        }
    }

    /// The class of a user agent, classified once per batch (and recorded
    /// once per installation, [`Tally::write`]).
    fn class_of(&mut self, agent: &str, classifier: &Classifier) -> ClientClass {
        if let Some(class) = self.agents.get(agent) {
            return class.clone();
        }
        let class = classifier.classify(Some(agent));
        self.agents.insert(agent.to_owned(), class.clone());
        class
    }

    fn add_letter(&mut self, m: M, letter: u64, event: &BatchEvent, bot: bool) {
        let (kind, at) = (event.kind, event.occurred_at);
        let position = match kind {
            EventKind::Click => event.position.unwrap_or(0),
            _ => 0,
        };
        let row = self
            .letters
            .entry((m, letter, kind, position, bot))
            .or_insert((0, at));
        row.0 += 1;
        row.1 = row.1.min(at);
        if kind == EventKind::Click {
            keep_first(&mut self.first_clicks, (m, bot, letter), at);
        }
    }

    fn add_breakdowns(&mut self, m: M, event: &BatchEvent, bot: bool, class: &ClientClass) {
        let provider = event
            .email
            .as_deref()
            .map_or("unknown", crate::address::mailbox_provider);
        let values: [(&'static str, &str); 6] = [
            ("client", &class.client),
            ("client_type", class.client_type.as_str()),
            ("os", &class.os),
            ("device", class.device.as_str()),
            ("provider", provider),
            ("country", event.country.as_deref().unwrap_or("unknown")),
        ];
        for (dimension, value) in values {
            let key = (m, dimension, value.to_owned(), event.kind, bot);
            *self.breakdowns.entry(key).or_default() += 1;
        }
    }

    /// Add the counted batch to every statistics table; `batch` names the
    /// rows this batch adds to `stats_first_seen` (its `rolled_by`).
    /// One transaction (the caller's): the new rows counted here are
    /// exactly the new unique letters.
    pub(super) async fn write(
        &self,
        conn: &mut MySqlConnection,
        batch: &RolledBatch,
    ) -> Result<(), StoreError> {
        self.write_agents(conn).await?;
        let name = |m: &M| self.mailings[*m as usize].as_str();
        upsert(conn, HOURLY, self.timed_rows(&self.hourly)).await?;
        upsert(conn, MINUTES, self.timed_rows(&self.minutes)).await?;
        let rows = self.totals.iter().map(|((m, k, b), n)| {
            vec![
                name(m).to_owned(),
                k.as_str().into(),
                flag(b),
                n.to_string(),
            ]
        });
        upsert(conn, TOTALS, rows).await?;
        let rows = self
            .links
            .iter()
            .map(|((m, p, b), n)| vec![name(m).to_owned(), p.to_string(), flag(b), n.to_string()]);
        upsert(conn, LINKS, rows).await?;
        let rows = self.bot_reasons.iter().map(|((m, k, r), n)| {
            vec![
                name(m).to_owned(),
                k.as_str().into(),
                r.clone(),
                n.to_string(),
            ]
        });
        upsert(conn, BOT_REASONS, rows).await?;
        let rows = self.late.iter().map(|((m, p, k, b), n)| {
            vec![
                name(m).to_owned(),
                p.to_string(),
                k.as_str().into(),
                flag(b),
                n.to_string(),
            ]
        });
        upsert(conn, LATE, rows).await?;
        let new_letters = self.write_letters(conn).await?;
        let new_clickers = self.write_first_clicks(conn, batch).await?;
        self.write_uniques(conn, &new_letters, &new_clickers)
            .await?;
        let rows = self.breakdowns.iter().map(|((m, d, v, k, b), n)| {
            vec![
                name(m).to_owned(),
                (*d).to_owned(),
                v.clone(),
                k.as_str().into(),
                flag(b),
                n.to_string(),
            ]
        });
        upsert(conn, BREAKDOWNS, rows).await?;
        Ok(())
    }

    /// The rows of a time series (`stats_hourly`, `stats_minutes`): mailing,
    /// time, kind, bot flag, count.
    fn timed_rows<'a>(
        &'a self,
        series: &'a HashMap<(M, NaiveDateTime, EventKind, bool), u64>,
    ) -> impl Iterator<Item = Vec<String>> + 'a {
        series.iter().map(|((m, t, k, b), n)| {
            vec![
                self.mailings[*m as usize].clone(),
                stamp(t),
                k.as_str().into(),
                flag(b),
                n.to_string(),
            ]
        })
    }

    /// Every user agent of the batch's opens and clicks keeps its class in
    /// `user_agent_classes` (by SHA-256 of the agent), classified once per
    /// installation: the table the breakdowns' brute-force check joins.
    async fn write_agents(&self, conn: &mut MySqlConnection) -> Result<(), StoreError> {
        let known: BTreeSet<&String> = self.agents.keys().collect();
        let rows = known.into_iter().map(|agent| {
            let class = &self.agents[agent];
            vec![
                hex::encode(Sha256::digest(agent.as_bytes())),
                class.client.clone(),
                class.client_type.as_str().to_owned(),
                class.os.clone(),
                class.device.as_str().to_owned(),
            ]
        });
        upsert(conn, AGENTS, rows).await.map(|_| ())
    }

    /// Add the per-letter rows, one group (mailing, kind, position, bot
    /// flag) at a time, and return how many rows each group added: a
    /// letter's first event of a kind (first click on a position) is a
    /// new row, so the new rows are the group's new unique letters. (An
    /// upsert counts 1 per inserted row and 2 per updated one, and every
    /// update here changes `n`.)
    async fn write_letters(
        &self,
        conn: &mut MySqlConnection,
    ) -> Result<HashMap<(M, EventKind, u32, bool), u64>, StoreError> {
        let mut groups: HashMap<(M, EventKind, u32, bool), Vec<Vec<String>>> = HashMap::new();
        for ((m, l, k, p, b), (n, first)) in &self.letters {
            groups.entry((*m, *k, *p, *b)).or_default().push(vec![
                self.mailings[*m as usize].clone(),
                l.to_string(),
                k.as_str().into(),
                p.to_string(),
                flag(b),
                n.to_string(),
                stamp(first),
            ]);
        }
        let mut added = HashMap::new();
        for (group, rows) in groups {
            let written = rows.len() as u64;
            let affected = upsert(conn, LETTERS, rows.into_iter()).await?;
            added.insert(group, (2 * written).saturating_sub(affected));
        }
        Ok(added)
    }

    /// Letters that clicked any link, first click kept (`stats_first_seen`,
    /// position 0): the new rows per mailing and bot flag are the new
    /// unique clickers. The other unique counts come from the per-letter
    /// rows ([`Tally::write_letters`]).
    async fn write_first_clicks(
        &self,
        conn: &mut MySqlConnection,
        batch: &RolledBatch,
    ) -> Result<HashMap<(M, bool), u64>, StoreError> {
        let mut groups: HashMap<(M, bool), Vec<Vec<String>>> = HashMap::new();
        let rolled_by = batch.last_id.to_string();
        for ((m, b, l), first) in &self.first_clicks {
            groups.entry((*m, *b)).or_default().push(vec![
                self.mailings[*m as usize].clone(),
                flag(b),
                l.to_string(),
                stamp(first),
                rolled_by.clone(),
            ]);
        }
        let mut added = HashMap::new();
        for (group, rows) in groups {
            added.insert(group, upsert(conn, FIRST_CLICKS, rows.into_iter()).await?);
        }
        Ok(added)
    }

    /// Grow the unique counters by the letters the batch added.
    async fn write_uniques(
        &self,
        conn: &mut MySqlConnection,
        new_letters: &HashMap<(M, EventKind, u32, bool), u64>,
        new_clickers: &HashMap<(M, bool), u64>,
    ) -> Result<(), StoreError> {
        let name = |m: &M| self.mailings[*m as usize].clone();
        let kinds = new_letters
            .iter()
            .filter(|((_, k, _, _), n)| *k != EventKind::Click && **n > 0)
            .map(|((m, k, _, b), n)| vec![name(m), k.as_str().into(), flag(b), n.to_string()]);
        let clickers = new_clickers
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|((m, b), n)| vec![name(m), "click".into(), flag(b), n.to_string()]);
        upsert(conn, TOTALS_UNIQUE, kinds.chain(clickers)).await?;
        let positions = new_letters
            .iter()
            .filter(|((_, k, p, _), n)| *k == EventKind::Click && *p > 0 && **n > 0)
            .map(|((m, _, p, b), n)| vec![name(m), p.to_string(), flag(b), n.to_string()]);
        upsert(conn, LINKS_UNIQUE, positions).await?;
        Ok(())
    }
}

/// A bot flag as the tables' TINYINT reads it.
fn flag(bot: &bool) -> String {
    u8::from(*bot).to_string()
}

/// A time as the tables' DATETIME(3) reads it.
fn stamp(at: &NaiveDateTime) -> String {
    at.format("%Y-%m-%d %H:%M:%S%.3f").to_string()
}

fn keep_first<K: std::hash::Hash + Eq>(
    map: &mut HashMap<K, NaiveDateTime>,
    key: K,
    at: NaiveDateTime,
) {
    map.entry(key)
        .and_modify(|first| *first = (*first).min(at))
        .or_insert(at);
}

fn hour(at: NaiveDateTime) -> NaiveDateTime {
    at.date().and_hms_opt(at.hour(), 0, 0).unwrap_or(at)
}

fn minute(at: NaiveDateTime) -> NaiveDateTime {
    at.date()
        .and_hms_opt(at.hour(), at.minute(), 0)
        .unwrap_or(at)
}

/// One upsert: `sql` reads its rows from `JSON_TABLE(?, …) AS s`; `rows`
/// are sent in statements of [`ROWS_PER_STATEMENT`]. Returns the rows the
/// server says were affected.
async fn upsert(
    conn: &mut MySqlConnection,
    sql: &str,
    rows: impl Iterator<Item = Vec<String>>,
) -> Result<u64, StoreError> {
    let rows: Vec<Vec<String>> = rows.collect();
    let mut affected = 0;
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let document = serde_json::to_string(chunk).map_err(|err| {
            StoreError::Refused(format!(
                "statistics rows could not be written as JSON: {err}"
            ))
        })?;
        affected += sqlx::query(sql)
            .bind(document)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(affected)
}

// Each statement reads `s`, the rows of one JSON document, columns in the
// order the tally writes them. Column types are the tables' own.

const HOURLY: &str = "INSERT INTO stats_hourly (mailing_id, hour, kind, bot, n) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       h DATETIME PATH '$[1]', k VARCHAR(16) PATH '$[2]', b TINYINT PATH '$[3]', \
       c BIGINT UNSIGNED PATH '$[4]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c";

const MINUTES: &str = "INSERT INTO stats_minutes (mailing_id, minute, kind, bot, n) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       t DATETIME PATH '$[1]', k VARCHAR(16) PATH '$[2]', b TINYINT PATH '$[3]', \
       c BIGINT UNSIGNED PATH '$[4]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c";

const TOTALS: &str = "INSERT INTO stats_totals (mailing_id, kind, bot, total) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       k VARCHAR(16) PATH '$[1]', b TINYINT PATH '$[2]', c BIGINT UNSIGNED PATH '$[3]')) AS s \
     ON DUPLICATE KEY UPDATE total = total + s.c";

const LINKS: &str = "INSERT INTO stats_links (mailing_id, position, bot, clicks) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       p INT UNSIGNED PATH '$[1]', b TINYINT PATH '$[2]', c BIGINT UNSIGNED PATH '$[3]')) AS s \
     ON DUPLICATE KEY UPDATE clicks = clicks + s.c";

const BOT_REASONS: &str = "INSERT INTO stats_bot_reasons (mailing_id, kind, reason, n) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       k VARCHAR(16) PATH '$[1]', r VARCHAR(32) PATH '$[2]', c BIGINT UNSIGNED PATH '$[3]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c";

const LATE: &str = "INSERT INTO stats_late (mailing_id, position, kind, bot, n) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       p INT UNSIGNED PATH '$[1]', k VARCHAR(16) PATH '$[2]', b TINYINT PATH '$[3]', \
       c BIGINT UNSIGNED PATH '$[4]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c";

const LETTERS: &str =
    "INSERT INTO stats_letter_events (mailing_id, letter_id, kind, position, bot, n, first_at) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       l BIGINT UNSIGNED PATH '$[1]', k VARCHAR(16) PATH '$[2]', p INT UNSIGNED PATH '$[3]', \
       b TINYINT PATH '$[4]', c BIGINT UNSIGNED PATH '$[5]', f DATETIME(3) PATH '$[6]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c, first_at = LEAST(first_at, s.f)";

/// `INSERT IGNORE`: only a letter's first click sticks, and the rows
/// this batch really added are the new unique clickers (`rolled_by` names
/// the batch, for whoever reads the table by hand).
const FIRST_CLICKS: &str = "INSERT IGNORE INTO stats_first_seen \
       (mailing_id, kind, position, bot, letter_id, first_at, rolled_by) \
     SELECT s.m, 'click', 0, s.b, s.l, s.f, s.r FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
       m VARCHAR(64) PATH '$[0]', b TINYINT PATH '$[1]', l BIGINT UNSIGNED PATH '$[2]', \
       f DATETIME(3) PATH '$[3]', r BIGINT UNSIGNED PATH '$[4]')) AS s";

const TOTALS_UNIQUE: &str = "INSERT INTO stats_totals (mailing_id, kind, bot, uniq) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       k VARCHAR(16) PATH '$[1]', b TINYINT PATH '$[2]', c BIGINT UNSIGNED PATH '$[3]')) AS s \
     ON DUPLICATE KEY UPDATE uniq = uniq + s.c";

const LINKS_UNIQUE: &str = "INSERT INTO stats_links (mailing_id, position, bot, uniq) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       p INT UNSIGNED PATH '$[1]', b TINYINT PATH '$[2]', c BIGINT UNSIGNED PATH '$[3]')) AS s \
     ON DUPLICATE KEY UPDATE uniq = uniq + s.c";

const BREAKDOWNS: &str =
    "INSERT INTO stats_breakdowns (mailing_id, dimension, value, kind, bot, n) \
     SELECT * FROM JSON_TABLE(?, '$[*]' COLUMNS (m VARCHAR(64) PATH '$[0]', \
       d VARCHAR(16) PATH '$[1]', v VARCHAR(64) PATH '$[2]', k VARCHAR(16) PATH '$[3]', \
       b TINYINT PATH '$[4]', c BIGINT UNSIGNED PATH '$[5]')) AS s \
     ON DUPLICATE KEY UPDATE n = n + s.c";

const AGENTS: &str = "INSERT IGNORE INTO user_agent_classes \
       (ua_hash, client, client_type, os, device) \
     SELECT UNHEX(s.h), s.c, s.t, s.o, s.d FROM JSON_TABLE(?, '$[*]' COLUMNS ( \
       h CHAR(64) PATH '$[0]', c VARCHAR(64) PATH '$[1]', t VARCHAR(16) PATH '$[2]', \
       o VARCHAR(64) PATH '$[3]', d VARCHAR(16) PATH '$[4]')) AS s";

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::NaiveDate;

    fn at(h: u32, m: u32, s: u32) -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2026, 11, 27)
            .and_then(|d| d.and_hms_opt(h, m, s))
            .expect("a valid time")
    }

    fn event(
        kind: EventKind,
        letter: u64,
        position: Option<u32>,
        when: NaiveDateTime,
    ) -> BatchEvent {
        BatchEvent {
            mailing_id: "m1".into(),
            letter_id: Some(letter),
            kind,
            occurred_at: when,
            position,
            link_id: Some(7),
            bot: false,
            bot_reason: None,
            user_agent: Some("Mozilla/5.0 (Windows NT 10.0) Microsoft Outlook 16.0".into()),
            country: Some("DE".into()),
            email: Some("a@gmail.com".into()),
        }
    }

    #[test]
    fn a_letters_clicks_count_per_position_and_once_for_uniques() {
        let events = [
            event(EventKind::Click, 5, Some(2), at(10, 5, 9)),
            event(EventKind::Click, 5, Some(2), at(10, 1, 0)),
            event(EventKind::Click, 5, Some(3), at(11, 0, 0)),
        ];
        let tally = Tally::of(&events, at(0, 0, 0));
        assert_eq!(tally.totals[&(0, EventKind::Click, false)], 3);
        assert_eq!(tally.links[&(0, 2, false)], 2);
        assert_eq!(
            tally.letters[&(0, 5, EventKind::Click, 2, false)],
            (2, at(10, 1, 0))
        );
        // The letter's first click, and its first on each position.
        assert_eq!(tally.first_clicks[&(0, false, 5)], at(10, 1, 0));
        assert_eq!(tally.first_clicks.len(), 1);
        assert_eq!(
            tally.letters[&(0, 5, EventKind::Click, 3, false)],
            (1, at(11, 0, 0))
        );
        assert_eq!(tally.hourly[&(0, at(10, 0, 0), EventKind::Click, false)], 2);
        assert_eq!(
            tally.minutes[&(0, at(10, 5, 0), EventKind::Click, false)],
            1
        );
    }

    #[test]
    fn late_events_are_counted_apart_and_nowhere_else() {
        let mut late = event(EventKind::Click, 5, Some(2), at(10, 0, 0));
        late.link_id = Some(0);
        let tally = Tally::of(&[late], at(0, 0, 0));
        assert_eq!(tally.late[&(0, 2, EventKind::Click, false)], 1);
        assert!(tally.totals.is_empty() && tally.letters.is_empty());
        assert!(tally.breakdowns.is_empty() && tally.hourly.is_empty());
        // Its user agent is still classified and recorded.
        assert_eq!(tally.agents.len(), 1);
    }

    #[test]
    fn an_unsubscribe_by_a_bot_counts_with_the_humans_and_keeps_its_reason() {
        let mut unsubscribe = event(EventKind::Unsubscribe, 5, None, at(10, 0, 0));
        unsubscribe.bot = true;
        unsubscribe.bot_reason = Some("datacenter".into());
        let mut open = event(EventKind::Open, 5, None, at(10, 0, 0));
        open.bot = true;
        let tally = Tally::of(&[unsubscribe, open], at(0, 0, 0));
        assert_eq!(tally.totals[&(0, EventKind::Unsubscribe, false)], 1);
        assert_eq!(tally.totals[&(0, EventKind::Open, true)], 1);
        assert_eq!(
            tally.bot_reasons[&(0, EventKind::Unsubscribe, "datacenter".into())],
            1
        );
        assert_eq!(
            tally.bot_reasons[&(0, EventKind::Open, "unknown".into())],
            1
        );
        // Unsubscribes are not engagement: no breakdown, no minute.
        assert!(tally.breakdowns.keys().all(|k| k.3 == EventKind::Open));
        assert!(tally.minutes.keys().all(|k| k.2 == EventKind::Open));
    }

    #[test]
    fn shared_rows_and_old_minutes_are_left_out_where_they_do_not_belong() {
        let shared = event(EventKind::Image, 0, None, at(9, 0, 0));
        let old = event(EventKind::Open, 6, None, at(1, 0, 0));
        let tally = Tally::of(&[shared, old], at(2, 0, 0));
        assert_eq!(tally.totals.len(), 2);
        assert!(tally.letters.keys().all(|k| k.1 == 6));
        assert!(tally.minutes.is_empty(), "{:?}", tally.minutes);
    }

    #[test]
    fn breakdowns_name_the_client_provider_and_country_and_unknown_without_them() {
        let known = event(EventKind::Open, 5, None, at(10, 0, 0));
        let mut bare = event(EventKind::Click, 6, Some(1), at(10, 0, 0));
        bare.user_agent = None;
        bare.country = None;
        bare.email = None;
        let tally = Tally::of(&[known, bare], at(0, 0, 0));
        let value = |dimension: &'static str, kind| {
            let mut found: Vec<&str> = tally
                .breakdowns
                .keys()
                .filter(|k| k.1 == dimension && k.3 == kind)
                .map(|k| k.2.as_str())
                .collect();
            found.sort_unstable();
            found.join(",")
        };
        assert_eq!(value("client", EventKind::Open), "Outlook");
        assert_eq!(value("provider", EventKind::Open), "Gmail");
        assert_eq!(value("country", EventKind::Open), "DE");
        for dimension in crate::store::breakdowns::DIMENSIONS {
            assert_eq!(value(dimension, EventKind::Click), "unknown", "{dimension}");
        }
        assert_eq!(tally.breakdowns.len(), 12);
    }
}
