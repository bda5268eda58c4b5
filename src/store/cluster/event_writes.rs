//! The journal replay's event inserts on a Spider cluster, straight to the
//! data nodes: each event goes to the data table of the head partition
//! MariaDB's KEY (`event_id`) hash names (`key_partition`), the table the
//! head would have written it to, so the head's `events` reads it where it
//! expects it (the stats, the rollup, a lookup pruned by `event_id`) and a
//! batch replayed again, through the head or past it, meets the same
//! `UNIQUE (event_id, inserted)` and adds nothing.
//!
//! Ids come from the server's clock (`event_ids`), taken just before each
//! statement; the statements run one after another, so one writer's rows
//! become visible in id order, as the rollup's watermark wants. A data
//! table that fails (its node down) does not stop the others': their rows
//! are stored, the first error is returned, and the replay keeps the
//! segment and tries it whole again later (the stored rows are no-ops
//! then), so every event is stored once the node is back.

use super::key_partition::key_partition;
use super::routing::{is_missing_table, Router};
use crate::event::EventRow;
use crate::store::error::StoreError;
use crate::store::events::{execute_insert, insert_sql_into, MAX_ROWS_PER_INSERT};
use std::collections::BTreeMap;

impl Router {
    /// Insert `rows` on the data nodes, each in its `events` data table,
    /// skipping any already stored (same `event_id` and day). Fails with
    /// [`StoreError::NoPartition`] when a day has no partition on a node.
    /// Returns the nodes' affected-row counts, summed, for logging only.
    pub async fn insert_events(&self, rows: &[EventRow]) -> Result<u64, StoreError> {
        match self.try_insert_events(rows).await {
            Err(err) if is_missing_table(&err) => {
                // A data table moved: read where it went, write there.
                self.refresh().await?;
                self.try_insert_events(rows).await
            }
            outcome => outcome,
        }
    }

    async fn try_insert_events(&self, rows: &[EventRow]) -> Result<u64, StoreError> {
        if rows.is_empty() {
            return Ok(0);
        }
        let tables = self.event_tables();
        if tables.is_empty() {
            return Err(StoreError::Refused(
                "the head's topology names no `events` data table".into(),
            ));
        }
        // Made when the router started (or reserved now: the head is then
        // needed once, and the events wait in the journal until it answers).
        let clock = super::event_ids::event_clock(self.head()).await?;
        let count = tables.len() as u32;
        let mut by_table: BTreeMap<usize, Vec<EventRow>> = BTreeMap::new();
        for row in rows {
            let partition = key_partition(&row.event_id, count) as usize;
            by_table.entry(partition).or_default().push(row.clone());
        }
        let mut added = 0;
        let mut first_error = None;
        for (partition, rows) in by_table {
            let (pool, table) = tables.get(partition).ok_or_else(|| {
                StoreError::Refused(format!("events partition {partition} has no data table"))
            })?;
            for chunk in rows.chunks(MAX_ROWS_PER_INSERT) {
                let sql = insert_sql_into(table, chunk, &clock.take(chunk.len()));
                match execute_insert(pool, &sql, chunk).await {
                    Ok(done) => added += done,
                    Err(err) => {
                        tracing::debug!(%err, table, "an events data table refused a batch");
                        first_error.get_or_insert(err);
                        // This table's later chunks would fail alike.
                        break;
                    }
                }
            }
        }
        match first_error {
            Some(err) => Err(err),
            None => Ok(added),
        }
    }
}
