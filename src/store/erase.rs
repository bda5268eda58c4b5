//! Erasing an address (a data-subject request) from every table that can
//! hold it (docs/privacy.md, "The copies"). `linktrack erase` runs
//! [`crate::privacy::erase()`], which records the erasure, waits for the
//! running servers to take it in, clears Redis and then calls [`scrub`];
//! [`erase`] here is the database part alone.
//!
//! Rows are anonymised, not deleted: a `links` row keeps its token, URL and
//! letter id with the address blanked, so a letter already delivered still
//! redirects and still counts (anonymously) in the statistics; an `events`
//! row loses address, network and user agent; an outbox payload (an event
//! not yet delivered to a webhook or AMQP endpoint, or given up on) is
//! rendered again without them. A personalised URL that carried the
//! address (`?u={{ email }}`) loses it wherever it was copied. The
//! suppression and tracking opt-out entries outlive the readable address as
//! its keyed hash, so a later build still skips it (or sends it untracked).
//!
//! The letters of the address are found first (from `links`), and `links`
//! is blanked last: an erase that fails part-way finds them again when run
//! again. Every statement changes only what still names the person, so a
//! second run changes nothing and says so.
//!
//! There is no index on `email` (it would slow every insert of the hot
//! tables), so each partition is scanned once; one statement per partition
//! (named by its day range, which also works through a Spider head) keeps
//! each statement's locks short.

use super::address_list::{HashedEntry, SUPPRESSIONS, TRACKING_OPTOUTS};
use super::error::StoreError;
use super::partitions;
use crate::address::{self, AddressKey};
use chrono::NaiveDate;
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::collections::{BTreeMap, HashSet};

/// "1 row", "2 rows".
fn rows(n: u64) -> String {
    format!("{n} {}", if n == 1 { "row" } else { "rows" })
}

/// The letters sent to an address: mailing id and letter id.
pub type Letters = Vec<(String, u64)>;

/// What [`scrub`] changed, per table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EraseReport {
    /// Letters of the address found in `links`.
    pub letters: u64,
    pub links: u64,
    /// Of those, rows whose URL or tags held the address (personalised).
    pub link_urls: u64,
    pub events: u64,
    pub outbox: u64,
    pub outbox_dead: u64,
    pub deliveries: u64,
    pub link_templates: u64,
    pub stats_link_urls: u64,
    pub last_open_days: u64,
    /// Bounce and complaint decisions about the address (docs/bounces.md).
    pub bounces: u64,
    pub suppression: HashedEntry,
    pub tracking_optout: HashedEntry,
    /// The address is on the suppression list (as its keyed hash now).
    pub suppressed: bool,
}

impl std::fmt::Display for EraseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let letters = if self.letters == 1 {
            "letter"
        } else {
            "letters"
        };
        writeln!(
            f,
            "erase: links: {} anonymised ({} {letters}; {} with the address in a URL or tag cleaned)",
            rows(self.links),
            self.letters,
            self.link_urls
        )?;
        writeln!(
            f,
            "erase: events: {} anonymised (address, network, user agent)",
            rows(self.events)
        )?;
        writeln!(
            f,
            "erase: outbox: {} rewritten without the person (events not yet delivered)",
            rows(self.outbox)
        )?;
        writeln!(
            f,
            "erase: outbox_dead: {} rewritten without the person",
            rows(self.outbox_dead)
        )?;
        writeln!(
            f,
            "erase: deliveries: {} with the address in the MTA's reply cleaned",
            rows(self.deliveries)
        )?;
        writeln!(
            f,
            "erase: link_templates: {} with the address in the URL cleaned",
            rows(self.link_templates)
        )?;
        writeln!(
            f,
            "erase: stats_link_urls: {} with the address in the URL cleaned",
            rows(self.stats_link_urls)
        )?;
        writeln!(
            f,
            "erase: bounces: {} deleted (bounce and complaint decisions)",
            rows(self.bounces)
        )?;
        writeln!(
            f,
            "erase: last_open_days: {} deleted",
            rows(self.last_open_days)
        )?;
        writeln!(
            f,
            "erase: suppressions: {}",
            said(self.suppression, "never sent to")
        )?;
        write!(
            f,
            "erase: tracking_optouts: {}",
            said(self.tracking_optout, "sent untracked")
        )
    }
}

