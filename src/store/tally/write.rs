//! The last stage of the rollup's counting: a counted batch ([`Tally`])
//! added to every statistics table with one upsert per table (a few for
//! the tables with a row per letter), each statement reading its rows from
//! one JSON document (`JSON_TABLE`).

use super::count::{Tally, M};
use crate::kind::EventKind;
use crate::store::error::StoreError;
use crate::store::rolled_batch::RolledBatch;
use chrono::NaiveDateTime;
use sha2::{Digest, Sha256};
use sqlx::MySqlConnection;
use std::collections::{BTreeSet, HashMap};

/// Rows per upsert statement: a JSON document of a few hundred kB.
const ROWS_PER_STATEMENT: usize = 5_000;

impl Tally {
    /// Add the counted batch to every statistics table; `batch` names the
    /// rows this batch adds to `stats_first_seen` (its `rolled_by`).
    /// One transaction (the caller's): the new rows counted here are
    /// exactly the new unique letters.
    pub(crate) async fn write(
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
        let document = serde_json::to_string(chunk).map_err(|source| StoreError::Json {
            what: "statistics rows",
            source,
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
