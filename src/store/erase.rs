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
//! tables), so each partition is scanned once; one statement per partition
//! keeps each statement's locks short.

use super::{partitions, StoreError};
use sqlx::MySqlPool;

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
        writeln!(f, "erase: links: {} rows anonymised", self.links)?;
        writeln!(f, "erase: events: {} rows anonymised", self.events)?;
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

/// Anonymise every `links` and `events` row naming `email` (compared byte
/// for byte: the text columns' accent-insensitive collation would also match
/// a different address such as `josé@` for `jose@`).
pub async fn erase(pool: &MySqlPool, email: &str) -> Result<EraseReport, StoreError> {
    let mut report = EraseReport::default();
    for partition in partitions::list(pool, "links").await? {
        let sql = format!(
            "UPDATE links PARTITION (`{}`) SET email = '' WHERE email = ? COLLATE utf8mb4_bin",
            partition.name
        );
        report.links += sqlx::query(&sql)
            .bind(email)
            .execute(pool)
            .await?
            .rows_affected();
    }
    for partition in partitions::list(pool, "events").await? {
        let sql = format!(
            "UPDATE events PARTITION (`{}`) SET email = NULL, ip = NULL, user_agent = NULL \
             WHERE email = ? COLLATE utf8mb4_bin",
            partition.name
        );
        report.events += sqlx::query(&sql)
            .bind(email)
            .execute(pool)
            .await?
            .rows_affected();
    }
    let listed: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM suppressions WHERE email = ?")
        .bind(email)
        .fetch_one(pool)
        .await?;
    report.suppressed = listed > 0;
    Ok(report)
}