/// What became of a list entry, and what that means.
fn said(entry: HashedEntry, meaning: &str) -> String {
    match entry {
        HashedEntry::Hashed => format!(
            "entry kept as a keyed hash, no longer readable: the address is still {meaning}"
        ),
        HashedEntry::AlreadyHashed => {
            format!("entry kept as a keyed hash (already): the address is still {meaning}")
        }
        HashedEntry::NotListed => "the address is not on the list".into(),
    }
}

/// Record the erasure and scrub the database, without waiting for running
/// servers or touching Redis (see [`crate::privacy::erase()`]).
pub async fn erase(pool: &MySqlPool, email: &str) -> Result<EraseReport, StoreError> {
    let key = super::privacy::load_key(pool).await?;
    let email = address::normalize(email);
    super::privacy::record_erasure(pool, &key.digest(&email)).await?;
    let letters = letters_of(pool, &email).await?;
    scrub(pool, &key, &email, &letters).await
}

/// The letters whose rows name `email` (any spelling), from `links`.
pub async fn letters_of(pool: &MySqlPool, email: &str) -> Result<Letters, StoreError> {
    let spellings = address::spellings(email);
    let mut found = std::collections::BTreeSet::new();
    for (lower, upper) in day_ranges(pool, "links").await? {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT DISTINCT mailing_id, letter_id FROM links WHERE letter_id > 0 AND inserted >= ",
        );
        query
            .push_bind(lower)
            .push(" AND inserted < ")
            .push_bind(upper);
        query.push(" AND email COLLATE utf8mb4_bin IN ");
        super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
        let rows: Vec<(String, u64)> = query.build_query_as().fetch_all(pool).await?;
        found.extend(rows);
    }
    Ok(found.into_iter().collect())
}

/// Keep `letters` for the next erase that reaches the Redis live layer
/// (`erase_live_pending`: which letters, no address); kept already is
/// kept once.
pub async fn keep_for_live(pool: &MySqlPool, letters: &Letters) -> Result<(), StoreError> {
    for chunk in letters.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(
            "INSERT IGNORE INTO erase_live_pending (mailing_id, letter_id, recorded_at) ",
        );
        query.push_values(chunk, |mut row, (mailing_id, letter_id)| {
            row.push_bind(mailing_id)
                .push_bind(*letter_id)
                .push("UTC_TIMESTAMP()");
        });
        query.build().execute(pool).await?;
    }
    Ok(())
}

/// The letters earlier erases could not take out of the live layer.
pub async fn pending_for_live(pool: &MySqlPool) -> Result<Letters, StoreError> {
    Ok(sqlx::query_as(
        "SELECT mailing_id, letter_id FROM erase_live_pending ORDER BY mailing_id, letter_id",
    )
    .fetch_all(pool)
    .await?)
}

/// `letters` are out of the live layer now: no longer pending.
pub async fn taken_out_of_live(pool: &MySqlPool, letters: &Letters) -> Result<(), StoreError> {
    for (mailing_id, letter_id) in letters {
        sqlx::query("DELETE FROM erase_live_pending WHERE mailing_id = ? AND letter_id = ?")
            .bind(mailing_id)
            .bind(letter_id)
            .execute(pool)
            .await?;
    }
    Ok(())
}

