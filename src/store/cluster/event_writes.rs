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
//! node that fails (down) does not stop the others: their rows are stored,
//! its rows come back held ([`EventsWritten::held`]), and the replay keeps
//! only those in the journal for a later pass (rows stored meanwhile are
//! no-ops if written again), so every event is stored once, once the node
//! is back. So that a node's outage holds back only the events of its own
//! links, each hit's event id is chosen when it is journaled so that its
//! KEY partition lies on the node of its link's virtual shard
//! ([`Router::place_event`]).

use super::key_partition::key_partition;
use super::routing::{is_missing_table, NodesDown, Router};
use crate::event::EventRow;
use crate::store::error::StoreError;
use crate::store::event_sql::{execute_insert, insert_sql_into, MAX_ROWS_PER_INSERT};
use std::collections::{BTreeMap, HashSet};

/// What [`Router::insert_events_held`] did.
#[derive(Debug, Default)]
pub struct EventsWritten {
    /// The nodes' affected-row counts, summed (for logging only).
    pub added: u64,
    /// The `event_id`s of the rows not written: their node failed, now or
    /// earlier in the pass.
    pub held: HashSet<[u8; 16]>,
    /// The first failure of a node, when one failed now.
    pub failure: Option<StoreError>,
}

impl Router {
    /// Insert `rows` on the data nodes, each in its `events` data table,
    /// skipping any already stored (same `event_id` and day). Fails with
    /// [`StoreError::NoPartition`] when a day has no partition on a node,
    /// and with the first node's error when a node fails (the others'
    /// rows are stored). Returns the nodes' affected-row counts, summed,
    /// for logging only.
    pub async fn insert_events(&self, rows: &[EventRow]) -> Result<u64, StoreError> {
        let written = self
            .insert_events_held(rows, &mut NodesDown::default())
            .await?;
        match written.failure {
            Some(err) => Err(err),
            None => Ok(written.added),
        }
    }

    /// [`Router::insert_events`], each data node on its own: the rows of
    /// a node that fails, or that `down` names already, come back held
    /// and the node is added to `down`. A day without a partition, a
    /// moved data table (followed once, as lookups do) and rows the
    /// database rejects fail the call.
    pub async fn insert_events_held(
        &self,
        rows: &[EventRow],
        down: &mut NodesDown,
    ) -> Result<EventsWritten, StoreError> {
        match self.try_insert_events(rows, down).await {
            Err(err) if is_missing_table(&err) => {
                // A data table moved: read where it went, write there.
                self.refresh().await?;
                self.try_insert_events(rows, down).await
            }
            outcome => outcome,
        }
    }

    /// Split `rows` into those whose `events` data table lies on a node
    /// `down` does not name, and the others (held), keeping their order.
    pub fn hold_for_nodes_down(
        &self,
        rows: Vec<EventRow>,
        down: &NodesDown,
    ) -> (Vec<EventRow>, Vec<EventRow>) {
        if down.is_empty() {
            return (rows, Vec::new());
        }
        let placement = self.event_placement();
        let count = placement.tables.len() as u32;
        rows.into_iter().partition(|row| {
            let partition = key_partition(&row.event_id, count) as usize;
            placement
                .tables
                .get(partition)
                .is_none_or(|(node, _, _)| !down.contains(*node))
        })
    }

    async fn try_insert_events(
        &self,
        rows: &[EventRow],
        down: &mut NodesDown,
    ) -> Result<EventsWritten, StoreError> {
        let mut written = EventsWritten::default();
        if rows.is_empty() {
            return Ok(written);
        }
        let tables = self.event_placement().tables;
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
        for (partition, rows) in by_table {
            let (node, pool, table) = tables.get(partition).ok_or_else(|| {
                StoreError::Refused(format!("events partition {partition} has no data table"))
            })?;
            if down.contains(*node) {
                written.held.extend(rows.iter().map(|row| row.event_id));
                continue;
            }
            for (n, chunk) in rows.chunks(MAX_ROWS_PER_INSERT).enumerate() {
                let sql = insert_sql_into(table, chunk, &clock.take(chunk.len()));
                match execute_insert(pool, &sql, chunk).await {
                    Ok(done) => written.added += done,
                    Err(err) if node_failed(&err) => {
                        if down.insert(*node) {
                            tracing::warn!(%err, table, node = %self.node_name(*node), "a data node failed: its events wait in the journal");
                        }
                        // This table's later chunks would fail alike.
                        let unwritten = rows.iter().skip(n * MAX_ROWS_PER_INSERT);
                        written.held.extend(unwritten.map(|row| row.event_id));
                        written.failure.get_or_insert(err);
                        break;
                    }
                    Err(err) => return Err(err),
                }
            }
        }
        Ok(written)
    }
}

/// Whether an insert's error is its node's failure (the node's rows wait),
/// rather than one the whole batch must answer: a day without a
/// partition (made, then tried again), a moved data table (followed), or
/// rows the database rejects (set aside).
fn node_failed(err: &StoreError) -> bool {
    !matches!(err, StoreError::NoPartition { .. })
        && !is_missing_table(err)
        && !err.is_rejected_data()
}
