//! Named sequences handed out in blocks (seeds 002 and 003).
//!
//! One round trip, `UPDATE sequences SET id = LAST_INSERT_ID(id + step)`,
//! reserves a whole block of IDs, which are then handed out from memory. The
//! value is read from that UPDATE's own OK packet, never with a separate
//! `SELECT LAST_INSERT_ID()`: the seed's comments found that when the row is
//! first created by `INSERT … ON DUPLICATE KEY UPDATE`, `LAST_INSERT_ID()` is
//! not set and returns whatever the connection produced before — another
//! sequence's value. Here a new name is created with `INSERT IGNORE` at 0 and
//! then advanced by the same UPDATE as every other, and an UPDATE that
//! matched no row is an error, not a silent 0.
//!
//! Several database servers: give each server the same `stride` (the number
//! of servers) and a different `offset` (1..=stride); blocks from different
//! servers then never overlap (seed 002: start values 1, 2, 3 and an
//! increment of the server count).

use super::error::StoreError;
use sqlx::MySqlPool;
use std::ops::Range;

/// Hands out IDs from blocks reserved in the `sequences` table.
#[derive(Debug)]
pub struct Sequence {
    name: String,
    block: u64,
    stride: u64,
    offset: u64,
    /// Block numbers not yet handed out: IDs are `offset + stride * n`.
    current: Range<u64>,
}

impl Sequence {
    /// A sequence reserving `block` IDs per round trip, on a single server.
    pub fn new(name: &str, block: u64) -> Self {
        Self::sharded(name, block, 1, 1)
    }

    /// A sequence on server `offset` (1-based) of `stride` servers.
    pub fn sharded(name: &str, block: u64, stride: u64, offset: u64) -> Self {
        Sequence {
            name: name.to_owned(),
            block: block.max(1),
            stride: stride.max(1),
            offset: offset.clamp(1, stride.max(1)),
            current: 0..0,
        }
    }

    /// The next ID, reserving a new block when the current one is spent.
    pub async fn next(&mut self, pool: &MySqlPool) -> Result<u64, StoreError> {
        if self.current.is_empty() {
            self.current = reserve(pool, &self.name, self.block).await?;
        }
        let n = self.current.start;
        self.current.start += 1;
        Ok(self.offset + self.stride * (n - 1))
    }
}

/// Reserve `count` values of `name`: returns the 1-based block numbers
/// `end - count + 1 ..= end` as a half-open range.
pub(crate) async fn reserve(
    pool: &MySqlPool,
    name: &str,
    count: u64,
) -> Result<Range<u64>, StoreError> {
    sqlx::query("INSERT IGNORE INTO sequences (name, id) VALUES (?, 0)")
        .bind(name)
        .execute(pool)
        .await?;
    let done = sqlx::query("UPDATE sequences SET id = LAST_INSERT_ID(id + ?) WHERE name = ?")
        .bind(count)
        .bind(name)
        .execute(pool)
        .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::Corrupt {
            table: "sequences",
            detail: format!(
                "advancing sequence {name:?} matched {} rows",
                done.rows_affected()
            ),
        });
    }
    let end = done.last_insert_id();
    Ok(end + 1 - count..end + 1)
}