/// Take `email` (normalised) out of every table, `letters` being its
/// letters ([`letters_of`]); `links` last.
pub async fn scrub(
    pool: &MySqlPool,
    key: &AddressKey,
    email: &str,
    letters: &Letters,
) -> Result<EraseReport, StoreError> {
    let spellings = address::spellings(email);
    let letter_ids: HashSet<u64> = letters.iter().map(|(_, id)| *id).collect();
    let events = scrub_events(pool, &spellings, letters).await?;
    let outbox = scrub_payloads(pool, "outbox", email, &letter_ids).await?;
    let outbox_dead = scrub_payloads(pool, "outbox_dead", email, &letter_ids).await?;
    let deliveries = scrub_deliveries(pool, email, letters).await?;
    let link_templates = scrub_urls(pool, "link_templates", "id", email).await?;
    let stats_link_urls =
        scrub_urls(pool, "stats_link_urls", "mailing_id, position", email).await?;
    let last_open_days = forget_last_opens(pool, &spellings).await?;
    let bounces = forget_bounces(pool, &spellings).await?;
    let mut suppression = HashedEntry::NotListed;
    let mut tracking_optout = HashedEntry::NotListed;
    for spelling in &spellings {
        suppression = strongest(
            suppression,
            SUPPRESSIONS.keep_as_hash(pool, key, spelling).await?,
        );
        let kept = TRACKING_OPTOUTS.keep_as_hash(pool, key, spelling).await?;
        tracking_optout = strongest(tracking_optout, kept);
    }
    let (links, link_urls) = scrub_links(pool, email, &spellings).await?;
    Ok(EraseReport {
        letters: letters.len() as u64,
        links,
        link_urls,
        events,
        outbox,
        outbox_dead,
        deliveries,
        link_templates,
        stats_link_urls,
        last_open_days,
        bounces,
        suppression,
        tracking_optout,
        suppressed: suppression != HashedEntry::NotListed,
    })
}

/// The outcome to report of two spellings' entries.
fn strongest(a: HashedEntry, b: HashedEntry) -> HashedEntry {
    match (a, b) {
        (HashedEntry::Hashed, _) | (_, HashedEntry::Hashed) => HashedEntry::Hashed,
        (HashedEntry::AlreadyHashed, _) | (_, HashedEntry::AlreadyHashed) => {
            HashedEntry::AlreadyHashed
        }
        _ => HashedEntry::NotListed,
    }
}

/// Letters per statement of the `events` scrub.
const LETTERS_PER_STATEMENT: usize = 500;

/// Address, network and user agent off every event naming the address or
/// belonging to one of its letters, partition by partition.
async fn scrub_events(
    pool: &MySqlPool,
    spellings: &[String],
    letters: &Letters,
) -> Result<u64, StoreError> {
    let mut by_mailing: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (mailing, letter) in letters {
        by_mailing.entry(mailing).or_default().push(*letter);
    }
    // Each statement: the address, or a slice of its letters.
    let mut slices: Vec<Vec<(&str, &[u64])>> = vec![Vec::new()];
    for (mailing, ids) in &by_mailing {
        for chunk in ids.chunks(LETTERS_PER_STATEMENT) {
            slices.push(vec![(*mailing, chunk)]);
        }
    }
    let mut changed = 0;
    for (lower, upper) in day_ranges(pool, "events").await? {
        for slice in &slices {
            let mut query = QueryBuilder::<MySql>::new(
                "UPDATE events SET email = NULL, ip = NULL, user_agent = NULL, country = NULL \
                 WHERE inserted >= ",
            );
            query
                .push_bind(lower)
                .push(" AND inserted < ")
                .push_bind(upper);
            query.push(
                " AND (email IS NOT NULL OR ip IS NOT NULL OR user_agent IS NOT NULL \
                 OR country IS NOT NULL) AND (",
            );
            if slice.is_empty() {
                query.push("email COLLATE utf8mb4_bin IN ");
                super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
            } else {
                for (n, (mailing, ids)) in slice.iter().enumerate() {
                    if n > 0 {
                        query.push(" OR ");
                    }
                    query
                        .push("(mailing_id = ")
                        .push_bind(*mailing)
                        .push(" AND letter_id IN ");
                    super::in_list::push_in_list(&mut query, ids.iter().copied());
                    query.push(")");
                }
            }
            query.push(")");
            changed += query.build().execute(pool).await?.rows_affected();
        }
    }
    Ok(changed)
}

