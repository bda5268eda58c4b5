//! The change logs servers follow, each row an address as a keyed hash:
//! `privacy_changes` (put on or taken off the tracking opt-out list, or
//! erased), which every server follows, and `suppression_changes` (put on
//! or taken off the suppression list), which the relay follows. The
//! address lists write them in the same transaction as their change;
//! `privacy`, the servers and the relay read and prune them.

use super::error::StoreError;
use crate::address::Fingerprint;
use chrono::{DateTime, NaiveDateTime, Utc};
use sqlx::{MySql, MySqlPool, QueryBuilder};
use std::time::Duration;

/// What a row of the change log says about an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Put on the tracking opt-out list.
    OptOut,
    /// Taken off it (`tracking-optouts remove`).
    OptIn,
    /// Erased (`linktrack erase`).
    Erase,
    /// Put on the suppression list (in `suppression_changes`).
    Suppress,
    /// Taken off it (`suppressions remove`).
    Unsuppress,
}

impl Change {
    fn as_str(self) -> &'static str {
        match self {
            Change::OptOut => "optout",
            Change::OptIn => "optin",
            Change::Erase => "erase",
            Change::Suppress => "suppress",
            Change::Unsuppress => "unsuppress",
        }
    }

    /// The log a change of this kind is written to.
    fn log(self) -> ChangeLog {
        match self {
            Change::OptOut | Change::OptIn | Change::Erase => ChangeLog::Privacy,
            Change::Suppress | Change::Unsuppress => ChangeLog::Suppressions,
        }
    }

    fn parse(text: &str) -> Option<Change> {
        [
            Change::OptOut,
            Change::OptIn,
            Change::Erase,
            Change::Suppress,
            Change::Unsuppress,
        ]
        .into_iter()
        .find(|c| c.as_str() == text)
    }
}

/// Which change log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeLog {
    /// `privacy_changes`: opt-outs, opt-ins, erasures (every server).
    Privacy,
    /// `suppression_changes`: the suppression list (the relay).
    Suppressions,
}

impl ChangeLog {
    /// Its table: a constant of this crate, written into the statements.
    fn table(self) -> &'static str {
        match self {
            ChangeLog::Privacy => "privacy_changes",
            ChangeLog::Suppressions => "suppression_changes",
        }
    }
}

/// One row of the change log, as servers read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeRow {
    pub id: u64,
    pub fingerprint: Fingerprint,
    pub change: Change,
    /// When it was logged (the database's clock).
    pub at: DateTime<Utc>,
    /// How long ago, by the database's clock at the read.
    pub age: Duration,
}

/// Rows of the change log read per statement.
pub const CHANGES_PER_READ: u32 = 10_000;

/// Log `change` for every digest, in the log of its kind (in the caller's
/// statement order; the servers apply them in id order).
pub(crate) async fn log_changes<'e, E>(
    executor: E,
    digests: &[[u8; 32]],
    change: Change,
) -> Result<(), StoreError>
where
    E: sqlx::Executor<'e, Database = MySql>,
{
    if digests.is_empty() {
        return Ok(());
    }
    let mut query = QueryBuilder::<MySql>::new(format!(
        "INSERT INTO {} (email_hmac, change_kind) ",
        change.log().table()
    ));
    query.push_values(digests, |mut b, digest| {
        b.push_bind(&digest[..]).push_bind(change.as_str());
    });
    query.build().execute(executor).await?;
    Ok(())
}

/// `log` past `after`, oldest first, at most `limit` rows.
pub async fn changes_since(
    pool: &MySqlPool,
    log: ChangeLog,
    after: u64,
    limit: u32,
) -> Result<Vec<ChangeRow>, StoreError> {
    type Row = (u64, Vec<u8>, String, NaiveDateTime, i64);
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT id, email_hmac, CAST(change_kind AS CHAR), at, \
         CAST(TIMESTAMPDIFF(MICROSECOND, at, NOW(3)) DIV 1000 AS SIGNED) \
         FROM {} WHERE id > ? ORDER BY id LIMIT ?",
        log.table()
    ))
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|(id, digest, kind, at, age_ms)| {
            let change = Change::parse(&kind).ok_or_else(|| StoreError::Corrupt {
                table: log.table(),
                detail: format!("unknown change {kind:?}"),
            })?;
            Ok(ChangeRow {
                id,
                fingerprint: crate::address::fingerprint_of(&digest),
                change,
                at: at.and_utc(),
                age: Duration::from_millis(age_ms.max(0) as u64),
            })
        })
        .collect()
}

/// The newest change's id in `log` (0 when there is none).
pub async fn last_change_id(pool: &MySqlPool, log: ChangeLog) -> Result<u64, StoreError> {
    let id: Option<u64> = sqlx::query_scalar(&format!("SELECT MAX(id) FROM {}", log.table()))
        .fetch_one(pool)
        .await?;
    Ok(id.unwrap_or(0))
}

/// Delete changes of `log` older than `age` (servers away longer load the
/// lists whole), at most `limit` rows; returns how many went.
pub async fn prune_changes(
    pool: &MySqlPool,
    log: ChangeLog,
    age: Duration,
    limit: u32,
) -> Result<u64, StoreError> {
    let done = sqlx::query(&format!(
        "DELETE FROM {} WHERE at < NOW(3) - INTERVAL ? SECOND ORDER BY id LIMIT ?",
        log.table()
    ))
    .bind(age.as_secs())
    .bind(limit)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
