//! Erasing an address (a data-subject request): every row naming it in
//! `links` and `events`, in every partition.
//!
//! Rows are anonymised, not deleted: a `links` row keeps its token, URL and
//! letter id with the address blanked, so a letter already delivered still
//! redirects and still counts (anonymously) in the statistics; an `events`
//! row loses address, IP and user agent. The rollup tables never hold
//! addresses (only letter ids), and the Redis live layer stores letter ids
//! that are resolved to addresses through `links`, so blanking `links` makes
//! the address disappear from segments too.
//!
//! The suppression entry is kept on purpose: it is what stops future
//! mailings to the address, so erasing it would defeat the request.
//!
//! There is no index on `email` (it would slow every insert of the hot
//! tables), so each partition is scanned once; one statement per partition (named by
//! its day range, which also works through a Spider head) keeps each
//! statement's locks short.

use super::{partitions, StoreError};
use chrono::NaiveDate;
use sqlx::MySqlPool;

/// "1 row", "2 rows".
fn rows(n: u64) -> String {
    format!("{n} {}", if n == 1 { "row" } else { "rows" })
}

/// What [`erase`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EraseReport {
    pub links: u64,
    pub events: u64,
    /// The address is on the suppression list (and stays there).
    pub suppressed: bool,
}

impl std::fmt::Display for EraseReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "erase: links: {} anonymised", rows(self.links))?;
        writeln!(f, "erase: events: {} anonymised", rows(self.events))?;
        if self.suppressed {
            write!(
                f,
                "erase: suppressions: entry kept, so the address is still never sent to"
            )
        } else {
            write!(f, "erase: suppressions: the address is not on the list")
        }
    }
}

/// Apply `set` to every row of `table` naming `email`, one statement per
/// partition's day range (which also works through a Spider head); returns
/// the rows changed.
async fn anonymise_by_day(
    pool: &MySqlPool,
    table: &'static str,
    set: &'static str,
    email: &str,
) -> Result<u64, StoreError> {
    let statement = format!(
        "UPDATE {table} SET {set} \
         WHERE inserted >= ? AND inserted < ? AND email = ? COLLATE utf8mb4_bin"
    );
    let mut changed = 0;
    for (lower, upper) in day_ranges(pool, table).await? {
        changed += sqlx::query(&statement)
            .bind(lower)
            .bind(upper)
            .bind(email)
            .execute(pool)
            .await?
            .rows_affected();
    }
    Ok(changed)
}

/// Anonymise every `links` and `events` row naming `email` (compared byte
/// for byte: the text columns' accent-insensitive collation would also match
/// a different address such as `josé@` for `jose@`).
pub async fn erase(pool: &MySqlPool, email: &str) -> Result<EraseReport, StoreError> {
    let links = anonymise_by_day(pool, "links", "email = ''", email).await?;
    let events = anonymise_by_day(
        pool,
        "events",
        "email = NULL, ip = NULL, user_agent = NULL",
        email,
    )
    .await?;
    let listed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM suppressions WHERE email = ?")
        .bind(email)
        .fetch_one(pool)
        .await?;
    Ok(EraseReport {
        links,
        events,
        suppressed: listed > 0,
    })
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