/// Outbox payloads (`table`: `outbox` or `outbox_dead`) of the letters, or
/// naming the address, rendered again without the person.
async fn scrub_payloads(
    pool: &MySqlPool,
    table: &'static str,
    email: &str,
    letter_ids: &HashSet<u64>,
) -> Result<u64, StoreError> {
    let mut query = QueryBuilder::<MySql>::new(format!("SELECT id, payload FROM {table} WHERE "));
    push_piece_filter(&mut query, "payload", email);
    let mut candidates: Vec<(u64, String)> = query.build_query_as().fetch_all(pool).await?;
    let ids: Vec<u64> = letter_ids.iter().copied().collect();
    for chunk in ids.chunks(super::in_list::IN_LIST_CHUNK) {
        let mut query = QueryBuilder::<MySql>::new(format!(
            "SELECT id, payload FROM {table} WHERE letter_id IN "
        ));
        super::in_list::push_in_list(&mut query, chunk.iter().copied());
        candidates.extend(
            query
                .build_query_as::<(u64, String)>()
                .fetch_all(pool)
                .await?,
        );
    }
    candidates.sort_unstable();
    candidates.dedup();
    let mut changed = 0;
    for (id, payload) in candidates {
        let rewritten = match crate::payload::without_person(&payload, email, letter_ids) {
            Ok(rewritten) => rewritten,
            // Not one of ours (hand-edited?): its text is cleaned at least.
            Err(_) => address::scrub(&payload, email),
        };
        if let Some(rewritten) = rewritten {
            changed += sqlx::query(&format!("UPDATE {table} SET payload = ? WHERE id = ?"))
                .bind(rewritten)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected();
        }
    }
    Ok(changed)
}

/// MTA replies naming the address (a refusal often quotes it): of its
/// letters, and any other that does.
async fn scrub_deliveries(
    pool: &MySqlPool,
    email: &str,
    letters: &Letters,
) -> Result<u64, StoreError> {
    let mut query =
        QueryBuilder::<MySql>::new("SELECT mailing_id, letter_id, reply FROM deliveries WHERE ");
    push_piece_filter(&mut query, "reply", email);
    let mut candidates: Vec<(String, u64, String)> = query.build_query_as().fetch_all(pool).await?;
    for (mailing, letter) in letters {
        let reply: Option<String> = sqlx::query_scalar(
            "SELECT reply FROM deliveries WHERE mailing_id = ? AND letter_id = ?",
        )
        .bind(mailing)
        .bind(letter)
        .fetch_optional(pool)
        .await?;
        candidates.extend(reply.map(|reply| (mailing.clone(), *letter, reply)));
    }
    candidates.sort_unstable();
    candidates.dedup();
    let mut changed = 0;
    for (mailing, letter, reply) in candidates {
        if let Some(clean) = address::scrub(&reply, email) {
            changed += sqlx::query(
                "UPDATE deliveries SET reply = ? WHERE mailing_id = ? AND letter_id = ?",
            )
            .bind(clean)
            .bind(&mailing)
            .bind(letter)
            .execute(pool)
            .await?
            .rows_affected();
        }
    }
    Ok(changed)
}

/// URLs of a table of per-mailing links (`link_templates`,
/// `stats_link_urls`) that carry the address: a personalised URL copied
/// from one reader's letter. `key` names the row's key columns.
async fn scrub_urls(
    pool: &MySqlPool,
    table: &'static str,
    key: &'static str,
    email: &str,
) -> Result<u64, StoreError> {
    let mut query = QueryBuilder::<MySql>::new(format!(
        "SELECT CONCAT_WS(',', {key}), url FROM {table} WHERE "
    ));
    push_piece_filter(&mut query, "url", email);
    let candidates: Vec<(String, String)> = query.build_query_as().fetch_all(pool).await?;
    let mut changed = 0;
    for (row_key, url) in candidates {
        let Some(clean) = address::scrub(&url, email) else {
            continue;
        };
        changed += match table {
            // Its key's hash is the URL's: made again from the row's id,
            // unique, and free of the address.
            "link_templates" => sqlx::query(
                "UPDATE link_templates SET url = ?, \
                 url_hash = UNHEX(SHA2(CONCAT('erased link template ', id), 256)) WHERE id = ?",
            )
            .bind(clean)
            .bind(&row_key)
            .execute(pool)
            .await?
            .rows_affected(),
            _ => {
                let (mailing, position) = row_key.rsplit_once(',').unwrap_or((&row_key, "0"));
                sqlx::query(
                    "UPDATE stats_link_urls SET url = ? WHERE mailing_id = ? AND position = ?",
                )
                .bind(clean)
                .bind(mailing)
                .bind(position)
                .execute(pool)
                .await?
                .rows_affected()
            }
        };
    }
    Ok(changed)
}

/// `column LIKE '%piece%'` for the address's search piece (the text
/// columns' collation ignores case); nothing matches when it has none.
fn push_piece_filter(query: &mut QueryBuilder<'_, MySql>, column: &str, email: &str) {
    let piece = address::search_piece(email);
    if piece.is_empty() {
        query.push("FALSE");
    } else {
        query
            .push(format!("{column} LIKE "))
            .push_bind(format!("%{piece}%"));
    }
}

/// The address's last open day (`track: "last_open_day"`).
async fn forget_last_opens(pool: &MySqlPool, spellings: &[String]) -> Result<u64, StoreError> {
    let mut query = QueryBuilder::<MySql>::new("DELETE FROM last_open_days WHERE email IN ");
    super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
    Ok(query.build().execute(pool).await?.rows_affected())
}

/// The address's bounce and complaint decisions (its suppression, if
/// any, stays as a keyed hash like every other).
async fn forget_bounces(pool: &MySqlPool, spellings: &[String]) -> Result<u64, StoreError> {
    let mut query = QueryBuilder::<MySql>::new("DELETE FROM bounces WHERE email IN ");
    super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
    Ok(query.build().execute(pool).await?.rows_affected())
}

/// Blank the address in `links` (after cleaning the URL or tags of a row
/// that carried it), partition by partition. Returns (rows blanked, rows
/// whose URL or tags were cleaned).
async fn scrub_links(
    pool: &MySqlPool,
    email: &str,
    spellings: &[String],
) -> Result<(u64, u64), StoreError> {
    let (mut blanked, mut cleaned) = (0, 0);
    for (lower, upper) in day_ranges(pool, "links").await? {
        let mut query = QueryBuilder::<MySql>::new(
            "SELECT id, inserted, url, CAST(meta AS CHAR) FROM links WHERE inserted >= ",
        );
        query
            .push_bind(lower)
            .push(" AND inserted < ")
            .push_bind(upper);
        query.push(" AND email COLLATE utf8mb4_bin IN ");
        super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
        type Row = (u64, NaiveDate, String, Option<String>);
        let rows: Vec<Row> = query.build_query_as().fetch_all(pool).await?;
        for (id, inserted, url, meta) in rows {
            let clean_url = address::scrub(&url, email);
            let clean_meta = meta.as_deref().and_then(|m| address::scrub(m, email));
            if clean_url.is_none() && clean_meta.is_none() {
                continue;
            }
            let meta = clean_meta.or(meta);
            sqlx::query("UPDATE links SET url = ?, meta = ? WHERE id = ? AND inserted = ?")
                .bind(clean_url.unwrap_or(url))
                .bind(meta)
                .bind(id)
                .bind(inserted)
                .execute(pool)
                .await?;
            cleaned += 1;
        }
        let mut query =
            QueryBuilder::<MySql>::new("UPDATE links SET email = '' WHERE inserted >= ");
        query
            .push_bind(lower)
            .push(" AND inserted < ")
            .push_bind(upper);
        query.push(" AND email COLLATE utf8mb4_bin IN ");
        super::in_list::push_in_list(&mut query, spellings.iter().map(String::as_str));
        blanked += query.build().execute(pool).await?.rows_affected();
    }
    Ok((blanked, cleaned))
}

/// Each partition of `table` as a day range `[lower, upper)`: a predicate
/// on `inserted` prunes to exactly that partition, here and on a Spider
/// head (whose own partitions are the virtual shards, not the days).
async fn day_ranges(
    pool: &MySqlPool,
    table: &'static str,
) -> Result<Vec<(NaiveDate, NaiveDate)>, StoreError> {
    // MySQL's smallest DATE: the first partition holds everything before its bound.
    let mut lower = NaiveDate::from_ymd_opt(1000, 1, 1).unwrap_or_default();
    let mut ranges = Vec::new();
    for partition in partitions::list(pool, table).await? {
        ranges.push((lower, partition.upper));
        lower = partition.upper;
    }
    Ok(ranges)
}
